//! What a scaling policy watches between its ticks, gathered as the run goes: the traffic
//! window and the latest pass of every active worker rank (1.6.1's buffer of forward-pass
//! metrics, with an idle snapshot for a rank that ran no pass for a second); and the snapshot
//! a tick shows, built from them and the fleet.

use super::fleet::WorkerFleet;
use super::ledger::Ledger;
use super::scaling::{PassSnapshot, RolePasses, RoleWorkers, ScalingSnapshot, TrafficTally};
use crate::mocker::{PassMetrics, WorkerRole};
use crate::time::{SimDuration, SimTime};
use std::collections::BTreeMap;

/// How often an active rank that runs no pass shows an empty one (1.6.1's idle cadence).
const IDLE_SNAPSHOT_INTERVAL: SimDuration = SimDuration::from_ms(1_000);

/// Everything a policy's next tick reads that the run gathers as it goes.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// The traffic since the previous tick.
    pub traffic: TrafficTally,
    prefill: LatestPasses,
    /// Decode ranks, and aggregated ones (a policy sees those as decode).
    decode: LatestPasses,
}

/// A rank as a policy names it: its worker's number within its role, and its DP rank.
type RankKey = (u64, u32);

/// Each rank's latest pass since the previous tick, and when it last showed one.
#[derive(Debug, Default)]
struct LatestPasses {
    latest: BTreeMap<RankKey, PassSnapshot>,
    last_shown: BTreeMap<RankKey, SimTime>,
}

impl Watch {
    /// Rank `index`'s pass ended at `now` with `metrics`: the latest the policy will see of
    /// it (a later pass before the next tick replaces it); its decode steps count in the
    /// traffic window (one token each without speculative decoding).
    pub fn pass_ended(
        &mut self,
        now: SimTime,
        fleet: &WorkerFleet,
        index: usize,
        metrics: &PassMetrics,
    ) {
        let rank = fleet.rank_id(index);
        let key = (fleet.role_number(rank.worker_id), rank.dp_rank);
        let pass = PassSnapshot::of(key.0, key.1, metrics);
        let passes = self.passes_mut(fleet.role(index));
        passes.record(now, key, pass);
        // The last rank of a lock-step worker to end: the worker's ranks that had nothing to
        // do in its pass show an empty pass as long as the worker's.
        for peer in fleet.lockstep_peers(index) {
            let peer_key = (key.0, fleet.rank_id(peer).dp_rank);
            if passes.last_shown.get(&peer_key) != Some(&now) {
                let idle = PassMetrics {
                    duration: metrics.duration,
                    ..PassMetrics::default()
                };
                let pass = PassSnapshot::of(peer_key.0, peer_key.1, &idle);
                passes.record(now, peer_key, pass);
            }
        }
        let steps = metrics.decode_forwards;
        self.traffic.decoded(steps, steps);
    }

    /// Worker `worker` became active at `now` (a run's first workers at 0): its idle
    /// cadence starts, unless one of its ranks already showed a pass.
    pub fn activated(&mut self, now: SimTime, fleet: &WorkerFleet, worker: u64) {
        let number = fleet.role_number(worker);
        let role = fleet.pool_of(worker).map(|p| p.engine.common.role);
        let Some(role) = role else { return };
        let ranks: Vec<u32> = fleet
            .ranks_of(worker)
            .map(|index| fleet.rank_id(index).dp_rank)
            .collect();
        let passes = self.passes_mut(role);
        for dp_rank in ranks {
            passes.last_shown.entry((number, dp_rank)).or_insert(now);
        }
    }

    /// What the policy sees at tick `tick_ordinal` at `now`: the fleet by role and state
    /// (numbered within each role; aggregated workers as decode), the traffic since
    /// `window_start` and the latest pass of each active rank. Empties the window and the
    /// passes for the next tick.
    pub fn snapshot(
        &mut self,
        now: SimTime,
        tick_ordinal: u64,
        window_start: SimTime,
        fleet: &WorkerFleet,
        ledger: &mut Ledger,
        disaggregated: bool,
    ) -> ScalingSnapshot {
        let (prefill_role, decode_role) = match disaggregated {
            true => (Some(WorkerRole::Prefill), WorkerRole::Decode),
            false => (None, WorkerRole::Aggregated),
        };
        let prefill = prefill_role.map_or_else(RoleWorkers::default, |r| fleet.role_workers(r));
        let decode = fleet.role_workers(decode_role);
        let passes = RolePasses {
            prefill: self.prefill.take(now, &rank_keys(fleet, &prefill.active)),
            decode: self.decode.take(now, &rank_keys(fleet, &decode.active)),
        };
        for id in ledger.take_completed() {
            let r = ledger.record(id);
            let ms = |from: SimTime, to: Option<SimTime>| {
                to.map_or(0.0, |to| to.saturating_since(from).as_ns() as f64 / 1e6)
            };
            let first = r.first_token.unwrap_or(r.arrival);
            let (ttft_ms, gap_ms) = (ms(r.arrival, r.first_token), ms(first, r.completion));
            let tokens = u64::from(r.tokens_received);
            self.traffic
                .completed(u64::from(r.input_tokens), tokens, ttft_ms, gap_ms);
        }
        let duration_s = now.saturating_since(window_start).as_ns() as f64 / 1e9;
        let window = self.traffic.take(duration_s);
        let (prefill, decode) = (numbered(fleet, prefill), numbered(fleet, decode));
        ScalingSnapshot::new(
            tick_ordinal,
            now.as_ms_f64(),
            prefill,
            decode,
            window,
            passes,
        )
    }

    fn passes_mut(&mut self, role: WorkerRole) -> &mut LatestPasses {
        match role {
            WorkerRole::Prefill => &mut self.prefill,
            WorkerRole::Decode | WorkerRole::Aggregated => &mut self.decode,
        }
    }
}

impl LatestPasses {
    /// Rank `key` showed `pass` at `now`.
    fn record(&mut self, now: SimTime, key: RankKey, pass: PassSnapshot) {
        self.latest.insert(key, pass);
        self.last_shown.insert(key, now);
    }

    /// The passes to show at `now` of the active ranks `keys` (sorted): the ranks no longer
    /// active are forgotten, and an active rank that showed nothing for a second shows an
    /// idle pass (its cadence moves on in whole seconds, replacing an older pass it still
    /// holds). In (worker, rank) order; empties the passes.
    fn take(&mut self, now: SimTime, keys: &[RankKey]) -> Vec<PassSnapshot> {
        debug_assert!(keys.is_sorted(), "rank keys come sorted");
        let is_active = |key: &RankKey| keys.binary_search(key).is_ok();
        self.latest.retain(|key, _| is_active(key));
        self.last_shown.retain(|key, _| is_active(key));
        let interval = IDLE_SNAPSHOT_INTERVAL.as_ns();
        for &key in keys {
            let shown = self.last_shown.entry(key).or_insert(now);
            let elapsed = now.saturating_since(*shown).as_ns();
            if elapsed >= interval {
                let cadence = SimDuration::from_ns(elapsed / interval * interval);
                *shown = shown.saturating_add(cadence);
                let idle = PassSnapshot {
                    worker_id: key.0,
                    dp_rank: key.1,
                    ..PassSnapshot::default()
                };
                self.latest.insert(key, idle);
            }
        }
        std::mem::take(&mut self.latest).into_values().collect()
    }
}

/// The ranks of `workers` (global ids) as a policy names them, sorted.
fn rank_keys(fleet: &WorkerFleet, workers: &[u64]) -> Vec<RankKey> {
    let mut keys: Vec<RankKey> = Vec::new();
    for &worker in workers {
        let number = fleet.role_number(worker);
        let ranks = fleet.ranks_of(worker);
        keys.extend(ranks.map(|index| (number, fleet.rank_id(index).dp_rank)));
    }
    keys.sort_unstable();
    keys
}

/// `workers` (global ids) renumbered within their role, as the policy names them.
fn numbered(fleet: &WorkerFleet, mut workers: RoleWorkers) -> RoleWorkers {
    for list in [
        &mut workers.active,
        &mut workers.starting,
        &mut workers.draining,
    ] {
        for worker in list.iter_mut() {
            *worker = fleet.role_number(*worker);
        }
    }
    workers
}

#[cfg(test)]
mod tests {
    use super::{LatestPasses, PassSnapshot};
    use crate::time::SimTime;

    fn at_ms(ms: u64) -> SimTime {
        SimTime::from_ns(ms * 1_000_000)
    }

    fn pass(worker_id: u64, wall_time: f64) -> PassSnapshot {
        PassSnapshot {
            worker_id,
            wall_time,
            num_decode_requests: 1,
            ..PassSnapshot::default()
        }
    }

    fn idle(worker_id: u64) -> PassSnapshot {
        PassSnapshot {
            worker_id,
            ..PassSnapshot::default()
        }
    }

    #[test]
    fn a_rank_silent_for_a_second_shows_an_idle_pass_on_its_cadence() {
        let mut passes = LatestPasses::default();
        let keys = [(0, 0)];
        passes.record(at_ms(300), (0, 0), pass(0, 0.02));
        assert_eq!(passes.take(at_ms(1_000), &keys), vec![pass(0, 0.02)]);
        // 2.2 s since its pass: an idle one, and the cadence moves to 2.3 s (not to now).
        assert_eq!(passes.take(at_ms(2_500), &keys), vec![idle(0)]);
        assert_eq!(passes.take(at_ms(3_000), &keys), vec![]);
        assert_eq!(passes.take(at_ms(3_300), &keys), vec![idle(0)]);
    }

    #[test]
    fn an_idle_pass_replaces_a_pass_older_than_a_second() {
        let mut passes = LatestPasses::default();
        passes.record(at_ms(100), (0, 0), pass(0, 0.02));
        assert_eq!(passes.take(at_ms(1_500), &[(0, 0)]), vec![idle(0)]);
    }

    #[test]
    fn a_rank_first_seen_at_a_tick_starts_its_cadence_then() {
        let mut passes = LatestPasses::default();
        assert_eq!(passes.take(at_ms(5_000), &[(0, 0), (1, 0)]), vec![]);
        passes.record(at_ms(5_200), (1, 0), pass(1, 0.03));
        let shown = passes.take(at_ms(6_000), &[(0, 0), (1, 0)]);
        assert_eq!(shown, vec![idle(0), pass(1, 0.03)]);
    }

    #[test]
    fn a_rank_no_longer_active_shows_nothing_and_starts_afresh() {
        let mut passes = LatestPasses::default();
        passes.record(at_ms(100), (1, 0), pass(1, 0.02));
        assert_eq!(passes.take(at_ms(500), &[(0, 0)]), vec![]);
        // Active again at 1.6 s: its cadence starts then, not at its old pass.
        assert_eq!(passes.take(at_ms(1_600), &[(0, 0), (1, 0)]), vec![idle(0)]);
        assert_eq!(passes.take(at_ms(2_500), &[(1, 0)]), vec![]);
        assert_eq!(passes.take(at_ms(2_600), &[(1, 0)]), vec![idle(1)]);
    }
}
