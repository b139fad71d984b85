//! From scenario text to a validated [`Scenario`]: overrides, parsing, and every semantic
//! check, each error located at its file, line and field path.

use super::bounds_check;
use super::overrides;
use super::raw::{
    RawArrival, RawBurstOrder, RawDist, RawDistKind, RawGroup, RawLength, RawLimits, RawPin,
    RawProcess, RawRouter, RawRouterMode, RawScenario, RawWorkers, RawWorkload,
};
use super::{Scenario, ScenarioError, Workload};
use crate::bounds::{self, MAX_RANKS, MAX_REQUESTS};
use crate::engine::{DEFAULT_MAX_TIME_NS, Limits};
use crate::mocker::{ConfigError, EngineArgs, EngineSection};
use crate::report::expect::{Expectation, RawExpectation, number};
use crate::scheduling::policy::{self, PolicyConfig, PolicyError, PolicyProfile, RawPolicyConfig};
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::types::WorkerWithDpRank;
use crate::sim::{
    ClosedLoop, DEFAULT_POOL, Fault, RouterMode, SimConfig, TransportDelays, WorkerPool,
};
use crate::time::{MAX_INPUT_NS, NS_PER_MS, NS_PER_SEC, SimDuration, SimTime};
use crate::workload::synth::{
    Arrival, Burst, BurstOrder, DEFAULT_MAX_TOKENS, LengthDist, Lengths, Process, RequestGroup,
    SharedPrefix, SynthError, SynthWorkload,
};
use crate::workload::trace;
use crate::yaml::{self, Document, NodeKind};
use std::collections::BTreeSet;
use std::io::BufReader;
use std::path::{Path, PathBuf};

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
    let config = SimConfig {
        router,
        profile,
        pools,
        router_mode: match raw.router.router_mode {
            None | Some(RawRouterMode::KvRouter) => RouterMode::KvRouter,
            Some(RawRouterMode::RoundRobin) => RouterMode::RoundRobin,
        },
        delays,
        limits,
        seed: raw.seed,
        closed_loop,
        faults,
        migration_limit: raw.router.migration_limit.unwrap_or(0),
        ..SimConfig::default()
    };
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
    })
}

/// Longest scenario name in bytes (it names the default output directory).
pub const MAX_NAME_BYTES: usize = 128;

/// A scenario `name` is a file name: the default output directory is `results/<name>/`, so a
/// name must be one path component that cannot climb out of `results/`.
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
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '/' | '\\') || c.is_control())
    {
        return Err(format!(
            "`{}` is not a file name: it names the output directory results/<name>/, so it may not contain {:?}",
            name.escape_debug(),
            c
        ));
    }
    Ok(())
}

/// The worker pools: `workers.pools`, or the plain `workers: {count, dp_size, engine}` as one
/// pool named [`DEFAULT_POOL`]. Errors name the field (`workers.pools.h100.count`).
fn worker_pools(source: &Source, raw: &RawWorkers) -> Result<Vec<WorkerPool>, ScenarioError> {
    let Some(raw_pools) = &raw.pools else {
        let engine = raw.engine.clone().unwrap_or_default();
        let engine = engine_args(source, "workers", engine, raw.dp_size)?;
        let count = raw.count.unwrap_or(1);
        let count = check_ranks(source, count, engine.dp_size)?;
        return Ok(vec![WorkerPool::unnamed(count, engine)]);
    };
    let plain = [
        ("count", raw.count.is_some()),
        ("dp_size", raw.dp_size.is_some()),
        ("engine", raw.engine.is_some()),
    ];
    if let Some((field, _)) = plain.iter().find(|(_, given)| *given) {
        return Err(source.at(
            &format!("workers.{field}"),
            "give either `pools` or `count`, `dp_size` and `engine` (one unnamed pool), not both: each pool has its own",
        ));
    }
    if raw_pools.is_empty() {
        return Err(source.at("workers.pools", "needs at least one pool"));
    }
    let mut pools: Vec<WorkerPool> = Vec::with_capacity(raw_pools.len());
    let mut ranks = 0u64;
    for (index, raw_pool) in raw_pools.iter().enumerate() {
        let at = format!("workers.pools[{index}]");
        let name = pool_name(source, &at, raw_pool.name.as_deref(), &pools)?;
        let Some(count) = raw_pool.count else {
            return Err(source.at(&at, "a pool needs `count`: how many workers it has"));
        };
        let count = bounds_check::rank_count(count)
            .map_err(|message| source.at(&format!("{at}.count"), message))?;
        let engine = engine_args(source, &at, raw_pool.engine.clone(), raw_pool.dp_size)?;
        ranks += u64::from(count) * u64::from(engine.dp_size);
        if ranks > MAX_RANKS {
            return Err(source.at(
                &format!("{at}.count"),
                format!(
                    "the pools through this one have {ranks} worker ranks (count x dp_size summed): a run may have at most {MAX_RANKS}"
                ),
            ));
        }
        check_block_size(source, &at, &engine, pools.first())?;
        pools.push(WorkerPool {
            name,
            count,
            engine,
        });
    }
    Ok(pools)
}

/// Longest pool name in bytes.
pub const MAX_POOL_NAME_BYTES: usize = 64;

/// A pool's name: present, unique, and a plain identifier (an ASCII letter, then letters,
/// digits, `_` or `-`), since it is a `--set` path step and part of `classes.csv` column names.
/// Errors name the entry by index (`workers.pools[1].name`): its name is what is wrong.
fn pool_name(
    source: &Source,
    at: &str,
    name: Option<&str>,
    earlier: &[WorkerPool],
) -> Result<String, ScenarioError> {
    let fail = |path: &str, message: String| {
        let mut error = source.at(path, message);
        error.field_path = format!("{at}.name");
        error
    };
    let Some(name) = name else {
        return Err(fail(at, "a pool needs a `name`".into()));
    };
    let field = format!("{at}.name");
    let identifier = name.len() <= MAX_POOL_NAME_BYTES
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !identifier {
        return Err(fail(
            &field,
            format!(
                "`{}` is not a pool name: an ASCII letter, then letters, digits, `_` or `-`, at most {MAX_POOL_NAME_BYTES} bytes",
                name.escape_debug()
            ),
        ));
    }
    if earlier.iter().any(|p| p.name == name) {
        return Err(fail(
            &field,
            format!("pool `{name}` is named twice: pool names are unique"),
        ));
    }
    Ok(name.to_string())
}

/// Every pool has the first pool's KV block size: the router hashes prompts in one block size.
fn check_block_size(
    source: &Source,
    at: &str,
    engine: &EngineArgs,
    first: Option<&WorkerPool>,
) -> Result<(), ScenarioError> {
    match first {
        Some(first) if first.engine.block_size != engine.block_size => Err(source.at(
            &format!("{at}.engine.block_size"),
            format!(
                "is {}, but pool `{}` has {}: every pool needs the same block_size, the one the router hashes prompts with",
                engine.block_size, first.name, first.engine.block_size
            ),
        )),
        _ => Ok(()),
    }
}

/// `workers.count`, `workers.dp_size` and their product are at most [`MAX_RANKS`].
fn check_ranks(source: &Source, count: u64, dp_size: u32) -> Result<u32, ScenarioError> {
    let count =
        bounds_check::rank_count(count).map_err(|message| source.at("workers.count", message))?;
    bounds_check::worker_ranks(count, dp_size)
        .map_err(|message| source.at("workers.dp_size", message))?;
    Ok(count)
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
    PolicyConfig::from_document(&doc, None).map_err(|e| {
        let field_path = match doc.name_path(&e.field_path) {
            path if path.is_empty() => "router".to_string(),
            path => format!("router.{path}"),
        };
        ScenarioError {
            file: name,
            line: e.line,
            column: e.column,
            field_path,
            message: e.message,
        }
    })
}

fn active_profile(
    policy: Option<&PolicyConfig>,
    model: Option<&str>,
    router: &RouterConfig,
) -> PolicyProfile {
    crate::scheduling::scheduler::select_profile(router, policy, model)
}

/// The engine of the workers at `at` (`workers`, or one pool's path), with its `dp_size`;
/// errors name `{at}.engine.<field>` and `{at}.dp_size`.
fn engine_args(
    source: &Source,
    at: &str,
    engine: EngineSection,
    dp_size: Option<u64>,
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
    if let Some(dp_size) = dp_size {
        args.dp_size = bounds_check::rank_count(dp_size)
            .map_err(|message| source.at(&format!("{at}.dp_size"), message))?;
    }
    Ok(args)
}

fn workload(
    source: &Source,
    raw: &RawWorkload,
    profile: &PolicyProfile,
    pools: &[WorkerPool],
) -> Result<Workload, ScenarioError> {
    match (&raw.trace, &raw.groups) {
        (Some(_), Some(_)) => Err(source.at(
            "workload.trace",
            "give either `trace` or `groups`, not both",
        )),
        (None, None) => Err(source.at(
            "workload",
            "the workload is empty: give `groups` or `trace`",
        )),
        (None, Some(groups)) if groups.is_empty() => Err(source.at(
            "workload.groups",
            "the workload is empty: `groups` has no entries",
        )),
        (Some(file), None) => trace_workload(source, raw, file),
        (None, Some(groups)) => {
            if raw.trace_block_size.is_some() {
                return Err(source.at("workload.trace_block_size", "only applies to `trace`"));
            }
            if raw.arrival_speedup_ratio.is_some() {
                return Err(source.at("workload.arrival_speedup_ratio", "only applies to `trace`"));
            }
            for group in groups {
                check_count_or_share(source, group)?;
            }
            let shared = shared_arrivals(source, raw, groups)?;
            let mut converted = Vec::with_capacity(groups.len());
            for group in groups {
                let sizing = sizing(source, group, shared.as_ref())?;
                converted.push(group_of(source, group, sizing, profile, pools)?);
            }
            let synth = SynthWorkload {
                groups: converted,
                burst: burst(source, raw)?,
                tokens_per_hash: pools[0].engine.block_size,
            };
            synth
                .validate()
                .map_err(|e| source.at(&synth_error_path(&e), e.message))?;
            Ok(Workload::Synthetic(synth))
        }
    }
}

fn trace_workload(
    source: &Source,
    raw: &RawWorkload,
    file: &str,
) -> Result<Workload, ScenarioError> {
    if raw.burst.is_some() {
        return Err(source.at("workload.burst", "only applies to `groups`"));
    }
    let only_groups = [
        ("rate_per_s", raw.rate_per_s.is_some()),
        ("arrival", raw.arrival.is_some()),
        (
            "duration_s",
            raw.duration_s.is_some() && raw.concurrency.is_none(),
        ),
    ];
    if let Some((field, _)) = only_groups.iter().find(|(_, given)| *given) {
        return Err(source.at(
            &format!("workload.{field}"),
            "only applies to `groups` with `share` (or, for `duration_s`, to a closed loop)",
        ));
    }
    let block_size = raw
        .trace_block_size
        .unwrap_or(trace::DEFAULT_TRACE_BLOCK_SIZE);
    let block_size = bounds_check::trace_block_size(block_size)
        .map_err(|message| source.at("workload.trace_block_size", message))?;
    let arrival_speedup_ratio = arrival_speedup_ratio(source, raw)?;
    let path = source.resolve(file);
    let name = path.display().to_string();
    let reader = bounds::open_regular(&path)
        .map(BufReader::new)
        .map_err(|e| source.at("workload.trace", format!("cannot read {name}: {e}")))?;
    trace::scan_scaled(reader, &name, block_size, arrival_speedup_ratio).map_err(|e| {
        ScenarioError {
            file: e.source_name.clone(),
            line: Some(e.line),
            column: None,
            field_path: e.field.clone().unwrap_or_default(),
            message: e.message,
        }
    })?;
    Ok(Workload::Trace {
        path,
        block_size,
        arrival_speedup_ratio,
    })
}

/// `workload.arrival_speedup_ratio` of a trace (default 1). A closed loop ignores timestamps,
/// so the two together are refused rather than one silently doing nothing.
fn arrival_speedup_ratio(source: &Source, raw: &RawWorkload) -> Result<f64, ScenarioError> {
    let Some(ratio) = raw.arrival_speedup_ratio else {
        return Ok(1.0);
    };
    let field = "workload.arrival_speedup_ratio";
    if raw.concurrency.is_some() {
        return Err(source.at(
            field,
            "has no effect with `concurrency`: a closed loop ignores the trace's timestamps",
        ));
    }
    trace::check_speedup_ratio(ratio).map_err(|message| source.at(field, message))
}

fn burst(source: &Source, raw: &RawWorkload) -> Result<Burst, ScenarioError> {
    let Some(b) = &raw.burst else {
        return Ok(Burst::default());
    };
    Ok(Burst {
        at: time_ms(source, "workload.burst.at_ms", b.at_ms)?,
        order: match b.order {
            None | Some(RawBurstOrder::Sequential) => BurstOrder::Sequential,
            Some(RawBurstOrder::RoundRobin) => BurstOrder::RoundRobin,
            Some(RawBurstOrder::Alternate) => BurstOrder::Alternate,
        },
        spacing_ns: b.spacing_ns,
    })
}

/// A non-negative, finite time in ms within the time bound, as a `SimTime`.
fn time_ms(source: &Source, path: &str, ms: f64) -> Result<SimTime, ScenarioError> {
    duration_ms(source, path, ms).map(|d| SimTime::from_ns(d.as_ns()))
}

/// A non-negative, finite duration in ms within the time bound.
fn duration_ms(source: &Source, path: &str, ms: f64) -> Result<SimDuration, ScenarioError> {
    SimDuration::try_from_ms_f64(ms).map_err(|message| source.at(path, message))
}

/// Groups whose shares must add up to 1 do so within this (shares are decimal fractions).
const SHARE_SUM_TOLERANCE: f64 = 1e-9;

/// How the groups with `share` arrive: `workload.arrival` at `rate_per_s × share` from 0,
/// every arrival before `duration_s`.
struct SharedArrivals {
    process: Process,
    rate_per_s: f64,
    duration_s: f64,
    until: SimTime,
}

/// How many requests a group has and when they arrive.
struct Sizing {
    /// The exact count, or for a shared group the expected one (rounded down).
    count: u64,
    /// The group's own `arrival`, or its share of the workload's.
    arrival: Arrival,
}

/// A group has `count` or `share`, never both nor neither; a shared group's arrivals are the
/// workload's, so it has no `arrival` of its own.
fn check_count_or_share(source: &Source, group: &RawGroup) -> Result<(), ScenarioError> {
    let path = |field: &str| format!("workload.groups.\"{}\".{field}", group.name);
    match (group.count, group.share) {
        (Some(_), Some(_)) => Err(source.at(
            &path("share"),
            "a group has `share` or `count`, not both",
        )),
        (None, None) => Err(source.at(
            &path("count"),
            "give `count`, or `share` of `workload.rate_per_s` (with `workload.duration_s`)",
        )),
        (None, Some(_)) if group.arrival.is_some() => Err(source.at(
            &path("arrival"),
            "a group with `share` arrives by `workload.arrival`; give `count` for arrivals of its own",
        )),
        (None, Some(share)) if !(share.is_finite() && share > 0.0 && share <= 1.0) => Err(
            source.at(&path("share"), format!("must be in (0, 1], got {share:?}")),
        ),
        _ => Ok(()),
    }
}

/// The arrivals of the groups with `share`, from `workload.rate_per_s`, `duration_s` and
/// `arrival`: `None` when no group has a share (then those fields are errors, except
/// `duration_s` bounding a closed loop).
fn shared_arrivals(
    source: &Source,
    raw: &RawWorkload,
    groups: &[RawGroup],
) -> Result<Option<SharedArrivals>, ScenarioError> {
    let shared: Vec<&RawGroup> = groups.iter().filter(|g| g.share.is_some()).collect();
    if shared.is_empty() {
        let unused = [
            ("rate_per_s", raw.rate_per_s.is_some()),
            ("arrival", raw.arrival.is_some()),
            (
                "duration_s",
                raw.duration_s.is_some() && raw.concurrency.is_none(),
            ),
        ];
        return match unused.iter().find(|(_, given)| *given) {
            Some((field, _)) => Err(source.at(
                &format!("workload.{field}"),
                "applies to groups with `share` (or, for `duration_s`, to a closed loop), and no group has one",
            )),
            None => Ok(None),
        };
    }
    check_share_sum(source, &shared)?;
    let rate_per_s = positive(source, "workload.rate_per_s", raw.rate_per_s)?;
    let duration_s = positive(source, "workload.duration_s", raw.duration_s)?;
    let until = time_ms(source, "workload.duration_s", duration_s * 1000.0)?;
    let process = match raw.arrival {
        None | Some(RawProcess::Poisson) => Process::Poisson,
        Some(RawProcess::Uniform) => Process::Uniform,
        Some(RawProcess::Gamma { cv }) => Process::Gamma { cv },
    };
    let counted: u64 = groups.iter().filter_map(|g| g.count).sum();
    let expected = rate_per_s * duration_s + counted as f64;
    if expected > MAX_REQUESTS as f64 {
        return Err(source.at(
            "workload.rate_per_s",
            format!(
                "{rate_per_s} per s for {duration_s} s (plus {counted} counted) is about {expected:.0} requests: a run may have at most {MAX_REQUESTS}"
            ),
        ));
    }
    Ok(Some(SharedArrivals {
        process,
        rate_per_s,
        duration_s,
        until,
    }))
}

/// The shares add up to 1 (within [`SHARE_SUM_TOLERANCE`]); the error names the first
/// shared group's `share`.
fn check_share_sum(source: &Source, shared: &[&RawGroup]) -> Result<(), ScenarioError> {
    let sum: f64 = shared.iter().filter_map(|g| g.share).sum();
    if (sum - 1.0).abs() <= SHARE_SUM_TOLERANCE {
        return Ok(());
    }
    let terms: Vec<String> = shared
        .iter()
        .map(|g| format!("{} {}", g.name, g.share.unwrap_or_default()))
        .collect();
    Err(source.at(
        &format!("workload.groups.\"{}\".share", shared[0].name),
        format!(
            "the shares add up to {}, not 1 ({})",
            decimal(sum),
            terms.join(" + ")
        ),
    ))
}

/// `sum` to 9 decimals without trailing zeros, so 0.3 + 0.6 reads 0.9, not
/// 0.8999999999999999.
fn decimal(sum: f64) -> String {
    let text = format!("{sum:.9}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A required, positive and finite number at `path`.
fn positive(source: &Source, path: &str, value: Option<f64>) -> Result<f64, ScenarioError> {
    match value {
        None => Err(source.at(path, "is required by the groups with `share`")),
        Some(v) if v.is_finite() && v > 0.0 => Ok(v),
        Some(v) => Err(source.at(path, format!("must be a positive number, got {v:?}"))),
    }
}

/// A group's count and arrivals: its own, or its share of the workload's.
fn sizing(
    source: &Source,
    group: &RawGroup,
    shared: Option<&SharedArrivals>,
) -> Result<Sizing, ScenarioError> {
    let path = format!("workload.groups.\"{}\".arrival", group.name);
    match (group.count, group.share, shared) {
        (None, Some(share), Some(s)) => Ok(Sizing {
            count: (s.rate_per_s * share * s.duration_s).floor() as u64,
            arrival: Arrival::Timed {
                process: s.process,
                rate_per_s: s.rate_per_s * share,
                until: s.until,
            },
        }),
        (count, _, _) => Ok(Sizing {
            count: count.unwrap_or_default(),
            arrival: arrival(source, &path, group.arrival.as_ref())?,
        }),
    }
}

/// `workload.concurrency` (with `duration_s` as the issue bound): the closed loop, if any.
fn closed_loop(source: &Source, raw: &RawWorkload) -> Result<Option<ClosedLoop>, ScenarioError> {
    let Some(concurrency) = raw.concurrency else {
        return Ok(None);
    };
    let concurrency = bounds_check::concurrency(concurrency)
        .map_err(|message| source.at("workload.concurrency", message))?;
    let issue_until = match raw.duration_s {
        None => None,
        Some(s) if !(s.is_finite() && s > 0.0) => {
            return Err(source.at(
                "workload.duration_s",
                format!("must be a positive number, got {s:?}"),
            ));
        }
        Some(s) => Some(time_ms(source, "workload.duration_s", s * 1000.0)?),
    };
    Ok(Some(ClosedLoop {
        concurrency,
        issue_until,
    }))
}

/// `workload.warmup_s`: non-negative, within the time bound, and shorter than `duration_s`
/// (a warmup as long as the arrivals would leave nothing to measure).
fn warmup(source: &Source, raw: &RawWorkload) -> Result<SimDuration, ScenarioError> {
    let Some(warmup_s) = raw.warmup_s else {
        return Ok(SimDuration::ZERO);
    };
    let warmup = duration_ms(source, "workload.warmup_s", warmup_s * 1000.0)?;
    if let Some(duration_s) = raw.duration_s
        && warmup_s >= duration_s
    {
        return Err(source.at(
            "workload.warmup_s",
            format!(
                "must be shorter than duration_s ({duration_s} s): every request would be left out"
            ),
        ));
    }
    Ok(warmup)
}

fn group_of(
    source: &Source,
    raw: &RawGroup,
    sizing: Sizing,
    profile: &PolicyProfile,
    pools: &[WorkerPool],
) -> Result<RequestGroup, ScenarioError> {
    let path = |field: &str| format!("workload.groups.\"{}\".{field}", raw.name);
    if raw.name.trim().is_empty() {
        return Err(source.at(&path("name"), "must not be empty"));
    }
    if let Some(class) = &raw.class
        && !class_is_known(profile, class)
    {
        return Err(source.at(
            &path("class"),
            format!(
                "unknown class `{class}`: the policy knows {}",
                known_class_names(profile).join(", ")
            ),
        ));
    }
    let pinned_worker = match &raw.pinned_worker {
        None => None,
        Some(pin) => Some(pinned_rank(source, &path("pinned_worker"), pin, pools)?),
    };
    Ok(RequestGroup {
        name: raw.name.clone(),
        class: raw.class.clone(),
        count: sizing.count,
        input_tokens: lengths(source, &path("input_tokens"), &raw.input_tokens)?,
        output_tokens: lengths(source, &path("output_tokens"), &raw.output_tokens)?,
        arrival: sizing.arrival,
        prefix: raw.prefix.as_ref().map(|p| SharedPrefix {
            tokens: p.tokens,
            groups: p.groups,
        }),
        priority: raw.priority,
        strict_priority: raw.strict_priority,
        pinned_worker,
    })
}

/// A group's pinned rank: a worker of some pool (ids go pool by pool) and one of its ranks.
fn pinned_rank(
    source: &Source,
    path: &str,
    pin: &RawPin,
    pools: &[WorkerPool],
) -> Result<WorkerWithDpRank, ScenarioError> {
    let mut first_worker = 0u64;
    for pool in pools {
        let next = first_worker + u64::from(pool.count);
        if pin.worker_id < next {
            if pin.dp_rank >= pool.engine.dp_size {
                let whose = match pools.len() {
                    1 => "workers have".to_string(),
                    _ => format!("workers of pool `{}` have", pool.name),
                };
                return Err(source.at(
                    &format!("{path}.dp_rank"),
                    format!("{whose} only {} dp ranks (from 0)", pool.engine.dp_size),
                ));
            }
            return Ok(WorkerWithDpRank {
                worker_id: pin.worker_id,
                dp_rank: pin.dp_rank,
            });
        }
        first_worker = next;
    }
    Err(source.at(
        &format!("{path}.worker_id"),
        format!(
            "unknown worker {}: the run has {}",
            pin.worker_id,
            worker_ids(0, first_worker)
        ),
    ))
}

/// A group may name a policy family or an explicit class (what Dynamo resolves directly);
/// anything else would silently fall back to the default family, so it is refused.
fn class_is_known(profile: &PolicyProfile, class: &str) -> bool {
    known_class_names(profile).iter().any(|name| name == class)
}

fn known_class_names(profile: &PolicyProfile) -> Vec<String> {
    if profile.is_synthetic() {
        return vec!["default".to_string()];
    }
    let explicit = profile
        .classes()
        .iter()
        .filter(|c| c.policy_family.is_none())
        .map(|c| c.name.clone());
    profile.families().iter().cloned().chain(explicit).collect()
}

fn lengths(source: &Source, path: &str, raw: &RawLength) -> Result<Lengths, ScenarioError> {
    let dist = match raw {
        RawLength::Fixed(tokens) => return Ok(Lengths::fixed(*tokens)),
        RawLength::Dist(dist) => dist,
    };
    let need = |value: Option<f64>, field: &str| {
        value.ok_or_else(|| source.at(path, format!("`{field}` is required for this `dist`")))
    };
    let RawDist { mean, std_dev, .. } = dist.clone();
    let kind = match dist.dist {
        RawDistKind::Uniform => {
            if dist.min.is_none() || dist.max.is_none() {
                return Err(source.at(path, "`dist: uniform` needs `min` and `max`"));
            }
            LengthDist::Uniform
        }
        RawDistKind::Normal => LengthDist::Normal {
            mean: need(mean, "mean")?,
            std_dev: need(std_dev, "std_dev")?,
        },
        RawDistKind::Lognormal => LengthDist::LogNormal {
            mean: need(mean, "mean")?,
            std_dev: need(std_dev, "std_dev")?,
        },
        RawDistKind::Exponential => LengthDist::Exponential {
            mean: need(mean, "mean")?,
        },
    };
    Ok(Lengths {
        dist: kind,
        min: dist.min.unwrap_or(1),
        max: dist.max.unwrap_or(DEFAULT_MAX_TOKENS),
    })
}

fn arrival(
    source: &Source,
    path: &str,
    raw: Option<&RawArrival>,
) -> Result<Arrival, ScenarioError> {
    Ok(match raw {
        None | Some(RawArrival::Burst) => Arrival::Burst,
        Some(RawArrival::Poisson {
            rate_per_s,
            start_ms,
        }) => Arrival::Poisson {
            rate_per_s: *rate_per_s,
            start: time_ms(source, &format!("{path}.poisson.start_ms"), *start_ms)?,
        },
        Some(RawArrival::Interval { every_ms, start_ms }) => Arrival::Interval {
            every: duration_ms(source, &format!("{path}.interval.every_ms"), *every_ms)?,
            start: time_ms(source, &format!("{path}.interval.start_ms"), *start_ms)?,
        },
        Some(RawArrival::AtMs(times)) => Arrival::At(
            times
                .iter()
                .enumerate()
                .map(|(i, ms)| time_ms(source, &format!("{path}.at_ms[{i}]"), *ms))
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// Parses and checks every expectation, once: the typed values, and the companion files
/// named by `minus:`. Errors name the field inside the entry (e.g. `prefix_count.class`).
fn expectations(
    source: &Source,
    expect: &[RawExpectation],
    class_names: &[String],
) -> Result<(Vec<Expectation>, Vec<PathBuf>), ScenarioError> {
    let mut typed = Vec::with_capacity(expect.len());
    let mut companions = BTreeSet::new();
    for (index, raw) in expect.iter().enumerate() {
        let at = |field: &str, message: String| {
            let path = match field.is_empty() {
                true => format!("expect[{index}]"),
                false => format!("expect[{index}].{field}"),
            };
            source.at(&path, message)
        };
        let e = Expectation::parse(raw, class_names).map_err(|err| at(&err.field, err.message))?;
        if let Some(other) = e.companion() {
            let path = source.resolve(&other.file);
            if !path.is_file() {
                return Err(at(
                    "minus",
                    format!("companion scenario {} does not exist", path.display()),
                ));
            }
            companions.insert(path);
        }
        typed.push(e);
    }
    Ok((typed, companions.into_iter().collect()))
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

/// `faults:` resolved: worker ids and pools checked against the pools, a cancel's `group`
/// to the class its requests ask for (a synthetic group's `class`, which no other group may
/// share; with a trace, `group` names a policy class), times within the time bound and the
/// run's `limits.max_time_ms` (a fault past it could never act), and no two down windows of
/// one worker overlapping.
fn faults(
    source: &Source,
    raw: &RawScenario,
    pools: &[WorkerPool],
    limits: &Limits,
) -> Result<Vec<Fault>, ScenarioError> {
    let workers: u64 = pools.iter().map(|p| u64::from(p.count)).sum();
    let mut out = Vec::with_capacity(raw.faults.len());
    let mut windows: Vec<(u64, SimTime, Option<SimTime>, usize)> = Vec::new();
    for (i, f) in raw.faults.iter().enumerate() {
        let at = |field: &str| format!("faults[{i}].{field}");
        let time_ms =
            |field: &str, ms: f64| fault_time_ms(source, &raw.limits, limits, &at(field), ms);
        let set = [
            f.worker_down.is_some(),
            f.cancel.is_some(),
            f.worker_up.is_some(),
        ];
        if set.iter().filter(|&&x| x).count() != 1 {
            return Err(source.at(
                &format!("faults[{i}]"),
                "needs exactly one of worker_down, cancel, worker_up",
            ));
        }
        if let Some(d) = &f.worker_down {
            if d.worker >= workers {
                return Err(source.at(
                    &at("worker_down.worker"),
                    format!(
                        "unknown worker {}: the run has {}",
                        d.worker,
                        worker_ids(0, workers)
                    ),
                ));
            }
            let start = time_ms("worker_down.at_ms", d.at_ms)?;
            let until = match d.until_ms {
                None => None,
                Some(ms) => {
                    let until = time_ms("worker_down.until_ms", ms)?;
                    if until <= start {
                        return Err(source.at(
                            &at("worker_down.until_ms"),
                            format!("must be after at_ms ({})", d.at_ms),
                        ));
                    }
                    Some(until)
                }
            };
            let overlaps = |&&(w, a, u, _): &&(u64, SimTime, Option<SimTime>, usize)| {
                w == d.worker && until.is_none_or(|until| a < until) && u.is_none_or(|u| start < u)
            };
            if let Some(&(_, _, _, other)) = windows.iter().find(overlaps) {
                return Err(source.at(
                    &at("worker_down.at_ms"),
                    format!("worker {} is already down then (faults[{other}])", d.worker),
                ));
            }
            windows.push((d.worker, start, until, i));
            out.push(Fault::WorkerDown {
                worker: d.worker,
                at: start,
                until,
            });
        }
        if let Some(c) = &f.cancel {
            let class = cancel_class(source, raw, &at("cancel.group"), &c.group)?;
            if !(0.0..=1.0).contains(&c.fraction) {
                return Err(source.at(&at("cancel.fraction"), "must be in [0, 1]"));
            }
            let after = time_ms("cancel.after_ms", c.after_ms)?;
            let after = SimDuration::from_ns(after.as_ns());
            out.push(Fault::Cancel {
                class,
                fraction: c.fraction,
                after,
            });
        }
        if let Some(u) = &f.worker_up {
            let Some(pool) = pools.iter().position(|p| p.name == u.pool) else {
                let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
                return Err(source.at(
                    &at("worker_up.pool"),
                    format!(
                        "unknown pool `{}`: the pools are {}",
                        u.pool,
                        names.join(", ")
                    ),
                ));
            };
            let start = time_ms("worker_up.at_ms", u.at_ms)?;
            out.push(Fault::WorkerUp { pool, at: start });
        }
    }
    let joins = out
        .iter()
        .filter(|f| matches!(f, Fault::WorkerUp { .. }))
        .count() as u64;
    let ranks: u64 = pools
        .iter()
        .map(|p| u64::from(p.count) * u64::from(p.engine.dp_size.max(1)))
        .sum::<u64>()
        + joins
            * pools
                .iter()
                .map(|p| u64::from(p.engine.dp_size.max(1)))
                .max()
                .unwrap_or(1);
    if ranks > MAX_RANKS {
        return Err(source.at(
            "faults",
            format!("workers joining would exceed {MAX_RANKS} ranks"),
        ));
    }
    Ok(out)
}

/// A fault's time at `path`: within the time bound, and at most the run's time limit
/// (`limits.max_time_ms`, after overrides), past which no event runs. The error names the limit
/// and where it comes from.
fn fault_time_ms(
    source: &Source,
    raw: &RawLimits,
    limits: &Limits,
    path: &str,
    ms: f64,
) -> Result<SimTime, ScenarioError> {
    let time = time_ms(source, path, ms)?;
    if time <= limits.max_time {
        return Ok(time);
    }
    let limit_ms = number(limits.max_time.as_ns() as f64 / NS_PER_MS as f64);
    let whose = match raw.max_time_ms {
        Some(_) => "limits.max_time_ms".to_string(),
        None => format!(
            "the default limits.max_time_ms, {} days",
            DEFAULT_MAX_TIME_NS / (24 * 3600 * NS_PER_SEC)
        ),
    };
    Err(source.at(
        path,
        format!(
            "{} ms is past the run's time limit, {limit_ms} ms ({whose}): no event runs after it, so this fault could never act",
            number(ms)
        ),
    ))
}

/// The class a cancel's `group` acts on: a synthetic group's `class` (unshared), or with a
/// trace, a class name itself.
fn cancel_class(
    source: &Source,
    raw: &RawScenario,
    path: &str,
    group: &str,
) -> Result<String, ScenarioError> {
    let groups: &[RawGroup] = raw.workload.groups.as_deref().unwrap_or(&[]);
    if raw.workload.trace.is_some() {
        return Ok(group.to_string());
    }
    let Some(g) = groups.iter().find(|g| g.name == group) else {
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        return Err(source.at(
            path,
            format!(
                "unknown group `{group}`: the groups are {}",
                names.join(", ")
            ),
        ));
    };
    let Some(class) = &g.class else {
        return Err(source.at(path, format!("group `{group}` has no class to cancel by")));
    };
    if let Some(other) = groups
        .iter()
        .find(|o| o.name != group && o.class.as_ref() == Some(class))
    {
        return Err(source.at(
            path,
            format!(
                "groups `{group}` and `{}` share class `{class}`: a cancel acts on a class",
                other.name
            ),
        ));
    }
    Ok(class.clone())
}

/// The text `routersim validate` prints for a scenario.
pub(super) fn describe(scenario: &Scenario) -> String {
    let mut out = format!(
        "scenario {} (seed {}, source {})\n",
        scenario.name,
        scenario.seed(),
        scenario.source_hash
    );
    match &scenario.policy {
        Some(config) => out.push_str(&policy::describe(config)),
        None => out.push_str("no policy: one synthetic class `default`\n"),
    }
    out.push_str(&describe_workers(scenario));
    out.push_str(&describe_workload(&scenario.workload));
    out.push_str(&format!("expectations: {}\n", scenario.expectations.len()));
    for e in &scenario.expectations {
        let json = serde_json::to_value(e).expect("expectations serialise");
        let compact: serde_json::Map<_, _> = json
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.push_str(&format!("  {}\n", serde_json::Value::Object(compact)));
    }
    out
}

/// One line for the unnamed pool; a line per pool, with its worker ids, for named pools.
fn describe_workers(scenario: &Scenario) -> String {
    let engine = |e: &EngineArgs| {
        format!(
            "engine block_size {}, num_gpu_blocks {}, max_num_seqs {}, max_num_batched_tokens {}, prefix caching {}, chunked prefill {}",
            e.block_size,
            e.num_gpu_blocks,
            e.max_num_seqs,
            e.max_num_batched_tokens,
            on_off(e.enable_prefix_caching),
            on_off(e.enable_chunked_prefill)
        )
    };
    let (pools, router_mode) = (scenario.pools(), scenario.config().router_mode);
    if let [pool] = pools
        && pool.name == DEFAULT_POOL
    {
        let e = &pool.engine;
        return format!(
            "workers: {} x dp {}, {:?} router; {}\n",
            pool.count,
            e.dp_size,
            router_mode,
            engine(e)
        );
    }
    let total: u64 = pools.iter().map(|p| u64::from(p.count)).sum();
    let mut out = format!(
        "workers: {total} in {} pools, {router_mode:?} router\n",
        pools.len(),
    );
    let mut first = 0u64;
    for pool in pools {
        let next = first + u64::from(pool.count);
        out.push_str(&format!(
            "  pool {}: {} x dp {} ({}); {}\n",
            pool.name,
            pool.count,
            pool.engine.dp_size,
            worker_ids(first, next),
            engine(&pool.engine)
        ));
        first = next;
    }
    out
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

fn on_off(flag: bool) -> &'static str {
    if flag { "on" } else { "off" }
}

fn describe_workload(workload: &Workload) -> String {
    let synth = match workload {
        Workload::Trace {
            path,
            block_size,
            arrival_speedup_ratio,
        } => {
            let speedup = match *arrival_speedup_ratio == 1.0 {
                true => String::new(),
                false => format!(", timestamps divided by {arrival_speedup_ratio}"),
            };
            return format!(
                "workload: trace {} ({} tokens per hash id{speedup})\n",
                path.display(),
                block_size
            );
        }
        Workload::Synthetic(synth) => synth,
    };
    let total: u64 = synth.groups.iter().map(|g| g.count).sum();
    let timed = synth
        .groups
        .iter()
        .any(|g| matches!(g.arrival, Arrival::Timed { .. }));
    // A rate-and-time group's count follows from its draws: only its expectation is known.
    let total = match timed {
        true => format!("about {total}"),
        false => total.to_string(),
    };
    let mut out = format!(
        "workload: {} groups, {} requests; burst at {} ({:?}, spacing {} ns); {} tokens per hash id\n",
        synth.groups.len(),
        total,
        synth.burst.at,
        synth.burst.order,
        synth.burst.spacing_ns,
        synth.tokens_per_hash
    );
    for g in &synth.groups {
        out.push_str(&format!(
            "  {}: class {}, {} requests, input tokens {}, output tokens {}, arrival {}, {}\n",
            g.name,
            g.class.as_deref().unwrap_or("-"),
            match g.arrival {
                Arrival::Timed { .. } => format!("about {}", g.count),
                _ => g.count.to_string(),
            },
            g.input_tokens,
            g.output_tokens,
            g.arrival,
            match &g.prefix {
                None => "distinct prompts".to_string(),
                Some(p) => format!("shared {}-token prefixes in {} groups", p.tokens, p.groups),
            }
        ));
    }
    out
}
