//! The `report.html` of `routersim plan`: the answer, the bracket, the binding expectation,
//! every probe with its worst verdicts and the capacity chart, built with
//! [`crate::report::render::html::Page`] from the plans (bytes from data, no file system).

use super::cost::{CostPlan, answer_text};
use super::joint::JointPlan;
use super::output::{
    PlanRow, SplitPlan, binding_of, describe, describe_joint, describe_split, relative_margin,
    worst,
};
use super::{Plan, Probe, format_value};
use crate::report::render::html::{Page, linked_names};
use crate::report::verdict::expect::number;

/// The plan page of `rows` (one search, or a `--for` table) whose directory holds `files`.
pub fn plan_report<S: AsRef<str>, B: AsRef<[u8]>>(
    title: &str,
    facts: &[(String, String)],
    rows: &[PlanRow],
    files: &[(S, B)],
) -> Vec<u8> {
    let mut page = Page::new("plan", title);
    page.facts(facts);
    page.section("answer", "Answer");
    for row in rows {
        page.mono("answer", describe(row).trim_end());
    }
    for (i, row) in rows.iter().enumerate() {
        search_section(&mut page, i, row);
    }
    finish(page, files)
}

/// The page of a joint search (`--minimize A+B`): the pair, the frontier, then each search.
pub fn joint_report<S: AsRef<str>, B: AsRef<[u8]>>(
    title: &str,
    facts: &[(String, String)],
    joint: &JointPlan,
    files: &[(S, B)],
) -> Vec<u8> {
    let mut page = Page::new("plan", title);
    page.facts(facts);
    page.section("answer", "Answer");
    let answer = describe_joint(joint);
    page.mono("answer", answer.lines().last().unwrap_or_default());
    page.section("frontier", "Frontier");
    let header = [joint.first.clone(), format!("fewest {}", joint.second)];
    let rows: Vec<Vec<String>> = joint
        .frontier()
        .into_iter()
        .map(|(a, b)| {
            let b = b.map_or_else(|| "none in range".to_string(), |b| b.to_string());
            vec![a.to_string(), b]
        })
        .collect();
    page.table("frontier", &header, &rows);
    for (i, row) in joint.rows.iter().enumerate() {
        search_section(&mut page, i, row);
    }
    finish(page, files)
}

/// The page of a split plan (`--total A+B=T`): the best split, every split's answer, then
/// each search.
pub fn split_report<S: AsRef<str>, B: AsRef<[u8]>>(
    title: &str,
    facts: &[(String, String)],
    split: &SplitPlan,
    files: &[(S, B)],
) -> Vec<u8> {
    let mut page = Page::new("plan", title);
    page.facts(facts);
    page.section("answer", "Answer");
    let answer = describe_split(split);
    page.mono("answer", answer.lines().last().unwrap_or_default());
    page.section("splits", "Splits");
    let parameter = split.rows.first().map(|r| r.plan.parameter.clone());
    let header = [
        split.total.first.clone(),
        split.total.second.clone(),
        parameter.unwrap_or_default(),
    ];
    let rows: Vec<Vec<String>> = split
        .splits()
        .into_iter()
        .map(|((a, b), answer)| {
            let answer = answer.map_or_else(|| "none in range".to_string(), format_value);
            vec![a.to_string(), b.to_string(), answer]
        })
        .collect();
    page.table("splits", &header, &rows);
    for (i, row) in split.rows.iter().enumerate() {
        search_section(&mut page, i, row);
    }
    finish(page, files)
}

fn finish<S: AsRef<str>, B: AsRef<[u8]>>(mut page: Page, files: &[(S, B)]) -> Vec<u8> {
    page.section("plots", "Capacity chart");
    page.charts(files);
    page.section("files", "Files");
    page.links(&linked_names(files));
    page.finish()
}

/// The page of a plan of cost (`--minimize gpu_hours`): the answer, every probe with its cost
/// and worst verdicts, and the cost chart.
pub fn cost_report<S: AsRef<str>, B: AsRef<[u8]>>(
    title: &str,
    facts: &[(String, String)],
    plan: &CostPlan,
    files: &[(S, B)],
) -> Vec<u8> {
    let mut page = Page::new("plan", title);
    page.facts(facts);
    page.section("answer", "Answer");
    page.mono("answer", answer_text(plan).trim_end());
    page.section("probes", "Probes");
    let labels: Vec<String> = (plan.probes.first())
        .map(|p| worst(&p.probe).into_iter().map(|o| o.label).collect())
        .unwrap_or_default();
    let mut header: Vec<String> = ["probe", &plan.parameter, plan.objective.name()]
        .map(String::from)
        .to_vec();
    header.extend(["feasible", "overloaded"].map(String::from));
    header.extend(labels);
    let rows: Vec<Vec<String>> = (plan.probes.iter().enumerate())
        .map(|(i, p)| {
            let mut row = probe_row(i, &p.probe);
            row.insert(2, number(p.cost));
            row
        })
        .collect();
    page.table("probes-cost", &header, &rows);
    page.section("plots", "Cost chart");
    page.charts(files);
    page.section("files", "Files");
    page.links(&linked_names(files));
    page.finish()
}

/// One search: its bracket, its binding expectation and its probes.
fn search_section(page: &mut Page, index: usize, row: &PlanRow) {
    let plan = &row.plan;
    let heading = match &row.for_value {
        Some((path, value)) => format!("Search at {path} = {value}"),
        None => format!("Search of {}", plan.parameter),
    };
    page.section(&format!("search-{index}"), &heading);
    page.facts(&bracket_facts(plan));
    binding_table(page, index, plan);
    probe_table(page, index, plan);
}

/// The binding expectation: the one that fails first past the answer, its value and
/// headroom at the answer, and its value just past it (see [`binding_of`]).
fn binding_table(page: &mut Page, index: usize, plan: &Plan) {
    let Some(b) = binding_of(plan) else {
        return;
    };
    page.paragraph(
        "The binding expectation: of those that fail just past the answer, the one with the \
         least headroom at the answer (a figure before a yes-or-no one).",
    );
    let o = &b.at_answer;
    let headroom = match (b.boolean, o.measured) {
        (false, Some(_)) => format!("{:.1}%", 100.0 * relative_margin(o)),
        _ => "-".into(),
    };
    let answer = plan.answer.map_or_else(String::new, format_value);
    let (past_value, past_text, failing) = match &b.past {
        None => ("none in range".into(), "-".into(), "-".into()),
        Some(p) => (
            format_value(p.value),
            p.outcome.value_text(),
            match (p.failing.is_empty(), p.overloaded) {
                (true, _) => "overloaded only".to_string(),
                (false, true) => format!("{}; overloaded", p.failing.join("; ")),
                (false, false) => p.failing.join("; "),
            },
        ),
    };
    let header = [
        "expectation",
        "bound",
        &format!("at {} = {answer}", plan.parameter),
        "headroom",
        "past the answer",
        "value there",
        "failing there",
    ]
    .map(String::from);
    let row = vec![
        o.label.clone(),
        if b.boolean {
            "yes".into()
        } else {
            o.bound.to_string()
        },
        o.value_text(),
        headroom,
        past_value,
        past_text,
        failing,
    ];
    page.table(&format!("binding-{index}"), &header, &[row]);
}

fn bracket_facts(plan: &Plan) -> Vec<(String, String)> {
    let value = |v: Option<f64>| v.map_or_else(|| "none".to_string(), format_value);
    vec![
        (
            "goal".into(),
            format!("{} {}", plan.goal.name(), plan.parameter),
        ),
        (
            "range".into(),
            format!(
                "{}..{}",
                format_value(plan.range.0),
                format_value(plan.range.1)
            ),
        ),
        ("answer".into(), value(plan.answer)),
        ("bracket: last infeasible".into(), value(plan.bracket.0)),
        ("bracket: first feasible".into(), value(plan.bracket.1)),
    ]
}

/// Every probe in the order made: its value, verdict, overload and each expectation's worst
/// value over the seeds with its verdict.
fn probe_table(page: &mut Page, index: usize, plan: &Plan) {
    let labels: Vec<String> = plan
        .probes
        .first()
        .map(|p| worst(p).into_iter().map(|o| o.label).collect())
        .unwrap_or_default();
    let mut header: Vec<String> = ["probe", &plan.parameter, "feasible", "overloaded"]
        .map(String::from)
        .to_vec();
    header.extend(labels);
    let rows: Vec<Vec<String>> = plan
        .probes
        .iter()
        .enumerate()
        .map(|(i, p)| probe_row(i, p))
        .collect();
    page.table(&format!("probes-{index}"), &header, &rows);
}

pub(super) fn probe_row(i: usize, probe: &Probe) -> Vec<String> {
    let mut row = vec![
        (i + 1).to_string(),
        format_value(probe.value),
        probe.feasible.to_string(),
        probe.overloaded().to_string(),
    ];
    row.extend(worst(probe).iter().map(|o| {
        let verdict = if o.passed { "PASS" } else { "FAIL" };
        format!("{} {verdict}", o.value_text())
    }));
    row
}
