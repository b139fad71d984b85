//! The command line: clap commands, and the mapping of errors to exit codes: 0 ok, 1 an
//! expectation failed, 2 bad input or usage, 3 the simulator caught a bug in itself.

use crate::engine::StopReason;
use crate::pipeline::{self, JudgedRun, Judgement, ReplaySetup, RunError};
use crate::report;
use crate::report::output::{self, OutputKind};
use crate::report::render::chart::PlotError;
use crate::report::render::html::REPORT_FILE;
use crate::report::render::run_page::RunPage;
use crate::report::verdict::evaluate::format_outcome;
use crate::scenario::{self, FileKind, Scenario};
use crate::scheduling::policy;
use crate::sim::{self, RouterMode};
use crate::sweep::{self, Grid, ShardSpec, SweepOptions, SweepPlan, TuneOptions, tune};
use crate::time::format_ms;
use crate::workload::trace::{self, SurplusHashIds};
use check_cmd::{CheckArgs, check};
use clap::{Parser, Subcommand, ValueEnum};
use plan_cmd::{PlanArgs, run_plan};
use replay_setup::{ReplayPacing, replay_setup};
use timeline::TimelineArgs;

/// `println!` for the terminal: user text in it is escaped ([`terminal::shown`]).
macro_rules! outln {
    ($($arg:tt)*) => { $crate::cli::terminal::print_out(&(format!($($arg)*) + "\n")) };
}
/// `print!` for the terminal, escaped.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::terminal::print_out(&format!($($arg)*)) };
}
/// `eprintln!` for the terminal, escaped.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::cli::terminal::print_err(&(format!($($arg)*) + "\n")) };
}

mod check_cmd;
mod out_dir;
mod plan_cmd;
mod replay_inputs;
mod replay_router;
mod replay_setup;
mod seed_words;
pub mod terminal;
mod timeline;
use std::path::{Path, PathBuf};

#[derive(Parser, Debug)]
#[command(
    name = "routersim",
    version,
    about = "Simulate Dynamo's KV-router scheduling in virtual time"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one scenario: print a per-class table and write the results directory.
    Run(RunArgs),
    /// Run scenarios and evaluate their `expect:` blocks; exit 1 if any expectation fails.
    Check(CheckArgs),
    /// Check a scenario or a Dynamo router policy YAML and print what it resolves to.
    Validate {
        /// The scenario or policy file.
        file: PathBuf,
        /// Override a scenario field by its dotted path, e.g.
        /// router.policy_classes.regular.quantum=64 (repeatable).
        #[arg(long = "set", value_name = "PATH=VALUE")]
        set: Vec<String>,
    },
    /// Replay a mooncake trace as Dynamo's offline replay (`run_mocker_trace_replay`) does,
    /// with the same inputs: trace, policy YAML, engine and router config.
    Replay(ReplayArgs),
    /// Run a scenario over a grid of --set values and seeds, in parallel.
    Sweep(SweepArgs),
    /// Combine the shard directories of a sharded sweep into the files of the whole sweep.
    Merge(MergeArgs),
    /// Find quanta that give target shares.
    Tune(TuneArgs),
    /// Find the fewest (--minimize) or the most (--maximize) of one scenario parameter for
    /// which every expectation holds on every seed and no run is overloaded (or the fewest
    /// of two counts together, --minimize A+B).
    Plan(PlanArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The scenario file.
    scenario: PathBuf,
    /// Output directory (default: results/<scenario name>/). It must be new, empty, or a
    /// previous `run` output: a rerun replaces the files routersim wrote there and keeps
    /// every other file; any other directory is refused before the run starts.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also replace a previous output of another routersim command in the output directory
    /// (only the files routersim wrote there).
    #[arg(long)]
    force: bool,
    /// Seed (default: the scenario's `seed`).
    #[arg(long)]
    seed: Option<u64>,
    /// Override a scenario field by its dotted path, e.g.
    /// router.policy_classes.regular.quantum=64 (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// Print nothing but errors.
    #[arg(long)]
    quiet: bool,
    /// Do not write report.html (the one-page summary of the output directory).
    #[arg(long)]
    no_report: bool,
    #[command(flatten)]
    timeline: TimelineArgs,
}

#[derive(clap::Args, Debug)]
struct ReplayArgs {
    /// Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids, optional
    /// policy_class / priority / strict_priority.
    #[arg(long)]
    trace: PathBuf,
    /// Router policy-class YAML (Dynamo's schema, with an optional root router: map): the
    /// same as --router's router_policy_config, so give one of the two.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Number of aggregated mock workers (default 1).
    #[arg(long, conflicts_with_all = ["prefill_workers", "decode_workers"])]
    workers: Option<u32>,
    /// Refuse (exit 2) a trace whose rows name a policy_class the policy does not have,
    /// instead of serving them as the default class with a warning.
    #[arg(long)]
    strict_classes: bool,
    /// Disaggregated serving: prefill workers (give --decode-workers too).
    #[arg(long, value_name = "N", requires = "decode_workers")]
    prefill_workers: Option<u32>,
    /// Disaggregated serving: decode workers (give --prefill-workers too).
    #[arg(long, value_name = "N", requires = "prefill_workers")]
    decode_workers: Option<u32>,
    /// The prefill workers' engine config, a JSON file or inline JSON (default: --engine's);
    /// its worker_type is taken as prefill. Its KV transfer settings time every transfer.
    #[arg(long, value_name = "F", requires = "prefill_workers")]
    prefill_engine: Option<String>,
    /// The decode workers' engine config (default: --engine's); its worker_type is taken as
    /// decode. Its KV transfer settings are ignored, as Dynamo 1.6.1 ignores them.
    #[arg(long, value_name = "F", requires = "decode_workers")]
    decode_engine: Option<String>,
    /// Engine config as a JSON file or inline JSON in Dynamo's form: {"engine": {...}}.
    #[arg(long)]
    engine: Option<String>,
    /// KvRouterConfig keyword arguments as a JSON file or inline JSON; keys 1.6.1's replay
    /// ignores are accepted with a note, keys routersim cannot honour are errors.
    #[arg(long)]
    router: Option<String>,
    #[arg(long, default_value = "kv_router", value_parser = router_mode_parser())]
    router_mode: RouterMode,
    /// Tokens per hash id.
    #[arg(long, default_value_t = trace::DEFAULT_TRACE_BLOCK_SIZE)]
    trace_block_size: u64,
    /// Closed loop, as Dynamo's `replay_concurrency`: keep N requests in flight and issue the
    /// trace rows in file order as others end (completed or rejected), each at that instant,
    /// which is its arrival; the first N at 0. Timestamps are ignored.
    #[arg(long, value_name = "N")]
    replay_concurrency: Option<u64>,
    /// Open loop at another load, as Dynamo's `arrival_speedup_ratio`: every timestamp,
    /// rebased to the earliest, is divided by R (finite, at least 0.001; 2 replays the trace
    /// twice as fast). Has no effect with --replay-concurrency, as in Dynamo.
    #[arg(
        long,
        value_name = "R",
        default_value_t = 1.0,
        allow_hyphen_values = true
    )]
    arrival_speedup_ratio: f64,
    /// How long a worker's KV events (blocks stored or removed) take to reach the router's
    /// index, in ms, as Dynamo's `kv_event_lag_ms` (finite, >= 0; default 0).
    #[arg(long, value_name = "MS", allow_hyphen_values = true)]
    kv_event_lag_ms: Option<f64>,
    /// A scaling policy in the loop, as 1.6.1's `scaling_policy`: CMD is started once (by
    /// `sh -c`, in the working directory) and answers, one JSON line each, when its first
    /// tick is and, at each tick, the worker targets (docs/autoscaling.md).
    #[arg(long, value_name = "CMD")]
    scaling_policy: Option<String>,
    /// The longest the scaling policy may take to answer one question, in seconds (default
    /// 60); a policy that takes longer ends the replay (exit 2).
    #[arg(long, value_name = "S", requires = "scaling_policy")]
    scaling_policy_timeout_s: Option<f64>,
    /// Dynamo 1.6.1's planner in the loop, native: PLANNER.yaml holds `PlannerConfig` keys as
    /// Dynamo's planner takes them (load-based scaling; `sla` needs Dynamo's own planner:
    /// `--scaling-policy "tools/dynamo-planner PLANNER.yaml"`). docs/autoscaling.md.
    #[arg(long, value_name = "PLANNER.yaml", conflicts_with = "scaling_policy")]
    planner: Option<PathBuf>,
    /// Seed for the router's tie-breaks.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory (requests.csv, summary.json, ...; default:
    /// results/<trace file stem>-replay/). It must be new, empty, or a previous `replay`
    /// output: a rerun replaces the files routersim wrote there and keeps every other file;
    /// any other directory is refused before the replay starts.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also replace a previous output of another routersim command in --out (only the files
    /// routersim wrote there).
    #[arg(long)]
    force: bool,
    /// Print nothing but errors.
    #[arg(long)]
    quiet: bool,
    /// Also draw the run's plots (PNG and SVG, as `run` does). Off by default: rendering
    /// them takes longer than the replay itself.
    #[arg(long)]
    plots: bool,
    /// Do not write report.html (the one-page summary of the output directory).
    #[arg(long)]
    no_report: bool,
    #[command(flatten)]
    timeline: TimelineArgs,
}

/// `--router-mode`: Dynamo's names, listed in `--help` and in the error for any other.
fn router_mode_parser() -> impl clap::builder::TypedValueParser<Value = RouterMode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(RouterMode::NAMES)
        .try_map(|name| RouterMode::from_name(&name).ok_or("not a router mode"))
}

/// Why a command failed, and so its exit code.
#[derive(Debug)]
pub enum CliError {
    /// Bad input or usage: exit 2.
    Input(String),
    /// An expectation failed: exit 1.
    Expectation(String),
    /// The simulator caught itself in a bug: exit 3.
    Bug(String),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Expectation(_) => 1,
            CliError::Input(_) => 2,
            CliError::Bug(_) => 3,
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Input(m) | CliError::Expectation(m) => f.write_str(m),
            CliError::Bug(m) => write!(f, "internal error: {m}"),
        }
    }
}

impl CliError {
    /// The same error, an input error prefixed with the file it concerns.
    fn in_file(self, path: &Path) -> CliError {
        match self {
            CliError::Input(m) => CliError::Input(format!("{}: {m}", path.display())),
            other => other,
        }
    }
}

fn input<E: std::fmt::Display>(e: E) -> CliError {
    CliError::Input(e.to_string())
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let result = match cli.command {
        Command::Run(args) => run(&args),
        Command::Check(args) => check(&args),
        Command::Validate { file, set } => validate(&file, &set),
        Command::Replay(args) => replay(&args),
        Command::Sweep(args) => run_sweep(&args),
        Command::Merge(args) => run_merge(&args),
        Command::Tune(args) => run_tune(&args),
        Command::Plan(args) => run_plan(&args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            errln!("routersim: {e}");
            e.exit_code()
        }
    }
}

fn validate(file: &Path, set: &[String]) -> Result<(), CliError> {
    if scenario::file_kind_of_path(file).map_err(input)? == FileKind::Scenario {
        let scenario =
            Scenario::load_with_overrides(file, &parse_overrides(set)?).map_err(input)?;
        for warning in scenario.warnings() {
            errln!("{warning}");
        }
        out!("{}", scenario.describe());
        outln!("{}: valid scenario", file.display());
        return Ok(());
    }
    if !set.is_empty() {
        return Err(CliError::Input(
            "--set applies to scenario files only".into(),
        ));
    }
    let config = scenario::load_policy_file(file).map_err(input)?;
    out!("{}", policy::describe(&config));
    outln!("{}: valid policy", file.display());
    Ok(())
}

/// `overrides` with `--seed S` as the `seed=S` override it is, after the `--set`s.
fn with_seed(mut overrides: Vec<(String, String)>, seed: Option<u64>) -> Vec<(String, String)> {
    overrides.extend(seed.map(|s| ("seed".to_string(), s.to_string())));
    overrides
}

/// Splits `PATH=VALUE` arguments.
fn parse_overrides(set: &[String]) -> Result<Vec<(String, String)>, CliError> {
    set.iter()
        .map(|arg| match arg.split_once('=') {
            Some((path, value)) if !path.trim().is_empty() => {
                Ok((path.trim().to_string(), value.to_string()))
            }
            _ => Err(CliError::Input(format!("--set {arg}: expected PATH=VALUE"))),
        })
        .collect()
}

impl From<RunError> for CliError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Input(message) => CliError::Input(message),
            RunError::Bug(violation) => CliError::Bug(violation.to_string()),
        }
    }
}

fn run(args: &RunArgs) -> Result<(), CliError> {
    let started = std::time::Instant::now();
    let overrides = parse_overrides(&args.set)?;
    let scenario = Scenario::load_with_overrides(&args.scenario, &overrides).map_err(input)?;
    for warning in scenario.warnings().into_iter().filter(|_| !args.quiet) {
        errln!("{warning}");
    }
    let out = (args.out.clone()).unwrap_or_else(|| out_dir::run_dir(scenario.name()));
    let target =
        output::claim(&out, OutputKind::Run, &scenario.input_files(), args.force).map_err(input)?;
    let judgement = Judgement::new(scenario)?.with_timeline(args.timeline.timeline);
    let JudgedRun {
        spec,
        output: run,
        outcomes,
    } = judgement.run(0, 1, args.seed)?;
    let meta = serde_json::json!({
        "command": "run",
        "scenario": spec.name,
        "scenario_hash": judgement.scenario.source_hash(),
        "overrides": args.set,
        "seed": spec.seed(),
        "version": env!("CARGO_PKG_VERSION"),
    });
    let mut files = report::output::run_files::run_files(
        &run.result,
        &run.metrics,
        &meta,
        judgement.scenario.expectations(),
    )
    .map_err(|e| CliError::Bug(e.to_string()))?;
    files.extend(args.timeline.file(&run.result, &meta));
    if !args.no_report {
        let page = RunPage {
            command: "run",
            title: &spec.name,
            facts: run_facts(args, spec.seed()),
            outcomes: Some(&outcomes),
        };
        files = report::output::run_files::with_report(files, &page, &run.metrics);
    }
    target.write_bodies(&files).map_err(input)?;
    if args.quiet {
        return no_progress_error(&run.result);
    }
    outln!("{} (seed {})", spec.name, spec.seed());
    out!("{}", report::render::table::class_table(&run.metrics));
    if let Some(warning) = run.metrics.stability.warning() {
        outln!("{warning}");
    }
    if !outcomes.is_empty() {
        let passed = outcomes.iter().filter(|o| o.passed).count();
        outln!(
            "expectations: {passed} of {} pass (`routersim check` gates on them)",
            outcomes.len()
        );
        for o in outcomes.iter().filter(|o| !o.passed) {
            outln!("  {}", format_outcome(o));
        }
    }
    outln!(
        "{} requests, makespan {} ms, {} events in {:.2} s; wrote {}",
        run.result.records.len(),
        format_ms(run.result.end_time.as_ns()),
        run.result.events,
        started.elapsed().as_secs_f64(),
        out.display()
    );
    print_stop_line(&run.result);
    no_progress_error(&run.result)
}

/// A report names an input by its file name alone: the page must not change with the
/// directory a command ran from, or with how the path was spelled.
fn file_name(path: &Path) -> String {
    match path.file_name() {
        Some(name) => name.to_string_lossy().into_owned(),
        None => path.display().to_string(),
    }
}

/// What `run` ran, for its report.html: the command line's inputs and the seed.
fn run_facts(args: &RunArgs, seed: u64) -> Vec<(String, String)> {
    let mut facts = vec![
        ("command".to_string(), "routersim run".to_string()),
        ("scenario file".to_string(), file_name(&args.scenario)),
        ("seed".to_string(), seed.to_string()),
    ];
    if !args.set.is_empty() {
        facts.push(("overrides (--set)".to_string(), args.set.join(" ")));
    }
    facts
}

/// `stopped early: <reason>; N of M requests unfinished` when a limit cut the run short.
fn stop_line(result: &sim::SimResult) -> Option<String> {
    if !result.stop_reason.is_limit() {
        return None;
    }
    Some(format!(
        "stopped early: {}; {} of {} requests unfinished",
        result.stop_reason,
        result.count(crate::sim::EndStatus::Pending),
        result.records.len()
    ))
}

fn print_stop_line(result: &sim::SimResult) {
    if let Some(line) = stop_line(result) {
        outln!("{line}");
    }
}

/// A run that stood still in virtual time is the input's doing (exit 2): the results written
/// so far are kept, and the message says what to look at.
fn no_progress_error(result: &sim::SimResult) -> Result<(), CliError> {
    match result.stop_reason {
        StopReason::NoProgress { .. } => Err(CliError::Input(format!(
            "{}; passes that take 0 ns (a huge speedup_ratio) or a burst larger than \
             the per-instant event cap cause this",
            stop_line(result).unwrap_or_default()
        ))),
        _ => Ok(()),
    }
}

/// The files a replay reads (the engine and router flags may be inline JSON instead), with
/// the engines' timing profiles.
fn replay_inputs(args: &ReplayArgs, setup: &ReplaySetup) -> Vec<PathBuf> {
    let mut inputs = vec![args.trace.clone()];
    for pool in setup.pools() {
        inputs.extend(
            pool.engine
                .common
                .timing
                .profile_source()
                .map(PathBuf::from),
        );
    }
    inputs.extend(setup.policy_file.clone());
    let files = [
        &args.engine,
        &args.prefill_engine,
        &args.decode_engine,
        &args.router,
    ];
    for value in files.into_iter().flatten() {
        if !value.trim_start().starts_with('{') {
            inputs.push(PathBuf::from(value));
        }
    }
    inputs
}

/// What `replay` ran, for its report.html: the trace, the policy and the worker counts.
fn replay_facts(args: &ReplayArgs, setup: &ReplaySetup) -> Vec<(String, String)> {
    let mut facts = vec![
        ("command".to_string(), "routersim replay".to_string()),
        ("trace".to_string(), file_name(&args.trace)),
    ];
    if let Some(policy) = &setup.policy_file {
        facts.push(("policy".to_string(), file_name(policy)));
    }
    facts.push(("seed".to_string(), args.seed.to_string()));
    facts.extend(replay_inputs::settings_facts(setup));
    facts
}

/// The replay's `summary.json` meta: what was replayed and how, and the trace's inputs as
/// read; with the warning about classes the policy does not admit, if any.
fn replay_meta(
    args: &ReplayArgs,
    setup: &ReplaySetup,
    result: &sim::SimResult,
    pacing: ReplayPacing,
    surplus: &SurplusHashIds,
) -> Result<(serde_json::Value, Option<String>), CliError> {
    let mut meta = serde_json::json!({
        "command": "replay",
        "trace": args.trace.display().to_string(),
        "workers": args.workers.unwrap_or(1),
        "seed": args.seed,
        "version": env!("CARGO_PKG_VERSION"),
    });
    // Only when given, so that a plain replay's summary stays as it was.
    if let Some(n) = pacing.concurrency {
        meta["replay_concurrency"] = n.into();
    } else if pacing.arrival_speedup_ratio != 1.0 {
        meta["arrival_speedup_ratio"] = pacing.arrival_speedup_ratio.into();
    }
    let warning = replay_inputs::record_inputs(&mut meta, setup, result, args.strict_classes)?;
    meta["surplus_hash_ids"] = replay_inputs::surplus_json(surplus);
    Ok((meta, warning))
}

fn replay(args: &ReplayArgs) -> Result<(), CliError> {
    let (setup, pacing) = replay_setup(args)?;
    let inputs = replay_inputs(args, &setup);
    let mut spec = replay_setup::replay_spec(&setup, pacing, args.timeline.timeline)?;
    spec.scaling = replay_setup::scaling_policy(args)?;
    // The trace's reader starts while the output directory is claimed (see `Started`).
    let started = pipeline::start(&spec);
    let out = (args.out.clone()).unwrap_or_else(|| {
        let stem = args.trace.file_stem().unwrap_or_default();
        out_dir::command_dir(&stem.to_string_lossy(), "replay")
    });
    let target = output::claim(&out, OutputKind::Replay, &inputs, args.force).map_err(input)?;
    if pacing.concurrency.is_some() && pacing.arrival_speedup_ratio != 1.0 && !args.quiet {
        errln!(
            "note: --arrival-speedup-ratio has no effect with --replay-concurrency (a closed loop ignores timestamps), as in Dynamo"
        );
    }
    let (result, measuring) = started.simulate()?;
    let trace_name = args.trace.display().to_string();
    let surplus = measuring.surplus_hash_ids;
    let (meta, warning) = replay_meta(args, &setup, &result, pacing, &surplus)?;
    for warning in [warning, surplus.warning(&trace_name)]
        .into_iter()
        .flatten()
    {
        if !args.quiet {
            errln!("{warning}");
        }
    }
    std::thread::scope(|scope| {
        // Formatted on another thread while the run is measured and the other files made.
        let requests_csv = report::output::run_files::requests_csv_body(&result).start_ahead(scope);
        let metrics = measuring.metrics(&result);
        let mut files = report::output::run_files::data_files_with(requests_csv, &metrics, &meta);
        if args.plots {
            let plots = report::output::run_files::plot_files(&result, &metrics, &[]);
            files.extend(plots.map_err(|e| CliError::Bug(e.to_string()))?);
        }
        files.extend(args.timeline.file(&result, &meta));
        if !args.no_report {
            let page = RunPage {
                command: "replay",
                title: &file_name(&args.trace),
                facts: replay_facts(args, &setup),
                outcomes: None,
            };
            files = report::output::run_files::with_report(files, &page, &metrics);
        }
        target.write_bodies(&files).map_err(input)?;
        if !args.quiet {
            out!("{}", report::render::table::class_table(&metrics));
        }
        Ok::<_, CliError>(())
    })?;
    if !args.quiet {
        outln!(
            "{} requests, makespan {} ms, {} events; wrote {}",
            result.records.len(),
            format_ms(result.end_time.as_ns()),
            result.events,
            out.display()
        );
        for (name, settings) in replay_inputs::settings_facts(&setup) {
            outln!("{name}: {settings}");
        }
        print_stop_line(&result);
    }
    no_progress_error(&result)
}

/// `routersim sweep SCENARIO --set PATH=V1,V2,... [--seeds N] [--jobs J] [--out DIR]`.
#[derive(clap::Args, Clone, Debug)]
struct SweepArgs {
    /// The scenario YAML file.
    scenario: PathBuf,
    /// An axis `PATH=V1,V2,...` (repeatable): every combination of the values is a point.
    /// Values are split on commas outside brackets; one value is a plain override.
    #[arg(long = "set", value_name = "PATH=V1,V2,...")]
    sets: Vec<String>,
    /// Replications per point; replication 0 runs the scenario seed, the others seeds drawn
    /// from it (stream `sweep/replication`).
    #[arg(long, default_value_t = 1)]
    seeds: u32,
    /// Worker threads (default: all cores). The output does not depend on it.
    #[arg(long)]
    jobs: Option<usize>,
    /// The output directory (default: results/<scenario name>-sweep/). It must be new,
    /// empty, or a previous sweep output: a rerun replaces the files routersim wrote there
    /// and keeps every other file; any other directory is refused before the sweep starts.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also replace a previous output of another routersim command in --out (only the files
    /// routersim wrote there).
    #[arg(long)]
    force: bool,
    /// The first replication's seed (default: the scenario's `seed`); the same as
    /// `--set seed=S`.
    #[arg(long)]
    seed: Option<u64>,
    /// Print nothing but errors: no progress bar, no summary table.
    #[arg(long)]
    quiet: bool,
    /// Do not write report.html (the one-page summary of the output directory; a shard's
    /// directory never has one: its merge does).
    #[arg(long)]
    no_report: bool,
    /// Run only shard K of N (1-based, strided: points K-1, K-1+N, ...); merge the shard
    /// directories with `routersim merge`.
    #[arg(long, value_name = "K/N")]
    shard: Option<String>,
    /// Seeded arrival jitter: each request arrives up to this many ns later than written,
    /// drawn per seed, which reorders requests released together (0 = off). Kept for old
    /// command lines: `--set delays.arrival_jitter_ns=N` says the same, on every command.
    #[arg(long, default_value_t = 0)]
    arrival_jitter_ns: u64,
    /// Report shares of the first N completions (default: the smallest completed count among
    /// the classes that had requests, per run).
    #[arg(long)]
    prefix_n: Option<u64>,
}

/// `routersim merge DIR... --out DIR`: combines shard directories into a whole sweep.
#[derive(clap::Args, Clone, Debug)]
struct MergeArgs {
    /// The shard directories written by `sweep --shard K/N` (all N of them, any order).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// The output directory (default: results/<scenario name>-sweep/, as the unsharded sweep
    /// writes). It must be new, empty, or a previous sweep output: a rerun replaces the files
    /// routersim wrote there and keeps every other file; any other directory is refused
    /// before anything is written.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also replace a previous output of another routersim command in --out (only the files
    /// routersim wrote there).
    #[arg(long)]
    force: bool,
    /// Do not write report.html (the one-page summary of the output directory).
    #[arg(long)]
    no_report: bool,
}

/// `routersim tune SCENARIO --target CLASS=SHARE [--vary PATH ...] [--tolerance T]`.
#[derive(clap::Args, Clone, Debug)]
struct TuneArgs {
    /// The scenario YAML file.
    scenario: PathBuf,
    /// A target `CLASS=SHARE` (repeatable), SHARE in (0, 1).
    #[arg(long = "target", value_name = "CLASS=SHARE", required = true)]
    targets: Vec<String>,
    /// A quantum path to vary (repeatable; default: every class's
    /// `router.policy_classes.<name>.quantum`).
    #[arg(long = "vary", value_name = "PATH")]
    vary: Vec<String>,
    /// Largest accepted |achieved - target| share.
    #[arg(long, default_value_t = 0.02)]
    tolerance: f64,
    /// Which share to hit: of the first N completions, or of backlogged token service.
    #[arg(long, value_enum, default_value_t = ShareArg::FirstN)]
    share: ShareArg,
    /// N for `--share first-n` (default: as in a sweep).
    #[arg(long)]
    prefix_n: Option<u64>,
    /// Worker threads for the confirming runs (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Seeds per trial: each trial runs the replication seeds `sweep --seeds N` runs, aims
    /// their mean share at the target and reports the spread (min-max) over them.
    #[arg(long, default_value_t = 1)]
    seeds: u32,
    /// Override a scenario field by its dotted path before tuning, e.g.
    /// delays.arrival_jitter_ns=1000 (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// The first replication's seed (default: the scenario's `seed`); the same as
    /// `--set seed=S`.
    #[arg(long)]
    seed: Option<u64>,
    /// Print nothing but errors (the exit status still says whether the target was met).
    #[arg(long)]
    quiet: bool,
}

/// `tune --share`: which share to hit.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum ShareArg {
    /// The class's share of the first N completions.
    FirstN,
    /// The class's share of the token service dispatched while classes were backlogged.
    Tokens,
}

/// A chart that could not be drawn: always a bug, never bad input.
fn plot_bug(e: PlotError) -> CliError {
    CliError::Bug(e.to_string())
}

/// Runs a sweep (or one shard of it): every point is loaded and the output directory claimed
/// before the first run; the files are written after the last.
fn run_sweep(args: &SweepArgs) -> Result<(), CliError> {
    if args.arrival_jitter_ns != 0 && !args.quiet {
        errln!(
            "note: --arrival-jitter-ns {0} is --set delays.arrival_jitter_ns={0}, which every command takes",
            args.arrival_jitter_ns
        );
    }
    let (sets, seed) = sweep_seed(args);
    let options = SweepOptions {
        scenario: args.scenario.clone(),
        grid: Grid::parse(&sets)?,
        seeds: args.seeds,
        jobs: args.jobs,
        shard: args.shard.as_deref().map(ShardSpec::parse).transpose()?,
        arrival_jitter_ns: args.arrival_jitter_ns,
        prefix_n: args.prefix_n,
        seed,
    };
    let plan = SweepPlan::new(&options)?;
    let out = (args.out.clone()).unwrap_or_else(|| sweep_dir(&plan.manifest));
    let target =
        output::claim(&out, OutputKind::Sweep, &plan.input_files, args.force).map_err(input)?;
    let run = plan.run(!args.quiet)?;
    let mut files = plan.files(&run.rows).map_err(plot_bug)?;
    if !args.no_report && plan.manifest.shard.is_none() {
        add_sweep_report(&mut files, &plan.manifest, &plan.summaries(&run.rows));
    }
    target.write(&files).map_err(input)?;
    if !args.quiet {
        if plan.manifest.shard.is_none() {
            let summaries = plan.summaries(&run.rows);
            out!("{}", sweep::summary_table(&plan.manifest, &summaries));
        }
        outln!("{} runs; wrote {}", run.rows.len(), out.display());
    }
    if let Some(warning) = run.stop_warning() {
        errln!("{warning}");
    }
    Ok(())
}

/// The sweep's axes and its first seed: a one-value `--set seed=S` is `--seed S`, so that the
/// seed column says it once (a `seed=S1,S2,...` axis stays an axis, as it always was).
fn sweep_seed(args: &SweepArgs) -> (Vec<String>, Option<u64>) {
    let mut seed = args.seed;
    let mut axes = Vec::new();
    for set in &args.sets {
        let one_seed = set
            .split_once('=')
            .filter(|(path, _)| path.trim() == "seed")
            .and_then(|(_, value)| value.trim().parse::<u64>().ok());
        match one_seed {
            Some(value) => seed = Some(value),
            None => axes.push(set.clone()),
        }
    }
    (axes, seed)
}

/// A sweep's default directory: results/<name>-sweep/, and a shard's its own beside it
/// (results/<name>-sweep-shard-K-of-N/), so that shards run on one machine keep apart.
fn sweep_dir(manifest: &sweep::Manifest) -> PathBuf {
    let command = match &manifest.shard {
        Some(shard) => format!("sweep-shard-{}-of-{}", shard.index, shard.count),
        None => "sweep".to_string(),
    };
    out_dir::command_dir(&manifest.scenario, &command)
}

/// Merges shard directories into the files an unsharded sweep writes (without latency
/// bounds on the charts: a merge has no scenario).
fn run_merge(args: &MergeArgs) -> Result<(), CliError> {
    let (whole, rows) = sweep::shard::read_shards(&args.dirs)?;
    let out = (args.out.clone()).unwrap_or_else(|| sweep_dir(&whole));
    let target = output::claim(&out, OutputKind::Sweep, &args.dirs, args.force).map_err(input)?;
    let mut files = sweep::table::sweep_files(&whole, &rows).map_err(plot_bug)?;
    if !args.no_report {
        let summaries = sweep::table::summarize(&whole, &rows);
        add_sweep_report(&mut files, &whole, &summaries);
    }
    target.write(&files).map_err(input)
}

/// Appends a whole sweep's report.html to its `files`.
fn add_sweep_report(
    files: &mut Vec<(String, Vec<u8>)>,
    manifest: &sweep::Manifest,
    summaries: &[sweep::PointSummary],
) {
    let report = sweep::report::sweep_report(manifest, summaries, files);
    files.push((REPORT_FILE.to_string(), report));
}

/// Runs `tune` and prints the solution, the achieved shares and their sensitivity; a missed
/// target is printed too, then exits 1.
fn run_tune(args: &TuneArgs) -> Result<(), CliError> {
    let overrides = with_seed(parse_overrides(&args.set)?, args.seed);
    let scenario = Scenario::load_with_overrides(&args.scenario, &overrides).map_err(input)?;
    let names = scenario.class_names().to_vec();
    let targets = args
        .targets
        .iter()
        .map(|t| tune::parse_target(t, &names))
        .collect::<Result<Vec<_>, _>>()?;
    let vary = match args.vary.is_empty() {
        true => (0..names.len()).collect(),
        false => args
            .vary
            .iter()
            .map(|p| tune::quantum_class(p, &names))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let outcome = tune::tune(&TuneOptions {
        scenario,
        targets,
        vary,
        tolerance: args.tolerance,
        share: match args.share {
            ShareArg::FirstN => tune::ShareKind::FirstN,
            ShareArg::Tokens => tune::ShareKind::Tokens,
        },
        prefix_n: args.prefix_n,
        seeds: args.seeds,
        jobs: args.jobs,
    })?;
    if !args.quiet {
        out!("{}", outcome.describe());
    }
    match outcome.met {
        true => Ok(()),
        false => Err(CliError::Expectation(format!(
            "no quanta found within tolerance {} (best error {:.4})",
            args.tolerance, outcome.error
        ))),
    }
}
