//! Scaling in the loop: the policy a run asks, at ticks of its own choosing, how many workers
//! each role should have (1.6.1's `scaling_policy` contract), the snapshot it is shown, and
//! the traffic window behind it. The event loop owns the clock; this file owns the contract.

use crate::mocker::PassMetrics;
use serde::Serialize;

/// A scaling policy (a planner): asked once when the first tick is, then at each tick what
/// the fleet should be. An `Err` ends the run (a policy that fails is bad input, not a bug).
pub trait ScalingPolicy {
    /// When the first tick is, in ms of simulated time: at `max(ms, 0)` if finite, never if
    /// `None` or not finite.
    fn initial_tick_ms(&mut self) -> Result<Option<f64>, String>;

    /// The decision at a tick, given the fleet and the traffic since the previous tick.
    fn on_tick(&mut self, snapshot: &ScalingSnapshot) -> Result<ScalingDecision, String>;
}

/// What a policy decides at a tick (1.6.1's keys).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScalingDecision {
    /// Prefill workers wanted, starting ones included (`None`: as they are). Ignored in
    /// aggregated serving.
    pub target_prefill: Option<u64>,
    /// Decode workers wanted (aggregated ones, in aggregated serving), starting ones
    /// included (`None`: as they are).
    pub target_decode: Option<u64>,
    /// When the next tick is, in ms of simulated time; ticking stops for good unless it is
    /// finite and later than now.
    pub next_tick_ms: Option<f64>,
    /// Why, in a word or a few (kept with the scaling events; not part of 1.6.1's contract).
    pub reason: Option<String>,
}

/// What a policy sees at a tick, in 1.6.1's schema (keys and units). Worker ids are numbered
/// within their role, as requests.csv numbers them; aggregated workers appear as decode.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScalingSnapshot {
    /// 0 at the first tick, one more at each tick that fires.
    pub tick_ordinal: u64,
    pub now_ms: f64,
    pub active_prefill_ids: Vec<u64>,
    pub active_prefill_count: u64,
    pub starting_prefill_ids: Vec<u64>,
    pub starting_prefill_count: u64,
    pub draining_prefill_ids: Vec<u64>,
    pub draining_prefill_count: u64,
    /// Active and starting.
    pub non_draining_prefill_count: u64,
    /// Active, starting and draining.
    pub total_prefill_count: u64,
    pub active_decode_ids: Vec<u64>,
    pub active_decode_count: u64,
    pub starting_decode_ids: Vec<u64>,
    pub starting_decode_count: u64,
    pub draining_decode_ids: Vec<u64>,
    pub draining_decode_count: u64,
    pub non_draining_decode_count: u64,
    pub total_decode_count: u64,
    pub traffic: TrafficWindow,
    /// The latest pass of each active prefill rank since the previous tick, in (worker,
    /// rank) order.
    pub prefill_fpm_snapshots: Vec<PassSnapshot>,
    /// The same for decode (and aggregated) ranks.
    pub decode_fpm_snapshots: Vec<PassSnapshot>,
}

/// A rank's latest pass as a policy sees it (1.6.1's forward-pass metrics): what it computed
/// for which requests, what waited behind it, and how long it ran; all zero for a rank that
/// ran no pass for a second (an idle snapshot).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PassSnapshot {
    /// The worker, numbered within its role.
    pub worker_id: u64,
    pub dp_rank: u32,
    /// How long the pass ran, in seconds.
    pub wall_time: f64,
    /// Requests that computed prompt tokens in the pass.
    pub num_prefill_requests: u64,
    /// Tokens those requests computed.
    pub sum_prefill_tokens: u64,
    /// Population variance of their full prompt lengths.
    pub var_prefill_length: f64,
    /// Prompt tokens they had computed or cached before the pass.
    pub sum_prefill_kv_tokens: u64,
    /// Requests the pass decoded.
    pub num_decode_requests: u64,
    /// Their sequence lengths (prompt and output so far), summed.
    pub sum_decode_kv_tokens: u64,
    pub var_decode_kv_tokens: f64,
    /// Requests waiting for their first admission, and their prompt lengths.
    pub num_queued_prefill: u64,
    pub sum_queued_prefill_tokens: u64,
    pub var_queued_prefill_length: f64,
    /// Requests waiting to decode (preempted; a decode rank's handoffs), and their lengths.
    pub num_queued_decode: u64,
    pub sum_queued_decode_kv_tokens: u64,
    pub var_queued_decode_kv_tokens: f64,
}

impl PassSnapshot {
    /// Rank `dp_rank` of worker `worker_id` ran a pass with `metrics`.
    pub fn of(worker_id: u64, dp_rank: u32, metrics: &PassMetrics) -> PassSnapshot {
        PassSnapshot {
            worker_id,
            dp_rank,
            wall_time: metrics.duration.as_ns() as f64 / 1e9,
            num_prefill_requests: metrics.prefill.count,
            sum_prefill_tokens: metrics.prefill_computed_tokens,
            var_prefill_length: metrics.prefill.variance(),
            sum_prefill_kv_tokens: metrics.prefill_prefix_tokens,
            num_decode_requests: metrics.decode.count,
            sum_decode_kv_tokens: metrics.decode.sum,
            var_decode_kv_tokens: metrics.decode.variance(),
            num_queued_prefill: metrics.queued_prefill.count,
            sum_queued_prefill_tokens: metrics.queued_prefill.sum,
            var_queued_prefill_length: metrics.queued_prefill.variance(),
            num_queued_decode: metrics.queued_decode.count,
            sum_queued_decode_kv_tokens: metrics.queued_decode.sum,
            var_queued_decode_kv_tokens: metrics.queued_decode.variance(),
        }
    }
}

/// The latest pass of each rank of a role, for the policy's next tick.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RolePasses {
    pub prefill: Vec<PassSnapshot>,
    pub decode: Vec<PassSnapshot>,
}

/// One role's workers at a tick, by state, each list in id order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoleWorkers {
    pub active: Vec<u64>,
    pub starting: Vec<u64>,
    pub draining: Vec<u64>,
}

impl ScalingSnapshot {
    /// The snapshot of tick `tick_ordinal` at `now_ms`.
    pub fn new(
        tick_ordinal: u64,
        now_ms: f64,
        prefill: RoleWorkers,
        decode: RoleWorkers,
        traffic: TrafficWindow,
        passes: RolePasses,
    ) -> ScalingSnapshot {
        let count = |ids: &[u64]| ids.len() as u64;
        let (pa, ps, pd) = (
            count(&prefill.active),
            count(&prefill.starting),
            count(&prefill.draining),
        );
        let (da, ds, dd) = (
            count(&decode.active),
            count(&decode.starting),
            count(&decode.draining),
        );
        ScalingSnapshot {
            tick_ordinal,
            now_ms,
            active_prefill_ids: prefill.active,
            active_prefill_count: pa,
            starting_prefill_ids: prefill.starting,
            starting_prefill_count: ps,
            draining_prefill_ids: prefill.draining,
            draining_prefill_count: pd,
            non_draining_prefill_count: pa + ps,
            total_prefill_count: pa + ps + pd,
            active_decode_ids: decode.active,
            active_decode_count: da,
            starting_decode_ids: decode.starting,
            starting_decode_count: ds,
            draining_decode_ids: decode.draining,
            draining_decode_count: dd,
            non_draining_decode_count: da + ds,
            total_decode_count: da + ds + dd,
            traffic,
            prefill_fpm_snapshots: passes.prefill,
            decode_fpm_snapshots: passes.decode,
        }
    }
}

/// The traffic since the previous tick (the first window starts at 0), in 1.6.1's keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TrafficWindow {
    pub duration_s: f64,
    /// Requests that arrived in the window (rejected ones too).
    pub num_req: u64,
    /// Mean prompt tokens of the requests that completed in the window.
    pub avg_isl: f64,
    /// Mean output tokens (as produced) of the requests that completed in the window.
    pub avg_osl: f64,
    /// Mean time to first token of those completed requests whose was above 0.
    pub avg_ttft_ms: f64,
    /// Mean over those completed requests with more than one token of their mean gap
    /// between tokens.
    pub avg_itl_ms: f64,
    /// Mean over the router's placements in the window of cached blocks over prompt blocks
    /// (round robin places without a cache view: none).
    pub avg_kv_hit_rate: f64,
    /// Tokens per decode step (1 without speculative decoding); `None` without a step.
    pub avg_accept_length: Option<f64>,
    pub shape_count: u64,
    pub ttft_count: u64,
    pub itl_count: u64,
    pub hit_rate_count: u64,
    /// Decode steps in the window: requests that got a token from a decode pass, per pass.
    pub accept_length_forward_count: u64,
}

/// The sums behind a [`TrafficWindow`], gathered as the run goes and emptied at each tick.
#[derive(Clone, Debug, Default)]
pub struct TrafficTally {
    arrivals: u64,
    shapes: Mean,
    outputs: Mean,
    ttft_ms: Mean,
    itl_ms: Mean,
    hit_rate: Mean,
    forwards: u64,
    accepted_tokens: u64,
}

/// A running sum and count.
#[derive(Clone, Copy, Debug, Default)]
struct Mean {
    sum: f64,
    count: u64,
}

impl Mean {
    fn add(&mut self, value: f64) {
        self.sum += value;
        self.count += 1;
    }

    fn value(self) -> f64 {
        match self.count {
            0 => 0.0,
            n => self.sum / n as f64,
        }
    }
}

impl TrafficTally {
    /// A request arrived.
    pub fn arrival(&mut self) {
        self.arrivals += 1;
    }

    /// A request completed (not refused) with `input_tokens` prompt tokens, `tokens` output
    /// tokens, its first token `ttft_ms` after arrival and its last `last_gap_ms` after its
    /// first.
    pub fn completed(&mut self, input_tokens: u64, tokens: u64, ttft_ms: f64, last_gap_ms: f64) {
        self.shapes.add(input_tokens as f64);
        self.outputs.add(tokens as f64);
        if ttft_ms > 0.0 {
            self.ttft_ms.add(ttft_ms);
        }
        if tokens > 1 {
            self.itl_ms.add(last_gap_ms.max(0.0) / (tokens - 1) as f64);
        }
    }

    /// The router placed a request whose `prompt_blocks` blocks it saw `cached_blocks` of
    /// cached on the chosen worker.
    pub fn placed(&mut self, cached_blocks: u64, prompt_blocks: u64) {
        if prompt_blocks > 0 {
            self.hit_rate
                .add(cached_blocks as f64 / prompt_blocks as f64);
        }
    }

    /// A decode pass gave `forwards` requests a token each (`accepted_tokens` in all).
    pub fn decoded(&mut self, forwards: u64, accepted_tokens: u64) {
        if forwards > 0 && accepted_tokens > 0 {
            self.forwards += forwards;
            self.accepted_tokens += accepted_tokens;
        }
    }

    /// The window of `duration_s` seconds these sums describe; the tally starts afresh.
    pub fn take(&mut self, duration_s: f64) -> TrafficWindow {
        let t = std::mem::take(self);
        TrafficWindow {
            duration_s,
            num_req: t.arrivals,
            avg_isl: t.shapes.value(),
            avg_osl: t.outputs.value(),
            avg_ttft_ms: t.ttft_ms.value(),
            avg_itl_ms: t.itl_ms.value(),
            avg_kv_hit_rate: t.hit_rate.value(),
            avg_accept_length: (t.forwards > 0)
                .then(|| t.accepted_tokens as f64 / t.forwards as f64),
            shape_count: t.shapes.count,
            ttft_count: t.ttft_ms.count,
            itl_count: t.itl_ms.count,
            hit_rate_count: t.hit_rate.count,
            accept_length_forward_count: t.forwards,
        }
    }
}

/// One step toward a role's target, in the order 1.6.1 takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetChange {
    /// A new worker of the role starts (the next id).
    Start,
    /// Starting worker `0` is cancelled.
    CancelStart(u64),
    /// Active worker `0` drains.
    Drain(u64),
}

/// The steps that bring a role's `workers` to `target` workers, active and starting: new
/// workers when short; when over, the starting workers cancelled first, then the active
/// ones drained, each highest id first (draining workers count for nothing). `None` if the
/// target asks for more than [`crate::bounds::MAX_RANKS`] new workers (no fleet holds them).
pub fn changes_toward(workers: &RoleWorkers, target: u64) -> Option<Vec<FleetChange>> {
    let effective = (workers.active.len() + workers.starting.len()) as u64;
    if target >= effective {
        let new = target - effective;
        if new > crate::bounds::MAX_RANKS {
            return None;
        }
        return Some(vec![FleetChange::Start; new as usize]);
    }
    let excess = (effective - target) as usize;
    let cancelled = workers
        .starting
        .iter()
        .rev()
        .map(|&w| FleetChange::CancelStart(w));
    let drained = workers.active.iter().rev().map(|&w| FleetChange::Drain(w));
    Some(cancelled.chain(drained).take(excess).collect())
}

/// A tick time in ms as nanoseconds, if the policy asked for one that can happen: finite
/// (negative becomes 0).
pub fn tick_time(ms: Option<f64>) -> Option<crate::time::SimTime> {
    let ms = ms.filter(|ms| ms.is_finite())?;
    Some(crate::time::SimTime::from_ns(
        crate::time::SimDuration::from_ms_f64(ms).as_ns(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_window_has_zero_means_and_no_accept_length() {
        let window = TrafficTally::default().take(1.0);
        assert_eq!(window.avg_ttft_ms, 0.0);
        assert_eq!(window.avg_accept_length, None);
        let json = serde_json::to_value(&window).unwrap();
        assert!(json["avg_accept_length"].is_null());
    }

    #[test]
    fn a_window_averages_over_requests_and_skips_what_1_6_1_skips() {
        let mut tally = TrafficTally::default();
        tally.arrival();
        tally.arrival();
        tally.completed(100, 11, 50.0, 200.0); // itl 20
        tally.completed(300, 1, 0.0, 0.0); // no ttft sample (0), no itl (one token)
        tally.placed(1, 4);
        tally.placed(0, 0); // no prompt blocks: no sample
        tally.decoded(3, 3);
        let w = tally.take(2.0);
        assert_eq!(
            (w.num_req, w.shape_count, w.ttft_count, w.itl_count),
            (2, 2, 1, 1)
        );
        assert_eq!((w.avg_isl, w.avg_osl), (200.0, 6.0));
        assert_eq!((w.avg_ttft_ms, w.avg_itl_ms), (50.0, 20.0));
        assert_eq!((w.avg_kv_hit_rate, w.hit_rate_count), (0.25, 1));
        assert_eq!(
            (w.avg_accept_length, w.accept_length_forward_count),
            (Some(1.0), 3)
        );
        assert_eq!(tally.take(0.0).num_req, 0, "taking empties the tally");
    }

    #[test]
    fn a_tick_is_due_only_at_a_finite_time_and_never_before_zero() {
        assert_eq!(tick_time(None), None);
        assert_eq!(tick_time(Some(f64::NAN)), None);
        assert_eq!(tick_time(Some(f64::INFINITY)), None);
        assert_eq!(tick_time(Some(-5.0)), Some(crate::time::SimTime::ZERO));
        assert_eq!(tick_time(Some(1000.5)).unwrap().as_ns(), 1_000_500_000);
    }

    #[test]
    fn scaling_down_cancels_starting_workers_then_drains_the_highest_active_ids() {
        let workers = RoleWorkers {
            active: vec![0, 1, 2],
            starting: vec![5, 6],
            draining: vec![3],
        };
        use FleetChange::{CancelStart, Drain, Start};
        assert_eq!(changes_toward(&workers, 7), Some(vec![Start, Start]));
        assert_eq!(changes_toward(&workers, 5), Some(vec![]));
        assert_eq!(
            changes_toward(&workers, 2),
            Some(vec![CancelStart(6), CancelStart(5), Drain(2)])
        );
        assert_eq!(changes_toward(&workers, 0).unwrap().len(), 5);
        assert_eq!(changes_toward(&workers, u64::MAX), None);
    }

    #[test]
    fn counts_follow_the_id_lists() {
        let decode = RoleWorkers {
            active: vec![0, 1],
            starting: vec![3],
            draining: vec![2],
        };
        let s = ScalingSnapshot::new(
            4,
            5000.0,
            RoleWorkers::default(),
            decode,
            TrafficWindow::default(),
            RolePasses::default(),
        );
        assert_eq!((s.non_draining_decode_count, s.total_decode_count), (3, 4));
        assert_eq!(s.total_prefill_count, 0);
    }
}
