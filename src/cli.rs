//! The command line: clap commands, and the mapping of errors to exit codes (0, 1, 2).

use crate::bounds::{MAX_BLOCK_TOKENS, MAX_INPUT_FILE_BYTES, MAX_RANKS};
use crate::engine::Limits;
use crate::mocker::EngineArgs;
use crate::report;
use crate::report::evaluate::{ExpectationOutcome, evaluate, format_outcome};
use crate::report::junit::{JunitSuite, junit_xml};
use crate::report::metrics::RunMetrics;
use crate::report::output::{self, OutputKind};
use crate::scenario::{self, FileKind, Scenario};
use crate::scheduling::policy::{self, PolicyConfig};
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::SchedulerConfig;
use crate::sim::{self, RouterMode, SimConfig, TransportDelays};
use crate::sweep;
use crate::time::{SimDuration, format_ms};
use crate::workload::RequestSpec;
use crate::workload::trace::{self, TraceReader};
use clap::{Parser, Subcommand, ValueEnum};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
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
    Sweep(sweep::SweepArgs),
    /// Combine the shard directories of a sharded sweep into the files of the whole sweep.
    Merge(sweep::MergeArgs),
    /// Find quanta that give target shares.
    Tune(sweep::TuneArgs),
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
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// Scenario files.
    #[arg(required = true)]
    scenarios: Vec<PathBuf>,
    /// Also write the outcomes as JUnit XML. An existing file is replaced only if routersim
    /// wrote it.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Override a field of every scenario by its dotted path (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct ReplayArgs {
    /// Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids, optional
    /// policy_class / priority / strict_priority.
    #[arg(long)]
    trace: PathBuf,
    /// Router policy-class YAML (Dynamo's schema).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Number of aggregated mock workers.
    #[arg(long, default_value_t = 1)]
    workers: u32,
    /// Engine config as a JSON file or inline JSON in Dynamo's form: {"engine": {...}}.
    #[arg(long)]
    engine: Option<String>,
    /// KvRouterConfig keyword arguments as a JSON file or inline JSON.
    #[arg(long)]
    router: Option<String>,
    #[arg(long, value_enum, default_value_t = RouterModeArg::KvRouter)]
    router_mode: RouterModeArg,
    /// Tokens per hash id.
    #[arg(long, default_value_t = trace::DEFAULT_TRACE_BLOCK_SIZE)]
    trace_block_size: u64,
    /// Seed for the router's tie-breaks.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory (requests.csv, summary.json, ...). It must be new, empty, or a previous
    /// `replay` output: a rerun replaces the files routersim wrote there and keeps every other
    /// file; any other directory is refused before the replay starts.
    #[arg(long)]
    out: PathBuf,
    /// Also replace a previous output of another routersim command in --out (only the files
    /// routersim wrote there).
    #[arg(long)]
    force: bool,
    /// Print nothing but errors.
    #[arg(long)]
    quiet: bool,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
#[value(rename_all = "snake_case")]
enum RouterModeArg {
    KvRouter,
    RoundRobin,
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

impl From<sweep::SweepError> for CliError {
    fn from(e: sweep::SweepError) -> Self {
        match e.exit_code() {
            1 => CliError::Expectation(e.to_string()),
            2 => CliError::Input(e.to_string()),
            _ => CliError::Bug(e.to_string()),
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
        Command::Sweep(args) => sweep::run_sweep(&args).map_err(CliError::from),
        Command::Merge(args) => sweep::run_merge(&args).map_err(CliError::from),
        Command::Tune(args) => sweep::run_tune(&args).map_err(CliError::from),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("routersim: {e}");
            e.exit_code()
        }
    }
}

fn validate(file: &Path, set: &[String]) -> Result<(), CliError> {
    if scenario::file_kind_of_path(file).map_err(input)? == FileKind::Scenario {
        let scenario =
            Scenario::load_with_overrides(file, &parse_overrides(set)?).map_err(input)?;
        print!("{}", scenario.describe());
        println!("{}: valid scenario", file.display());
        return Ok(());
    }
    if !set.is_empty() {
        return Err(CliError::Input(
            "--set applies to scenario files only".into(),
        ));
    }
    let config = scenario::load_policy_file(file).map_err(input)?;
    print!("{}", policy::describe(&config));
    println!("{}: valid policy", file.display());
    Ok(())
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

/// A scenario run and its metrics.
struct ScenarioRun {
    scenario: Scenario,
    seed: u64,
    result: sim::SimResult,
    metrics: RunMetrics,
}

/// Loads, validates and runs one scenario.
fn run_scenario(
    path: &Path,
    overrides: &[(String, String)],
    seed: Option<u64>,
) -> Result<ScenarioRun, CliError> {
    let scenario = Scenario::load_with_overrides(path, overrides).map_err(input)?;
    run_loaded(scenario, seed)
}

/// Runs a loaded scenario.
fn run_loaded(scenario: Scenario, seed: Option<u64>) -> Result<ScenarioRun, CliError> {
    let path = scenario.file().to_path_buf();
    for (index, e) in scenario.expectations().iter().enumerate() {
        report::expect::validate_expectation(e, scenario.class_names())
            .map_err(|err| CliError::Input(format!("{}: expect.{index}.{err}", path.display())))?;
    }
    let seed = seed.unwrap_or(scenario.seed());
    let requests = scenario.requests(seed).map_err(input)?;
    let result = sim::run(scenario.sim_config(seed), requests.into_iter())
        .map_err(|e| CliError::Bug(e.to_string()))?;
    let metrics = RunMetrics::compute(&result, &result.class_quanta_tokens);
    Ok(ScenarioRun {
        scenario,
        seed,
        result,
        metrics,
    })
}

/// Runs the companions named by `minus:` and returns their metrics keyed as written.
fn companion_metrics(run: &ScenarioRun) -> Result<BTreeMap<String, RunMetrics>, CliError> {
    let dir = run.scenario.file().parent().unwrap_or(Path::new("."));
    let mut out = BTreeMap::new();
    for e in run.scenario.expectations() {
        if let Some(name) = &e.minus
            && !out.contains_key(name)
        {
            let companion = run_scenario(&dir.join(name), &[], None)?;
            out.insert(name.clone(), companion.metrics);
        }
    }
    Ok(out)
}

fn evaluate_expectations(run: &ScenarioRun) -> Result<Vec<ExpectationOutcome>, CliError> {
    let companions = companion_metrics(run)?;
    Ok(evaluate(
        run.scenario.expectations(),
        &run.metrics,
        &companions,
    ))
}

fn run(args: &RunArgs) -> Result<(), CliError> {
    let started = std::time::Instant::now();
    let overrides = parse_overrides(&args.set)?;
    let scenario = Scenario::load_with_overrides(&args.scenario, &overrides).map_err(input)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("results").join(scenario.name()));
    let target =
        output::claim(&out, OutputKind::Run, &scenario.input_files(), args.force).map_err(input)?;
    let run = run_loaded(scenario, args.seed)?;
    let outcomes = evaluate_expectations(&run)?;
    let meta = serde_json::json!({
        "command": "run",
        "scenario": run.scenario.name(),
        "scenario_hash": run.scenario.source_hash(),
        "overrides": args.set,
        "seed": run.seed,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let files = report::run_files(&run.result, &run.metrics, &meta)
        .map_err(|e| CliError::Bug(e.to_string()))?;
    target.write(&files).map_err(input)?;
    if args.quiet {
        return Ok(());
    }
    println!("{} (seed {})", run.scenario.name(), run.seed);
    print!("{}", report::table::class_table(&run.metrics));
    if !outcomes.is_empty() {
        let passed = outcomes.iter().filter(|o| o.passed).count();
        println!(
            "expectations: {passed} of {} pass (`routersim check` gates on them)",
            outcomes.len()
        );
        for o in outcomes.iter().filter(|o| !o.passed) {
            println!("  {}", format_outcome(o));
        }
    }
    println!(
        "{} requests, makespan {} ms, {} events in {:.2} s; wrote {}",
        run.result.records.len(),
        format_ms(run.result.end_time.as_ns()),
        run.result.events,
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

fn check(args: &CheckArgs) -> Result<(), CliError> {
    let overrides = parse_overrides(&args.set)?;
    let mut suites = Vec::new();
    for path in &args.scenarios {
        let run = run_scenario(path, &overrides, None)?;
        let outcomes = evaluate_expectations(&run)?;
        println!(
            "{} (seed {}): {} expectations",
            path.display(),
            run.seed,
            outcomes.len()
        );
        for o in &outcomes {
            println!("  {}", format_outcome(o));
        }
        suites.push(JunitSuite {
            name: run.scenario.name().to_string(),
            outcomes,
        });
    }
    if let Some(junit) = &args.junit {
        output::write_file(junit, &junit_xml(&suites), output::JUNIT_SIGNATURE).map_err(input)?;
    }
    let failed: usize = suites
        .iter()
        .map(|s| s.outcomes.iter().filter(|o| !o.passed).count())
        .sum();
    let total: usize = suites.iter().map(|s| s.outcomes.len()).sum();
    if failed > 0 {
        return Err(CliError::Expectation(format!(
            "{failed} of {total} expectations failed"
        )));
    }
    println!("all {total} expectations pass");
    Ok(())
}

/// Reads `--engine` / `--router` values: inline JSON if it starts with `{`, else a file.
fn json_arg(flag: &str, value: &str) -> Result<(String, String), CliError> {
    if value.trim_start().starts_with('{') {
        return Ok((format!("{flag} (inline JSON)"), value.to_string()));
    }
    let text = crate::bounds::read_to_string_capped(Path::new(value), MAX_INPUT_FILE_BYTES)
        .map_err(|e| CliError::Input(format!("{flag} {value}: {e}")))?;
    Ok((value.to_string(), text))
}

/// Everything a trace replay needs, validated.
#[derive(Clone, Debug)]
pub struct ReplaySetup {
    pub trace: PathBuf,
    pub trace_block_size: u64,
    pub policy: Option<PolicyConfig>,
    pub router: RouterConfig,
    pub engine: EngineArgs,
    pub workers: u32,
    pub router_mode: RouterMode,
    pub seed: u64,
}

/// Validates the whole trace, then replays it (streaming when it is in time order).
pub fn run_replay(setup: &ReplaySetup) -> Result<sim::SimResult, CliError> {
    let trace_name = setup.trace.display().to_string();
    let open = || -> Result<BufReader<File>, CliError> {
        File::open(&setup.trace)
            .map(BufReader::new)
            .map_err(|e| CliError::Input(format!("{trace_name}: {e}")))
    };
    let summary = trace::scan(open()?, &trace_name, setup.trace_block_size).map_err(input)?;
    let reader = TraceReader::new(open()?, &trace_name, setup.trace_block_size)
        .with_origin_ms(summary.origin_ms);
    let requests: Box<dyn Iterator<Item = RequestSpec>> = if summary.sorted {
        Box::new(reader.map(|r| r.expect("validated by the scan")))
    } else {
        let mut all: Vec<RequestSpec> = reader.map(|r| r.expect("validated by the scan")).collect();
        all.sort_by_key(|r| (r.arrival, r.row));
        Box::new(all.into_iter())
    };
    let block_size = setup.engine.block_size;
    let config = SimConfig {
        scheduler: SchedulerConfig::new(
            setup.router.clone(),
            setup.policy.as_ref(),
            None,
            block_size,
            setup.seed,
        ),
        worker_count: setup.workers,
        router_mode: setup.router_mode,
        delays: TransportDelays::default(),
        limits: Limits::default(),
        tick_interval: SimDuration::from_ms(60_000),
        check_every_event: false,
        seed: setup.seed,
        engine: setup.engine.clone(),
    };
    sim::run(config, requests).map_err(|e| CliError::Bug(e.to_string()))
}

/// The files a replay reads (`--engine` and `--router` may be inline JSON instead).
fn replay_inputs(args: &ReplayArgs) -> Vec<PathBuf> {
    let mut inputs = vec![args.trace.clone()];
    inputs.extend(args.policy.clone());
    for value in [&args.engine, &args.router].into_iter().flatten() {
        if !value.trim_start().starts_with('{') {
            inputs.push(PathBuf::from(value));
        }
    }
    inputs
}

fn replay(args: &ReplayArgs) -> Result<(), CliError> {
    if args.workers == 0 {
        return Err(CliError::Input("--workers must be at least 1".into()));
    }
    if u64::from(args.workers) > MAX_RANKS {
        return Err(CliError::Input(format!(
            "--workers {}: must be at most {MAX_RANKS} (worker ranks are bounded)",
            args.workers
        )));
    }
    if !(1..=MAX_BLOCK_TOKENS).contains(&args.trace_block_size) {
        return Err(CliError::Input(format!(
            "--trace-block-size {}: must be from 1 to {MAX_BLOCK_TOKENS}",
            args.trace_block_size
        )));
    }
    let engine = match &args.engine {
        None => EngineArgs::default(),
        Some(v) => {
            let (name, text) = json_arg("--engine", v)?;
            EngineArgs::from_json_str(&text).map_err(|e| CliError::Input(format!("{name}: {e}")))?
        }
    };
    if u64::from(args.workers) * u64::from(engine.dp_size) > MAX_RANKS {
        return Err(CliError::Input(format!(
            "--workers {} x dp_size {}: more than {MAX_RANKS} worker ranks",
            args.workers, engine.dp_size
        )));
    }
    let router = match &args.router {
        None => RouterConfig::default(),
        Some(v) => {
            let (name, text) = json_arg("--router", v)?;
            let config = RouterConfig::from_json_str(&text)
                .map_err(|e| CliError::Input(format!("{name}: {e}")))?;
            config
                .validate()
                .map_err(|e| CliError::Input(format!("{name}: {e}")))?;
            config
        }
    };
    let policy = args
        .policy
        .as_deref()
        .map(scenario::load_policy_file)
        .transpose()
        .map_err(input)?;
    let target = output::claim(
        &args.out,
        OutputKind::Replay,
        &replay_inputs(args),
        args.force,
    )
    .map_err(input)?;
    let setup = ReplaySetup {
        trace: args.trace.clone(),
        trace_block_size: args.trace_block_size,
        policy,
        router,
        engine,
        workers: args.workers,
        router_mode: match args.router_mode {
            RouterModeArg::KvRouter => RouterMode::KvRouter,
            RouterModeArg::RoundRobin => RouterMode::RoundRobin,
        },
        seed: args.seed,
    };
    let result = run_replay(&setup)?;
    let trace_name = args.trace.display().to_string();
    let meta = serde_json::json!({
        "command": "replay",
        "trace": trace_name,
        "workers": args.workers,
        "seed": args.seed,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let metrics = RunMetrics::compute(&result, &result.class_quanta_tokens);
    let files =
        report::run_files(&result, &metrics, &meta).map_err(|e| CliError::Bug(e.to_string()))?;
    target.write(&files).map_err(input)?;
    if !args.quiet {
        print!("{}", report::table::class_table(&metrics));
        println!(
            "{} requests, makespan {} ms, {} events; wrote {}",
            result.records.len(),
            format_ms(result.end_time.as_ns()),
            result.events,
            args.out.display()
        );
    }
    Ok(())
}
