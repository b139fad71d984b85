//! The `plan` command: its flags, the searches it makes (one, one per `--for` value, or a
//! joint A+B search), and what it prints and writes.

use super::{CliError, file_name, input, out_dir, parse_overrides, plot_bug, with_seed};
use crate::plan;
use crate::report::output::{self, OutputKind};
use crate::report::render::chart::render_files;
use crate::report::render::html::REPORT_FILE;
use crate::scenario::Scenario;
use crate::sweep;
use std::path::{Path, PathBuf};

/// `routersim plan SCENARIO (--minimize PATH | --maximize PATH) --range LO..HI ...`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("goal").required(true).args(["minimize", "maximize"])))]
pub(super) struct PlanArgs {
    /// The scenario file; its `expect:` block is the SLO.
    scenario: PathBuf,
    /// Find the smallest feasible value of this `--set` path (e.g. workers.count), or with
    /// A+B the fewest of two counts together (e.g.
    /// workers.prefill.count+workers.decode.count: for each A, the fewest B); or the fleet's
    /// cost, `gpu_hours` or `peak_workers`: the feasible value of the --range PATH at which it
    /// is least (e.g. --range planner.max_gpu_budget=2..16).
    #[arg(long, value_name = "PATH")]
    minimize: Option<String>,
    /// Find the largest feasible value of this `--set` path (e.g. workload.rate_per_s).
    #[arg(long, value_name = "PATH")]
    maximize: Option<String>,
    /// The range searched, inclusive: LO..HI. Both ends are probed first; the scenario must
    /// take both. With --minimize gpu_hours or peak_workers: PATH=LO..HI (every whole number
    /// probed) or PATH=V1,V2,..., at most 96 values.
    #[arg(long, value_name = "LO..HI")]
    range: String,
    /// Replications per probe, with the seeds `sweep --seeds N` uses; a probe is feasible
    /// only if every expectation holds on every seed. At most 100,000 runs in all: up to 96
    /// probes x the seeds (x the `--for` values).
    #[arg(long, default_value_t = 1)]
    seeds: u32,
    /// Relative precision of a real parameter's answer, at least 4.44e-16 (what a double
    /// resolves).
    #[arg(long, default_value_t = 0.01)]
    precision: f64,
    /// Override a scenario field for every probe (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// The first replication's seed (default: the scenario's `seed`); the same as
    /// `--set seed=S`.
    #[arg(long)]
    seed: Option<u64>,
    /// Repeat the search for each value of PATH (a capacity table), e.g. workers.count=1,2,4,8.
    #[arg(long = "for", value_name = "PATH=V1,V2,...")]
    for_values: Option<String>,
    /// Split a fixed number of workers between two counts and find the best split: A+B=T
    /// (e.g. workers.prefill.count+workers.decode.count=8) searches PATH for every split
    /// a + b = T (one of each at least) and answers the split with the best value.
    #[arg(long, value_name = "A+B=T")]
    total: Option<String>,
    /// Count an overloaded run as feasible.
    #[arg(long)]
    allow_overload: bool,
    /// Worker threads for a probe's seeds (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Output directory (default: results/<scenario name>-plan-<minimize|maximize>-<PATH>/,
    /// with -total-<T> for a --total split, so that different plans keep apart). It must be
    /// new, empty, or a previous plan output: a rerun replaces the files routersim wrote
    /// there and keeps every other file; any other directory is refused before the search
    /// starts.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also replace a previous output of another routersim command in the output directory
    /// (only the files routersim wrote there).
    #[arg(long)]
    force: bool,
    /// Print nothing but errors.
    #[arg(long)]
    quiet: bool,
    /// Do not write report.html (the one-page summary of the output directory).
    #[arg(long)]
    no_report: bool,
}

/// What `plan` searched, for its report.html.
fn plan_facts(args: &PlanArgs) -> Vec<(String, String)> {
    let goal = match (&args.minimize, &args.maximize) {
        (Some(p), _) => format!("--minimize {p}"),
        (_, Some(p)) => format!("--maximize {p}"),
        _ => String::new(),
    };
    let mut facts = vec![
        ("command".to_string(), "routersim plan".to_string()),
        ("scenario file".to_string(), file_name(&args.scenario)),
        (
            "search".to_string(),
            format!("{goal} --range {}", args.range),
        ),
        ("seeds per probe".to_string(), args.seeds.to_string()),
    ];
    if let Some(total) = &args.total {
        facts.push(("split (--total)".to_string(), total.clone()));
    }
    if let Some(table) = &args.for_values {
        facts.push(("table (--for)".to_string(), table.clone()));
    }
    if !args.set.is_empty() {
        facts.push(("overrides (--set)".to_string(), args.set.join(" ")));
    }
    facts
}

/// Parses `LO..HI`.
fn parse_range(text: &str) -> Result<(f64, f64), CliError> {
    let bad = || CliError::Input(format!("--range {text}: expected LO..HI, e.g. 1..64"));
    let (lo, hi) = text.split_once("..").ok_or_else(bad)?;
    let lo: f64 = lo.trim().parse().map_err(|_| bad())?;
    let hi: f64 = hi.trim().parse().map_err(|_| bad())?;
    Ok((lo, hi))
}

/// Parses `--for PATH=V1,V2,...` into (path, values).
fn parse_for(text: &str) -> Result<(String, Vec<String>), CliError> {
    let (path, values) = text
        .split_once('=')
        .filter(|(p, v)| !p.trim().is_empty() && !v.trim().is_empty())
        .ok_or_else(|| CliError::Input(format!("--for {text}: expected PATH=V1,V2,...")))?;
    let values = values.split(',').map(|v| v.trim().to_string()).collect();
    Ok((path.trim().to_string(), values))
}

/// The options of the search `args` ask for (before any check against the scenario).
fn plan_options(
    args: &PlanArgs,
    overrides: &[(String, String)],
) -> Result<plan::PlanOptions, CliError> {
    let (goal, parameter) = match (&args.minimize, &args.maximize) {
        (Some(p), None) => (plan::Goal::Minimize, p.clone()),
        (None, Some(p)) => (plan::Goal::Maximize, p.clone()),
        _ => {
            return Err(CliError::Input(
                "give one of --minimize or --maximize".into(),
            ));
        }
    };
    Ok(plan::PlanOptions {
        scenario: args.scenario.clone(),
        overrides: overrides.to_vec(),
        parameter,
        goal,
        range: parse_range(&args.range)?,
        seeds: args.seeds,
        precision: args.precision,
        allow_overload: args.allow_overload,
    })
}

pub(super) fn run_plan(args: &PlanArgs) -> Result<(), CliError> {
    let started = std::time::Instant::now();
    let overrides = with_seed(parse_overrides(&args.set)?, args.seed);
    let scenario = Scenario::load_with_overrides(&args.scenario, &overrides).map_err(input)?;
    if let Some(objective) = args
        .minimize
        .as_deref()
        .and_then(plan::cost::Objective::parse)
    {
        return run_cost_plan(args, objective, overrides, &scenario, started);
    }
    let options = plan_options(args, &overrides)?;
    let table = args.for_values.as_deref().map(parse_for).transpose()?;
    let goal = options.goal.name();
    let out = (args.out.clone()).unwrap_or_else(|| {
        out_dir::plan_dir(
            scenario.name(),
            goal,
            &options.parameter,
            args.total.as_deref(),
        )
    });
    if let Some(total) = &args.total {
        let (total, searches) = split_searches(total, &options, table.is_some())?;
        let target = output::claim(&out, OutputKind::Plan, &scenario.input_files(), args.force)
            .map_err(input)?;
        return run_split_plan(
            args,
            &total,
            searches,
            (target, &out),
            scenario.name(),
            started,
        );
    }
    if let Some((first, second)) = plan::joint::split_sum(&options.parameter) {
        if table.is_some() {
            return Err(CliError::Input(
                "--for: a joint search (--minimize A+B) already makes a table over A".into(),
            ));
        }
        let checked = plan::joint::check_joint(&options, &first, &second)?;
        let estimate_bytes =
            plan::joint::probe_memory_estimate_bytes(&options, (&first, &second), &checked)?;
        let target = output::claim(&out, OutputKind::Plan, &scenario.input_files(), args.force)
            .map_err(input)?;
        let title = scenario.name().to_string();
        return run_joint_plan(
            args,
            (&options, estimate_bytes),
            (&first, &second),
            (target, &out),
            &title,
            started,
        );
    }
    let searches = plan_searches(&options, table)?;
    let target = output::claim(&out, OutputKind::Plan, &scenario.input_files(), args.force)
        .map_err(input)?;
    let rows = run_searches(args, searches)?;
    let mut files = vec![
        ("plan.json".to_string(), plan::output::plan_json(&rows)),
        ("plan.csv".to_string(), plan::output::plan_csv(&rows)),
    ];
    files.extend(plan::output::capacity_files(&rows).map_err(plot_bug)?);
    if !args.no_report {
        let report = plan::report::plan_report(scenario.name(), &plan_facts(args), &rows, &files);
        files.push((REPORT_FILE.to_string(), report));
    }
    target.write(&files).map_err(input)?;
    if !args.quiet {
        for row in &rows {
            out!("{}", plan::output::describe(row));
        }
        print_effort(args, &rows, started, &out);
    }
    feasible_or_error(rows.iter().all(|r| r.plan.answer.is_some()))
}

/// `plan --minimize gpu_hours --range PATH=...`: every value of PATH probed, the cheapest
/// feasible one answered (see `plan::cost`).
fn run_cost_plan(
    args: &PlanArgs,
    objective: plan::cost::Objective,
    overrides: Vec<(String, String)>,
    scenario: &Scenario,
    started: std::time::Instant,
) -> Result<(), CliError> {
    if args.for_values.is_some() || args.total.is_some() {
        return Err(CliError::Input(format!(
            "--minimize {}: probes every value of one --range PATH=...; give neither --for nor --total with it",
            objective.name()
        )));
    }
    let (parameter, values) = plan::cost::parse_values(&args.range)?;
    let options = plan::cost::CostOptions {
        scenario: args.scenario.clone(),
        overrides,
        objective,
        parameter,
        values,
        seeds: args.seeds,
        allow_overload: args.allow_overload,
    };
    let out = (args.out.clone())
        .unwrap_or_else(|| out_dir::plan_dir(scenario.name(), "minimize", objective.name(), None));
    let target = output::claim(&out, OutputKind::Plan, &scenario.input_files(), args.force)
        .map_err(input)?;
    let estimate_bytes = plan::probe_memory_estimate_bytes(&plan::cost::search_options(&options))?;
    let estimates = vec![estimate_bytes; args.seeds as usize];
    let pool = sweep::run::thread_pool(args.jobs, &estimates, !args.quiet)?;
    let cost = plan::cost::cost_plan(&options, &pool)?;
    let mut files = vec![
        ("plan.json".to_string(), plan::cost::cost_json(&cost)),
        ("plan.csv".to_string(), plan::cost::cost_csv(&cost)),
    ];
    let chart = plan::cost::cost_chart(&cost);
    files.extend(render_files(&chart.name, &chart).map_err(plot_bug)?);
    if !args.no_report {
        let report = plan::report::cost_report(scenario.name(), &plan_facts(args), &cost, &files);
        files.push((REPORT_FILE.to_string(), report));
    }
    target.write(&files).map_err(input)?;
    if !args.quiet {
        out!("{}", plan::cost::describe(&cost));
        outln!(
            "{} x {} in {:.1} s; wrote {}",
            crate::text::count_of(cost.probes.len(), "probe"),
            crate::text::count_of(args.seeds as usize, "seed"),
            started.elapsed().as_secs_f64(),
            out.display()
        );
    }
    feasible_or_error(cost.answer.is_some())
}

/// The threads a probe's seeds run on: `--jobs`, or fewer when the largest probe's runs
/// (by their estimated memory, at the ranges' ends) would not fit the process's budget.
fn probe_pool(args: &PlanArgs, searches: &[PlanSearch]) -> Result<rayon::ThreadPool, CliError> {
    let mut estimate_bytes = 0;
    for (_, options) in searches {
        estimate_bytes = estimate_bytes.max(plan::probe_memory_estimate_bytes(options)?);
    }
    let estimates = vec![estimate_bytes; args.seeds as usize];
    Ok(sweep::run::thread_pool(args.jobs, &estimates, !args.quiet)?)
}

/// The closing line of a plan: how many probes it took, how long, and where it wrote.
fn print_effort(
    args: &PlanArgs,
    rows: &[plan::output::PlanRow],
    started: std::time::Instant,
    out: &Path,
) {
    let probes: usize = rows.iter().map(|r| r.plan.probes.len()).sum();
    outln!(
        "{} x {} in {:.1} s; wrote {}",
        crate::text::count_of(probes, "probe"),
        crate::text::count_of(args.seeds as usize, "seed"),
        started.elapsed().as_secs_f64(),
        out.display()
    );
}

/// A plan that found no feasible value fails like a failed expectation.
fn feasible_or_error(found: bool) -> Result<(), CliError> {
    match found {
        true => Ok(()),
        false => Err(CliError::Expectation(
            "nothing in the range is feasible".into(),
        )),
    }
}

/// `plan --minimize A+B`: the fewest of two counts together (see `plan::joint`), written to
/// `target` as a plan's files.
fn run_joint_plan(
    args: &PlanArgs,
    (options, estimate_bytes): (&plan::PlanOptions, u64),
    (first, second): (&str, &str),
    (target, out): (output::OutputTarget, &Path),
    title: &str,
    started: std::time::Instant,
) -> Result<(), CliError> {
    let estimates = vec![estimate_bytes; args.seeds as usize];
    let pool = sweep::run::thread_pool(args.jobs, &estimates, !args.quiet)?;
    let joint = plan::joint::joint_plan(options, first, second, &pool)?;
    let mut files = vec![
        ("plan.json".to_string(), plan::output::joint_json(&joint)),
        ("plan.csv".to_string(), plan::output::plan_csv(&joint.rows)),
    ];
    files.extend(plan::output::joint_capacity_files(&joint).map_err(plot_bug)?);
    if !args.no_report {
        let report = plan::report::joint_report(title, &plan_facts(args), &joint, &files);
        files.push((REPORT_FILE.to_string(), report));
    }
    target.write(&files).map_err(input)?;
    if !args.quiet {
        out!("{}", plan::output::describe_joint(&joint));
        print_effort(args, &joint.rows, started, out);
    }
    feasible_or_error(joint.answer.is_some())
}

/// The searches of `--total A+B=T` (see `plan::split`), each checked before any run.
fn split_searches(
    total: &str,
    options: &plan::PlanOptions,
    with_table: bool,
) -> Result<(plan::split::Total, Vec<PlanSearch>), CliError> {
    let total = plan::split::parse_total(total)?;
    if with_table || plan::joint::split_sum(&options.parameter).is_some() {
        return Err(CliError::Input(
            "--total: searches one parameter per split; give neither --for nor an A+B parameter with it".into(),
        ));
    }
    let searches = plan::split::split_searches(options, &total)?;
    for (_, options) in &searches {
        plan::check(options)?;
    }
    Ok((total, searches))
}

/// `plan --total A+B=T`: one search per split (see `plan::split`), written to `target`.
fn run_split_plan(
    args: &PlanArgs,
    total: &plan::split::Total,
    searches: Vec<PlanSearch>,
    (target, out): (output::OutputTarget, &Path),
    title: &str,
    started: std::time::Instant,
) -> Result<(), CliError> {
    let rows = run_searches(args, searches)?;
    let split = plan::output::SplitPlan::new(total, &rows);
    let mut files = vec![
        ("plan.json".to_string(), plan::output::split_json(&split)),
        ("plan.csv".to_string(), plan::output::plan_csv(&rows)),
    ];
    files.extend(plan::output::split_capacity_files(&split).map_err(plot_bug)?);
    if !args.no_report {
        let report = plan::report::split_report(title, &plan_facts(args), &split, &files);
        files.push((REPORT_FILE.to_string(), report));
    }
    target.write(&files).map_err(input)?;
    if !args.quiet {
        out!("{}", plan::output::describe_split(&split));
        print_effort(args, &rows, started, out);
    }
    feasible_or_error(split.best.is_some())
}

/// One search of a plan: its `--for` (path, value), if any, and its options.
type PlanSearch = (Option<(String, String)>, plan::PlanOptions);

/// One search, or one per `--for` value (each with that value set), each checked before any
/// runs: the seeds of every search within a plan's bound, and every range's ends.
fn plan_searches(
    options: &plan::PlanOptions,
    table: Option<(String, Vec<String>)>,
) -> Result<Vec<PlanSearch>, CliError> {
    let searches = match table {
        None => vec![(None, options.clone())],
        Some((path, values)) => {
            let flag = format!("--for {path}=...");
            plan::checks::check_not_searched(&flag, &path, &options.parameter)?;
            plan::checks::check_run_count(values.len(), options.seeds)?;
            let at = |value: String| {
                let mut at = options.clone();
                at.overrides.push((path.clone(), value.clone()));
                (Some((path.clone(), value)), at)
            };
            values.into_iter().map(at).collect()
        }
    };
    for (_, options) in &searches {
        plan::check(options)?;
    }
    Ok(searches)
}

/// Runs every search of a plan on one pool of probe threads, in order.
fn run_searches(
    args: &PlanArgs,
    searches: Vec<PlanSearch>,
) -> Result<Vec<plan::output::PlanRow>, CliError> {
    let pool = probe_pool(args, &searches)?;
    searches
        .into_iter()
        .map(|(for_value, options)| {
            Ok(plan::output::PlanRow {
                plan: plan::plan(&options, &pool)?,
                for_value,
            })
        })
        .collect()
}
