//! Running a sweep: the plan (points, seeds, loaded scenarios), the parallel runs on a rayon
//! pool with a progress bar, and the per-run row of headline metrics.

use super::grid::{Grid, ShardSpec};
use super::jitter::{jitter_arrivals, replication_seeds};
use super::shard::Manifest;
use super::{SweepArgs, SweepError};
use crate::bounds::capped_jobs;
use crate::report::metrics::{LatencyKind, LatencyMetric, RunMetrics, Stat};
use crate::scenario::Scenario;
use crate::sim;
use crate::time::MAX_INPUT_NS;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use std::io::IsTerminal;
use std::path::Path;

/// The headline metrics of one class in one run.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassRow {
    /// Completed requests.
    pub completed: u64,
    /// The class's ideal DRR share: its quantum over the sum of the quanta of the classes
    /// that had requests.
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

    /// Whether the metric is a share (so the ideal DRR share is its reference).
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
    }
}

/// Runs `scenario` once with `seed` (arrivals jittered by up to `jitter_ns`) and measures it,
/// reporting first-N shares for `prefix_n` when given.
pub fn run_once(
    scenario: &Scenario,
    seed: u64,
    jitter_ns: u64,
    prefix_n: Option<u64>,
) -> Result<RunMetrics, SweepError> {
    let requests = jitter_arrivals(scenario.requests(seed)?, seed, jitter_ns);
    let result = sim::run(scenario.sim_config(seed), requests.into_iter()).map_err(|v| {
        SweepError::Internal(format!(
            "{}: the simulator found a bug: {v:?}",
            scenario.name()
        ))
    })?;
    let metrics = RunMetrics::compute(&result, &result.class_quanta_tokens);
    Ok(match prefix_n {
        Some(n) => metrics.with_prefix_n(n),
        None => metrics,
    })
}

/// Loads the scenario at `path` with `overrides`; an error names the bad path or value.
pub fn load_point(path: &Path, overrides: &[(String, String)]) -> Result<Scenario, SweepError> {
    Ok(Scenario::load_with_overrides(path, overrides)?)
}

/// A sweep ready to run: what it sweeps and the scenario of each point it runs.
#[derive(Clone, Debug)]
pub struct SweepPlan {
    /// What the sweep is (written as `sweep.json`).
    pub manifest: Manifest,
    /// The points this plan runs (all, or its shard's), ascending, with their scenarios.
    pub points: Vec<(usize, Scenario)>,
}

impl SweepPlan {
    /// Every file the plan's scenarios read (scenario, policy, trace, companions), once each.
    pub fn input_files(&self) -> Vec<std::path::PathBuf> {
        let all: std::collections::BTreeSet<_> = self
            .points
            .iter()
            .flat_map(|(_, scenario)| scenario.input_files())
            .collect();
        all.into_iter().collect()
    }

    /// Parses the axes and shard, and loads and validates the scenario of every point run
    /// (plus point 0, which names the classes).
    pub fn from_args(args: &SweepArgs) -> Result<SweepPlan, SweepError> {
        let grid = Grid::parse(&args.sets)?;
        let shard = args.shard.as_deref().map(ShardSpec::parse).transpose()?;
        if args.seeds == 0 {
            return Err(SweepError::Input("--seeds must be at least 1".into()));
        }
        super::grid::check_run_count(grid.point_count(), args.seeds)?;
        if args.arrival_jitter_ns > MAX_INPUT_NS {
            return Err(SweepError::Input(format!(
                "--arrival-jitter-ns {}: must be at most {MAX_INPUT_NS} ns (about 146 years)",
                args.arrival_jitter_ns
            )));
        }
        let base = Scenario::load(&args.scenario)?;
        let first = load_point(&args.scenario, &grid.overrides(0))?;
        let manifest = Manifest {
            format: Manifest::FORMAT.into(),
            scenario: base.name().to_string(),
            source_hash: base.source_hash().to_string(),
            grid,
            replications: args.seeds,
            arrival_jitter_ns: args.arrival_jitter_ns,
            prefix_n: args.prefix_n,
            class_names: first.class_names().to_vec(),
            shard,
        };
        let points = Self::load_points(&args.scenario, &manifest)?;
        Ok(SweepPlan { manifest, points })
    }

    fn load_points(path: &Path, manifest: &Manifest) -> Result<Vec<(usize, Scenario)>, SweepError> {
        let grid = &manifest.grid;
        let mut points = Vec::new();
        for point in 0..grid.point_count() {
            if manifest.shard.is_some_and(|s| !s.contains(point)) {
                continue;
            }
            let scenario = load_point(path, &grid.overrides(point))?;
            if scenario.class_names() != manifest.class_names {
                return Err(SweepError::Input(format!(
                    "point {point} ({}) has classes {:?}, point 0 has {:?}: a sweep cannot change the classes",
                    grid.values(point).join(", "),
                    scenario.class_names(),
                    manifest.class_names
                )));
            }
            points.push((point, scenario));
        }
        Ok(points)
    }

    /// Runs every (point, replication) on `jobs` threads (default: all cores), with a
    /// progress bar on stderr when `progress` is set and stderr is a terminal. Rows come back
    /// sorted by (point, replication) whatever the thread count.
    pub fn run(&self, jobs: Option<usize>, progress: bool) -> Result<Vec<Row>, SweepError> {
        let runs = self.points.len() * self.manifest.replications as usize;
        let pool = thread_pool(jobs, runs)?;
        let tasks: Vec<(&(usize, Scenario), u32, u64)> = self
            .points
            .iter()
            .flat_map(|p| {
                let seeds = replication_seeds(p.1.seed(), self.manifest.replications);
                seeds
                    .into_iter()
                    .enumerate()
                    .map(move |(r, seed)| (p, r as u32, seed))
            })
            .collect();
        let bar = progress_bar(tasks.len() as u64, progress);
        let m = &self.manifest;
        let rows = pool.install(|| {
            tasks
                .par_iter()
                .map(|((point, scenario), replication, seed)| {
                    let metrics = run_once(scenario, *seed, m.arrival_jitter_ns, m.prefix_n)?;
                    bar.inc(1);
                    Ok(Row::measure(
                        &metrics,
                        *point,
                        *replication,
                        *seed,
                        m.grid.values(*point),
                    ))
                })
                .collect::<Result<Vec<Row>, SweepError>>()
        });
        bar.finish_and_clear();
        rows
    }
}

/// A rayon pool of `jobs` threads (default: all cores) for `runs` runs, capped by
/// [`capped_jobs`]: no more threads than runs, nor than a few per core.
pub fn thread_pool(jobs: Option<usize>, runs: usize) -> Result<rayon::ThreadPool, SweepError> {
    if jobs == Some(0) {
        return Err(SweepError::Input("--jobs must be at least 1".into()));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    rayon::ThreadPoolBuilder::new()
        .num_threads(capped_jobs(jobs, runs, cores))
        .build()
        .map_err(|e| SweepError::Internal(format!("cannot start the thread pool: {e}")))
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
