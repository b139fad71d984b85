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

use crate::engine::StopReason;
use crate::mocker::WorkerRole;
use crate::scheduling::scheduler::DispatchPath;
use crate::scheduling::types::WorkerWithDpRank;
use crate::time::{SimDuration, SimTime};
pub use crate::workload::session::SessionTag;
// What a run takes in: requests, their prompts perhaps hashed ahead.
pub use crate::workload::{Arrival, PromptHashes};
use std::sync::Arc;

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

/// One worker's life in a run, for what the fleet cost: when it was asked for, ready, set
/// draining and gone (each `None` if it did not happen within the run). The workers a run
/// starts with are asked for and ready at 0.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerLife {
    /// Its pool (an index into the run's pools).
    pub pool: usize,
    pub role: WorkerRole,
    /// GPUs it runs on ([`crate::mocker::CommonArgs::gpus_per_worker`]).
    pub gpus: u64,
    pub asked: SimTime,
    pub ready: Option<SimTime>,
    pub draining: Option<SimTime>,
    /// When it left: drained, or its start cancelled.
    pub gone: Option<SimTime>,
}

impl WorkerLife {
    /// A worker of pool `index` (`pool`) asked for at `at`, not ready yet.
    pub fn asked(index: usize, pool: &WorkerPool, at: SimTime) -> WorkerLife {
        WorkerLife {
            pool: index,
            role: pool.engine.common.role,
            gpus: pool.engine.common.gpus_per_worker(),
            asked: at,
            ready: None,
            draining: None,
            gone: None,
        }
    }

    /// The same worker, ready at `at`.
    pub fn ready_at(mut self, at: SimTime) -> WorkerLife {
        self.ready = Some(at);
        self
    }
}

/// A scaling policy changed how many workers a role should have.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalingEvent {
    pub at: SimTime,
    pub role: WorkerRole,
    /// Its workers that were not draining (active and starting) before, and the target.
    pub from: u64,
    pub to: u64,
    /// Why, as the policy says (`policy` when it does not).
    pub reason: String,
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
    /// Every worker's life, by id (what the fleet cost).
    pub worker_lives: Vec<WorkerLife>,
    /// What the scaling policy changed, in order (`None`: the run had no policy).
    pub scaling_events: Option<Vec<ScalingEvent>>,
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

/// A scaling policy that failed: it gave no usable answer when asked for its first tick
/// (`tick: None`) or at tick `tick` (counted from 0), at `at`. Bad input, not a bug.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyFailure {
    pub tick: Option<u64>,
    pub at: SimTime,
    pub message: String,
}

impl PolicyFailure {
    pub fn new(tick: Option<u64>, at: SimTime, message: String) -> PolicyFailure {
        PolicyFailure { tick, at, message }
    }
}

impl std::fmt::Display for PolicyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.tick {
            None => write!(
                f,
                "scaling policy, asked for its first tick: {}",
                self.message
            ),
            Some(tick) => write!(
                f,
                "scaling policy, tick {tick} at {} ms: {}",
                crate::time::format_ms(self.at.as_ns()),
                self.message
            ),
        }
    }
}

/// Why a run with a scaling policy stopped short.
#[derive(Clone, Debug, PartialEq)]
pub enum RunError {
    /// The run caught itself in a bug.
    Invariant(InvariantViolation),
    /// The policy failed.
    Policy(PolicyFailure),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Invariant(v) => write!(f, "{v}"),
            RunError::Policy(p) => write!(f, "{p}"),
        }
    }
}

impl std::error::Error for RunError {}

impl From<InvariantViolation> for RunError {
    fn from(v: InvariantViolation) -> RunError {
        RunError::Invariant(v)
    }
}

impl From<PolicyFailure> for RunError {
    fn from(f: PolicyFailure) -> RunError {
        RunError::Policy(f)
    }
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
    let requests = requests.into_iter().map(Into::into);
    match event_loop::simulate(options, requests, false, None) {
        Ok((result, _)) => Ok(result),
        Err(RunError::Invariant(v)) => Err(v),
        Err(RunError::Policy(f)) => unreachable!("a run without a policy failed one: {f}"),
    }
}

/// [`run`], with `policy` scaling the fleet at its ticks (1.6.1's `scaling_policy`): runs
/// with a policy step pass by pass.
pub fn run_scaled<A: Into<Arrival>>(
    options: Options,
    requests: impl IntoIterator<Item = A>,
    policy: &mut dyn scaling::ScalingPolicy,
) -> Result<SimResult, RunError> {
    let requests = requests.into_iter().map(Into::into);
    event_loop::simulate(options, requests, false, Some(policy)).map(|(result, _)| result)
}

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

mod config;
mod driver;
mod effects;
mod event_loop;
mod faults;
mod feed;
mod fleet;
mod handoff;
mod ledger;
mod routers;
pub mod scaling;
mod serving;
mod status;
pub mod timeline;
mod transport;
mod watch;

pub use config::{
    ClosedLoop, DEFAULT_POOL, Fault, ResolveError, RouterMode, RunDescription, SimConfig,
    TransportDelays, WorkerPool, models_cancels, resolve,
};
pub use faults::FaultMark;
use ledger::RankSlot;
pub use ledger::RareParts;
pub use status::{AbortReason, CancelReason, EndStatus, Rejection, Status};
use timeline::Timeline;

#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod scaling_tests;

#[cfg(test)]
mod tests {
    mod disaggregated;
    mod sessions;
    use super::*;
    use crate::engine::Limits;
    use crate::mocker::{Backend, CapacityArgs, CommonArgs, EngineArgs, FixedTiming, VllmArgs};
    use crate::mocker::{PreemptionMode, RejectReason, TimingProfile, TimingSource};
    use crate::scheduling::policy::PolicyConfig;
    use crate::scheduling::router_config::RouterConfig;
    use crate::scheduling::types::KvEventData;
    use crate::workload::{PromptSpec, RequestSpec};
    use driver::{KvLog, RouterDriver};
    use event_loop::{new_system, simulate};
    use fleet::warms_probes;
    use fleet::{RESERVED_BLOCKS, WorkerFleet, cached_blocks_hint, reserved_blocks_per_rank};
    use ledger::Ledger;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

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
        resolve(RunDescription {
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
        })
        .expect("a valid run")
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
    /// never overlap on one worker, a cancel of class `regular`, a joining worker (with a
    /// startup delay), drains of workers that never go down, and a migration limit.
    #[derive(Debug, Clone)]
    struct FaultCase {
        downs: Vec<(u64, u64, Option<u64>)>,
        cancel: Option<(f64, u64)>,
        join_at_ms: Option<u64>,
        startup_ms: u64,
        drains: Vec<(u64, u64)>,
        migration_limit: u32,
    }

    fn fault_case() -> impl Strategy<Value = FaultCase> {
        (
            prop::collection::vec((0u64..4, 0u64..60, prop::option::of(1u64..40)), 0..4),
            prop::option::of((0.0f64..=1.0, 0u64..30)),
            prop::option::of(0u64..60),
            prop::sample::select(vec![0u64, 0, 5, 40]),
            prop::collection::vec((0u64..5, 0u64..60), 0..3),
            0u32..4,
        )
            .prop_map(
                |(downs, cancel, join_at_ms, startup_ms, drains, migration_limit)| FaultCase {
                    downs,
                    cancel,
                    join_at_ms,
                    startup_ms,
                    drains,
                    migration_limit,
                },
            )
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
        // A worker drains once and never also goes down (as validation has it); the worker
        // that joins (id `case.workers`) may be drained too, or before it is ready.
        let mut drained = BTreeSet::new();
        for &(worker, at) in &f.drains {
            let down = out
                .iter()
                .any(|d| matches!(d, Fault::WorkerDown { worker: w, .. } if *w == worker));
            if worker <= u64::from(case.workers) && !down && drained.insert(worker) {
                out.push(Fault::WorkerDrain { worker, at: ms(at) });
            }
        }
        out
    }

    /// Every drained worker took its last request by the time its router heard of the
    /// drain, and left only once it had finished everything it held.
    fn check_drains(result: &SimResult, config: &SimConfig) -> Result<(), TestCaseError> {
        let heard_after = config.delays.worker_to_router;
        for mark in &result.fault_marks {
            let FaultMark::WorkerDrain {
                worker,
                from,
                until,
                ..
            } = *mark
            else {
                continue;
            };
            let served = result
                .records
                .iter()
                .filter(|r| r.rank().is_some_and(|k| k.worker_id == worker));
            for r in served {
                let dispatched = r.dispatched.expect("a request on a worker was dispatched");
                prop_assert!(
                    dispatched <= from.saturating_add(heard_after),
                    "{r:?} dispatched after the drain at {from}"
                );
                if let (Some(until), Some(end)) = (until, r.completion) {
                    prop_assert!(
                        end <= until,
                        "worker {worker} left at {until} before {r:?} ended"
                    );
                }
            }
        }
        Ok(())
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
            config.pools[0].engine.common.startup_delay = SimDuration::from_ms(f.startup_ms);
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
            check_drains(&result, &config)?;
            let again = run_once().unwrap();
            prop_assert_eq!(again.records, result.records);
        }
    }

    /// A scaling policy of random steps: at each tick a target (or none) and the gap to the
    /// next tick; after the last step it stops ticking.
    struct RandomPolicy {
        first_ms: f64,
        steps: Vec<(Option<u64>, f64)>,
        asked: usize,
    }

    impl scaling::ScalingPolicy for RandomPolicy {
        fn initial_tick_ms(&mut self) -> Result<Option<f64>, String> {
            Ok(Some(self.first_ms))
        }

        fn on_tick(
            &mut self,
            snapshot: &scaling::ScalingSnapshot,
        ) -> Result<scaling::ScalingDecision, String> {
            let step = self.steps.get(self.asked).copied();
            self.asked += 1;
            Ok(scaling::ScalingDecision {
                target_prefill: None,
                target_decode: step.and_then(|s| s.0),
                next_tick_ms: step.map(|s| snapshot.now_ms + s.1),
                reason: None,
            })
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// VOPR-style with a random scaling policy (targets from 0 to 5, ticks 0.5 to 40 ms
        /// apart, startup delays): every request ends exactly once, no drained worker takes a
        /// request after its drain or leaves before finishing, every checker holds after every
        /// event, the run ends, and a rerun is identical.
        #[test]
        fn random_scaling_conserves_requests_and_drains_cleanly(
            case in case(),
            steps in prop::collection::vec((prop::option::of(0u64..6), 0.5f64..40.0), 0..30),
            first_ms in 0.0f64..30.0,
            startup_ms in prop::sample::select(vec![0u64, 0, 3, 25]),
            seed in 0u64..1000,
        ) {
            let mut config = config(&case, seed);
            for pool in &mut config.pools {
                pool.engine.common.startup_delay = SimDuration::from_ms(startup_ms);
            }
            let run_once = || {
                let mut policy = RandomPolicy { first_ms, steps: steps.clone(), asked: 0 };
                run_scaled(Options::new(config.clone()), requests(&case), &mut policy)
            };
            let result = run_once().map_err(|e| TestCaseError::fail(format!("{e}")))?;
            prop_assert_eq!(result.stop_reason, StopReason::Drained);
            prop_assert!(result.records.iter().all(|r| r.status != Status::Pending));
            prop_assert_eq!(result.records.len(), case.requests.len());
            check_drains(&result, &config)?;
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
            simulate(
                options,
                requests(case).into_iter().map(Arrival::from),
                true,
                None,
            )
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
            prop_assert!(transport::delivers_tokens_directly(&config));
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
        assert!(transport::delivers_tokens_directly(&config));
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
        send::<event_loop::System>();
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
