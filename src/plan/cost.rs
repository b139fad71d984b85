//! The cheapest setting that meets the SLOs: `plan --minimize gpu_hours` (or `peak_workers`)
//! probes every value of one parameter (a planner key such as `planner.max_gpu_budget`, a
//! worker count, an interval), each on every seed, and answers the feasible value whose fleet
//! cost least.
//!
//! What a setting costs is not monotone in it (a larger GPU budget lets the planner scale up
//! sooner, drain the backlog sooner and scale down sooner), so nothing is bisected: every value
//! is probed, at most [`MAX_PROBES`] of them. A probe's cost is the most over its seeds, as its
//! feasibility is the worst: the answer holds on every seed.

use super::output::{PlanRow, verdict_lines, worst};
use super::{Goal, MAX_PROBES, Parameterized, Plan, PlanOptions, Probe, Prober, checks};
use super::{format_value, output::plan_csv};
use crate::pipeline::RunError;
use crate::report::measure::fleet::FleetFigures;
use crate::report::render::chart::{Axis, Chart, Direction, LegendCorner, ReferenceLine, Series};
use crate::report::verdict::expect::number;
use serde_json::{Value, json};
use std::path::PathBuf;

/// What a plan of cost minimizes: a figure of the run's fleet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Objective {
    /// GPUs times hours billed (`fleet.gpu_hours` of `summary.json`).
    GpuHours,
    /// The most workers billed at once (`fleet.peak_workers`).
    PeakWorkers,
}

impl Objective {
    /// The objective `--minimize NAME` names, if it names one rather than a `--set` path.
    pub fn parse(name: &str) -> Option<Objective> {
        match name {
            "gpu_hours" => Some(Objective::GpuHours),
            "peak_workers" => Some(Objective::PeakWorkers),
            _ => None,
        }
    }

    /// Its name, as `summary.json` and expectations spell it.
    pub fn name(self) -> &'static str {
        match self {
            Objective::GpuHours => "gpu_hours",
            Objective::PeakWorkers => "peak_workers",
        }
    }

    /// Its value in a run's fleet figures.
    pub fn of(self, fleet: &FleetFigures) -> f64 {
        match self {
            Objective::GpuHours => fleet.gpu_hours,
            Objective::PeakWorkers => fleet.peak_workers as f64,
        }
    }

    /// How a value of it reads: `0.0756 GPU-hours`, `6 workers`.
    pub fn said(self, value: f64) -> String {
        match self {
            Objective::GpuHours => format!("{} GPU-hours", number(value)),
            Objective::PeakWorkers => format!("{} workers at the peak", number(value)),
        }
    }
}

/// What `plan --minimize gpu_hours --range PATH=...` searches.
#[derive(Clone, Debug)]
pub struct CostOptions {
    /// The scenario file.
    pub scenario: PathBuf,
    /// `--set` overrides applied to every probe (before the parameter's own).
    pub overrides: Vec<(String, String)>,
    pub objective: Objective,
    /// The parameter's `--set` path.
    pub parameter: String,
    /// The values probed, ascending, each once.
    pub values: Vec<f64>,
    /// Replications per probe (the sweep's seeds).
    pub seeds: u32,
    /// Count an overloaded run as feasible.
    pub allow_overload: bool,
}

/// Parses `--range PATH=LO..HI` (every whole number from LO to HI) or `PATH=V1,V2,...` into
/// the path and its values, ascending and each once; at most [`MAX_PROBES`] values.
pub fn parse_values(text: &str) -> Result<(String, Vec<f64>), RunError> {
    let bad = |why: &str| {
        RunError::Input(format!(
            "--range {text}: {why} (with --minimize gpu_hours or peak_workers it is PATH=LO..HI, every whole number from LO to HI, or PATH=V1,V2,...)"
        ))
    };
    let (path, values) = (text.split_once('='))
        .filter(|(p, v)| !p.trim().is_empty() && !v.trim().is_empty())
        .ok_or_else(|| bad("expected PATH=LO..HI or PATH=V1,V2,..."))?;
    let number = |v: &str| -> Result<f64, RunError> {
        let value: f64 = (v.trim().parse()).map_err(|_| bad(&format!("{v:?} is not a number")))?;
        value
            .is_finite()
            .then_some(value)
            .ok_or_else(|| bad("a value must be finite"))
    };
    let mut values: Vec<f64> = match values.split_once("..") {
        Some((lo, hi)) => {
            let (lo, hi) = (number(lo)?, number(hi)?);
            if lo.fract() != 0.0 || hi.fract() != 0.0 || lo > hi {
                return Err(bad("LO..HI must be whole numbers with LO <= HI"));
            }
            if hi - lo >= MAX_PROBES as f64 {
                return Err(bad(&format!("probes at most {MAX_PROBES} values")));
            }
            (0..=(hi - lo) as u64).map(|k| lo + k as f64).collect()
        }
        None => values.split(',').map(number).collect::<Result<_, _>>()?,
    };
    values.sort_by(f64::total_cmp);
    values.dedup();
    if values.len() > MAX_PROBES {
        return Err(bad(&format!("probes at most {MAX_PROBES} values")));
    }
    Ok((path.trim().to_string(), values))
}

/// One probed value: its verdicts and what its fleet cost on its costliest seed.
#[derive(Clone, Debug)]
pub struct CostProbe {
    pub probe: Probe,
    pub cost: f64,
}

/// The result of a plan of cost.
#[derive(Clone, Debug)]
pub struct CostPlan {
    pub objective: Objective,
    pub parameter: String,
    pub seeds: u32,
    /// Every probe, in value order.
    pub probes: Vec<CostProbe>,
    /// The probe answered (an index into `probes`): the feasible one of least cost, the
    /// smallest value on a tie; `None` when none is feasible.
    pub answer: Option<usize>,
}

impl CostPlan {
    /// The probe answered.
    pub fn answer_probe(&self) -> Option<&CostProbe> {
        self.answer.map(|i| &self.probes[i])
    }
}

/// Probes every value of `options` on every seed (in parallel on `pool`) and answers the
/// cheapest feasible one. The scenario must take the smallest and the largest value.
pub fn cost_plan(options: &CostOptions, pool: &rayon::ThreadPool) -> Result<CostPlan, RunError> {
    let plan_options = search_options(options);
    let scenarios = Parameterized::new(&plan_options)?;
    let checked = checks::check_joint_row(&scenarios)?;
    if let Some(v) = (options.values.iter()).find(|v| checked.integer && v.fract() != 0.0) {
        return Err(RunError::Input(format!(
            "--range: {} takes whole numbers, not {}",
            options.parameter,
            format_value(*v)
        )));
    }
    let prober = Prober::new(scenarios, &checked, pool);
    let mut probes = Vec::with_capacity(options.values.len());
    for &value in &options.values {
        let probe = prober.probe(value)?;
        let costs = probe.runs.iter().map(|r| options.objective.of(&r.fleet));
        let cost = costs.fold(f64::NEG_INFINITY, f64::max);
        probes.push(CostProbe { probe, cost });
    }
    let answer = cheapest_feasible(&probes);
    Ok(CostPlan {
        objective: options.objective,
        parameter: options.parameter.clone(),
        seeds: options.seeds,
        probes,
        answer,
    })
}

/// The feasible probe of least cost, the first (smallest value) on a tie.
fn cheapest_feasible(probes: &[CostProbe]) -> Option<usize> {
    (probes.iter().enumerate())
        .filter(|(_, p)| p.probe.feasible)
        .fold(None, |best: Option<(usize, f64)>, (i, p)| match best {
            Some((_, cost)) if cost <= p.cost => best,
            _ => Some((i, p.cost)),
        })
        .map(|(i, _)| i)
}

/// The search options a probe of `options` runs with: the parameter over the values' span.
pub fn search_options(options: &CostOptions) -> PlanOptions {
    let lo = options.values.first().copied().unwrap_or(0.0);
    let hi = options.values.last().copied().unwrap_or(lo);
    PlanOptions {
        scenario: options.scenario.clone(),
        overrides: options.overrides.clone(),
        parameter: options.parameter.clone(),
        goal: Goal::Minimize,
        range: (lo, hi),
        seeds: options.seeds,
        precision: 0.01,
        allow_overload: options.allow_overload,
    }
}

/// `plan.csv` of a plan of cost: one row per probe and seed, as every plan's (its
/// `gpu_hours` and `peak_workers` columns are the seed's own).
pub fn cost_csv(plan: &CostPlan) -> Vec<u8> {
    let probes = plan.probes.iter().map(|p| p.probe.clone()).collect();
    let row = PlanRow {
        for_value: None,
        plan: Plan {
            parameter: plan.parameter.clone(),
            goal: Goal::Minimize,
            range: (0.0, 0.0),
            integer: false,
            latency_figures: Vec::new(),
            answer: plan.answer_probe().map(|p| p.probe.value),
            bracket: (None, None),
            probes,
            contradictions: Vec::new(),
        },
    };
    plan_csv(&[row])
}

/// `plan.json` of a plan of cost: the objective, the parameter, the answer and its cost, and
/// every probe with its cost, feasibility and failing expectations.
pub fn cost_json(plan: &CostPlan) -> Vec<u8> {
    // Whole numbers as JSON integers, so `--set PATH=$(jq .answer plan.json)` takes them.
    let value_json = |v: f64| match format_value(v).parse::<i64>() {
        Ok(whole) => json!(whole),
        Err(_) => json!(v),
    };
    let answer = plan.answer_probe();
    let probes: Vec<Value> = (plan.probes.iter())
        .map(|p| {
            let failing: Vec<String> = (worst(&p.probe).into_iter())
                .filter(|o| !o.passed)
                .map(|o| o.label)
                .collect();
            json!({
                "value": value_json(p.probe.value),
                plan.objective.name(): p.cost,
                "feasible": p.probe.feasible,
                "overloaded": p.probe.overloaded(),
                "failing": failing,
            })
        })
        .collect();
    let value = json!({
        "minimize": plan.objective.name(),
        "parameter": plan.parameter,
        "seeds": plan.seeds,
        "answer": answer.map(|p| value_json(p.probe.value)),
        plan.objective.name(): answer.map(|p| p.cost),
        "probes": probes,
    });
    let mut bytes = serde_json::to_vec_pretty(&value).expect("JSON of plain values");
    bytes.push(b'\n');
    bytes
}

/// The terminal answer, e.g.
///
/// ```text
/// gpu_hours is least at planner.max_gpu_budget = 4: 0.0712 GPU-hours (the most of 3 seeds)
///   at 4 every expectation holds:
///     default p99 TTFT = 1834.2 (at most 2500)
///   planner.max_gpu_budget  gpu_hours  feasible
///   2                       0.0651     no
///   ...
/// ```
pub fn describe(plan: &CostPlan) -> String {
    let mut out = answer_text(plan);
    let width = plan.parameter.len().max(5);
    let name = plan.objective.name();
    out += &format!("  {:<width$}  {name:>12}  feasible\n", plan.parameter);
    for p in &plan.probes {
        let feasible = if p.probe.feasible { "yes" } else { "no" };
        let value = format_value(p.probe.value);
        out += &format!("  {value:<width$}  {:>12}  {feasible}\n", number(p.cost));
    }
    out
}

/// The answer and its verdicts (the first lines of [`describe`]).
pub fn answer_text(plan: &CostPlan) -> String {
    let objective = plan.objective;
    match plan.answer_probe() {
        Some(p) => format!(
            "{} is least at {} = {}: {} (the most of {})\n  at {} every expectation holds:\n{}",
            objective.name(),
            plan.parameter,
            format_value(p.probe.value),
            objective.said(p.cost),
            crate::text::count_of(plan.seeds as usize, "seed"),
            format_value(p.probe.value),
            verdict_lines(&p.probe, false)
        ),
        None => format!(
            "{}: no value of {} probed is feasible\n",
            objective.name(),
            plan.parameter
        ),
    }
}

/// `cost.png/.svg`: each probe's cost against the parameter, feasible and infeasible probes
/// as two marked lines, the answer as a labelled line.
pub fn cost_chart(plan: &CostPlan) -> Chart {
    let values: Vec<f64> = plan.probes.iter().map(|p| p.probe.value).collect();
    let (lo, hi) = (values.first().copied(), values.last().copied());
    let (lo, hi) = (lo.unwrap_or(0.0), hi.unwrap_or(1.0));
    let pad = ((hi - lo) * 0.05).max(0.5);
    let peak = plan.probes.iter().map(|p| p.cost).fold(0.0, f64::max);
    let name = plan.objective.name();
    let x = Axis::linear(&plan.parameter, (lo - pad, hi + pad));
    let y = Axis::linear(name, (0.0, (peak * 1.1).max(1e-9)));
    let title = format!(
        "{name} at each {} probed (the most over seeds)",
        plan.parameter
    );
    let mut chart = Chart::new("cost", &title, x, y, LegendCorner::LowerRight);
    for (label, feasible, colour) in [("feasible", true, 2), ("infeasible", false, 1)] {
        // Each run of neighbouring probes of this kind is one line: a probe of the other
        // kind between two breaks it.
        let mut points: Vec<(f64, f64)> = Vec::new();
        for p in &plan.probes {
            match p.probe.feasible == feasible {
                true => points.push((p.probe.value, p.cost)),
                false if points.last().is_some_and(|q| q.1.is_finite()) => {
                    points.push((p.probe.value, f64::NAN));
                }
                false => {}
            }
        }
        if points.iter().any(|q| q.1.is_finite()) {
            let mut series = Series::measured(label.to_string(), colour, points);
            series.markers = true;
            chart.series.push(series);
        }
    }
    if let Some(p) = plan.answer_probe() {
        chart.references.push(ReferenceLine {
            direction: Direction::Vertical,
            at: p.probe.value,
            label: format!("answer {}", format_value(p.probe.value)),
            class: None,
        });
    }
    chart
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(value: f64, cost: f64, feasible: bool) -> CostProbe {
        let probe = Probe {
            value,
            runs: Vec::new(),
            feasible,
        };
        CostProbe { probe, cost }
    }

    #[test]
    fn the_answer_is_the_cheapest_feasible_probe_and_the_smaller_value_on_a_tie() {
        let probes = [
            probe(4.0, 0.5, false),
            probe(6.0, 0.8, true),
            probe(7.0, 0.7, true),
            probe(8.0, 0.7, true),
            probe(9.0, 0.9, true),
        ];
        assert_eq!(cheapest_feasible(&probes), Some(2));
        assert_eq!(cheapest_feasible(&probes[..1]), None, "nothing feasible");
    }

    #[test]
    fn a_range_of_whole_numbers_or_a_list_of_values_are_probed_ascending_once() {
        let (path, values) = parse_values("planner.max_gpu_budget=4..7").unwrap();
        assert_eq!(path, "planner.max_gpu_budget");
        assert_eq!(values, [4.0, 5.0, 6.0, 7.0]);
        let (_, values) =
            parse_values("planner.load_adjustment_interval_seconds=20, 5,10,5").unwrap();
        assert_eq!(values, [5.0, 10.0, 20.0]);
        assert_eq!(parse_values("workers.count=3..3").unwrap().1, [3.0]);
    }

    #[test]
    fn a_bad_range_of_values_says_what_it_takes() {
        for bad in [
            "4..12", "=4..12", "p=", "p=1.5..3", "p=5..4", "p=a,b", "p=1,inf", "p=0..96",
        ] {
            let message = parse_values(bad).unwrap_err().to_string();
            assert!(message.contains(&format!("--range {bad}:")), "{message}");
            assert!(message.contains("PATH=LO..HI"), "{message}");
        }
        assert!(parse_values("p=0..95").is_ok(), "96 values are allowed");
    }

    #[test]
    fn the_cost_chart_breaks_each_kinds_line_where_the_other_kind_lies_between() {
        let plan = CostPlan {
            objective: Objective::GpuHours,
            parameter: "planner.max_gpu_budget".into(),
            seeds: 1,
            probes: vec![
                probe(4.0, 0.5, false),
                probe(5.0, 0.6, true),
                probe(6.0, 0.7, false),
            ],
            answer: Some(1),
        };
        let chart = cost_chart(&plan);
        let infeasible = &chart.series[1].points;
        assert_eq!(infeasible.len(), 3);
        assert!(infeasible[1].1.is_nan(), "{infeasible:?}");
        assert_eq!(chart.references[0].at, 5.0);
    }
}
