//! The `check` command: its flags, the replications it judges, what it prints, and the
//! output directory it writes when asked (report.html with the verdicts over every seed, and
//! the files of the run on the scenario's own seed).

use super::seed_words;
use super::timeline::TimelineArgs;
use super::{
    CliError, file_name, input, no_progress_error, out_dir, parse_overrides, stop_line, with_seed,
};
use crate::bounds::MAX_SWEEP_RUNS;
use crate::pipeline::{JudgedRun, Judgement, RunOutput, replication_seeds};
use crate::report;
use crate::report::output::{self, OutputKind, OutputTarget};
use crate::report::render::junit::{JunitSuite, junit_xml};
use crate::report::render::run_page::RunPage;
use crate::report::verdict::evaluate::{
    ExpectationOutcome, aggregate, aggregate_quantile, format_outcome,
};
use crate::report::verdict::expect::Bound;
use crate::scenario::Scenario;
use crate::sim;
use crate::sweep;
use rayon::prelude::*;
use std::path::{Path, PathBuf};

/// `routersim check SCENARIO... [--junit FILE] [--seeds N] [--report] ...`.
#[derive(clap::Args, Debug)]
pub(super) struct CheckArgs {
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
    /// The first replication's seed (default: each scenario's `seed`); the same as
    /// `--set seed=S`.
    #[arg(long)]
    seed: Option<u64>,
    /// Replications per scenario, with the seeds `sweep --seeds N` uses (the first is the
    /// scenario's own seed). An expectation fails if it fails on any seed; each line shows
    /// the worst value and the replication that gave it.
    #[arg(long, default_value_t = 1)]
    seeds: u32,
    /// Judge the Q-quantile of the seeds instead of the worst one: an expectation passes when
    /// at least a fraction Q of the seeds pass it (Q in (0, 1]).
    #[arg(long, value_name = "Q")]
    quantile: Option<f64>,
    /// Worker threads for the replications (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Print nothing but errors (the exit status still says pass or fail, and a failure
    /// still says how many expectations failed), as every other command's --quiet does.
    #[arg(long)]
    quiet: bool,
    /// Also write each scenario's output directory, results/<name>-check/ (or --out):
    /// report.html with the verdicts over every seed, and the files and plots of the run on
    /// the first seed, as `run` writes them. Without it (or --out, or --timeline) check
    /// writes nothing but --junit.
    #[arg(long)]
    report: bool,
    /// The output directory (one scenario only; implies --report). It must be new, empty,
    /// or a previous `check` output: a rerun replaces the files routersim wrote there.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also replace a previous output of another routersim command in the output directory
    /// (only the files routersim wrote there).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    timeline: TimelineArgs,
}

impl CheckArgs {
    /// Whether check writes an output directory per scenario.
    fn writes_directory(&self) -> bool {
        self.report || self.out.is_some() || self.timeline.timeline
    }

    /// Err (exit 2) for an `--out` given with several scenarios.
    fn check_out(&self) -> Result<(), CliError> {
        match self.out.is_some() && self.scenarios.len() != 1 {
            true => Err(CliError::Input(
                "--out takes one scenario; with several, --report writes each into results/<name>-check/".into(),
            )),
            false => Ok(()),
        }
    }

    /// Claims `scenario`'s output directory (`None` when check writes none), before its runs.
    fn claim(&self, scenario: &Scenario) -> Result<Option<OutputTarget>, CliError> {
        if !self.writes_directory() {
            return Ok(None);
        }
        let dir =
            (self.out.clone()).unwrap_or_else(|| out_dir::command_dir(scenario.name(), "check"));
        let target = output::claim(&dir, OutputKind::Check, &scenario.input_files(), self.force);
        Ok(Some(target.map_err(input)?))
    }
}

/// A failed outcome line for a run a limit cut short, so that `check` fails with its reason.
fn limit_outcome(result: &sim::SimResult, seed: u64) -> Option<ExpectationOutcome> {
    stop_line(result).map(|line| ExpectationOutcome {
        label: "unfinished requests (the run must reach its end)".to_string(),
        measured: Some(result.count(crate::sim::EndStatus::Pending) as f64),
        bound: Bound::AtMost(0.0),
        passed: false,
        reason: Some(line),
        seed,
        wall_time_s: 0.0,
        boolean: false,
    })
}

pub(super) fn check(args: &CheckArgs) -> Result<(), CliError> {
    let overrides = with_seed(parse_overrides(&args.set)?, args.seed);
    check_replication_args(args)?;
    if let Some(junit) = &args.junit {
        // Before any run: a report that cannot be written must not cost a whole check.
        output::claim_file(junit, output::JUNIT_SIGNATURE).map_err(input)?;
    }
    args.check_out()?;
    let mut suites = Vec::new();
    for path in &args.scenarios {
        let scenario = Scenario::load_with_overrides(path, &overrides).map_err(input)?;
        for warning in scenario.warnings().into_iter().filter(|_| !args.quiet) {
            errln!("{warning}");
        }
        let judgement = Judgement::new(scenario)?.with_timeline(args.timeline.timeline);
        let target = args.claim(&judgement.scenario)?;
        let judged =
            judge_replications(&judgement, args, target.is_some()).map_err(|e| e.in_file(path))?;
        let (judged, kept) = split_kept(judged);
        let (per_seed, warnings): (Vec<_>, Vec<_>) = judged.into_iter().unzip();
        let outcomes = match args.quantile {
            Some(q) => aggregate_quantile(&per_seed, q),
            None => aggregate(&per_seed),
        };
        if let (Some(target), Some(kept)) = (target, kept) {
            write_directory(args, path, &judgement, (&kept, &outcomes), target)?;
        }
        if !args.quiet {
            print_verdicts(args, path, judgement.scenario.seed(), &outcomes, &warnings);
        }
        suites.push(JunitSuite {
            name: judgement.scenario.name().to_string(),
            outcomes,
            overrides: args.set.clone(),
            replication_seeds: replication_seeds(judgement.scenario.seed(), args.seeds),
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
        return Err(CliError::Expectation(match total {
            1 => "the expectation failed".to_string(),
            _ => format!("{failed} of {total} expectations failed"),
        }));
    }
    match (args.quiet, total) {
        (true, _) => {}
        (false, 1) => outln!("the expectation passes"),
        (false, _) => outln!("all {total} expectations pass"),
    }
    Ok(())
}

/// One scenario's verdicts as `check` prints them: a header, a line per expectation (naming
/// the replication that decided it), the seed note, and a line per overloaded seed.
fn print_verdicts(
    args: &CheckArgs,
    path: &Path,
    scenario_seed: u64,
    outcomes: &[ExpectationOutcome],
    warnings: &[Option<String>],
) {
    let seeds = match args.seeds {
        1 => format!("seed {scenario_seed}"),
        n => format!("{n} seeds"),
    };
    outln!(
        "{} ({seeds}): {}",
        path.display(),
        crate::text::count_of(outcomes.len(), "expectation")
    );
    let which = match args.quantile {
        Some(q) => format!("{q}-quantile"),
        None => "worst".to_string(),
    };
    let replications = seed_words::Replications::new(scenario_seed, args.seeds);
    for o in outcomes {
        match args.seeds {
            1 => outln!("  {}", format_outcome(o)),
            _ => outln!(
                "  {}  [{which} of {seeds}: {}]",
                format_outcome(o),
                replications.name(o.seed)
            ),
        }
    }
    if let Some(note) = replications.note(outcomes.iter().map(|o| o.seed)) {
        outln!("  {note}");
    }
    // One line per overloaded seed: a stability warning is about a run, not a verdict.
    for warning in warnings.iter().flatten() {
        outln!("  {warning}");
    }
}

fn check_replication_args(args: &CheckArgs) -> Result<(), CliError> {
    if args.seeds == 0 || u64::from(args.seeds) > MAX_SWEEP_RUNS {
        return Err(CliError::Input(format!(
            "--seeds {}: must be from 1 to {MAX_SWEEP_RUNS}",
            args.seeds
        )));
    }
    match args.quantile {
        Some(q) if !(q > 0.0 && q <= 1.0) => Err(CliError::Input(format!(
            "--quantile {q}: must be in (0, 1]"
        ))),
        _ => Ok(()),
    }
}

/// Runs every replication of a judged scenario in parallel; returns each seed's verdicts
/// (with a failed line for a run a limit cut short) and its overload warning, in
/// replication order.
fn judge_replications(
    judgement: &Judgement,
    args: &CheckArgs,
    keep_first: bool,
) -> Result<Vec<(SeedVerdicts, Option<RunOutput>)>, CliError> {
    let estimates = vec![judgement.memory_estimate_bytes(); args.seeds as usize];
    let pool = sweep::run::thread_pool(args.jobs, &estimates, true).map_err(CliError::from)?;
    pool.install(|| {
        (0..args.seeds)
            .into_par_iter()
            .map(|replication| {
                let keep = keep_first && replication == 0;
                judge_one(judgement, replication, args.seeds, keep)
            })
            .collect()
    })
}

/// One seed's verdicts and its overload warning (with the seed), if it was overloaded.
type SeedVerdicts = (Vec<ExpectationOutcome>, Option<String>);

/// One seed's verdicts, and its whole output if `keep` (the first seed's, when check writes
/// a directory).
fn judge_one(
    judgement: &Judgement,
    replication: u32,
    replications: u32,
    keep: bool,
) -> Result<(SeedVerdicts, Option<RunOutput>), CliError> {
    let started = std::time::Instant::now();
    let JudgedRun {
        spec,
        output,
        mut outcomes,
    } = judgement.run(replication, replications, None)?;
    no_progress_error(&output.result)?;
    outcomes.extend(limit_outcome(&output.result, spec.seed()));
    let wall_time_s = started.elapsed().as_secs_f64();
    for o in &mut outcomes {
        o.wall_time_s = wall_time_s;
    }
    let seed = spec.seed();
    let warning = output.metrics.stability.warning();
    let warning = warning.map(|w| format!("{w} (seed {seed})"));
    Ok(((outcomes, warning), keep.then_some(output)))
}

/// Each seed's verdicts, in order, and the one output kept (the first seed's), if any.
fn split_kept<V>(judged: Vec<(V, Option<RunOutput>)>) -> (Vec<V>, Option<RunOutput>) {
    let mut kept = None;
    let verdicts = judged
        .into_iter()
        .map(|(verdicts, output)| {
            kept = kept.take().or(output);
            verdicts
        })
        .collect();
    (verdicts, kept)
}

/// Writes a scenario's check directory: the first seed's run files (and timeline), and
/// report.html with the verdicts `outcomes` over every seed.
fn write_directory(
    args: &CheckArgs,
    path: &Path,
    judgement: &Judgement,
    (kept, outcomes): (&RunOutput, &[ExpectationOutcome]),
    target: OutputTarget,
) -> Result<(), CliError> {
    let scenario = &judgement.scenario;
    let meta = serde_json::json!({
        "command": "check",
        "scenario": scenario.name(),
        "scenario_hash": scenario.source_hash(),
        "overrides": args.set,
        "seed": scenario.seed(),
        "seeds": args.seeds,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let expectations = scenario.expectations();
    let mut files =
        report::output::run_files::run_files(&kept.result, &kept.metrics, &meta, expectations)
            .map_err(|e| CliError::Bug(e.to_string()))?;
    files.extend(args.timeline.file(&kept.result, &meta));
    let page = RunPage {
        command: "check",
        title: scenario.name(),
        facts: check_facts(args, path, scenario.seed()),
        outcomes: Some(outcomes),
    };
    let files = report::output::run_files::with_report(files, &page, &kept.metrics);
    target.write_bodies(&files).map_err(input)
}

/// What `check` judged, for its report.html: which verdicts the page shows and which run
/// its tables and plots come from.
fn check_facts(args: &CheckArgs, path: &Path, seed: u64) -> Vec<(String, String)> {
    let judged = match (args.seeds, args.quantile) {
        (1, _) => format!("seed {seed}"),
        (n, None) => format!("the worst of {n} seeds"),
        (n, Some(q)) => format!("the {q}-quantile of {n} seeds"),
    };
    let mut facts = vec![
        ("command".to_string(), "routersim check".to_string()),
        ("scenario file".to_string(), file_name(path)),
        ("verdicts".to_string(), judged),
        (
            "tables and plots".to_string(),
            format!("the run on seed {seed}"),
        ),
    ];
    if !args.set.is_empty() {
        facts.push(("overrides (--set)".to_string(), args.set.join(" ")));
    }
    facts
}
