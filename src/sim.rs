//! The simulated system: clients, the router core, transport delays and mock workers.
//!
//! Clients release requests at their arrival times; the router (the real scheduling core)
//! dispatches, queues or rejects them; workers run continuous-batching passes and deliver each
//! pass's tokens at its end; the router sees first tokens (prefill done) and stream ends (free)
//! and drains its queues; every request's fate is recorded.
//!
//! Ordering within one instant `t` follows Dynamo 1.6.1's offline replay, in three phases:
//! 1. engine events at `t` in the order they were scheduled: pass ends (KV events, then each
//!    token's lifecycle edge, each followed by a queue drain), delayed deliveries, ticks;
//! 2. arrivals at `t`, in row order;
//! 3. pass starts at `t`: every worker that has work and no pass running starts one, so every
//!    request that reached it during the instant joins that pass.
//!
//! A zero transport delay is a direct call, never an event.
//!
//! Quiet passes are skipped ([`Stepping::SkipQuiet`], what [`run`] does): when a worker's
//! next passes would only give every running request one more token (no admission,
//! completion, first token, preemption or published KV event; see
//! `MockWorker::plan_quiet_passes`), the worker plans that run of passes and one event marks
//! its end, instead of one event per pass. Nothing outside the worker can see a quiet pass
//! but the token counts, so a run is the same pass by pass ([`Stepping::PassByPass`]) and
//! skipping. An input reaching a worker during its run (a dispatch) first applies the passes
//! already over and cuts the run after the pass in progress; the run's later end event is
//! then stale (each rank counts generations of its scheduled ends). Transport jitter draws
//! one random delay per token message, so with jitter every pass runs. Workers publish no
//! KV events for blocks of generated tokens when skipping: such a block's hash is derived
//! from its own request, so no prompt the router ever looks up can match it.

use crate::engine::{Engine, EventQueue, Limits, Model, StopReason};
use crate::mocker::worker::DecodeMemo;
use crate::mocker::{EngineArgs, MockRequest, MockWorker, PassOutput};
use crate::rng::{self, SimRng};
use crate::scheduling::policy::PolicyProfile;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::{
    Decision, Outcome, Path, Scheduler, SchedulerConfig, SchedulerError, SchedulingRequest,
};
use crate::scheduling::select::{RequestConstraints, WorkerConfig, WorkerSet};
use crate::scheduling::types::{KvEvent, RequestId, WorkerWithDpRank};
use crate::time::{SimDuration, SimTime};
use crate::workload::{RequestSpec, UniformBlockHashes};
use rand::RngExt;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;

/// How the router picks workers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum RouterMode {
    /// Dynamo's KV router: the scheduling core with policy classes and cost-based selection.
    #[default]
    KvRouter,
    /// Plain round robin over worker ranks, no queueing.
    RoundRobin,
}

/// Latencies between the parts of the system (all default to zero).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TransportDelays {
    pub router_to_worker: SimDuration,
    pub worker_to_router: SimDuration,
    pub kv_event_lag: SimDuration,
    /// Each dispatch and each token message gets an extra delay drawn uniformly from
    /// `0..=jitter` (stream `sim/transport` of the seed), as a real network would add; a
    /// request's messages still arrive in order. Zero draws nothing.
    pub jitter: SimDuration,
}

/// A closed loop: the run keeps `concurrency` requests in flight instead of releasing them at
/// their arrival times. The first `concurrency` requests are issued at 0 in the order given;
/// each time a request ends (completes or is rejected) the next one is issued at that instant,
/// with that instant as its arrival. This is how aiperf and Dynamo's replay
/// (`replay_concurrency`) measure.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ClosedLoop {
    /// Requests kept in flight (at least 1).
    pub concurrency: u32,
    /// No request is issued at or after this instant (`None`: until the requests run out).
    pub issue_until: Option<SimTime>,
}

/// Everything one simulation run needs besides its requests.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The router's knobs.
    pub router: RouterConfig,
    /// The policy classes the router runs (as [`select_profile`] chooses them).
    pub profile: PolicyProfile,
    /// Every worker's engine; its block size is the router's too.
    pub engine: EngineArgs,
    pub worker_count: u32,
    pub router_mode: RouterMode,
    pub delays: TransportDelays,
    pub limits: Limits,
    /// The router's periodic recheck (Dynamo: 60 s).
    pub tick_interval: SimDuration,
    /// Run every checker after every event (slow; for tests).
    pub check_every_event: bool,
    /// The run's only seed: workload draws, the router's tie-breaks, transport jitter.
    pub seed: u64,
    /// Issue requests in a closed loop instead of at their arrival times (`None`: open loop).
    pub closed_loop: Option<ClosedLoop>,
}

impl SimConfig {
    /// The scheduler's configuration, derived so that seed and block size cannot disagree
    /// with the workers'.
    pub fn scheduler_config(&self) -> SchedulerConfig {
        SchedulerConfig {
            router: self.router.clone(),
            profile: self.profile.clone(),
            block_size_tokens: self.engine.block_size,
            seed: self.seed,
        }
    }
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// Still in the system when the run stopped (only after a limit).
    Pending,
    Completed,
    Rejected(String),
    Aborted,
}

impl Status {
    pub fn label(&self) -> &str {
        match self {
            Status::Pending => "pending",
            Status::Completed => "completed",
            Status::Rejected(_) => "rejected",
            Status::Aborted => "aborted",
        }
    }
}

/// Everything recorded about one request.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    pub row: u64,
    pub policy_class: Option<String>,
    pub class_index: Option<usize>,
    pub arrival: SimTime,
    /// When the router dispatched it (immediately, or when the queue released it).
    pub dispatched: Option<SimTime>,
    /// The start of the first pass that scheduled it on its worker (Dynamo's `first_admit_ms`).
    pub admit: Option<SimTime>,
    pub first_token: Option<SimTime>,
    pub completion: Option<SimTime>,
    pub rank: Option<WorkerWithDpRank>,
    /// `None` for a request the router rejected.
    pub path: Option<Path>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub reused_input_tokens: u64,
    pub tokens_received: u64,
    pub status: Status,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct SimResult {
    pub records: Vec<RequestRecord>,
    pub stop_reason: StopReason,
    pub events: u64,
    pub end_time: SimTime,
    /// Preemptions over all worker ranks (a request preempted twice counts twice).
    pub preemptions: u64,
    pub class_names: Vec<String>,
    /// Each class's DRR quantum, in class order (for ideal shares).
    pub class_quanta_tokens: Vec<u64>,
}

impl SimResult {
    pub fn count(&self, status: &str) -> usize {
        self.records
            .iter()
            .filter(|r| r.status.label() == status)
            .count()
    }
}

/// A fault the run detected in itself: a broken invariant. Always a bug, never bad input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvariantViolation {
    pub seed: u64,
    pub time: SimTime,
    pub message: String,
}

impl std::fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invariant violated at {} (seed {}; rerun with this seed to reproduce): {}",
            self.time, self.seed, self.message
        )
    }
}

impl std::error::Error for InvariantViolation {}

enum Event {
    /// A dispatched request reaches its worker (only with a router-to-worker delay).
    Deliver { rank: usize, request: RequestId },
    /// A worker's pass (or run of quiet passes) ends: its tokens and KV events leave the
    /// worker. Stale unless `generation` is the rank's current one.
    PassEnd { rank: usize, generation: u64 },
    /// Tokens reach the router (only with a worker-to-router delay).
    Tokens {
        request: RequestId,
        first: bool,
        completed: bool,
    },
    /// KV events reach the router's indexer (only with a lag).
    Kv(Vec<KvEvent>),
    /// The router's periodic recheck.
    Tick,
}

/// One worker rank and its pass in flight.
struct RankSlot {
    id: WorkerWithDpRank,
    worker: MockWorker,
    /// A pass (or a run of quiet passes) is running: its PassEnd is scheduled.
    in_pass: bool,
    /// Bumped whenever a scheduled PassEnd no longer stands (a quiet run was cut).
    generation: u64,
    /// The ends of the quiet passes planned and not yet applied (empty: the pass running,
    /// if any, is an ordinary one, its results in `output`).
    quiet_ends: Vec<SimTime>,
    output: PassOutput,
    /// Passes in a row at `empty_at` that computed nothing and only preempted.
    empty_passes: u64,
    empty_at: SimTime,
}

struct System {
    config: SimConfig,
    router: Scheduler,
    ranks: Vec<RankSlot>,
    records: Vec<RequestRecord>,
    /// Requests in flight, by id: what the worker needs once it is dispatched.
    in_flight: rustc_hash::FxHashMap<RequestId, Arc<[u64]>>,
    round_robin_next: usize,
    /// Ranks to start a pass at the end of the current instant (phase 3).
    starts_due: BTreeSet<usize>,
    tick_scheduled: bool,
    violation: Option<InvariantViolation>,
    /// Draws the transport jitter.
    transport_rng: SimRng,
    /// When each request's latest worker-to-router message lands, so jitter never reorders
    /// one request's tokens.
    last_delivery: rustc_hash::FxHashMap<RequestId, SimTime>,
    /// Requests that completed or were rejected so far (a closed loop issues one per end).
    ended: u64,
    /// Workers skip quiet passes ([`Stepping::SkipQuiet`] without jitter).
    skip_quiet: bool,
    kv_log: Option<KvLog>,
    /// Local hashes of the prompts' one-token blocks seen so far.
    uniform_hashes: UniformBlockHashes,
}

/// Where arrivals come from: the requests' own times (open loop), or a closed loop that
/// issues the next request whenever one ends.
struct Feed<I: Iterator<Item = RequestSpec>> {
    requests: std::iter::Peekable<I>,
    closed: Option<ClosedLoop>,
    /// Requests issued so far (closed loop).
    issued: u64,
    /// The latest instant whose arrivals were taken: when a closed loop issues next.
    clock: SimTime,
}

impl<I: Iterator<Item = RequestSpec>> Feed<I> {
    fn new(requests: I, closed: Option<ClosedLoop>) -> Self {
        Feed {
            requests: requests.peekable(),
            closed,
            issued: 0,
            clock: SimTime::ZERO,
        }
    }

    /// When the next request arrives, `ended` requests having ended so far.
    fn next_time(&mut self, ended: u64) -> Option<SimTime> {
        match self.closed {
            None => self.requests.peek().map(|r| r.arrival),
            Some(closed) => self
                .can_issue(closed, self.clock, ended)
                .then_some(self.clock),
        }
    }

    /// The next request arriving at `now`, if any (a closed loop's with `now` as arrival).
    fn next_at(&mut self, now: SimTime, ended: u64) -> Option<RequestSpec> {
        self.clock = now;
        let Some(closed) = self.closed else {
            return self.requests.next_if(|r| r.arrival == now);
        };
        if !self.can_issue(closed, now, ended) {
            return None;
        }
        let mut spec = self.requests.next()?;
        spec.arrival = now;
        self.issued += 1;
        Some(spec)
    }

    /// Whether a closed loop may issue at `now`: a slot is free, issuing has not stopped,
    /// and a request is left.
    fn can_issue(&mut self, closed: ClosedLoop, now: SimTime, ended: u64) -> bool {
        let in_flight = self.issued.saturating_sub(ended);
        in_flight < u64::from(closed.concurrency)
            && closed.issue_until.is_none_or(|until| now < until)
            && self.requests.peek().is_some()
    }
}

/// How workers advance through their passes (see the module docs). Both give the same
/// records; skipping is much faster on decode-heavy runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stepping {
    /// Skip runs of quiet passes (the default).
    SkipQuiet,
    /// Every pass is an event (the reference the skipping is tested against).
    PassByPass,
}

/// Slots of the decode-duration table the ranks of a run share (1 MiB).
const SHARED_DECODE_MEMO_SLOTS: usize = 1 << 16;

/// Passes a worker plans ahead in one quiet run. A run cut short by a dispatch wastes the
/// planning of its later passes; a longer run just ends and plans the next.
const QUIET_RUN_PASSES: usize = 64;

/// Runs a simulation over `requests` (in any order; equal arrival times keep row order).
pub fn run(
    config: SimConfig,
    requests: impl Iterator<Item = RequestSpec>,
) -> Result<SimResult, InvariantViolation> {
    run_with(config, requests, Stepping::SkipQuiet)
}

/// [`run`], stepping workers as `stepping` says.
pub fn run_with(
    config: SimConfig,
    requests: impl Iterator<Item = RequestSpec>,
    stepping: Stepping,
) -> Result<SimResult, InvariantViolation> {
    simulate(config, requests, stepping, false).map(|(result, _)| result)
}

/// Every KV event the router applied, with when (kept only when asked: for tests).
type KvLog = Vec<(SimTime, KvEvent)>;

fn simulate(
    config: SimConfig,
    requests: impl Iterator<Item = RequestSpec>,
    stepping: Stepping,
    log_kv: bool,
) -> Result<(SimResult, KvLog), InvariantViolation> {
    let skipping = stepping == Stepping::SkipQuiet;
    let workers = worker_set(config.worker_count, &config.engine);
    // One table of decode durations for every rank: contexts recur across ranks.
    let decode_memo = Rc::new(RefCell::new(DecodeMemo::new(
        config.engine.clone(),
        SHARED_DECODE_MEMO_SLOTS,
    )));
    let router = Scheduler::new(config.scheduler_config(), workers.clone(), SimTime::ZERO);
    let ranks = workers
        .ranks()
        .map(|id| RankSlot {
            id,
            worker: {
                let mut worker = MockWorker::new(config.engine.clone(), id);
                worker.set_publish_generated_blocks(!skipping);
                worker.share_decode_memo(&decode_memo);
                worker
            },
            in_pass: false,
            generation: 0,
            quiet_ends: Vec::new(),
            output: PassOutput::default(),
            empty_passes: 0,
            empty_at: SimTime::ZERO,
        })
        .collect();
    let mut system = System {
        router,
        ranks,
        records: Vec::new(),
        in_flight: Default::default(),
        round_robin_next: 0,
        starts_due: BTreeSet::new(),
        tick_scheduled: false,
        violation: None,
        transport_rng: rng::stream(config.seed, "sim/transport"),
        last_delivery: Default::default(),
        ended: 0,
        skip_quiet: skipping && config.delays.jitter == SimDuration::ZERO,
        kv_log: log_kv.then(Vec::new),
        uniform_hashes: UniformBlockHashes::default(),
        config,
    };
    let mut engine = Engine::new(system.config.limits);
    let mut requests = Feed::new(requests, system.config.closed_loop);
    let stop_reason = loop {
        if let Some(v) = system.violation.take() {
            return Err(v);
        }
        let next_arrival = requests.next_time(system.ended);
        let Some(now) = min_time(next_arrival, engine.queue().peek_time()) else {
            break StopReason::Drained;
        };
        if now > system.config.limits.max_time {
            break StopReason::TimeLimit;
        }
        if let Err(reason) = system.run_instant(now, &mut engine, &mut requests) {
            break reason;
        }
    };
    if stop_reason.is_limit() {
        // Passes over by the stop count, as they would pass by pass.
        let at = match stop_reason {
            StopReason::TimeLimit => system.config.limits.max_time,
            _ => engine.now(),
        };
        for rank in 0..system.ranks.len() {
            let done = system.ranks[rank].quiet_ends.partition_point(|&e| e <= at);
            if done > 0 {
                system.apply_quiet(rank, done);
            }
        }
    }
    // The makespan: the last moment a request changed state (a trailing no-op tick does not
    // count).
    let end_time = system
        .records
        .iter()
        .filter_map(|r| r.completion.or(r.first_token).or(r.admit))
        .max()
        .unwrap_or(SimTime::ZERO);
    system.finish(stop_reason, end_time)?;
    let classes = system.router.profile().classes();
    let kv_log = system.kv_log.take().unwrap_or_default();
    let result = SimResult {
        class_names: classes.iter().map(|c| c.name.clone()).collect(),
        class_quanta_tokens: classes.iter().map(|c| c.quantum_tokens).collect(),
        records: system.records,
        stop_reason,
        events: engine.events_processed(),
        end_time,
        preemptions: system
            .ranks
            .iter()
            .map(|r| r.worker.preemptions_total())
            .sum(),
    };
    Ok((result, kv_log))
}

/// `count` identical aggregated workers with ids 0..count, each with the engine's DP ranks.
pub fn worker_set(count: u32, engine: &EngineArgs) -> WorkerSet {
    let mut set = WorkerSet::default();
    for id in 0..u64::from(count) {
        set.insert(
            id,
            WorkerConfig {
                dp_start: 0,
                dp_size: engine.dp_size,
                max_num_batched_tokens: Some(engine.max_num_batched_tokens),
                ..WorkerConfig::default()
            },
        );
    }
    set
}

fn min_time(a: Option<SimTime>, b: Option<SimTime>) -> Option<SimTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl System {
    /// Runs the three phases of one instant (see the module docs).
    fn run_instant(
        &mut self,
        now: SimTime,
        engine: &mut Engine<Event>,
        requests: &mut Feed<impl Iterator<Item = RequestSpec>>,
    ) -> Result<(), StopReason> {
        while engine.queue().peek_time() == Some(now) {
            engine.step(self)?;
        }
        while let Some(spec) = requests.next_at(now, self.ended) {
            self.arrive(now, spec, engine.queue());
        }
        for rank in std::mem::take(&mut self.starts_due) {
            self.start_pass(now, rank, engine.queue());
        }
        self.schedule_tick(now, engine.queue());
        Ok(())
    }

    fn arrive(&mut self, now: SimTime, spec: RequestSpec, queue: &mut EventQueue<Event>) {
        let id = RequestId(self.records.len() as u64);
        let block_size = self.config.engine.block_size;
        let hashes: Arc<[u64]> = spec
            .block_hashes_with(block_size, &mut self.uniform_hashes)
            .into();
        self.records.push(RequestRecord {
            row: spec.row,
            policy_class: spec.policy_class.clone(),
            class_index: None,
            arrival: now,
            dispatched: None,
            admit: None,
            first_token: None,
            completion: None,
            rank: None,
            path: None,
            input_tokens: spec.input_tokens,
            output_tokens: spec.output_tokens,
            reused_input_tokens: 0,
            tokens_received: 0,
            status: Status::Pending,
        });
        self.in_flight.insert(id, hashes.clone());
        match self.config.router_mode {
            RouterMode::KvRouter => {
                self.router.handle_arrival(
                    now,
                    SchedulingRequest {
                        id,
                        policy_class: spec.policy_class,
                        isl_tokens: spec.input_tokens,
                        block_hashes: hashes,
                        priority: spec.priority,
                        strict_priority: spec.strict_priority,
                        constraints: RequestConstraints {
                            pinned: spec.pinned_worker,
                            ..RequestConstraints::default()
                        },
                    },
                );
                self.drain_router(now, queue);
            }
            RouterMode::RoundRobin => {
                let rank = self.round_robin_next % self.ranks.len();
                self.round_robin_next += 1;
                let record = &mut self.records[id.0 as usize];
                record.dispatched = Some(now);
                record.rank = Some(self.ranks[rank].id);
                record.path = Some(Path::Immediate);
                self.send_to_worker(now, rank, id, queue);
            }
        }
        self.schedule_tick(now, queue);
    }

    /// Acts on every decision the router made.
    fn drain_router(&mut self, now: SimTime, queue: &mut EventQueue<Event>) {
        while let Some(decision) = self.router.poll_decision() {
            match decision {
                Decision::Dispatch(d) => {
                    let record = &mut self.records[d.id.0 as usize];
                    record.dispatched = Some(now);
                    record.rank = Some(d.rank);
                    record.path = Some(d.path);
                    record.class_index = Some(d.class_index);
                    let rank = self.rank_index(d.rank);
                    self.send_to_worker(now, rank, d.id, queue);
                }
                Decision::Reject {
                    id,
                    class_index,
                    error,
                } => {
                    let record = &mut self.records[id.0 as usize];
                    record.class_index = class_index;
                    record.completion = Some(now);
                    record.status = Status::Rejected(rejection_label(&error));
                    self.ended += 1;
                    self.in_flight.remove(&id);
                }
            }
        }
        if self.config.check_every_event {
            self.check(now);
        }
    }

    fn rank_index(&self, rank: WorkerWithDpRank) -> usize {
        self.ranks
            .binary_search_by_key(&rank, |r| r.id)
            .expect("the router only dispatches to known ranks")
    }

    fn send_to_worker(
        &mut self,
        now: SimTime,
        rank: usize,
        id: RequestId,
        queue: &mut EventQueue<Event>,
    ) {
        let delay = self
            .config
            .delays
            .router_to_worker
            .saturating_add(self.jitter());
        if delay == SimDuration::ZERO {
            self.deliver(now, rank, id, queue);
        } else {
            queue.schedule(
                now.saturating_add(delay),
                Event::Deliver { rank, request: id },
            );
        }
    }

    fn deliver(&mut self, now: SimTime, rank: usize, id: RequestId, queue: &mut EventQueue<Event>) {
        let Some(hashes) = self.in_flight.get(&id).cloned() else {
            return;
        };
        self.settle(now, rank, queue);
        let record = &self.records[id.0 as usize];
        let request = MockRequest {
            id,
            prompt_tokens: record.input_tokens,
            prompt_hashes: hashes,
            max_output_tokens: record.output_tokens,
        };
        let slot = &mut self.ranks[rank];
        if let Err(e) = slot.worker.add_request(now, request) {
            let message = format!("{}: {e}", slot.id);
            self.fail(now, message);
            return;
        }
        if !slot.in_pass {
            self.starts_due.insert(rank);
        }
        let _ = queue;
    }

    /// One message's extra transport delay (zero, drawing nothing, when jitter is off).
    fn jitter(&mut self) -> SimDuration {
        let max_ns = self.config.delays.jitter.as_ns();
        if max_ns == 0 {
            return SimDuration::ZERO;
        }
        SimDuration::from_ns(self.transport_rng.random_range(0..=max_ns))
    }

    fn fail(&mut self, now: SimTime, message: String) {
        if self.violation.is_none() {
            self.violation = Some(InvariantViolation {
                seed: self.config.seed,
                time: now,
                message,
            });
        }
    }

    fn start_pass(&mut self, now: SimTime, rank: usize, queue: &mut EventQueue<Event>) {
        let slot = &mut self.ranks[rank];
        if slot.in_pass || !slot.worker.has_work() {
            return;
        }
        if self.skip_quiet {
            let ends = &mut slot.quiet_ends;
            slot.worker.plan_quiet_passes(now, QUIET_RUN_PASSES, ends);
            if let Some(&end) = ends.last() {
                slot.in_pass = true;
                let generation = slot.generation;
                queue.schedule(end, Event::PassEnd { rank, generation });
                return;
            }
        }
        let end = slot.worker.execute_pass(now, &mut slot.output);
        if let Err(message) = check_pass_progress(slot, now, end) {
            self.fail(now, message);
            return;
        }
        let slot = &mut self.ranks[rank];
        slot.in_pass = true;
        for admitted in &slot.output.admitted {
            let record = &mut self.records[admitted.id.0 as usize];
            record.admit.get_or_insert(now);
            record.reused_input_tokens = admitted.reported_reused_tokens;
        }
        let generation = slot.generation;
        queue.schedule(end, Event::PassEnd { rank, generation });
    }

    /// Before an input reaches a rank in a quiet run at `now`: applies the passes over by
    /// then, and cuts the run after the pass in progress (whose end gets a fresh event), so
    /// the input joins the next pass as it would pass by pass. A rank whose run ended at
    /// `now` (its end event not handled yet) becomes idle.
    fn settle(&mut self, now: SimTime, rank: usize, queue: &mut EventQueue<Event>) {
        let slot = &mut self.ranks[rank];
        let done = slot.quiet_ends.partition_point(|&end| end <= now);
        if done > 0 {
            self.apply_quiet(rank, done);
        }
        let slot = &mut self.ranks[rank];
        let planned = slot.quiet_ends.len();
        if done == 0 && planned <= 1 {
            return; // no run, or its last pass is in progress: its event stands
        }
        slot.generation += 1;
        if planned == 0 {
            slot.in_pass = false;
            return;
        }
        slot.quiet_ends.truncate(1);
        let (end, generation) = (slot.quiet_ends[0], slot.generation);
        queue.schedule(end, Event::PassEnd { rank, generation });
    }

    /// Applies a rank's first `count` planned quiet passes: its running requests each get
    /// `count` tokens.
    fn apply_quiet(&mut self, rank: usize, count: usize) {
        let slot = &mut self.ranks[rank];
        let last_end = slot.quiet_ends[count - 1];
        slot.worker.apply_quiet_passes(count as u64, last_end);
        slot.quiet_ends.drain(..count);
        for id in slot.worker.running_ids() {
            self.records[id.0 as usize].tokens_received += count as u64;
        }
    }

    fn end_pass(
        &mut self,
        now: SimTime,
        rank: usize,
        generation: u64,
        queue: &mut EventQueue<Event>,
    ) {
        let slot = &mut self.ranks[rank];
        if generation != slot.generation {
            return; // a quiet run that was cut: its new end is scheduled
        }
        if !slot.quiet_ends.is_empty() {
            self.apply_quiet(rank, self.ranks[rank].quiet_ends.len());
            let slot = &mut self.ranks[rank];
            slot.in_pass = false;
            if slot.worker.has_work() {
                self.starts_due.insert(rank);
            }
            return;
        }
        let output = std::mem::take(&mut self.ranks[rank].output);
        self.ranks[rank].in_pass = false;
        let lag = self.config.delays.kv_event_lag;
        if !output.kv_events.is_empty() {
            if lag == SimDuration::ZERO {
                for event in &output.kv_events {
                    self.kv_to_router(now, event);
                }
            } else {
                queue.schedule(now.saturating_add(lag), Event::Kv(output.kv_events.clone()));
            }
        }
        for rejection in &output.rejected {
            let id = rejection.id;
            let record = &mut self.records[id.0 as usize];
            record.completion = Some(now);
            record.status = Status::Rejected(rejection.reason.label().to_string());
            self.ended += 1;
            self.in_flight.remove(&id);
            self.last_delivery.remove(&id);
            self.router.handle_finished(now, id, Outcome::Aborted);
            self.drain_router(now, queue);
        }
        let finished_empty = output.finished_empty.iter().map(|&id| (id, false, true));
        let tokens = output.tokens.iter().map(|t| (t.id, t.first, t.completed));
        let direct = self.config.delays.worker_to_router == SimDuration::ZERO
            && self.config.delays.jitter == SimDuration::ZERO
            && !self.config.check_every_event;
        for (id, first, completed) in tokens.chain(finished_empty) {
            if direct && !first && !completed {
                // A token in the middle of a stream only counts: the router hears nothing.
                self.records[id.0 as usize].tokens_received += 1;
                continue;
            }
            let delay = self
                .config
                .delays
                .worker_to_router
                .saturating_add(self.jitter());
            let earliest = self
                .last_delivery
                .get(&id)
                .copied()
                .unwrap_or(SimTime::ZERO);
            let at = now.saturating_add(delay).max(earliest);
            if at == now {
                self.receive_tokens(now, id, first, completed);
                self.drain_router(now, queue);
            } else {
                if completed {
                    self.last_delivery.remove(&id);
                } else {
                    self.last_delivery.insert(id, at);
                }
                queue.schedule(
                    at,
                    Event::Tokens {
                        request: id,
                        first,
                        completed,
                    },
                );
            }
        }
        let slot = &mut self.ranks[rank];
        slot.output = output;
        slot.output.clear();
        if slot.worker.has_work() {
            self.starts_due.insert(rank);
        }
    }

    fn kv_to_router(&mut self, now: SimTime, event: &KvEvent) {
        self.router.handle_kv_event(now, event);
        if let Some(log) = &mut self.kv_log {
            log.push((now, event.clone()));
        }
    }

    /// A token (or the end of a stream) reaches the router and the client.
    fn receive_tokens(&mut self, now: SimTime, id: RequestId, first: bool, completed: bool) {
        let record = &mut self.records[id.0 as usize];
        if first {
            record.first_token = Some(now);
        }
        if first || !completed || record.output_tokens > 0 {
            record.tokens_received += 1;
        }
        if first {
            self.router.handle_first_token(now, id);
        }
        if completed {
            let record = &mut self.records[id.0 as usize];
            record.completion = Some(now);
            record.status = Status::Completed;
            self.ended += 1;
            self.in_flight.remove(&id);
            self.router.handle_finished(now, id, Outcome::Completed);
        }
    }

    /// Keeps one periodic recheck scheduled while requests wait in the router's queues.
    fn schedule_tick(&mut self, now: SimTime, queue: &mut EventQueue<Event>) {
        if self.tick_scheduled || self.router.pending_count() == 0 {
            return;
        }
        let interval = self.config.tick_interval.as_ns().max(1);
        let next = (now.as_ns() / interval + 1).saturating_mul(interval);
        self.tick_scheduled = true;
        queue.schedule(SimTime::from_ns(next), Event::Tick);
    }

    fn check(&mut self, now: SimTime) {
        let result = self.router.check_invariants().and_then(|()| {
            self.ranks
                .iter()
                .try_for_each(|r| r.worker.check_invariants())
        });
        if let Err(message) = result
            && self.violation.is_none()
        {
            self.violation = Some(InvariantViolation {
                seed: self.config.seed,
                time: now,
                message,
            });
        }
    }

    /// End-of-run checks: conservation, and the core's invariants.
    fn finish(&mut self, stop_reason: StopReason, now: SimTime) -> Result<(), InvariantViolation> {
        self.check(now);
        if stop_reason == StopReason::Drained {
            let unfinished = self
                .records
                .iter()
                .filter(|r| r.status == Status::Pending)
                .count();
            if unfinished > 0 {
                let message =
                    format!("{unfinished} requests neither completed, rejected nor aborted");
                self.fail(now, message);
            }
            // Everything that ran has been freed: no booking, queue entry or worker state left.
            let (active, pending) = (self.router.active_count(), self.router.pending_count());
            if active + pending > 0 {
                let message = format!(
                    "the router still holds {active} bookings and {pending} queued requests"
                );
                self.fail(now, message);
            }
            if let Some(slot) = self.ranks.iter().find(|r| r.worker.has_work()) {
                let message = format!("{} still has work after the run", slot.id);
                self.fail(now, message);
            }
        }
        match self.violation.take() {
            Some(v) => Err(v),
            None => Ok(()),
        }
    }
}

/// A rank's liveness rule, checked after every pass it starts. A pass may compute tokens in
/// 0 ns (1.6.1 charges no time for recomputing a preempted request's generated tokens) and
/// still be progress. A pass that changed nothing
/// while the rank holds work would leave it stuck for good. A pass that computed nothing but
/// rejected or preempted is progress: the next pass, at the same instant, sees the changed
/// queues. Such passes admit nobody, so the running batch never grows during a streak of
/// them, and each preempting one shrinks it: a correct rank has at most `max_num_seqs`
/// preempt-only passes in a row at one instant (and rejections end when requests run out).
/// Err is a bug in the worker model.
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
    if out.preempted.is_empty() {
        let running: Vec<_> = slot
            .worker
            .running_ids()
            .filter_map(|id| slot.worker.request(id))
            .collect();
        return Err(format!(
            "{} holds {} waiting and {} running requests but its pass at {now} did nothing; running: {running:?}",
            slot.id,
            slot.worker.waiting_len(),
            slot.worker.running_len()
        ));
    }
    slot.empty_passes += 1;
    if slot.empty_passes > slot.worker.args().max_num_seqs {
        return Err(format!(
            "{} ran {} passes in a row at {now} that only preempted",
            slot.id, slot.empty_passes
        ));
    }
    Ok(())
}

fn rejection_label(error: &SchedulerError) -> String {
    error.kind().to_string()
}

impl Model for System {
    type Event = Event;

    fn handle(&mut self, now: SimTime, event: Event, queue: &mut EventQueue<Event>) {
        match event {
            Event::Deliver { rank, request } => self.deliver(now, rank, request, queue),
            Event::PassEnd { rank, generation } => self.end_pass(now, rank, generation, queue),
            Event::Tokens {
                request,
                first,
                completed,
            } => {
                self.receive_tokens(now, request, first, completed);
                self.drain_router(now, queue);
            }
            Event::Kv(events) => {
                for event in &events {
                    self.kv_to_router(now, event);
                }
                self.drain_router(now, queue);
            }
            Event::Tick => {
                self.tick_scheduled = false;
                self.router.handle_tick(now);
                self.drain_router(now, queue);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mocker::PreemptionMode;
    use crate::scheduling::policy::PolicyConfig;
    use crate::scheduling::router_config::RouterConfig;
    use crate::scheduling::types::KvEventData;
    use crate::workload::PromptSpec;
    use proptest::prelude::*;

    const POLICY: &str = "
default_policy_family: regular
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 300, queue_policy: wspt,
     prefill_busy_threshold: 700, request_queue_limit_per_worker: 6}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 100,
     prefill_busy_threshold_frac: 0.1}
";

    /// A random small system: engine knobs, worker count, delays, and a request stream.
    #[derive(Debug, Clone)]
    struct Case {
        workers: u32,
        dp_size: u32,
        num_gpu_blocks: u64,
        max_num_seqs: u64,
        max_num_batched_tokens: u64,
        prefix_caching: bool,
        chunked: bool,
        fifo: bool,
        delays_ns: (u64, u64, u64),
        with_policy: bool,
        requests: Vec<(u64, u64, u64, u8, Vec<u64>)>,
    }

    fn case() -> impl Strategy<Value = Case> {
        case_with(8..200, 0..40, 64..2048)
    }

    /// Pools of 2 to 24 blocks of 16 tokens and outputs up to 400 tokens: most requests
    /// outgrow what is left of the pool while others run, many outgrow the whole pool.
    fn storm_case() -> impl Strategy<Value = Case> {
        case_with(2..24, 0..400, 16..512)
    }

    fn case_with(
        blocks: std::ops::Range<u64>,
        outputs: std::ops::Range<u64>,
        budgets: std::ops::Range<u64>,
    ) -> impl Strategy<Value = Case> {
        let request = (
            0u64..50_000_000,
            1u64..1500,
            outputs,
            0u8..3,
            prop::collection::vec(0u64..6, 1..4),
        );
        (
            (1u32..4, 1u32..3, blocks, 1u64..6, budgets),
            (
                (any::<bool>(), any::<bool>(), any::<bool>()),
                (0u64..3, 0u64..3, 0u64..3),
                any::<bool>(),
            ),
            prop::collection::vec(request, 1..40),
        )
            .prop_map(
                |(
                    (workers, dp_size, blocks, seqs, budget),
                    ((caching, chunked, fifo), d, policy),
                    requests,
                )| Case {
                    workers,
                    dp_size,
                    num_gpu_blocks: blocks,
                    max_num_seqs: seqs,
                    max_num_batched_tokens: budget,
                    prefix_caching: caching,
                    chunked,
                    fifo,
                    delays_ns: (d.0 * 1_000_000, d.1 * 1_000_000, d.2 * 1_000_000),
                    with_policy: policy,
                    requests,
                },
            )
    }

    fn config(case: &Case, seed: u64) -> SimConfig {
        let engine = EngineArgs {
            block_size: 16,
            num_gpu_blocks: case.num_gpu_blocks,
            max_num_seqs: case.max_num_seqs,
            max_num_batched_tokens: case.max_num_batched_tokens,
            enable_prefix_caching: case.prefix_caching,
            enable_chunked_prefill: case.chunked,
            preemption_mode: if case.fifo {
                PreemptionMode::Fifo
            } else {
                PreemptionMode::Lifo
            },
            dp_size: case.dp_size,
            ..EngineArgs::default()
        };
        let policy = case
            .with_policy
            .then(|| PolicyConfig::from_yaml_str(POLICY, None).unwrap());
        SimConfig {
            router: RouterConfig::default(),
            profile: crate::scheduling::scheduler::select_profile(
                &RouterConfig::default(),
                policy.as_ref(),
                None,
            ),
            engine,
            worker_count: case.workers,
            router_mode: RouterMode::KvRouter,
            delays: TransportDelays {
                router_to_worker: SimDuration::from_ns(case.delays_ns.0),
                worker_to_router: SimDuration::from_ns(case.delays_ns.1),
                kv_event_lag: SimDuration::from_ns(case.delays_ns.2),
                jitter: SimDuration::from_ns(case.delays_ns.0 / 2),
            },
            limits: Limits {
                max_events: 2_000_000,
                ..Limits::default()
            },
            tick_interval: SimDuration::from_ms(60_000),
            check_every_event: true,
            seed,
            closed_loop: None,
        }
    }

    fn requests(case: &Case) -> Vec<RequestSpec> {
        let mut specs: Vec<RequestSpec> = case
            .requests
            .iter()
            .enumerate()
            .map(|(row, (arrival_ns, input, output, class, prefix))| {
                // Hash ids from a small alphabet so that prompts share prefixes.
                let hash_ids: Vec<u64> =
                    prefix.iter().copied().chain([1000 + row as u64]).collect();
                let capacity = hash_ids.len() as u64 * 16;
                RequestSpec {
                    row: row as u64,
                    arrival: SimTime::from_ns(*arrival_ns),
                    policy_class: ["premium", "regular", "unknown"]
                        .get(*class as usize)
                        .map(|s| s.to_string()),
                    input_tokens: (*input).min(capacity),
                    output_tokens: *output,
                    priority: 0.0,
                    strict_priority: 0,
                    prompt: PromptSpec::HashIds {
                        hash_ids,
                        tokens_per_hash: 16,
                    },
                    // Every fifth request is pinned, sometimes to a rank that does not exist.
                    pinned_worker: (row % 5 == 4)
                        .then(|| WorkerWithDpRank::new(*arrival_ns % 4, (*input % 3) as u32)),
                }
            })
            .collect();
        specs.sort_by_key(|r| (r.arrival, r.row));
        specs
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// VOPR-style: random systems and workloads run with every checker after every event;
        /// every request ends completed or rejected, and a rerun is identical.
        #[test]
        fn random_systems_conserve_requests_and_keep_invariants(case in case(), seed in 0u64..1000) {
            let run_once = || run(config(&case, seed), requests(&case).into_iter());
            let result = match run_once() {
                Ok(r) => r,
                Err(v) => return Err(TestCaseError::fail(format!("{v}"))),
            };
            prop_assert_eq!(result.stop_reason, StopReason::Drained);
            let ended = result.count("completed") + result.count("rejected") + result.count("aborted");
            prop_assert_eq!(ended, case.requests.len(), "conservation (seed {})", seed);
            for r in &result.records {
                if r.status == Status::Completed {
                    prop_assert_eq!(r.tokens_received, r.output_tokens);
                    prop_assert!(r.completion >= r.first_token.or(Some(r.arrival)));
                }
            }
            let again = run_once().unwrap();
            prop_assert_eq!(again.records, result.records);
        }

        /// Preemption storms: pools far too small for the load. The run must make progress
        /// to its end: it drains (virtual time cannot stand still, or the per-instant cap
        /// would stop it), every request ends, a worker rejects exactly the requests that can
        /// never fit, and every other request it was given completes.
        #[test]
        fn preemption_storms_make_progress(case in storm_case(), seed in 0u64..1000) {
            let result = run(config(&case, seed), requests(&case).into_iter())
                .map_err(|v| TestCaseError::fail(format!("{v}")))?;
            prop_assert_eq!(result.stop_reason, StopReason::Drained, "seed {}", seed);
            prop_assert_eq!(result.count("pending"), 0, "seed {}", seed);
            for r in &result.records {
                check_storm_record(&case, r).map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}")))?;
            }
        }
    }

    /// A closed loop's records against its rule: at most `n` in flight at any instant, the
    /// first `n` issued at 0, and issue `n + k` at the instant of the `k`-th end.
    fn check_closed_loop(records: &[RequestRecord], n: usize) -> Result<(), String> {
        let mut ends: Vec<SimTime> = records.iter().filter_map(|r| r.completion).collect();
        ends.sort_unstable();
        for (i, r) in records.iter().enumerate() {
            let expected = match i.checked_sub(n) {
                None => SimTime::ZERO,
                Some(k) => ends[k],
            };
            if r.arrival != expected {
                return Err(format!("issue {i} at {} instead of {expected}", r.arrival));
            }
            let t = r.arrival;
            let issued = records.iter().filter(|q| q.arrival <= t).count();
            let ended = ends.iter().filter(|&&e| e <= t).count();
            if issued - ended > n {
                return Err(format!("{} in flight at {t}", issued - ended));
            }
        }
        Ok(())
    }

    /// Decode-heavy random systems: outputs up to 300 tokens on pools from tiny to roomy, so
    /// quiet runs are long, cut by arrivals, and end at block boundaries, evictions and
    /// preemptions.
    fn quiet_case() -> impl Strategy<Value = Case> {
        case_with(8..400, 0..300, 16..2048)
    }

    /// Runs `case` pass by pass and skipping quiet passes; everything the run reports must
    /// be the same.
    fn same_skipping_or_not(case: &Case, seed: u64, jitter: bool) -> Result<(), TestCaseError> {
        let mut config = config(case, seed);
        if !jitter {
            config.delays.jitter = SimDuration::ZERO;
        }
        let run = |stepping| {
            simulate(config.clone(), requests(case).into_iter(), stepping, true)
                .map_err(|v| TestCaseError::fail(format!("{v}")))
        };
        let (skipped, skipped_kv) = run(Stepping::SkipQuiet)?;
        let (stepped, stepped_kv) = run(Stepping::PassByPass)?;
        prop_assert_eq!(&skipped.records, &stepped.records, "seed {}", seed);
        // The router saw the same prompt-block events at the same instants, in the same
        // order: only events about blocks of generated tokens are gone.
        let prompt: BTreeSet<u64> = requests(case)
            .iter()
            .flat_map(|r| r.block_hashes(16))
            .collect();
        prop_assert_eq!(
            prompt_events(skipped_kv, &prompt),
            prompt_events(stepped_kv, &prompt),
            "seed {}",
            seed
        );
        prop_assert_eq!(skipped.stop_reason, stepped.stop_reason);
        prop_assert_eq!(skipped.end_time, stepped.end_time);
        prop_assert_eq!(skipped.preemptions, stepped.preemptions);
        Ok(())
    }

    /// The KV events of a log about `prompt` blocks, one block per event (a Stored block's
    /// parent is the block before it in its event), event ids ignored: the router applies
    /// an event as the run of its blocks, so how events group their blocks is not seen.
    fn prompt_events(
        log: KvLog,
        prompt: &BTreeSet<u64>,
    ) -> Vec<(SimTime, WorkerWithDpRank, KvEventData)> {
        let mut out = Vec::new();
        for (t, e) in log {
            match e.data {
                KvEventData::Stored { mut parent, blocks } => {
                    for block in blocks {
                        if prompt.contains(&block) {
                            let blocks = vec![block];
                            out.push((t, e.worker, KvEventData::Stored { parent, blocks }));
                        }
                        parent = Some(block);
                    }
                }
                KvEventData::Removed { blocks } => {
                    for block in blocks.into_iter().filter(|h| prompt.contains(h)) {
                        let blocks = vec![block];
                        out.push((t, e.worker, KvEventData::Removed { blocks }));
                    }
                }
                other => out.push((t, e.worker, other)),
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// Issue 14: skipping quiet passes changes no record, on decode-heavy systems with
        /// every engine knob, delay and policy drawn at random.
        #[test]
        fn issue_14_skipping_quiet_passes_changes_no_record(
            case in quiet_case(), seed in 0u64..1000, jitter in prop::bool::weighted(0.2)
        ) {
            same_skipping_or_not(&case, seed, jitter)?;
        }

        /// The same on the general random systems and on preemption storms.
        #[test]
        fn issue_14_skipping_is_exact_on_random_and_storm_systems(
            case in prop_oneof![case(), storm_case()], seed in 0u64..1000
        ) {
            same_skipping_or_not(&case, seed, false)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// A closed loop issues every request, keeps at most `n` in flight, and issues each
        /// next request at the instant one ends.
        #[test]
        fn a_closed_loop_keeps_n_in_flight(case in case(), seed in 0u64..1000, n in 1u32..5) {
            let mut config = config(&case, seed);
            config.closed_loop = Some(ClosedLoop { concurrency: n, issue_until: None });
            let result = run(config, requests(&case).into_iter())
                .map_err(|v| TestCaseError::fail(format!("{v}")))?;
            prop_assert_eq!(result.stop_reason, StopReason::Drained);
            prop_assert_eq!(result.records.len(), case.requests.len(), "every request issued");
            check_closed_loop(&result.records, n as usize)
                .map_err(|e| TestCaseError::fail(format!("seed {seed}, n {n}: {e}")))?;
        }
    }

    #[test]
    fn issue_14_a_decode_run_takes_few_events_and_a_mid_run_dispatch_cuts_it() {
        // One worker: two long decodes, a third request arriving in the middle of their run.
        let case = Case {
            workers: 1,
            dp_size: 1,
            num_gpu_blocks: 1024,
            max_num_seqs: 8,
            max_num_batched_tokens: 2048,
            prefix_caching: true,
            chunked: true,
            fifo: false,
            delays_ns: (0, 0, 0),
            with_policy: false,
            requests: vec![
                (0, 512, 300, 1, vec![1]),
                (0, 700, 250, 1, vec![2]),
                (900_000_000, 300, 50, 1, vec![1, 3]),
            ],
        };
        let config = config(&case, 3);
        let run = |stepping| run_with(config.clone(), requests(&case).into_iter(), stepping);
        let (skipped, stepped) = (
            run(Stepping::SkipQuiet).unwrap(),
            run(Stepping::PassByPass).unwrap(),
        );
        assert_eq!(skipped.records, stepped.records);
        assert_eq!(skipped.count("completed"), 3);
        let third = &skipped.records[2];
        assert!(
            third.admit.unwrap() > third.arrival,
            "it joins the pass after the one in progress"
        );
        assert!(
            skipped.events * 5 < stepped.events,
            "{} events skipping, {} pass by pass",
            skipped.events,
            stepped.events
        );
    }

    #[test]
    fn a_closed_loop_stops_issuing_at_its_bound() {
        let case = Case {
            workers: 1,
            dp_size: 1,
            num_gpu_blocks: 1024,
            max_num_seqs: 8,
            max_num_batched_tokens: 256,
            prefix_caching: false,
            chunked: true,
            fifo: false,
            delays_ns: (0, 0, 0),
            with_policy: false,
            requests: (0..50).map(|_| (0, 64, 20, 1, vec![0])).collect(),
        };
        let mut config = config(&case, 1);
        let closed = |issue_until| ClosedLoop {
            concurrency: 2,
            issue_until,
        };
        config.closed_loop = Some(closed(None));
        let unpinned = || {
            requests(&case).into_iter().map(|r| RequestSpec {
                pinned_worker: None,
                ..r
            })
        };
        let all = run(config.clone(), unpinned()).unwrap();
        assert_eq!(all.records.len(), 50);
        check_closed_loop(&all.records, 2).unwrap();
        // Stop issuing at a later issue instant: exactly the requests issued before it run.
        let first_later = (9..50)
            .find(|&i| all.records[i - 1].arrival < all.records[i].arrival)
            .unwrap();
        let until = all.records[first_later].arrival;
        config.closed_loop = Some(closed(Some(until)));
        let bounded = run(config, unpinned()).unwrap();
        assert_eq!(bounded.stop_reason, StopReason::Drained);
        assert_eq!(bounded.records.len(), first_later);
        assert!(bounded.records.iter().all(|r| r.arrival < until));
        assert_eq!(bounded.count("completed"), first_later);
    }

    /// What a storm run may do to one request: a worker rejection must name a true reason,
    /// and a request servable alone that reached a worker must complete.
    fn check_storm_record(case: &Case, r: &RequestRecord) -> Result<(), String> {
        let pool_tokens = case.num_gpu_blocks * 16;
        let peak = if r.output_tokens == 0 {
            r.input_tokens
        } else {
            r.input_tokens + r.output_tokens - 1
        };
        let too_long = !case.chunked && r.input_tokens > case.max_num_batched_tokens;
        let why = match &r.status {
            Status::Rejected(why) => why.as_str(),
            Status::Completed => return Ok(()),
            other => return Err(format!("row {} ended {other:?}", r.row)),
        };
        let holds = match why {
            "prompt_exceeds_kv_pool" => r.input_tokens > pool_tokens,
            "sequence_exceeds_kv_pool" => peak > pool_tokens && r.input_tokens <= pool_tokens,
            "prompt_exceeds_token_budget" => too_long,
            "worker_stalled" => false,
            // A router rejection: it never reached a worker.
            _ => r.admit.is_none(),
        };
        if !holds {
            return Err(format!("row {} rejected as {why}: {r:?}", r.row));
        }
        Ok(())
    }

    /// One worker, 16-token blocks, no delays, requests `(input, output)` all at t = 0.
    fn small_run(
        engine: impl FnOnce(&mut EngineArgs),
        limits: Limits,
        lengths: &[(u64, u64)],
    ) -> Result<SimResult, InvariantViolation> {
        let mut case = Case {
            workers: 1,
            dp_size: 1,
            num_gpu_blocks: 64,
            max_num_seqs: 8,
            max_num_batched_tokens: 256,
            prefix_caching: false,
            chunked: true,
            fifo: false,
            delays_ns: (0, 0, 0),
            with_policy: false,
            requests: Vec::new(),
        };
        let mut config = config(&case, 7);
        engine(&mut config.engine);
        config.limits = limits;
        case.requests = lengths
            .iter()
            .map(|&(input, output)| (0, input, output, 1, vec![0, 1, 2, 3]))
            .collect();
        let specs: Vec<RequestSpec> = requests(&case)
            .into_iter()
            .map(|r| RequestSpec {
                pinned_worker: None,
                ..r
            })
            .collect();
        run(config, specs.into_iter())
    }

    #[test]
    fn passes_that_take_no_time_stop_with_no_progress_instead_of_spinning() {
        // A speedup this large rounds every pass to 0 ns: virtual time never advances.
        let limits = Limits {
            max_events_per_instant: 500,
            ..Limits::default()
        };
        let result = small_run(|e| e.speedup_ratio = 1e30, limits, &[(64, 900)]).unwrap();
        let expected = StopReason::NoProgress {
            at: SimTime::ZERO,
            events: 500,
        };
        assert_eq!(result.stop_reason, expected);
        assert_eq!(result.count("pending"), 1);
        // The same run with time advancing drains.
        let result = small_run(|_| {}, limits, &[(64, 900)]).unwrap();
        assert_eq!(result.stop_reason, StopReason::Drained);
    }

    #[test]
    fn an_overcommitted_pool_finishes_by_preempting() {
        // 64 blocks of 16 = 1024 tokens; each request peaks at 64 + 699 = 763 tokens alone.
        for fifo in [false, true] {
            let lengths = [(64, 700); 4];
            let mode = if fifo {
                PreemptionMode::Fifo
            } else {
                PreemptionMode::Lifo
            };
            let result = small_run(|e| e.preemption_mode = mode, Limits::default(), &lengths)
                .unwrap_or_else(|v| panic!("{v}"));
            assert_eq!(result.stop_reason, StopReason::Drained);
            assert_eq!(result.count("completed"), 4, "fifo {fifo}");
            assert!(result.preemptions > 0, "fifo {fifo}: no preemption");
        }
    }

    #[test]
    fn a_sequence_outgrowing_the_pool_is_rejected_and_the_rest_run() {
        let lengths = [(64, 700), (64, 2000), (64, 5)];
        let result = small_run(|_| {}, Limits::default(), &lengths).unwrap();
        let status: Vec<&Status> = result.records.iter().map(|r| &r.status).collect();
        let outgrew = Status::Rejected("sequence_exceeds_kv_pool".into());
        assert_eq!(
            status,
            vec![&Status::Completed, &outgrew, &Status::Completed]
        );
    }

    #[test]
    fn an_invariant_violation_names_the_seed() {
        let v = InvariantViolation {
            seed: 42,
            time: SimTime::from_ns(5),
            message: "boom".into(),
        };
        assert!(v.to_string().contains("seed 42"));
    }
}
