//! The queries over a run's metrics that answer expectation figures: counts and shares of
//! the completion order, what a class had left when another finished, service shares in
//! backlogged windows against the DRR ideal, latency statistics in milliseconds, and
//! service-level attainment and throughput over the measured window. They
//! read `RunMetrics`; `measure` computes it and knows nothing of them.

use crate::report::measure::metrics::{Completion, Credit, LatencyMetric, RunMetrics};
use crate::report::measure::slo::{LatencyBounds, ThroughputMetric};

/// Expectation queries over a run's measured metrics (implemented by [`RunMetrics`]).
pub trait Queries {
    /// The index of the class called `name`.
    fn class_index(&self, name: &str) -> Option<usize>;

    /// How many of the first `n` completions belong to each class (all of them if `n` exceeds
    /// the completions).
    fn prefix_counts(&self, n: u64) -> Vec<u64>;

    /// How many of class `class`'s completions are at positions `1..=position`.
    fn completed_through(&self, class: usize, position: u64) -> u64;

    /// Class `class`'s share of the first `n` completions (`None` when `n` is 0). The
    /// denominator is `min(n, completions)`.
    fn prefix_share(&self, class: usize, n: u64) -> Option<f64>;

    /// The position and time of class `class`'s `k`-th completion (1-based).
    fn kth_completion(&self, class: usize, k: u64) -> Option<&Completion>;

    /// Completions of `class` at the moment `when` completes its `k`-th request (inclusive).
    fn count_at(&self, class: usize, when: usize, k: u64) -> Option<u64>;

    /// Completions of `class` between `when`'s `from`-th and `to`-th completions.
    fn growth(&self, class: usize, when: usize, from: u64, to: u64) -> Option<i64>;

    /// Requests of `class` unfinished when `done` completes its `k`-th request (its last when
    /// `k` is `None`): those that had arrived by then, had not completed before it in the
    /// completion order, and had not been rejected or aborted by then. With every request
    /// released at once and none rejected this is Dynamo's "total − completions".
    fn remaining_when_done(&self, class: usize, done: usize, k: Option<u64>) -> Option<u64>;

    /// The class's share of the service dispatched in backlogged windows minus its ideal share
    /// there; `None` when no service happened in such a window.
    fn token_share_gap(&self, class: usize) -> Option<f64>;

    /// The class's share of service in backlogged windows, and its ideal share there.
    fn backlogged_shares(&self, class: usize) -> Option<(f64, f64)>;

    /// Class `class`'s mean DRR cost per request (`max(1, uncached)` tokens): over its
    /// dispatches counted in backlogged windows, else over all its dispatches, else 1.
    fn request_cost(&self, class: usize) -> f64;

    /// The request split DRR implies for one credit's token split: each class's ideal tokens
    /// over its mean request cost, as fractions of one completion (empty without tokens).
    fn ideal_request_split(&self, credit: &Credit) -> Vec<f64>;

    /// Per class, its ideal count among the first `n` completions: outside backlogged windows
    /// the count it got (it asked for no more), inside them each completion split as DRR
    /// splits requests of these sizes ([`Self::ideal_request_split`] of the dispatch in force).
    fn ideal_prefix_counts(&self, n: u64) -> Vec<f64>;

    /// Class `class`'s ideal share of the first `n` completions ([`Self::ideal_prefix_counts`]);
    /// `None` when `n` is 0 or nothing completed.
    fn ideal_prefix_share(&self, class: usize, n: u64) -> Option<f64>;

    /// The worst |share - ideal| over all classes, aggregated over every backlogged window.
    fn worst_token_share_gap(&self) -> Option<f64>;

    /// A latency statistic of `class` in milliseconds.
    fn latency_ms(&self, class: usize, metric: LatencyMetric) -> Option<f64>;

    /// The fraction of `class`'s requests that completed within `bounds`; `None` when the
    /// class had no requests.
    fn attainment(&self, class: usize, bounds: LatencyBounds) -> Option<f64>;

    /// The measured window in seconds (first arrival to last completion); `None` when it is
    /// empty.
    fn measured_window_s(&self) -> Option<f64>;

    /// Throughput of `class` (all classes for `None`) over the measured window; `None` when
    /// the window is empty.
    fn window_throughput(&self, class: Option<usize>, metric: ThroughputMetric) -> Option<f64>;
}

impl Queries for RunMetrics {
    fn class_index(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.name == name)
    }

    fn prefix_counts(&self, n: u64) -> Vec<u64> {
        (0..self.classes.len())
            .map(|c| self.completed_through(c, n))
            .collect()
    }

    fn completed_through(&self, class: usize, position: u64) -> u64 {
        self.positions
            .get(class)
            .map_or(0, |p| p.partition_point(|&i| i <= position) as u64)
    }

    fn prefix_share(&self, class: usize, n: u64) -> Option<f64> {
        let denominator = n.min(self.completions.len() as u64);
        if denominator == 0 {
            return None;
        }
        Some(self.completed_through(class, n) as f64 / denominator as f64)
    }

    fn kth_completion(&self, class: usize, k: u64) -> Option<&Completion> {
        let position = *self.positions.get(class)?.get(k.checked_sub(1)? as usize)?;
        self.completions.get((position - 1) as usize)
    }

    fn count_at(&self, class: usize, when: usize, k: u64) -> Option<u64> {
        let at = self.kth_completion(when, k)?;
        Some(self.completed_through(class, at.index))
    }

    fn growth(&self, class: usize, when: usize, from: u64, to: u64) -> Option<i64> {
        let start = self.count_at(class, when, from)?;
        let end = self.count_at(class, when, to)?;
        Some(end as i64 - start as i64)
    }

    fn remaining_when_done(&self, class: usize, done: usize, k: Option<u64>) -> Option<u64> {
        let k = k.unwrap_or(self.positions.get(done)?.len() as u64);
        let at = self.kth_completion(done, k)?;
        let arrived = self.arrivals.get(class)?.partition_point(|&t| t <= at.time) as u64;
        let unserved = self
            .ended_unserved
            .get(class)?
            .partition_point(|&t| t <= at.time) as u64;
        let completed = self.completed_through(class, at.index);
        Some(arrived.saturating_sub(unserved + completed))
    }

    fn token_share_gap(&self, class: usize) -> Option<f64> {
        let total: u64 = self
            .classes
            .iter()
            .map(|c| c.backlogged_service_tokens)
            .sum();
        if total == 0 {
            return None;
        }
        let c = self.classes.get(class)?;
        Some((c.backlogged_service_tokens as f64 - c.backlogged_ideal_tokens) / total as f64)
    }

    fn backlogged_shares(&self, class: usize) -> Option<(f64, f64)> {
        let total: u64 = self
            .classes
            .iter()
            .map(|c| c.backlogged_service_tokens)
            .sum();
        let c = self.classes.get(class)?;
        (total > 0).then(|| {
            (
                c.backlogged_service_tokens as f64 / total as f64,
                c.backlogged_ideal_tokens / total as f64,
            )
        })
    }

    fn request_cost(&self, class: usize) -> f64 {
        let (mut tokens, mut count) = (0u64, 0u64);
        for credit in self.windows.iter().flat_map(|w| &w.credits) {
            if credit.class == class {
                tokens += credit.tokens.max(1);
                count += 1;
            }
        }
        if count == 0 {
            let c = &self.classes[class];
            (tokens, count) = (c.service_tokens, c.immediate + c.queued);
        }
        match count {
            0 => 1.0,
            _ => (tokens as f64 / count as f64).max(1.0),
        }
    }

    fn ideal_request_split(&self, credit: &Credit) -> Vec<f64> {
        let requests: Vec<f64> = (credit.ideal_tokens.iter().enumerate())
            .map(|(c, &t)| t / self.request_cost(c))
            .collect();
        let total: f64 = requests.iter().sum();
        match total > 0.0 {
            true => requests.iter().map(|r| r / total).collect(),
            false => Vec::new(),
        }
    }

    fn ideal_prefix_counts(&self, n: u64) -> Vec<f64> {
        let mut ideal = vec![0.0; self.classes.len()];
        let done = &self.completions[..(n as usize).min(self.completions.len())];
        let mut next = 0;
        let measured = |ideal: &mut Vec<f64>, k: usize| {
            if let Some(c) = done[k].class {
                ideal[c] += 1.0;
            }
        };
        for w in &self.windows {
            while next < done.len() && done[next].time < w.start {
                measured(&mut ideal, next);
                next += 1;
            }
            let mut credit = 0;
            while next < done.len() && done[next].time <= w.end && !w.credits.is_empty() {
                while credit + 1 < w.credits.len() && w.credits[credit + 1].time <= done[next].time
                {
                    credit += 1;
                }
                let split = self.ideal_request_split(&w.credits[credit]);
                match split.is_empty() {
                    true => measured(&mut ideal, next),
                    false => ideal.iter_mut().zip(split).for_each(|(a, b)| *a += b),
                }
                next += 1;
            }
        }
        (next..done.len()).for_each(|k| measured(&mut ideal, k));
        ideal
    }

    fn ideal_prefix_share(&self, class: usize, n: u64) -> Option<f64> {
        let denominator = n.min(self.completions.len() as u64);
        (denominator > 0).then(|| self.ideal_prefix_counts(n)[class] / denominator as f64)
    }

    fn worst_token_share_gap(&self) -> Option<f64> {
        (0..self.classes.len())
            .filter_map(|c| self.token_share_gap(c))
            .map(f64::abs)
            .reduce(f64::max)
    }

    fn latency_ms(&self, class: usize, metric: LatencyMetric) -> Option<f64> {
        let ns = self
            .classes
            .get(class)?
            .latencies
            .of(metric.kind)
            .get(metric.stat)?;
        Some(ns as f64 / 1e6)
    }

    fn attainment(&self, class: usize, bounds: LatencyBounds) -> Option<f64> {
        let requests = self.classes.get(class)?.requests;
        if requests == 0 {
            return None;
        }
        let met = self.slo.completed.get(class)?;
        let met = met.iter().filter(|l| bounds.met_by(l)).count();
        Some(met as f64 / requests as f64)
    }

    fn measured_window_s(&self) -> Option<f64> {
        let (start, end) = self.slo.window?;
        (end > start).then(|| (end.as_ns() - start.as_ns()) as f64 / 1e9)
    }

    fn window_throughput(&self, class: Option<usize>, metric: ThroughputMetric) -> Option<f64> {
        let span_s = self.measured_window_s()?;
        let classes = match class {
            Some(c) => std::slice::from_ref(self.classes.get(c)?),
            None => &self.classes[..],
        };
        let count: u64 = classes
            .iter()
            .map(|c| match metric {
                ThroughputMetric::Rps => c.completed,
                ThroughputMetric::OutputTokensPerS => c.output_tokens_completed,
            })
            .sum();
        Some(count as f64 / span_s)
    }
}
