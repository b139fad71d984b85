//! The one run pipeline: every command resolves its inputs once into a [`RunSpec`], then
//! [`execute`]s it. This is the only place outside tests that calls the simulator.
//!
//! ```text
//! scenario file ─┐                        ┌─> RunOutput { result, metrics } ─> report, verdicts
//!                ├─> RunSpec (SimConfig,  │
//! replay args  ──┘    requests, classes) ─┴─ execute
//! ```
//!
//! A spec is plain data: a sweep or `tune` changes a seed or a quantum in it
//! ([`RunSpec::with_seed`], [`RunSpec::set_quantum`]) and executes it again, without reading
//! or validating any file twice.

use crate::report::measure::metrics::RunMetrics;
use crate::rng;
use crate::scenario::{self, Scenario, ScenarioError};
use crate::sim::{self, InvariantViolation, SimConfig, SimResult};
use crate::time::{SimDuration, SimTime};
use crate::workload::read_ahead;
use crate::workload::session_trace::SessionMode;
use crate::workload::synth::SynthWorkload;
use crate::workload::trace::{RowOrder, SurplusHashIds};
use crate::workload::{Arrival, jitter_arrivals};
use rand::Rng;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod judgement;
pub mod memory_estimate;
mod planner_source;
pub mod policy_process;
mod replay;
mod request_cache;

pub use judgement::{JudgedRun, Judgement};
pub use planner_source::PlannerSource;
pub use policy_process::PolicySource;
pub use replay::{DisaggregatedSetup, ReplaySetup};
pub use request_cache::RequestCache;

/// Where a run's requests come from.
#[derive(Clone, Debug)]
pub enum RequestSource {
    /// A synthetic workload, drawn from the run's seed; `file` is the scenario it came from,
    /// named in errors.
    Synthetic {
        workload: Arc<SynthWorkload>,
        file: PathBuf,
    },
    /// A mooncake trace, validated as it streams into the run (a scenario's is validated
    /// when loaded, too).
    Trace {
        /// The trace file.
        path: PathBuf,
        /// Tokens per hash id.
        block_size: u64,
        /// Timestamps are divided by this (Dynamo's `arrival_speedup_ratio`; 1: as recorded).
        /// A closed loop ignores timestamps, and so this.
        arrival_speedup_ratio: f64,
    },
}

/// Everything one run needs, resolved and validated: what `execute` runs.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The scenario's name (or the trace's file name for a replay).
    pub name: String,
    /// The simulator configuration; its seed is the run's only seed.
    pub config: SimConfig,
    /// The requests.
    pub source: RequestSource,
    /// Each arrival is delayed by a seeded draw from `0..=arrival_jitter_ns` (0: none).
    pub arrival_jitter_ns: u64,
    /// Report shares of the first N completions (default: the metrics' own choice).
    pub prefix_n: Option<u64>,
    /// Requests arriving before this (from 0) stay out of the latency and share metrics
    /// (`workload.warmup_s`; zero: none).
    pub warmup: SimDuration,
    /// Where synthetic requests already drawn for (workload, seed) are kept, when the caller
    /// runs the same draws many times (a capacity search over workers).
    pub request_cache: Option<Arc<RequestCache>>,
    /// Keep a timeline of the run (`--timeline`): its result then holds one.
    pub timeline: bool,
    /// The scaling policy that scales the fleet while the run goes on (`None`: the fleet
    /// changes only by the scenario's faults).
    pub scaling: Option<Arc<dyn PolicySource>>,
}

/// A finished run and its measurements.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// Every request's record.
    pub result: SimResult,
    /// What the reports show.
    pub metrics: RunMetrics,
}

/// Why a run could not produce an output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunError {
    /// The input is at fault (a trace that cannot be read): exit 2.
    Input(String),
    /// The simulator caught itself in a bug: exit 3.
    Bug(InvariantViolation),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Input(message) => f.write_str(message),
            RunError::Bug(v) => write!(f, "{v}"),
        }
    }
}

impl std::error::Error for RunError {}

impl From<ScenarioError> for RunError {
    fn from(e: ScenarioError) -> Self {
        RunError::Input(e.to_string())
    }
}

impl RunSpec {
    /// The spec of a scenario run with `seed`.
    pub fn from_scenario(scenario: &Scenario, seed: u64) -> RunSpec {
        let source = match scenario.workload() {
            scenario::Workload::Synthetic(synth) => RequestSource::Synthetic {
                workload: Arc::new(synth.clone()),
                file: scenario.file().to_path_buf(),
            },
            scenario::Workload::Trace {
                path,
                block_size,
                arrival_speedup_ratio,
                ..
            } => RequestSource::Trace {
                path: path.clone(),
                block_size: *block_size,
                arrival_speedup_ratio: *arrival_speedup_ratio,
            },
        };
        let scaling = (scenario.planner()).map(|p| planner_source::of_scenario(scenario.name(), p));
        RunSpec {
            name: scenario.name().to_string(),
            config: scenario.config().clone().with_seed(seed),
            source,
            arrival_jitter_ns: scenario.arrival_jitter_ns(),
            prefix_n: None,
            warmup: scenario.warmup(),
            request_cache: None,
            timeline: false,
            scaling,
        }
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.config.seed()
    }

    /// The same run, keeping a timeline when `timeline` says so.
    pub fn with_timeline(self, timeline: bool) -> RunSpec {
        RunSpec { timeline, ..self }
    }

    /// The same run with another seed (workload draws, tie-breaks, jitter).
    pub fn with_seed(&self, seed: u64) -> RunSpec {
        let mut spec = self.clone();
        spec.config = spec.config.with_seed(seed);
        spec
    }

    /// The resolved class names, in DRR ring order.
    pub fn class_names(&self) -> Vec<String> {
        self.config
            .profile()
            .classes()
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }

    /// Sets class `class`'s DRR quantum (what `tune` varies).
    pub fn set_quantum(&mut self, class: usize, quantum_tokens: u64) {
        self.config.set_quantum(class, quantum_tokens);
    }

    /// The requests in arrival order (ties in row order), all drawn at once: a synthetic
    /// workload's, or a trace's when arrival jitter moves them (without jitter, a trace is
    /// streamed: see [`replay::replay_trace`]).
    fn requests(&self) -> Result<Box<dyn Iterator<Item = Arrival>>, RunError> {
        let seed = self.seed();
        let jitter = self.arrival_jitter_ns;
        let requests = match &self.source {
            RequestSource::Synthetic { workload, file } => {
                let draw = || -> Result<Vec<Arrival>, RunError> {
                    Ok(workload
                        .generate(seed)
                        .map_err(|e| scenario::synth_error(file, &e))?
                        .into_iter()
                        .map(Arrival::from)
                        .collect())
                };
                match &self.request_cache {
                    Some(cache) => cache.draw(workload, seed, draw)?.as_ref().clone(),
                    None => draw()?,
                }
            }
            RequestSource::Trace {
                path,
                block_size,
                arrival_speedup_ratio,
            } => {
                let (path, block_size, ratio) = (path, *block_size, *arrival_speedup_ratio);
                let summary =
                    read_ahead::scan_trace(path, block_size, ratio).map_err(RunError::Input)?;
                if summary.sessions {
                    let mode = SessionMode::Trace {
                        speedup_ratio: ratio,
                    };
                    read_ahead::session_arrivals(path, block_size, mode).map_err(RunError::Input)?
                } else {
                    read_ahead::in_time_order(path, block_size, ratio, &summary)
                        .map_err(RunError::Input)?
                        .map(Arrival::from)
                        .collect()
                }
            }
        };
        Ok(Box::new(
            jitter_arrivals(requests, seed, jitter).into_iter(),
        ))
    }
}

/// Runs `spec` and measures it. The only non-test caller of the simulator.
pub fn execute(spec: &RunSpec) -> Result<RunOutput, RunError> {
    start(spec).execute()
}

/// From this many requests on, a run's freed memory goes back to the kernel as it is freed
/// from the simulation's end to its metrics' ([`crate::memory::PromptRelease`]); below it,
/// the lists are a few MB and the system calls would cost more than they save.
const PROMPT_RELEASE_FROM_REQUESTS: usize = 1 << 16;

/// A run about to execute whose trace, if it streams one, is already being read: a command
/// starts it before it claims its output directory, so that the reader thread's start (about
/// 0.2 ms) overlaps that work instead of holding up the simulation's first row. Nothing is
/// written, and an unreadable trace's error waits for [`Started::execute`], so a refused
/// output directory is still the error a user sees first.
pub struct Started<'a> {
    spec: &'a RunSpec,
    rows: Option<Result<read_ahead::ReadAhead, String>>,
}

/// Starts reading `spec`'s trace, if it is one a replay streams (see [`Started`]).
pub fn start(spec: &RunSpec) -> Started<'_> {
    let rows = streamed_trace(spec).map(|(path, block_size, ratio, order)| {
        read_ahead::ReadAhead::start(path, block_size, ratio, order, spec.config.block_size())
    });
    Started { spec, rows }
}

impl<'a> Started<'a> {
    /// Runs the spec: its result and what the reports show of it.
    pub fn execute(self) -> Result<RunOutput, RunError> {
        let (result, measuring) = self.simulate()?;
        let metrics = measuring.metrics(&result);
        Ok(RunOutput { result, metrics })
    }

    /// Runs the spec: its result, and what measures it. A command may start formatting the
    /// result's files on another thread while it is measured.
    pub fn simulate(self) -> Result<(SimResult, Measuring<'a>), RunError> {
        let spec = self.spec;
        let (result, surplus_hash_ids) = match self.rows {
            Some(rows) => {
                let rows = rows.map_err(RunError::Input)?;
                replay::replay_trace(spec, rows)?
            }
            None => (simulate(spec)?, SurplusHashIds::default()),
        };
        let release = (result.records.len() >= PROMPT_RELEASE_FROM_REQUESTS)
            .then(crate::memory::PromptRelease::start);
        Ok((
            result,
            Measuring {
                spec,
                surplus_hash_ids,
                _release: release,
            },
        ))
    }
}

/// What measures a run's result ([`Started::simulate`]); a large run's freed memory goes
/// back to the kernel promptly until it has.
pub struct Measuring<'a> {
    spec: &'a RunSpec,
    /// The replayed trace's rows whose hash ids outrun their input (none for other runs).
    pub surplus_hash_ids: SurplusHashIds,
    _release: Option<crate::memory::PromptRelease>,
}

impl Measuring<'_> {
    /// What the reports show of `result`, the spec's result.
    pub fn metrics(self, result: &SimResult) -> RunMetrics {
        metrics_of(self.spec, result)
    }
}

/// A trace a replay reads once, in the order it runs its rows: its path, block size, speed-up
/// ratio and row order. Dynamo issues a closed loop's rows in file order, whatever their
/// timestamps (so arrival jitter, which only moves those, has no effect there).
fn streamed_trace(spec: &RunSpec) -> Option<(&Path, u64, f64, RowOrder)> {
    let RequestSource::Trace {
        path,
        block_size,
        arrival_speedup_ratio,
    } = &spec.source
    else {
        return None;
    };
    let order = match spec.config.closed_loop() {
        Some(_) => Some(RowOrder::File),
        None => (spec.arrival_jitter_ns == 0).then_some(RowOrder::Time),
    }?;
    Some((path, *block_size, *arrival_speedup_ratio, order))
}

/// The output of `spec`'s run: its result and what the reports show of it.
#[cfg(test)]
fn measure(spec: &RunSpec, result: SimResult) -> RunOutput {
    let metrics = metrics_of(spec, &result);
    RunOutput { result, metrics }
}

/// What the reports show of `result`, `spec`'s result.
fn metrics_of(spec: &RunSpec, result: &SimResult) -> RunMetrics {
    let warmup_end = SimTime::ZERO.saturating_add(spec.warmup);
    let metrics = RunMetrics::compute_with(result, &result.class_quanta_tokens, warmup_end)
        .with_capacity_seqs(spec.config.capacity_seqs());
    match spec.prefix_n {
        Some(n) => metrics.with_prefix_n(n),
        None => metrics,
    }
}

/// The simulator's result for `spec`'s requests, when they are not a streamed trace.
fn simulate(spec: &RunSpec) -> Result<SimResult, RunError> {
    let options = sim::Options::new(spec.config.clone()).with_timeline(spec.timeline);
    run_with(spec.scaling.as_deref(), options, spec.requests()?)
}

/// Runs `requests` with `options`, and `scaling`'s policy if there is one: a policy that
/// cannot start or fails is the input's fault (exit 2).
fn run_with<A: Into<Arrival>>(
    scaling: Option<&dyn PolicySource>,
    options: sim::Options,
    requests: impl IntoIterator<Item = A>,
) -> Result<SimResult, RunError> {
    let Some(source) = scaling else {
        return sim::run(options, requests).map_err(RunError::Bug);
    };
    let failed = |message: String| RunError::Input(format!("{}: {message}", source.name()));
    let mut policy = source.start(options.config.pools()).map_err(failed)?;
    sim::run_scaled(options, requests, policy.as_mut()).map_err(|e| match e {
        sim::RunError::Invariant(v) => RunError::Bug(v),
        sim::RunError::Policy(f) => failed(f.to_string()),
    })
}

/// The seeds of `replications` replications of a run whose seed is `base`: the first is
/// `base` itself (so one replication reproduces a plain run), the others are drawn from the
/// stream `sweep/replication` of `base`. `sweep`, `check` and `tune` all use these.
pub fn replication_seeds(base: u64, replications: u32) -> Vec<u64> {
    let mut stream = rng::stream(base, "sweep/replication");
    (0..replications)
        .map(|r| if r == 0 { base } else { stream.next_u64() })
        .collect()
}

#[cfg(test)]
mod tests;
