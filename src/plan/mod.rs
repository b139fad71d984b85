//! Capacity planning: the fewest (`--minimize`) or the most (`--maximize`) of one scenario
//! parameter for which every expectation holds on every seed and no run is overloaded.
//!
//! A probe sets the parameter by its `--set` path, runs the replication seeds in parallel
//! through the one pipeline, and is feasible exactly when `check --seeds N` would pass (plus
//! stability). The search assumes feasibility is monotone in the parameter (more workers
//! help, more load hurts): integers by exponential then binary search, reals by bracketing
//! then bisection to a relative precision. The far end of the range is probed too, and every
//! probe is kept, so a probe that contradicts monotonicity is reported, not hidden.

pub mod output;
#[cfg(test)]
mod tests;

use crate::pipeline::{Judgement, RequestCache, RunError};
use crate::report::evaluate::ExpectationOutcome;
use crate::report::expect::Figure;
use crate::scenario::Scenario;
use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;

/// Probes one search may make at most (the exponential phase plus bisection of a 1e9-wide
/// integer range or a real range to 1e-6 precision need fewer).
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

/// Runs one probe: the scenario with the parameter at `value`, every seed in parallel.
pub struct Prober<'a> {
    options: &'a PlanOptions,
    pool: &'a rayon::ThreadPool,
    /// The scenario file's text, read once for every probe.
    text: String,
    /// Prompts drawn once per (workload, seed), reused by probes that leave the workload as
    /// it is.
    requests: Arc<RequestCache>,
}

impl<'a> Prober<'a> {
    /// A prober over `pool`; reads the scenario file once.
    pub fn new(options: &'a PlanOptions, pool: &'a rayon::ThreadPool) -> Result<Self, RunError> {
        let text = crate::scenario::read_scenario_text(&options.scenario)?;
        Ok(Prober {
            options,
            pool,
            text,
            requests: Arc::default(),
        })
    }

    /// The scenario with the parameter at `value`.
    fn scenario_at(&self, value: f64) -> Result<Scenario, RunError> {
        let mut overrides = self.options.overrides.clone();
        overrides.push((self.options.parameter.clone(), format_value(value)));
        Ok(Scenario::from_text(
            &self.options.scenario,
            &self.text,
            &overrides,
        )?)
    }

    /// Probes `value`.
    pub fn probe(&self, value: f64) -> Result<Probe, RunError> {
        let mut judgement = Judgement::new(self.scenario_at(value)?)?;
        judgement.request_cache = Some(self.requests.clone());
        let seeds = self.options.seeds;
        let runs: Vec<SeedRun> = self.pool.install(|| {
            (0..seeds)
                .into_par_iter()
                .map(|r| seed_run(&judgement, r, seeds))
                .collect::<Result<_, RunError>>()
        })?;
        let holds = runs.iter().all(|r| r.outcomes.iter().all(|o| o.passed));
        // A run too short to judge is no evidence that the load is sustainable.
        let calm = self.options.allow_overload || runs.iter().all(|r| r.overloaded == Some(false));
        Ok(Probe {
            value,
            runs,
            feasible: holds && calm,
        })
    }

    /// Whether the parameter takes whole numbers only: a value halfway between two integers
    /// is refused by the scenario's validation.
    pub fn is_integer(&self) -> Result<bool, RunError> {
        self.scenario_at(self.options.range.0)?;
        Ok(self
            .scenario_at(self.options.range.0.floor() + 0.5)
            .is_err())
    }
}

fn seed_run(judgement: &Judgement, replication: u32, seeds: u32) -> Result<SeedRun, RunError> {
    let run = judgement.run(replication, seeds, None)?;
    let stability = &run.output.metrics.stability;
    Ok(SeedRun {
        seed: run.spec.seed(),
        overloaded: stability.overloaded,
        unjudged: stability.reason.clone(),
        outcomes: run.outcomes,
    })
}

/// A value as `--set` takes it: whole numbers without a fraction.
pub fn format_value(value: f64) -> String {
    match value.fract() == 0.0 && value.abs() < 1e15 {
        true => format!("{}", value as i64),
        false => format!("{value}"),
    }
}

/// Checks the options that do not need a run.
pub fn validate(options: &PlanOptions) -> Result<(), RunError> {
    let (lo, hi) = options.range;
    let bad = |m: String| Err(RunError::Input(m));
    if !(lo.is_finite() && hi.is_finite() && lo < hi) {
        return bad(format!("--range {lo}..{hi}: needs LO < HI, both finite"));
    }
    if !(options.precision > 0.0 && options.precision < 1.0) {
        return bad(format!(
            "--precision {}: must be in (0, 1)",
            options.precision
        ));
    }
    if options.seeds == 0 {
        return bad("--seeds must be at least 1".into());
    }
    Ok(())
}

/// Searches the range (see the module docs).
pub fn plan(options: &PlanOptions, pool: &rayon::ThreadPool) -> Result<Plan, RunError> {
    validate(options)?;
    let prober = Prober::new(options, pool)?;
    let integer = prober.is_integer()?;
    let latency_figures = prober
        .scenario_at(options.range.0)?
        .expectations()
        .iter()
        .map(|e| matches!(e.figure(), Figure::Latency { .. }))
        .collect();
    let mut probe = |value| prober.probe(value);
    let mut search = Search {
        probe: &mut probe,
        goal: options.goal,
        integer,
        precision: options.precision,
        probes: Vec::new(),
    };
    let (answer, bracket) = search.run(options.range)?;
    let contradictions = contradictions(&search.probes, options.goal);
    Ok(Plan {
        parameter: options.parameter.clone(),
        goal: options.goal,
        range: options.range,
        integer,
        latency_figures,
        answer,
        bracket,
        probes: search.probes,
        contradictions,
    })
}

/// The answer and the (infeasible, feasible) bracket around it.
type Found = (Option<f64>, (Option<f64>, Option<f64>));

/// The state of one search: how to probe a value, and the probes made (each value once).
struct Search<'a> {
    probe: &'a mut dyn FnMut(f64) -> Result<Probe, RunError>,
    goal: Goal,
    integer: bool,
    precision: f64,
    probes: Vec<Probe>,
}

impl Search<'_> {
    /// Whether `value` is feasible (probing it once).
    fn feasible(&mut self, value: f64) -> Result<bool, RunError> {
        if let Some(p) = self.probes.iter().find(|p| p.value == value) {
            return Ok(p.feasible);
        }
        if self.probes.len() >= MAX_PROBES {
            return Err(RunError::Input(format!(
                "the search needed more than {MAX_PROBES} probes; narrow --range or loosen --precision"
            )));
        }
        let probe = (self.probe)(value)?;
        let feasible = probe.feasible;
        self.probes.push(probe);
        Ok(feasible)
    }

    /// Searches the range (whole numbers only for an integer parameter); returns the answer
    /// and the bracket around it.
    fn run(&mut self, (lo, hi): (f64, f64)) -> Result<Found, RunError> {
        let (lo, hi) = match self.integer {
            true => (lo.ceil(), hi.floor()),
            false => (lo, hi),
        };
        let found = match self.goal {
            Goal::Minimize => self.minimize(lo, hi)?,
            Goal::Maximize => self.maximize(lo, hi)?,
        };
        // A bisection only ever sees verdicts consistent with one threshold; the far end of
        // the range, which must agree with the answer's side, is what can contradict it.
        if found.0.is_some() {
            self.feasible(hi)?;
        }
        Ok(found)
    }

    /// The smallest feasible value: exponential steps up from `lo`, then bisection.
    fn minimize(&mut self, lo: f64, hi: f64) -> Result<Found, RunError> {
        if self.feasible(lo)? {
            return Ok((Some(lo), (None, Some(lo))));
        }
        let (mut bad, mut good) = (lo, None);
        for next in self.exponential(lo, hi) {
            if self.feasible(next)? {
                good = Some(next);
                break;
            }
            bad = next;
        }
        let Some(good) = good else {
            return Ok((None, (Some(bad), None)));
        };
        let (bad, good) = self.bisect(bad, good)?;
        Ok((Some(good), (Some(bad), Some(good))))
    }

    /// The largest feasible value: `lo` must be feasible, then exponential steps up until a
    /// value fails, then bisection.
    fn maximize(&mut self, lo: f64, hi: f64) -> Result<Found, RunError> {
        if !self.feasible(lo)? {
            return Ok((None, (Some(lo), None)));
        }
        let (mut good, mut bad) = (lo, None);
        for next in self.exponential(lo, hi) {
            if !self.feasible(next)? {
                bad = Some(next);
                break;
            }
            good = next;
        }
        let Some(bad) = bad else {
            return Ok((Some(good), (None, Some(good))));
        };
        let (bad, good) = self.bisect(bad, good)?;
        Ok((Some(good), (Some(bad), Some(good))))
    }

    /// The values an exponential search visits after `lo`, ending at `hi`: `lo + 1, lo + 3,
    /// lo + 7, ...` for integers, `lo × 2, lo × 4, ...` for reals (steps of `hi - lo` / 64
    /// doubling when `lo` is not positive).
    fn exponential(&self, lo: f64, hi: f64) -> Vec<f64> {
        let mut values = Vec::new();
        let mut step = match self.integer {
            true => 1.0,
            false if lo > 0.0 => lo,
            false => (hi - lo) / 64.0,
        };
        let mut value = lo;
        while value < hi && values.len() < MAX_PROBES {
            value = (value + step).min(hi);
            values.push(value);
            step *= 2.0;
        }
        values
    }

    /// Narrows (bad, good) until they are adjacent integers or within the relative
    /// precision; returns the final pair.
    fn bisect(&mut self, mut bad: f64, mut good: f64) -> Result<(f64, f64), RunError> {
        while !self.close_enough(bad, good) {
            let mid = match self.integer {
                true => ((bad + good) / 2.0).floor().max(bad.min(good) + 1.0),
                false => (bad + good) / 2.0,
            };
            if self.feasible(mid)? {
                good = mid;
            } else {
                bad = mid;
            }
        }
        Ok((bad, good))
    }

    fn close_enough(&self, bad: f64, good: f64) -> bool {
        let gap = (good - bad).abs();
        match self.integer {
            true => gap <= 1.0,
            false => gap <= self.precision * good.abs().max(bad.abs()).max(f64::MIN_POSITIVE),
        }
    }
}

/// Pairs of probes whose verdicts contradict monotonicity: for minimize, a feasible value
/// below an infeasible one; for maximize, a feasible value above an infeasible one.
pub fn contradictions(probes: &[Probe], goal: Goal) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for good in probes.iter().filter(|p| p.feasible) {
        for bad in probes.iter().filter(|p| !p.feasible) {
            let contradicts = match goal {
                Goal::Minimize => good.value < bad.value,
                Goal::Maximize => good.value > bad.value,
            };
            if contradicts {
                out.push((good.value, bad.value));
            }
        }
    }
    out.sort_by(|a, b| a.partial_cmp(b).expect("finite values"));
    out
}
