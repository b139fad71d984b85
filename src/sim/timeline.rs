//! The timeline a run keeps when asked (`--timeline`): every pass (a run of skipped quiet
//! passes as one slice), the DRR deficit of each class and the router's active prefill tokens
//! on each rank as they change, and each request moved or aborted off a lost worker.
//! `report::render::timeline` turns it (with the run's records and fault marks) into a trace file.
//!
//! Off, a run holds `None` and each hook is one branch; on, each pass costs one
//! [`PassSlice`] and each change of a counter one [`CounterSample`]. Request slices are not
//! recorded here: the records already hold every instant they need.

use super::{SimConfig, WorkerPool};
use crate::scheduling::policy::PolicyClass;
use crate::scheduling::scheduler::Scheduler;
use crate::scheduling::types::WorkerWithDpRank;
use crate::time::SimTime;

/// Everything a run recorded for its timeline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// Every rank the run had, in the fleet's (worker_id, dp_rank) order: a [`PassSlice`]'s
    /// and a prefill sample's `rank`/`track` index this.
    pub ranks: Vec<RankTrack>,
    /// Passes and quiet runs, in the order they ended.
    pub passes: Vec<PassSlice>,
    /// Each class's unspent DRR credit in tokens (`track`: class index), when it changed.
    pub deficits: Vec<CounterSample>,
    /// The router's active prefill tokens on each rank (`track`: rank index), when it changed.
    pub prefill_loads: Vec<CounterSample>,
    /// Per pool, each class's busy threshold on its ranks in tokens (class index, tokens),
    /// for the classes that have one.
    pub busy_thresholds: Vec<Vec<(usize, u64)>>,
    /// Requests in flight on a worker when the router heard it was lost.
    pub migrations: Vec<MigrationMark>,
}

/// One rank's track.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RankTrack {
    pub id: WorkerWithDpRank,
    /// Its pool's index in the run's pools.
    pub pool: usize,
}

/// One pass on a rank, or a run of quiet passes skipped through as one.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PassSlice {
    /// Index in [`Timeline::ranks`].
    pub rank: u32,
    pub start: SimTime,
    pub end: SimTime,
    /// Passes it stands for: 1 for a formed pass, the run's length for a quiet run.
    pub passes: u32,
    /// Requests in the running batch (a quiet run's batch does not change).
    pub batch_size: u32,
    /// Uncached prompt tokens computed.
    pub prefill_tokens: u64,
    /// Other tokens computed (decode steps, recomputed output), over all its passes.
    pub decode_tokens: u64,
    /// KV blocks held by requests at its start.
    pub kv_blocks: u64,
    /// Its worker went down while it ran: it ends there, its work lost.
    pub lost: bool,
}

/// A counter's value from `at` on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CounterSample {
    pub at: SimTime,
    /// Which counter of its kind (a class or a rank index).
    pub track: u32,
    pub value: u64,
}

/// A request on worker `worker` when the router heard at `at` that it was lost.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MigrationMark {
    pub at: SimTime,
    pub worker: u64,
    /// The request's row.
    pub row: u64,
    /// Re-routed (true) or aborted, its migrations used up.
    pub migrated: bool,
}

/// The counters' recorder: the samples so far and what each counter last showed.
#[derive(Debug, Default)]
pub(super) struct CounterRecorder {
    deficits: Vec<CounterSample>,
    prefill_loads: Vec<CounterSample>,
    last_deficit: Vec<Option<u64>>,
    last_prefill: Vec<Option<u64>>,
    /// The fleet's ranks, in index order.
    ranks: Vec<WorkerWithDpRank>,
    /// Ranks whose router load may have changed this instant.
    dirty: Vec<WorkerWithDpRank>,
    /// Every rank may have changed (rare events: faults, ticks, refusals).
    all_dirty: bool,
    migrations: Vec<MigrationMark>,
}

impl CounterRecorder {
    /// A recorder whose first sample shows every counter.
    pub fn new() -> CounterRecorder {
        CounterRecorder {
            all_dirty: true,
            ..CounterRecorder::default()
        }
    }

    /// The router's load on `rank` may have changed.
    pub fn touch(&mut self, rank: WorkerWithDpRank) {
        self.dirty.push(rank);
    }

    /// The router's load on any rank may have changed.
    pub fn touch_all(&mut self) {
        self.all_dirty = true;
    }

    pub fn migration(&mut self, mark: MigrationMark) {
        self.migrations.push(mark);
    }

    /// Samples at the end of instant `now` every counter that changed. The fleet has
    /// `rank_count` ranks, rank `i` being `rank_id(i)`, in (worker_id, dp_rank) order.
    pub fn sample(
        &mut self,
        now: SimTime,
        core: &Scheduler,
        rank_count: usize,
        rank_id: impl Fn(usize) -> WorkerWithDpRank,
    ) {
        let classes = core.profile().classes().len();
        self.last_deficit.resize(classes, None);
        for class in 0..classes {
            let value = core.deficit(class);
            push_if_changed(
                &mut self.deficits,
                &mut self.last_deficit,
                now,
                class,
                value,
            );
        }
        if self.ranks.len() != rank_count {
            // Workers only join: the known ranks keep their indexes.
            self.ranks = (0..rank_count).map(rank_id).collect();
            self.last_prefill.resize(rank_count, None);
            self.all_dirty = true;
        }
        let load = core.load();
        if std::mem::take(&mut self.all_dirty) {
            self.dirty.clear();
            for (index, &rank) in self.ranks.iter().enumerate() {
                let value = load.active_prefill_tokens(rank);
                let last = &mut self.last_prefill;
                push_if_changed(&mut self.prefill_loads, last, now, index, value);
            }
            return;
        }
        for rank in self.dirty.drain(..) {
            let Ok(index) = self.ranks.binary_search(&rank) else {
                continue;
            };
            let value = load.active_prefill_tokens(rank);
            let last = &mut self.last_prefill;
            push_if_changed(&mut self.prefill_loads, last, now, index, value);
        }
    }

    /// The counters' part of the timeline.
    pub fn finish(self, timeline: &mut Timeline) {
        timeline.deficits = self.deficits;
        timeline.prefill_loads = self.prefill_loads;
        timeline.migrations = self.migrations;
    }
}

/// Appends a sample of `track` at `now` unless it shows what the track last showed.
fn push_if_changed(
    samples: &mut Vec<CounterSample>,
    last: &mut [Option<u64>],
    now: SimTime,
    track: usize,
    value: u64,
) {
    if last[track] == Some(value) {
        return;
    }
    last[track] = Some(value);
    samples.push(CounterSample {
        at: now,
        track: track as u32,
        value,
    });
}

/// What a rank's pass in progress will say when it ends.
#[derive(Copy, Clone, Debug, Default)]
pub(super) struct PassArgs {
    pub passes: u32,
    pub batch_size: u32,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    pub kv_blocks: u64,
}

impl PassArgs {
    /// The slice of rank `rank`'s pass from `start` to `end`.
    pub fn slice(self, rank: usize, start: SimTime, end: SimTime, lost: bool) -> PassSlice {
        PassSlice {
            rank: rank as u32,
            start,
            end,
            passes: self.passes,
            batch_size: self.batch_size,
            prefill_tokens: self.prefill_tokens,
            decode_tokens: self.decode_tokens,
            kv_blocks: self.kv_blocks,
            lost,
        }
    }
}

/// The timeline of a run of `config` that `recorder` kept, over the fleet's `ranks` and
/// `passes`.
pub(super) fn finish(
    recorder: CounterRecorder,
    ranks: Vec<RankTrack>,
    passes: Vec<PassSlice>,
    config: &SimConfig,
) -> Box<Timeline> {
    let mut timeline = Timeline {
        busy_thresholds: busy_thresholds(config),
        ranks,
        passes,
        ..Timeline::default()
    };
    recorder.finish(&mut timeline);
    Box::new(timeline)
}

/// Per pool, each class's busy threshold on the pool's ranks in tokens: its absolute one, or
/// its fraction of the pool's batch token budget (the lower, with both), for the timeline.
fn busy_thresholds(config: &SimConfig) -> Vec<Vec<(usize, u64)>> {
    let classes = config.profile.classes();
    let threshold = |class: &PolicyClass, budget: u64| {
        let frac = class
            .prefill_busy_threshold_frac
            .map(|f| (f * budget as f64).floor() as u64);
        match (class.prefill_busy_threshold_tokens, frac) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    };
    let of_pool = |pool: &WorkerPool| {
        let budget = pool.capacity().max_batched_tokens;
        let with = classes.iter().enumerate();
        with.filter_map(|(i, c)| threshold(c, budget).map(|t| (i, t)))
            .collect()
    };
    config.pools.iter().map(of_pool).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_sampled_only_when_its_value_changes() {
        let mut samples = Vec::new();
        let mut last = vec![None; 2];
        let at = |ns| SimTime::from_ns(ns);
        push_if_changed(&mut samples, &mut last, at(0), 1, 0);
        push_if_changed(&mut samples, &mut last, at(5), 1, 0);
        push_if_changed(&mut samples, &mut last, at(9), 1, 7);
        push_if_changed(&mut samples, &mut last, at(9), 0, 7);
        let tracks: Vec<(u64, u32, u64)> = samples
            .iter()
            .map(|s| (s.at.as_ns(), s.track, s.value))
            .collect();
        assert_eq!(tracks, vec![(0, 1, 0), (9, 1, 7), (9, 0, 7)]);
    }
}
