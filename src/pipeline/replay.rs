//! A trace replay's spec (Dynamo's offline replay's inputs and modes), and its run: the
//! trace read once, ahead of the simulation ([`ReadAhead`]).

use super::{RequestSource, RunError, RunSpec};
use crate::mocker::EngineArgs;
use crate::scheduling::policy::PolicyConfig;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::select_profile;
use crate::sim::{
    self, ResolveError, RouterMode, RunDescription, SimResult, TransportDelays, WorkerPool,
};
use crate::time::SimDuration;
use crate::workload::Arrival;
use crate::workload::read_ahead::{Judged, PassEnd, ReadAhead};
use crate::workload::trace::SurplusHashIds;
use std::path::PathBuf;

/// The inputs of a trace replay, as Dynamo's offline replay takes them.
#[derive(Clone, Debug)]
pub struct ReplaySetup {
    /// The mooncake trace.
    pub trace: PathBuf,
    /// Tokens per hash id.
    pub trace_block_size: u64,
    /// The router policy (Dynamo's policy YAML), if any.
    pub policy: Option<PolicyConfig>,
    /// The file the policy came from (`--policy` or `router_policy_config`), if any.
    pub policy_file: Option<PathBuf>,
    /// KvRouterConfig knobs.
    pub router: RouterConfig,
    /// The engine every worker runs (a replay has one pool, `default`).
    pub engine: EngineArgs,
    /// Aggregated workers.
    pub workers: u32,
    /// KV router or round robin.
    pub router_mode: RouterMode,
    /// The seed of the router's tie-breaks.
    pub seed: u64,
    /// How long KV events take to reach the router's index (Dynamo's `kv_event_lag_ms`).
    pub kv_event_lag: SimDuration,
    /// Disaggregated serving instead of `workers` aggregated workers.
    pub disaggregated: Option<DisaggregatedSetup>,
}

/// A disaggregated replay's pools, as Dynamo's `num_prefill_workers`, `num_decode_workers`,
/// `prefill_engine_args` and `decode_engine_args` give them.
#[derive(Clone, Debug)]
pub struct DisaggregatedSetup {
    pub prefill_workers: u32,
    /// Its role is prefill.
    pub prefill_engine: EngineArgs,
    pub decode_workers: u32,
    /// Its role is decode.
    pub decode_engine: EngineArgs,
}

impl ReplaySetup {
    /// The worker pools: one aggregated pool, or a prefill pool and a decode pool.
    pub fn pools(&self) -> Vec<WorkerPool> {
        match &self.disaggregated {
            None => vec![WorkerPool::unnamed(self.workers, self.engine.clone())],
            Some(d) => vec![
                WorkerPool {
                    name: "prefill".to_string(),
                    count: d.prefill_workers,
                    engine: d.prefill_engine.clone(),
                },
                WorkerPool {
                    name: "decode".to_string(),
                    count: d.decode_workers,
                    engine: d.decode_engine.clone(),
                },
            ],
        }
    }
}

impl RunSpec {
    /// The spec of a trace replay, or the rule across its flags the setup breaks (see
    /// [`sim::resolve`]). The trace is validated whole when it runs (an error names its line
    /// and field).
    pub fn from_replay(setup: &ReplaySetup) -> Result<RunSpec, ResolveError> {
        let config = sim::resolve(RunDescription {
            router: setup.router.clone(),
            profile: select_profile(&setup.router, setup.policy.as_ref(), None),
            pools: setup.pools(),
            router_mode: setup.router_mode,
            seed: setup.seed,
            delays: TransportDelays {
                kv_event_lag: setup.kv_event_lag,
                ..TransportDelays::default()
            },
            ..RunDescription::default()
        })?;
        Ok(RunSpec {
            name: setup.trace.display().to_string(),
            config,
            source: RequestSource::Trace {
                path: setup.trace.clone(),
                block_size: setup.trace_block_size,
                arrival_speedup_ratio: 1.0,
            },
            arrival_jitter_ns: 0,
            prefix_n: None,
            warmup: SimDuration::ZERO,
            request_cache: None,
            timeline: false,
            scaling: None,
        })
    }

    /// The same replay in one of Dynamo's other replay modes: a closed loop
    /// (`replay_concurrency`: keep that many requests in flight and issue the trace rows in
    /// file order as others end, each at that instant, ignoring timestamps), or an open loop
    /// whose timestamps are divided by `arrival_speedup_ratio` (validated by
    /// [`check_speedup_ratio`](crate::workload::trace::check_speedup_ratio)). As in Dynamo
    /// 1.6.1, a closed loop ignores the ratio.
    pub fn with_replay_modes(
        mut self,
        replay_concurrency: Option<u32>,
        arrival_speedup_ratio: f64,
    ) -> RunSpec {
        if let RequestSource::Trace {
            arrival_speedup_ratio: ratio,
            ..
        } = &mut self.source
        {
            *ratio = arrival_speedup_ratio;
        }
        let closed_loop = replay_concurrency.map(|concurrency| sim::ClosedLoop {
            concurrency,
            issue_until: None,
        });
        self.config = self.config.with_closed_loop(closed_loop);
        self
    }
}

/// Replays `spec`'s trace as `rows` reads it (see [`ReadAhead`]): the run takes the rows as a
/// second thread reads them, and stands, is made again on the sorted rows, or gives way to
/// the trace's error once the trace is judged. A run with a scaling policy, which must be
/// asked once, takes the judged rows. Also returns the rows whose hash ids outrun their
/// input, for a warning.
pub(super) fn replay_trace(
    spec: &RunSpec,
    mut rows: ReadAhead,
) -> Result<(SimResult, SurplusHashIds), RunError> {
    let options = || sim::Options::new(spec.config.clone()).with_timeline(spec.timeline);
    if spec.scaling.is_some() {
        let read: Vec<Arrival> = (&mut rows).collect();
        let judged = rows.finish().map_err(RunError::Input)?;
        let scaling = spec.scaling.as_deref();
        let result = match judged.end {
            PassEnd::Stands => super::run_with(scaling, options(), read)?,
            PassEnd::RunAgain(sorted) => super::run_with(scaling, options(), sorted)?,
        };
        return Ok((result, judged.surplus_hash_ids));
    }
    let result = sim::run(options().expecting(rows.expected_rows()), &mut rows);
    let Judged {
        end,
        surplus_hash_ids,
    } = rows.finish().map_err(RunError::Input)?;
    let result = match end {
        PassEnd::Stands => result.map_err(RunError::Bug)?,
        PassEnd::RunAgain(sorted) => sim::run(options(), sorted).map_err(RunError::Bug)?,
    };
    Ok((result, surplus_hash_ids))
}
