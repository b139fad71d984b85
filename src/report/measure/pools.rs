//! Per-pool figures: which pool served each request, and each pool's counts, utilisation,
//! token throughput and latencies, in total and per class.
//!
//! Definitions (docs/scenarios.md, "Worker pools"):
//! - a request belongs to the pool of the worker the router sent it to (none if it was never
//!   dispatched); in disaggregated serving it belongs to its prefill worker's pool and to its
//!   decode worker's pool, each counting it, its TTFT and its end-to-end latency;
//! - **utilisation** = the time the pool's ranks spent running passes within `[0, makespan]`,
//!   summed over its ranks, over `ranks × makespan` (a rank runs a pass whenever it holds a
//!   request, so this is the fraction of rank-time with work);
//! - **prefill tokens** are the uncached prompt tokens (`input - reused`) and **output tokens**
//!   the output tokens of the pool's *completed* requests, per second of the makespan: the
//!   same window and the same requests as the run's `output_tokens_per_s`, so the pools' rates
//!   add up to the run's. In disaggregated serving the prefill tokens count in the prefill
//!   pool and the output tokens in the decode pool, so the rates still add up.
//! - **role latencies** (disaggregated serving only) are the parts of a completed request's
//!   time that belong to the role: on its prefill pool the queue wait (arrival to prefill
//!   admission), the prefill (to the end of its last prefill pass) and the handoff (to its
//!   decode admission: room on the decode worker, the transfer, a running slot), on its
//!   decode pool the decode (decode admission to the last token) and the inter-token latency.
//!   TTFT and end-to-end latency are the whole request's, the same on both pools.

use super::latency::LatencyStats;
use super::phases::phase_ns;
use crate::mocker::WorkerRole;
use crate::sim::{PoolUsage, RequestRecord, SimResult, Status};
use crate::time::SimTime;

/// What a pool's completed requests carried.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolService {
    /// Requests completed.
    pub completed: u64,
    /// Their uncached prompt tokens (`input - reused`).
    pub prefill_tokens: u64,
    /// Their output tokens.
    pub output_tokens: u64,
}

impl PoolService {
    /// Counts completed `record`'s part in `role`'s pool.
    fn add(&mut self, record: &RequestRecord, role: WorkerRole) {
        self.completed += 1;
        if role != WorkerRole::Decode {
            self.prefill_tokens += u64::from(
                record
                    .input_tokens
                    .saturating_sub(record.reused_input_tokens),
            );
        }
        if role != WorkerRole::Prefill {
            self.output_tokens += u64::from(record.output_tokens);
        }
    }
}

/// Everything measured about one pool.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolMetrics {
    /// The pool's name (`default` for the unnamed pool).
    pub name: String,
    /// What its workers do.
    pub role: WorkerRole,
    /// Workers in the pool.
    pub workers: u32,
    /// Data-parallel ranks per worker.
    pub dp_size: u32,
    /// Requests the router sent to one of the pool's workers (every request, warmup or not).
    pub requests: u64,
    /// What the pool's completed requests carried (every request, warmup or not).
    pub served: PoolService,
    /// The same per class, in class order.
    pub classes: Vec<PoolService>,
    /// Pass time within `[0, makespan]`, summed over the pool's ranks, in ns.
    pub busy_ns: u128,
    /// TTFT of the pool's completed requests (after the warmup).
    pub ttft: LatencyStats,
    /// End-to-end latency of the pool's completed requests (after the warmup).
    pub e2e: LatencyStats,
    /// The latencies that belong to the pool's role (empty for an aggregated pool).
    pub role_latency: RoleLatencies,
}

/// The parts of its completed requests' time a disaggregated pool is answerable for (after
/// the warmup); a prefill pool fills the first three, a decode pool the last two.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoleLatencies {
    /// Arrival to prefill admission.
    pub queue_wait: LatencyStats,
    /// Prefill admission to the end of the last prefill pass.
    pub prefill: LatencyStats,
    /// The prefill's end to the decode admission (room, the transfer, a running slot).
    pub handoff: LatencyStats,
    /// Decode admission to the last token.
    pub decode: LatencyStats,
    /// (completion - first token) / (output tokens - 1), for more than one output token.
    pub itl: LatencyStats,
}

impl PoolMetrics {
    /// Ranks in the pool.
    pub fn ranks(&self) -> u64 {
        u64::from(self.workers) * u64::from(self.dp_size)
    }

    /// Busy rank-time over available rank-time in `[0, makespan]`; `None` for an empty window.
    pub fn utilisation(&self, makespan: SimTime) -> Option<f64> {
        let available = u128::from(self.ranks()) * u128::from(makespan.as_ns());
        (available > 0).then(|| self.busy_ns as f64 / available as f64)
    }
}

/// Tokens per second of the makespan (0 for an empty run).
pub fn tokens_per_s(tokens: u64, makespan: SimTime) -> f64 {
    match makespan == SimTime::ZERO {
        true => 0.0,
        false => tokens as f64 / makespan.as_secs_f64(),
    }
}

/// Each pool's figures. `all` is every record (counts and tokens), `measured` those after the
/// warmup (latencies); both with classes resolved.
pub fn pool_metrics(
    result: &SimResult,
    all: &[RequestRecord],
    measured: &[RequestRecord],
    class_count: usize,
) -> Vec<PoolMetrics> {
    let mut pools: Vec<PoolMetrics> = result
        .pools
        .iter()
        .map(|p| PoolMetrics {
            name: p.name.clone(),
            role: p.role,
            workers: p.workers + p.joined_workers.len() as u32,
            dp_size: p.dp_size,
            classes: vec![PoolService::default(); class_count],
            busy_ns: p.busy_ns,
            ..PoolMetrics::default()
        })
        .collect();
    for r in all {
        for pool in pools_of(result, r) {
            let Some(pool) = pools.get_mut(pool) else {
                continue;
            };
            pool.requests += 1;
            if r.status != Status::Completed {
                continue;
            }
            pool.served.add(r, pool.role);
            if let Some(class) = r.class().and_then(|c| pool.classes.get_mut(c)) {
                class.add(r, pool.role);
            }
        }
    }
    let mut samples: Vec<[Vec<u64>; 2]> = vec![Default::default(); pools.len()];
    for r in measured.iter().filter(|r| r.status == Status::Completed) {
        for pool in pools_of(result, r) {
            let Some(s) = samples.get_mut(pool) else {
                continue;
            };
            s[0].extend(r.first_token.map(|t| t.saturating_since(r.arrival).as_ns()));
            s[1].extend(r.completion.map(|t| t.saturating_since(r.arrival).as_ns()));
        }
    }
    for (pool, [ttft, e2e]) in pools.iter_mut().zip(samples) {
        pool.ttft = LatencyStats::from_values(ttft);
        pool.e2e = LatencyStats::from_values(e2e);
    }
    set_role_latencies(result, measured, &mut pools);
    pools
}

/// Fills each disaggregated pool's [`RoleLatencies`] from the completed `measured` records:
/// a request's queue wait, prefill and handoff on its prefill worker's pool, its decode and
/// inter-token latency on its decode worker's.
fn set_role_latencies(result: &SimResult, measured: &[RequestRecord], pools: &mut [PoolMetrics]) {
    let mut samples: Vec<[Vec<u64>; 5]> = vec![Default::default(); pools.len()];
    for r in measured.iter().filter(|r| r.status == Status::Completed) {
        let (Some(handoff), Some([queue, prefill, handoff_ns, decode])) =
            (r.handoff(), phase_ns(r))
        else {
            continue;
        };
        if let Some(s) = result
            .pool_of(handoff.prefill_rank.worker_id)
            .and_then(|p| samples.get_mut(p))
        {
            s[0].push(queue);
            s[1].push(prefill);
            s[2].push(handoff_ns);
        }
        let decode_pool = r.rank().and_then(|rank| result.pool_of(rank.worker_id));
        if let Some(s) = decode_pool.and_then(|p| samples.get_mut(p)) {
            s[3].push(decode);
            if let (Some(first), Some(done)) = (r.first_token, r.completion)
                && r.output_tokens > 1
            {
                s[4].push(done.saturating_since(first).as_ns() / u64::from(r.output_tokens - 1));
            }
        }
    }
    for (pool, [queue_wait, prefill, handoff, decode, itl]) in pools.iter_mut().zip(samples) {
        pool.role_latency = RoleLatencies {
            queue_wait: LatencyStats::from_values(queue_wait),
            prefill: LatencyStats::from_values(prefill),
            handoff: LatencyStats::from_values(handoff),
            decode: LatencyStats::from_values(decode),
            itl: LatencyStats::from_values(itl),
        };
    }
}

/// The pools request `r` was served by (indexes in `result.pools`): its worker's, and in
/// disaggregated serving its prefill worker's first.
fn pools_of(result: &SimResult, r: &RequestRecord) -> impl Iterator<Item = usize> {
    let prefill = r.handoff().map(|h| h.prefill_rank);
    let ranks = prefill.into_iter().chain(r.rank());
    ranks.filter_map(|rank| result.pool_of(rank.worker_id))
}

/// The name of the pool of worker `worker_id` (empty when no pool has it).
pub fn pool_name(result: &SimResult, worker_id: u64) -> &str {
    result
        .pool_of(worker_id)
        .map_or("", |p| result.pools[p].name.as_str())
}

/// Worker `worker_id`'s number within its role, as Dynamo numbers a disaggregated run's
/// prefill and decode workers (each from 0); an aggregated worker's id as it is.
pub fn worker_in_role(result: &SimResult, worker_id: u64) -> u64 {
    let Some(pool) = result.pool_of(worker_id) else {
        return worker_id;
    };
    let role = result.pools[pool].role;
    if role == WorkerRole::Aggregated {
        return worker_id;
    }
    // The role's workers with smaller ids: its pools' own, then those that joined them.
    let before = |p: &PoolUsage| {
        let own = worker_id
            .saturating_sub(p.first_worker)
            .min(u64::from(p.workers));
        let joined = p.joined_workers.iter().filter(|&&w| w < worker_id).count();
        own + joined as u64
    };
    result
        .pools
        .iter()
        .filter(|p| p.role == role)
        .map(before)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::{done, ms, result_of};
    use crate::scheduling::scheduler::DispatchPath;
    use crate::scheduling::types::WorkerWithDpRank;

    fn usage(name: &str, first_worker: u64, workers: u32, busy_ms: u64) -> PoolUsage {
        PoolUsage {
            name: name.into(),
            first_worker,
            workers,
            dp_size: 1,
            busy_ns: u128::from(busy_ms) * 1_000_000,
            joined_workers: Vec::new(),
            role: crate::mocker::WorkerRole::Aggregated,
        }
    }

    /// Pools `a` (workers 0, 1) and `b` (worker 2); requests on workers 0, 2, 2 and one the
    /// router rejected; the run lasts 100 ms.
    fn two_pool_run() -> SimResult {
        let on = |row, worker: u64, reused, completion| {
            let mut r = done(row, 0, DispatchPath::Immediate, [0, 0, completion]);
            r.set_rank(Some(WorkerWithDpRank::new(worker, 0)));
            r.first_token = Some(ms(completion / 2));
            r.reused_input_tokens = reused;
            r
        };
        let mut rejected = done(3, 0, DispatchPath::Immediate, [0, 0, 5]);
        rejected.path = None;
        rejected.status = crate::report::test_support::rejected();
        let mut pending = on(4, 1, 0, 100);
        pending.status = Status::Pending;
        let mut result = result_of(
            &["only"],
            vec![
                on(0, 0, 0, 40),
                on(1, 2, 20, 100),
                on(2, 2, 0, 60),
                rejected,
                pending,
            ],
        );
        result.pools = vec![usage("a", 0, 2, 50), usage("b", 2, 1, 80)];
        result
    }

    #[test]
    fn requests_count_in_the_pool_of_their_worker() {
        let result = two_pool_run();
        assert_eq!(result.pool_of(0), Some(0));
        assert_eq!(result.pool_of(1), Some(0));
        assert_eq!(result.pool_of(2), Some(1));
        assert_eq!(result.pool_of(3), None);
        assert_eq!((pool_name(&result, 2), pool_name(&result, 9)), ("b", ""));
        let pools = pool_metrics(&result, &result.records, &result.records, 1);
        let (a, b) = (&pools[0], &pools[1]);
        assert_eq!(
            (a.requests, a.served.completed),
            (2, 1),
            "a pending one counts as sent"
        );
        assert_eq!((b.requests, b.served.completed), (2, 2));
        // 100 input tokens each; row 1 reused 20 of its prompt.
        assert_eq!((b.served.prefill_tokens, b.served.output_tokens), (180, 2));
        assert_eq!(b.classes, vec![b.served]);
        assert_eq!((b.ttft.max_ns, b.e2e.max_ns), (50_000_000, 100_000_000));
        assert_eq!(a.ttft.count, 1);
    }

    #[test]
    fn utilisation_is_busy_rank_time_over_ranks_times_makespan() {
        let result = two_pool_run();
        let pools = pool_metrics(&result, &result.records, &result.records, 1);
        assert_eq!(result.end_time, ms(100));
        assert_eq!(pools[0].utilisation(result.end_time), Some(0.25));
        assert_eq!(pools[1].utilisation(result.end_time), Some(0.8));
        assert_eq!(pools[1].utilisation(SimTime::ZERO), None);
        assert_eq!(tokens_per_s(180, result.end_time), 1800.0);
        assert_eq!(tokens_per_s(180, SimTime::ZERO), 0.0);
    }

    #[test]
    fn role_latencies_count_on_the_pool_of_their_role() {
        let run = crate::report::test_support::disaggregated_run("disagg-prefix-missing");
        let [prefill, decode] = &run.metrics.pools[..] else {
            panic!("two pools")
        };
        let completed = prefill.served.completed;
        assert!(completed > 0);
        let (p, d) = (&prefill.role_latency, &decode.role_latency);
        let counts =
            |l: &RoleLatencies| [l.queue_wait, l.prefill, l.handoff, l.decode].map(|s| s.count);
        assert_eq!(counts(p), [completed, completed, completed, 0]);
        assert_eq!(counts(d), [0, 0, 0, completed]);
        assert_eq!((p.itl.count, d.itl.count > 0), (0, true));
        // The four parts add up to the whole: their means to the mean end-to-end latency.
        let means = p.queue_wait.mean_ns + p.prefill.mean_ns + p.handoff.mean_ns + d.decode.mean_ns;
        assert!(
            means.abs_diff(prefill.e2e.mean_ns) <= 4,
            "{means} {:?}",
            prefill.e2e
        );
    }

    #[test]
    fn warmup_leaves_latencies_but_not_counts() {
        let result = two_pool_run();
        let measured: Vec<RequestRecord> = result
            .records
            .iter()
            .filter(|r| r.row != 1)
            .cloned()
            .collect();
        let pools = pool_metrics(&result, &result.records, &measured, 1);
        assert_eq!(pools[1].served.completed, 2);
        assert_eq!(pools[1].ttft.count, 1);
    }
}
