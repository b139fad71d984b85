//! Service-level figures of a run: attainment (the fraction of a class's requests that met
//! latency bounds) and throughput over the run's measured window.
//!
//! - **Attainment** of a class under bounds on TTFT and/or end-to-end latency: the requests of
//!   the class that completed within every given bound, over all the class's requests. A
//!   request that did not complete (rejected, aborted, still pending) does not meet it.
//! - **Measured window**: from the run's first arrival to its last completion. Throughput is
//!   completed requests (or output tokens of completed requests) per second of it, for one
//!   class or all; every class is divided by the same window, so class rates add up to the
//!   total.

use crate::sim::{RequestRecord, Status};
use crate::time::SimTime;

/// One completed request's latencies, in ns.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CompletedLatencies {
    pub ttft_ns: u64,
    pub e2e_ns: u64,
}

/// What the SLO figures need from the records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SloRecords {
    /// Per class, every completed request's latencies, in row order.
    pub completed: Vec<Vec<CompletedLatencies>>,
    /// The run's measured window: first arrival to last completion (`None` without a
    /// completion).
    pub window: Option<(SimTime, SimTime)>,
}

impl SloRecords {
    /// Collects the completed requests of `records` (classes already resolved) by class.
    pub fn collect(records: &[RequestRecord], class_count: usize) -> SloRecords {
        let mut completed = vec![Vec::new(); class_count];
        for r in records.iter().filter(|r| r.status == Status::Completed) {
            let (Some(class), Some(end)) = (r.class(), r.completion) else {
                continue;
            };
            let first = r.first_token.unwrap_or(end);
            if let Some(list) = completed.get_mut(class) {
                list.push(CompletedLatencies {
                    ttft_ns: first.as_ns().saturating_sub(r.arrival.as_ns()),
                    e2e_ns: end.as_ns().saturating_sub(r.arrival.as_ns()),
                });
            }
        }
        let first_arrival = records.iter().map(|r| r.arrival).min();
        let last_completion = records
            .iter()
            .filter(|r| r.status == Status::Completed)
            .filter_map(|r| r.completion)
            .max();
        SloRecords {
            completed,
            window: first_arrival.zip(last_completion),
        }
    }
}

/// Latency bounds for attainment, in ns; `None` is no bound.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LatencyBounds {
    pub ttft_ns: Option<u64>,
    pub e2e_ns: Option<u64>,
}

impl LatencyBounds {
    pub fn met_by(&self, l: &CompletedLatencies) -> bool {
        self.ttft_ns.is_none_or(|b| l.ttft_ns <= b) && self.e2e_ns.is_none_or(|b| l.e2e_ns <= b)
    }
}

/// Which throughput.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ThroughputMetric {
    /// Completed requests per second.
    Rps,
    /// Output tokens of completed requests per second.
    OutputTokensPerS,
}

impl ThroughputMetric {
    pub const ALL: [ThroughputMetric; 2] =
        [ThroughputMetric::Rps, ThroughputMetric::OutputTokensPerS];

    /// The name as written: `throughput_rps` or `output_tokens_per_s`.
    pub fn name(self) -> &'static str {
        match self {
            ThroughputMetric::Rps => "throughput_rps",
            ThroughputMetric::OutputTokensPerS => "output_tokens_per_s",
        }
    }

    pub fn parse(name: &str) -> Option<ThroughputMetric> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::measure::metrics::RunMetrics;
    use crate::report::test_support::{done, result_of};
    use crate::report::verdict::queries::Queries;
    use crate::scheduling::scheduler::DispatchPath;

    /// Premium: TTFT 10, 20, 30, 40 ms (e2e = TTFT + 5) and one rejected; regular: one.
    fn run() -> RunMetrics {
        let mut records: Vec<RequestRecord> = (0..4)
            .map(|i| {
                let mut r = done(i, 0, DispatchPath::Queued, [0, 0, 10 * (i + 1) + 5]);
                r.first_token = Some(crate::report::test_support::ms(10 * (i + 1)));
                r.output_tokens = 10;
                r
            })
            .collect();
        let mut rejected = done(4, 0, DispatchPath::Queued, [0, 0, 1]);
        rejected.status = crate::report::test_support::rejected();
        records.push(rejected);
        records.push(done(5, 1, DispatchPath::Immediate, [100, 100, 1000]));
        RunMetrics::compute(&result_of(&["premium", "regular"], records), &[1, 1])
    }

    fn bounds(ttft_ms: Option<u64>, e2e_ms: Option<u64>) -> LatencyBounds {
        LatencyBounds {
            ttft_ns: ttft_ms.map(|v| v * 1_000_000),
            e2e_ns: e2e_ms.map(|v| v * 1_000_000),
        }
    }

    #[test]
    fn attainment_counts_requests_meeting_every_bound() {
        let m = run();
        assert_eq!(m.attainment(0, bounds(Some(20), None)), Some(0.4));
        assert_eq!(
            m.attainment(0, bounds(Some(40), None)),
            Some(0.8),
            "rejected fails"
        );
        assert_eq!(m.attainment(0, bounds(Some(40), Some(25))), Some(0.4));
        assert_eq!(m.attainment(0, bounds(None, Some(45))), Some(0.8));
        assert_eq!(m.attainment(1, bounds(Some(899), None)), Some(0.0));
        assert_eq!(m.attainment(1, bounds(Some(900), None)), Some(1.0));
    }

    #[test]
    fn attainment_of_a_class_without_requests_is_unmeasured() {
        let records = vec![done(0, 0, DispatchPath::Immediate, [0, 0, 10])];
        let m = RunMetrics::compute(&result_of(&["a", "b"], records), &[1, 1]);
        assert_eq!(m.attainment(1, bounds(Some(1), None)), None);
    }

    #[test]
    fn throughput_over_first_arrival_to_last_completion() {
        let m = run();
        assert_eq!(m.measured_window_s(), Some(1.0));
        let rps = |c| m.window_throughput(c, ThroughputMetric::Rps);
        let tokens = |c| m.window_throughput(c, ThroughputMetric::OutputTokensPerS);
        assert_eq!(
            (rps(Some(0)), rps(Some(1)), rps(None)),
            (Some(4.0), Some(1.0), Some(5.0))
        );
        assert_eq!((tokens(Some(0)), tokens(None)), (Some(40.0), Some(41.0)));
        let empty = RunMetrics::compute(&result_of(&["a"], vec![]), &[1]);
        assert_eq!(empty.window_throughput(None, ThroughputMetric::Rps), None);
    }

    #[test]
    fn metric_names_round_trip() {
        for m in ThroughputMetric::ALL {
            assert_eq!(ThroughputMetric::parse(m.name()), Some(m));
        }
        assert_eq!(ThroughputMetric::parse("rps"), None);
    }
}
