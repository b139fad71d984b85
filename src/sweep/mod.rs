//! Quantum tuning: parallel parameter sweeps with seeded replications, shards and their
//! merge, and `tune` (the inverse problem: quanta for target shares).
//!
//! A sweep takes a scenario and `--set PATH=V1,V2,...` axes, runs every point of their
//! Cartesian product with N seeds on a rayon pool, and writes `sweep.json` (what was swept),
//! `sweep.csv` (one row per point and seed), `sweep-summary.csv` (per point: mean, min, max
//! and a Student-t 95% confidence interval over seeds) and plots. Results are collected in
//! (point, replication) order before anything is written, so the bytes do not depend on
//! `--jobs`, and no wall-clock time reaches a file.
//!
//! Entry points for the CLI: [`run_sweep`], [`run_merge`], [`run_tune`] with the clap
//! argument structs [`SweepArgs`], [`MergeArgs`], [`TuneArgs`]; library callers can use
//! [`sweep`], [`merge`] and [`tune::tune`] to get the results without printing.

pub mod grid;
pub mod jitter;
pub mod plots;
pub mod run;
pub mod shard;
pub mod stats;
pub mod table;
pub mod tune;

use crate::report::output::{self, OutputKind, OutputTarget};
use crate::scenario::ScenarioError;
use std::fmt;
use std::path::{Path, PathBuf};

pub use grid::{Axis, Grid, ShardSpec};
pub use run::{ClassRow, Row, SweepPlan};
pub use shard::Manifest;
pub use tune::{TuneOutcome, TuneTarget};

/// Why a sweep, merge or tune failed, and so the process exit code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SweepError {
    /// Bad input or usage (a bad `--set` path or value, unreadable shard, ...): exit 2.
    Input(String),
    /// `tune` could not reach its target within the tolerance: exit 1.
    TargetMissed(String),
    /// The simulator caught itself in a bug, or a plot or file could not be written: exit 3.
    Internal(String),
}

impl SweepError {
    /// The process exit code: 2 for bad input, 1 for a missed target, 3 for an internal bug.
    pub fn exit_code(&self) -> i32 {
        match self {
            SweepError::Input(_) => 2,
            SweepError::TargetMissed(_) => 1,
            SweepError::Internal(_) => 3,
        }
    }
}

impl fmt::Display for SweepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SweepError::Input(m) | SweepError::TargetMissed(m) | SweepError::Internal(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for SweepError {}

impl From<ScenarioError> for SweepError {
    fn from(e: ScenarioError) -> Self {
        SweepError::Input(e.to_string())
    }
}

/// `routersim sweep SCENARIO --set PATH=V1,V2,... [--seeds N] [--jobs J] [--out DIR]`.
#[derive(clap::Args, Clone, Debug)]
pub struct SweepArgs {
    /// The scenario YAML file.
    pub scenario: PathBuf,
    /// An axis `PATH=V1,V2,...` (repeatable): every combination of the values is a point.
    /// Values are split on commas outside brackets; one value is a plain override.
    #[arg(long = "set", value_name = "PATH=V1,V2,...")]
    pub sets: Vec<String>,
    /// Replications per point; replication 0 runs the scenario seed, the others seeds drawn
    /// from it (stream `sweep/replication`).
    #[arg(long, default_value_t = 1)]
    pub seeds: u32,
    /// Worker threads (default: all cores). The output does not depend on it.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// The output directory. It must be new, empty, or a previous sweep output: a rerun
    /// replaces the files routersim wrote there and keeps every other file; any other
    /// directory is refused before the sweep starts.
    #[arg(long, default_value = "sweep-out")]
    pub out: PathBuf,
    /// Also replace a previous output of another routersim command in --out (only the files
    /// routersim wrote there).
    #[arg(long)]
    pub force: bool,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Run only shard K of N (1-based, strided: points K-1, K-1+N, ...); merge the shard
    /// directories with `routersim merge`.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
    /// Seeded arrival jitter: each request arrives up to this many ns later than written,
    /// drawn per seed, which reorders requests released together (0 = off).
    #[arg(long, default_value_t = 0)]
    pub arrival_jitter_ns: u64,
    /// Report shares of the first N completions (default: the smallest completed count among
    /// the classes that had requests, per run).
    #[arg(long)]
    pub prefix_n: Option<u64>,
}

/// `routersim merge DIR... --out DIR`: combines shard directories into a whole sweep.
#[derive(clap::Args, Clone, Debug)]
pub struct MergeArgs {
    /// The shard directories written by `sweep --shard K/N` (all N of them, any order).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// The output directory. It must be new, empty, or a previous sweep output: a rerun
    /// replaces the files routersim wrote there and keeps every other file; any other
    /// directory is refused before anything is read.
    #[arg(long, default_value = "sweep-out")]
    pub out: PathBuf,
    /// Also replace a previous output of another routersim command in --out (only the files
    /// routersim wrote there).
    #[arg(long)]
    pub force: bool,
}

/// `routersim tune SCENARIO --target CLASS=SHARE [--vary PATH ...] [--tolerance T]`.
#[derive(clap::Args, Clone, Debug)]
pub struct TuneArgs {
    /// The scenario YAML file.
    pub scenario: PathBuf,
    /// A target `CLASS=SHARE` (repeatable), SHARE in (0, 1).
    #[arg(long = "target", value_name = "CLASS=SHARE", required = true)]
    pub targets: Vec<String>,
    /// A quantum path to vary (repeatable; default: every class's
    /// `router.policy_classes.<name>.quantum`).
    #[arg(long = "vary", value_name = "PATH")]
    pub vary: Vec<String>,
    /// Largest accepted |achieved - target| share.
    #[arg(long, default_value_t = 0.02)]
    pub tolerance: f64,
    /// Which share to hit: of the first N completions, or of backlogged token service.
    #[arg(long, value_enum, default_value_t = tune::ShareKind::FirstN)]
    pub share: tune::ShareKind,
    /// N for `--share first-n` (default: as in a sweep).
    #[arg(long)]
    pub prefix_n: Option<u64>,
    /// Worker threads for the confirming runs (default: all cores).
    #[arg(long)]
    pub jobs: Option<usize>,
}

/// Runs a sweep (or one shard of it) and writes its directory.
pub fn run_sweep(args: &SweepArgs) -> Result<(), SweepError> {
    let plan = SweepPlan::from_args(args)?;
    let out = claim_out(&args.out, &plan.input_files(), args.force)?;
    let rows = plan.run(args.jobs, !args.quiet)?;
    let files = match &plan.manifest.shard {
        Some(_) => shard::shard_files(&plan.manifest, &rows)?,
        None => table::sweep_files(&plan.manifest, &rows)?,
    };
    write_out(&out, &files)?;
    if !args.quiet {
        if let Some((_, summary)) = files.iter().find(|(name, _)| name == "sweep-summary.csv") {
            print!("{}", share_table(summary));
        }
        println!("{} runs; wrote {}", rows.len(), args.out.display());
    }
    Ok(())
}

/// The terminal summary of a sweep: per point, the varied values and each class's share of the
/// first N completions (mean and 95% interval over seeds), read back from the summary file.
fn share_table(summary_csv: &[u8]) -> String {
    let mut reader = csv::Reader::from_reader(summary_csv);
    let Ok(header) = reader.headers().cloned() else {
        return String::new();
    };
    let runs = header.iter().position(|h| h == "runs").unwrap_or(1);
    let varied: Vec<usize> = (1..runs).collect();
    let shares: Vec<(String, usize, usize, usize)> = header
        .iter()
        .enumerate()
        .filter_map(|(i, h)| {
            let class = h.strip_suffix(".share_first_n.mean")?;
            let col = |suffix: &str| {
                header
                    .iter()
                    .position(|x| x == format!("{class}.share_first_n.{suffix}"))
            };
            Some((class.to_string(), i, col("ci95_low")?, col("ci95_high")?))
        })
        .collect();
    let mut out = String::new();
    for &v in &varied {
        out += &format!("{:>14} ", short_path(&header[v]));
    }
    for (class, ..) in &shares {
        out += &format!("{:>24} ", format!("{class} share [95% CI]"));
    }
    out = out.trim_end().to_string() + "\n";
    for record in reader.records().flatten() {
        let mut line = String::new();
        for &v in &varied {
            line += &format!("{:>14} ", &record[v]);
        }
        for (_, mean, lo, hi) in &shares {
            let cell = format!(
                "{} [{}, {}]",
                short(&record[*mean]),
                short(&record[*lo]),
                short(&record[*hi])
            );
            line += &format!("{cell:>24} ");
        }
        out += line.trim_end();
        out.push('\n');
    }
    out
}

/// The last two segments of a dotted path (`regular.quantum`), to keep columns narrow.
fn short_path(path: &str) -> String {
    let parts: Vec<&str> = path.rsplitn(3, '.').collect();
    parts
        .iter()
        .take(2)
        .rev()
        .copied()
        .collect::<Vec<_>>()
        .join(".")
}

/// A share with three decimals.
fn short(value: &str) -> String {
    value
        .parse::<f64>()
        .map(|v| format!("{v:.3}"))
        .unwrap_or_else(|_| value.to_string())
}

/// Merges shard directories into the files an unsharded sweep writes.
pub fn run_merge(args: &MergeArgs) -> Result<(), SweepError> {
    let out = claim_out(&args.out, &args.dirs, args.force)?;
    let files = merge(&args.dirs)?;
    write_out(&out, &files)
}

/// Runs `tune` and prints the solution, the achieved shares and their sensitivity.
/// A missed target is still printed, then returned as [`SweepError::TargetMissed`].
pub fn run_tune(args: &TuneArgs) -> Result<(), SweepError> {
    let outcome = tune::tune(args)?;
    print!("{}", outcome.describe());
    match outcome.met {
        true => Ok(()),
        false => Err(SweepError::TargetMissed(format!(
            "no quanta found within tolerance {} (best error {:.4})",
            args.tolerance, outcome.error
        ))),
    }
}

/// The files of a whole sweep (name, bytes) from its shard directories.
pub fn merge(dirs: &[PathBuf]) -> Result<Vec<(String, Vec<u8>)>, SweepError> {
    let (manifest, rows) = shard::read_shards(dirs)?;
    table::sweep_files(&manifest, &rows)
}

/// Runs the sweep `args` describes and returns its files without writing them.
pub fn sweep(args: &SweepArgs) -> Result<Vec<(String, Vec<u8>)>, SweepError> {
    let plan = SweepPlan::from_args(args)?;
    let rows = plan.run(args.jobs, false)?;
    match &plan.manifest.shard {
        Some(_) => shard::shard_files(&plan.manifest, &rows),
        None => table::sweep_files(&plan.manifest, &rows),
    }
}

/// Checks `--out` before any work: see [`crate::report::output`].
fn claim_out(dir: &Path, inputs: &[PathBuf], force: bool) -> Result<OutputTarget, SweepError> {
    output::claim(dir, OutputKind::Sweep, inputs, force).map_err(|e| SweepError::Input(e.0))
}

fn write_out(out: &OutputTarget, files: &[(String, Vec<u8>)]) -> Result<(), SweepError> {
    out.write(files).map_err(|e| SweepError::Input(e.0))
}

#[cfg(test)]
mod tests;
