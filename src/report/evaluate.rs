//! Evaluating a scenario's expectations against its run metrics, and the one-line verdicts.
//!
//! Evaluation assumes [`validate_expectation`](super::expect::validate_expectation) passed; a
//! figure that cannot be measured on this run (a class with fewer than `k` completions, no
//! backlogged service, a companion that was not run) is a failure that says why.

use super::expect::RawExpectation;
use super::metrics::{LatencyMetric, RunMetrics};
use std::collections::BTreeMap;

/// The verdict on one expectation.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectationOutcome {
    /// The expectation's `name`, or a description of its figure.
    pub label: String,
    /// The measured value (after subtracting the companion's for `minus`); `None` when it
    /// could not be measured.
    pub measured: Option<f64>,
    /// The bound as text, e.g. `within [240, 320]`.
    pub bound: String,
    pub passed: bool,
    /// Why the figure could not be measured, if it could not.
    pub reason: Option<String>,
}

/// Evaluates every expectation, in order. `companions` maps each `minus:` value (exactly as
/// written in the scenario) to the metrics of that companion scenario's run.
pub fn evaluate(
    expectations: &[RawExpectation],
    metrics: &RunMetrics,
    companions: &BTreeMap<String, RunMetrics>,
) -> Vec<ExpectationOutcome> {
    expectations
        .iter()
        .map(|e| evaluate_one(e, metrics, companions))
        .collect()
}

fn evaluate_one(
    e: &RawExpectation,
    metrics: &RunMetrics,
    companions: &BTreeMap<String, RunMetrics>,
) -> ExpectationOutcome {
    let measured = measure_with_companion(e, metrics, companions);
    let passed = measured.as_ref().is_ok_and(|&v| bound_holds(e, v));
    ExpectationOutcome {
        label: label(e),
        measured: measured.as_ref().ok().copied(),
        bound: bound_text(e),
        passed,
        reason: measured.err(),
    }
}

fn measure_with_companion(
    e: &RawExpectation,
    metrics: &RunMetrics,
    companions: &BTreeMap<String, RunMetrics>,
) -> Result<f64, String> {
    let own = measure(e, metrics)?;
    let Some(other_name) = &e.minus else {
        return Ok(own);
    };
    let other = companions
        .get(other_name)
        .ok_or_else(|| format!("companion {other_name} was not run"))?;
    let theirs = measure(e, other).map_err(|why| format!("in companion {other_name}: {why}"))?;
    Ok(own - theirs)
}

fn class(metrics: &RunMetrics, name: &str) -> Result<usize, String> {
    metrics
        .class_index(name)
        .ok_or_else(|| format!("the run has no class `{name}`"))
}

fn too_few(metrics: &RunMetrics, class: usize, k: u64) -> String {
    let c = &metrics.classes[class];
    format!(
        "{} completed only {} requests, fewer than {k}",
        c.name, c.completed
    )
}

/// The figure of `e` measured on one run.
fn measure(e: &RawExpectation, m: &RunMetrics) -> Result<f64, String> {
    if let Some(f) = &e.prefix_count {
        return Ok(m.completed_through(class(m, &f.class)?, f.n) as f64);
    }
    if let Some(f) = &e.remaining_when_done {
        let (c, done) = (class(m, &f.class)?, class(m, &f.done)?);
        return m
            .remaining_when_done(c, done, f.k)
            .map(|v| v as f64)
            .ok_or_else(|| too_few(m, done, f.k.unwrap_or(1)));
    }
    if let Some(f) = &e.count_at {
        let (c, when) = (class(m, &f.class)?, class(m, &f.when)?);
        return m
            .count_at(c, when, f.k)
            .map(|v| v as f64)
            .ok_or_else(|| too_few(m, when, f.k));
    }
    if let Some(f) = &e.growth {
        let (c, when) = (class(m, &f.class)?, class(m, &f.when)?);
        return m
            .growth(c, when, f.from, f.to)
            .map(|v| v as f64)
            .ok_or_else(|| too_few(m, when, f.to));
    }
    if let Some(f) = &e.latency {
        let c = class(m, &f.class)?;
        let metric = LatencyMetric::parse(&f.metric)
            .ok_or_else(|| format!("unknown latency metric `{}`", f.metric))?;
        return m
            .latency_ms(c, metric)
            .ok_or_else(|| format!("{} has no {} samples", f.class, metric.kind.name()));
    }
    if let Some(f) = &e.token_share {
        let c = class(m, &f.class)?;
        return m
            .token_share_gap(c)
            .ok_or_else(|| "no service while two or more classes were backlogged".to_string());
    }
    Err("no figure given".to_string())
}

fn bound_holds(e: &RawExpectation, v: f64) -> bool {
    if let Some([lo, hi]) = e.within {
        return lo <= v && v <= hi;
    }
    if let Some(lo) = e.at_least {
        return v >= lo;
    }
    if let Some(hi) = e.at_most {
        return v <= hi;
    }
    if let Some(tolerance) = e.tolerance {
        return v.abs() <= tolerance;
    }
    false
}

/// The bound as text: `within [240, 320]`, `at least 60`, `at most 500`, `within ±0.05`.
pub fn bound_text(e: &RawExpectation) -> String {
    if let Some([lo, hi]) = e.within {
        return format!("within [{}, {}]", number(lo), number(hi));
    }
    if let Some(lo) = e.at_least {
        return format!("at least {}", number(lo));
    }
    if let Some(hi) = e.at_most {
        return format!("at most {}", number(hi));
    }
    if let Some(tolerance) = e.tolerance {
        return format!("within ±{}", number(tolerance));
    }
    "no bound".to_string()
}

/// A number as people write it: integers without a fraction, others to at most 4 decimals.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let fixed = format!("{v:.4}");
    let trimmed = fixed.trim_end_matches('0').trim_end_matches('.');
    if trimmed == "-0" {
        "0".to_string()
    } else {
        trimmed.to_string()
    }
}

fn ordinal(k: u64) -> String {
    let suffix = match (k % 10, k % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{k}{suffix}")
}

/// The expectation's `name`, or a description of its figure (with ` minus OTHER`).
pub fn label(e: &RawExpectation) -> String {
    if let Some(name) = &e.name {
        return name.clone();
    }
    let figure = figure_text(e);
    match &e.minus {
        Some(other) => format!("{figure} minus {other}"),
        None => figure,
    }
}

fn figure_text(e: &RawExpectation) -> String {
    if let Some(f) = &e.prefix_count {
        return format!("{} among first {}", f.class, f.n);
    }
    if let Some(f) = &e.remaining_when_done {
        return match f.k {
            None => format!("{} remaining when {} done", f.class, f.done),
            Some(k) => format!(
                "{} remaining at {}'s {} completion",
                f.class,
                f.done,
                ordinal(k)
            ),
        };
    }
    if let Some(f) = &e.count_at {
        return format!(
            "{} completed at {}'s {} completion",
            f.class,
            f.when,
            ordinal(f.k)
        );
    }
    if let Some(f) = &e.growth {
        return format!(
            "{} completed between {}'s {} and {} completions",
            f.class,
            f.when,
            ordinal(f.from),
            ordinal(f.to)
        );
    }
    if let Some(f) = &e.latency {
        return format!("{} {}", f.class, f.metric);
    }
    if let Some(f) = &e.token_share {
        return format!("{} token share minus ideal (backlogged)", f.class);
    }
    "expectation without a figure".to_string()
}

/// One line per outcome, e.g. `PASS  premium among first 320 = 255  (within [240, 320])`;
/// an unmeasurable figure reads `FAIL  ... = n/a  (bound): why`.
pub fn format_outcome(o: &ExpectationOutcome) -> String {
    let verdict = if o.passed { "PASS" } else { "FAIL" };
    let value = o.measured.map_or_else(|| "n/a".to_string(), number);
    let mut line = format!("{verdict}  {} = {value}  ({})", o.label, o.bound);
    if let Some(reason) = &o.reason {
        line += ": ";
        line += reason;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::expect::validate_expectation;
    use crate::report::test_support::run_fixture;

    fn parse(yaml: &str) -> Vec<RawExpectation> {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn premium_runs() -> (RunMetrics, RunMetrics) {
        let (result, quanta) = run_fixture("premium-weighted");
        let weighted = RunMetrics::compute(&result, &quanta);
        let (result, quanta) = run_fixture("premium-equal");
        (weighted, RunMetrics::compute(&result, &quanta))
    }

    /// Dynamo's nine assertions of tests/router/test_policy_class.py (spec/mock-worker.md §4).
    const EQUAL_ARM: &str = "
- {prefix_count: {class: premium, n: 320}, within: [140, 180]}
- {remaining_when_done: {class: regular, done: premium}, at_most: 20}
";
    const WEIGHTED_ARM: &str = "
- {prefix_count: {class: premium, n: 320}, at_least: 240}
- {prefix_count: {class: regular, n: 320}, at_least: 48}
- {remaining_when_done: {class: regular, done: premium}, within: [220, 260]}
- {prefix_count: {class: premium, n: 320}, minus: premium-equal.yaml, at_least: 60}
- {remaining_when_done: {class: regular, done: premium}, minus: premium-equal.yaml, at_least: 200}
- {count_at: {class: regular, when: premium, k: 80}, at_least: 12}
- {growth: {class: regular, when: premium, from: 80, to: 240}, at_least: 32}
";

    #[test]
    fn dynamo_assertions_pass_on_both_premium_arms() {
        let (weighted, equal) = premium_runs();
        let classes = ["premium".to_string(), "regular".to_string()];
        let companions = BTreeMap::from([("premium-equal.yaml".to_string(), equal.clone())]);
        let mut lines = Vec::new();
        for (arm, yaml, companions) in [
            (&equal, EQUAL_ARM, BTreeMap::new()),
            (&weighted, WEIGHTED_ARM, companions),
        ] {
            let expectations = parse(yaml);
            for e in &expectations {
                validate_expectation(e, &classes).unwrap();
            }
            for o in evaluate(&expectations, arm, &companions) {
                assert!(o.passed, "{}", format_outcome(&o));
                lines.push(format_outcome(&o));
            }
        }
        assert_eq!(lines.len(), 9);
        assert_eq!(
            lines[0],
            "PASS  premium among first 320 = 160  (within [140, 180])"
        );
        assert_eq!(
            lines[1],
            "PASS  regular remaining when premium done = 0  (at most 20)"
        );
        assert_eq!(
            lines[2],
            "PASS  premium among first 320 = 255  (at least 240)"
        );
        assert_eq!(
            lines[6],
            "PASS  regular remaining when premium done minus premium-equal.yaml = 239  (at least 200)"
        );
    }

    #[test]
    fn a_failing_expectation_says_what_it_measured() {
        let (weighted, _) = premium_runs();
        let expectations = parse(
            "
- {prefix_count: {class: premium, n: 320}, within: [300, 320]}
- {name: regular keeps up, count_at: {class: regular, when: premium, k: 400}, at_least: 1}
- {prefix_count: {class: premium, n: 320}, minus: other.yaml, at_least: 0}
",
        );
        let outcomes = evaluate(&expectations, &weighted, &BTreeMap::new());
        let lines: Vec<String> = outcomes.iter().map(format_outcome).collect();
        assert!(outcomes.iter().all(|o| !o.passed));
        assert_eq!(
            lines[0],
            "FAIL  premium among first 320 = 255  (within [300, 320])"
        );
        assert_eq!(
            lines[1],
            "FAIL  regular keeps up = n/a  (at least 1): premium completed only 320 requests, \
             fewer than 400"
        );
        assert_eq!(
            lines[2],
            "FAIL  premium among first 320 minus other.yaml = n/a  (at least 0): companion \
             other.yaml was not run"
        );
        assert_eq!(outcomes[0].measured, Some(255.0));
    }

    #[test]
    fn latency_and_token_share_figures() {
        let (weighted, _) = premium_runs();
        let expectations = parse(
            "
- {latency: {class: premium, metric: ttft_ms_p99}, at_most: 1000000}
- {token_share: {class: premium}, tolerance: 0.05}
- {token_share: {class: regular}, tolerance: 0.05}
",
        );
        let outcomes = evaluate(&expectations, &weighted, &BTreeMap::new());
        for o in &outcomes {
            assert!(o.passed, "{}", format_outcome(o));
        }
        let p = weighted.class_index("premium").unwrap();
        let ttft_p99_ms = weighted.classes[p].latencies.ttft.p99_ns as f64 / 1e6;
        assert_eq!(outcomes[0].measured, Some(ttft_p99_ms));
        assert!(outcomes[1].measured.unwrap().abs() <= 0.05);
        assert_eq!(outcomes[1].bound, "within ±0.05");
    }

    #[test]
    fn numbers_print_as_written() {
        assert_eq!(number(240.0), "240");
        assert_eq!(number(-3.0), "-3");
        assert_eq!(number(0.05), "0.05");
        assert_eq!(number(0.123456), "0.1235");
        assert_eq!(number(-0.00001), "0");
        assert_eq!(ordinal(1), "1st");
        assert_eq!(ordinal(12), "12th");
        assert_eq!(ordinal(22), "22nd");
        assert_eq!(ordinal(103), "103rd");
    }
}
