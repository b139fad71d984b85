//! The worker fleet: every rank of every pool, the passes they run (or the runs of quiet
//! passes they skip through), their pass time, and workers going down, coming back and
//! joining. The only place workers are built, so every worker gets the same set-up.

use super::ledger::Ledger;
use super::scaling::RoleWorkers;
use super::timeline::{PassArgs, PassSlice, RankTrack};
use super::{FaultMark, PoolUsage, WorkerLife, WorkerPool};
use crate::memory::CACHE_RESIDENT_BLOCKS;
use crate::mocker::{
    MockRequest, PassMetrics, PassOutput, Reservation, StepMemo, Worker, WorkerRole, WorkerSetup,
};
use crate::scheduling::select::{WorkerConfig, WorkerSet};
use crate::scheduling::types::{RequestId, WorkerWithDpRank};
use crate::time::{SimDuration, SimTime};
use std::collections::{BTreeMap, BTreeSet};

/// Most slots the step-duration table a pool's ranks share grows to (1.5 MiB).
const SHARED_STEP_MEMO_SLOTS: usize = 1 << 16;

/// Passes a worker plans ahead in one quiet run. A run cut short by a dispatch wastes the
/// planning of its later passes (in the bench's replays, 25 to 45% of those planned, at tens
/// of ns each); a longer run just ends and plans the next.
const QUIET_RUN_PASSES: usize = 64;

/// Blocks the router's index and the ranks' pools make room for at start, in all: a full
/// cache for a fleet of the bench's size (32 ranks of 16,384 blocks), spread thinner over a
/// larger fleet, whose tables then grow as they fill. Bounds what a run of a huge fleet
/// touches before its first request.
pub(super) const RESERVED_BLOCKS: u64 = 1 << 20;

/// Each of `ranks` ranks' share of [`RESERVED_BLOCKS`].
pub(super) fn reserved_blocks_per_rank(ranks: usize) -> u64 {
    RESERVED_BLOCKS / (ranks as u64).max(1)
}

/// The most blocks the caches of the pools whose role `routed` accepts can hold together, up
/// to [`RESERVED_BLOCKS`]: what the index of the router that hears those pools' events makes
/// room for. A disaggregated run's prefill router hears only the prefill pools: sized for the
/// decode pools too, its table would be twice as large for the same blocks, their entries
/// spread over twice as many fresh pages.
pub(super) fn cached_blocks_hint(
    pools: &[WorkerPool],
    routed: impl Fn(WorkerRole) -> bool,
) -> usize {
    let heard = pools.iter().filter(|pool| routed(pool.engine.common.role));
    fleet_blocks(heard).min(RESERVED_BLOCKS) as usize
}

/// The most blocks the pools' caches can hold together.
fn fleet_blocks<'a>(pools: impl IntoIterator<Item = &'a WorkerPool>) -> u64 {
    pools
        .into_iter()
        .map(|p| {
            let ranks = u64::from(p.count).saturating_mul(u64::from(p.engine.common.dp_size));
            ranks.saturating_mul(p.capacity().kv_blocks)
        })
        .fold(0, u64::saturating_add)
}

/// Whether the ranks of `pools` warm their pools' probes: when the pools together can hold
/// more blocks than the caches do ([`CACHE_RESIDENT_BLOCKS`]).
pub(super) fn warms_probes(pools: &[WorkerPool]) -> bool {
    fleet_blocks(pools) > CACHE_RESIDENT_BLOCKS as u64
}

/// The workers of `pools` whose role `routed` accepts (ids assigned pool by pool from 0 over
/// every pool), each as a router discovers it: its pool's DP ranks and batch token budget
/// (which busy fractions multiply).
pub(super) fn worker_set_of(
    pools: &[WorkerPool],
    routed: impl Fn(WorkerRole) -> bool,
) -> WorkerSet {
    let mut set = WorkerSet::default();
    for (id, _, pool) in worker_pools(pools) {
        if routed(pool.engine.common.role) {
            set.insert(id, worker_config(pool));
        }
    }
    set
}

/// How the router discovers one worker of `pool`.
pub(super) fn worker_config(pool: &WorkerPool) -> WorkerConfig {
    WorkerConfig {
        dp_start: 0,
        dp_size: pool.engine.common.dp_size,
        max_num_batched_tokens: Some(pool.capacity().max_batched_tokens),
        ..WorkerConfig::default()
    }
}

/// Every worker id with its pool's index and the pool, in id order (pool by pool).
fn worker_pools(pools: &[WorkerPool]) -> impl Iterator<Item = (u64, usize, &WorkerPool)> {
    pools
        .iter()
        .enumerate()
        .flat_map(|(index, pool)| std::iter::repeat_n((index, pool), pool.count as usize))
        .zip(0u64..)
        .map(|((index, pool), id)| (id, index, pool))
}

/// One worker rank and its pass in flight.
struct RankSlot {
    id: WorkerWithDpRank,
    /// The index of the rank's pool in the fleet's pools.
    pool: usize,
    worker: Box<dyn Worker>,
    /// A pass (or a run of quiet passes) is running: its end is scheduled.
    in_pass: bool,
    /// When the running pass (or quiet run) started.
    pass_start: SimTime,
    /// Time spent in passes that have ended.
    busy: SimDuration,
    /// The ends of the quiet passes planned and not yet applied (empty: the pass running,
    /// if any, is an ordinary one, its results in `output`).
    quiet_ends: Vec<SimTime>,
    output: PassOutput,
    /// Passes in a row at `empty_at` that computed nothing and only preempted.
    empty_passes: u64,
    empty_at: SimTime,
    /// When its pass in progress ends (a lock-step worker's pass ends for all its ranks).
    pass_end: SimTime,
    /// The worker is down (a fault): it holds nothing and receives nothing.
    down: bool,
    /// Bumped when the rank goes down or its quiet run is cut, so the end of its lost pass
    /// (or of the run as first planned) is ignored.
    epoch: u64,
    /// What the pass in progress records when it ends (kept only for a timeline).
    pass_args: PassArgs,
}

/// A pass end to schedule: rank `rank`'s pass (or quiet run) of epoch `epoch` ends at `at`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct PassEndAt {
    pub at: SimTime,
    pub rank: usize,
    pub epoch: u64,
}

/// What the end of a rank's pass left to deliver.
pub(super) enum PassEnded {
    /// The end was stale (see [`RankSlot::epoch`]): nothing happened.
    Stale,
    /// A run of quiet passes ended: its tokens are counted, nothing else leaves the worker.
    Quiet,
    /// A formed pass ended: its output is delivered now, then handed back with
    /// [`WorkerFleet::give_back`].
    Formed(PassOutput),
}

/// Every rank of a run, in (worker_id, dp_rank) order (the order of [`WorkerSet::ranks`]).
pub(super) struct WorkerFleet {
    pools: Vec<WorkerPool>,
    ranks: Vec<RankSlot>,
    /// One table of step durations per pool: its ranks run one engine, and batches recur
    /// across them.
    step_memos: Vec<StepMemo>,
    /// Workers skip quiet passes (see `sim::skips_quiet_passes`).
    skip_quiet: bool,
    /// Workers count middle tokens instead of listing them ([`Worker::count_middle_tokens`]).
    count_middle: bool,
    /// Workers report each pass's metrics ([`Worker::record_pass_metrics`]).
    pass_metrics: bool,
    /// Blocks each worker makes room for when it is built.
    reserved_per_rank: u64,
    /// Workers warm their pools' probes ([`warms_probes`]).
    warm_probes: bool,
    /// Ranks to start a pass at the end of the current instant (phase 3), as marked (maybe
    /// more than once): a list, sorted when taken, since nearly every instant takes it (a
    /// set allocated and freed a node each time).
    starts_due: Vec<usize>,
    /// Lock-step ranks with work whose worker was in a pass: they start with its next one.
    waiting_for_worker: BTreeSet<usize>,
    /// Lock-step workers (their first rank) that started a pass in the current instant.
    lockstep_started: BTreeSet<usize>,
    /// Passes `(rank, start, end, epoch)` that ended since the ledger's change epoch was
    /// last bumped (all of one epoch): the only ones that may reach past the makespan (and
    /// then only in a run a limit stopped).
    passes_since_change: Vec<(usize, SimTime, SimTime, u64)>,
    /// Workers that joined, with their pool.
    joined: Vec<(u64, usize)>,
    /// Every worker id given so far (initial, added, gone): its role and its life.
    lives: Vec<WorkerLife>,
    /// Workers added and not ready yet: their pool and when they were asked for.
    starting: BTreeMap<u64, (usize, SimTime)>,
    /// Workers draining (scaled down): they finish what they hold, then leave.
    draining: BTreeSet<u64>,
    /// Worker faults as they happened, for the result.
    marks: Vec<FaultMark>,
    /// The next free worker id.
    next_worker: u64,
    /// Preemptions of worker states discarded when their worker went down.
    preemptions_lost: u64,
    /// Every pass that ended, when the run keeps a timeline (`None`: one branch a pass).
    pass_log: Option<Vec<PassSlice>>,
}

impl WorkerFleet {
    /// The workers of `pools`, every rank empty and up.
    pub fn new(pools: Vec<WorkerPool>, skip_quiet: bool) -> WorkerFleet {
        let step_memos = pools
            .iter()
            .map(|_| StepMemo::new(SHARED_STEP_MEMO_SLOTS))
            .collect();
        let ranks: usize = pools
            .iter()
            .map(|p| p.count as usize * p.engine.common.dp_size as usize)
            .sum();
        let mut fleet = WorkerFleet {
            step_memos,
            skip_quiet,
            count_middle: false,
            pass_metrics: false,
            reserved_per_rank: reserved_blocks_per_rank(ranks),
            warm_probes: warms_probes(&pools),
            ranks: Vec::new(),
            starts_due: Vec::new(),
            waiting_for_worker: BTreeSet::new(),
            lockstep_started: BTreeSet::new(),
            passes_since_change: Vec::new(),
            joined: Vec::new(),
            lives: worker_pools(&pools)
                .map(|(_, index, pool)| WorkerLife::asked(index, pool, SimTime::ZERO))
                .map(|life| life.ready_at(SimTime::ZERO))
                .collect(),
            starting: BTreeMap::new(),
            draining: BTreeSet::new(),
            marks: Vec::new(),
            next_worker: worker_pools(&pools).count() as u64,
            preemptions_lost: 0,
            pass_log: None,
            pools,
        };
        let workers: Vec<(u64, usize)> = worker_pools(&fleet.pools)
            .map(|(id, index, _)| (id, index))
            .collect();
        for (worker, pool) in workers {
            fleet.add_worker(worker, pool);
        }
        fleet
    }

    /// Builds a worker rank of pool `pool` through the pool's kind: the one place workers
    /// are made, every one with the same set-up (room for blocks, whether quiet passes are
    /// skipped, warm probes, counted middle tokens; the pool's step table is lent to each of
    /// its passes).
    fn build(&self, pool: usize, id: WorkerWithDpRank) -> Box<dyn Worker> {
        let pool = &self.pools[pool];
        let setup = WorkerSetup {
            engine: &pool.engine,
            reserved_blocks: self.reserved_per_rank,
            skips_quiet_passes: self.skip_quiet,
            warm_probes: self.warm_probes,
            count_middle_tokens: self.count_middle,
            pass_metrics: self.pass_metrics,
        };
        pool.kind().build(id, &setup)
    }

    /// Has every worker, of now and to come, count middle tokens instead of listing them: for
    /// a run that delivers tokens directly and takes requests off a rank only by their last
    /// token ([`Worker::count_middle_tokens`]).
    pub fn count_middle_tokens(&mut self) {
        self.count_middle = true;
        for slot in &mut self.ranks {
            slot.worker.count_middle_tokens();
        }
    }

    /// Has every worker, of now and to come, report each pass's metrics (a scaling policy
    /// reads them).
    pub fn record_pass_metrics(&mut self) {
        self.pass_metrics = true;
        for slot in &mut self.ranks {
            slot.worker.record_pass_metrics();
        }
    }

    /// At the end of a run: credits to `ledger` the middle tokens counted for requests still
    /// on a rank, as far as their passes were delivered, and those that the last tokens of a
    /// pass in flight carry (counted in passes before it, which were delivered; the pass
    /// itself never reached anyone).
    pub fn credit_unlisted_tokens(&mut self, ledger: &mut Ledger) {
        for slot in &mut self.ranks {
            // Empty unless a formed pass is in flight: a delivered one is handed back emptied.
            for token in &slot.output.tokens {
                ledger.credit(token.id, u64::from(token.middle_unlisted));
            }
            slot.worker
                .credit_unlisted_tokens(&mut |id, tokens| ledger.credit(id, tokens));
        }
    }

    /// Adds the empty, up ranks of worker `worker` of pool `pool` (ids only grow, so the
    /// ranks stay in id order).
    fn add_worker(&mut self, worker: u64, pool: usize) {
        for dp_rank in 0..self.pools[pool].engine.common.dp_size {
            let id = WorkerWithDpRank::new(worker, dp_rank);
            let slot = RankSlot {
                id,
                pool,
                worker: self.build(pool, id),
                in_pass: false,
                pass_start: SimTime::ZERO,
                pass_end: SimTime::ZERO,
                busy: SimDuration::ZERO,
                quiet_ends: Vec::new(),
                output: PassOutput::default(),
                empty_passes: 0,
                empty_at: SimTime::ZERO,
                down: false,
                epoch: 0,
                pass_args: PassArgs::default(),
            };
            self.ranks.push(slot);
        }
    }

    /// Keeps every pass from now on, for the run's timeline.
    pub fn record_passes(&mut self) {
        self.pass_log = Some(Vec::new());
    }

    /// Every rank's track and the passes kept (none unless [`Self::record_passes`]).
    pub fn take_passes(&mut self) -> (Vec<RankTrack>, Vec<PassSlice>) {
        let ranks = self.ranks.iter();
        let tracks = ranks.map(|s| RankTrack {
            id: s.id,
            pool: s.pool,
        });
        (tracks.collect(), self.pass_log.take().unwrap_or_default())
    }

    /// The index of rank `rank`, if the fleet has it.
    pub fn rank_index(&self, rank: WorkerWithDpRank) -> Option<usize> {
        self.ranks.binary_search_by_key(&rank, |r| r.id).ok()
    }

    /// Each rank with its pool's index and the batch token budget its worker runs with.
    #[cfg(test)]
    pub fn rank_budgets(&self) -> Vec<(WorkerWithDpRank, usize, u64)> {
        let budget = |s: &RankSlot| s.worker.load().max_batched_tokens;
        self.ranks
            .iter()
            .map(|s| (s.id, s.pool, budget(s)))
            .collect()
    }

    /// The rank at `index`.
    pub fn rank_id(&self, index: usize) -> WorkerWithDpRank {
        self.ranks[index].id
    }

    /// How many ranks the fleet has.
    pub fn rank_count(&self) -> usize {
        self.ranks.len()
    }

    /// The role of the rank at `index`'s pool.
    pub fn role(&self, index: usize) -> WorkerRole {
        self.pools[self.ranks[index].pool].engine.common.role
    }

    /// Whether the rank at `index` is running a pass.
    pub fn in_pass(&self, index: usize) -> bool {
        match self.is_lockstep(index) {
            true => self.worker_in_pass(index),
            false => self.ranks[index].in_pass,
        }
    }

    /// Whether the rank at `index` runs in lock-step with its worker's other ranks: 1.6.1
    /// steps a worker's data-parallel ranks together, in every role, each pass lasting as
    /// long as its slowest rank's.
    fn is_lockstep(&self, index: usize) -> bool {
        self.pools[self.ranks[index].pool].engine.common.dp_size > 1
    }

    /// When the pass of lock-step rank `index` was the last of its worker's ranks' to end,
    /// the worker's other ranks that are up (the worker's pass end is theirs too). Empty
    /// otherwise.
    pub fn lockstep_peers(&self, index: usize) -> Vec<usize> {
        if !self.is_lockstep(index) || self.worker_in_pass(index) {
            return Vec::new();
        }
        let worker = self.ranks[index].id.worker_id;
        self.ranks_of(worker)
            .filter(|&i| i != index && !self.ranks[i].down)
            .collect()
    }

    /// Whether any rank of the worker of the rank at `index` is in a pass.
    fn worker_in_pass(&self, index: usize) -> bool {
        let worker = self.ranks[index].id.worker_id;
        self.ranks_of(worker).any(|i| self.ranks[i].in_pass)
    }

    /// Decode rank `index`, between passes, is asked to reserve blocks for `request`'s
    /// handoff (see [`crate::mocker::Handoffs::reserve_handoff`]). Err (a bug) if the worker refuses it, or
    /// its kind takes no handoffs.
    pub fn reserve_handoff(
        &mut self,
        index: usize,
        request: MockRequest,
    ) -> Result<Reservation, String> {
        let slot = &mut self.ranks[index];
        let Some(handoffs) = slot.worker.handoffs() else {
            return Err(format!("{}: its kind of worker takes no handoffs", slot.id));
        };
        handoffs
            .reserve_handoff(request)
            .map_err(|e| format!("{}: {e}", slot.id))
    }

    /// Tells decode rank `index` whether handoffs wait for room on it.
    pub fn set_handoffs_pending(&mut self, index: usize, pending: bool) {
        if let Some(handoffs) = self.ranks[index].worker.handoffs() {
            handoffs.set_handoffs_pending(pending);
        }
    }

    /// Request `id`'s transfer to decode rank `index` landed, between its passes: it joins
    /// the rank's next pass. False if the rank had reserved nothing for it.
    pub fn activate_handoff(&mut self, index: usize, id: RequestId) -> bool {
        let worker = &mut self.ranks[index].worker;
        let activated = worker.handoffs().is_some_and(|h| h.activate_handoff(id));
        self.starts_due.push(index);
        activated
    }

    /// Prefill rank `index` lets go of held request `id`; false if it holds no such request.
    pub fn release_held(&mut self, index: usize, id: RequestId) -> bool {
        let worker = &mut self.ranks[index].worker;
        worker.handoffs().is_some_and(|h| h.release_held(id))
    }

    /// Whether the worker of the rank at `index` is down.
    pub fn is_down(&self, index: usize) -> bool {
        self.ranks[index].down
    }

    /// The indexes of worker `worker`'s ranks.
    pub fn ranks_of(&self, worker: u64) -> std::ops::Range<usize> {
        let start = self.ranks.partition_point(|r| r.id.worker_id < worker);
        let end = self.ranks.partition_point(|r| r.id.worker_id <= worker);
        start..end
    }

    /// The pool of worker `worker`, if the fleet has it.
    pub fn pool_of(&self, worker: u64) -> Option<&WorkerPool> {
        let slot = self.ranks.get(self.ranks_of(worker).start)?;
        Some(&self.pools[slot.pool])
    }

    /// Request `request` reaches the rank at `index` (up) at `now`: it joins the rank's next
    /// pass. A quiet run in progress is settled first, which may end it at a new instant
    /// (returned, to schedule). Err (a bug) if the worker refuses the request.
    pub fn deliver(
        &mut self,
        now: SimTime,
        index: usize,
        request: MockRequest,
        ledger: &mut Ledger,
    ) -> Result<Option<PassEndAt>, String> {
        let end = self.settle(now, index, ledger);
        let slot = &mut self.ranks[index];
        if let Err(e) = slot.worker.add_request(now, request) {
            return Err(format!("{}: {e}", slot.id));
        }
        if !slot.in_pass {
            self.starts_due.push(index);
        }
        Ok(end)
    }

    /// The ranks due to start a pass at the end of this instant, in rank order, each once.
    pub fn take_starts_due(&mut self) -> Vec<usize> {
        let free: Vec<usize> = self
            .waiting_for_worker
            .iter()
            .copied()
            .filter(|&i| !self.worker_in_pass(i))
            .collect();
        for index in free {
            self.waiting_for_worker.remove(&index);
            self.starts_due.push(index);
        }
        self.starts_due.sort_unstable();
        self.starts_due.dedup();
        std::mem::take(&mut self.starts_due)
    }

    /// Starts a pass (or a run of quiet passes) on the rank at `index` at `now`, if it has
    /// work and none running; returns its end. Admissions are recorded in `ledger`. Err (a
    /// bug) if the pass breaks the rank's liveness rule.
    pub fn start_pass(
        &mut self,
        now: SimTime,
        index: usize,
        allow_quiet: bool,
        ledger: &mut Ledger,
    ) -> Result<Option<PassEndAt>, String> {
        if self.ranks[index].in_pass || !self.ranks[index].worker.has_work() {
            return Ok(None);
        }
        let lockstep = self.is_lockstep(index);
        if lockstep {
            let first = self.ranks_of(self.ranks[index].id.worker_id).start;
            if self.worker_in_pass(index) && !self.lockstep_started.contains(&first) {
                self.waiting_for_worker.insert(index);
                return Ok(None);
            }
            self.lockstep_started.insert(first);
        }
        let allow_quiet = allow_quiet && !lockstep;
        let slot = &mut self.ranks[index];
        let rank = index;
        let memo = &mut self.step_memos[slot.pool];
        if self.skip_quiet
            && allow_quiet
            && let Some(quiet) = slot.worker.quiet_runs()
        {
            let ends = &mut slot.quiet_ends;
            quiet.plan_quiet_run(now, QUIET_RUN_PASSES, memo, ends);
            if let Some(&at) = ends.last() {
                slot.in_pass = true;
                slot.pass_start = now;
                if self.pass_log.is_some() {
                    slot.pass_args = quiet_run_args(slot.worker.load());
                }
                let epoch = slot.epoch;
                return Ok(Some(PassEndAt { at, rank, epoch }));
            }
        }
        let at = slot.worker.start_pass(now, memo, &mut slot.output);
        check_pass_progress(slot, now, at)?;
        slot.in_pass = true;
        slot.pass_start = now;
        slot.pass_end = at;
        if self.pass_log.is_some() {
            slot.pass_args = formed_pass_args(slot.worker.load(), &slot.output);
        }
        let role = self.pools[slot.pool].engine.common.role;
        for admitted in &slot.output.admitted {
            ledger.admitted(now, admitted.id, role, admitted);
        }
        let epoch = slot.epoch;
        Ok(Some(PassEndAt { at, rank, epoch }))
    }

    /// The metrics of rank `index`'s pass in flight, if it reports them.
    pub fn pass_metrics_mut(&mut self, index: usize) -> Option<&mut PassMetrics> {
        self.ranks[index].output.metrics.as_deref_mut()
    }

    /// After the passes of an instant started: each lock-step worker that started one ends it
    /// on all its ranks in the pass at once, when the slowest ends. Returns the moved ends (the
    /// ones scheduled at the starts go stale), in rank order.
    pub fn align_lockstep(&mut self) -> Vec<PassEndAt> {
        let mut moved = Vec::new();
        for first in std::mem::take(&mut self.lockstep_started) {
            let ranks = self.ranks_of(self.ranks[first].id.worker_id);
            let in_pass: Vec<usize> = ranks.filter(|&i| self.ranks[i].in_pass).collect();
            if in_pass.len() < 2 {
                continue;
            }
            let at = in_pass.iter().map(|&i| self.ranks[i].pass_end).max();
            let at = at.expect("two ranks are in the pass");
            for rank in in_pass {
                let slot = &mut self.ranks[rank];
                slot.pass_end = at;
                // Each rank's pass lasts as long as its worker's.
                if let Some(metrics) = &mut slot.output.metrics {
                    metrics.duration = at.saturating_since(slot.pass_start);
                }
                slot.epoch += 1;
                let epoch = slot.epoch;
                moved.push(PassEndAt { at, rank, epoch });
            }
        }
        moved
    }

    /// Before an input reaches a rank in a quiet run at `now`: applies the passes over by
    /// then, and cuts the run after the pass in progress (whose end is returned afresh, the
    /// old one going stale with a new epoch), so the input joins the next pass as it would
    /// pass by pass. A pass ending exactly at `now` is still in progress: pass by pass its end
    /// event was scheduled at its start, after an input that was on its way before then (a
    /// notification the router heard late), so that input reaches the rank first and joins
    /// the pass after it.
    pub fn settle(&mut self, now: SimTime, index: usize, ledger: &mut Ledger) -> Option<PassEndAt> {
        let slot = &mut self.ranks[index];
        let done = slot.quiet_ends.partition_point(|&end| end < now);
        if done > 0 {
            self.apply_quiet(index, done, ledger);
        }
        let slot = &mut self.ranks[index];
        let planned = slot.quiet_ends.len();
        if done == 0 && planned <= 1 {
            return None; // no run, or its last pass is in progress: its end stands
        }
        slot.epoch += 1;
        if planned == 0 {
            self.close_pass(now, index, ledger);
            return None;
        }
        slot.quiet_ends.truncate(1);
        let (at, epoch) = (slot.quiet_ends[0], slot.epoch);
        Some(PassEndAt {
            at,
            rank: index,
            epoch,
        })
    }

    /// Applies a rank's first `count` planned quiet passes: its running requests each get
    /// `count` tokens.
    fn apply_quiet(&mut self, index: usize, count: usize, ledger: &mut Ledger) {
        let slot = &mut self.ranks[index];
        let last_end = slot.quiet_ends[count - 1];
        let quiet = slot
            .worker
            .quiet_runs()
            .expect("only a quiet rank plans runs");
        quiet.apply_quiet_run(count as u64, last_end);
        slot.quiet_ends.drain(..count);
        if self.pass_log.is_some() {
            let args = &mut slot.pass_args;
            args.passes += count as u32;
            args.decode_tokens += count as u64 * u64::from(args.batch_size);
        }
        slot.worker
            .for_each_running(&mut |id| ledger.credit(id, count as u64));
    }

    /// The rank's pass (or quiet run) ended at `now`: its time counts as busy.
    fn close_pass(&mut self, now: SimTime, index: usize, ledger: &Ledger) {
        let slot = &mut self.ranks[index];
        slot.in_pass = false;
        slot.busy = slot
            .busy
            .saturating_add(now.saturating_since(slot.pass_start));
        let epoch = ledger.change_epoch();
        if self
            .passes_since_change
            .last()
            .is_some_and(|p| p.3 != epoch)
        {
            self.passes_since_change.clear();
        }
        let pass = (index, slot.pass_start, now, epoch);
        self.passes_since_change.push(pass);
        if let Some(log) = &mut self.pass_log {
            log.push(slot.pass_args.slice(index, slot.pass_start, now, false));
        }
    }

    /// The end of epoch `epoch` of the rank at `index`'s pass is due at `now`.
    pub fn end_pass(
        &mut self,
        now: SimTime,
        index: usize,
        epoch: u64,
        ledger: &mut Ledger,
    ) -> PassEnded {
        if self.ranks[index].epoch != epoch {
            return PassEnded::Stale;
        }
        if !self.ranks[index].quiet_ends.is_empty() {
            self.apply_quiet(index, self.ranks[index].quiet_ends.len(), ledger);
            self.close_pass(now, index, ledger);
            if self.ranks[index].worker.has_work() {
                self.starts_due.push(index);
            }
            return PassEnded::Quiet;
        }
        let output = std::mem::take(&mut self.ranks[index].output);
        self.close_pass(now, index, ledger);
        PassEnded::Formed(output)
    }

    /// Hands a formed pass's delivered output back to its rank (its lists are reused), and
    /// marks the rank to start its next pass if it has work.
    pub fn give_back(&mut self, index: usize, output: PassOutput) {
        let slot = &mut self.ranks[index];
        slot.output = output;
        slot.worker.take_back(&mut slot.output);
        if slot.worker.has_work() {
            self.starts_due.push(index);
        }
    }

    /// A run a limit stopped at `at`: the quiet passes over by then count, as they would
    /// pass by pass.
    pub fn apply_quiet_until(&mut self, at: SimTime, ledger: &mut Ledger) {
        for index in 0..self.ranks.len() {
            let done = self.ranks[index].quiet_ends.partition_point(|&e| e <= at);
            if done > 0 {
                self.apply_quiet(index, done, ledger);
            }
        }
    }

    /// A cancellation reaches the rank at `index`: it frees what the request holds there,
    /// if anything.
    pub fn drop_request(&mut self, index: usize, id: RequestId) {
        debug_assert!(
            self.ranks[index].quiet_ends.is_empty(),
            "runs with faults step pass by pass"
        );
        let _ = self.ranks[index].worker.remove_request(id);
    }

    /// Worker `worker` stops at `now`: its passes in flight are lost, its state is discarded
    /// (it returns, if ever, with an empty cache). Returns the requests it held, rank by rank
    /// in id order: what it was running or queueing, and what its lost passes finished (the
    /// worker already let go of those, but their ends never leave it).
    pub fn worker_down(&mut self, now: SimTime, worker: u64) -> Vec<RequestId> {
        let name = self.worker_name(worker);
        self.marks.push(FaultMark::WorkerDown {
            worker,
            name,
            from: now,
            until: None,
        });
        let mut lost = Vec::new();
        for index in self.ranks_of(worker) {
            if self.ranks[index].down {
                continue;
            }
            let fresh = self.build(self.ranks[index].pool, self.ranks[index].id);
            let slot = &mut self.ranks[index];
            if slot.in_pass {
                slot.busy = slot
                    .busy
                    .saturating_add(now.saturating_since(slot.pass_start));
                slot.in_pass = false;
                if let Some(log) = &mut self.pass_log {
                    log.push(slot.pass_args.slice(index, slot.pass_start, now, true));
                }
            }
            slot.epoch += 1;
            slot.down = true;
            let out = &slot.output;
            let finished = out.tokens.iter().map(|t| t.id);
            let ended = out.finished_empty.iter().copied();
            let refused = out.rejected.iter().map(|r| r.id);
            let mut holds = Vec::new();
            slot.worker.held_requests(&mut holds);
            let held: BTreeSet<RequestId> = holds
                .into_iter()
                .chain(finished.chain(ended).chain(refused))
                .collect();
            self.preemptions_lost += slot.worker.preemptions_total();
            debug_assert!(
                slot.quiet_ends.is_empty(),
                "runs with faults step pass by pass"
            );
            slot.worker = fresh;
            slot.output.clear();
            self.starts_due.retain(|&due| due != index);
            lost.extend(held);
        }
        lost
    }

    /// Down worker `worker` returns at `now` with empty ranks.
    pub fn worker_back(&mut self, now: SimTime, worker: u64) {
        // Down windows of one worker never overlap (validation), so the open one is its last.
        let open = self.marks.iter_mut().rev().find_map(|m| match m {
            FaultMark::WorkerDown {
                worker: w, until, ..
            } if *w == worker => Some(until),
            _ => None,
        });
        if let Some(until) = open {
            *until = Some(now);
        }
        for index in self.ranks_of(worker) {
            self.ranks[index].down = false;
        }
    }

    /// A new worker of pool `pool` is asked for at `now`: it takes the next free id (ids are
    /// never reused) and is starting, holding no rank, until [`Self::ready`]. Returns the id.
    pub fn start(&mut self, now: SimTime, pool: usize) -> u64 {
        let worker = self.next_worker;
        self.next_worker += 1;
        let life = WorkerLife::asked(pool, &self.pools[pool], now);
        self.lives.push(life);
        self.starting.insert(worker, (pool, now));
        worker
    }

    /// Starting worker `worker` will not start after all, from `now` (its ready event is
    /// then ignored). False if it is not starting.
    pub fn cancel_start(&mut self, now: SimTime, worker: u64) -> bool {
        let cancelled = self.starting.remove(&worker).is_some();
        if cancelled {
            self.lives[worker as usize].gone = Some(now);
        }
        cancelled
    }

    /// Every worker's life so far, by id.
    pub fn lives(&self) -> &[WorkerLife] {
        &self.lives
    }

    /// The workers of role `role` by state, each list in id order: starting, draining, and
    /// active (up and neither). Gone and down workers are in none.
    pub fn role_workers(&self, role: WorkerRole) -> RoleWorkers {
        let mut out = RoleWorkers::default();
        for (worker, life) in (0u64..).zip(&self.lives) {
            if life.role != role {
                continue;
            }
            if self.starting.contains_key(&worker) {
                out.starting.push(worker);
            } else if self.draining.contains(&worker) {
                out.draining.push(worker);
            } else {
                let mut ranks = self.ranks_of(worker);
                if !ranks.is_empty() && ranks.all(|i| !self.ranks[i].down) {
                    out.active.push(worker);
                }
            }
        }
        out
    }

    /// Worker `worker`'s number within its role: how many workers of its role got an id
    /// before it (in aggregated serving, its id).
    pub fn role_number(&self, worker: u64) -> u64 {
        let Some(role) = self.lives.get(worker as usize).map(|life| life.role) else {
            return worker;
        };
        let before = &self.lives[..worker as usize];
        before.iter().filter(|life| life.role == role).count() as u64
    }

    /// Starting worker `worker` is ready at `now`: its ranks join the fleet, empty. False
    /// (nothing happens) if it is not starting.
    pub fn ready(&mut self, now: SimTime, worker: u64) -> bool {
        let Some((pool, asked)) = self.starting.remove(&worker) else {
            return false;
        };
        self.joined.push((worker, pool));
        self.lives[worker as usize].ready = Some(now);
        self.add_worker(worker, pool);
        self.marks.push(FaultMark::WorkerUp {
            worker,
            name: self.worker_name(worker),
            pool: self.pools[pool].name.clone(),
            asked,
            at: now,
        });
        true
    }

    /// Worker `worker` drains from `now`: it receives what the router already sent it and
    /// finishes everything it holds, then leaves ([`Self::remove`]). False (nothing
    /// happens) unless it is up, not draining and not gone.
    pub fn drain(&mut self, now: SimTime, worker: u64) -> bool {
        let mut ranks = self.ranks_of(worker);
        if ranks.is_empty() || ranks.any(|i| self.ranks[i].down) || self.draining.contains(&worker)
        {
            return false;
        }
        self.draining.insert(worker);
        if let Some(life) = self.lives.get_mut(worker as usize) {
            life.draining = Some(now);
        }
        self.marks.push(FaultMark::WorkerDrain {
            worker,
            name: self.worker_name(worker),
            from: now,
            until: None,
        });
        true
    }

    /// The draining workers that hold nothing and run no pass, in id order: ready to leave.
    pub fn drained(&self) -> Vec<u64> {
        let mut held = Vec::new();
        let mut empty = |index: usize| {
            let slot = &self.ranks[index];
            held.clear();
            slot.worker.held_requests(&mut held);
            !slot.in_pass && !slot.worker.has_work() && held.is_empty()
        };
        (self.draining.iter().copied())
            .filter(|&worker| self.ranks_of(worker).all(&mut empty))
            .collect()
    }

    /// Drained worker `worker` leaves at `now`: its ranks receive nothing more.
    pub fn remove(&mut self, now: SimTime, worker: u64) {
        if !self.draining.remove(&worker) {
            return;
        }
        self.lives[worker as usize].gone = Some(now);
        for index in self.ranks_of(worker) {
            self.ranks[index].down = true;
        }
        let open = self.marks.iter_mut().rev().find_map(|m| match m {
            FaultMark::WorkerDrain {
                worker: w, until, ..
            } if *w == worker => Some(until),
            _ => None,
        });
        if let Some(until) = open {
            *until = Some(now);
        }
    }

    /// Workers asked for and not ready yet.
    pub fn starting_count(&self) -> usize {
        self.starting.len()
    }

    /// Whether some worker is draining.
    pub fn any_draining(&self) -> bool {
        !self.draining.is_empty()
    }

    /// How outputs call worker `worker`: `worker 3`, or in disaggregated serving `decode
    /// worker 1`, numbered within its role in id order (as requests.csv numbers them).
    fn worker_name(&self, worker: u64) -> String {
        let Some(role) = self.pool_of(worker).map(|p| p.engine.common.role) else {
            return format!("worker {worker}");
        };
        if role == WorkerRole::Aggregated {
            return format!("worker {worker}");
        }
        let mut before: Vec<u64> = self
            .ranks
            .iter()
            .filter(|r| r.id.worker_id < worker && self.pools[r.pool].engine.common.role == role)
            .map(|r| r.id.worker_id)
            .collect();
        before.dedup();
        format!("{} worker {}", role.label(), before.len())
    }

    /// The fleet's checkers: every worker's own, and nothing on a down worker.
    pub fn check(&self) -> Result<(), String> {
        for slot in &self.ranks {
            slot.worker.check_invariants()?;
        }
        match self
            .ranks
            .iter()
            .find(|r| r.down && (r.worker.has_work() || r.in_pass))
        {
            Some(slot) => Err(format!("{} is down but holds work", slot.id)),
            None => Ok(()),
        }
    }

    /// At the end of a drained run: Err unless every worker is empty.
    pub fn check_drained(&self) -> Result<(), String> {
        match self.ranks.iter().find(|r| r.worker.has_work()) {
            Some(slot) => Err(format!("{} still has work after the run", slot.id)),
            None => Ok(()),
        }
    }

    /// Preemptions over every rank, including those of worker states lost when their worker
    /// went down.
    pub fn preemptions(&self) -> u64 {
        let live: u64 = self
            .ranks
            .iter()
            .map(|r| r.worker.preemptions_total())
            .sum();
        self.preemptions_lost + live
    }

    /// The worker faults as they happened.
    pub fn take_marks(&mut self) -> Vec<FaultMark> {
        std::mem::take(&mut self.marks)
    }

    /// Each pool's workers and pass time within `[0, makespan]`: every rank's ended passes,
    /// less what those that ended after the makespan ran past it (only those of the ledger's
    /// last change epoch `epoch` can), plus the part of a pass still running (only after a
    /// limit) that lies before it.
    pub fn pool_usage(&self, makespan: SimTime, epoch: u64) -> Vec<PoolUsage> {
        let mut busy_ns: Vec<u128> = vec![0; self.pools.len()];
        for slot in &self.ranks {
            let mut busy = slot.busy;
            if slot.in_pass {
                busy = busy.saturating_add(makespan.saturating_since(slot.pass_start));
            }
            busy_ns[slot.pool] += u128::from(busy.as_ns());
        }
        let recent = self.passes_since_change.iter().filter(|p| p.3 == epoch);
        for &(index, start, end, _) in recent {
            let past = end.saturating_since(start.max(makespan)).as_ns();
            let pool = &mut busy_ns[self.ranks[index].pool];
            *pool = pool.saturating_sub(u128::from(past));
        }
        let mut first_worker = 0;
        let mut usage = Vec::with_capacity(self.pools.len());
        for (index, (pool, busy_ns)) in self.pools.iter().zip(busy_ns).enumerate() {
            usage.push(PoolUsage {
                joined_workers: self.joined_workers(index),
                name: pool.name.clone(),
                first_worker,
                workers: pool.count,
                dp_size: pool.engine.common.dp_size,
                busy_ns,
                role: pool.engine.common.role,
            });
            first_worker += u64::from(pool.count);
        }
        usage
    }

    /// The workers that joined pool `pool`.
    fn joined_workers(&self, pool: usize) -> Vec<u64> {
        self.joined
            .iter()
            .filter(|(_, p)| *p == pool)
            .map(|(w, _)| *w)
            .collect()
    }
}

/// What a quiet run starting with `load` records: its batch and blocks at its start (the
/// passes and their decode tokens are counted as they are applied).
fn quiet_run_args(load: crate::mocker::WorkerLoad) -> PassArgs {
    PassArgs {
        passes: 0,
        batch_size: load.running as u32,
        kv_blocks: load.active_blocks,
        ..PassArgs::default()
    }
}

/// What a formed pass records: its batch and blocks after its admissions, and its tokens.
fn formed_pass_args(load: crate::mocker::WorkerLoad, out: &PassOutput) -> PassArgs {
    PassArgs {
        passes: 1,
        batch_size: load.running as u32,
        prefill_tokens: out.prefill_tokens,
        decode_tokens: out.scheduled_tokens.saturating_sub(out.prefill_tokens),
        kv_blocks: load.active_blocks,
    }
}

/// A rank's liveness rule, checked after every pass it starts. A pass may compute tokens in
/// 0 ns (1.6.1 charges no time for recomputing a preempted request's generated tokens) and
/// still be progress. A pass that changed nothing while the rank holds work would leave it
/// stuck for good. A pass that computed nothing but rejected or preempted is progress: the
/// next pass, at the same instant, sees the changed queues. Such passes admit nobody, so the
/// running batch never grows during a streak of them, and each preempting one shrinks it: a
/// correct rank has at most `max_num_seqs` preempt-only passes in a row at one instant (and
/// rejections end when requests run out). Err is a bug in the worker model.
fn check_pass_progress(slot: &mut RankSlot, now: SimTime, end: SimTime) -> Result<(), String> {
    let out = &slot.output;
    let computed = end > now
        || out.scheduled_tokens > 0
        || !out.tokens.is_empty()
        || !out.admitted.is_empty()
        || !out.finished_empty.is_empty();
    if computed || slot.empty_at != now {
        slot.empty_at = now;
        slot.empty_passes = 0;
    }
    if computed || !out.rejected.is_empty() {
        return Ok(());
    }
    let load = slot.worker.load();
    if out.preempted.is_empty() {
        let mut running = Vec::new();
        let worker = &slot.worker;
        worker.for_each_running(&mut |id| running.extend(worker.request(id)));
        return Err(format!(
            "{} holds {} waiting and {} running requests but its pass at {now} did nothing; running: {running:?}",
            slot.id, load.waiting, load.running
        ));
    }
    slot.empty_passes += 1;
    if slot.empty_passes > load.max_running {
        return Err(format!(
            "{} ran {} passes in a row at {now} that only preempted",
            slot.id, slot.empty_passes
        ));
    }
    Ok(())
}
