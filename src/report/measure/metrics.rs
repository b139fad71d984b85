//! Run metrics: pure functions from a run's records (and the class quanta) to the figures that
//! the result files, the terminal table, the plots and the expectations report.
//!
//! Definitions (each is a documented choice, used consistently everywhere):
//! - **Completion order**: completed requests sorted by (completion time, row); positions are
//!   1-based (`index` 1 is the first completion). Rejected and aborted requests never enter it.
//! - **Ideal DRR share** of a class: its quantum over the sum of the quanta of the classes that
//!   had at least one request in the run (a class without requests competes for nothing).
//! - **Token service**: a request's uncached prefill tokens, `input - reused` (saturating),
//!   attributed to its class at its **dispatch** time: dispatch is the DRR decision, and it is
//!   also the instant a queued request stops backlogging its class.
//! - **Backlog**: a request that took the queued path backlogs its class from its arrival to its
//!   dispatch (to the end of the run if it was never dispatched). A *backlogged window* is a
//!   maximal span in which two or more classes are backlogged at once. The dispatches at an
//!   instant `t` count in the window open just before `t`, each only for a class backlogged
//!   just before `t`. Their tokens' ideal is split among the classes backlogged then in
//!   proportion to their quanta, but a class whose backlog the instant empties asked for no
//!   more than it got: its ideal is capped there, the rest going to the classes still waiting
//!   (weighted water-filling), so a class served all it had queued is never called starved.
//! - **Percentiles**: nearest rank: the `p`-th percentile of `n` sorted values is the value at
//!   rank `ceil(p * n / 100)` (1-based, at least 1). Means round to the nearest nanosecond.
//! - **Jain's fairness index** of quantum-normalised service: over the classes with a non-zero
//!   ideal in the backlogged windows, `x_c = service_c / ideal_c`, and
//!   `J = (sum x)^2 / (n * sum x^2)`; 1 is perfectly weighted-fair.

use super::fleet::{FleetMetrics, fleet_metrics};
use super::latency::{LatencyStats, Stat};
use super::over_time::{ArrivalCurve, latency_curves};
use super::phases::{PhaseCurve, phase_curves};
use super::pools::{PoolMetrics, pool_metrics};
use super::sessions::{SessionCounts, session_figures};
use super::slo::SloRecords;
use super::stability::Stability;
use crate::scheduling::scheduler::DispatchPath;
use crate::sim::{EndStatus, FaultMark, RequestRecord, SimResult, Status};
use crate::time::SimTime;

/// One completion, in completion order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// 1-based position in the completion order.
    pub index: u64,
    pub time: SimTime,
    /// The request's trace row (or generated index).
    pub row: u64,
    /// The resolved class, if the request resolved one.
    pub class: Option<usize>,
}

/// Which latency of a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LatencyKind {
    /// Dispatch minus arrival, for every dispatched request.
    QueueWait,
    /// First token minus arrival.
    Ttft,
    /// Completion minus arrival, for completed requests.
    E2e,
    /// Inter-token latency: (completion - first token) / (output - 1), for completed requests
    /// with more than one output token.
    Itl,
    /// TTFT of a session's first turn, for completed first turns.
    FirstTurnTtft,
    /// TTFT of a session's later turns, for completed later turns.
    FollowupTtft,
    /// A completed session's duration: its first turn's arrival to its last turn's
    /// completion, think times included (the session's class is its first turn's).
    Session,
    /// The KV transfer from prefill to decode worker, reservation to landing (the wait for
    /// the decode worker's pass end included), for completed requests of a disaggregated
    /// run.
    KvTransfer,
}

impl LatencyKind {
    /// Every kind, in report order.
    pub const ALL: [LatencyKind; 4] = [
        LatencyKind::Ttft,
        LatencyKind::E2e,
        LatencyKind::QueueWait,
        LatencyKind::Itl,
    ];

    /// The kinds measured on sessions ([`super::sessions`]).
    pub const SESSION: [LatencyKind; 3] = [
        LatencyKind::FirstTurnTtft,
        LatencyKind::FollowupTtft,
        LatencyKind::Session,
    ];

    /// The prefix used in metric names (`ttft`, `e2e`, `queue_wait`, `itl`, `first_turn_ttft`,
    /// `followup_ttft`, `session`).
    pub fn name(self) -> &'static str {
        match self {
            LatencyKind::QueueWait => "queue_wait",
            LatencyKind::Ttft => "ttft",
            LatencyKind::E2e => "e2e",
            LatencyKind::Itl => "itl",
            LatencyKind::FirstTurnTtft => "first_turn_ttft",
            LatencyKind::FollowupTtft => "followup_ttft",
            LatencyKind::Session => "session",
            LatencyKind::KvTransfer => "kv_transfer",
        }
    }

    /// Every kind an expectation may name: the request kinds, the session kinds, then the
    /// transfer.
    fn known() -> impl Iterator<Item = LatencyKind> {
        let kinds = LatencyKind::ALL.into_iter().chain(LatencyKind::SESSION);
        kinds.chain([LatencyKind::KvTransfer])
    }
}

/// A latency metric name such as `ttft_ms_p99`: `<kind>_ms_<stat>`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LatencyMetric {
    pub kind: LatencyKind,
    pub stat: Stat,
}

impl LatencyMetric {
    /// Parses `<kind>_ms_<stat>` with kind in `ttft|e2e|queue_wait|itl|first_turn_ttft|
    /// followup_ttft|session|kv_transfer` and stat in `mean|p50|p90|p99|max`; `None` for any other name.
    pub fn parse(name: &str) -> Option<LatencyMetric> {
        let (kind_name, stat_name) = name.split_once("_ms_")?;
        let kind = LatencyKind::known().find(|k| k.name() == kind_name)?;
        let stat = Stat::ALL.into_iter().find(|s| s.name() == stat_name)?;
        Some(LatencyMetric { kind, stat })
    }

    /// The metric's name, `<kind>_ms_<stat>`: what [`LatencyMetric::parse`] reads back.
    pub fn name(self) -> String {
        format!("{}_ms_{}", self.kind.name(), self.stat.name())
    }

    /// Every known metric name, for error messages.
    pub fn all_names() -> Vec<String> {
        LatencyKind::known()
            .flat_map(|k| {
                Stat::ALL
                    .iter()
                    .map(move |s| format!("{}_ms_{}", k.name(), s.name()))
            })
            .collect()
    }
}

/// Per-class latency distributions.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassLatencies {
    pub queue_wait: LatencyStats,
    pub ttft: LatencyStats,
    pub e2e: LatencyStats,
    pub itl: LatencyStats,
    pub first_turn_ttft: LatencyStats,
    pub followup_ttft: LatencyStats,
    pub session: LatencyStats,
    pub kv_transfer: LatencyStats,
}

impl ClassLatencies {
    /// The distribution of one kind.
    pub fn of(&self, kind: LatencyKind) -> &LatencyStats {
        match kind {
            LatencyKind::QueueWait => &self.queue_wait,
            LatencyKind::Ttft => &self.ttft,
            LatencyKind::E2e => &self.e2e,
            LatencyKind::Itl => &self.itl,
            LatencyKind::FirstTurnTtft => &self.first_turn_ttft,
            LatencyKind::FollowupTtft => &self.followup_ttft,
            LatencyKind::Session => &self.session,
            LatencyKind::KvTransfer => &self.kv_transfer,
        }
    }
}

/// Everything measured about one class.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassMetrics {
    pub name: String,
    pub quantum_tokens: u64,
    /// Quantum share among the classes that had requests (0 for a class without requests).
    pub ideal_share: f64,
    pub requests: u64,
    pub immediate: u64,
    pub queued: u64,
    pub completed: u64,
    pub rejected: u64,
    /// Lost with their worker and not migrated.
    pub aborted: u64,
    /// Given up by their clients (`cancel` faults).
    pub cancelled: u64,
    /// Migrations off lost workers, summed over the class's requests.
    pub migrations: u64,
    /// Still in the system when the run stopped (only after a limit).
    pub pending: u64,
    pub output_tokens_completed: u64,
    pub latencies: ClassLatencies,
    /// Uncached prefill tokens of every dispatched request of this class.
    pub service_tokens: u64,
    /// The part of `service_tokens` dispatched while this class and another were backlogged.
    pub backlogged_service_tokens: u64,
    /// This class's ideal DRR entitlement of the backlogged service, in tokens.
    pub backlogged_ideal_tokens: f64,
    /// Every TTFT sample in ns, ascending (for CDF plots).
    pub ttft_samples_ns: Vec<u64>,
    /// Every end-to-end latency sample in ns, ascending (for CDF plots).
    pub e2e_samples_ns: Vec<u64>,
    /// Sessions and the prefix cache ([`super::sessions`]).
    pub sessions: SessionCounts,
}

/// A maximal span in which two or more classes were backlogged, and the service in it.
#[derive(Clone, Debug, PartialEq)]
pub struct BacklogWindow {
    pub start: SimTime,
    pub end: SimTime,
    /// Uncached tokens dispatched per class (indexed by class) while backlogged in the window.
    pub service_tokens: Vec<u64>,
    /// Each class's ideal DRR entitlement of that service, in tokens.
    pub ideal_tokens: Vec<f64>,
    /// The dispatches counted in the window, in time order (their sums are the two above).
    pub credits: Vec<Credit>,
}

/// One dispatch counted in a backlogged window, with its ideal split among the classes
/// backlogged at that moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Credit {
    pub time: SimTime,
    pub class: usize,
    pub tokens: u64,
    /// Per class, its ideal DRR part of `tokens`.
    pub ideal_tokens: Vec<f64>,
}

impl BacklogWindow {
    /// The largest |share - ideal share| over the classes in this window (0 without service).
    pub fn worst_gap(&self) -> f64 {
        let total: u64 = self.service_tokens.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let total = total as f64;
        self.service_tokens
            .iter()
            .zip(&self.ideal_tokens)
            .map(|(&s, &i)| ((s as f64 - i) / total).abs())
            .fold(0.0, f64::max)
    }
}

/// One dispatch's service: the token-service curve is the running sum of these.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Dispatch {
    pub time: SimTime,
    pub row: u64,
    pub class: usize,
    pub uncached_tokens: u64,
}

/// Everything the result files, the table, the plots and the expectations need about a run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunMetrics {
    pub classes: Vec<ClassMetrics>,
    /// Completions in completion order.
    pub completions: Vec<Completion>,
    pub windows: Vec<BacklogWindow>,
    /// The prefix length that `classes.csv` and the table report shares for: the smallest
    /// completed count among the classes that had requests (Dynamo's test uses 320 = one
    /// class's total). Change it with [`RunMetrics::with_prefix_n`].
    pub prefix_n: u64,
    pub requests: u64,
    pub completed: u64,
    pub rejected: u64,
    pub aborted: u64,
    pub cancelled: u64,
    /// Migrations off lost workers over all requests.
    pub migrations: u64,
    pub pending: u64,
    pub makespan: SimTime,
    pub events: u64,
    /// Preemptions over all worker ranks.
    pub preemptions: u64,
    pub stop_reason: String,
    /// Per class, the positions (1-based) of its completions in completion order, ascending.
    pub positions: Vec<Vec<u64>>,
    /// Per class, the arrival times of its requests, ascending.
    pub arrivals: Vec<Vec<SimTime>>,
    /// Per class, when its rejected or aborted requests ended, ascending.
    pub ended_unserved: Vec<Vec<SimTime>>,
    /// What attainment and window throughput need ([`super::slo`]).
    pub slo: SloRecords,
    /// Whether the run kept up with its offered load ([`super::stability`]).
    pub stability: Stability,
    /// Per worker pool, in worker-id order ([`super::pools`]).
    pub pools: Vec<PoolMetrics>,
    /// Worker faults as they happened, for the completions-by-time chart.
    pub fault_marks: Vec<FaultMark>,
    /// Per class, where its disaggregated requests' time went, by arrival time (empty in an
    /// aggregated run; [`super::phases`]).
    pub phases: Vec<PhaseCurve>,
    /// Each class's mean TTFT and end-to-end latency by arrival time ([`latency_curves`]).
    pub latency_by_arrival: Vec<ArrivalCurve<2>>,
    /// What the fleet cost and how it changed ([`super::fleet`]).
    pub fleet: FleetMetrics,
}

/// Records from which a run's metrics are measured on two cores (below it, the work is too
/// little for a hand-off: a thousand requests' metrics take about 0.2 ms).
const PARALLEL_METRICS_RECORDS: usize = 1 << 16;

/// `(a(), b())`, on two cores if `parallel`.
fn both<A: Send, B: Send>(
    parallel: bool,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B + Send,
) -> (A, B) {
    match parallel {
        true => rayon::join(a, b),
        false => (a(), b()),
    }
}

impl RunMetrics {
    /// Measures `result`. `quanta_tokens[c]` is the DRR quantum of class `c` (as in
    /// `result.class_names`); a missing entry counts as quantum 1.
    pub fn compute(result: &SimResult, quanta_tokens: &[u64]) -> RunMetrics {
        Self::compute_with(result, quanta_tokens, SimTime::ZERO)
    }

    /// Like [`compute`](Self::compute), leaving requests that arrived before `warmup_end`
    /// out of the latency and share figures (completion order, dispatches, backlog windows).
    /// They still count in the request counts, so conservation holds over every request.
    pub fn compute_with(
        result: &SimResult,
        quanta_tokens: &[u64],
        warmup_end: SimTime,
    ) -> RunMetrics {
        // A large run measures its stability and orders its completions on one core while
        // the other does the rest, unless its records must be copied to resolve their
        // classes: stability comes first then, while nothing else is held (its passing lists
        // are the largest of any step, about 70 MB for a million requests).
        let parallel = result.records.len() >= PARALLEL_METRICS_RECORDS
            && result.records.iter().all(|r| r.class().is_some());
        Self::measure(result, quanta_tokens, warmup_end, parallel)
    }

    /// [`Self::compute_with`], on two cores if `parallel`.
    fn measure(
        result: &SimResult,
        quanta_tokens: &[u64],
        warmup_end: SimTime,
        parallel: bool,
    ) -> RunMetrics {
        let stability_first = (!parallel).then(|| Stability::measure(&result.records, 0));
        let class_count = result.class_names.len();
        let resolved = with_resolved_classes(&result.records, &result.class_names);
        let all = resolved.as_ref();
        let measured: Vec<RequestRecord>;
        let records = match warmup_end == SimTime::ZERO {
            true => all,
            false => {
                measured = all
                    .iter()
                    .filter(|r| r.arrival >= warmup_end)
                    .cloned()
                    .collect();
                &measured
            }
        };
        let ((stability, completions), mut metrics) = both(
            parallel,
            || {
                let stability =
                    stability_first.unwrap_or_else(|| Stability::measure(&result.records, 0));
                (stability, completion_order(records, class_count))
            },
            || Self::class_figures(result, all, records, quanta_tokens),
        );
        let mut positions = vec![Vec::new(); class_count];
        for c in &completions {
            if let Some(class) = c.class {
                positions[class].push(c.index);
            }
        }
        metrics.stability = stability;
        metrics.completions = completions;
        metrics.positions = positions;
        metrics
    }

    /// Every figure of [`Self::compute_with`] but the stability and the completion order
    /// (left empty): `all` is every record with its class resolved, `records` those measured.
    fn class_figures(
        result: &SimResult,
        all: &[RequestRecord],
        records: &[RequestRecord],
        quanta_tokens: &[u64],
    ) -> RunMetrics {
        let class_count = result.class_names.len();
        let mut classes = class_shells(result, quanta_tokens);
        count_requests(all, &mut classes);
        set_ideal_shares(&mut classes);
        set_latencies(records, &mut classes);
        set_session_figures(records, &mut classes);
        let windows = set_token_service(records, &mut classes, result.end_time);
        let (arrivals, ended_unserved) = arrivals_and_unserved_ends(records, class_count);
        let prefix_n = classes
            .iter()
            .filter(|c| c.requests > 0)
            .map(|c| c.completed)
            .min()
            .unwrap_or(0);
        RunMetrics {
            requests: result.records.len() as u64,
            completed: count_status(result, EndStatus::Completed),
            rejected: count_status(result, EndStatus::Rejected),
            aborted: count_status(result, EndStatus::Aborted),
            cancelled: count_status(result, EndStatus::Cancelled),
            migrations: result
                .records
                .iter()
                .map(|r| u64::from(r.migrations()))
                .sum(),
            pending: count_status(result, EndStatus::Pending),
            makespan: result.end_time,
            events: result.events,
            preemptions: result.preemptions,
            stop_reason: result.stop_reason.to_string(),
            fault_marks: result.fault_marks.clone(),
            prefix_n,
            classes,
            completions: Vec::new(),
            windows,
            positions: Vec::new(),
            arrivals,
            ended_unserved,
            slo: SloRecords::collect(records, class_count),
            stability: Stability::default(),
            pools: pool_metrics(result, all, records, class_count),
            phases: phase_curves(records, class_count),
            latency_by_arrival: latency_curves(records, class_count),
            fleet: fleet_metrics(result),
        }
    }

    /// The same metrics with stability judged against `capacity_seqs`, the workers' total
    /// `max_num_seqs` (what the run pipeline knows and the records do not).
    pub fn with_capacity_seqs(mut self, capacity_seqs: u64) -> RunMetrics {
        self.stability = self.stability.with_capacity(capacity_seqs);
        self
    }

    /// The same metrics reporting prefix shares for the first `n` completions.
    pub fn with_prefix_n(mut self, n: u64) -> RunMetrics {
        self.prefix_n = n;
        self
    }

    /// The worst |share - ideal| within any single backlogged window (short windows are noisy:
    /// one dispatch is a whole share).
    pub fn worst_window_gap(&self) -> Option<f64> {
        self.windows
            .iter()
            .map(BacklogWindow::worst_gap)
            .reduce(f64::max)
    }

    /// Jain's fairness index of quantum-normalised backlogged service (see the module docs);
    /// `None` without backlogged service.
    pub fn jain_index(&self) -> Option<f64> {
        let xs: Vec<f64> = self
            .classes
            .iter()
            .filter(|c| c.backlogged_ideal_tokens > 0.0)
            .map(|c| c.backlogged_service_tokens as f64 / c.backlogged_ideal_tokens)
            .collect();
        let sum: f64 = xs.iter().sum();
        let sum_sq: f64 = xs.iter().map(|x| x * x).sum();
        (sum_sq > 0.0).then(|| sum * sum / (xs.len() as f64 * sum_sq))
    }

    /// Whether two or more classes were ever backlogged together while service was dispatched
    /// (some backlogged window carried service). Only then do the ideal DRR split and the
    /// first-N shares compare scheduling with its configured weights: a class that is never
    /// backlogged gets what it asks for, whatever its quantum.
    pub fn classes_backlogged_together(&self) -> bool {
        self.windows
            .iter()
            .any(|w| w.service_tokens.iter().any(|&t| t > 0))
    }

    /// Completed requests per second of simulated time (0 for an empty run).
    pub fn throughput_rps(&self) -> f64 {
        per_second(self.completed, self.makespan)
    }

    /// Output tokens of completed requests per second of simulated time.
    pub fn output_tokens_per_s(&self) -> f64 {
        let tokens = self.classes.iter().map(|c| c.output_tokens_completed).sum();
        per_second(tokens, self.makespan)
    }
}

fn per_second(count: u64, span: SimTime) -> f64 {
    if span == SimTime::ZERO {
        return 0.0;
    }
    count as f64 / span.as_secs_f64()
}

fn count_status(result: &SimResult, status: EndStatus) -> u64 {
    result.count(status) as u64
}

fn class_shells(result: &SimResult, quanta_tokens: &[u64]) -> Vec<ClassMetrics> {
    result
        .class_names
        .iter()
        .enumerate()
        .map(|(i, name)| ClassMetrics {
            name: name.clone(),
            quantum_tokens: quanta_tokens.get(i).copied().unwrap_or(1).max(1),
            ..ClassMetrics::default()
        })
        .collect()
}

/// The class a request counts in: the one the router resolved, else the class it named, else
/// the only class there is. Without the router (round-robin mode) nothing is resolved, yet a
/// request of a run with one class (the synthetic `default`) or naming its class plainly
/// belongs to it.
pub fn resolved_class(record: &RequestRecord, class_names: &[String]) -> Option<usize> {
    record.class().or_else(|| match &record.policy_class {
        Some(name) => class_names.iter().position(|c| c.as_str() == name.as_str()),
        None => (class_names.len() == 1).then_some(0),
    })
}

/// `records` with every request's class resolved (see [`resolved_class`]); borrowed when the
/// router resolved them all, as it does in KV-router mode.
fn with_resolved_classes<'a>(
    records: &'a [RequestRecord],
    class_names: &[String],
) -> std::borrow::Cow<'a, [RequestRecord]> {
    if records.iter().all(|r| r.class().is_some()) {
        return std::borrow::Cow::Borrowed(records);
    }
    let resolve = |r: &RequestRecord| RequestRecord {
        class_index: RequestRecord::class_slot(resolved_class(r, class_names)),
        ..r.clone()
    };
    std::borrow::Cow::Owned(records.iter().map(resolve).collect())
}

/// Sets each class's session counts and its first-turn, follow-up and session latencies
/// ([`session_figures`] of the measured `records`).
fn set_session_figures(records: &[RequestRecord], classes: &mut [ClassMetrics]) {
    let figures = session_figures(records, classes.len());
    for (class, f) in classes.iter_mut().zip(figures) {
        class.sessions = f.counts;
        class.latencies.first_turn_ttft = f.first_turn_ttft;
        class.latencies.followup_ttft = f.followup_ttft;
        class.latencies.session = f.session;
    }
}

fn count_requests(records: &[RequestRecord], classes: &mut [ClassMetrics]) {
    for r in records {
        let Some(c) = r.class().and_then(|i| classes.get_mut(i)) else {
            continue;
        };
        c.requests += 1;
        c.migrations += u64::from(r.migrations());
        match r.path {
            Some(DispatchPath::Immediate) => c.immediate += 1,
            Some(DispatchPath::Queued) => c.queued += 1,
            None => {}
        }
        match r.status {
            Status::Completed => {
                c.completed += 1;
                c.output_tokens_completed += u64::from(r.output_tokens);
            }
            Status::Rejected(_) => c.rejected += 1,
            Status::Aborted(_) => c.aborted += 1,
            Status::Cancelled(_) => c.cancelled += 1,
            Status::Pending => c.pending += 1,
        }
    }
}

fn set_ideal_shares(classes: &mut [ClassMetrics]) {
    let active_quanta = quanta_sum(
        classes
            .iter()
            .filter(|c| c.requests > 0)
            .map(|c| c.quantum_tokens),
    );
    for c in classes.iter_mut().filter(|c| c.requests > 0) {
        c.ideal_share = c.quantum_tokens as f64 / active_quanta as f64;
    }
}

/// The sum of `quanta` in 128-bit integers. A quantum may be any `u64` from 1 (as Dynamo's
/// `usize`), so two near 2^63 overflow a `u64` sum; a `u128` holds 2^64 of them. Each
/// quantum's share of it is then finite and at most 1, and the shares add up to 1 to within
/// a few rounding errors: rounding is monotone, so `q as f64 <= sum as f64` whenever
/// `q <= sum`.
pub fn quanta_sum(quanta: impl IntoIterator<Item = u64>) -> u128 {
    quanta.into_iter().map(u128::from).sum()
}

fn since(later: Option<SimTime>, earlier: SimTime) -> Option<u64> {
    later.map(|t| t.saturating_since(earlier).as_ns())
}

fn set_latencies(records: &[RequestRecord], classes: &mut [ClassMetrics]) {
    // Each list reserved at its final length at most: grown by doubling, a million
    // requests' lists left as much again behind in freed copies.
    let mut values: Vec<[Vec<u64>; 5]> = classes
        .iter()
        .map(|c| {
            let (requests, completed) = (c.requests as usize, c.completed as usize);
            [requests, completed, completed, completed, 0].map(Vec::with_capacity)
        })
        .collect();
    for r in records {
        let Some(v) = r.class().and_then(|i| values.get_mut(i)) else {
            continue;
        };
        v[0].extend(since(r.dispatched, r.arrival));
        if !matches!(r.status, Status::Completed) {
            continue;
        }
        v[1].extend(since(r.first_token, r.arrival));
        v[2].extend(since(r.completion, r.arrival));
        if let (Some(first), Some(done)) = (r.first_token, r.completion)
            && r.output_tokens > 1
        {
            v[3].push(done.saturating_since(first).as_ns() / u64::from(r.output_tokens - 1));
        }
        if let Some(h) = r.handoff()
            && let Some(start) = h.transfer_start
        {
            v[4].extend(since(h.transfer_end, start));
        }
    }
    for (class, [queue_wait, mut ttft, mut e2e, itl, kv_transfer]) in classes.iter_mut().zip(values)
    {
        ttft.sort_unstable();
        e2e.sort_unstable();
        class.latencies = ClassLatencies {
            queue_wait: LatencyStats::from_values(queue_wait),
            ttft: LatencyStats::from_sorted(&ttft),
            e2e: LatencyStats::from_sorted(&e2e),
            itl: LatencyStats::from_values(itl),
            kv_transfer: LatencyStats::from_values(kv_transfer),
            ..ClassLatencies::default()
        };
        class.ttft_samples_ns = ttft;
        class.e2e_samples_ns = e2e;
    }
}

/// Completed requests in (completion time, row) order, numbered from 1. A class index not
/// below `class_count` counts as no class.
pub fn completion_order(records: &[RequestRecord], class_count: usize) -> Vec<Completion> {
    // Built in place and numbered after the sort: one list of a million entries, not two.
    let mut done: Vec<Completion> = records
        .iter()
        .filter(|r| matches!(r.status, Status::Completed))
        .filter_map(|r| {
            Some(Completion {
                index: 0,
                time: r.completion?,
                row: r.row,
                class: r.class().filter(|&c| c < class_count),
            })
        })
        .collect();
    // Entries equal in all three are alike in every field, so an unstable sort orders them
    // as the stable one did.
    done.sort_unstable_by_key(|c| (c.time, c.row, c.class));
    for (completion, index) in done.iter_mut().zip(1u64..) {
        completion.index = index;
    }
    done
}

/// Each class's token service, in all and while backlogged, and the backlogged windows. The
/// dispatch list they come from (32 bytes a request) is dropped here, before the completion
/// order is built, so that the two never stand in memory together.
fn set_token_service(
    records: &[RequestRecord],
    classes: &mut [ClassMetrics],
    end: SimTime,
) -> Vec<BacklogWindow> {
    let dispatches = dispatch_order(records, classes.len());
    for d in &dispatches {
        classes[d.class].service_tokens += d.uncached_tokens;
    }
    let quanta: Vec<u64> = classes.iter().map(|c| c.quantum_tokens).collect();
    let windows = backlog_windows(records, &dispatches, &quanta, end);
    for w in &windows {
        for (c, class) in classes.iter_mut().enumerate() {
            class.backlogged_service_tokens += w.service_tokens[c];
            class.backlogged_ideal_tokens += w.ideal_tokens[c];
        }
    }
    windows
}

fn dispatch_order(records: &[RequestRecord], class_count: usize) -> Vec<Dispatch> {
    let mut dispatches: Vec<Dispatch> = Vec::with_capacity(records.len());
    dispatches.extend(records.iter().filter_map(|r| {
        let class = r.class().filter(|&c| c < class_count)?;
        Some(Dispatch {
            time: r.dispatched?,
            row: r.row,
            class,
            uncached_tokens: u64::from(r.input_tokens.saturating_sub(r.reused_input_tokens)),
        })
    }));
    // Rows are unique, so the order is total and an in-place sort gives the stable one's.
    dispatches.sort_unstable_by_key(|d| (d.time, d.row));
    dispatches
}

fn arrivals_and_unserved_ends(
    records: &[RequestRecord],
    class_count: usize,
) -> (Vec<Vec<SimTime>>, Vec<Vec<SimTime>>) {
    let mut arrivals = vec![Vec::new(); class_count];
    let mut unserved = vec![Vec::new(); class_count];
    for r in records {
        let Some(c) = r.class().filter(|&c| c < class_count) else {
            continue;
        };
        arrivals[c].push(r.arrival);
        if matches!(
            r.status,
            Status::Rejected(_) | Status::Aborted(_) | Status::Cancelled(_)
        ) {
            unserved[c].push(r.completion.unwrap_or(r.arrival));
        }
    }
    for v in arrivals.iter_mut().chain(unserved.iter_mut()) {
        v.sort_unstable();
    }
    (arrivals, unserved)
}

/// A change in backlog or a dispatch, swept in time order. At one instant dispatches come
/// first (they see the backlog they end), then backlog ends, then backlog starts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SweepKind {
    Dispatch,
    BacklogEnd,
    BacklogStart,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct SweepEvent {
    time: SimTime,
    kind: SweepKind,
    row: u64,
    class: usize,
    tokens: u64,
}

fn sweep_events(
    records: &[RequestRecord],
    dispatches: &[Dispatch],
    class_count: usize,
    end: SimTime,
) -> Vec<SweepEvent> {
    let queued = records
        .iter()
        .filter(|r| r.path == Some(DispatchPath::Queued))
        .count();
    let mut events: Vec<SweepEvent> = Vec::with_capacity(dispatches.len() + 2 * queued);
    events.extend(dispatches.iter().map(|d| SweepEvent {
        time: d.time,
        kind: SweepKind::Dispatch,
        row: d.row,
        class: d.class,
        tokens: d.uncached_tokens,
    }));
    for r in records {
        let Some(class) = r.class().filter(|&c| c < class_count) else {
            continue;
        };
        if r.path != Some(DispatchPath::Queued) {
            continue;
        }
        let until = r.dispatched.unwrap_or(end.max(r.arrival));
        if until <= r.arrival {
            continue;
        }
        let edge = |time, kind| SweepEvent {
            time,
            kind,
            row: r.row,
            class,
            tokens: 0,
        };
        events.push(edge(r.arrival, SweepKind::BacklogStart));
        events.push(edge(until, SweepKind::BacklogEnd));
    }
    events.sort_unstable();
    events
}

/// The backlogged windows of a run and the service in them (see the module docs). Events are
/// taken an instant at a time: the dispatches of an instant see the backlog just before it,
/// and their ideal is capped by what each class asked for then ([`instant_ideal`]).
pub fn backlog_windows(
    records: &[RequestRecord],
    dispatches: &[Dispatch],
    quanta_tokens: &[u64],
    end: SimTime,
) -> Vec<BacklogWindow> {
    let class_count = quanta_tokens.len();
    let events = sweep_events(records, dispatches, class_count, end);
    let mut backlog = vec![0u64; class_count];
    let mut windows = Vec::new();
    let mut open: Option<BacklogWindow> = None;
    for instant in events.chunk_by(|a, b| a.time == b.time) {
        let time = instant[0].time;
        let before = backlog.clone();
        for e in instant.iter().filter(|e| e.kind == SweepKind::BacklogEnd) {
            debug_assert!(backlog[e.class] > 0, "a backlog ends after it starts");
            backlog[e.class] = backlog[e.class].saturating_sub(1);
        }
        if let Some(w) = open.as_mut() {
            let counted: Vec<&SweepEvent> = instant
                .iter()
                .filter(|e| e.kind == SweepKind::Dispatch && before[e.class] > 0)
                .collect();
            credit_instant(w, &counted, &before, &backlog, quanta_tokens);
        }
        if backlogged_classes(&backlog) < 2
            && let Some(mut w) = open.take()
        {
            w.end = time;
            windows.push(w);
        }
        for e in instant.iter().filter(|e| e.kind == SweepKind::BacklogStart) {
            backlog[e.class] += 1;
        }
        if backlogged_classes(&backlog) >= 2 && open.is_none() {
            open = Some(BacklogWindow {
                start: time,
                end: time,
                service_tokens: vec![0; class_count],
                ideal_tokens: vec![0.0; class_count],
                credits: Vec::new(),
            });
        }
    }
    debug_assert!(open.is_none(), "every backlog ends by the end of the run");
    windows
}

fn backlogged_classes(backlog: &[u64]) -> usize {
    backlog.iter().filter(|&&b| b > 0).count()
}

/// Credits the dispatches `counted` of one instant to window `w`. `before` is the backlog
/// just before the instant, `after` once the instant's dispatches have ended theirs. Each
/// dispatch carries its part (by tokens) of the instant's ideal split.
fn credit_instant(
    w: &mut BacklogWindow,
    counted: &[&SweepEvent],
    before: &[u64],
    after: &[u64],
    quanta: &[u64],
) {
    let mut served = vec![0u64; before.len()];
    for d in counted {
        served[d.class] += d.tokens;
    }
    let total: u64 = served.iter().sum();
    if counted.is_empty() {
        return;
    }
    let ideal = instant_ideal(&served, before, after, quanta);
    for d in counted {
        w.service_tokens[d.class] += d.tokens;
        let part = match total {
            0 => 0.0,
            _ => d.tokens as f64 / total as f64,
        };
        let ideal_tokens: Vec<f64> = ideal.iter().map(|i| i * part).collect();
        for (sum, i) in w.ideal_tokens.iter_mut().zip(&ideal_tokens) {
            *sum += i;
        }
        w.credits.push(Credit {
            time: d.time,
            class: d.class,
            tokens: d.tokens,
            ideal_tokens,
        });
    }
}

/// The ideal DRR split of the tokens `served` at one instant among the classes backlogged
/// just before it (`before`), in proportion to their quanta, but never more to a class than
/// it asked for: a class whose backlog the instant emptied (`after` is 0) asked for exactly
/// what it was served, and the rest of its quantum share goes to the classes still waiting
/// (weighted water-filling). A class that got all it asked for thus shows no gap.
fn instant_ideal(served: &[u64], before: &[u64], after: &[u64], quanta: &[u64]) -> Vec<f64> {
    let classes = served.len();
    let mut ideal = vec![0.0; classes];
    let mut open: Vec<usize> = (0..classes).filter(|&c| before[c] > 0).collect();
    let mut left: f64 = served.iter().sum::<u64>() as f64;
    loop {
        let weight = quanta_sum(open.iter().map(|&c| quanta[c])) as f64;
        let fair = |c: usize| left * quanta[c] as f64 / weight;
        let capped: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&c| after[c] == 0 && (served[c] as f64) < fair(c))
            .collect();
        if capped.is_empty() {
            for &c in &open {
                ideal[c] = fair(c);
            }
            return ideal;
        }
        for &c in &capped {
            ideal[c] = served[c] as f64;
            left -= served[c] as f64;
        }
        open.retain(|c| !capped.contains(c));
        if open.is_empty() {
            return ideal;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::measure::latency::nearest_rank;
    use crate::report::test_support::{done, ms, result_of};
    use crate::report::verdict::queries::Queries;

    const P: usize = 0;
    const R: usize = 1;

    /// Premium (quantum 3) and regular (quantum 1): two immediate, four queued, one rejected.
    fn small_run() -> SimResult {
        let mut rejected = done(5, P, DispatchPath::Queued, [3, 3, 3]);
        rejected.path = None;
        rejected.dispatched = None;
        rejected.first_token = None;
        rejected.status = crate::report::test_support::rejected();
        let mut long_output = done(6, R, DispatchPath::Queued, [2, 30, 40]);
        long_output.first_token = Some(ms(32));
        long_output.output_tokens = 5;
        result_of(
            &["premium", "regular"],
            vec![
                done(0, P, DispatchPath::Immediate, [0, 0, 10]),
                done(1, R, DispatchPath::Immediate, [0, 0, 10]),
                done(2, P, DispatchPath::Queued, [1, 10, 20]),
                done(3, R, DispatchPath::Queued, [1, 20, 30]),
                done(4, P, DispatchPath::Queued, [2, 10, 20]),
                rejected,
                long_output,
            ],
        )
    }

    fn small_metrics() -> RunMetrics {
        RunMetrics::compute(&small_run(), &[3, 1])
    }

    #[test]
    fn a_large_runs_metrics_measured_on_two_cores_equal_those_measured_on_one() {
        let small = small_run();
        let copies = (PARALLEL_METRICS_RECORDS / small.records.len() + 1) as u64;
        let records = (0..copies)
            .flat_map(|k| {
                small.records.iter().map(move |r| RequestRecord {
                    row: k * 100 + r.row,
                    ..r.clone()
                })
            })
            .collect();
        let result = result_of(&["premium", "regular"], records);
        // A warm-up, so that the measured records are not all of them.
        let two_cores = RunMetrics::measure(&result, &[3, 1], ms(1), true);
        assert_eq!(
            two_cores,
            RunMetrics::measure(&result, &[3, 1], ms(1), false)
        );
        assert!(two_cores.completions.len() > PARALLEL_METRICS_RECORDS / 2);
        assert_ne!(two_cores.stability, Stability::default(), "measured");
    }

    #[test]
    fn completion_order_breaks_time_ties_by_row() {
        let m = small_metrics();
        let order: Vec<(u64, u64)> = m.completions.iter().map(|c| (c.index, c.row)).collect();
        assert_eq!(order, [(1, 0), (2, 1), (3, 2), (4, 4), (5, 3), (6, 6)]);
        assert_eq!(m.completions[3].time, ms(20));
    }

    #[test]
    fn prefix_counts_and_shares() {
        let m = small_metrics();
        assert_eq!(m.prefix_counts(3), [2, 1]);
        assert_eq!(m.prefix_counts(100), [3, 3]);
        assert_eq!(m.prefix_share(P, 3), Some(2.0 / 3.0));
        assert_eq!(m.prefix_share(P, 0), None);
        assert_eq!(
            m.prefix_n, 3,
            "the smallest completed count of the active classes"
        );
    }

    #[test]
    fn counts_at_and_growth_between_completions() {
        let m = small_metrics();
        assert_eq!(
            m.count_at(R, P, 2),
            Some(1),
            "premium's 2nd is completion 3"
        );
        assert_eq!(m.count_at(R, P, 1), Some(0));
        assert_eq!(m.growth(R, P, 1, 3), Some(1));
        assert_eq!(m.count_at(P, R, 4), None, "regular completed only 3");
    }

    #[test]
    fn remaining_counts_arrived_unfinished_requests() {
        let m = small_metrics();
        // Premium's last is completion 4 at 20 ms: regular rows 1, 3, 6 arrived, 1 completed.
        assert_eq!(m.remaining_when_done(R, P, None), Some(2));
        // Regular's 1st at 10 ms: premium rows 0, 2, 4 and the rejected 5 arrived; 5 ended
        // unserved and row 0 completed before it.
        assert_eq!(m.remaining_when_done(P, R, Some(1)), Some(2));
        assert_eq!(m.remaining_when_done(P, R, Some(9)), None);
    }

    #[test]
    fn counts_per_class() {
        let m = small_metrics();
        let p = &m.classes[P];
        assert_eq!(
            (p.requests, p.immediate, p.queued, p.completed, p.rejected),
            (4, 1, 2, 3, 1)
        );
        assert_eq!((m.requests, m.completed, m.rejected), (7, 6, 1));
        assert_eq!((p.ideal_share, m.classes[R].ideal_share), (0.75, 0.25));
        assert_eq!(m.classes[R].output_tokens_completed, 7);
    }

    #[test]
    fn latency_statistics_per_class() {
        let m = small_metrics();
        let wait = m.classes[P].latencies.queue_wait;
        assert_eq!(
            wait.count, 3,
            "the rejected request never waited for a dispatch"
        );
        assert_eq!(
            (wait.p50_ns, wait.p90_ns, wait.max_ns),
            (8_000_000, 9_000_000, 9_000_000)
        );
        assert_eq!(wait.mean_ns, 5_666_667, "17 ms / 3, rounded to the ns");
        let ttft = m.classes[P].latencies.ttft;
        assert_eq!((ttft.p50_ns, ttft.p99_ns), (18_000_000, 19_000_000));
        let itl = m.classes[R].latencies.itl;
        assert_eq!(
            (itl.count, itl.p50_ns),
            (1, 2_000_000),
            "(40 - 32) ms / 4 tokens"
        );
        assert_eq!(
            m.classes[P].ttft_samples_ns,
            [10_000_000, 18_000_000, 19_000_000]
        );
        let metric = LatencyMetric::parse("queue_wait_ms_p90").unwrap();
        assert_eq!(m.latency_ms(P, metric), Some(9.0));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(nearest_rank(&v, 50), 5);
        assert_eq!(nearest_rank(&v, 90), 9);
        assert_eq!(nearest_rank(&v, 99), 10);
        assert_eq!(nearest_rank(&v, 0), 1);
        assert_eq!(nearest_rank(&[7], 50), 7);
        assert_eq!(LatencyStats::from_values(vec![]).get(Stat::P50), None);
    }

    #[test]
    fn latency_metric_names_parse_or_not() {
        let m = LatencyMetric::parse("ttft_ms_p99").unwrap();
        assert_eq!((m.kind, m.stat), (LatencyKind::Ttft, Stat::P99));
        assert!(LatencyMetric::parse("e2e_ms_mean").is_some());
        assert!(LatencyMetric::parse("ttft_p99").is_none());
        assert!(LatencyMetric::parse("tpot_ms_p99").is_none());
        assert!(LatencyMetric::parse("ttft_ms_p95").is_none());
        let m = LatencyMetric::parse("followup_ttft_ms_p99").unwrap();
        assert_eq!((m.kind, m.stat), (LatencyKind::FollowupTtft, Stat::P99));
        assert!(LatencyMetric::parse("first_turn_ttft_ms_p50").is_some());
        assert!(LatencyMetric::parse("session_ms_max").is_some());
        let m = LatencyMetric::parse("kv_transfer_ms_p99").unwrap();
        assert_eq!((m.kind, m.stat), (LatencyKind::KvTransfer, Stat::P99));
        assert_eq!(
            LatencyMetric::all_names().len(),
            40,
            "8 kinds x 5 statistics"
        );
    }

    #[test]
    fn token_service_in_backlogged_windows() {
        let m = small_metrics();
        assert_eq!(
            (m.classes[P].service_tokens, m.classes[R].service_tokens),
            (300, 300)
        );
        // Both classes are backlogged from 1 ms until premium's queue empties at 10 ms; the two
        // premium dispatches at 10 ms count, split 3:1 in the ideal.
        assert_eq!(m.windows.len(), 1);
        let w = &m.windows[0];
        assert_eq!((w.start, w.end), (ms(1), ms(10)));
        assert_eq!(w.service_tokens, [200, 0]);
        assert_eq!(w.ideal_tokens, [150.0, 50.0]);
        assert_eq!(m.token_share_gap(P), Some(0.25));
        assert_eq!(m.token_share_gap(R), Some(-0.25));
        assert_eq!(m.backlogged_shares(P), Some((1.0, 0.75)));
        assert_eq!(m.worst_token_share_gap(), Some(0.25));
        assert_eq!(m.worst_window_gap(), Some(0.25));
        assert_eq!(m.jain_index(), Some(0.5), "one class got everything");
    }

    #[test]
    fn a_class_served_all_it_queued_at_an_instant_is_not_counted_as_starved() {
        // Quanta 4:1. At 10 ms a slot frees: chat's one queued request and two of batch's
        // three go out together; chat's queue is empty after it, batch's is not.
        let records = vec![
            done(0, 0, DispatchPath::Queued, [0, 10, 11]),
            done(1, 1, DispatchPath::Queued, [0, 10, 11]),
            done(2, 1, DispatchPath::Queued, [0, 10, 11]),
            done(3, 1, DispatchPath::Queued, [0, 20, 21]),
        ];
        let m = RunMetrics::compute(&result_of(&["chat", "batch"], records), &[4, 1]);
        let w = &m.windows[0];
        assert_eq!((w.start, w.end), (ms(0), ms(10)));
        assert_eq!(w.service_tokens, [100, 200]);
        // Chat asked for 100 tokens and got them: its ideal is 100, not 0.8 of 300.
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(near(w.ideal_tokens[0], 100.0) && near(w.ideal_tokens[1], 200.0));
        assert!(near(m.token_share_gap(0).unwrap(), 0.0));
    }

    #[test]
    fn ideal_follows_the_backlogged_set() {
        // Three classes, quanta 2:1:1. A and B backlogged from 0 to 15, C joins from 5 to 15.
        let records = vec![
            done(0, 0, DispatchPath::Queued, [0, 10, 11]),
            done(1, 1, DispatchPath::Queued, [0, 10, 11]),
            done(2, 2, DispatchPath::Queued, [5, 10, 11]),
            done(3, 0, DispatchPath::Queued, [0, 4, 11]),
            done(4, 0, DispatchPath::Queued, [0, 15, 16]),
            done(5, 1, DispatchPath::Queued, [0, 15, 16]),
            done(6, 2, DispatchPath::Queued, [5, 15, 16]),
        ];
        let m = RunMetrics::compute(&result_of(&["a", "b", "c"], records), &[2, 1, 1]);
        assert_eq!(m.windows.len(), 1);
        let w = &m.windows[0];
        // Row 3 at 4 ms: a and b backlogged (2:1); rows 0-2 at 10 ms: all three (2:1:1);
        // rows 4-6 at 15 ms empty every queue, each class getting what it asked for.
        assert_eq!(w.service_tokens, [300, 200, 200]);
        let expected = [
            200.0 / 3.0 + 3.0 * 50.0 + 100.0,
            100.0 / 3.0 + 3.0 * 25.0 + 100.0,
            3.0 * 25.0 + 100.0,
        ];
        for (got, want) in w.ideal_tokens.iter().zip(expected) {
            assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        }
        assert!(m.jain_index().unwrap() < 1.0);
    }

    #[test]
    fn requests_without_class_count_in_default() {
        // Round-robin mode never asks the router, so no record carries a resolved class.
        let unresolved = |row| RequestRecord {
            class_index: None,
            ..done(row, 0, DispatchPath::Immediate, [0, 0, 10 + row])
        };
        let result = result_of(&["default"], (0..10).map(unresolved).collect());
        let m = RunMetrics::compute(&result, &[1]);
        let default = &m.classes[0];
        assert_eq!((m.requests, m.completed), (10, 10));
        assert_eq!((default.requests, default.completed), (10, 10));
        assert_eq!(default.latencies.e2e.count, 10);
        assert_eq!(m.prefix_counts(10), [10]);
        // With several classes, a request that names one counts in it; one that names none
        // cannot be placed without the router's profile.
        let mut named = unresolved(0);
        named.policy_class = Some(std::sync::Arc::new("b".into()));
        let result = result_of(&["a", "b"], vec![named, unresolved(1)]);
        let m = RunMetrics::compute(&result, &[1, 1]);
        assert_eq!((m.classes[0].requests, m.classes[1].requests), (0, 1));
    }

    #[test]
    fn empty_run_measures_nothing() {
        let m = RunMetrics::compute(&result_of(&["a"], vec![]), &[5]);
        assert_eq!(m.prefix_counts(10), [0]);
        assert_eq!(m.remaining_when_done(0, 0, None), None);
        assert_eq!(m.token_share_gap(0), None);
        assert_eq!(m.jain_index(), None);
        assert_eq!(m.throughput_rps(), 0.0);
        assert_eq!(m.prefix_n, 0);
    }

    fn random_record(
        row: u64,
        (class, arrival, wait, service, kind): (usize, u64, u64, u64, u8),
    ) -> RequestRecord {
        let path = if wait == 0 {
            DispatchPath::Immediate
        } else {
            DispatchPath::Queued
        };
        let mut r = done(
            row,
            class,
            path,
            [arrival, arrival + wait, arrival + wait + service],
        );
        r.input_tokens = (10 + service * 7) as u32;
        if kind == 0 {
            r.status = crate::report::test_support::rejected();
            r.path = None;
            r.dispatched = None;
            r.first_token = None;
            r.completion = Some(ms(arrival));
        }
        r
    }

    proptest::proptest! {
        #[test]
        fn metrics_are_consistent_on_random_runs(
            specs in proptest::collection::vec((0usize..3, 0u64..50, 0u64..20, 1u64..30, 0u8..5), 0..60),
        ) {
            let records = specs.into_iter().zip(0u64..).map(|(s, row)| random_record(row, s)).collect();
            let m = RunMetrics::compute(&result_of(&["a", "b", "c"], records), &[4, 2, 1]);
            for (c, pair) in m.completions.windows(2).enumerate() {
                proptest::prop_assert!((pair[0].time, pair[0].row) < (pair[1].time, pair[1].row));
                proptest::prop_assert_eq!(pair[0].index, c as u64 + 1);
            }
            for n in [0, 1, 5, 17, 1000] {
                let total: u64 = m.prefix_counts(n).iter().sum();
                proptest::prop_assert_eq!(total, n.min(m.completed));
            }
            for (a, b) in [(0, 1), (1, 2), (2, 0)] {
                let has = m.classes[b].completed > 0;
                proptest::prop_assert_eq!(m.remaining_when_done(a, b, None).is_some(), has);
                if let Some(v) = m.count_at(a, b, 1) {
                    proptest::prop_assert!(v <= m.classes[a].completed);
                }
            }
            for w in &m.windows {
                let served: u64 = w.service_tokens.iter().sum();
                let ideal: f64 = w.ideal_tokens.iter().sum();
                proptest::prop_assert!((served as f64 - ideal).abs() < 1e-6);
                proptest::prop_assert!(w.start <= w.end);
            }
            for c in &m.classes {
                proptest::prop_assert!(c.backlogged_service_tokens <= c.service_tokens);
                let l = c.latencies.e2e;
                proptest::prop_assert!(l.p50_ns <= l.p90_ns && l.p90_ns <= l.p99_ns && l.p99_ns <= l.max_ns);
                proptest::prop_assert!(l.mean_ns <= l.max_ns);
            }
            if let Some(j) = m.jain_index() {
                proptest::prop_assert!(j > 0.0 && j <= 1.0 + 1e-12, "jain {}", j);
            }
        }
    }

    /// A quantum anywhere in what validation accepts (1 to 2^64 - 1), weighted to the
    /// extremes where a `u64` sum overflows.
    fn any_accepted_quantum() -> impl proptest::strategy::Strategy<Value = u64> {
        use proptest::prelude::*;
        prop_oneof![
            1 => 1..=u64::MAX,
            1 => (0u64..1024).prop_map(|d| u64::MAX - d),
            1 => (0u64..1024).prop_map(|d| (1u64 << 63) + d),
            1 => 1u64..1024,
        ]
    }

    proptest::proptest! {
        #[test]
        fn ideal_shares_are_finite_and_add_up_to_one_for_every_accepted_quantum(
            quanta in proptest::collection::vec(any_accepted_quantum(), 3),
            specs in proptest::collection::vec((0usize..3, 0u64..50, 0u64..20, 1u64..30, 0u8..5), 1..40),
        ) {
            let records = specs.into_iter().zip(0u64..).map(|(s, row)| random_record(row, s)).collect();
            let m = RunMetrics::compute(&result_of(&["a", "b", "c"], records), &quanta);
            let active: Vec<&ClassMetrics> = m.classes.iter().filter(|c| c.requests > 0).collect();
            let sum: f64 = active.iter().map(|c| c.ideal_share).sum();
            proptest::prop_assert!((sum - 1.0).abs() <= 1e-12, "ideal shares add up to {}", sum);
            for c in &m.classes {
                proptest::prop_assert!((0.0..=1.0).contains(&c.ideal_share), "{}: {}", c.name, c.ideal_share);
                proptest::prop_assert!(c.backlogged_ideal_tokens.is_finite());
            }
            for w in &m.windows {
                let served: u64 = w.service_tokens.iter().sum();
                let ideal: f64 = w.ideal_tokens.iter().sum();
                proptest::prop_assert!((served as f64 - ideal).abs() <= 1e-9 * served.max(1) as f64);
            }
        }
    }

    #[test]
    fn ideal_shares_of_quanta_past_2_pow_63_stay_exact() {
        let records = vec![
            done(0, P, DispatchPath::Queued, [0, 1, 2]),
            done(1, R, DispatchPath::Queued, [0, 1, 2]),
        ];
        for (quanta, want) in [
            ([1u64 << 63, 1 << 63], [0.5, 0.5]),
            ([u64::MAX, u64::MAX], [0.5, 0.5]),
            ([u64::MAX, 1], [1.0, 1.0 / u64::MAX as f64]),
        ] {
            let m = RunMetrics::compute(&result_of(&["p", "r"], records.clone()), &quanta);
            assert_eq!(
                [m.classes[P].ideal_share, m.classes[R].ideal_share],
                want,
                "{quanta:?}"
            );
        }
    }

    #[test]
    fn premium_burst_matches_dynamo() {
        use crate::report::test_support::run_fixture;
        let (result, quanta) = run_fixture("premium-weighted");
        let m = RunMetrics::compute(&result, &quanta);
        let (p, r) = (
            m.class_index("premium").unwrap(),
            m.class_index("regular").unwrap(),
        );
        assert_eq!(
            (m.completed_through(p, 320), m.completed_through(r, 320)),
            (255, 65)
        );
        assert_eq!(m.remaining_when_done(r, p, None), Some(239));
        assert_eq!(m.classes[p].ideal_share, 0.8);
        let (result, quanta) = run_fixture("premium-equal");
        let m = RunMetrics::compute(&result, &quanta);
        assert_eq!(m.prefix_counts(320), [160, 160]);
        assert_eq!(m.remaining_when_done(1, 0, None), Some(0));
    }
}
