//! Capacity planning: the fewest (`--minimize`) or the most (`--maximize`) of one scenario
//! parameter for which every expectation holds on every seed and no run is overloaded, or
//! the fewest of two counts together ([`joint`]), or the setting at which the fleet costs
//! least with every expectation holding ([`cost`]).
//!
//! A probe sets the parameter by its `--set` path, runs the replication seeds in parallel
//! through the one pipeline, and is feasible exactly when `check --seeds N` would pass (plus
//! stability). Everything that needs no run is checked first ([`checks`]). The search
//! ([`search`]) probes both ends of the range, then assumes feasibility is monotone in the
//! parameter (more workers help, more load hurts): integers by exponential then binary
//! search, reals by bracketing then bisection to a relative precision. Every probe is kept,
//! so a probe that contradicts monotonicity is reported, not hidden.

pub mod checks;
pub mod cost;
pub mod joint;
pub mod output;
pub mod report;
pub mod search;
pub mod split;
#[cfg(test)]
mod tests;

pub use checks::{Checked, check, finest_precision, validate};
pub use search::contradictions;

use crate::pipeline::{Judgement, RequestCache, RunError};
use crate::report::measure::fleet::FleetFigures;
use crate::report::verdict::evaluate::ExpectationOutcome;
use crate::report::verdict::expect::Figure;
use crate::scenario::Scenario;
use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;

/// Probes one search may make at most: both ends, the exponential steps and the bisection of
/// a 2^40-wide integer range, or of a real range spanning 10^9 to 1% (about 40), need fewer.
pub const MAX_PROBES: usize = 96;

/// Which end of the range the answer is at.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Goal {
    /// The smallest feasible value (feasible above it), e.g. `workers.count`.
    Minimize,
    /// The largest feasible value (feasible below it), e.g. `workload.rate_per_s`.
    Maximize,
}

impl Goal {
    /// `minimize` or `maximize`.
    pub fn name(self) -> &'static str {
        match self {
            Goal::Minimize => "minimize",
            Goal::Maximize => "maximize",
        }
    }
}

/// What `routersim plan` searches.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// The scenario file.
    pub scenario: PathBuf,
    /// `--set` overrides applied to every probe (before the parameter's own).
    pub overrides: Vec<(String, String)>,
    /// The parameter's `--set` path.
    pub parameter: String,
    /// Minimize or maximize.
    pub goal: Goal,
    /// The inclusive range searched.
    pub range: (f64, f64),
    /// Replications per probe (the sweep's seeds).
    pub seeds: u32,
    /// Relative precision of a real parameter's answer.
    pub precision: f64,
    /// Count an overloaded run as feasible.
    pub allow_overload: bool,
}

/// One seed's run at one probe.
#[derive(Clone, Debug)]
pub struct SeedRun {
    /// The replication's seed.
    pub seed: u64,
    /// Every expectation's verdict on this seed.
    pub outcomes: Vec<ExpectationOutcome>,
    /// Whether the run was overloaded (`None`: too short to judge).
    pub overloaded: Option<bool>,
    /// Why stability could not be judged, when it could not.
    pub unjudged: Option<String>,
    /// What the run's fleet cost (every worker together).
    pub fleet: FleetFigures,
}

/// One probed value and its verdict.
#[derive(Clone, Debug)]
pub struct Probe {
    /// The parameter's value.
    pub value: f64,
    /// Every seed's run, in replication order.
    pub runs: Vec<SeedRun>,
    /// Every expectation held on every seed, and (unless overload is allowed) every run was
    /// judged stable.
    pub feasible: bool,
}

impl Probe {
    /// Whether any seed's run was overloaded.
    pub fn overloaded(&self) -> bool {
        self.runs.iter().any(|r| r.overloaded == Some(true))
    }

    /// Why some seed's stability could not be judged, if so.
    pub fn unjudged(&self) -> Option<&str> {
        self.runs.iter().find_map(|r| r.unjudged.as_deref())
    }
}

/// The result of one search.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The options searched with (the parameter, goal and range).
    pub parameter: String,
    /// Minimize or maximize.
    pub goal: Goal,
    /// The range.
    pub range: (f64, f64),
    /// Whether the parameter takes whole numbers.
    pub integer: bool,
    /// Per expectation (in the scenario's order), whether its figure is a latency (plotted
    /// on a log axis).
    pub latency_figures: Vec<bool>,
    /// The answer: `None` when nothing in the range is feasible.
    pub answer: Option<f64>,
    /// The last infeasible and the first feasible value around the answer (either may be
    /// missing at the range's ends).
    pub bracket: (Option<f64>, Option<f64>),
    /// Every probe, in the order made.
    pub probes: Vec<Probe>,
    /// Pairs of probes (feasible value, infeasible value) that contradict monotonicity.
    pub contradictions: Vec<(f64, f64)>,
}

impl Plan {
    /// The probe at `value`, if one was made.
    pub fn probe_at(&self, value: f64) -> Option<&Probe> {
        self.probes.iter().find(|p| p.value == value)
    }
}

/// The scenario with the parameter set to a value: the scenario file read once, the
/// options' overrides applied before the parameter's own.
pub struct Parameterized<'a> {
    options: &'a PlanOptions,
    /// The scenario file's text, read once for every probe.
    text: String,
}

impl<'a> Parameterized<'a> {
    /// Reads the scenario file of `options`.
    pub fn new(options: &'a PlanOptions) -> Result<Self, RunError> {
        let text = crate::scenario::read_scenario_text(&options.scenario)?;
        Ok(Parameterized { options, text })
    }

    /// The options searched with.
    pub fn options(&self) -> &'a PlanOptions {
        self.options
    }

    /// The scenario with the parameter at `value`, as `--set PATH=value` would give it.
    pub fn scenario_with(&self, value: &str) -> Result<Scenario, RunError> {
        let mut overrides = self.options.overrides.clone();
        overrides.push((self.options.parameter.clone(), value.to_string()));
        Ok(Scenario::from_text(
            &self.options.scenario,
            &self.text,
            &overrides,
        )?)
    }

    /// The scenario with the parameter at `value`.
    pub fn scenario_at(&self, value: f64) -> Result<Scenario, RunError> {
        self.scenario_with(&format_value(value))
    }
}

/// The estimated peak memory of one seed's run of a probe of `options`, in bytes: the larger
/// of the range's ends (where the workload or the fleet is largest).
pub fn probe_memory_estimate_bytes(options: &PlanOptions) -> Result<u64, RunError> {
    let scenarios = Parameterized::new(options)?;
    // The checked range: a whole-numbered parameter's far end rounded down.
    let (lo, hi) = checks::check_scenarios(&scenarios)?.range;
    let at =
        |value| Judgement::new(scenarios.scenario_at(value)?).map(|j| j.memory_estimate_bytes());
    Ok(at(lo)?.max(at(hi)?))
}

/// Runs one probe: the scenario with the parameter at `value`, every seed in parallel.
pub struct Prober<'a> {
    scenarios: Parameterized<'a>,
    pool: &'a rayon::ThreadPool,
    /// Prompts drawn once per (workload, seed), reused by the next probes: only when the
    /// parameter leaves the workload alone. Otherwise every probe draws its own and keeps
    /// none (a kept draw would only add to the next probe's memory).
    requests: Option<Arc<RequestCache>>,
}

impl<'a> Prober<'a> {
    /// A prober over `pool`; draws are kept for reuse when `checked` says the workload is the
    /// same at every value.
    pub fn new(
        scenarios: Parameterized<'a>,
        checked: &Checked,
        pool: &'a rayon::ThreadPool,
    ) -> Self {
        Prober {
            scenarios,
            pool,
            requests: checked.reuse_draws.then(Arc::default),
        }
    }

    /// Probes `value`.
    pub fn probe(&self, value: f64) -> Result<Probe, RunError> {
        let mut judgement = Judgement::new(self.scenarios.scenario_at(value)?)?;
        judgement.request_cache = self.requests.clone();
        let options = self.scenarios.options();
        let seeds = options.seeds;
        let runs: Vec<SeedRun> = self.pool.install(|| {
            (0..seeds)
                .into_par_iter()
                .map(|r| seed_run(&judgement, r, seeds))
                .collect::<Result<_, RunError>>()
        })?;
        let holds = runs.iter().all(|r| r.outcomes.iter().all(|o| o.passed));
        // A run too short to judge is no evidence that the load is sustainable.
        let calm = options.allow_overload || runs.iter().all(|r| r.overloaded == Some(false));
        Ok(Probe {
            value,
            runs,
            feasible: holds && calm,
        })
    }
}

fn seed_run(judgement: &Judgement, replication: u32, seeds: u32) -> Result<SeedRun, RunError> {
    let run = judgement.run(replication, seeds, None)?;
    let stability = &run.output.metrics.stability;
    Ok(SeedRun {
        seed: run.spec.seed(),
        overloaded: stability.overloaded,
        unjudged: stability.reason.clone(),
        fleet: run.output.metrics.fleet.all,
        outcomes: run.outcomes,
    })
}

/// Whole numbers a double holds exactly, and more: `format_value` writes every whole number
/// up to it without a fraction.
const EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// A value as `--set` takes it: whole numbers without a fraction.
pub fn format_value(value: f64) -> String {
    match value.fract() == 0.0 && value.abs() <= EXACT_INTEGER {
        true => format!("{}", value as i64),
        false => format!("{value}"),
    }
}

/// Searches the range (see the module docs).
pub fn plan(options: &PlanOptions, pool: &rayon::ThreadPool) -> Result<Plan, RunError> {
    let scenarios = Parameterized::new(options)?;
    let checked = checks::check_scenarios(&scenarios)?;
    search_checked(scenarios, &checked, pool)
}

/// Searches the range of `scenarios`, already checked as `checked`.
fn search_checked(
    scenarios: Parameterized,
    checked: &Checked,
    pool: &rayon::ThreadPool,
) -> Result<Plan, RunError> {
    let options = scenarios.options();
    let figures: Vec<Figure> = scenarios
        .scenario_at(checked.range.0)?
        .expectations()
        .iter()
        .map(|e| e.figure().clone())
        .collect();
    let is = |kind: fn(&Figure) -> bool| figures.iter().map(kind).collect();
    let latency_figures = is(|f| matches!(f, Figure::Latency { .. }));
    let prober = Prober::new(scenarios, checked, pool);
    let mut probe = |value| prober.probe(value);
    let mut search =
        search::Search::new(&mut probe, options.goal, checked.integer, options.precision);
    let (answer, bracket) = search.run(checked.range)?;
    let probes = std::mem::take(&mut search.probes);
    let contradictions = contradictions(&probes, options.goal);
    Ok(Plan {
        parameter: options.parameter.clone(),
        goal: options.goal,
        range: options.range,
        integer: checked.integer,
        latency_figures,
        answer,
        bracket,
        probes,
        contradictions,
    })
}
