//! The command line: clap commands, and the mapping of errors to exit codes (0, 1, 2).

use crate::engine::Limits;
use crate::mocker::EngineArgs;
use crate::report::metrics::RunMetrics;
use crate::report::{self, output};
use crate::scheduling::policy::{self, PolicyConfig};
use crate::scheduling::scheduler::SchedulerConfig;
use crate::scheduling::select::RouterConfig;
use crate::sim::{self, RouterMode, SimConfig, TransportDelays};
use crate::time::{SimDuration, format_ms};
use crate::workload::RequestSpec;
use crate::workload::trace::{self, TraceReader};
use clap::{Parser, Subcommand, ValueEnum};
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
    /// Check a Dynamo router policy YAML and print its resolved classes.
    Validate {
        /// The policy file.
        file: PathBuf,
    },
    /// Replay a mooncake trace with the same inputs `tools/dynosim` takes.
    Replay(ReplayArgs),
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
    /// Output directory (requests.csv, summary.json).
    #[arg(long)]
    out: PathBuf,
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
        Command::Validate { file } => validate(&file),
        Command::Replay(args) => replay(&args),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("routersim: {e}");
            e.exit_code()
        }
    }
}

fn validate(file: &Path) -> Result<(), CliError> {
    let config = PolicyConfig::from_path(file).map_err(input)?;
    print!("{}", policy::describe(&config));
    println!("{}: valid", file.display());
    Ok(())
}

/// Reads `--engine` / `--router` values: inline JSON if it starts with `{`, else a file.
fn json_arg(flag: &str, value: &str) -> Result<(String, String), CliError> {
    if value.trim_start().starts_with('{') {
        return Ok((format!("{flag} (inline JSON)"), value.to_string()));
    }
    let text = std::fs::read_to_string(value)
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

fn replay(args: &ReplayArgs) -> Result<(), CliError> {
    if args.workers == 0 {
        return Err(CliError::Input("--workers must be at least 1".into()));
    }
    if args.trace_block_size == 0 {
        return Err(CliError::Input(
            "--trace-block-size must be at least 1".into(),
        ));
    }
    let engine = match &args.engine {
        None => EngineArgs::default(),
        Some(v) => {
            let (name, text) = json_arg("--engine", v)?;
            EngineArgs::from_json_str(&text).map_err(|e| CliError::Input(format!("{name}: {e}")))?
        }
    };
    let router = match &args.router {
        None => RouterConfig::default(),
        Some(v) => {
            let (name, text) = json_arg("--router", v)?;
            let config: RouterConfig =
                serde_json::from_str(&text).map_err(|e| CliError::Input(format!("{name}: {e}")))?;
            config
                .validate()
                .map_err(|e| CliError::Input(format!("{name}: {e}")))?;
            config
        }
    };
    let policy = args
        .policy
        .as_deref()
        .map(PolicyConfig::from_path)
        .transpose()
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
    output::write_dir(&args.out, &files)
        .map_err(|e| CliError::Input(format!("{}: {e}", args.out.display())))?;
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
