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
//! then stale (the rank's `epoch`, the one counter of stale pass ends, also bumped when the
//! rank goes down). Pass durations come from the worker's timing model (polynomial, fixed or
//! profile) through the one function formed passes use, so planned ends are exact under
//! every model. Transport jitter draws one random delay per token message, so with jitter
//! every pass runs. A run with faults also steps pass by pass ([`skips_quiet_passes`]): a
//! cancellation decides which tokens count by when they reach the router, and a
//! cancellation or a worker going down reaches a worker between its passes' ends, so the
//! lazy application would have to replay both. Workers publish no KV events for blocks of
//! generated tokens when skipping: such a block's hash is derived from its own request, so
//! no prompt the router ever looks up can match it.

use crate::engine::{Engine, EventQueue, Limits, Model, StopReason};
use crate::mocker::{Capacity, EngineArgs, MockRequest, WorkerKind, WorkerRole};
use crate::rng::{self, SimRng};
use crate::scheduling::policy::PolicyProfile;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::{DEFAULT_TICK_INTERVAL, DispatchPath, Outcome, SchedulerConfig};
use crate::scheduling::types::{KvEvent, RequestId, WorkerWithDpRank};
use crate::time::{SimDuration, SimTime};
use crate::workload::UniformBlockHashes;
pub use crate::workload::session::SessionTag;
// What a run takes in: requests, their prompts perhaps hashed ahead.
pub use crate::workload::{Arrival, PromptHashes};
use rand::RngExt;
use std::collections::BTreeSet;
use std::sync::Arc;

/// How the router picks workers, with Dynamo's `--router-mode` names (`kv_router`,
/// `round_robin`) as a scenario's `router.router_mode` and replay's `--router-mode` spell it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouterMode {
    /// Dynamo's KV router: the scheduling core with policy classes and cost-based selection.
    #[default]
    KvRouter,
    /// Plain round robin over worker ranks, no queueing.
    RoundRobin,
}

impl RouterMode {
    /// Every mode's name, as Dynamo spells it.
    pub const NAMES: [&str; 2] = ["kv_router", "round_robin"];

    /// The mode Dynamo's name `name` stands for.
    pub fn from_name(name: &str) -> Option<RouterMode> {
        match name {
            "kv_router" => Some(RouterMode::KvRouter),
            "round_robin" => Some(RouterMode::RoundRobin),
            _ => None,
        }
    }
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

/// A closed loop: the run keeps `concurrency` requests (or sessions) in flight instead of
/// releasing them at their arrival times. The first `concurrency` are issued at 0 in the order
/// given; each time one ends (a request completes or is rejected; a session's last turn
/// ends) the next one is issued at that instant, with that instant as its arrival. A session
/// holds its slot through its think times. This is how aiperf and Dynamo's replay
/// (`replay_concurrency`) measure.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ClosedLoop {
    /// Requests kept in flight (at least 1).
    pub concurrency: u32,
    /// No request is issued at or after this instant (`None`: until the requests run out).
    pub issue_until: Option<SimTime>,
}

/// The name of the one pool that a plain `workers: {count, engine}` (or a replay) describes.
pub const DEFAULT_POOL: &str = "default";

/// A pool of identical aggregated workers: `count` workers, each running `engine` (with
/// `engine.dp_size` ranks).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerPool {
    /// The pool's name ([`DEFAULT_POOL`] for the unnamed pool).
    pub name: String,
    /// Workers in the pool (at least 1).
    pub count: u32,
    /// The engine every worker of the pool runs.
    pub engine: EngineArgs,
}

impl WorkerPool {
    /// The unnamed pool of `count` workers running `engine`.
    pub fn unnamed(count: u32, engine: EngineArgs) -> WorkerPool {
        WorkerPool {
            name: DEFAULT_POOL.to_string(),
            count,
            engine,
        }
    }

    /// The kind of worker the pool runs.
    pub fn kind(&self) -> WorkerKind {
        WorkerKind::of(&self.engine)
    }

    /// What each data-parallel rank of the pool holds at most, as its kind reports it.
    pub fn capacity(&self) -> Capacity {
        self.kind().capacity(&self.engine)
    }
}

/// A fault injected into a run (the scenario's `faults:`).
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Worker `worker` (all its ranks) stops at `at`; the router hears of it after the
    /// worker-to-router delay. With `until` it returns then, with an empty KV cache.
    WorkerDown {
        worker: u64,
        at: SimTime,
        until: Option<SimTime>,
    },
    /// Each request asking for class `class` is, with probability `fraction` (a seeded draw
    /// per request in arrival order), cancelled by its client `after` its arrival unless it
    /// ended before.
    Cancel {
        class: String,
        fraction: f64,
        after: SimDuration,
    },
    /// A new worker of pool `pool` (an index in `SimConfig::pools`) joins at `at`, with the
    /// next free worker id.
    WorkerUp { pool: usize, at: SimTime },
}

/// Everything one simulation run needs besides its requests.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The router's knobs.
    pub router: RouterConfig,
    /// The policy classes the router runs (as [`select_profile`](crate::scheduling::scheduler::select_profile) chooses them).
    pub profile: PolicyProfile,
    /// The worker pools, in order: worker ids are assigned pool by pool from 0. At least one;
    /// every pool has the same `engine.block_size`, which is the router's too.
    pub pools: Vec<WorkerPool>,
    pub router_mode: RouterMode,
    pub delays: TransportDelays,
    pub limits: Limits,
    /// Run every checker after every event (slow; for tests).
    pub check_every_event: bool,
    /// The run's only seed: workload draws, the router's tie-breaks, transport jitter.
    pub seed: u64,
    /// Issue requests in a closed loop instead of at their arrival times (`None`: open loop).
    pub closed_loop: Option<ClosedLoop>,
    /// Faults to inject (none: every worker stays up, no client gives up).
    pub faults: Vec<Fault>,
    /// How many times a request in flight on a lost worker is re-routed (Dynamo's frontend
    /// `migration_limit`; 0: it is aborted).
    pub migration_limit: u32,
}

impl Default for SimConfig {
    /// What every run starts from before its inputs say otherwise: one worker of the default
    /// engine behind the default KV router without a policy file; no delays, faults,
    /// migration or closed loop; the default limits; seed 0.
    fn default() -> Self {
        let router = RouterConfig::default();
        SimConfig {
            profile: crate::scheduling::scheduler::select_profile(&router, None, None),
            router,
            pools: vec![WorkerPool::unnamed(1, EngineArgs::default())],
            router_mode: RouterMode::default(),
            delays: TransportDelays::default(),
            limits: Limits::default(),
            check_every_event: false,
            seed: 0,
            closed_loop: None,
            faults: Vec::new(),
            migration_limit: 0,
        }
    }
}

impl SimConfig {
    /// The scheduler's configuration, derived so that seed and block size cannot disagree
    /// with the workers'.
    pub fn scheduler_config(&self) -> SchedulerConfig {
        SchedulerConfig {
            router: self.router.clone(),
            profile: self.profile.clone(),
            block_size_tokens: self.block_size(),
            seed: self.seed,
            tick_interval: DEFAULT_TICK_INTERVAL,
        }
    }

    /// The KV block size of every worker, and so of the router's prompt hashes.
    pub fn block_size(&self) -> u64 {
        self.pools
            .first()
            .map_or(EngineArgs::default().common.block_size, |p| {
                p.engine.common.block_size
            })
    }

    /// The workers' total running-batch capacity (vLLM's `max_num_seqs`) over every
    /// data-parallel rank of every pool.
    pub fn capacity_seqs(&self) -> u64 {
        self.pools
            .iter()
            .map(|p| {
                let ranks = u64::from(p.count) * u64::from(p.engine.common.dp_size.max(1));
                ranks * p.capacity().max_running
            })
            .sum()
    }

    /// Whether the run serves disaggregated: prefill pools and decode pools, no aggregated.
    pub fn is_disaggregated(&self) -> bool {
        self.pools
            .iter()
            .any(|p| p.engine.common.role != WorkerRole::Aggregated)
    }

    /// A pool list the simulator cannot run is a caller's bug: none, an empty pool, pools
    /// that disagree on the block size the router hashes with, or roles that do not make a
    /// system (aggregated pools only, or prefill and decode pools and no aggregated one).
    fn check_pools(&self) -> Result<(), String> {
        let block_size = self.block_size();
        if self.pools.is_empty() {
            return Err("the run has no worker pool".into());
        }
        let has = |role| self.pools.iter().any(|p| p.engine.common.role == role);
        let roles = (
            has(WorkerRole::Aggregated),
            has(WorkerRole::Prefill),
            has(WorkerRole::Decode),
        );
        if !matches!(roles, (true, false, false) | (false, true, true)) {
            return Err(format!(
                "pool roles {roles:?} (aggregated, prefill, decode) make no system"
            ));
        }
        let cancels = self
            .faults
            .iter()
            .any(|f| matches!(f, Fault::Cancel { .. }));
        if roles.1 && cancels {
            return Err("cancel faults are not modelled in disaggregated serving".into());
        }
        match self
            .pools
            .iter()
            .find(|p| p.count == 0 || p.engine.common.block_size != block_size)
        {
            Some(p) => Err(format!(
                "pool {} has {} workers of block size {} (the router's is {block_size})",
                p.name, p.count, p.engine.common.block_size
            )),
            None => Ok(()),
        }
    }
}

/// Everything recorded about one request.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {
    pub row: u64,
    /// The class the request named, shared by every record naming it (see [`Ledger::open`]).
    pub policy_class: Option<Arc<String>>,
    /// Its resolved class plus one, so that an absent class costs no tag (see
    /// [`RequestRecord::class`]).
    pub class_index: Option<std::num::NonZeroU32>,
    pub arrival: SimTime,
    /// When the router dispatched it (immediately, or when the queue released it).
    pub dispatched: Option<SimTime>,
    /// The start of the first pass that scheduled it on its worker (Dynamo's `first_admit_ms`).
    pub admit: Option<SimTime>,
    pub first_token: Option<SimTime>,
    pub completion: Option<SimTime>,
    pub rank: Option<RankSlot>,
    /// `None` for a request the router rejected.
    pub path: Option<DispatchPath>,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub reused_input_tokens: u32,
    pub tokens_received: u32,
    pub status: Status,
    /// Its session, handoff and migrations, which most requests lack (see [`RareParts`]).
    pub rare: Option<Box<RareParts>>,
}

/// The instants of one request's handoff in disaggregated serving (see `sim::handoff`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandoffRecord {
    /// The prefill rank that computed its prompt.
    pub prefill_rank: WorkerWithDpRank,
    /// Its prompt was computed and held (the end of its last prefill pass).
    pub prefill_end: Option<SimTime>,
    /// Its decode worker reserved room for it: the transfer started.
    pub transfer_start: Option<SimTime>,
    /// The transfer landed and it joined its decode worker's queue.
    pub transfer_end: Option<SimTime>,
    /// Its prefill worker released its blocks.
    pub prefill_release: Option<SimTime>,
    /// Its decode worker first admitted it to a pass.
    pub decode_admit: Option<SimTime>,
    /// Prompt tokens found cached at its latest decode admission (non-zero only after a
    /// preemption on the decode worker).
    pub decode_reused_input_tokens: u64,
}

/// One pool's part of a run: which workers it had and how long its ranks ran passes.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolUsage {
    /// The pool's name.
    pub name: String,
    /// Its first worker id; its workers are `first_worker..first_worker + workers`.
    pub first_worker: u64,
    /// Workers in the pool.
    pub workers: u32,
    /// Data-parallel ranks per worker.
    pub dp_size: u32,
    /// Time the pool's ranks spent running passes within `[0, end_time]`, summed over its
    /// ranks, in ns.
    pub busy_ns: u128,
    /// Workers that joined the pool during the run (`worker_up`), by id.
    pub joined_workers: Vec<u64>,
    /// What its workers do.
    pub role: WorkerRole,
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
    /// The worker pools, in worker-id order.
    pub pools: Vec<PoolUsage>,
    /// Worker faults in the order they happened (empty without `faults:`).
    pub fault_marks: Vec<FaultMark>,
    /// What the run recorded for its timeline, when asked ([`Options::with_timeline`]).
    pub timeline: Option<Box<Timeline>>,
}

impl SimResult {
    /// The index (in `pools`) of the pool that worker `worker_id` belongs to.
    pub fn pool_of(&self, worker_id: u64) -> Option<usize> {
        if let Some(index) = self
            .pools
            .iter()
            .position(|p| p.joined_workers.contains(&worker_id))
        {
            return Some(index);
        }
        let after = self.pools.partition_point(|p| p.first_worker <= worker_id);
        let index = after.checked_sub(1)?;
        let pool = &self.pools[index];
        (worker_id - pool.first_worker < u64::from(pool.workers)).then_some(index)
    }

    /// How many requests ended as `kind`.
    pub fn count(&self, kind: EndStatus) -> usize {
        self.records
            .iter()
            .filter(|r| r.status.kind() == kind)
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
    /// A dispatched request reaches its worker (only with a router-to-worker delay);
    /// `attempt` is its migration count when sent.
    Deliver {
        rank: usize,
        request: RequestId,
        attempt: u32,
    },
    /// A worker's pass (or run of quiet passes) ends: its tokens and KV events leave the
    /// worker. Stale unless `epoch` is the rank's current one: the rank went down since (the
    /// pass is lost) or its quiet run was cut (its new end is scheduled).
    PassEnd { rank: usize, epoch: u64 },
    /// Tokens reach the router (only with a worker-to-router delay).
    Tokens {
        request: RequestId,
        attempt: u32,
        edge: TokenEdge,
    },
    /// A worker stops (fault).
    WorkerDown { worker: u64 },
    /// The router hears that a worker is gone.
    RouterLearnsDown { worker: u64 },
    /// A down worker returns with an empty cache (fault).
    WorkerBack { worker: u64 },
    /// A worker of pool `pool` joins (fault).
    WorkerJoin { pool: usize },
    /// The router hears of a worker that came up.
    RouterLearnsUp { worker: u64 },
    /// A client gives up on a request.
    Cancel { request: RequestId },
    /// A cancellation reaches the worker rank holding the request.
    Drop { rank: usize, request: RequestId },
    /// KV events reach the router's indexer (only with a lag).
    Kv(Vec<KvEvent>),
    /// The router's periodic recheck.
    Tick,
    /// A request's KV transfer to its decode worker lands (disaggregated serving), unless
    /// it was migrated since (a later `attempt`).
    TransferDone { request: RequestId, attempt: u32 },
}

/// Fault state: which workers are down, what the router has heard, what was lost.
#[derive(Default)]
struct FaultState {
    /// Workers the router has heard are gone (and not back).
    router_knows_down: BTreeSet<u64>,
    /// Requests (with their attempt) lost on a worker before the router heard of it.
    lost: std::collections::BTreeMap<u64, Vec<(RequestId, u32)>>,
    /// One draw stream per cancel fault, in fault order.
    cancel_rngs: Vec<SimRng>,
}

struct System {
    config: SimConfig,
    /// Every router instance, and which one hears what.
    routers: Routers,
    /// Disaggregated serving's handoffs (`None`: aggregated).
    handoff: Option<Handoff>,
    fleet: WorkerFleet,
    ledger: Ledger,
    faults: FaultState,
    violation: Option<InvariantViolation>,
    /// Draws the transport jitter.
    transport_rng: SimRng,
    /// When each request's latest worker-to-router message lands, so jitter never reorders
    /// one request's tokens.
    last_delivery: rustc_hash::FxHashMap<RequestId, SimTime>,
    /// Local hashes of the prompts' one-token blocks seen so far.
    uniform_hashes: UniformBlockHashes,
    /// The timeline's counters, when the run keeps a timeline (`None`: one branch an instant).
    timeline: Option<Box<CounterRecorder>>,
}

/// How workers advance through their passes (see the module docs). Both give the same
/// records; skipping is much faster on decode-heavy runs.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Stepping {
    /// Skip runs of quiet passes (the default).
    #[default]
    SkipQuiet,
    /// Every pass is an event (the reference the skipping is tested against).
    PassByPass,
}

/// The most request records a run reserves room for before its requests arrive (about
/// 220 MB); a run with more grows its table as they come.
const MAX_RESERVED_RECORDS: usize = 1 << 20;

/// What a run needs besides its requests: the configuration, and how to step it.
#[derive(Clone, Debug)]
pub struct Options {
    pub config: SimConfig,
    /// How workers advance through their passes (default: skipping quiet ones).
    pub stepping: Stepping,
    /// Records to reserve room for before the requests arrive: a guess, never a bound
    /// (`None`: the lower bound of the requests' own size hint). Growing a table of 100k
    /// records by doubling was 3% of such a run (copies, and fresh pages to fault in).
    pub expected_requests: Option<usize>,
    /// Keep a timeline of the run (passes, counters, migrations) in its result.
    pub timeline: bool,
}

impl Options {
    /// A run of `config`, skipping quiet passes, reserving what the requests' size hint says.
    pub fn new(config: SimConfig) -> Options {
        Options {
            config,
            stepping: Stepping::default(),
            expected_requests: None,
            timeline: false,
        }
    }

    /// The same, keeping a timeline when `timeline` says so.
    pub fn with_timeline(mut self, timeline: bool) -> Options {
        self.timeline = timeline;
        self
    }

    /// The same, stepping workers as `stepping` says.
    pub fn with_stepping(mut self, stepping: Stepping) -> Options {
        self.stepping = stepping;
        self
    }

    /// The same, reserving room for `expected_requests` records.
    pub fn expecting(mut self, expected_requests: usize) -> Options {
        self.expected_requests = Some(expected_requests);
        self
    }
}

/// Runs a simulation over `requests` (in any order; equal arrival times keep row order):
/// plain [`RequestSpec`](crate::workload::RequestSpec)s, or [`Arrival`]s whose prompts may come hashed already.
pub fn run<A: Into<Arrival>>(
    options: Options,
    requests: impl IntoIterator<Item = A>,
) -> Result<SimResult, InvariantViolation> {
    simulate(options, requests.into_iter().map(Into::into), false).map(|(result, _)| result)
}

/// Every KV event the router applied, with when (kept only when asked: for tests).
type KvLog = Vec<(SimTime, KvEvent)>;

/// Whether a run of `config` stepped as `stepping` skips quiet passes: only when asked, and
/// never with transport jitter (each token message draws its own delay) or with faults
/// (a cancellation or a worker going down reaches a worker between its passes' ends and
/// their tokens' arrival, so those runs step pass by pass). In disaggregated serving a decode
/// worker with a handoff waiting for it runs no quiet run (its every pass end is a step).
pub fn skips_quiet_passes(config: &SimConfig, stepping: Stepping) -> bool {
    stepping == Stepping::SkipQuiet
        && config.delays.jitter == SimDuration::ZERO
        && config.faults.is_empty()
}

/// [`run`], keeping the router's KV events when `log_kv` says so.
fn simulate(
    options: Options,
    requests: impl Iterator<Item = Arrival>,
    log_kv: bool,
) -> Result<(SimResult, KvLog), InvariantViolation> {
    let expected_requests = options
        .expected_requests
        .unwrap_or_else(|| requests.size_hint().0);
    let mut system = new_system(options.config, options.stepping, expected_requests, log_kv)?;
    if options.timeline {
        system.start_timeline();
    }
    let mut engine = Engine::new(system.config.limits);
    system.schedule_faults(engine.queue());
    let mut requests = Feed::new(requests, system.config.closed_loop);
    let mut last_instant = SimTime::ZERO;
    let stop_reason = loop {
        if let Some(v) = system.violation.take() {
            return Err(v);
        }
        let next_arrival = requests.next_time(&mut system.ledger);
        let Some(now) = min_time(next_arrival, engine.queue().peek_time()) else {
            // Each refusal round ends requests for good: bounded by the request count.
            if system.refuse_stranded(last_instant, engine.queue()) {
                continue;
            }
            break StopReason::Drained;
        };
        if now > system.config.limits.max_time {
            break StopReason::TimeLimit;
        }
        last_instant = now;
        if let Err(reason) = system.run_instant(now, &mut engine, &mut requests) {
            break reason;
        }
    };
    finish_run(system, &engine, stop_reason)
}

/// The system at the start of a run of `config`, with room for `expected_requests` records;
/// a pool list it cannot run is the caller's bug.
fn new_system(
    config: SimConfig,
    stepping: Stepping,
    expected_requests: usize,
    log_kv: bool,
) -> Result<System, InvariantViolation> {
    if let Err(message) = config.check_pools() {
        return Err(InvariantViolation {
            seed: config.seed,
            time: SimTime::ZERO,
            message,
        });
    }
    let skip_quiet = skips_quiet_passes(&config, stepping);
    let mut scheduler = config.scheduler_config();
    if config.is_disaggregated() {
        scheduler.router = handoff::prefill_router_config(&config.router);
    }
    let routed = |role| role != WorkerRole::Decode;
    let router = RouterDriver::new(
        config.router_mode,
        scheduler,
        fleet::worker_set_of(&config.pools, routed),
        cached_blocks_hint(&config.pools, routed),
        log_kv,
    );
    let mut fleet = WorkerFleet::new(config.pools.clone(), skip_quiet);
    // A run that skips quiet passes has no faults: a request leaves its rank by its last
    // token, which can carry the count of the middle ones.
    if skip_quiet && tokens::delivers_tokens_directly(&config) {
        fleet.count_middle_tokens();
    }
    let handoff = config
        .is_disaggregated()
        .then(|| Handoff::new(&config, fleet.rank_count()));
    let decode_router = config
        .is_disaggregated()
        .then(|| handoff::decode_router(&config));
    let routers = Routers::new(router, decode_router);
    let faults = FaultState {
        cancel_rngs: (0..config.faults.len())
            .map(|k| rng::stream(config.seed, &format!("faults/cancel/{k}")))
            .collect(),
        ..FaultState::default()
    };
    Ok(System {
        faults,
        routers,
        handoff,
        fleet,
        ledger: Ledger::with_capacity(expected_requests.min(MAX_RESERVED_RECORDS)),
        violation: None,
        transport_rng: rng::stream(config.seed, "sim/transport"),
        last_delivery: Default::default(),
        uniform_hashes: UniformBlockHashes::default(),
        timeline: None,
        config,
    })
}

/// The result of a run that stopped for `stop_reason`, after the end-of-run checks.
fn finish_run(
    mut system: System,
    engine: &Engine<Event>,
    stop_reason: StopReason,
) -> Result<(SimResult, KvLog), InvariantViolation> {
    if stop_reason.is_limit() {
        // Passes over by the stop count, as they would pass by pass.
        let at = match stop_reason {
            StopReason::TimeLimit => system.config.limits.max_time,
            _ => engine.now(),
        };
        system.fleet.apply_quiet_until(at, &mut system.ledger);
    }
    system.fleet.credit_unlisted_tokens(&mut system.ledger);
    let end_time = system.ledger.makespan();
    system.finish(stop_reason, end_time)?;
    let pools = system
        .fleet
        .pool_usage(end_time, system.ledger.change_epoch());
    let kv_log = system.routers.entry().take_kv_log();
    let timeline = system.take_timeline();
    let classes = system.routers.entry_ref().core().profile().classes();
    let result = SimResult {
        timeline,
        pools,
        fault_marks: system.fleet.take_marks(),
        class_names: classes.iter().map(|c| c.name.clone()).collect(),
        class_quanta_tokens: classes.iter().map(|c| c.quantum_tokens).collect(),
        records: system.ledger.into_records(),
        stop_reason,
        events: engine.events_processed(),
        end_time,
        preemptions: system.fleet.preemptions(),
    };
    Ok((result, kv_log))
}

/// Schedules the end of a pass just started or cut, if any.
fn schedule_pass_end(queue: &mut EventQueue<Event>, end: Option<PassEndAt>) {
    if let Some(PassEndAt { at, rank, epoch }) = end {
        queue.schedule(at, Event::PassEnd { rank, epoch });
    }
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
        requests: &mut Feed<impl Iterator<Item = Arrival>>,
    ) -> Result<(), StopReason> {
        while engine.queue().peek_time() == Some(now) {
            engine.step(self)?;
        }
        while let Some(arrival) = requests.next_at(now, &mut self.ledger) {
            self.arrive(now, arrival, requests, engine.queue());
        }
        for rank in self.fleet.take_starts_due() {
            self.start_pass(now, rank, engine.queue());
        }
        for end in self.fleet.align_lockstep() {
            schedule_pass_end(engine.queue(), Some(end));
        }
        self.schedule_tick(engine.queue());
        if self.timeline.is_some() {
            self.sample_counters(now);
        }
        Ok(())
    }

    fn arrive(
        &mut self,
        now: SimTime,
        arrival: Arrival,
        feed: &mut Feed<impl Iterator<Item = Arrival>>,
        queue: &mut EventQueue<Event>,
    ) {
        let (spec, hashes) = (arrival.spec, arrival.hashes);
        let block_size = self.config.block_size();
        let (hashes, unshared_from) =
            feed::prompt_blocks(&spec, hashes, block_size, &mut self.uniform_hashes);
        // A migrated request's prompt takes in its generated tokens and goes where its old
        // blocks may still be: with faults, no block is known to be its alone.
        let unshared_from = match self.config.faults.is_empty() {
            true => unshared_from,
            false => u64::MAX,
        };
        let class = spec.policy_class.clone();
        let id = self.ledger.open(now, spec, hashes, unshared_from);
        let session = arrival.session.map(|s| *s);
        self.ledger
            .set_session(id, session.as_ref().and_then(|s| s.tag.clone()));
        // Watched before it is routed: a router may reject it at once, ending it.
        feed.opened(id, session, &mut self.ledger);
        self.draw_cancel(now, id, class.as_deref(), queue);
        self.route(now, id, queue);
        self.schedule_tick(queue);
    }

    /// Hands request `id` (in flight) to the router and acts on what it decides.
    fn route(&mut self, now: SimTime, id: RequestId, queue: &mut EventQueue<Event>) {
        let Some(f) = self.ledger.in_flight(id) else {
            return;
        };
        self.routers.entry().route(now, id, f);
        self.drain_router(now, queue);
    }

    /// Acts on every decision the router made.
    fn drain_router(&mut self, now: SimTime, queue: &mut EventQueue<Event>) {
        while let Some(decision) = self.routers.entry().poll_decision() {
            match decision {
                RouterDecision::Dispatch {
                    id,
                    rank,
                    path,
                    class_index,
                } => {
                    self.ledger.dispatched(now, id, rank, path, class_index);
                    self.touch_rank(Some(rank));
                    if self.handoff.is_some() {
                        self.ledger.prefill_routed(id);
                    }
                    let rank = self.rank_index(rank);
                    self.send_to_worker(now, rank, id, queue);
                }
                RouterDecision::Reject {
                    id,
                    class_index,
                    error,
                } => {
                    self.ledger.set_class(id, class_index);
                    self.end(now, id, Status::Rejected(Rejection::router(error)));
                }
            }
        }
        if self.config.check_every_event {
            self.check(now);
        }
    }

    /// The run has nothing left to happen at `now`, the last instant: requests still waiting
    /// for a worker when none is left are refused (1.6.1's replay would wait for one that
    /// never comes). Returns whether any was.
    fn refuse_stranded(&mut self, now: SimTime, queue: &mut EventQueue<Event>) -> bool {
        let refused = self.routers.entry().no_more_workers(now);
        if refused {
            self.drain_router(now, queue);
        }
        refused
    }

    fn rank_index(&self, rank: WorkerWithDpRank) -> usize {
        self.fleet
            .rank_index(rank)
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
            let attempt = self.ledger.attempt(id);
            let request = id;
            let event = Event::Deliver {
                rank,
                request,
                attempt,
            };
            queue.schedule(now.saturating_add(delay), event);
        }
    }

    fn deliver(&mut self, now: SimTime, rank: usize, id: RequestId, queue: &mut EventQueue<Event>) {
        let Some(f) = self.ledger.in_flight(id) else {
            return;
        };
        // A prefill worker computes the prompt and one token nobody sees.
        let max_output_tokens = match self.handoff {
            Some(_) => 1,
            None => f.output_tokens,
        };
        let request = MockRequest {
            id,
            prompt_tokens: f.prompt_tokens,
            prompt_hashes: f.hashes.clone(),
            max_output_tokens,
            unshared_from: f.unshared_from,
        };
        if self.fleet.is_down(rank) {
            self.deliver_to_down(now, rank, id, queue);
            return;
        }
        match self.fleet.deliver(now, rank, request, &mut self.ledger) {
            Ok(end) => schedule_pass_end(queue, end),
            Err(message) => {
                self.fail(now, message);
                return;
            }
        }
        // The caller drains.
        self.routers.entry().dispatched(now, id);
    }

    /// Ends request `id` at `now` with `status`: every end passes here. The ledger records
    /// it (a second end is a bug); the request's transport ordering is forgotten.
    fn end(&mut self, now: SimTime, id: RequestId, status: Status) {
        if let Err(message) = self.ledger.finish(now, id, status) {
            self.fail(now, message);
            return;
        }
        self.last_delivery.remove(&id);
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
        // A decode rank with a handoff waiting takes a step at every pass end: no quiet run.
        let allow_quiet = self.handoff.as_ref().is_none_or(|h| !h.has_pending(rank));
        match self
            .fleet
            .start_pass(now, rank, allow_quiet, &mut self.ledger)
        {
            Ok(end) => schedule_pass_end(queue, end),
            Err(message) => self.fail(now, message),
        }
    }

    fn end_pass(&mut self, now: SimTime, rank: usize, epoch: u64, queue: &mut EventQueue<Event>) {
        let output = match self.fleet.end_pass(now, rank, epoch, &mut self.ledger) {
            PassEnded::Formed(output) => output,
            PassEnded::Stale => return,
            PassEnded::Quiet => {
                if self.handoff.is_some() && self.fleet.role(rank) == WorkerRole::Decode {
                    self.decode_pass_ended(now, rank, queue);
                }
                return;
            }
        };
        let role = self.fleet.role(rank);
        // Decode workers publish to no router.
        if role != WorkerRole::Decode {
            self.publish_kv_events(now, &output.kv_events, queue);
        }
        self.deliver_rejections(now, rank, &output.rejected, queue);
        if role == WorkerRole::Prefill {
            self.prefill_pass_ended(now, rank, &output.held, queue);
            self.fleet.give_back(rank, output);
            self.end_idle_lockstep_peers(now, rank, queue);
            return;
        }
        self.deliver_tokens(now, &output, queue);
        self.fleet.give_back(rank, output);
        // A lock-step decode rank steps when its worker's pass has ended on every rank.
        if role == WorkerRole::Decode && !self.fleet.in_pass(rank) {
            self.decode_pass_ended(now, rank, queue);
            self.end_idle_lockstep_peers(now, rank, queue);
        }
    }

    /// A lock-step worker's pass ended at `now` with rank `rank`'s, the last of its ranks to
    /// end: the worker steps all its ranks at once, so every other prefill rank lets go of the
    /// sources released while the pass ran, and every other decode rank takes its pass-end
    /// step (landed transfers activated, a reservation).
    fn end_idle_lockstep_peers(
        &mut self,
        now: SimTime,
        rank: usize,
        queue: &mut EventQueue<Event>,
    ) {
        for peer in self.fleet.lockstep_peers(rank) {
            match self.fleet.role(peer) {
                WorkerRole::Prefill => self.prefill_pass_ended(now, peer, &[], queue),
                WorkerRole::Decode => self.decode_pass_ended(now, peer, queue),
                WorkerRole::Aggregated => {}
            }
        }
    }

    /// A pass's KV events reach the router's index, now or after the lag.
    fn publish_kv_events(
        &mut self,
        now: SimTime,
        events: &[KvEvent],
        queue: &mut EventQueue<Event>,
    ) {
        if events.is_empty() {
            return;
        }
        let lag = self.config.delays.kv_event_lag;
        if lag == SimDuration::ZERO {
            for event in events {
                self.routers.entry().kv_event(now, event);
            }
        } else {
            queue.schedule(now.saturating_add(lag), Event::Kv(events.to_vec()));
        }
    }

    /// Requests rank `rank` refused in its pass end at `now`.
    fn deliver_rejections(
        &mut self,
        now: SimTime,
        rank: usize,
        rejected: &[crate::mocker::Rejection],
        queue: &mut EventQueue<Event>,
    ) {
        for rejection in rejected {
            let id = rejection.id;
            if !self.ledger.is_pending(id) {
                continue; // cancelled while the pass ran
            }
            let status = Status::Rejected(Rejection::Worker(rejection.reason));
            self.touch_all_ranks();
            self.end(now, id, status);
            self.token_router(rank).finished(now, id, Outcome::Aborted);
            self.drain_router(now, queue);
        }
    }

    /// The router that hears rank `rank`'s tokens and ends.
    fn token_router(&mut self, rank: usize) -> &mut RouterDriver {
        self.routers.for_role(self.fleet.role(rank))
    }

    /// Schedules the router's periodic recheck when it needs one and none is scheduled.
    fn schedule_tick(&mut self, queue: &mut EventQueue<Event>) {
        if let Some(at) = self.routers.entry().tick_due() {
            queue.schedule(at, Event::Tick);
        }
    }

    fn check(&mut self, now: SimTime) {
        let (routers, handoff) = (&self.routers, self.handoff.as_ref());
        // A request may end on its decode worker before its source lets go (at the end of
        // its prefill worker's pass): the prefill router holds it until then.
        let holds = |id| routers.holds(id, handoff.is_some_and(|h| h.is_releasing(id)));
        let result = routers
            .check_invariants()
            .and_then(|()| self.fleet.check())
            .and_then(|()| self.ledger.check(holds));
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
            if let Err(message) = self.ledger.check_all_ended() {
                self.fail(now, message);
            }
            // Everything that ran has been freed: no booking, queue entry or worker state left.
            if let Err(message) = self.routers.check_drained() {
                self.fail(now, message);
            }
            if let Err(message) = self.fleet.check_drained() {
                self.fail(now, message);
            }
            if let Some(Err(message)) = self.handoff.as_ref().map(Handoff::check_drained) {
                self.fail(now, message);
            }
        }
        match self.violation.take() {
            Some(v) => Err(v),
            None => Ok(()),
        }
    }
}

impl Model for System {
    type Event = Event;

    fn handle(&mut self, now: SimTime, event: Event, queue: &mut EventQueue<Event>) {
        match event {
            Event::Deliver {
                rank,
                request,
                attempt,
            } => {
                if self.ledger.attempt(request) == attempt {
                    self.deliver(now, rank, request, queue);
                }
                self.drain_router(now, queue);
            }
            Event::PassEnd { rank, epoch } => self.end_pass(now, rank, epoch, queue),
            Event::Tokens {
                request,
                attempt,
                edge,
            } => {
                self.receive_tokens(now, request, attempt, edge);
                self.drain_router(now, queue);
            }
            Event::WorkerDown { worker } => self.worker_down(now, worker, queue),
            Event::RouterLearnsDown { worker } => self.router_learns_down(now, worker, queue),
            Event::WorkerBack { worker } => self.worker_back(now, worker, queue),
            Event::WorkerJoin { pool } => self.worker_join(now, pool, queue),
            Event::RouterLearnsUp { worker } => self.router_learns_up(now, worker, queue),
            Event::Cancel { request } => self.cancel(now, request, queue),
            Event::Drop { rank, request } => self.drop_request(rank, request),
            Event::Kv(events) => {
                for event in &events {
                    self.routers.entry().kv_event(now, event);
                }
                self.drain_router(now, queue);
            }
            Event::Tick => {
                self.touch_all_ranks();
                self.routers.entry().tick(now);
                self.drain_router(now, queue);
            }
            Event::TransferDone { request, attempt } => {
                if self.ledger.attempt(request) == attempt {
                    self.transfer_done(now, request, queue);
                }
            }
        }
    }
}

mod driver;
mod faults;
mod feed;
mod fleet;
mod handoff;
mod handoff_loss;
mod ledger;
mod routers;
mod status;
pub mod timeline;
mod tokens;

use driver::{RouterDecision, RouterDriver};
pub use faults::FaultMark;
use feed::Feed;
use fleet::{PassEndAt, PassEnded, WorkerFleet, cached_blocks_hint};
#[cfg(test)]
use fleet::{RESERVED_BLOCKS, reserved_blocks_per_rank, warms_probes};
use handoff::Handoff;
pub use ledger::RareParts;
use ledger::{Ledger, RankSlot, TokenEdge};
use routers::Routers;
pub use status::{AbortReason, CancelReason, EndStatus, Rejection, Status};
use timeline::{CounterRecorder, Timeline};

#[cfg(test)]
mod pool_tests;

#[cfg(test)]
mod tests {
    mod disaggregated;
    mod sessions;
    use super::*;
    use crate::mocker::{
        Backend, CapacityArgs, CommonArgs, FixedTiming, PreemptionMode, RejectReason,
        TimingProfile, TimingSource, VllmArgs,
    };
    use crate::scheduling::policy::PolicyConfig;
    use crate::scheduling::router_config::RouterConfig;
    use crate::scheduling::types::KvEventData;
    use crate::workload::{PromptSpec, RequestSpec};
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

    #[test]
    fn a_router_mode_reads_the_same_from_a_flag_name_and_from_yaml() {
        for name in RouterMode::NAMES {
            let from_flag = RouterMode::from_name(name).unwrap();
            let from_yaml: RouterMode = serde_saphyr::from_str(name).unwrap();
            assert_eq!(from_flag, from_yaml, "{name}");
        }
        assert_eq!(
            RouterMode::from_name("kv_router"),
            Some(RouterMode::KvRouter)
        );
        assert_eq!(RouterMode::from_name("round-robin"), None);
        assert!(serde_saphyr::from_str::<RouterMode>("RoundRobin").is_err());
    }

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
            common: CommonArgs {
                block_size: 16,
                capacity: CapacityArgs {
                    num_gpu_blocks: case.num_gpu_blocks,
                    max_num_seqs: case.max_num_seqs,
                    max_num_batched_tokens: case.max_num_batched_tokens,
                    ..CapacityArgs::default()
                },
                enable_prefix_caching: case.prefix_caching,
                dp_size: case.dp_size,
                ..CommonArgs::default()
            },
            backend: Backend::Vllm(VllmArgs {
                enable_chunked_prefill: case.chunked,
                preemption_mode: if case.fifo {
                    PreemptionMode::Fifo
                } else {
                    PreemptionMode::Lifo
                },
            }),
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
            pools: vec![WorkerPool::unnamed(case.workers, engine)],
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
            check_every_event: true,
            seed,
            closed_loop: None,
            faults: Vec::new(),
            migration_limit: 0,
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
            let run_once = || run(Options::new(config(&case, seed)), requests(&case));
            let result = match run_once() {
                Ok(r) => r,
                Err(v) => return Err(TestCaseError::fail(format!("{v}"))),
            };
            prop_assert_eq!(result.stop_reason, StopReason::Drained);
            let ended = result.count(EndStatus::Completed) + result.count(EndStatus::Rejected) + result.count(EndStatus::Aborted);
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
            let result = run(Options::new(config(&case, seed)), requests(&case))
                .map_err(|v| TestCaseError::fail(format!("{v}")))?;
            prop_assert_eq!(result.stop_reason, StopReason::Drained, "seed {}", seed);
            prop_assert_eq!(result.count(EndStatus::Pending), 0, "seed {}", seed);
            for r in &result.records {
                check_storm_record(&case, r).map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}")))?;
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// Recording a timeline never panics, on random systems with random faults, and
        /// changes nothing the run records; every pass slice lies within the run and the
        /// passes of one rank never overlap.
        #[test]
        fn recording_a_timeline_never_panics_and_changes_no_record(
            case in case(), f in fault_case(), seed in 0u64..1000, with_faults in any::<bool>(),
        ) {
            let mut config = config(&case, seed);
            if with_faults {
                config.faults = faults(&case, &f);
                config.migration_limit = f.migration_limit;
            }
            let plain = run(Options::new(config.clone()), requests(&case))
                .map_err(|v| TestCaseError::fail(format!("{v}")))?;
            let recorded = run(Options::new(config).with_timeline(true), requests(&case))
                .map_err(|v| TestCaseError::fail(format!("{v}")))?;
            prop_assert_eq!(&plain.records, &recorded.records);
            prop_assert!(plain.timeline.is_none());
            let timeline = recorded.timeline.as_deref().expect("asked for");
            let mut by_rank: Vec<Vec<(SimTime, SimTime)>> = vec![Vec::new(); timeline.ranks.len()];
            for p in &timeline.passes {
                prop_assert!(p.start <= p.end);
                by_rank[p.rank as usize].push((p.start, p.end));
            }
            for mut passes in by_rank {
                passes.sort();
                prop_assert!(passes.windows(2).all(|w| w[0].1 <= w[1].0), "{:?}", passes);
            }
        }
    }

    /// Random faults for a case: down windows (some never ending) of existing workers that
    /// never overlap on one worker, a cancel of class `regular`, a joining worker, and a
    /// migration limit.
    #[derive(Debug, Clone)]
    struct FaultCase {
        downs: Vec<(u64, u64, Option<u64>)>,
        cancel: Option<(f64, u64)>,
        join_at_ms: Option<u64>,
        migration_limit: u32,
    }

    fn fault_case() -> impl Strategy<Value = FaultCase> {
        (
            prop::collection::vec((0u64..4, 0u64..60, prop::option::of(1u64..40)), 0..4),
            prop::option::of((0.0f64..=1.0, 0u64..30)),
            prop::option::of(0u64..60),
            0u32..4,
        )
            .prop_map(|(downs, cancel, join_at_ms, migration_limit)| FaultCase {
                downs,
                cancel,
                join_at_ms,
                migration_limit,
            })
    }

    fn faults(case: &Case, f: &FaultCase) -> Vec<Fault> {
        let ms = |v: u64| SimTime::from_ns(v * 1_000_000);
        let mut windows: Vec<(u64, u64, Option<u64>)> = Vec::new();
        for &(worker, at, len) in &f.downs {
            let until = len.map(|l| at + l);
            let overlaps = windows.iter().any(|&(w, a, u)| {
                w == worker && until.is_none_or(|until| a < until) && u.is_none_or(|u| at < u)
            });
            if worker < u64::from(case.workers) && !overlaps {
                windows.push((worker, at, until));
            }
        }
        let mut out: Vec<Fault> = windows
            .into_iter()
            .map(|(worker, at, until)| Fault::WorkerDown {
                worker,
                at: ms(at),
                until: until.map(ms),
            })
            .collect();
        if let Some((fraction, after)) = f.cancel {
            out.push(Fault::Cancel {
                class: "regular".into(),
                fraction,
                after: SimDuration::from_ms(after),
            });
        }
        if let Some(at) = f.join_at_ms {
            out.push(Fault::WorkerUp {
                pool: 0,
                at: ms(at),
            });
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// VOPR-style with faults: random down windows, joins, cancellations and
        /// migration limits, every checker after every event (no booking or flight survives
        /// its request, nothing on a down worker, each end counted once); every request
        /// ends exactly once, and a rerun is identical.
        #[test]
        fn random_faults_conserve_requests_and_keep_invariants(
            case in case(), f in fault_case(), seed in 0u64..1000,
        ) {
            let mut config = config(&case, seed);
            config.faults = faults(&case, &f);
            config.migration_limit = f.migration_limit;
            let run_once = || run(Options::new(config.clone()), requests(&case));
            let result = run_once().map_err(|v| TestCaseError::fail(format!("{v}")))?;
            prop_assert_eq!(result.stop_reason, StopReason::Drained);
            let ended: usize = [EndStatus::Completed, EndStatus::Rejected, EndStatus::Cancelled, EndStatus::Aborted]
                .into_iter()
                .map(|s| result.count(s))
                .sum();
            prop_assert_eq!(ended, case.requests.len(), "conservation (seed {})", seed);
            for r in &result.records {
                prop_assert!(r.migrations() <= f.migration_limit);
                prop_assert!(r.completion.is_some(), "every request ends at an instant");
                if r.status == Status::Completed {
                    prop_assert_eq!(r.tokens_received, r.output_tokens);
                }
                if let (Status::Cancelled(_), Some((_, after))) = (&r.status, f.cancel) {
                    prop_assert_eq!(r.completion, Some(r.arrival.saturating_add(SimDuration::from_ms(after))));
                }
            }
            let again = run_once().unwrap();
            prop_assert_eq!(again.records, result.records);
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

    /// Runs `case` pass by pass and skipping quiet passes, its transport jitter kept only if
    /// `jitter` says so; everything the run reports must be the same. A run with jitter (when
    /// the case draws any) does not skip: asked to, it must step pass by pass, event for
    /// event.
    fn same_skipping_or_not(case: &Case, seed: u64, jitter: bool) -> Result<(), TestCaseError> {
        let mut config = config(case, seed);
        if !jitter {
            config.delays.jitter = SimDuration::ZERO;
        }
        let skips = skips_quiet_passes(&config, Stepping::SkipQuiet);
        prop_assert_eq!(skips, config.delays.jitter == SimDuration::ZERO);
        let (skipped_events, stepped_events) = same_records_either_way(case, config, seed)?;
        if !skips {
            prop_assert_eq!(skipped_events, stepped_events, "seed {}: jitter", seed);
        }
        Ok(())
    }

    /// Runs `config` over `case`'s requests pass by pass and skipping quiet passes; the
    /// records, the router's prompt-block KV stream and the pools' busy time must be the same.
    /// Returns the events each took (skipping, then pass by pass).
    fn same_records_either_way(
        case: &Case,
        config: SimConfig,
        seed: u64,
    ) -> Result<(u64, u64), TestCaseError> {
        let run = |stepping| {
            let options = Options::new(config.clone())
                .with_stepping(stepping)
                .expecting(0);
            simulate(options, requests(case).into_iter().map(Arrival::from), true)
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
        prop_assert_eq!(&skipped.pools, &stepped.pools, "seed {}", seed);
        Ok((skipped.events, stepped.events))
    }

    /// Timing models for the skipping tests: the polynomial, a fixed one, and a profile whose
    /// decode time depends on both the batch's context and its mean context length (so a
    /// quiet pass's duration depends on its request count too).
    fn timing_model() -> impl Strategy<Value = TimingSource> {
        let profile = TimingProfile::from_arrays(
            "test-profile",
            [vec![1.0, 512.0, 4096.0], vec![8.0, 20.0, 95.0]],
            [vec![16.0, 2048.0, 32768.0], vec![16.0, 512.0, 4096.0]],
            vec![2.0, 3.5, 7.0, 4.0, 6.5, 11.0, 9.0, 13.0, 21.0],
        )
        .expect("a valid profile");
        prop_oneof![
            Just(TimingSource::Polynomial),
            (1u64..40_000, 1u64..20_000).prop_map(|(p, d)| TimingSource::Fixed(FixedTiming {
                prefill_ms: p as f64 / 1000.0,
                decode_ms: d as f64 / 1000.0,
            })),
            Just(TimingSource::Profile(Arc::new(profile))),
        ]
    }

    /// `case`'s workers as two pools when it has two or more (the last worker alone, on
    /// `second`), else one, on `first`.
    fn pools_with(case: &Case, first: TimingSource, second: TimingSource) -> Vec<WorkerPool> {
        let engine = config(case, 0).pools[0].engine.clone();
        let with = |timing: TimingSource| {
            let mut engine = engine.clone();
            engine.common.timing = timing;
            engine
        };
        if case.workers < 2 {
            return vec![WorkerPool::unnamed(case.workers, with(first))];
        }
        vec![
            WorkerPool {
                name: "big".into(),
                count: case.workers - 1,
                engine: with(first),
            },
            WorkerPool {
                name: "small".into(),
                count: 1,
                engine: with(second),
            },
        ]
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

        /// Skipping quiet passes changes no record, on decode-heavy systems with every
        /// engine knob, delay and policy drawn at random; with transport jitter (a fifth of
        /// the cases) skipping is off, and the run asked to skip steps pass by pass.
        #[test]
        fn skipping_quiet_passes_changes_no_record(
            case in quiet_case(), seed in 0u64..1000, jitter in prop::bool::weighted(0.2)
        ) {
            same_skipping_or_not(&case, seed, jitter)?;
        }

        /// Skipping is exact under every timing model (polynomial, fixed, profile), with
        /// pools of different models side by side: the planned ends come from the same
        /// duration function as formed passes, and the pools' busy time is the same too.
        #[test]
        fn skipping_is_exact_under_every_timing_model_and_pool(
            case in quiet_case(), first in timing_model(), second in timing_model(),
            seed in 0u64..1000,
        ) {
            let mut config = config(&case, seed);
            config.delays.jitter = SimDuration::ZERO;
            config.pools = pools_with(&case, first, second);
            same_records_either_way(&case, config, seed)?;
        }

        /// A run that skips quiet passes and receives every token at its pass's end has its
        /// workers count middle tokens instead of listing them: no record changes, even when
        /// a time limit stops the run with streams half way, requests preempted and passes in
        /// flight (a token counted in a pass not yet delivered is not credited).
        #[test]
        fn counting_middle_tokens_changes_no_record(
            case in prop_oneof![quiet_case(), storm_case()], seed in 0u64..1000,
            limit_ms in prop::option::of(1u64..3_000),
        ) {
            let mut config = config(&case, seed);
            config.check_every_event = false;
            config.delays.worker_to_router = SimDuration::ZERO;
            config.delays.jitter = SimDuration::ZERO;
            if let Some(ms) = limit_ms {
                config.limits.max_time = SimTime::from_ns(ms * 1_000_000);
            }
            prop_assert!(tokens::delivers_tokens_directly(&config));
            same_records_either_way(&case, config, seed)?;
        }

        /// The same on the general random systems and on preemption storms.
        #[test]
        fn skipping_is_exact_on_random_and_storm_systems(
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
            let result = run(Options::new(config), requests(&case))
                .map_err(|v| TestCaseError::fail(format!("{v}")))?;
            prop_assert_eq!(result.stop_reason, StopReason::Drained);
            prop_assert_eq!(result.records.len(), case.requests.len(), "every request issued");
            check_closed_loop(&result.records, n as usize)
                .map_err(|e| TestCaseError::fail(format!("seed {seed}, n {n}: {e}")))?;
        }
    }

    /// Two long decodes from time 0 and a third request 900 ms later, in the middle of
    /// their quiet run.
    fn two_long_decodes_and_a_late_arrival(workers: u32, with_policy: bool) -> Case {
        Case {
            workers,
            dp_size: 1,
            num_gpu_blocks: 1024,
            max_num_seqs: 8,
            max_num_batched_tokens: 2048,
            prefix_caching: true,
            chunked: true,
            fifo: false,
            delays_ns: (0, 0, 0),
            with_policy,
            requests: vec![
                (0, 512, 300, 1, vec![1]),
                (0, 700, 250, 1, vec![2]),
                (900_000_000, 300, 50, 1, vec![1, 3]),
            ],
        }
    }

    /// Room made at start is bounded for the whole fleet: 4,096 ranks of a large pool touched
    /// 200 MB before their first request when each pool reserved a full cache.
    #[test]
    fn a_large_fleet_reserves_a_bounded_room_in_all() {
        assert_eq!(
            reserved_blocks_per_rank(32),
            32_768,
            "the bench's fleet: a full cache"
        );
        assert_eq!(reserved_blocks_per_rank(4096), 256);
        assert_eq!(reserved_blocks_per_rank(0), RESERVED_BLOCKS);
        let mut pools = vec![WorkerPool {
            name: "default".into(),
            count: 4096,
            engine: EngineArgs {
                common: CommonArgs {
                    capacity: CapacityArgs {
                        num_gpu_blocks: 1 << 20,
                        ..CapacityArgs::default()
                    },
                    ..CommonArgs::default()
                },
                ..EngineArgs::default()
            },
        }];
        assert_eq!(
            cached_blocks_hint(&pools, |_| true),
            RESERVED_BLOCKS as usize
        );
        pools[0].count = 2;
        pools[0].engine.common.capacity.num_gpu_blocks = 100;
        assert_eq!(cached_blocks_hint(&pools, |_| true), 200);
    }

    /// A router's index makes room for the blocks of the pools it hears, not of the whole
    /// fleet: a prefill router never holds a decode pool's blocks.
    #[test]
    fn a_routers_index_is_sized_by_the_pools_it_hears() {
        let pool = |name: &str, role, count, num_gpu_blocks| WorkerPool {
            name: name.into(),
            count,
            engine: EngineArgs {
                common: CommonArgs {
                    role,
                    capacity: CapacityArgs {
                        num_gpu_blocks,
                        ..CapacityArgs::default()
                    },
                    ..CommonArgs::default()
                },
                ..EngineArgs::default()
            },
        };
        let pools = vec![
            pool("prefill", WorkerRole::Prefill, 2, 100),
            pool("decode", WorkerRole::Decode, 3, 1000),
        ];
        let prefill_heard = cached_blocks_hint(&pools, |role| role != WorkerRole::Decode);
        assert_eq!(prefill_heard, 200, "two prefill ranks of 100 blocks");
        assert_eq!(cached_blocks_hint(&pools, |_| true), 3200);
    }

    #[test]
    fn only_a_fleet_whose_pools_outgrow_the_caches_warms_its_probes() {
        use crate::memory::CACHE_RESIDENT_BLOCKS;
        let engine = EngineArgs::default();
        let ranks_in_cache = CACHE_RESIDENT_BLOCKS as u64 / engine.common.capacity.num_gpu_blocks;
        let mut pools = vec![WorkerPool {
            name: "default".into(),
            count: ranks_in_cache as u32,
            engine,
        }];
        assert!(!warms_probes(&pools), "{ranks_in_cache} default ranks fit");
        pools[0].count += 1;
        assert!(warms_probes(&pools));
        pools[0].count = 1;
        pools[0].engine.common.dp_size = ranks_in_cache as u32 + 1;
        assert!(warms_probes(&pools), "data-parallel ranks count");
    }

    /// The rule of the merge of skipping with faults: a run with any fault steps pass by
    /// pass (the same events as [`Stepping::PassByPass`]); the same run without its faults
    /// skips.
    #[test]
    fn runs_with_faults_step_pass_by_pass() {
        let case = two_long_decodes_and_a_late_arrival(2, true);
        let mut config = config(&case, 3);
        assert!(skips_quiet_passes(&config, Stepping::SkipQuiet));
        let run = |config: &SimConfig, stepping| {
            run(
                Options::new(config.clone()).with_stepping(stepping),
                requests(&case),
            )
            .unwrap()
        };
        let plain = run(&config, Stepping::SkipQuiet);
        let plain_stepped = run(&config, Stepping::PassByPass);
        assert!(
            plain.events * 5 < plain_stepped.events,
            "without faults it skips"
        );
        // A cancel that never fires (fraction 0) and a down window on a worker after the
        // run: the records stay those of the plain run, the events those of pass by pass.
        config.faults = vec![
            Fault::Cancel {
                class: "regular".into(),
                fraction: 0.0,
                after: SimDuration::from_ms(1),
            },
            Fault::WorkerDown {
                worker: 1,
                at: SimTime::from_ns(3_600_000_000_000),
                until: None,
            },
        ];
        assert!(!skips_quiet_passes(&config, Stepping::SkipQuiet));
        let faulty = run(&config, Stepping::SkipQuiet);
        let faulty_stepped = run(&config, Stepping::PassByPass);
        assert_eq!(faulty.records, plain.records);
        assert_eq!(faulty.records, faulty_stepped.records);
        assert_eq!(faulty.events, faulty_stepped.events, "faults: pass by pass");
    }

    /// Transport jitter (a delay drawn per message) turns skipping off: the skipping request
    /// then steps pass by pass, the same records and event for event, while the same run
    /// without jitter skips.
    #[test]
    fn with_transport_jitter_a_skipping_run_steps_pass_by_pass() {
        let case = two_long_decodes_and_a_late_arrival(2, true);
        let mut config = config(&case, 3);
        let run_as = |config: &SimConfig, stepping| {
            let options = Options::new(config.clone()).with_stepping(stepping);
            run(options, requests(&case)).unwrap()
        };
        let plain = run_as(&config, Stepping::SkipQuiet);
        let plain_stepped = run_as(&config, Stepping::PassByPass);
        assert!(
            plain.events * 5 < plain_stepped.events,
            "without jitter it skips"
        );
        config.delays.jitter = SimDuration::from_ns(50_000);
        assert!(!skips_quiet_passes(&config, Stepping::SkipQuiet));
        let jittered = run_as(&config, Stepping::SkipQuiet);
        let jittered_stepped = run_as(&config, Stepping::PassByPass);
        assert_ne!(jittered.records, plain.records, "the jitter moved tokens");
        assert_eq!(jittered.records, jittered_stepped.records);
        assert_eq!(
            jittered.events, jittered_stepped.events,
            "jitter: pass by pass"
        );
    }

    /// A run stopped while the pass with a request's last token is in flight: the middle
    /// tokens that last token carries were counted in passes that were delivered, so they
    /// count; the last token does not.
    #[test]
    fn a_limit_during_a_requests_last_pass_credits_the_tokens_before_it() {
        let case = two_long_decodes_and_a_late_arrival(1, false);
        let mut config = config(&case, 3);
        config.check_every_event = false;
        assert!(tokens::delivers_tokens_directly(&config));
        let whole = run(Options::new(config.clone()), requests(&case)).unwrap();
        let second = whole.records.iter().position(|r| r.output_tokens == 250);
        let second = second.expect("the 250-token request");
        let done = whole.records[second].completion.expect("it completes");
        config.limits.max_time = SimTime::from_ns(done.as_ns() - 1);
        let cut = |stepping| {
            let options = Options::new(config.clone()).with_stepping(stepping);
            run(options, requests(&case)).unwrap()
        };
        let (skipped, stepped) = (cut(Stepping::SkipQuiet), cut(Stepping::PassByPass));
        assert_eq!(skipped.records, stepped.records);
        let record = &skipped.records[second];
        assert_eq!(record.status, Status::Pending);
        assert_eq!(record.tokens_received, 249, "all but the last, in flight");
    }

    #[test]
    fn a_decode_run_takes_few_events_and_a_mid_run_dispatch_cuts_it() {
        // One worker: two long decodes, a third request arriving in the middle of their run.
        let case = two_long_decodes_and_a_late_arrival(1, false);
        let config = config(&case, 3);
        let run = |stepping| {
            run(
                Options::new(config.clone()).with_stepping(stepping),
                requests(&case),
            )
        };
        let (skipped, stepped) = (
            run(Stepping::SkipQuiet).unwrap(),
            run(Stepping::PassByPass).unwrap(),
        );
        assert_eq!(skipped.records, stepped.records);
        assert_eq!(skipped.count(EndStatus::Completed), 3);
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
        let all = run(Options::new(config.clone()), unpinned()).unwrap();
        assert_eq!(all.records.len(), 50);
        check_closed_loop(&all.records, 2).unwrap();
        // Stop issuing at a later issue instant: exactly the requests issued before it run.
        let first_later = (9..50)
            .find(|&i| all.records[i - 1].arrival < all.records[i].arrival)
            .unwrap();
        let until = all.records[first_later].arrival;
        config.closed_loop = Some(closed(Some(until)));
        let bounded = run(Options::new(config), unpinned()).unwrap();
        assert_eq!(bounded.stop_reason, StopReason::Drained);
        assert_eq!(bounded.records.len(), first_later);
        assert!(bounded.records.iter().all(|r| r.arrival < until));
        assert_eq!(bounded.count(EndStatus::Completed), first_later);
    }

    /// What a storm run may do to one request: a worker rejection must name a true reason,
    /// and a request servable alone that reached a worker must complete.
    fn check_storm_record(case: &Case, r: &RequestRecord) -> Result<(), String> {
        let pool_tokens = case.num_gpu_blocks * 16;
        let (input, output) = (u64::from(r.input_tokens), u64::from(r.output_tokens));
        let peak = if output == 0 {
            input
        } else {
            input + output - 1
        };
        let too_long = !case.chunked && input > case.max_num_batched_tokens;
        let why = match &r.status {
            Status::Rejected(why) => why.label(),
            Status::Completed => return Ok(()),
            other => return Err(format!("row {} ended {other:?}", r.row)),
        };
        let holds = match why {
            "prompt_exceeds_kv_pool" => input > pool_tokens,
            "sequence_exceeds_kv_pool" => peak > pool_tokens && input <= pool_tokens,
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
        engine(&mut config.pools[0].engine);
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
        run(Options::new(config), specs)
    }

    #[test]
    fn passes_that_take_no_time_stop_with_no_progress_instead_of_spinning() {
        // A speedup this large rounds every pass to 0 ns: virtual time never advances.
        let limits = Limits {
            max_events_per_instant: 500,
            ..Limits::default()
        };
        let result = small_run(|e| e.common.speedup_ratio = 1e30, limits, &[(64, 900)]).unwrap();
        let expected = StopReason::NoProgress {
            at: SimTime::ZERO,
            events: 500,
        };
        assert_eq!(result.stop_reason, expected);
        assert_eq!(result.count(EndStatus::Pending), 1);
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
            let result = small_run(
                |e| {
                    e.backend = Backend::Vllm(VllmArgs {
                        preemption_mode: mode,
                        ..VllmArgs::default()
                    })
                },
                Limits::default(),
                &lengths,
            )
            .unwrap_or_else(|v| panic!("{v}"));
            assert_eq!(result.stop_reason, StopReason::Drained);
            assert_eq!(result.count(EndStatus::Completed), 4, "fifo {fifo}");
            assert!(result.preemptions > 0, "fifo {fifo}: no preemption");
        }
    }

    #[test]
    fn a_sequence_outgrowing_the_pool_is_rejected_and_the_rest_run() {
        let lengths = [(64, 700), (64, 2000), (64, 5)];
        let result = small_run(|_| {}, Limits::default(), &lengths).unwrap();
        let status: Vec<&Status> = result.records.iter().map(|r| &r.status).collect();
        let outgrew = Status::Rejected(Rejection::Worker(RejectReason::SequenceOverPool));
        assert_eq!(
            status,
            vec![&Status::Completed, &outgrew, &Status::Completed]
        );
    }

    /// The parts can move to another thread (a driver in wall-clock time, runs on a pool):
    /// a worker, the scheduling core with its admission policies, and the fleet, driver and
    /// ledger are `Send` (this fails to compile otherwise).
    #[test]
    fn the_parts_of_the_system_are_send() {
        fn send<T: Send>() {}
        send::<crate::mocker::MockWorker>();
        send::<Box<dyn crate::mocker::Worker>>();
        send::<crate::scheduling::scheduler::Scheduler>();
        send::<Box<dyn crate::scheduling::admission::AdmissionPolicy>>();
        send::<WorkerFleet>();
        send::<RouterDriver>();
        send::<Ledger>();
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
