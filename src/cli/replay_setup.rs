//! `replay`'s flags read into a [`ReplaySetup`], each flag checked on its own against the
//! bounds a scenario is checked against (errors name the flag), and the run they describe,
//! whose rules across flags [`resolve`](crate::sim::resolve) checks and this module words as the flag to fix.

use super::{CliError, ReplayArgs, replay_router};
use crate::bounds::{
    MAX_INPUT_FILE_BYTES, MAX_RANKS, POLICY_ANSWER_DEFAULT_S, POLICY_ANSWER_MAX_S,
};
use crate::mocker::{EngineArgs, WorkerRole};
use crate::pipeline::PlannerSource;
use crate::pipeline::policy_process::PolicyCommand;
use crate::pipeline::{DisaggregatedSetup, PolicySource, ReplaySetup, RunSpec};
use crate::planner::config::PlannerConfig;
use crate::scenario::bounds_check;
use crate::sim::{DEFAULT_POOL, ResolveError};
use crate::time::SimDuration;
use crate::workload::trace;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Reads `--engine` / `--router` values: inline JSON if it starts with `{`, else a file.
pub(super) fn json_arg(flag: &str, value: &str) -> Result<(String, String), CliError> {
    if value.trim_start().starts_with('{') {
        return Ok((format!("{flag} (inline JSON)"), value.to_string()));
    }
    let text = crate::bounds::read_to_string_capped(Path::new(value), MAX_INPUT_FILE_BYTES)
        .map_err(|e| CliError::Input(format!("{flag} {value}: {e}")))?;
    Ok((value.to_string(), text))
}

/// A bad value of `flag`: `message` (what [`bounds_check`] says) after the flag.
fn flag_error(flag: &'static str) -> impl Fn(String) -> CliError {
    move |message| CliError::Input(format!("{flag}: {message}"))
}

/// How a replay paces its trace: a closed loop of `concurrency` requests, or the trace's own
/// timestamps divided by `arrival_speedup_ratio`.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReplayPacing {
    pub concurrency: Option<u32>,
    pub arrival_speedup_ratio: f64,
}

/// `replay`'s flags, checked against the bounds a scenario is checked against, and read:
/// the setup and how the trace is paced.
pub(super) fn replay_setup(args: &ReplayArgs) -> Result<(ReplaySetup, ReplayPacing), CliError> {
    let workers = bounds_check::rank_count(args.workers.unwrap_or(1).into())
        .map_err(flag_error("--workers"))?;
    let trace_block_size = bounds_check::trace_block_size(args.trace_block_size)
        .map_err(flag_error("--trace-block-size"))?;
    let replay_concurrency = args
        .replay_concurrency
        .map(bounds_check::concurrency)
        .transpose()
        .map_err(flag_error("--replay-concurrency"))?;
    let arrival_speedup_ratio = trace::check_speedup_ratio(args.arrival_speedup_ratio)
        .map_err(flag_error("--arrival-speedup-ratio"))?;
    let kv_event_lag = args
        .kv_event_lag_ms
        .map(SimDuration::try_from_ms_f64)
        .transpose()
        .map_err(flag_error("--kv-event-lag-ms"))?
        .unwrap_or(SimDuration::ZERO);
    let engine = replay_engine(args.engine.as_deref(), "--engine")?;
    let disaggregated = replay_disaggregated(args, &engine)?;
    if disaggregated.is_none() && engine.common.role != WorkerRole::Aggregated {
        return Err(CliError::Input(format!(
            "--engine: offline replay only supports aggregated workers, got {}",
            engine.common.role.dynamo_name()
        )));
    }
    bounds_check::worker_ranks(workers, engine.common.dp_size).map_err(flag_error("--workers"))?;
    let router =
        replay_router::replay_router(args.router.as_deref(), args.policy.as_deref(), args.quiet)?;
    let setup = ReplaySetup {
        trace: args.trace.clone(),
        trace_block_size,
        policy: router.policy,
        policy_file: router.policy_file,
        router: router.config,
        engine,
        workers,
        router_mode: args.router_mode,
        seed: args.seed,
        kv_event_lag,
        disaggregated,
    };
    let pacing = ReplayPacing {
        concurrency: replay_concurrency,
        arrival_speedup_ratio,
    };
    Ok((setup, pacing))
}

/// The disaggregated pools `--prefill-workers`, `--decode-workers`, `--prefill-engine` and
/// `--decode-engine` give (each engine defaults to `engine`), each checked as Dynamo 1.6.1
/// checks it (their block sizes agree or not: [`resolve`](crate::sim::resolve) decides); `None` for an aggregated replay. Says on stderr when the decode engine's transfer
/// settings are ignored.
fn replay_disaggregated(
    args: &ReplayArgs,
    engine: &EngineArgs,
) -> Result<Option<DisaggregatedSetup>, CliError> {
    let (Some(prefill_workers), Some(decode_workers)) = (args.prefill_workers, args.decode_workers)
    else {
        return Ok(None);
    };
    let role_engine = |flag: &'static str, value: Option<&str>, role: WorkerRole| {
        let mut engine = match value {
            Some(_) => replay_engine(value, flag)?,
            None => engine.clone(),
        };
        engine.common.role = role;
        Ok::<_, CliError>(engine)
    };
    let prefill_engine = role_engine(
        "--prefill-engine",
        args.prefill_engine.as_deref(),
        WorkerRole::Prefill,
    )?;
    let decode_engine = role_engine(
        "--decode-engine",
        args.decode_engine.as_deref(),
        WorkerRole::Decode,
    )?;
    for (flag, count, pool) in [
        ("--prefill-workers", prefill_workers, "prefill"),
        ("--decode-workers", decode_workers, "decode"),
    ] {
        if count == 0 {
            return Err(CliError::Input(format!(
                "{flag}: invalid replay spec: {pool} pool must start with at least one worker"
            )));
        }
        bounds_check::rank_count(count.into()).map_err(flag_error(flag))?;
    }
    disaggregated_ranks(
        (prefill_workers, prefill_engine.common.dp_size),
        (decode_workers, decode_engine.common.dp_size),
    )?;
    if args.decode_engine.is_some()
        && decode_engine.common.kv_transfer != prefill_engine.common.kv_transfer
        && decode_engine.common.kv_transfer != Default::default()
        && !args.quiet
    {
        errln!(
            "note: --decode-engine's KV transfer settings are ignored: the prefill engine's time every transfer, as in Dynamo 1.6.1"
        );
    }
    Ok(Some(DisaggregatedSetup {
        prefill_workers,
        prefill_engine,
        decode_workers,
        decode_engine,
    }))
}

/// The disaggregated fleet within the bound on ranks a scenario's `workers.prefill` and
/// `workers.decode` are held to: each role's `workers x dp_size` alone, then both summed,
/// given as (workers, dp_size) per role.
fn disaggregated_ranks(prefill: (u32, u32), decode: (u32, u32)) -> Result<(), CliError> {
    let roles = [
        ("--prefill-workers", "--prefill-engine", prefill),
        ("--decode-workers", "--decode-engine", decode),
    ];
    for (workers_flag, engine_flag, (workers, dp_size)) in roles {
        bounds_check::worker_ranks(workers, dp_size).map_err(|message| {
            CliError::Input(format!(
                "{workers_flag} with {engine_flag}'s dp_size: {message}"
            ))
        })?;
    }
    let ranks =
        u64::from(prefill.0) * u64::from(prefill.1) + u64::from(decode.0) * u64::from(decode.1);
    if ranks > MAX_RANKS {
        return Err(CliError::Input(format!(
            "--prefill-workers and --decode-workers: the prefill and decode pools have {ranks} worker ranks ({} x dp_size {} + {} x dp_size {}): a run may have at most {MAX_RANKS}",
            prefill.0, prefill.1, decode.0, decode.1
        )));
    }
    Ok(())
}

/// The engine `flag` gives as `value` (default: the default engine).
fn replay_engine(value: Option<&str>, flag: &str) -> Result<EngineArgs, CliError> {
    let Some(v) = value else {
        return Ok(EngineArgs::default());
    };
    let (name, text) = json_arg(flag, v)?;
    // A profile path in an engine file is relative to that file (inline JSON: to the current
    // directory).
    let base = match v.trim_start().starts_with('{') {
        true => Path::new(""),
        false => Path::new(v).parent().unwrap_or(Path::new("")),
    };
    EngineArgs::from_json_str_in(&text, base).map_err(|e| CliError::Input(format!("{name}: {e}")))
}

/// The scaling policy `--scaling-policy` names (with its answer time limit) or the native
/// planner `--planner` configures, if any.
pub(super) fn scaling_policy(args: &ReplayArgs) -> Result<Option<Arc<dyn PolicySource>>, CliError> {
    if let Some(path) = &args.planner {
        return Ok(Some(Arc::new(planner_source(path)?)));
    }
    let Some(command) = &args.scaling_policy else {
        return Ok(None);
    };
    if command.trim().is_empty() {
        return Err(CliError::Input("--scaling-policy: give a command".into()));
    }
    let timeout = match args.scaling_policy_timeout_s {
        None => Duration::from_secs_f64(POLICY_ANSWER_DEFAULT_S),
        Some(s) if s.is_finite() && s > 0.0 && s <= POLICY_ANSWER_MAX_S => {
            Duration::from_secs_f64(s)
        }
        Some(s) => {
            let message =
                format!("--scaling-policy-timeout-s: {s} is not a number of seconds in (0, 86400]");
            return Err(CliError::Input(message));
        }
    };
    Ok(Some(Arc::new(PolicyCommand {
        command: command.clone(),
        dir: PathBuf::from("."),
        timeout,
    })))
}

/// The run `setup` describes, paced as `pacing` says, or the rule across its flags it breaks,
/// in the words of the flag to fix.
pub(super) fn replay_spec(
    setup: &ReplaySetup,
    pacing: ReplayPacing,
    timeline: bool,
) -> Result<RunSpec, CliError> {
    let spec = RunSpec::from_replay(setup).map_err(rule_error)?;
    Ok(spec
        .with_replay_modes(pacing.concurrency, pacing.arrival_speedup_ratio)
        .with_timeline(timeline))
}

/// A rule across the replay's flags, worded as Dynamo 1.6.1 words it where it checks it. The
/// flag checks above leave only the block size to break: clap asks for both roles' counts,
/// `--engine`'s role and every count are checked on their own, and a replay has no faults.
fn rule_error(error: ResolveError) -> CliError {
    let message = match &error {
        ResolveError::BlockSize {
            block_size,
            first_block_size,
            ..
        } => format!(
            "--decode-engine: offline disaggregated replay requires matching prefill/decode block_size, got {first_block_size} and {block_size}"
        ),
        ResolveError::EmptyPool { name, .. } => {
            let flag = match name.as_str() {
                DEFAULT_POOL => "--workers".to_string(),
                role => format!("--{role}-workers"),
            };
            format!("{flag}: invalid replay spec: {name} pool must start with at least one worker")
        }
        ResolveError::NoPools
        | ResolveError::Roles { .. }
        | ResolveError::CancelInDisaggregated { .. } => error.to_string(),
    };
    CliError::Input(message)
}

/// The native planner of the configuration file at `path` (errors name file, line and key).
pub(super) fn planner_source(path: &Path) -> Result<PlannerSource, CliError> {
    let shown = path.display();
    let text = crate::bounds::read_to_string_capped(path, MAX_INPUT_FILE_BYTES)
        .map_err(|e| CliError::Input(format!("--planner {shown}: {e}")))?;
    let config = PlannerConfig::parse(&text)
        .map_err(|e| CliError::Input(format!("--planner {shown}: {e}")))?;
    Ok(PlannerSource {
        config,
        path: path.to_path_buf(),
    })
}
