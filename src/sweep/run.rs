//! Running a sweep: the plan (points, their run specs and seeds), the parallel runs on a
//! rayon pool with a progress bar, and the per-run row of headline metrics.

use super::grid::{Grid, ShardSpec};
use super::shard::{self, Manifest};
use super::table::{self, PointSummary};
use crate::bounds::{PROCESS_MEMORY_BUDGET_BYTES, admitted_runs, capped_jobs};
use crate::pipeline::memory_estimate::run_memory_estimate_bytes;
use crate::pipeline::{self, RunError, RunSpec};
use crate::report::measure::latency::Stat;
use crate::report::measure::metrics::{LatencyKind, LatencyMetric, RunMetrics};
use crate::report::render::chart::PlotError;
use crate::report::verdict::expect::Expectation;
use crate::report::verdict::queries::Queries;
use crate::scenario::Scenario;
use crate::time::MAX_INPUT_NS;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::PathBuf;

/// The headline metrics of one class in one run.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassRow {
    /// Completed requests.
    pub completed: u64,
    /// The class's ideal DRR token share: its quantum over the sum of the quanta of the
    /// classes that had requests (the reference of the backlogged token share).
    pub ideal_share: f64,
    /// Its share of the first `prefix_n` completions.
    pub share_first_n: Option<f64>,
    /// Its share of the token service dispatched while classes were backlogged.
    pub backlogged_token_share: Option<f64>,
    /// TTFT median, ms.
    pub ttft_ms_p50: Option<f64>,
    /// TTFT 99th percentile, ms.
    pub ttft_ms_p99: Option<f64>,
    /// End-to-end latency median, ms.
    pub e2e_ms_p50: Option<f64>,
    /// End-to-end latency 99th percentile, ms.
    pub e2e_ms_p99: Option<f64>,
    /// The class's ideal share of the first `prefix_n` completions, the reference of
    /// `share_first_n`: the request split DRR implies for the classes' request sizes, the
    /// run table's `ideal` ([`Queries::ideal_prefix_share`]); `None` when nothing completed.
    pub ideal_share_first_n: Option<f64>,
}

/// A per-class metric of [`ClassRow`] that the summary and plots aggregate over seeds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ClassMetric {
    /// [`ClassRow::completed`].
    Completed,
    /// [`ClassRow::share_first_n`].
    ShareFirstN,
    /// [`ClassRow::backlogged_token_share`].
    BackloggedTokenShare,
    /// [`ClassRow::ttft_ms_p50`].
    TtftMsP50,
    /// [`ClassRow::ttft_ms_p99`].
    TtftMsP99,
    /// [`ClassRow::e2e_ms_p50`].
    E2eMsP50,
    /// [`ClassRow::e2e_ms_p99`].
    E2eMsP99,
}

impl ClassMetric {
    /// Every metric, in column order.
    pub const ALL: [ClassMetric; 7] = [
        ClassMetric::Completed,
        ClassMetric::ShareFirstN,
        ClassMetric::BackloggedTokenShare,
        ClassMetric::TtftMsP50,
        ClassMetric::TtftMsP99,
        ClassMetric::E2eMsP50,
        ClassMetric::E2eMsP99,
    ];

    /// The column name suffix, e.g. `share_first_n`.
    pub fn name(self) -> &'static str {
        match self {
            ClassMetric::Completed => "completed",
            ClassMetric::ShareFirstN => "share_first_n",
            ClassMetric::BackloggedTokenShare => "backlogged_token_share",
            ClassMetric::TtftMsP50 => "ttft_ms_p50",
            ClassMetric::TtftMsP99 => "ttft_ms_p99",
            ClassMetric::E2eMsP50 => "e2e_ms_p50",
            ClassMetric::E2eMsP99 => "e2e_ms_p99",
        }
    }

    /// The metric's value in `row` (`None` when the run had nothing to measure).
    pub fn of(self, row: &ClassRow) -> Option<f64> {
        match self {
            ClassMetric::Completed => Some(row.completed as f64),
            ClassMetric::ShareFirstN => row.share_first_n,
            ClassMetric::BackloggedTokenShare => row.backlogged_token_share,
            ClassMetric::TtftMsP50 => row.ttft_ms_p50,
            ClassMetric::TtftMsP99 => row.ttft_ms_p99,
            ClassMetric::E2eMsP50 => row.e2e_ms_p50,
            ClassMetric::E2eMsP99 => row.e2e_ms_p99,
        }
    }

    /// Whether the metric is a share (so an ideal DRR share is its reference: the first-N
    /// request ideal for [`ClassMetric::ShareFirstN`], the token ideal for
    /// [`ClassMetric::BackloggedTokenShare`]).
    pub fn is_share(self) -> bool {
        matches!(
            self,
            ClassMetric::ShareFirstN | ClassMetric::BackloggedTokenShare
        )
    }
}

/// One run: a point of the grid with one seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The point's index in the grid (row-major).
    pub point: usize,
    /// The replication number, 0-based.
    pub replication: u32,
    /// The seed the run used.
    pub seed: u64,
    /// The point's value on each axis.
    pub values: Vec<String>,
    /// N of the first-N share.
    pub prefix_n: u64,
    /// Per class, in the manifest's class order.
    pub classes: Vec<ClassRow>,
    /// What the run's fleet cost: GPU-hours and the most workers at once (every worker).
    pub gpu_hours: f64,
    pub peak_workers: u64,
}

impl Row {
    /// Measures a finished run.
    pub fn measure(
        metrics: &RunMetrics,
        point: usize,
        replication: u32,
        seed: u64,
        values: Vec<String>,
    ) -> Row {
        let classes = (0..metrics.classes.len())
            .map(|c| class_row(metrics, c))
            .collect();
        Row {
            point,
            replication,
            seed,
            values,
            prefix_n: metrics.prefix_n,
            classes,
            gpu_hours: metrics.fleet.all.gpu_hours,
            peak_workers: metrics.fleet.all.peak_workers,
        }
    }
}

fn class_row(metrics: &RunMetrics, class: usize) -> ClassRow {
    let latency = |kind, stat| metrics.latency_ms(class, LatencyMetric { kind, stat });
    let m = &metrics.classes[class];
    ClassRow {
        completed: m.completed,
        ideal_share: m.ideal_share,
        share_first_n: metrics.prefix_share(class, metrics.prefix_n),
        backlogged_token_share: metrics.backlogged_shares(class).map(|(share, _)| share),
        ttft_ms_p50: latency(LatencyKind::Ttft, Stat::P50),
        ttft_ms_p99: latency(LatencyKind::Ttft, Stat::P99),
        e2e_ms_p50: latency(LatencyKind::E2e, Stat::P50),
        e2e_ms_p99: latency(LatencyKind::E2e, Stat::P99),
        ideal_share_first_n: metrics.ideal_prefix_share(class, metrics.prefix_n),
    }
}

/// What a sweep runs: the typed form of `routersim sweep`'s arguments.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// The scenario file; each point loads it with its axis values as overrides.
    pub scenario: PathBuf,
    /// The axes.
    pub grid: Grid,
    /// Replications per point (at least 1).
    pub seeds: u32,
    /// Worker threads (default: all cores). The output does not depend on it.
    pub jobs: Option<usize>,
    /// Run only this shard's points.
    pub shard: Option<ShardSpec>,
    /// When non-zero, replaces every point's `delays.arrival_jitter_ns`.
    pub arrival_jitter_ns: u64,
    /// Report shares of the first N completions (default: each run's own choice).
    pub prefix_n: Option<u64>,
    /// Every point's first replication seed in place of the scenario's `seed` (`--seed`).
    pub seed: Option<u64>,
}

/// One point of a plan: its run spec, resolved once, and its replication seeds.
#[derive(Clone, Debug)]
pub struct PlanPoint {
    /// The point's index in the grid.
    pub index: usize,
    /// The point's run (replication 0's seed); each replication changes only the seed.
    pub spec: RunSpec,
    /// The seeds of its replications ([`pipeline::replication_seeds`] of the point's seed).
    pub seeds: Vec<u64>,
    /// The estimated peak memory of one of its runs, in bytes: how many run at once.
    pub memory_estimate_bytes: u64,
}

/// A run that a limit stopped before its end (its row is still written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoppedRun {
    /// The point's index.
    pub point: usize,
    /// The seed of the run.
    pub seed: u64,
    /// Why it stopped, in words.
    pub reason: String,
}

/// The runs of a plan: rows sorted by (point, replication), and the runs a limit stopped.
#[derive(Clone, Debug)]
pub struct SweepRun {
    /// One row per run.
    pub rows: Vec<Row>,
    /// The runs that did not reach their end, in row order.
    pub stopped: Vec<StoppedRun>,
    /// How many runs ran at once: `--jobs`, or fewer when their estimated memory says so.
    pub concurrent_runs: usize,
}

impl SweepRun {
    /// `N of M runs stopped early: <reasons>` when a limit cut some runs short.
    pub fn stop_warning(&self) -> Option<String> {
        let first = self.stopped.first()?;
        let reasons: BTreeSet<&str> = self.stopped.iter().map(|s| s.reason.as_str()).collect();
        Some(format!(
            "{} of {} runs stopped early: {} (first: point {}, seed {}); their rows count the requests finished by then",
            self.stopped.len(),
            self.rows.len(),
            reasons.into_iter().collect::<Vec<_>>().join("; "),
            first.point,
            first.seed
        ))
    }
}

/// A sweep ready to run: what it sweeps and the resolved run of each point it runs.
#[derive(Clone, Debug)]
pub struct SweepPlan {
    /// What the sweep is (written as `sweep.json`).
    pub manifest: Manifest,
    /// The points this plan runs (all, or its shard's), ascending.
    pub points: Vec<PlanPoint>,
    /// Point 0's expectations: their latency bounds are drawn on the latency charts.
    pub expectations: Vec<Expectation>,
    /// Every file the points' scenarios read, sorted, once each.
    pub input_files: Vec<PathBuf>,
    /// Worker threads (default: all cores).
    pub jobs: Option<usize>,
}

impl SweepPlan {
    /// Checks the options, and loads and validates the scenario of every point run (plus
    /// point 0, which names the classes). Nothing runs yet.
    pub fn new(options: &SweepOptions) -> Result<SweepPlan, RunError> {
        check_options(options)?;
        let base = Scenario::load(&options.scenario)?;
        let grid = &options.grid;
        let first = Scenario::load_with_overrides(&options.scenario, &grid.overrides(0))?;
        let manifest = Manifest {
            format: Manifest::FORMAT.into(),
            scenario: base.name().to_string(),
            source_hash: base.source_hash().to_string(),
            grid: grid.clone(),
            replications: options.seeds,
            arrival_jitter_ns: options.arrival_jitter_ns,
            prefix_n: options.prefix_n,
            class_names: first.class_names().to_vec(),
            shard: options.shard,
        };
        let mut input_files = BTreeSet::new();
        let mut points = Vec::new();
        for index in
            (0..grid.point_count()).filter(|&p| options.shard.is_none_or(|s| s.contains(p)))
        {
            let scenario = point_scenario(options, &manifest, index)?;
            input_files.extend(scenario.input_files());
            points.push(plan_point(options, index, &scenario));
        }
        Ok(SweepPlan {
            manifest,
            points,
            expectations: first.expectations().to_vec(),
            input_files: input_files.into_iter().collect(),
            jobs: options.jobs,
        })
    }

    /// Runs every (point, replication) on the plan's threads, with a progress bar on stderr
    /// when `progress` is set and stderr is a terminal. Rows come back sorted by (point,
    /// replication) whatever the thread count.
    pub fn run(&self, progress: bool) -> Result<SweepRun, RunError> {
        let tasks: Vec<(&PlanPoint, u32, u64)> = self
            .points
            .iter()
            .flat_map(|p| (0u32..).zip(&p.seeds).map(move |(r, &seed)| (p, r, seed)))
            .collect();
        let estimates: Vec<u64> = tasks
            .iter()
            .map(|(point, _, _)| point.memory_estimate_bytes)
            .collect();
        let pool = thread_pool(self.jobs, &estimates, progress)?;
        let concurrent_runs = pool.current_num_threads();
        let bar = progress_bar(tasks.len() as u64, progress);
        let runs = pool.install(|| {
            tasks
                .par_iter()
                .map(|&(point, replication, seed)| {
                    let run = self.run_one(point, replication, seed);
                    bar.inc(1);
                    run
                })
                .collect::<Result<Vec<_>, RunError>>()
        });
        bar.finish_and_clear();
        let (rows, stops): (Vec<Row>, Vec<Option<StoppedRun>>) = runs?.into_iter().unzip();
        Ok(SweepRun {
            rows,
            stopped: stops.into_iter().flatten().collect(),
            concurrent_runs,
        })
    }

    /// One replication of `point`: its row, and why it stopped if a limit stopped it.
    fn run_one(
        &self,
        point: &PlanPoint,
        replication: u32,
        seed: u64,
    ) -> Result<(Row, Option<StoppedRun>), RunError> {
        let output = pipeline::execute(&point.spec.with_seed(seed))?;
        let values = self.manifest.grid.values(point.index);
        let row = Row::measure(&output.metrics, point.index, replication, seed, values);
        let stop = output.result.stop_reason;
        let stopped = stop.is_limit().then(|| StoppedRun {
            point: point.index,
            seed,
            reason: stop.to_string(),
        });
        Ok((row, stopped))
    }

    /// The files of the plan's rows: a shard's (`sweep.json`, `sweep.csv`), or a whole
    /// sweep's with point 0's latency bounds on the latency charts.
    pub fn files(&self, rows: &[Row]) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
        match self.manifest.shard {
            Some(_) => Ok(shard::shard_files(&self.manifest, rows)),
            None => table::sweep_files_with_expectations(&self.manifest, rows, &self.expectations),
        }
    }

    /// Per point, the statistics over seeds: what the terminal summary shows.
    pub fn summaries(&self, rows: &[Row]) -> Vec<PointSummary> {
        table::summarize(&self.manifest, rows)
    }
}

/// Refuses bad options before any file is read.
fn check_options(options: &SweepOptions) -> Result<(), RunError> {
    if options.seeds == 0 {
        return Err(RunError::Input("--seeds must be at least 1".into()));
    }
    super::grid::check_run_count(options.grid.point_count(), options.seeds)?;
    if options.arrival_jitter_ns > MAX_INPUT_NS {
        return Err(RunError::Input(format!(
            "--arrival-jitter-ns {}: must be at most {MAX_INPUT_NS} ns (about 146 years)",
            options.arrival_jitter_ns
        )));
    }
    Ok(())
}

/// Loads point `index`'s scenario; its classes must be point 0's.
fn point_scenario(
    options: &SweepOptions,
    manifest: &Manifest,
    index: usize,
) -> Result<Scenario, RunError> {
    let grid = &manifest.grid;
    let scenario = Scenario::load_with_overrides(&options.scenario, &grid.overrides(index))?;
    if scenario.class_names() != manifest.class_names {
        return Err(RunError::Input(format!(
            "point {index} ({}) has classes {:?}, point 0 has {:?}: a sweep cannot change the classes",
            grid.values(index).join(", "),
            scenario.class_names(),
            manifest.class_names
        )));
    }
    Ok(scenario)
}

/// The run of a point: its scenario's spec with the sweep's first-N and, when set, the
/// sweep's seed and arrival jitter in place of the scenario's (one jitter, one RNG stream).
fn plan_point(options: &SweepOptions, index: usize, scenario: &Scenario) -> PlanPoint {
    let seed = options.seed.unwrap_or(scenario.seed());
    let mut spec = RunSpec::from_scenario(scenario, seed);
    spec.prefix_n = options.prefix_n;
    if options.arrival_jitter_ns != 0 {
        spec.arrival_jitter_ns = options.arrival_jitter_ns;
    }
    PlanPoint {
        index,
        seeds: pipeline::replication_seeds(spec.seed(), options.seeds),
        memory_estimate_bytes: run_memory_estimate_bytes(&spec),
        spec,
    }
}

/// A rayon pool of `jobs` threads (default: all cores) for runs whose estimated peaks are
/// `run_estimates_bytes` (one per run), capped by [`capped_jobs`] (no more threads than runs,
/// nor than a few per core), then by [`admitted_runs`]: no more runs at once than fit the
/// process's memory budget. Says so on stderr when `say` and the memory lowered the count.
/// Rows are collected in order, so the thread count never changes an output.
pub fn thread_pool(
    jobs: Option<usize>,
    run_estimates_bytes: &[u64],
    say: bool,
) -> Result<rayon::ThreadPool, RunError> {
    if jobs == Some(0) {
        return Err(RunError::Input("--jobs must be at least 1".into()));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let wanted = capped_jobs(jobs, run_estimates_bytes.len(), cores);
    let threads = admitted_runs(run_estimates_bytes, wanted);
    if say && threads < wanted {
        let largest_bytes = run_estimates_bytes.iter().max().copied().unwrap_or(0);
        eprintln!(
            "note: running {threads} runs at a time, not {wanted}: a run is estimated at up to {} MB, and a process's concurrent runs may hold {} MB together",
            largest_bytes / 1_000_000,
            PROCESS_MEMORY_BUDGET_BYTES / 1_000_000
        );
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| {
            // The system refused the threads: a smaller --jobs is the user's way out.
            RunError::Input(format!(
                "cannot start {threads} worker threads ({e}); try a smaller --jobs"
            ))
        })
}

/// A progress bar with ETA on stderr, hidden unless wanted and stderr is a terminal.
fn progress_bar(len: u64, wanted: bool) -> ProgressBar {
    if !wanted || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {elapsed} elapsed, ETA {eta}")
    {
        bar.set_style(style);
    }
    bar
}
