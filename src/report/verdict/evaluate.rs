//! Evaluating a scenario's typed expectations against its run metrics, the one-line verdicts,
//! and the worst verdict over several seeds.
//!
//! An [`Expectation`] is valid by construction; a figure that cannot be measured on this run
//! (a class with fewer than `k` completions, no backlogged service, a companion that was not
//! run) is a failure that says why.

use super::expect::{Bound, Expectation, Figure, ShareReference};
use crate::mocker::WorkerRole;
use crate::report::measure::fleet::FleetFigures;
use crate::report::measure::metrics::RunMetrics;
use crate::report::measure::sessions::SessionCounts;
use crate::report::measure::slo::LatencyBounds;
use crate::report::verdict::queries::Queries;
use crate::sim::EndStatus;
use std::collections::BTreeMap;

pub use super::expect::number;

/// The verdict on one expectation, and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectationOutcome {
    /// The expectation's `name`, or a description of its figure.
    pub label: String,
    /// The measured value (after subtracting the companion's for `minus`); `None` when it
    /// could not be measured.
    pub measured: Option<f64>,
    pub bound: Bound,
    pub passed: bool,
    /// Why the figure could not be measured, if it could not.
    pub reason: Option<String>,
    /// The seed of the run the value was measured on; after [`aggregate`], the seed that gave
    /// the worst value.
    pub seed: u64,
    /// Wall-clock seconds of the run(s) behind the verdict (simulation and measurement,
    /// companions included); [`aggregate`] sums them over seeds.
    pub wall_time_s: f64,
    /// The figure is a yes (1) or a no (0), as `stable` is: said as `yes`/`no`, since its
    /// "at least 1" says nothing a person needs.
    pub boolean: bool,
}

impl ExpectationOutcome {
    /// The measured value as a person reads it: a number, `yes`/`no`, or `n/a`.
    pub fn value_text(&self) -> String {
        match (self.measured, self.boolean) {
            (None, _) => "n/a".into(),
            (Some(v), true) => if v >= 1.0 { "yes" } else { "no" }.into(),
            (Some(v), false) => number(v),
        }
    }

    /// The bound as a person reads it: `at most 2000`, or `yes` for a yes-or-no figure.
    pub fn bound_text(&self) -> String {
        match self.boolean {
            true => "yes".into(),
            false => self.bound.to_string(),
        }
    }
}

/// The facts about a run that a verdict reports besides its value.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct RunFacts {
    pub seed: u64,
    /// Wall-clock seconds the run took (only reports read it: it never affects a verdict).
    pub wall_time_s: f64,
}

/// Evaluates every expectation, in order. `companions` maps each `minus:` value (exactly as
/// written in the scenario) to the metrics of that companion scenario's run.
pub fn evaluate(
    expectations: &[Expectation],
    metrics: &RunMetrics,
    companions: &BTreeMap<String, RunMetrics>,
    run: RunFacts,
) -> Vec<ExpectationOutcome> {
    expectations
        .iter()
        .map(|e| evaluate_one(e, metrics, companions, run))
        .collect()
}

fn evaluate_one(
    e: &Expectation,
    metrics: &RunMetrics,
    companions: &BTreeMap<String, RunMetrics>,
    run: RunFacts,
) -> ExpectationOutcome {
    let measured = measure_with_companion(e, metrics, companions);
    ExpectationOutcome {
        label: e.label(),
        measured: measured.as_ref().ok().copied(),
        bound: e.bound(),
        passed: measured.as_ref().is_ok_and(|&v| e.bound().holds(v)),
        reason: measured
            .err()
            .or_else(|| overload_note(e.figure(), metrics)),
        seed: run.seed,
        wall_time_s: run.wall_time_s,
        boolean: matches!(e.figure(), Figure::Stable),
    }
}

/// The worst outcome of each expectation over seeds: `per_seed[s][i]` is expectation `i` on
/// seed `s` (every seed evaluates the same expectations in the same order). A failure is worse
/// than a pass, an unmeasurable figure worse than any value, and otherwise the smaller
/// [`Bound::margin`] is worse; ties keep the earlier seed. Wall times are summed, because the
/// verdict took every seed's run.
pub fn aggregate(per_seed: &[Vec<ExpectationOutcome>]) -> Vec<ExpectationOutcome> {
    let Some(first) = per_seed.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let runs = per_seed.iter().filter_map(|outcomes| outcomes.get(i));
            let mut worst = runs.clone().reduce(worse_of).unwrap_or(&first[i]).clone();
            worst.wall_time_s = runs.map(|o| o.wall_time_s).sum();
            worst
        })
        .collect()
}

/// Each expectation's outcome at the `q`-quantile of its seeds, ordered from best to worst:
/// it passes when at least a fraction `q` of the seeds pass (for `q` = 1, the worst seed, as
/// [`aggregate`]). Wall times are summed.
pub fn aggregate_quantile(per_seed: &[Vec<ExpectationOutcome>], q: f64) -> Vec<ExpectationOutcome> {
    assert!(q > 0.0 && q <= 1.0, "quantile {q} outside (0, 1]");
    let Some(first) = per_seed.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let mut runs: Vec<&ExpectationOutcome> = per_seed
                .iter()
                .filter_map(|outcomes| outcomes.get(i))
                .collect();
            runs.sort_by(|a, b| severity(a).partial_cmp(&severity(b)).expect("no NaN"));
            let rank = ((q * runs.len() as f64).ceil() as usize).clamp(1, runs.len());
            let mut chosen = runs[rank - 1].clone();
            chosen.wall_time_s = runs.iter().map(|o| o.wall_time_s).sum();
            chosen
        })
        .collect()
}

/// The worse of two outcomes of one expectation; `a` on a tie.
fn worse_of<'a>(a: &'a ExpectationOutcome, b: &'a ExpectationOutcome) -> &'a ExpectationOutcome {
    if severity(b) > severity(a) { b } else { a }
}

/// Larger is worse: failing before passing, then unmeasured (or NaN) before any value, then
/// the smallest margin.
fn severity(o: &ExpectationOutcome) -> (bool, f64) {
    let margin = o
        .measured
        .map(|v| o.bound.margin(v))
        .filter(|m| !m.is_nan());
    (!o.passed, -margin.unwrap_or(f64::NEG_INFINITY))
}

fn measure_with_companion(
    e: &Expectation,
    metrics: &RunMetrics,
    companions: &BTreeMap<String, RunMetrics>,
) -> Result<f64, String> {
    let own = measure(e.figure(), metrics)?;
    let Some(other) = e.companion() else {
        return Ok(own);
    };
    let name = &other.file;
    let other = companions
        .get(name)
        .ok_or_else(|| format!("companion {name} was not run"))?;
    let theirs = measure(e.figure(), other).map_err(|why| format!("in companion {name}: {why}"))?;
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

/// The figure measured on one run.
fn measure(figure: &Figure, m: &RunMetrics) -> Result<f64, String> {
    match figure {
        Figure::PrefixCount { class: c, n } => Ok(m.completed_through(class(m, c)?, *n) as f64),
        Figure::PrefixShare { class: c, n } => prefix_share(m, class(m, c)?, *n),
        Figure::RemainingWhenDone { class: c, done, k } => {
            let (c, done) = (class(m, c)?, class(m, done)?);
            m.remaining_when_done(c, done, *k)
                .map(|v| v as f64)
                .ok_or_else(|| too_few(m, done, k.unwrap_or(1)))
        }
        Figure::CountAt { class: c, when, k } => {
            let (c, when) = (class(m, c)?, class(m, when)?);
            m.count_at(c, when, *k)
                .map(|v| v as f64)
                .ok_or_else(|| too_few(m, when, *k))
        }
        Figure::Growth {
            class: c,
            when,
            from,
            to,
        } => {
            let (c, when) = (class(m, c)?, class(m, when)?);
            m.growth(c, when, *from, *to)
                .map(|v| v as f64)
                .ok_or_else(|| too_few(m, when, *to))
        }
        Figure::Latency { class: c, metric } => m
            .latency_ms(class(m, c)?, *metric)
            .ok_or_else(|| format!("{c} has no {} samples", metric.kind.name())),
        Figure::TokenShare {
            class: c,
            reference,
        } => token_share(m, class(m, c)?, reference),
        Figure::Attainment {
            class: c,
            ttft_ms,
            e2e_ms,
        } => {
            let bounds = LatencyBounds {
                ttft_ns: ttft_ms.map(ms_to_ns),
                e2e_ns: e2e_ms.map(ms_to_ns),
            };
            m.attainment(class(m, c)?, bounds)
                .ok_or_else(|| format!("{c} had no requests"))
        }
        Figure::Throughput { class: c, metric } => {
            let c = c.as_deref().map(|c| class(m, c)).transpose()?;
            m.window_throughput(c, *metric)
                .ok_or_else(|| "no completion after the first arrival".to_string())
        }
        Figure::Stable => stable(m),
        Figure::CountStatus { class: c, status } => {
            let c = c.as_deref().map(|c| class(m, c)).transpose()?;
            Ok(count_status(m, c, *status) as f64)
        }
        Figure::Migrations { class: c } => {
            let c = c.as_deref().map(|c| class(m, c)).transpose()?;
            Ok(c.map_or(m.migrations, |c| m.classes[c].migrations) as f64)
        }
        Figure::GpuHours { role } => Ok(fleet_figures(m, *role).gpu_hours),
        Figure::PeakWorkers { role } => Ok(fleet_figures(m, *role).peak_workers as f64),
        Figure::CacheHit { class: c } => {
            let c = c.as_deref().map(|c| class(m, c)).transpose()?;
            let counts = match c {
                Some(c) => m.classes[c].sessions,
                None => SessionCounts::sum(m.classes.iter().map(|c| &c.sessions)),
            };
            counts
                .cache_hit()
                .ok_or_else(|| "no completed request with input tokens".to_string())
        }
    }
}

/// Class `c`'s backlogged token share, as `reference` reads it: its gap from the ideal, its
/// gap from a fixed target, or the share itself.
fn token_share(m: &RunMetrics, c: usize, reference: &ShareReference) -> Result<f64, String> {
    let unmeasured = || "no service while two or more classes were backlogged".to_string();
    match reference {
        ShareReference::Ideal => m.token_share_gap(c).ok_or_else(unmeasured),
        ShareReference::Target(target) => {
            let (share, _) = m.backlogged_shares(c).ok_or_else(unmeasured)?;
            Ok(share - target)
        }
        ShareReference::Absolute => m
            .backlogged_shares(c)
            .map(|(share, _)| share)
            .ok_or_else(unmeasured),
    }
}

/// Requests of `class` (every request for `None`) that ended with `status`. Counts cover the
/// whole run, warmup included, as conservation does.
fn count_status(m: &RunMetrics, class: Option<usize>, status: EndStatus) -> u64 {
    let (pending, completed, rejected, cancelled, aborted) = match class {
        Some(c) => {
            let c = &m.classes[c];
            (c.pending, c.completed, c.rejected, c.cancelled, c.aborted)
        }
        None => (m.pending, m.completed, m.rejected, m.cancelled, m.aborted),
    };
    match status {
        EndStatus::Pending => pending,
        EndStatus::Completed => completed,
        EndStatus::Rejected => rejected,
        EndStatus::Cancelled => cancelled,
        EndStatus::Aborted => aborted,
    }
}

/// A bound in ms as whole ns (rounded, so that a bound of 0.5 ns is not lost).
fn ms_to_ns(v: f64) -> u64 {
    (v * 1e6).round() as u64
}

/// 1 for a run that kept up, 0 for an overloaded one; a run too short to judge fails with
/// its reason, because a gate that demands stability must not pass on no evidence.
fn stable(m: &RunMetrics) -> Result<f64, String> {
    match (m.stability.overloaded, &m.stability.reason) {
        (Some(overloaded), _) => Ok(if overloaded { 0.0 } else { 1.0 }),
        (None, reason) => Err(reason.clone().unwrap_or_default()),
    }
}

/// Why a measured stability figure failed: the overload it saw.
fn overload_note(figure: &Figure, m: &RunMetrics) -> Option<String> {
    let warning = (figure == &Figure::Stable).then(|| m.stability.warning())??;
    Some(warning.trim_start_matches("warning: ").to_string())
}

/// `class`'s share of the first `n` completions. Unlike `prefix_count`, which counts what
/// there is, a share of fewer than `n` completions would claim more than the run showed.
fn prefix_share(m: &RunMetrics, class: usize, n: u64) -> Result<f64, String> {
    let completed = m.completions.len() as u64;
    if completed < n {
        return Err(format!(
            "the run completed only {completed} requests, fewer than {n}"
        ));
    }
    Ok(m.completed_through(class, n) as f64 / n as f64)
}

/// One line per outcome, e.g. `PASS  premium among first 320 = 255  (within [240, 320])`;
/// an unmeasurable figure reads `FAIL  ... = n/a  (bound): why`.
pub fn format_outcome(o: &ExpectationOutcome) -> String {
    let verdict = if o.passed { "PASS" } else { "FAIL" };
    let (mut line, before_reason) = match o.boolean {
        true => (format!("{verdict}  {}: {}", o.label, o.value_text()), ", "),
        false => {
            let said = format!("{verdict}  {} = {}  ({})", o.label, o.value_text(), o.bound);
            (said, ": ")
        }
    };
    if let Some(reason) = &o.reason {
        line += before_reason;
        line += reason;
    }
    line
}

/// The fleet figures of `role`'s workers (every worker for `None`; a role without workers
/// cost nothing).
fn fleet_figures(m: &RunMetrics, role: Option<WorkerRole>) -> FleetFigures {
    let Some(role) = role else {
        return m.fleet.all;
    };
    let of_role = m.fleet.roles.iter().find(|(r, _)| *r == role);
    of_role.map(|(_, f)| *f).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::{done, result_of, run_fixture};
    use crate::report::verdict::expect::RawExpectation;
    use crate::scheduling::scheduler::DispatchPath;
    use crate::sim::{AbortReason, CancelReason, Status};

    const RUN: RunFacts = RunFacts {
        seed: 7,
        wall_time_s: 0.5,
    };

    fn parse(yaml: &str) -> Vec<Expectation> {
        let raw: Vec<RawExpectation> = serde_saphyr::from_str(yaml).unwrap();
        let classes = ["premium".to_string(), "regular".to_string()];
        raw.iter()
            .map(|e| Expectation::parse(e, &classes).unwrap_or_else(|err| panic!("{err}")))
            .collect()
    }

    fn premium_runs() -> (RunMetrics, RunMetrics) {
        let (result, quanta) = run_fixture("premium-weighted");
        let weighted = RunMetrics::compute(&result, &quanta);
        let (result, quanta) = run_fixture("premium-equal");
        (weighted, RunMetrics::compute(&result, &quanta))
    }

    /// The nine assertions of Dynamo's policy-class test
    /// (docs/scheduling.md#the-policy-class-test).
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
        let companions = BTreeMap::from([("premium-equal.yaml".to_string(), equal.clone())]);
        let mut lines = Vec::new();
        for (arm, yaml, companions) in [
            (&equal, EQUAL_ARM, BTreeMap::new()),
            (&weighted, WEIGHTED_ARM, companions),
        ] {
            for o in evaluate(&parse(yaml), arm, &companions, RUN) {
                assert!(o.passed, "{}", format_outcome(&o));
                assert_eq!((o.seed, o.wall_time_s), (7, 0.5));
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
        let outcomes = evaluate(&expectations, &weighted, &BTreeMap::new(), RUN);
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
        let outcomes = evaluate(&expectations, &weighted, &BTreeMap::new(), RUN);
        for o in &outcomes {
            assert!(o.passed, "{}", format_outcome(o));
        }
        let p = weighted.class_index("premium").unwrap();
        let ttft_p99_ms = weighted.classes[p].latencies.ttft.p99_ns as f64 / 1e6;
        assert_eq!(outcomes[0].measured, Some(ttft_p99_ms));
        assert!(outcomes[1].measured.unwrap().abs() <= 0.05);
        assert_eq!(outcomes[1].bound, Bound::Tolerance(0.05));
    }

    /// Completion order premium, regular, premium, premium, regular (rows 0..5, 1 ms apart).
    fn hand_built_run() -> RunMetrics {
        let classes = [0, 1, 0, 0, 1];
        let records = classes
            .iter()
            .enumerate()
            .map(|(row, &class)| {
                done(
                    row as u64,
                    class,
                    DispatchPath::Queued,
                    [0, 0, row as u64 + 1],
                )
            })
            .collect();
        RunMetrics::compute(&result_of(&["premium", "regular"], records), &[1, 1])
    }

    #[test]
    fn attainment_and_throughput_on_a_hand_built_run() {
        // Premium rows 0, 2, 3 end at 1, 3, 4 ms; regular rows 1, 4 at 2, 5 ms; all arrive at 0.
        let run = hand_built_run();
        let outcomes = evaluate(
            &parse(
                "
- {attainment: {class: premium, ttft_ms: 3}, at_least: 0.6}
- {attainment: {class: premium, ttft_ms: 3, e2e_ms: 1}, at_least: 0.5}
- {attainment: {class: regular, e2e_ms: 5}, within: [1, 1]}
- {throughput: {class: premium, metric: throughput_rps}, at_least: 600}
- {throughput: {metric: throughput_rps}, at_least: 1001}
- {throughput: {class: regular, metric: output_tokens_per_s}, within: [400, 400]}
",
            ),
            &run,
            &BTreeMap::new(),
            RUN,
        );
        let values: Vec<_> = outcomes.iter().map(|o| o.measured.unwrap()).collect();
        let want = [2.0 / 3.0, 1.0 / 3.0, 1.0, 600.0, 1000.0, 400.0];
        for (got, want) in values.iter().zip(want) {
            assert!((got - want).abs() < 1e-9, "{values:?}");
        }
        let passed: Vec<_> = outcomes.iter().map(|o| o.passed).collect();
        assert_eq!(passed, [true, false, true, true, false, true]);
        assert_eq!(
            format_outcome(&outcomes[4]),
            "FAIL  total throughput_rps = 1000  (at least 1001)"
        );
    }

    #[test]
    fn cache_hit_is_measured_per_class_and_over_all() {
        let records: Vec<_> = (0..4u64)
            .map(|row| {
                let mut r = done(row, (row % 2) as usize, DispatchPath::Immediate, [0, 0, 1]);
                r.reused_input_tokens = 25 * row as u32;
                r
            })
            .collect();
        let run = RunMetrics::compute(&result_of(&["premium", "regular"], records), &[1, 1]);
        let outcomes = evaluate(
            &parse(
                "
- {cache_hit: {class: premium}, at_least: 0.25}
- {cache_hit: {class: regular}, at_least: 0.6}
- {cache_hit: {}, within: [0.375, 0.375]}
",
            ),
            &run,
            &BTreeMap::new(),
            RUN,
        );
        let values: Vec<_> = outcomes.iter().map(|o| o.measured).collect();
        // premium reused 0 + 50 of 200 tokens, regular 25 + 75: 150 of 400 in all.
        assert_eq!(values, [Some(0.25), Some(0.5), Some(0.375)]);
        let passed: Vec<_> = outcomes.iter().map(|o| o.passed).collect();
        assert_eq!(passed, [true, false, true]);
    }

    #[test]
    fn count_status_and_migrations_count_each_ending_per_class_and_in_all() {
        // Premium: completed, aborted, cancelled (after 2 moves); regular: completed (after 1
        // move), rejected, aborted.
        let ended = [
            (0, Status::Completed, 0),
            (0, Status::Aborted(AbortReason::WorkerDown), 0),
            (0, Status::Cancelled(CancelReason::ClientCancel), 2),
            (1, Status::Completed, 1),
            (1, crate::report::test_support::rejected(), 0),
            (1, Status::Aborted(AbortReason::WorkerDown), 0),
        ];
        let records = ended
            .into_iter()
            .enumerate()
            .map(|(row, (class, status, migrations))| {
                let row = row as u64;
                let mut r = done(row, class, DispatchPath::Queued, [0, 0, row + 1]);
                if status != Status::Completed {
                    (r.first_token, r.path) = (None, None);
                }
                r.status = status;
                if migrations > 0 {
                    r.rare_mut().migrations = migrations;
                }
                r
            })
            .collect();
        let run = RunMetrics::compute(&result_of(&["premium", "regular"], records), &[1, 1]);
        let outcomes = evaluate(
            &parse(
                "
- {count_status: {class: premium, status: completed}, at_least: 1}
- {count_status: {class: premium, status: aborted}, at_most: 0}
- {count_status: {class: premium, status: cancelled}, within: [1, 1]}
- {count_status: {class: regular, status: rejected}, at_most: 1}
- {count_status: {status: aborted}, at_least: 2}
- {count_status: {status: completed}, at_least: 3}
- {migrations: {class: premium}, at_most: 2}
- {migrations: {class: regular}, at_least: 1}
- {migrations: {}, within: [3, 3]}
",
            ),
            &run,
            &BTreeMap::new(),
            RUN,
        );
        let values: Vec<_> = outcomes.iter().map(|o| o.measured).collect();
        let want = [1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 1.0, 3.0].map(Some);
        assert_eq!(values, want);
        let passed: Vec<_> = outcomes.iter().map(|o| o.passed).collect();
        assert_eq!(
            passed,
            [true, false, true, true, true, false, true, true, true]
        );
        assert_eq!(
            format_outcome(&outcomes[1]),
            "FAIL  premium aborted requests = 1  (at most 0)"
        );
        let companions = BTreeMap::from([("calm.yaml".to_string(), run.clone())]);
        let yaml = "[{count_status: {status: aborted}, minus: calm.yaml, within: [0, 0]}]";
        assert_eq!(
            evaluate(&parse(yaml), &run, &companions, RUN)[0].measured,
            Some(0.0)
        );
    }

    #[test]
    fn gpu_hours_and_peak_workers_count_the_fleet_per_role_and_in_all() {
        use crate::mocker::WorkerRole;
        use crate::sim::WorkerLife;
        use crate::time::SimTime;
        let records = vec![done(0, 0, DispatchPath::Queued, [0, 0, 3_600_000])];
        let mut result = result_of(&["premium"], records);
        let life = |role, gpus, asked_s: u64| WorkerLife {
            pool: 0,
            role,
            gpus,
            asked: SimTime::from_ns(asked_s * 1_000_000_000),
            ready: None,
            draining: None,
            gone: None,
        };
        // A run of one hour: a prefill worker of 2 GPUs all along, decode workers of 4 GPUs
        // from 0 and from half an hour.
        result.worker_lives = vec![
            life(WorkerRole::Prefill, 2, 0),
            life(WorkerRole::Decode, 4, 0),
            life(WorkerRole::Decode, 4, 1_800),
        ];
        let run = RunMetrics::compute(&result, &[1]);
        let outcomes = evaluate(
            &parse(
                "
- {gpu_hours: {}, at_most: 8}
- {gpu_hours: {role: decode}, at_most: 5}
- {peak_workers: {}, within: [3, 3]}
- {peak_workers: {role: prefill}, at_most: 0}
- {gpu_hours: {role: aggregated}, at_most: 0}
",
            ),
            &run,
            &BTreeMap::new(),
            RUN,
        );
        let values: Vec<_> = outcomes.iter().map(|o| o.measured).collect();
        assert_eq!(values, [8.0, 6.0, 3.0, 1.0, 0.0].map(Some));
        let passed: Vec<_> = outcomes.iter().map(|o| o.passed).collect();
        assert_eq!(passed, [true, false, true, false, true]);
        assert_eq!(
            format_outcome(&outcomes[1]),
            "FAIL  decode GPU-hours = 6  (at most 5)"
        );
    }

    /// `n` requests 10 ms apart on one class, each taking `service(i)` ms.
    fn open_loop_run(n: u64, service: impl Fn(u64) -> u64) -> RunMetrics {
        let records = (0..n)
            .map(|i| {
                done(
                    i,
                    0,
                    DispatchPath::Queued,
                    [10 * i, 10 * i, 10 * i + service(i)],
                )
            })
            .collect();
        RunMetrics::compute(&result_of(&["premium", "regular"], records), &[1, 1])
    }

    #[test]
    fn stable_passes_a_steady_run_and_fails_an_overloaded_or_short_one() {
        let stable = parse("- {stable: true}");
        let judge = |m: &RunMetrics| evaluate(&stable, m, &BTreeMap::new(), RUN).remove(0);
        let steady = judge(&open_loop_run(100, |_| 25));
        assert!(steady.passed, "{}", format_outcome(&steady));
        assert_eq!((steady.measured, steady.reason), (Some(1.0), None));
        let overloaded = judge(&open_loop_run(100, |i| 5 * i + 15));
        assert!(!overloaded.passed);
        assert_eq!(overloaded.measured, Some(0.0));
        let line = format_outcome(&overloaded);
        assert!(
            line.starts_with(
                "FAIL  keeps up with the offered load: no, overloaded: requests in the system \
                 grew from "
            ),
            "{line}"
        );
        let short = judge(&open_loop_run(10, |_| 25));
        assert!(!short.passed);
        assert_eq!(
            short.reason.as_deref(),
            Some("too short to judge: 10 requests, fewer than 50")
        );
    }

    #[test]
    fn prefix_share_is_the_fraction_of_the_first_n_completions() {
        let run = hand_built_run();
        let outcomes = evaluate(
            &parse(
                "
- {prefix_share: {class: premium, n: 4}, at_least: 0.75}
- {prefix_share: {class: regular, n: 4}, at_least: 0.5}
- {prefix_share: {class: premium, n: 5}, within: [0.6, 0.6]}
- {prefix_share: {class: premium, n: 2}, at_most: 0.5}
- {prefix_share: {class: premium, n: 6}, at_least: 0}
",
            ),
            &run,
            &BTreeMap::new(),
            RUN,
        );
        let values: Vec<_> = outcomes.iter().map(|o| o.measured).collect();
        assert_eq!(values, [Some(0.75), Some(0.25), Some(0.6), Some(0.5), None]);
        let passed: Vec<_> = outcomes.iter().map(|o| o.passed).collect();
        assert_eq!(passed, [true, false, true, true, false]);
        assert_eq!(
            format_outcome(&outcomes[1]),
            "FAIL  regular share of first 4 = 0.25  (at least 0.5)"
        );
        assert_eq!(
            outcomes[4].reason.as_deref(),
            Some("the run completed only 5 requests, fewer than 6")
        );
    }

    #[test]
    fn prefix_share_minus_a_companion_is_a_difference_of_fractions() {
        let run = hand_built_run();
        let companions = BTreeMap::from([("other.yaml".to_string(), run.clone())]);
        let yaml = "[{prefix_share: {class: premium, n: 4}, minus: other.yaml, within: [0, 0]}]";
        let outcomes = evaluate(&parse(yaml), &run, &companions, RUN);
        assert_eq!(
            (outcomes[0].measured, outcomes[0].passed),
            (Some(0.0), true)
        );
    }

    fn outcome(measured: Option<f64>, bound: Bound, seed: u64) -> ExpectationOutcome {
        ExpectationOutcome {
            label: "x".into(),
            measured,
            bound,
            passed: measured.is_some_and(|v| bound.holds(v)),
            reason: measured.is_none().then(|| "unmeasured".to_string()),
            seed,
            wall_time_s: 1.5,
            boolean: false,
        }
    }

    #[test]
    fn aggregate_keeps_each_expectations_worst_seed() {
        let at_least = Bound::AtLeast(240.0);
        let within = Bound::Within { lo: 0.0, hi: 10.0 };
        let per_seed: Vec<Vec<ExpectationOutcome>> = [
            (0, Some(255.0), Some(5.0)),
            (1, Some(253.0), Some(9.0)),
            (2, Some(254.0), Some(1.0)),
        ]
        .into_iter()
        .map(|(seed, a, b)| vec![outcome(a, at_least, seed), outcome(b, within, seed)])
        .collect();
        let worst = aggregate(&per_seed);
        assert_eq!(worst.len(), 2);
        assert_eq!((worst[0].measured, worst[0].seed), (Some(253.0), 1));
        assert_eq!((worst[1].measured, worst[1].seed), (Some(9.0), 1));
        assert!(worst.iter().all(|o| o.passed));
        assert_eq!(worst[0].wall_time_s, 4.5, "the verdict took three runs");
    }

    #[test]
    fn aggregate_prefers_failures_then_unmeasured_then_the_earliest_tie() {
        let bound = Bound::AtMost(10.0);
        let per_seed = vec![
            vec![outcome(Some(9.0), bound, 0), outcome(Some(3.0), bound, 0)],
            vec![outcome(None, bound, 1), outcome(Some(3.0), bound, 1)],
            vec![outcome(Some(12.0), bound, 2), outcome(Some(3.0), bound, 2)],
        ];
        let worst = aggregate(&per_seed);
        assert_eq!((worst[0].seed, worst[0].passed), (1, false));
        assert_eq!(worst[1].seed, 0, "a tie keeps the first seed");
        let failing_value = vec![per_seed[0].clone(), per_seed[2].clone()];
        assert_eq!(aggregate(&failing_value)[0].measured, Some(12.0));
        assert!(aggregate(&[]).is_empty());
    }
}
