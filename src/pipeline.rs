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

use crate::mocker::EngineArgs;
use crate::report::evaluate::{ExpectationOutcome, RunFacts, evaluate};
use crate::report::metrics::RunMetrics;
use crate::rng;
use crate::scenario::{self, Scenario, ScenarioError};
use crate::scheduling::policy::PolicyConfig;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::select_profile;
use crate::sim::{
    self, Arrival, InvariantViolation, PromptHashes, RouterMode, SimConfig, SimResult,
    TransportDelays, WorkerPool,
};
use crate::time::{SimDuration, SimTime};
use crate::workload::synth::SynthWorkload;
use crate::workload::trace::{self, OnePass, PassVerdict, RowOrder, TraceReader};
use crate::workload::{RequestSpec, UniformBlockHashes, jitter_arrivals};
use rand::Rng;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

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

/// The inputs of a trace replay, as Dynamo's offline replay takes them.
#[derive(Clone, Debug)]
pub struct ReplaySetup {
    /// The mooncake trace.
    pub trace: PathBuf,
    /// Tokens per hash id.
    pub trace_block_size: u64,
    /// The router policy (Dynamo's policy YAML), if any.
    pub policy: Option<PolicyConfig>,
    /// KvRouterConfig knobs.
    pub router: RouterConfig,
    /// The engine every worker runs (a replay has one pool, `default`).
    pub engine: EngineArgs,
    /// Aggregated workers.
    pub workers: u32,
    /// KV router or round robin.
    pub router_mode: RouterMode,
    /// The seed of the router's tie-breaks.
    pub seed: u64,
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
            } => RequestSource::Trace {
                path: path.clone(),
                block_size: *block_size,
                arrival_speedup_ratio: *arrival_speedup_ratio,
            },
        };
        RunSpec {
            name: scenario.name().to_string(),
            config: scenario.sim_config(seed),
            source,
            arrival_jitter_ns: scenario.arrival_jitter_ns(),
            prefix_n: None,
            warmup: scenario.warmup(),
            request_cache: None,
        }
    }

    /// The spec of a trace replay. The trace is validated whole when it runs (an error names
    /// its line and field).
    pub fn from_replay(setup: &ReplaySetup) -> RunSpec {
        let config = SimConfig {
            router: setup.router.clone(),
            profile: select_profile(&setup.router, setup.policy.as_ref(), None),
            pools: vec![WorkerPool::unnamed(setup.workers, setup.engine.clone())],
            router_mode: setup.router_mode,
            delays: TransportDelays::default(),
            limits: Default::default(),
            tick_interval: scenario::TICK_INTERVAL,
            check_every_event: false,
            seed: setup.seed,
            closed_loop: None,
            faults: Vec::new(),
            migration_limit: 0,
        };
        RunSpec {
            name: setup.trace.display().to_string(),
            config,
            source: RequestSource::Trace {
                path: setup.trace.clone(),
                block_size: setup.trace_block_size,
                arrival_speedup_ratio: 1.0,
            },
            arrival_jitter_ns: 0,
            prefix_n: None,
            warmup: SimDuration::ZERO,
            request_cache: None,
        }
    }

    /// The same replay in one of Dynamo's other replay modes: a closed loop
    /// (`replay_concurrency`: keep that many requests in flight and issue the trace rows in
    /// file order as others end, each at that instant, ignoring timestamps), or an open loop
    /// whose timestamps are divided by `arrival_speedup_ratio` (validated by
    /// [`trace::check_speedup_ratio`]). As in Dynamo 1.6.1, a closed loop ignores the ratio.
    pub fn with_replay_modes(
        mut self,
        replay_concurrency: Option<u32>,
        arrival_speedup_ratio: f64,
    ) -> RunSpec {
        if let RequestSource::Trace {
            arrival_speedup_ratio: ratio,
            ..
        } = &mut self.source
        {
            *ratio = arrival_speedup_ratio;
        }
        self.config.closed_loop = replay_concurrency.map(|concurrency| sim::ClosedLoop {
            concurrency,
            issue_until: None,
        });
        self
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.config.seed
    }

    /// The same run with another seed (workload draws, tie-breaks, jitter).
    pub fn with_seed(&self, seed: u64) -> RunSpec {
        let mut spec = self.clone();
        spec.config.seed = seed;
        spec
    }

    /// The resolved class names, in DRR ring order.
    pub fn class_names(&self) -> Vec<String> {
        self.config
            .profile
            .classes()
            .iter()
            .map(|c| c.name.clone())
            .collect()
    }

    /// Sets class `class`'s DRR quantum (what `tune` varies).
    pub fn set_quantum(&mut self, class: usize, quantum_tokens: u64) {
        self.config.profile.set_quantum(class, quantum_tokens);
    }

    /// The requests in arrival order (ties in row order), all drawn at once: a synthetic
    /// workload's, or a trace's when arrival jitter moves them (without jitter, a trace is
    /// streamed: see [`replay_trace`]).
    fn requests(&self) -> Result<Box<dyn Iterator<Item = RequestSpec>>, RunError> {
        let seed = self.seed();
        let jitter = self.arrival_jitter_ns;
        let requests = match &self.source {
            RequestSource::Synthetic { workload, file } => {
                let draw = || -> Result<Vec<RequestSpec>, RunError> {
                    Ok(workload
                        .generate(seed)
                        .map_err(|e| scenario::synth_error(file, &e))?
                        .into_iter()
                        .map(|r| r.spec)
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
                let summary = scan_trace(path, *block_size, *arrival_speedup_ratio)?;
                trace_in_time_order(path, *block_size, *arrival_speedup_ratio, &summary)?.collect()
            }
        };
        Ok(Box::new(
            jitter_arrivals(requests, seed, jitter).into_iter(),
        ))
    }
}

/// Synthetic requests drawn once per (workload, seed): runs whose workload is equal (a search
/// over `workers.count`, say) reuse the draw instead of generating the prompts again.
#[derive(Debug, Default)]
pub struct RequestCache {
    entries: Mutex<Vec<CachedDraw>>,
}

/// One draw: the workload it came from, the seed, the requests.
type CachedDraw = (Arc<SynthWorkload>, u64, Arc<Vec<RequestSpec>>);

impl RequestCache {
    /// Draws kept at most; the oldest goes first (a search's probes move on).
    pub const MAX_DRAWS: usize = 16;

    /// The requests of `(workload, seed)`: cached, or drawn by `draw` and kept.
    fn draw(
        &self,
        workload: &Arc<SynthWorkload>,
        seed: u64,
        draw: impl FnOnce() -> Result<Vec<RequestSpec>, RunError>,
    ) -> Result<Arc<Vec<RequestSpec>>, RunError> {
        if let Some(hit) = self.find(workload, seed) {
            return Ok(hit);
        }
        // Drawn outside the lock, so the seeds of one probe draw in parallel.
        let drawn = Arc::new(draw()?);
        let mut entries = self.lock();
        if entries.len() >= Self::MAX_DRAWS {
            entries.remove(0);
        }
        entries.push((workload.clone(), seed, drawn.clone()));
        Ok(drawn)
    }

    fn find(&self, workload: &Arc<SynthWorkload>, seed: u64) -> Option<Arc<Vec<RequestSpec>>> {
        self.lock()
            .iter()
            .find(|(w, s, _)| *s == seed && **w == **workload)
            .map(|(_, _, requests)| requests.clone())
    }

    /// How many draws are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no draw is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<CachedDraw>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Runs `spec` and measures it. The only non-test caller of the simulator.
pub fn execute(spec: &RunSpec) -> Result<RunOutput, RunError> {
    Ok(measure(spec, simulate(spec)?))
}

/// The output of `spec`'s run: its result and what the reports show of it.
fn measure(spec: &RunSpec, result: SimResult) -> RunOutput {
    let warmup_end = SimTime::ZERO.saturating_add(spec.warmup);
    let metrics = RunMetrics::compute_with(&result, &result.class_quanta_tokens, warmup_end)
        .with_capacity_seqs(spec.config.capacity_seqs());
    let metrics = match spec.prefix_n {
        Some(n) => metrics.with_prefix_n(n),
        None => metrics,
    };
    RunOutput { result, metrics }
}

/// The simulator's result for `spec`'s requests.
fn simulate(spec: &RunSpec) -> Result<SimResult, RunError> {
    if let RequestSource::Trace {
        path,
        block_size,
        arrival_speedup_ratio,
    } = &spec.source
    {
        // Dynamo issues a closed loop's rows in file order, whatever their timestamps (so
        // arrival jitter, which only moves those, has no effect there).
        let loop_order = match spec.config.closed_loop {
            Some(_) => Some(RowOrder::File),
            None => (spec.arrival_jitter_ns == 0).then_some(RowOrder::Time),
        };
        if let Some(order) = loop_order {
            return replay_trace(
                &spec.config,
                path,
                *block_size,
                *arrival_speedup_ratio,
                order,
            );
        }
    }
    sim::run(sim::Options::new(spec.config.clone()), spec.requests()?).map_err(RunError::Bug)
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

/// A scenario resolved for judging: its own spec and its `minus:` companions, each loaded
/// once.
#[derive(Clone, Debug)]
pub struct Judgement {
    /// The scenario (its expectations, name, file).
    pub scenario: Scenario,
    /// Each companion, keyed as its `minus:` names it.
    pub companions: BTreeMap<String, Scenario>,
    /// Shared by every run of this judgement (and of others given the same cache).
    pub request_cache: Option<Arc<RequestCache>>,
}

/// One replication of a judged scenario: its spec, its output and the verdicts.
#[derive(Clone, Debug)]
pub struct JudgedRun {
    /// What ran (its seed is the replication's).
    pub spec: RunSpec,
    /// The result and metrics.
    pub output: RunOutput,
    /// Every expectation's verdict, in the scenario's order.
    pub outcomes: Vec<ExpectationOutcome>,
}

impl Judgement {
    /// Loads the companions `scenario`'s expectations name.
    pub fn new(scenario: Scenario) -> Result<Judgement, RunError> {
        let mut companions = BTreeMap::new();
        for e in scenario.expectations() {
            if let Some(name) = e.companion().map(|c| &c.file)
                && !companions.contains_key(name)
            {
                let companion = Scenario::load(&scenario.companion_path(name))?;
                companions.insert(name.clone(), companion);
            }
        }
        Ok(Judgement {
            scenario,
            companions,
            request_cache: None,
        })
    }

    /// Runs replication `replication` of `replications` (seed `seed_override` instead of the
    /// scenario's for a single run), its companions with their own replication seeds, and
    /// evaluates the expectations.
    pub fn run(
        &self,
        replication: u32,
        replications: u32,
        seed_override: Option<u64>,
    ) -> Result<JudgedRun, RunError> {
        let seed_of = |scenario: &Scenario| match seed_override {
            Some(seed) => seed,
            None => replication_seeds(scenario.seed(), replications)[replication as usize],
        };
        let with_cache = |mut spec: RunSpec| {
            spec.request_cache = self.request_cache.clone();
            spec
        };
        let spec = with_cache(RunSpec::from_scenario(
            &self.scenario,
            seed_of(&self.scenario),
        ));
        let output = execute(&spec)?;
        let mut companion_metrics = BTreeMap::new();
        for (name, companion) in &self.companions {
            let companion_spec = with_cache(RunSpec::from_scenario(companion, seed_of(companion)));
            companion_metrics.insert(name.clone(), execute(&companion_spec)?.metrics);
        }
        // Wall time is the caller's to measure (nothing below the CLI reads a clock).
        let facts = RunFacts {
            seed: spec.seed(),
            wall_time_s: 0.0,
        };
        let outcomes = evaluate(
            self.scenario.expectations(),
            &output.metrics,
            &companion_metrics,
            facts,
        );
        Ok(JudgedRun {
            spec,
            output,
            outcomes,
        })
    }
}

#[cfg(test)]
thread_local! {
    /// How many times this thread opened a trace: tests check how often a replay reads one.
    static TRACE_OPENS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

fn open_trace(path: &std::path::Path) -> Result<BufReader<File>, RunError> {
    #[cfg(test)]
    TRACE_OPENS.with(|opens| opens.set(opens.get() + 1));
    crate::bounds::open_regular(path)
        .map(BufReader::new)
        .map_err(|e| RunError::Input(format!("{}: cannot read the trace: {e}", path.display())))
}

/// About how many rows `trace` holds: its length over the mean length of the whole rows in
/// its first buffer (peeked, not consumed). 0 when nothing can be told (an empty file, an
/// unreadable one, a first row longer than the buffer).
fn estimated_rows(trace: &mut BufReader<File>) -> usize {
    let file_bytes = trace.get_ref().metadata().map_or(0, |m| m.len());
    let Ok(head) = trace.fill_buf() else {
        return 0; // reading again reports the error where it belongs
    };
    // The whole rows at the head end at its last line end.
    let Some(last_end) = head.iter().rposition(|&byte| byte == b'\n') else {
        return 0;
    };
    let head_rows = head.iter().filter(|&&byte| byte == b'\n').count() as u64;
    let estimate = file_bytes.saturating_mul(head_rows) / (last_end as u64 + 1);
    usize::try_from(estimate).unwrap_or(usize::MAX)
}

/// Validates a whole trace whose timestamps are divided by `speedup_ratio`; returns its
/// summary (origin, whether it is sorted).
fn scan_trace(
    path: &std::path::Path,
    block_size: u64,
    speedup_ratio: f64,
) -> Result<trace::TraceSummary, RunError> {
    let name = path.display().to_string();
    trace::scan_scaled(open_trace(path)?, &name, block_size, speedup_ratio)
        .map_err(|e| RunError::Input(e.to_string()))
}

/// Replays a trace, its rows in `order`, reading the file once when the bet of
/// [`trace::OnePass`] holds (a valid trace, in time order for an open loop): the rows stream
/// into the run as they are validated, and nothing is kept but the run's own records.
///
/// Otherwise the run's result is kept or thrown away once the trace is judged as a scan
/// judges it before anything runs, so that every trace gets the result and the error text it
/// got when the scan came first (what the CLI writes is written only after this returns):
/// - an invalid row: the scan's error (the pass stopped at the row the scan stops at);
/// - the pass stopped short (a row out of time order, or past the time bound) or the run
///   stopped reading (a time limit, a closed loop's end of issue, a caught bug): a scan
///   decides. Its error, if any; else a time-ordered trace's run stands (it had every row it
///   asked for, with the scan's origin), and an unsorted one runs again on the sorted rows.
fn replay_trace(
    config: &SimConfig,
    path: &std::path::Path,
    block_size: u64,
    speedup_ratio: f64,
    order: RowOrder,
) -> Result<SimResult, RunError> {
    // A closed loop ignores timestamps, and so the speed-up (its time bound is checked as
    // recorded).
    let speedup_ratio = match order {
        RowOrder::Time => speedup_ratio,
        RowOrder::File => 1.0,
    };
    let name = path.display().to_string();
    let mut file = open_trace(path)?;
    let expected_rows = estimated_rows(&mut file);
    let reader = TraceReader::new(file, &name, block_size).with_speedup_ratio(speedup_ratio);
    // The simulator only borrows the pass, so its verdict can be read after the run.
    let mut rows = OnePass::new(reader, order);
    let result = run_reading_ahead(config, &mut rows, expected_rows);
    match rows.verdict() {
        PassVerdict::Valid => result.map_err(RunError::Bug),
        PassVerdict::Invalid(e) => Err(RunError::Input(e.to_string())),
        PassVerdict::Undecided => {
            let summary = scan_trace(path, block_size, speedup_ratio)?;
            if summary.sorted || order == RowOrder::File {
                return result.map_err(RunError::Bug);
            }
            let sorted = trace_in_time_order(path, block_size, speedup_ratio, &summary)?;
            sim::run(sim::Options::new(config.clone()), sorted).map_err(RunError::Bug)
        }
    }
}

/// Rows in the reader thread's first message: few, so that the simulation starts at once.
const READ_AHEAD_FIRST_ROWS: usize = 16;

/// The most rows in one message. Messages double in size up to it, because each hand-off
/// wakes the reader, blocked on a full channel, and a wake-up is a system call (15 µs on a
/// VM): 100k rows in messages of 64 spent 2.5% of a run there.
const READ_AHEAD_MAX_ROWS: usize = 256;

/// A message also ends at this many block hashes, so that long prompts keep it small.
const READ_AHEAD_MAX_HASHES: usize = 1 << 15;

/// Messages the reader thread may be ahead of the simulation: bounds the memory read ahead
/// (with the two limits above, to 4 of at most 256 KB of hashes each).
const READ_AHEAD_BATCHES: usize = 4;

/// [`sim::run`] on `rows` parsed, validated and hashed by a second thread ahead of
/// the simulation, in order: that work leaves the simulation's critical path.
fn run_reading_ahead<R: BufRead + Send>(
    config: &SimConfig,
    rows: &mut OnePass<R>,
    expected_rows: usize,
) -> Result<SimResult, InvariantViolation> {
    let block_size = config.block_size();
    std::thread::scope(|scope| {
        let (batches, arrivals) = std::sync::mpsc::sync_channel(READ_AHEAD_BATCHES);
        scope.spawn(move || {
            let mut known = UniformBlockHashes::default();
            let mut rows_wanted = READ_AHEAD_FIRST_ROWS;
            let mut batch = Vec::with_capacity(rows_wanted);
            let mut batch_hashes = 0;
            for spec in rows {
                let hashes: Arc<[u64]> = spec.block_hashes_with(block_size, &mut known).into();
                batch_hashes += hashes.len();
                let hashes = Some(PromptHashes { block_size, hashes });
                batch.push(Arrival { spec, hashes });
                if batch.len() == rows_wanted || batch_hashes >= READ_AHEAD_MAX_HASHES {
                    rows_wanted = (rows_wanted * 2).min(READ_AHEAD_MAX_ROWS);
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(rows_wanted));
                    batch_hashes = 0;
                    if batches.send(full).is_err() {
                        return; // the simulation stopped taking rows
                    }
                }
            }
            // The last, partial batch; the simulation may have stopped already.
            let _ = batches.send(batch);
        });
        let options = sim::Options::new(config.clone()).expecting(expected_rows);
        sim::run(options, arrivals.into_iter().flatten())
    })
}

/// The requests of a trace `summary` validated, in arrival order, timestamps divided by
/// `speedup_ratio`: streamed when the file is in time order, else read whole and sorted.
fn trace_in_time_order(
    path: &std::path::Path,
    block_size: u64,
    speedup_ratio: f64,
    summary: &trace::TraceSummary,
) -> Result<Box<dyn Iterator<Item = RequestSpec>>, RunError> {
    let name = path.display().to_string();
    let reader = TraceReader::new(open_trace(path)?, &name, block_size)
        .with_origin_ms(summary.origin_ms)
        .with_speedup_ratio(speedup_ratio);
    // Every row was validated by the scan behind `summary`; a row failing now means the file
    // changed under us, and the run ends its arrivals there (conservation still holds).
    let rows = reader.map_while(Result::ok);
    if summary.sorted {
        return Ok(Box::new(rows));
    }
    let mut all: Vec<RequestSpec> = rows.collect();
    all.sort_by_key(|r| (r.arrival, r.row));
    Ok(Box::new(all.into_iter()))
}

#[cfg(test)]
mod tests;
