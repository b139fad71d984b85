//! What a run is configured with, and the one place that decides it can run: a scenario or
//! replay's flags describe a run ([`RunDescription`], plain data), and [`resolve`] checks
//! every rule across its fields (the pools' roles and block size, faults the pools can take)
//! and makes the [`SimConfig`] the simulator runs. Nothing else makes a `SimConfig`, so a
//! run's configuration is valid by construction; a broken rule is a typed [`ResolveError`]
//! each caller words as its input (a scenario's field, a replay's flag).

use crate::engine::Limits;
use crate::mocker::{Capacity, EngineArgs, WorkerKind, WorkerRole};
use crate::scheduling::policy::PolicyProfile;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::{DEFAULT_TICK_INTERVAL, SchedulerConfig, select_profile};
use crate::time::{SimDuration, SimTime};

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
    /// A new worker of pool `pool` (an index in `SimConfig::pools`) is added at `at`, with
    /// the next free worker id; it is ready after the pool's startup delay.
    WorkerUp { pool: usize, at: SimTime },
    /// Worker `worker` is scaled down at `at`: it takes no new request, finishes everything
    /// it holds, then leaves.
    WorkerDrain { worker: u64, at: SimTime },
}

/// A run as its inputs describe it, before the rules across its fields are checked: what a
/// scenario's sections or a replay's flags say, each field already checked on its own.
/// [`resolve`] makes it a [`SimConfig`].
#[derive(Clone, Debug)]
pub struct RunDescription {
    /// The router's knobs.
    pub router: RouterConfig,
    /// The policy classes the router runs (as [`select_profile`] chooses them).
    pub profile: PolicyProfile,
    /// The worker pools, in order: worker ids are assigned pool by pool from 0.
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

impl Default for RunDescription {
    /// What every run starts from before its inputs say otherwise: one worker of the default
    /// engine behind the default KV router without a policy file; no delays, faults,
    /// migration or closed loop; the default limits; seed 0.
    fn default() -> Self {
        let router = RouterConfig::default();
        RunDescription {
            profile: select_profile(&router, None, None),
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

/// A rule across a run's fields that its description breaks: which rule, and where (pool and
/// fault indices into the description's lists), so each caller can word it as its input
/// (a scenario names the field, a replay the flag). Rules are checked in this order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// The run has no worker pool.
    NoPools,
    /// The pools' roles make no system: a run has aggregated pools only, or prefill pools and
    /// decode pools and no aggregated one (each flag: whether some pool has that role).
    Roles {
        aggregated: bool,
        prefill: bool,
        decode: bool,
    },
    /// Pool `pool` (named `name`) has no workers.
    EmptyPool { pool: usize, name: String },
    /// Pool `pool` (named `name`) has KV block size `block_size`, but the first pool (named
    /// `first_name`) has `first_block_size`: the router hashes prompts in one block size.
    BlockSize {
        pool: usize,
        name: String,
        block_size: u64,
        first_name: String,
        first_block_size: u64,
    },
    /// Fault `fault` cancels requests, which disaggregated serving does not model.
    CancelInDisaggregated { fault: usize },
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::NoPools => f.write_str("the run has no worker pool"),
            ResolveError::Roles {
                aggregated,
                prefill,
                decode,
            } => write!(
                f,
                "pool roles {:?} (aggregated, prefill, decode) make no system",
                (aggregated, prefill, decode)
            ),
            ResolveError::EmptyPool { name, .. } => write!(f, "pool {name} has 0 workers"),
            ResolveError::BlockSize {
                name,
                block_size,
                first_block_size,
                ..
            } => write!(
                f,
                "pool {name} has block size {block_size} (the router's is {first_block_size})"
            ),
            ResolveError::CancelInDisaggregated { .. } => {
                f.write_str("cancel faults are not modelled in disaggregated serving")
            }
        }
    }
}

impl std::error::Error for ResolveError {}

/// The one way to a [`SimConfig`]: `run` once every rule across its fields holds (see
/// [`ResolveError`] for the rules, in the order they are checked).
pub fn resolve(run: RunDescription) -> Result<SimConfig, ResolveError> {
    check(&run.pools, &run.faults)?;
    let RunDescription {
        router,
        profile,
        pools,
        router_mode,
        delays,
        limits,
        check_every_event,
        seed,
        closed_loop,
        faults,
        migration_limit,
    } = run;
    Ok(SimConfig {
        router,
        profile,
        pools,
        router_mode,
        delays,
        limits,
        check_every_event,
        seed,
        closed_loop,
        faults,
        migration_limit,
    })
}

/// The rules across the pools and faults, in [`ResolveError`]'s order.
fn check(pools: &[WorkerPool], faults: &[Fault]) -> Result<(), ResolveError> {
    let Some(first) = pools.first() else {
        return Err(ResolveError::NoPools);
    };
    let has = |role| pools.iter().any(|p| p.engine.common.role == role);
    let (aggregated, prefill, decode) = (
        has(WorkerRole::Aggregated),
        has(WorkerRole::Prefill),
        has(WorkerRole::Decode),
    );
    if !matches!(
        (aggregated, prefill, decode),
        (true, false, false) | (false, true, true)
    ) {
        return Err(ResolveError::Roles {
            aggregated,
            prefill,
            decode,
        });
    }
    for (index, pool) in pools.iter().enumerate() {
        if pool.count == 0 {
            return Err(ResolveError::EmptyPool {
                pool: index,
                name: pool.name.clone(),
            });
        }
        if pool.engine.common.block_size != first.engine.common.block_size {
            return Err(ResolveError::BlockSize {
                pool: index,
                name: pool.name.clone(),
                block_size: pool.engine.common.block_size,
                first_name: first.name.clone(),
                first_block_size: first.engine.common.block_size,
            });
        }
    }
    let cancel = faults
        .iter()
        .position(|f| matches!(f, Fault::Cancel { .. }));
    match cancel {
        Some(fault) if !models_cancels(pools) => Err(ResolveError::CancelInDisaggregated { fault }),
        _ => Ok(()),
    }
}

/// Whether a run of `pools` models cancel faults: not in disaggregated serving, where a
/// request cancelled between its prefill and decode workers has two holds to drop. The rule
/// [`resolve`] checks, asked before by a scenario's `cancel` entry so that it stays the
/// entry's first error.
pub fn models_cancels(pools: &[WorkerPool]) -> bool {
    pools
        .iter()
        .all(|p| p.engine.common.role == WorkerRole::Aggregated)
}

/// Everything one simulation run needs besides its requests, every rule across its fields
/// holding: only [`resolve`] makes one. Read through its accessors; the simulator reads its
/// fields.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub(in crate::sim) router: RouterConfig,
    pub(in crate::sim) profile: PolicyProfile,
    /// At least one pool, none empty; every pool has the same `engine.block_size`, which is
    /// the router's too; aggregated pools only, or prefill and decode pools.
    pub(in crate::sim) pools: Vec<WorkerPool>,
    pub(in crate::sim) router_mode: RouterMode,
    pub(in crate::sim) delays: TransportDelays,
    pub(in crate::sim) limits: Limits,
    pub(in crate::sim) check_every_event: bool,
    pub(in crate::sim) seed: u64,
    pub(in crate::sim) closed_loop: Option<ClosedLoop>,
    /// No cancel fault in disaggregated serving.
    pub(in crate::sim) faults: Vec<Fault>,
    pub(in crate::sim) migration_limit: u32,
}

impl Default for SimConfig {
    /// [`RunDescription::default`], resolved.
    fn default() -> Self {
        resolve(RunDescription::default()).expect("the default run is valid")
    }
}

impl SimConfig {
    /// The router's knobs.
    pub fn router(&self) -> &RouterConfig {
        &self.router
    }

    /// The policy classes the router runs.
    pub fn profile(&self) -> &PolicyProfile {
        &self.profile
    }

    /// The worker pools, in worker id order.
    pub fn pools(&self) -> &[WorkerPool] {
        &self.pools
    }

    /// How the router picks workers.
    pub fn router_mode(&self) -> RouterMode {
        self.router_mode
    }

    /// The transport delays.
    pub fn delays(&self) -> TransportDelays {
        self.delays
    }

    /// When the run stops at the latest.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The run's only seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The closed loop requests are issued in (`None`: open loop).
    pub fn closed_loop(&self) -> Option<ClosedLoop> {
        self.closed_loop
    }

    /// The faults injected.
    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }

    /// How many times a request on a lost worker is re-routed.
    pub fn migration_limit(&self) -> u32 {
        self.migration_limit
    }

    /// The same run with another seed: no rule concerns the seed, so a sweep's replications
    /// change it after resolving.
    pub fn with_seed(mut self, seed: u64) -> SimConfig {
        self.seed = seed;
        self
    }

    /// The same run issued as `closed_loop` says (no rule concerns the pacing).
    pub fn with_closed_loop(mut self, closed_loop: Option<ClosedLoop>) -> SimConfig {
        self.closed_loop = closed_loop;
        self
    }

    /// Sets class `class`'s DRR quantum (what `tune` varies; no rule concerns it).
    pub fn set_quantum(&mut self, class: usize, quantum_tokens: u64) {
        self.profile.set_quantum(class, quantum_tokens);
    }

    /// The description this configuration was resolved from, to change and resolve again.
    pub fn to_description(&self) -> RunDescription {
        RunDescription {
            router: self.router.clone(),
            profile: self.profile.clone(),
            pools: self.pools.clone(),
            router_mode: self.router_mode,
            delays: self.delays,
            limits: self.limits,
            check_every_event: self.check_every_event,
            seed: self.seed,
            closed_loop: self.closed_loop,
            faults: self.faults.clone(),
            migration_limit: self.migration_limit,
        }
    }

    /// Whether every rule [`resolve`] checks still holds (it did when resolved; the
    /// simulator asserts it in debug builds).
    pub(in crate::sim) fn holds(&self) -> bool {
        check(&self.pools, &self.faults).is_ok()
    }

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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mocker::CommonArgs;

    fn pool(name: &str, role: WorkerRole, count: u32, block_size: u64) -> WorkerPool {
        WorkerPool {
            name: name.into(),
            count,
            engine: EngineArgs {
                common: CommonArgs {
                    role,
                    block_size,
                    ..CommonArgs::default()
                },
                ..EngineArgs::default()
            },
        }
    }

    fn with_pools(pools: Vec<WorkerPool>) -> RunDescription {
        RunDescription {
            pools,
            ..RunDescription::default()
        }
    }

    #[test]
    fn the_default_run_and_a_disaggregated_one_resolve() {
        assert!(resolve(RunDescription::default()).is_ok());
        let pools = vec![
            pool("prefill", WorkerRole::Prefill, 1, 64),
            pool("decode", WorkerRole::Decode, 2, 64),
        ];
        let config = resolve(with_pools(pools.clone())).unwrap();
        assert_eq!(config.pools(), &pools[..]);
        assert!(config.is_disaggregated() && config.holds());
        assert_eq!(config.to_description().pools, pools);
    }

    #[test]
    fn each_rule_across_the_pools_is_a_typed_error_naming_its_pool() {
        let agg = WorkerRole::Aggregated;
        let refused = |pools| resolve(with_pools(pools)).unwrap_err();
        assert_eq!(refused(vec![]), ResolveError::NoPools);
        assert_eq!(
            refused(vec![pool("prefill", WorkerRole::Prefill, 1, 64)]),
            ResolveError::Roles {
                aggregated: false,
                prefill: true,
                decode: false
            }
        );
        assert_eq!(
            refused(vec![pool("a", agg, 1, 64), pool("b", agg, 0, 64)]),
            ResolveError::EmptyPool {
                pool: 1,
                name: "b".into()
            }
        );
        let error = refused(vec![pool("a", agg, 1, 64), pool("b", agg, 1, 16)]);
        assert_eq!(
            error,
            ResolveError::BlockSize {
                pool: 1,
                name: "b".into(),
                block_size: 16,
                first_name: "a".into(),
                first_block_size: 64
            }
        );
        assert_eq!(
            error.to_string(),
            "pool b has block size 16 (the router's is 64)"
        );
    }

    #[test]
    fn a_cancel_fault_is_refused_in_disaggregated_serving_only() {
        let cancel = Fault::Cancel {
            class: "c".into(),
            fraction: 0.5,
            after: SimDuration::ZERO,
        };
        let up = Fault::WorkerUp {
            pool: 0,
            at: SimTime::ZERO,
        };
        let aggregated = RunDescription {
            faults: vec![up, cancel],
            ..RunDescription::default()
        };
        assert!(resolve(aggregated.clone()).is_ok());
        let disaggregated = RunDescription {
            pools: vec![
                pool("prefill", WorkerRole::Prefill, 1, 64),
                pool("decode", WorkerRole::Decode, 1, 64),
            ],
            ..aggregated
        };
        assert_eq!(
            resolve(disaggregated).unwrap_err(),
            ResolveError::CancelInDisaggregated { fault: 1 }
        );
    }
}
