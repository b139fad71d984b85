//! From scenario text to a validated [`Scenario`]: overrides, parsing, and every semantic
//! check, each error located at its file, line and field path.

use super::bounds_check;
use super::overrides;
use super::raw::{RawPlanner, RawRouter, RawScenario};
use super::{Planner, Scenario, ScenarioError};
use crate::bounds;
use crate::engine::Limits;
use crate::mocker::{ConfigError, EngineArgs, EngineSection};
use crate::planner::config::PlannerConfig;
use crate::scheduling::policy::{PolicyConfig, PolicyError, PolicyProfile, RawPolicyConfig};
use crate::scheduling::router_config::RouterConfig;
use crate::sim::{self, ResolveError, RunDescription, TransportDelays, WorkerPool};
use crate::time::{MAX_INPUT_NS, SimDuration, SimTime};
use crate::workload::synth::SynthError;
use crate::yaml::{self, Document, NodeKind};
use std::path::{Path, PathBuf};
use std::time::Duration;

mod describe;
mod expectations;
mod faults;
mod workers;
mod workload;

pub(super) use describe::describe;
use expectations::expectations;
use faults::faults;
use workers::worker_pools;
use workload::{closed_loop, warmup, workload};

/// The scenario being validated, and how to turn positions and paths into located errors.
struct Source {
    file: String,
    dir: PathBuf,
    doc: Document,
    /// Overrides of the policy file `router.policy` names (paths relative to that file).
    policy_overrides: Vec<(String, String)>,
}

impl Source {
    /// An error at the node `path` names (dotted, list entries by name or `[i]`).
    fn at(&self, path: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError::from_yaml(self.file.clone(), self.doc.error_at(path, message))
    }

    /// A policy validation error from the inline `router:` keys.
    fn policy_error(&self, error: PolicyError) -> ScenarioError {
        let error = error.with_path_prefix("router").placed_in(&self.doc);
        ScenarioError {
            file: self.file.clone(),
            line: error.line,
            column: error.column,
            field_path: self.doc.name_path(&error.field_path),
            message: error.message,
        }
    }

    fn resolve(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }
}

/// The dotted path a [`SynthError`] is about.
pub(super) fn synth_error_path(error: &SynthError) -> String {
    match error.group.is_empty() {
        true => format!("workload.{}", error.field),
        false => format!("workload.groups.{}.{}", error.group, error.field),
    }
}

pub(super) fn load(
    path: &Path,
    text: &str,
    overrides: &[(String, String)],
) -> Result<Scenario, ScenarioError> {
    let file = path.display().to_string();
    let mut doc = Document::parse(text);
    let policy_overrides = overrides::apply(&file, &mut doc, overrides)?;
    let source = Source {
        file,
        dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        doc,
        policy_overrides,
    };
    if let Some(root) = source.doc.root()
        && !matches!(root.kind, NodeKind::Map { .. })
    {
        return Err(ScenarioError::from_yaml(
            source.file.clone(),
            source.doc.error_at_position(
                Some((root.start.line, root.start.col + 1)),
                Some(String::new()),
                "a scenario is a YAML mapping (`name:`, `workload:`, ...), not a single value or a list",
            ),
        ));
    }
    let raw = parse(&source)?;
    build(&source, raw, path, source_hash(text, overrides))
}

fn parse(source: &Source) -> Result<RawScenario, ScenarioError> {
    match source.doc.deserialize::<RawScenario>() {
        Ok(Some(raw)) => Ok(raw),
        Ok(None) => Err(ScenarioError::in_file(
            source.file.clone(),
            "the file is empty: a scenario needs at least `name` and `workload`",
        )),
        Err(error) => Err(ScenarioError::from_yaml(source.file.clone(), error)),
    }
}

/// XXH3 of the text and every override, as 16 hex digits.
fn source_hash(text: &str, overrides: &[(String, String)]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for (path, value) in overrides {
        bytes.extend_from_slice(format!("\n--set {path}={value}").as_bytes());
    }
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&bytes))
}

fn build(
    source: &Source,
    raw: RawScenario,
    path: &Path,
    source_hash: String,
) -> Result<Scenario, ScenarioError> {
    check_name(&raw.name).map_err(|message| source.at("name", message))?;
    let router = router_config(source, &raw.router)?;
    let policy = policy_config(source, &raw.router)?;
    let profile = active_profile(policy.as_ref(), raw.model.as_deref(), &router);
    let pools = worker_pools(source, &raw.workers)?;
    let workload = workload(source, &raw.workload, &profile, &pools)?;
    let class_names: Vec<String> = profile.classes().iter().map(|c| c.name.clone()).collect();
    let (expectations, companions) = expectations(source, &raw.expect, &class_names)?;
    let limits = limits(source, &raw)?;
    let delays = delays(source, &raw)?;
    let closed_loop = closed_loop(source, &raw.workload)?;
    let warmup = warmup(source, &raw.workload)?;
    let faults = faults(source, &raw, &pools, &limits)?;
    let planner = planner(source, raw.planner.as_ref(), &pools)?;
    let description = RunDescription {
        router,
        profile,
        pools: pools.clone(),
        router_mode: raw.router.router_mode.unwrap_or_default(),
        delays,
        limits,
        check_every_event: false,
        seed: raw.seed,
        closed_loop,
        faults,
        migration_limit: raw.router.migration_limit.unwrap_or(0),
    };
    let config = sim::resolve(description).map_err(|e| rule_error(source, &raw, &pools, e))?;
    Ok(Scenario {
        file: path.to_path_buf(),
        name: raw.name,
        source_hash,
        policy,
        policy_file: raw.router.policy.as_deref().map(|f| source.resolve(f)),
        config,
        workload,
        expectations,
        companions,
        class_names,
        arrival_jitter_ns: raw.delays.arrival_jitter_ns,
        warmup,
        planner,
    })
}

/// `planner:`: a command, an answer time limit in (0, 86400] s, and a fleet whose every role
/// has one pool (a scaling policy sets one count per role).
fn planner(
    source: &Source,
    raw: Option<&RawPlanner>,
    pools: &[WorkerPool],
) -> Result<Option<Planner>, ScenarioError> {
    let Some(raw) = raw else { return Ok(None) };
    for (index, pool) in pools.iter().enumerate() {
        let role = pool.engine.common.role;
        if let Some(other) = pools[..index].iter().find(|p| p.engine.common.role == role) {
            let message = format!(
                "a scaling policy sets one count per role, but pools `{}` and `{}` are both {}",
                other.name,
                pool.name,
                role.label()
            );
            return Err(source.at("planner", message));
        }
    }
    let Some(command) = &raw.command else {
        return native_planner(source, raw).map(Some);
    };
    if let Some(key) = raw.keys.keys().next() {
        let message = "a planner is either `command` (and `timeout_s`) or the native planner's keys, not both";
        return Err(source.at(&format!("planner.{key}"), message));
    }
    if command.trim().is_empty() {
        return Err(source.at("planner.command", "give a command"));
    }
    let timeout = match raw.timeout_s {
        None => Duration::from_secs_f64(bounds::POLICY_ANSWER_DEFAULT_S),
        Some(s) if s.is_finite() && s > 0.0 && s <= bounds::POLICY_ANSWER_MAX_S => {
            Duration::from_secs_f64(s)
        }
        Some(_) => return Err(source.at("planner.timeout_s", "seconds in (0, 86400]")),
    };
    Ok(Some(Planner::Process {
        command: command.clone(),
        dir: source.dir.clone(),
        timeout,
    }))
}

/// The native planner `planner:`'s keys configure, each error at its key.
fn native_planner(source: &Source, raw: &RawPlanner) -> Result<Planner, ScenarioError> {
    if raw.timeout_s.is_some() {
        return Err(source.at(
            "planner.timeout_s",
            "only a `command` planner has a time limit",
        ));
    }
    let text = serde_json::Value::Object(raw.keys.clone()).to_string();
    let config = PlannerConfig::parse(&text).map_err(|e| {
        let path = match e.field_path.is_empty() {
            true => "planner".to_string(),
            false => format!("planner.{}", e.field_path),
        };
        source.at(&path, e.message)
    })?;
    Ok(Planner::Native(config))
}

/// A rule across the scenario's sections that [`sim::resolve`] found broken, at the field to
/// fix: the pool or fault it names, as `workers:` and `faults:` wrote them.
fn rule_error(
    source: &Source,
    raw: &RawScenario,
    pools: &[WorkerPool],
    error: ResolveError,
) -> ScenarioError {
    let pool_at = |pool: usize| workers::pool_path(&raw.workers, pools, pool);
    match error {
        ResolveError::Roles {
            aggregated: false,
            prefill,
            decode,
        } if prefill != decode => match prefill {
            true => workers::needs_both(source, "workers.prefill", "decode"),
            false => workers::needs_both(source, "workers.decode", "prefill"),
        },
        ResolveError::EmptyPool { pool, .. } => {
            source.at(&format!("{}.count", pool_at(pool)), "must be positive")
        }
        ResolveError::BlockSize {
            pool,
            block_size,
            first_name,
            first_block_size,
            ..
        } => source.at(
            &format!("{}.engine.block_size", pool_at(pool)),
            format!(
                "is {block_size}, but pool `{first_name}` has {first_block_size}: every pool needs the same block_size, the one the router hashes prompts with"
            ),
        ),
        ResolveError::CancelInDisaggregated { fault } => source.at(
            &format!("faults[{fault}].cancel"),
            faults::CANCEL_IN_DISAGGREGATED,
        ),
        // `workers:` makes neither: a form with no pool, or roles beside aggregated workers.
        ResolveError::NoPools | ResolveError::Roles { .. } => {
            source.at("workers", error.to_string())
        }
    }
}

/// Longest scenario name in bytes (it names the default output directory).
pub const MAX_NAME_BYTES: usize = 128;

/// A scenario `name` is a file name: the default output directory is `results/<name>/`, so a
/// name must be one path component that cannot climb out of `results/`, and shows as what
/// it is.
fn check_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "must be at most {MAX_NAME_BYTES} bytes, got {}",
            name.len()
        ));
    }
    if name == "." || name == ".." || name.contains("..") {
        return Err(format!(
            "`{name}` is not a file name: it may not contain `..` or be `.`"
        ));
    }
    // A character that acts on the display would make `results/` hold a name that looks
    // like another (or like nothing at all).
    if let Some(c) = name
        .chars()
        .find(|&c| matches!(c, '/' | '\\') || c.is_control() || crate::text::acts_on_display(c))
    {
        return Err(format!(
            "`{}` is not a file name: it names the output directory results/<name>/, so it may not contain {:?}",
            name.escape_debug(),
            c
        ));
    }
    Ok(())
}

/// The KvRouterConfig knobs, each checked on its own so an error names its key.
fn router_config(source: &Source, raw: &RawRouter) -> Result<RouterConfig, ScenarioError> {
    for (key, value) in &raw.knobs {
        let single =
            serde_json::Value::Object([(key.clone(), value.clone())].into_iter().collect());
        if let Err(e) = yaml::from_json_value::<RouterConfig>(single) {
            let message = match e.message.starts_with("unknown field") {
                true => format!("{} (not a policy key nor a KvRouterConfig knob)", e.message),
                false => e.message,
            };
            return Err(source.at(&format!("router.\"{key}\""), message));
        }
    }
    let config: RouterConfig = yaml::from_json_value(serde_json::Value::Object(raw.knobs.clone()))
        .map_err(|e| source.at("router", e.to_string()))?;
    if config.router_policy_config.is_some() {
        return Err(source.at(
            "router.router_policy_config",
            "a scenario names its policy YAML with `policy: FILE` (relative to the scenario)",
        ));
    }
    config
        .validate()
        .map_err(|e| source.at(&format!("router.{}", e.field), e.message))?;
    Ok(config)
}

fn policy_config(source: &Source, raw: &RawRouter) -> Result<Option<PolicyConfig>, ScenarioError> {
    let inline = RawPolicyConfig {
        default_policy_family: raw.default_policy_family.clone(),
        uncached_isl_buckets: raw.uncached_isl_buckets.clone(),
        policy_classes: raw.policy_classes.clone(),
        models: raw.models.clone(),
        router: None,
    };
    let has_inline = inline != RawPolicyConfig::default();
    match (&raw.policy, has_inline) {
        (Some(_), true) => Err(source.at(
            "router.policy",
            "give the policy either inline or as `policy: file`, not both",
        )),
        (Some(file), false) => policy_file(source, &source.resolve(file)).map(Some),
        (None, true) => PolicyConfig::from_raw(&inline)
            .map(Some)
            .map_err(|e| source.policy_error(e)),
        (None, false) => Ok(None),
    }
}

/// The policy file `router.policy` names, with the overrides of its keys; its errors name
/// that file and its lines, and a file that cannot be read is reported at `router.policy`.
fn policy_file(source: &Source, path: &Path) -> Result<PolicyConfig, ScenarioError> {
    let name = path.display().to_string();
    let text = bounds::read_to_string_capped(path, bounds::MAX_INPUT_FILE_BYTES).map_err(|e| {
        source.at(
            "router.policy",
            format!("{name}: cannot read the policy file: {e}"),
        )
    })?;
    let mut doc = Document::parse(&text).shown_under("router.");
    overrides::apply_to_policy(&name, &mut doc, &source.policy_overrides)?;
    let config = PolicyConfig::from_document(&doc, None).map_err(|e| {
        let field_path = match doc.name_path(&e.field_path) {
            path if path.is_empty() => "router".to_string(),
            path => format!("router.{path}"),
        };
        ScenarioError {
            file: name.clone(),
            line: e.line,
            column: e.column,
            field_path,
            message: e.message,
        }
    })?;
    // A scenario states router knobs in its own `router:` section, so a second place is refused.
    if let Some(key) = config.router.keys().next() {
        return Err(source.at(
            "router.policy",
            format!(
                "{name}: its router: map (`{key}`) is taken by `replay` only; give router settings in the scenario's router: section"
            ),
        ));
    }
    Ok(config)
}

fn active_profile(
    policy: Option<&PolicyConfig>,
    model: Option<&str>,
    router: &RouterConfig,
) -> PolicyProfile {
    crate::scheduling::scheduler::select_profile(router, policy, model)
}

/// The keys a `workers:` form or pool gives beside its `engine`, as Dynamo's launch config
/// has them beside its engine section.
struct Launch {
    dp_size: Option<u64>,
    startup_time: Option<f64>,
    tensor_parallel_size: Option<u64>,
}

/// The engine of the workers at `at` (`workers`, or one pool's path), with its `dp_size`,
/// `startup_time` and `tensor_parallel_size`; errors name `{at}.engine.<field>` and
/// `{at}.<key>`.
fn engine_args(
    source: &Source,
    at: &str,
    engine: EngineSection,
    launch: Launch,
) -> Result<EngineArgs, ScenarioError> {
    let engine_error = |e: ConfigError| match e {
        ConfigError::Invalid { field, reason } => {
            source.at(&format!("{at}.engine.{field}"), reason)
        }
        ConfigError::Unsupported { field, value } => source.at(
            &format!("{at}.engine.{field}"),
            format!("{value} is not supported by routersim's mocker"),
        ),
        ConfigError::Parse(message) => source.at(&format!("{at}.engine"), message),
        ConfigError::Profile { field, error } => {
            source.at(&format!("{at}.engine.{field}"), error.to_string())
        }
    };
    // A profile path is relative to the scenario file, as `router.policy` is.
    let mut args = engine.into_args_in(&source.dir).map_err(engine_error)?;
    if let Some(dp_size) = launch.dp_size {
        args.common.dp_size = bounds_check::rank_count(dp_size)
            .map_err(|message| source.at(&format!("{at}.dp_size"), message))?;
    }
    if let Some(seconds) = launch.startup_time {
        let path = format!("{at}.startup_time");
        if !(seconds.is_finite() && seconds >= 0.0) {
            let message = "must be a finite number of seconds, 0 or more";
            return Err(source.at(&path, message));
        }
        args.common.startup_delay = duration_ms(source, &path, seconds * 1000.0)?;
    }
    if let Some(tp) = launch.tensor_parallel_size {
        let path = format!("{at}.tensor_parallel_size");
        args.common.tensor_parallel_size = u32::try_from(tp)
            .ok()
            .filter(|&tp| tp > 0)
            .ok_or_else(|| source.at(&path, "must be a positive count of GPUs"))?;
    }
    Ok(args)
}

/// A non-negative, finite time in ms within the time bound, as a `SimTime`.
fn time_ms(source: &Source, path: &str, ms: f64) -> Result<SimTime, ScenarioError> {
    duration_ms(source, path, ms).map(|d| SimTime::from_ns(d.as_ns()))
}

/// A non-negative, finite duration in ms within the time bound.
fn duration_ms(source: &Source, path: &str, ms: f64) -> Result<SimDuration, ScenarioError> {
    SimDuration::try_from_ms_f64(ms).map_err(|message| source.at(path, message))
}

fn limits(source: &Source, raw: &RawScenario) -> Result<Limits, ScenarioError> {
    let mut limits = Limits::default();
    if let Some(max_events) = raw.limits.max_events {
        if max_events == 0 {
            return Err(source.at("limits.max_events", "must be positive"));
        }
        limits.max_events = max_events;
    }
    if let Some(ms) = raw.limits.max_time_ms {
        if !(ms.is_finite() && ms > 0.0) {
            return Err(source.at("limits.max_time_ms", "must be positive"));
        }
        limits.max_time = time_ms(source, "limits.max_time_ms", ms)?;
    }
    Ok(limits)
}

fn delays(source: &Source, raw: &RawScenario) -> Result<TransportDelays, ScenarioError> {
    let d = &raw.delays;
    if d.arrival_jitter_ns > MAX_INPUT_NS {
        return Err(source.at(
            "delays.arrival_jitter_ns",
            format!("must be at most {MAX_INPUT_NS} ns (about 146 years)"),
        ));
    }
    Ok(TransportDelays {
        router_to_worker: duration_ms(source, "delays.router_to_worker_ms", d.router_to_worker_ms)?,
        worker_to_router: duration_ms(source, "delays.worker_to_router_ms", d.worker_to_router_ms)?,
        kv_event_lag: duration_ms(source, "delays.kv_event_lag_ms", d.kv_event_lag_ms)?,
        jitter: duration_ms(source, "delays.jitter_ms", d.jitter_ms)?,
    })
}

/// The worker ids `first..next` in the one wording every message and `validate` use:
/// `worker 4` for one, `workers 0 to 3` for more (both ends included).
fn worker_ids(first: u64, next: u64) -> String {
    match next.saturating_sub(first) {
        0 => "no workers".to_string(),
        1 => format!("worker {first}"),
        _ => format!("workers {first} to {}", next - 1),
    }
}
