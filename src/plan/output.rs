//! What `routersim plan` reports: `plan.json`, `plan.csv`, the `capacity` chart and the
//! terminal answer. Pure functions of the plans; `report::output` writes the files.

use super::joint::JointPlan;
use super::split::{Total, best_split, split_of};
use super::{Goal, Plan, Probe, format_value};
use crate::report::render::chart::{
    Axis, Chart, Direction, LegendCorner, PlotError, ReferenceLine, Series, Shading, render_files,
};
use crate::report::verdict::evaluate::{ExpectationOutcome, aggregate};
use crate::report::verdict::expect::number;
use serde_json::{Value, json};

/// One search of a `--for` table: the `--for` value it ran with (none without `--for`).
#[derive(Clone, Debug)]
pub struct PlanRow {
    /// `(path, value)` of the `--for` axis, if any.
    pub for_value: Option<(String, String)>,
    /// The search.
    pub plan: Plan,
}

/// Each expectation's worst outcome over a probe's seeds.
pub(super) fn worst(probe: &Probe) -> Vec<ExpectationOutcome> {
    let per_seed: Vec<Vec<ExpectationOutcome>> =
        probe.runs.iter().map(|r| r.outcomes.clone()).collect();
    aggregate(&per_seed)
}

/// The expectation that binds at the answer: the one that fails first past it.
#[derive(Clone, Debug)]
pub struct Binding {
    /// Its index among the scenario's expectations.
    pub index: usize,
    /// Its worst outcome over the seeds at the answer.
    pub at_answer: ExpectationOutcome,
    /// Whether its figure is a yes or a no (`stable`), which has no margin to speak of.
    pub boolean: bool,
    /// The probe just past the answer (the bracket's infeasible end), if one was made.
    pub past: Option<Past>,
}

/// What failed at the probe just past the answer.
#[derive(Clone, Debug)]
pub struct Past {
    /// The parameter's value there.
    pub value: f64,
    /// The binding expectation's worst outcome there.
    pub outcome: ExpectationOutcome,
    /// Every expectation that failed there, in the scenario's order.
    pub failing: Vec<String>,
    /// Whether some seed's run was overloaded there.
    pub overloaded: bool,
}

/// The binding expectation (see [`Binding`]): among the expectations that fail at the probe
/// just past the answer, the one with the least headroom at the answer relative to its bound,
/// a figure before a yes-or-no one (a `stable: true` that holds is exactly at its bound, so a
/// margin would always call it binding). With no failing probe past the answer (the answer
/// is an end of the range, or the probe past it failed only by overload), every expectation
/// is a candidate.
pub fn binding_of(plan: &Plan) -> Option<Binding> {
    let at_answer = worst(plan.answer.and_then(|a| plan.probe_at(a))?);
    let past_probe = plan.bracket.0.and_then(|v| plan.probe_at(v));
    let past_worst = past_probe.map(worst);
    let failing: Vec<usize> = past_worst
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, o)| !o.passed)
        .map(|(i, _)| i)
        .collect();
    let candidates: Vec<usize> = match failing.is_empty() {
        true => (0..at_answer.len()).collect(),
        false => failing.clone(),
    };
    // A yes-or-no figure has no margin to speak of: it binds only after every other.
    let headroom = |i: &usize| (at_answer[*i].boolean, relative_margin(&at_answer[*i]));
    let index = candidates.into_iter().min_by(|a, b| {
        let ((a_bool, a_margin), (b_bool, b_margin)) = (headroom(a), headroom(b));
        a_bool.cmp(&b_bool).then(a_margin.total_cmp(&b_margin))
    })?;
    let past = past_probe.zip(past_worst).map(|(probe, outcomes)| Past {
        value: probe.value,
        outcome: outcomes[index].clone(),
        failing: failing.iter().map(|i| outcomes[*i].label.clone()).collect(),
        overloaded: probe.overloaded(),
    });
    Some(Binding {
        index,
        at_answer: at_answer[index].clone(),
        boolean: at_answer[index].boolean,
        past,
    })
}

/// The binding expectation in `plan.json`: its label, value, bound, margin (absolute, and
/// relative to the bound) and seed at the answer, and what failed just past the answer.
fn binding(plan: &Plan) -> Value {
    let Some(b) = binding_of(plan) else {
        return Value::Null;
    };
    let o = &b.at_answer;
    let past = b.past.as_ref().map(|p| {
        json!({
            "value": value_json(plan, p.value),
            "measured": p.outcome.measured,
            "failing": p.failing,
            "overloaded": p.overloaded,
        })
    });
    json!({
        "expectation": o.label,
        "value": o.measured,
        "bound": o.bound.to_string(),
        "margin": o.measured.map(|v| o.bound.margin(v)),
        "relative_margin": o.measured.map(|_| relative_margin(o)),
        "boolean": b.boolean,
        "seed": o.seed,
        "past_answer": past,
    })
}

/// The margin as a fraction of the bound's own size, so that bounds in different units
/// (ms, counts, shares) compare (negative infinity when the figure was not measured).
pub(super) fn relative_margin(o: &ExpectationOutcome) -> f64 {
    use crate::report::verdict::expect::Bound;
    let Some(value) = o.measured else {
        return f64::NEG_INFINITY;
    };
    let scale = match o.bound {
        Bound::AtLeast(v) | Bound::AtMost(v) | Bound::Tolerance(v) => v.abs(),
        Bound::Within { lo, hi } => (hi - lo).abs() / 2.0,
    };
    o.bound.margin(value) / scale.max(1e-12)
}

/// A parameter value in `plan.json`: an integer parameter's whole numbers as JSON integers
/// (so `--set PATH=$(jq .answer plan.json)` takes them back), anything else as a number.
fn value_json(plan: &Plan, value: f64) -> Value {
    match plan.integer && value.fract() == 0.0 && value.abs() <= super::checks::MAX_INTEGER_END {
        true => json!(value as i64),
        false => json!(value),
    }
}

fn probe_json(plan: &Plan, probe: &Probe) -> Value {
    let expectations: Vec<Value> = worst(probe)
        .iter()
        .map(|o| {
            json!({"expectation": o.label, "worst_value": o.measured,
                   "bound": o.bound.to_string(), "passed": o.passed, "worst_seed": o.seed})
        })
        .collect();
    json!({
        "value": value_json(plan, probe.value),
        "feasible": probe.feasible,
        "overloaded": probe.overloaded(),
        "stability_unjudged": probe.unjudged(),
        "expectations": expectations,
    })
}

fn plan_json_value(row: &PlanRow) -> Value {
    let plan = &row.plan;
    let contradictions: Vec<Value> = plan
        .contradictions
        .iter()
        .map(|(feasible, infeasible)| {
            json!({"feasible": value_json(plan, *feasible),
                   "infeasible": value_json(plan, *infeasible)})
        })
        .collect();
    let value = |v: Option<f64>| v.map(|v| value_json(plan, v));
    json!({
        "parameter": plan.parameter,
        "goal": plan.goal.name(),
        "range": [value_json(plan, plan.range.0), value_json(plan, plan.range.1)],
        "integer": plan.integer,
        "for": row.for_value.as_ref().map(|(p, v)| json!({"parameter": p, "value": v})),
        "answer": value(plan.answer),
        "bracket": {"infeasible": value(plan.bracket.0), "feasible": value(plan.bracket.1)},
        "binding": binding(plan),
        "non_monotone": contradictions,
        "probes": plan.probes.iter().map(|p| probe_json(plan, p)).collect::<Vec<_>>(),
    })
}

/// `plan.json`: one search as an object, or a `--for` table as `{"table": [...]}`.
pub fn plan_json(rows: &[PlanRow]) -> Vec<u8> {
    let value = match rows {
        [one] if one.for_value.is_none() => plan_json_value(one),
        _ => json!({"table": rows.iter().map(plan_json_value).collect::<Vec<_>>()}),
    };
    let mut bytes = serde_json::to_vec_pretty(&value).expect("JSON of plain values");
    bytes.push(b'\n');
    bytes
}

/// `plan.json` of a joint search (`--minimize A+B`): the answer (both counts and their sum),
/// the frontier (for each value of A searched, the fewest B, or null), where it rises, and
/// each search of B as a `--for` table's entry.
pub fn joint_json(joint: &JointPlan) -> Vec<u8> {
    let pair = |a: u64, b: Option<u64>| {
        let mut object = serde_json::Map::new();
        object.insert(joint.first.clone(), json!(a));
        object.insert(joint.second.clone(), json!(b));
        object
    };
    let answer = joint.answer.map(|(a, b)| {
        let mut object = pair(a, Some(b));
        object.insert("total".into(), json!(a + b));
        Value::Object(object)
    });
    let frontier: Vec<Value> = joint
        .frontier()
        .into_iter()
        .map(|(a, b)| Value::Object(pair(a, b)))
        .collect();
    let value = json!({
        "minimize": format!("{}+{}", joint.first, joint.second),
        "range": [joint.range.0, joint.range.1],
        "answer": answer,
        "frontier": frontier,
        "non_monotone": joint.contradictions,
        "table": joint.rows.iter().map(plan_json_value).collect::<Vec<_>>(),
    });
    let mut bytes = serde_json::to_vec_pretty(&value).expect("JSON of plain values");
    bytes.push(b'\n');
    bytes
}

/// The terminal answer of a joint search: each search of B, then the pair.
pub fn describe_joint(joint: &JointPlan) -> String {
    let mut out: String = joint.rows.iter().map(describe).collect();
    let sum = format!("{} + {}", joint.first, joint.second);
    out += &match joint.answer {
        Some((a, b)) => format!(
            "fewest in all: {sum} = {} ({} = {a}, {} = {b})\n",
            a + b,
            joint.first,
            joint.second
        ),
        None => format!(
            "{sum}: nothing in {}..{} is feasible\n",
            joint.range.0, joint.range.1
        ),
    };
    for line in &joint.contradictions {
        out += &format!("  warning: not monotone: {line}\n");
    }
    out
}

/// What a split plan (`--total A+B=T`) found: the rows, one search per split, and the best.
pub struct SplitPlan<'a> {
    /// The two counts and their total.
    pub total: &'a Total,
    /// One search per split `a + b`, in order of `a`.
    pub rows: &'a [PlanRow],
    /// The row with the best answer ([`best_split`]).
    pub best: Option<usize>,
}

impl<'a> SplitPlan<'a> {
    /// The split plan of `rows` (from [`super::split::split_searches`]).
    pub fn new(total: &'a Total, rows: &'a [PlanRow]) -> SplitPlan<'a> {
        let goal = rows.first().map_or(Goal::Maximize, |r| r.plan.goal);
        SplitPlan {
            total,
            rows,
            best: best_split(rows, goal),
        }
    }

    /// Each split `(a, b)` and its search's answer.
    pub fn splits(&self) -> Vec<((u64, u64), Option<f64>)> {
        let split = |r: &PlanRow| split_of(r).unwrap_or_default();
        self.rows
            .iter()
            .map(|r| (split(r), r.plan.answer))
            .collect()
    }
}

/// `plan.json` of a split plan: the searched parameter and goal, the total, the answer (the
/// best split's counts and its value), every split's answer, and each search as a `--for`
/// table's entry.
pub fn split_json(split: &SplitPlan) -> Vec<u8> {
    let Some(first) = split.rows.first() else {
        return b"{}\n".to_vec();
    };
    let parameter = &first.plan.parameter;
    let entry = |(a, b): (u64, u64), answer: Option<f64>, plan: &Plan| {
        let mut object = serde_json::Map::new();
        object.insert(split.total.first.clone(), json!(a));
        object.insert(split.total.second.clone(), json!(b));
        object.insert(
            parameter.clone(),
            json!(answer.map(|v| value_json(plan, v))),
        );
        Value::Object(object)
    };
    let splits: Vec<Value> = split
        .splits()
        .into_iter()
        .zip(split.rows)
        .map(|((ab, answer), row)| entry(ab, answer, &row.plan))
        .collect();
    let answer = split.best.map(|i| splits[i].clone());
    let value = json!({
        "parameter": parameter,
        "goal": first.plan.goal.name(),
        "total": {"counts": [split.total.first, split.total.second], "value": split.total.total},
        "answer": answer,
        "splits": splits,
        "table": split.rows.iter().map(plan_json_value).collect::<Vec<_>>(),
    });
    let mut bytes = serde_json::to_vec_pretty(&value).expect("JSON of plain values");
    bytes.push(b'\n');
    bytes
}

/// The terminal answer of a split plan: each split's search, then the best split.
pub fn describe_split(split: &SplitPlan) -> String {
    let mut out: String = split.rows.iter().map(describe).collect();
    let total = split.total;
    let splits = split.splits();
    out += &match split.best {
        Some(i) => {
            let ((a, b), answer) = splits[i];
            format!(
                "best split of {}: {} = {a}, {} = {b}: {} = {}\n",
                total.total,
                total.first,
                total.second,
                split.rows[i].plan.parameter,
                format_value(answer.unwrap_or_default())
            )
        }
        None => format!(
            "{} = {}: no split has a feasible value\n",
            total.sum(),
            total.total
        ),
    };
    out
}

/// The capacity chart of a split plan: each split's answer, the best marked.
pub fn split_capacity_files(split: &SplitPlan) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    let mark = split.best.map(|i| {
        let ((a, b), _) = split.splits()[i];
        (i, format!("best split: {a} + {b}"))
    });
    marked_capacity_files(split.rows, mark)
}

/// `plan.csv`: one row per probe and seed, with every expectation's value and verdict, then
/// what the seed's fleet cost (`gpu_hours`, `peak_workers`).
pub fn plan_csv(rows: &[PlanRow]) -> Vec<u8> {
    let labels: Vec<String> = rows
        .iter()
        .flat_map(|r| r.plan.probes.first())
        .flat_map(|p| p.runs.first())
        .flat_map(|r| r.outcomes.iter().map(|o| o.label.clone()))
        .take_while({
            let mut seen = std::collections::BTreeSet::new();
            move |l| seen.insert(l.clone())
        })
        .collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header = vec![
        "for".to_string(),
        "parameter".into(),
        "value".into(),
        "seed".into(),
        "overloaded".into(),
        "feasible".into(),
    ];
    for label in &labels {
        header.push(format!("{label}.value"));
        header.push(format!("{label}.passed"));
    }
    header.extend(["gpu_hours".to_string(), "peak_workers".into()]);
    w.write_record(&header).expect("writing to memory");
    for row in rows {
        let for_cell = row
            .for_value
            .as_ref()
            .map(|(p, v)| format!("{p}={v}"))
            .unwrap_or_default();
        for probe in &row.plan.probes {
            for run in &probe.runs {
                let mut record = vec![
                    for_cell.clone(),
                    row.plan.parameter.clone(),
                    format_value(probe.value),
                    run.seed.to_string(),
                    run.overloaded.map(|o| o.to_string()).unwrap_or_default(),
                    probe.feasible.to_string(),
                ];
                for o in &run.outcomes {
                    record.push(o.measured.map(number).unwrap_or_default());
                    record.push(o.passed.to_string());
                }
                record.resize(header.len() - 2, String::new());
                record.push(number(run.fleet.gpu_hours));
                record.push(run.fleet.peak_workers.to_string());
                w.write_record(&record).expect("writing to memory");
            }
        }
    }
    w.into_inner().expect("writing to memory")
}

/// `capacity.png/.svg`: without `--for`, each expectation's worst value over seeds against
/// the parameter (log axis when every figure is a latency), its bound as a line, the feasible
/// side shaded; with `--for`, the answer against the `--for` values.
pub fn capacity_files(rows: &[PlanRow]) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    marked_capacity_files(rows, None)
}

/// [`capacity_files`] of a table whose one answer is row `mark.0` (a joint search's pair, a
/// split's best), marked on the chart by a line labelled `mark.1`.
pub fn marked_capacity_files(
    rows: &[PlanRow],
    mark: Option<(usize, String)>,
) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    let chart = match rows {
        [one] if one.for_value.is_none() => figures_chart(&one.plan),
        _ => table_chart(rows, mark),
    };
    render_files("capacity", &chart)
}

/// The capacity chart of a joint search: the frontier, the pair with the fewest workers in
/// all marked.
pub fn joint_capacity_files(joint: &JointPlan) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    let first = joint.frontier();
    let mark = joint.answer.and_then(|(a, b)| {
        let row = first.iter().position(|(x, _)| *x == a)?;
        Some((row, format!("fewest in all: {a} + {b} = {}", a + b)))
    });
    marked_capacity_files(&joint.rows, mark)
}

/// A vertical line at `at` labelled `label`: where the answer is.
fn answer_line(at: f64, label: String) -> ReferenceLine {
    ReferenceLine {
        direction: Direction::Vertical,
        at,
        label,
        class: None,
    }
}

fn figures_chart(plan: &Plan) -> Chart {
    let mut probes: Vec<&Probe> = plan.probes.iter().collect();
    probes.sort_by(|a, b| a.value.total_cmp(&b.value));
    let worsts: Vec<Vec<ExpectationOutcome>> = probes.iter().map(|p| worst(p)).collect();
    let labels: Vec<String> = worsts
        .first()
        .map(|w| w.iter().map(|o| o.label.clone()).collect())
        .unwrap_or_default();
    // Latency SLOs share one log axis; other figures (counts, shares, `stable`) are drawn only
    // when there is no latency to draw, on a linear axis.
    let latency_only = plan.latency_figures.iter().any(|l| *l);
    let drawn = |i: usize| !latency_only || plan.latency_figures.get(i) == Some(&true);
    let mut all_y: Vec<f64> = Vec::new();
    let mut series = Vec::new();
    for (i, label) in labels.iter().enumerate().filter(|(i, _)| drawn(*i)) {
        let points: Vec<(f64, f64)> = probes
            .iter()
            .zip(&worsts)
            .filter_map(|(p, w)| Some((p.value, w.get(i)?.measured?)))
            .filter(|(_, y)| !latency_only || *y > 0.0)
            .collect();
        all_y.extend(points.iter().map(|p| p.1));
        let mut s = Series::measured(label.clone(), i, points);
        s.markers = true;
        series.push(s);
    }
    let references = bound_lines(&worsts, &mut all_y, drawn);
    let x = match plan.integer {
        true => Axis::whole(&plan.parameter, plan.range),
        false => Axis::linear(&plan.parameter, plan.range),
    };
    let y = match latency_only {
        true => Axis::log_over("worst value over seeds (ms)", all_y.iter().copied()),
        false => Axis::linear("worst value over seeds", value_range(&all_y)),
    };
    let title = match plan.answer {
        Some(a) => format!(
            "plan: {} {} = {}",
            plan.goal.name(),
            plan.parameter,
            format_value(a)
        ),
        None => format!("plan: nothing in range is feasible for {}", plan.parameter),
    };
    let mut chart = Chart::new("capacity", &title, x, y, LegendCorner::UpperRight);
    chart.series = series;
    chart.references = references;
    if let Some(a) = plan.answer {
        let label = format!("answer: {} = {}", plan.parameter, format_value(a));
        chart.references.push(answer_line(a, label));
    }
    chart.shadings = Vec::from_iter(plan.answer.map(|a| Shading {
        label: "feasible".into(),
        windows: vec![match plan.goal {
            Goal::Minimize => (a, plan.range.1),
            Goal::Maximize => (plan.range.0, a),
        }],
    }));
    chart
}

/// A horizontal line per expectation bound (both ends of a `within`).
fn bound_lines(
    worsts: &[Vec<ExpectationOutcome>],
    all_y: &mut Vec<f64>,
    drawn: impl Fn(usize) -> bool,
) -> Vec<ReferenceLine> {
    use crate::report::verdict::expect::Bound;
    let Some(first) = worsts.first() else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for (i, o) in first.iter().enumerate().filter(|(i, _)| drawn(*i)) {
        let ats = match o.bound {
            Bound::AtLeast(v) | Bound::AtMost(v) | Bound::Tolerance(v) => vec![v],
            Bound::Within { lo, hi } => vec![lo, hi],
        };
        for at in ats {
            all_y.push(at);
            lines.push(ReferenceLine {
                direction: Direction::Horizontal,
                at,
                label: format!("{} {}", o.label, o.bound),
                class: Some(i),
            });
        }
    }
    lines
}

/// An axis range from 0 (or below) that shows every value of `values`, all equal ones too.
fn value_range(values: &[f64]) -> (f64, f64) {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !(lo.is_finite() && hi.is_finite()) {
        return (0.0, 1.0);
    }
    let bottom = lo.min(0.0);
    let top = match hi > 0.0 {
        true => hi * 1.05,
        false => hi + 1.0,
    };
    (bottom, top.max(bottom + 1.0))
}

fn table_chart(rows: &[PlanRow], mark: Option<(usize, String)>) -> Chart {
    let points: Vec<(f64, f64)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i as f64, r.plan.answer?)))
        .collect();
    let names: Vec<String> = rows
        .iter()
        .map(|r| {
            r.for_value
                .as_ref()
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        })
        .collect();
    let for_path = rows
        .first()
        .and_then(|r| r.for_value.as_ref().map(|(p, _)| p.clone()))
        .unwrap_or_default();
    let parameter = rows
        .first()
        .map(|r| r.plan.parameter.clone())
        .unwrap_or_default();
    let answers: Vec<f64> = points.iter().map(|p| p.1).collect();
    let x = Axis::categories(&for_path, &names);
    let y = match rows[0].plan.integer {
        true => Axis::whole(&parameter, value_range(&answers)),
        false => Axis::linear(&parameter, value_range(&answers)),
    };
    let mut chart = Chart::new(
        "capacity",
        &format!("capacity table: {parameter} for each {for_path}"),
        x,
        y,
        LegendCorner::UpperLeft,
    );
    let mut series = Series::measured(format!("answer ({})", rows[0].plan.goal.name()), 0, points);
    series.markers = true;
    chart.series = vec![series];
    chart.references = Vec::from_iter(mark.map(|(row, label)| answer_line(row as f64, label)));
    chart
}

/// The terminal answer: the answer on a line of its own, then the probe at it and the one
/// just past it, one verdict per line, then the binding expectation, e.g.
///
/// ```text
/// workers.count = 5
///   at 5 every expectation holds:
///     premium p99 TTFT SLO = 572.4735 (at most 2000)
///     keeps up with the load: yes
///   at 4 these fail:
///     regular p99 TTFT SLO = 40608.8213 (at most 10000)
///     keeps up with the load: no
///   binding: regular p99 TTFT SLO = 991.0152 (at most 10000, 90.1% to spare); ...
/// ```
pub fn describe(row: &PlanRow) -> String {
    let plan = &row.plan;
    let prefix = row
        .for_value
        .as_ref()
        .map(|(p, v)| format!("{p}={v}: "))
        .unwrap_or_default();
    let mut out = match plan.answer.and_then(|a| plan.probe_at(a)) {
        Some(probe) => format!(
            "{prefix}{} = {}\n  at {} every expectation holds:\n{}",
            plan.parameter,
            format_value(probe.value),
            format_value(probe.value),
            verdict_lines(probe, false)
        ),
        None => format!(
            "{prefix}{}: nothing in {}..{} is feasible\n",
            plan.parameter,
            format_value(plan.range.0),
            format_value(plan.range.1)
        ),
    };
    for probe in failing_shown(plan) {
        out += &format!(
            "  at {} these fail:\n{}",
            format_value(probe.value),
            verdict_lines(probe, true)
        );
    }
    if let Some(b) = binding_of(plan) {
        out += &format!("  {}\n", binding_line(plan, &b));
    }
    for line in monotonicity_warnings(plan) {
        out += &format!("  warning: not monotone: {line}\n");
    }
    out
}

/// One line per probe that fails where monotonicity says it should pass: `16 passes but 1
/// fails`, or `2 to 54.5 (9 probes) pass but 1 fails`.
fn monotonicity_warnings(plan: &Plan) -> Vec<String> {
    let mut failing: Vec<f64> = plan.contradictions.iter().map(|c| c.1).collect();
    failing.sort_by(f64::total_cmp);
    failing.dedup();
    let line = |infeasible: f64| {
        let passing: Vec<f64> = plan
            .contradictions
            .iter()
            .filter(|c| c.1 == infeasible)
            .map(|c| c.0)
            .collect();
        let (low, high) = (passing[0], passing[passing.len() - 1]);
        let passes = match passing.len() {
            1 => format!("{} passes", format_value(low)),
            n => format!(
                "{} to {} ({n} probes) pass",
                format_value(low),
                format_value(high)
            ),
        };
        format!("{passes} but {} fails", format_value(infeasible))
    };
    failing.into_iter().map(line).collect()
}

/// The failing probes the terminal answer shows: the infeasible side of the bracket, or,
/// when nothing is feasible, both ends of the range (the lowest and highest probes).
fn failing_shown(plan: &Plan) -> Vec<&Probe> {
    if plan.answer.is_some() {
        return Vec::from_iter(plan.bracket.0.and_then(|b| plan.probe_at(b)));
    }
    let lowest = plan
        .probes
        .iter()
        .min_by(|a, b| a.value.total_cmp(&b.value));
    let highest = plan
        .probes
        .iter()
        .max_by(|a, b| a.value.total_cmp(&b.value));
    let mut ends: Vec<&Probe> = lowest.into_iter().chain(highest).collect();
    ends.dedup_by(|a, b| a.value == b.value);
    ends
}

/// The worst verdicts of a probe (only the failing ones when `failing`), plus overload, one
/// per line, each indented under its `at V` line.
pub(super) fn verdict_lines(probe: &Probe, failing: bool) -> String {
    let outcomes = worst(probe);
    let shown = || outcomes.iter().filter(|o| !failing || !o.passed);
    let mut parts: Vec<String> = shown().map(said).collect();
    // A failing yes-or-no figure (`stable`) already says the probe could not keep up.
    let says_overload = shown().any(|o| o.boolean && !o.passed);
    if probe.overloaded() && !says_overload {
        parts.push("overloaded".into());
    } else if let Some(reason) = probe.unjudged() {
        parts.push(format!("stability not judged ({reason})"));
    }
    if parts.is_empty() {
        parts.push("no expectation (and not overloaded)".into());
    }
    parts.iter().map(|p| format!("    {p}\n")).collect()
}

/// An outcome as the terminal says it: `label = 572 (at most 2000)`, or `label: yes` for a
/// yes-or-no figure (whose "at least 1" says nothing a person needs).
fn said(o: &ExpectationOutcome) -> String {
    match o.boolean {
        true => format!("{}: {}", o.label, o.value_text()),
        false => format!("{} = {} ({})", o.label, o.value_text(), o.bound),
    }
}

/// The terminal's line on the binding expectation of a plan with an answer, e.g. `binding:
/// regular p99 TTFT SLO = 991 (at most 10000, 90.1% to spare); workers.count = 4 fails it:
/// 40600`.
fn binding_line(plan: &Plan, b: &Binding) -> String {
    let o = &b.at_answer;
    let here = match (b.boolean, o.measured) {
        (false, Some(v)) => format!(
            "{} = {} ({}, {:.1}% to spare)",
            o.label,
            number(v),
            o.bound,
            100.0 * relative_margin(o)
        ),
        _ => said(o),
    };
    let past = match &b.past {
        None => "nothing past the answer in the range fails".to_string(),
        Some(p) if p.failing.is_empty() => format!(
            "{} = {} fails by overload alone",
            plan.parameter,
            format_value(p.value)
        ),
        Some(p) => format!(
            "{} = {} fails it: {}",
            plan.parameter,
            format_value(p.value),
            p.outcome.value_text()
        ),
    };
    format!("binding: {here}; {past}")
}

#[cfg(test)]
mod tests {
    use super::value_range;

    #[test]
    fn a_capacity_axis_shows_answers_that_are_all_equal() {
        let (lo, hi) = value_range(&[3.0, 3.0]);
        assert!(lo <= 0.0 && hi > 3.0, "{lo}..{hi}");
        assert_eq!(value_range(&[2.0, 4.0]), (0.0, 4.2));
        let (lo, hi) = value_range(&[0.0]);
        assert!(lo <= 0.0 && hi > 0.0, "{lo}..{hi}");
        assert_eq!(value_range(&[]), (0.0, 1.0));
    }
}
