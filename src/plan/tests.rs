//! Plan tests: the search on synthetic feasibility (integer and real, both goals, edges), and
//! the report of probes that contradict monotonicity.

use super::search::{Found, Search};
use super::*;

/// A probe with no runs and the given verdict.
fn probe(value: f64, feasible: bool) -> Probe {
    Probe {
        value,
        runs: Vec::new(),
        feasible,
    }
}

/// Runs the search over `range` with `feasible` deciding each value.
fn search(
    goal: Goal,
    integer: bool,
    range: (f64, f64),
    feasible: impl Fn(f64) -> bool,
) -> (Found, Vec<Probe>) {
    let mut probe_fn = |v: f64| Ok(probe(v, feasible(v)));
    let mut s = Search::new(&mut probe_fn, goal, integer, 0.01);
    let found = s.run(range).unwrap();
    (found, s.probes)
}

#[test]
fn integer_minimize_finds_the_fewest_feasible_with_few_probes() {
    for need in [1u32, 2, 7, 33, 64] {
        let ((answer, bracket), probes) =
            search(Goal::Minimize, true, (1.0, 64.0), |v| v >= f64::from(need));
        assert_eq!(answer, Some(f64::from(need)), "need {need}");
        if need > 1 {
            assert_eq!(bracket, (Some(f64::from(need - 1)), Some(f64::from(need))));
        }
        assert!(probes.len() <= 14, "need {need}: {} probes", probes.len());
        assert!(
            probes.iter().all(|p| p.value.fract() == 0.0),
            "whole numbers only"
        );
    }
}

#[test]
fn integer_maximize_finds_the_most_feasible() {
    for most in [1u32, 13, 64] {
        let ((answer, _), _) = search(Goal::Maximize, true, (1.0, 64.0), |v| v <= f64::from(most));
        assert_eq!(answer, Some(f64::from(most)));
    }
}

#[test]
fn real_maximize_bisects_to_the_precision_on_the_feasible_side() {
    let ((answer, (bad, good)), _) = search(Goal::Maximize, false, (1.0, 200.0), |v| v <= 57.3);
    let answer = answer.unwrap();
    assert!((57.3 * 0.99..=57.3).contains(&answer), "{answer}");
    assert_eq!(good, Some(answer));
    assert!(bad.unwrap() > 57.3);
}

#[test]
fn nothing_feasible_has_no_answer() {
    let ((answer, bracket), _) = search(Goal::Minimize, true, (1.0, 8.0), |_| false);
    assert_eq!((answer, bracket), (None, (Some(8.0), None)));
    let ((answer, bracket), probes) = search(Goal::Maximize, false, (1.0, 8.0), |_| false);
    assert_eq!((answer, bracket), (None, (Some(1.0), None)));
    let values: Vec<f64> = probes.iter().map(|p| p.value).collect();
    assert_eq!(
        values,
        [1.0, 8.0, 2.0, 4.0],
        "both ends, then the steps between"
    );
}

#[test]
fn both_ends_are_probed_before_any_other_value() {
    for goal in [Goal::Minimize, Goal::Maximize] {
        for integer in [true, false] {
            let (_, probes) = search(goal, integer, (1.0, 64.0), |v| v <= 20.0);
            assert_eq!(probes[0].value, 1.0, "{goal:?} integer {integer}");
            assert_eq!(probes[1].value, 64.0, "{goal:?} integer {integer}");
        }
    }
}

#[test]
fn maximize_answers_a_feasible_far_end_when_the_low_end_fails() {
    // More workers always help: only the far end decides a maximize.
    let ((answer, bracket), probes) = search(Goal::Maximize, true, (1.0, 16.0), |v| v >= 5.0);
    assert_eq!((answer, bracket), (Some(16.0), (None, Some(16.0))));
    assert_eq!(
        contradictions(&probes, Goal::Maximize),
        vec![(16.0, 1.0)],
        "the failing low end below a feasible far end is not monotone"
    );
}

#[test]
fn maximize_with_both_ends_infeasible_finds_a_feasible_middle() {
    // Too short to judge at the lowest rates, overloaded above 54.7.
    let window = |v: f64| (1.5..=54.7).contains(&v);
    let ((answer, (bad, good)), probes) = search(Goal::Maximize, false, (1.0, 400.0), window);
    let answer = answer.expect("a feasible rate between the ends");
    assert!((54.7 * 0.99..=54.7).contains(&answer), "{answer}");
    assert_eq!(good, Some(answer));
    assert!(bad.unwrap() > 54.7);
    let found = contradictions(&probes, Goal::Maximize);
    assert!(
        !found.is_empty() && found.iter().all(|c| c.1 == 1.0),
        "the failing low end is reported: {found:?}"
    );
}

#[test]
fn minimize_with_both_ends_infeasible_finds_a_feasible_middle() {
    let ((answer, bracket), probes) = search(Goal::Minimize, true, (1.0, 64.0), |v| {
        (5.0..=40.0).contains(&v)
    });
    assert_eq!((answer, bracket), (Some(5.0), (Some(4.0), Some(5.0))));
    assert!(
        contradictions(&probes, Goal::Minimize)
            .iter()
            .all(|c| c.1 == 64.0)
    );
}

/// Runs a real search to `precision` and returns the answer and the number of probes.
fn real_search(
    goal: Goal,
    range: (f64, f64),
    precision: f64,
    feasible: impl Fn(f64) -> bool,
) -> (Option<f64>, usize) {
    let mut probe_fn = |v: f64| Ok(probe(v, feasible(v)));
    let mut s = Search::new(&mut probe_fn, goal, false, precision);
    let (answer, _) = s.run(range).expect("the search ends within its probes");
    (answer, s.probes.len())
}

#[test]
fn bisection_at_the_finest_precision_ends_within_the_probe_bound() {
    let finest = finest_precision(10.0, 400.0);
    assert_eq!(finest, 2.0 * f64::EPSILON);
    for threshold in [54.7, 64.0, 10.0 + 1e-12, 400.0 - 1e-12] {
        let (answer, probes) =
            real_search(Goal::Maximize, (10.0, 400.0), finest, |v| v <= threshold);
        let answer = answer.unwrap();
        assert!(answer <= threshold && threshold - answer <= 4.0 * finest * threshold);
        assert!(probes <= MAX_PROBES, "{probes} probes");
    }
}

#[test]
fn a_real_answer_at_zero_is_found_to_the_range_scale() {
    // Any positive value passes: a precision relative to the answer alone would halve
    // towards 0 until the probes run out.
    let (answer, probes) = real_search(Goal::Minimize, (-1.0, 1.0), 0.01, |v| v > 0.0);
    let answer = answer.unwrap();
    assert!(answer > 0.0 && answer <= 0.01 * 2.0 / 1024.0, "{answer}");
    assert!(probes < 30, "{probes} probes");
    let (answer, _) = real_search(Goal::Maximize, (0.0, 1.0), 0.01, |v| v <= 0.0);
    assert_eq!(answer, Some(0.0));
}

#[test]
fn an_integer_search_at_the_largest_ends_stays_exact() {
    let top = checks::MAX_INTEGER_END;
    let ((answer, bracket), probes) =
        search(Goal::Minimize, true, (top - 1e6, top), |v| v >= top - 3.0);
    assert_eq!(
        (answer, bracket),
        (Some(top - 3.0), (Some(top - 4.0), Some(top - 3.0)))
    );
    assert!(probes.iter().all(|p| p.value.fract() == 0.0));
    // The widest range needs more probes than a search may make: an error, not a hang.
    let mut probe_fn = |v: f64| Ok(probe(v, v >= top - 3.0));
    let mut s = Search::new(&mut probe_fn, Goal::Minimize, true, 0.01);
    let error = s.run((-top, top)).unwrap_err().to_string();
    assert!(
        error.contains(&format!("more than {MAX_PROBES} probes")),
        "{error}"
    );
    assert_eq!(s.probes.len(), MAX_PROBES);
}

#[test]
fn precision_is_refused_below_what_a_double_resolves() {
    assert_eq!(finest_precision(1.0, 2.0), 2.0 * f64::EPSILON);
    // A range so narrow that its zero scale is below the smallest doubles.
    let tiny = f64::from_bits(1);
    assert!(finest_precision(0.0, 4.0 * tiny) >= 1.0);
}

#[test]
fn seeds_past_the_sweep_bound_are_refused_before_any_run() {
    let bound = crate::bounds::MAX_SWEEP_RUNS;
    let most = (bound / MAX_PROBES as u64) as u32;
    assert!(checks::check_run_count(1, most).is_ok());
    let error = checks::check_run_count(1, most + 1)
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with(&format!("--seeds {}:", most + 1)) && error.contains(&bound.to_string()),
        "{error}"
    );
    let error = checks::check_run_count(1, u32::MAX)
        .unwrap_err()
        .to_string();
    assert!(error.contains("4294967295 seeds"), "{error}");
    let error = checks::check_run_count(4, most).unwrap_err().to_string();
    assert!(error.contains("4 searches (--for)"), "{error}");
    assert!(checks::check_run_count(1, 0).is_err());
}

#[test]
fn an_override_of_the_searched_path_is_refused() {
    let refused = |path: &str| checks::check_not_searched("--set", path, "workers.count").is_err();
    assert!(refused("workers.count"));
    assert!(refused(" workers.count "));
    assert!(refused("workers.count.x"));
    assert!(
        !refused("workers"),
        "a parent leaves the parameter to the search"
    );
    assert!(!refused("workers.counts"));
    assert!(!refused("workload.rate_per_s"));
}

#[test]
fn probes_that_contradict_monotonicity_are_reported() {
    let probes = [
        probe(2.0, false),
        probe(4.0, true),
        probe(6.0, false),
        probe(8.0, true),
    ];
    assert_eq!(contradictions(&probes, Goal::Minimize), vec![(4.0, 6.0)]);
    assert_eq!(
        contradictions(&probes, Goal::Maximize),
        vec![(4.0, 2.0), (8.0, 2.0), (8.0, 6.0)]
    );
    let monotone = [probe(2.0, false), probe(4.0, true)];
    assert!(contradictions(&monotone, Goal::Minimize).is_empty());
}

#[test]
fn a_far_end_that_disagrees_with_the_answer_is_reported() {
    // Feasible from 5 to 40 only: the search answers 5, and the range's end contradicts it.
    let ((answer, _), probes) = search(Goal::Minimize, true, (1.0, 64.0), |v| {
        (5.0..=40.0).contains(&v)
    });
    assert_eq!(answer, Some(5.0));
    let found = contradictions(&probes, Goal::Minimize);
    assert!(
        !found.is_empty() && found.iter().all(|c| c.1 == 64.0),
        "{found:?}"
    );
    // Monotone: the far-end probe agrees, nothing reported.
    let (_, probes) = search(Goal::Minimize, true, (1.0, 64.0), |v| v >= 5.0);
    assert!(contradictions(&probes, Goal::Minimize).is_empty());
}

#[test]
fn values_are_written_as_set_takes_them() {
    assert_eq!(format_value(8.0), "8");
    assert_eq!(format_value(40.5), "40.5");
    assert_eq!(format_value(checks::MAX_INTEGER_END), "4503599627370496");
}

/// Options searching `parameter` over `range` of a small rate-and-time scenario in `dir`.
fn small_plan(
    dir: &std::path::Path,
    parameter: &str,
    range: (f64, f64),
    seeds: u32,
) -> PlanOptions {
    let path = dir.join("s.yaml");
    std::fs::write(
        &path,
        "name: s\nworkers: {count: 2}\nworkload:\n  rate_per_s: 10\n  duration_s: 10\n  \
         groups:\n    - {name: a, share: 1.0, input_tokens: 100, output_tokens: 10}\n",
    )
    .unwrap();
    PlanOptions {
        scenario: path,
        overrides: Vec::new(),
        parameter: parameter.into(),
        goal: Goal::Maximize,
        range,
        seeds,
        precision: 0.01,
        allow_overload: false,
    }
}

#[test]
fn a_search_that_changes_the_workload_keeps_no_draws_between_probes() {
    let dir = tempfile::tempdir().unwrap();
    let checked = |parameter: &str, range, seeds| {
        check(&small_plan(dir.path(), parameter, range, seeds)).unwrap()
    };
    // Every probe of a rate search draws other requests: keeping them only adds memory.
    let rate = checked("workload.rate_per_s", (1.0, 400.0), 1);
    assert!(!rate.integer && !rate.reuse_draws);
    assert!(
        !checked("seed", (1.0, 9.0), 1).reuse_draws,
        "the seed changes the draws"
    );
    let workers = checked("workers.count", (1.0, 16.0), 4);
    assert!(workers.integer && workers.reuse_draws);
    assert_eq!(workers.range, (1.0, 16.0));
    // More seeds than the cache holds would only thrash it.
    let many = RequestCache::MAX_DRAWS as u32 + 1;
    assert!(!checked("workers.count", (1.0, 16.0), many).reuse_draws);
    // Nor are draws kept that would hold more requests than the bound on kept requests.
    let mut big = small_plan(dir.path(), "workers.count", (1.0, 16.0), 1);
    big.overrides = vec![
        ("workload.rate_per_s".into(), "10000".into()),
        ("workload.duration_s".into(), "30".into()),
    ];
    assert!(!check(&big).unwrap().reuse_draws);
}

#[test]
fn a_whole_numbered_range_is_searched_over_its_whole_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let options = small_plan(dir.path(), "workers.count", (1.0, 16.5), 1);
    assert_eq!(check(&options).unwrap().range, (1.0, 16.0));
}

#[test]
fn a_probes_memory_estimate_is_taken_at_the_checked_ends_of_the_range() {
    let dir = tempfile::tempdir().unwrap();
    // The far end 16.5 of a whole-numbered parameter is searched as 16.
    let options = small_plan(dir.path(), "workers.count", (1.0, 16.5), 1);
    let estimate = probe_memory_estimate_bytes(&options).unwrap();
    let fewer = small_plan(dir.path(), "workers.count", (1.0, 2.0), 1);
    let ranks_more = 14 * crate::bounds::RUN_BYTES_PER_RANK;
    assert_eq!(
        estimate,
        probe_memory_estimate_bytes(&fewer).unwrap() + ranks_more
    );
}

/// One seed's outcome of an expectation: its label, value and bound (passing by the bound),
/// and whether its figure is a yes or a no.
fn outcome(
    label: &str,
    value: f64,
    bound: crate::report::verdict::expect::Bound,
    boolean: bool,
) -> ExpectationOutcome {
    ExpectationOutcome {
        label: label.into(),
        measured: Some(value),
        bound,
        passed: bound.holds(value),
        reason: None,
        seed: 7,
        wall_time_s: 0.0,
        boolean,
    }
}

/// A probe at `value` with one seed: a chat p99 TTFT SLO (at most 1000 ms) measuring
/// `ttft_ms`, and `stable: true` kept (`overloaded` false) or not.
fn chat_probe(value: f64, ttft_ms: f64, overloaded: bool) -> Probe {
    use crate::report::verdict::expect::Bound;
    let outcomes = vec![
        outcome("chat p99 TTFT SLO", ttft_ms, Bound::AtMost(1000.0), false),
        outcome(
            "keeps up",
            if overloaded { 0.0 } else { 1.0 },
            Bound::AtLeast(1.0),
            true,
        ),
    ];
    let feasible = outcomes.iter().all(|o| o.passed);
    Probe {
        value,
        runs: vec![SeedRun {
            seed: 7,
            outcomes,
            overloaded: Some(overloaded),
            unjudged: None,
            fleet: Default::default(),
        }],
        feasible,
    }
}

/// The highest rate of a chat SLO and `stable: true`, answering 48 with 48.25 failing.
fn chat_rate_plan(past: Probe) -> Plan {
    let probes = vec![
        chat_probe(1.0, 80.0, false),
        chat_probe(48.0, 948.5, false),
        past,
    ];
    Plan {
        parameter: "workload.rate_per_s".into(),
        goal: Goal::Maximize,
        range: (1.0, 200.0),
        integer: false,
        latency_figures: vec![true, false],
        answer: Some(48.0),
        bracket: (Some(48.25), Some(48.0)),
        probes,
        contradictions: Vec::new(),
    }
}

#[test]
fn the_binding_expectation_is_the_one_that_fails_past_the_answer_not_a_kept_stable() {
    let plan = chat_rate_plan(chat_probe(48.25, 1072.9, false));
    let binding = output::binding_of(&plan).unwrap();
    assert_eq!(binding.at_answer.label, "chat p99 TTFT SLO");
    assert!(!binding.boolean);
    let past = binding.past.unwrap();
    assert_eq!((past.value, past.outcome.measured), (48.25, Some(1072.9)));
    assert_eq!(past.failing, ["chat p99 TTFT SLO"]);
    let json: serde_json::Value = serde_json::from_slice(&output::plan_json(&[output::PlanRow {
        for_value: None,
        plan: plan.clone(),
    }]))
    .unwrap();
    assert_eq!(json["binding"]["expectation"], "chat p99 TTFT SLO");
    assert_eq!(json["binding"]["value"], 948.5);
    assert_eq!(json["binding"]["margin"], 51.5);
    assert_eq!(json["binding"]["relative_margin"], 0.0515);
    assert_eq!(json["binding"]["past_answer"]["value"], 48.25);
    assert_eq!(json["binding"]["past_answer"]["measured"], 1072.9);
}

#[test]
fn stable_binds_when_it_is_what_fails_past_the_answer() {
    // Past the answer the run falls behind while the chat SLO still holds.
    let plan = chat_rate_plan(chat_probe(48.25, 990.0, true));
    let binding = output::binding_of(&plan).unwrap();
    assert_eq!(binding.at_answer.label, "keeps up");
    assert!(binding.boolean);
    // When both fail past the answer, the figure with a margin binds.
    let plan = chat_rate_plan(chat_probe(48.25, 1072.9, true));
    let binding = output::binding_of(&plan).unwrap();
    assert_eq!(binding.at_answer.label, "chat p99 TTFT SLO");
    assert_eq!(
        binding.past.unwrap().failing,
        ["chat p99 TTFT SLO", "keeps up"]
    );
}

#[test]
fn a_plan_says_a_yes_or_no_expectation_as_yes_or_no_and_names_the_binding_one() {
    let plan = chat_rate_plan(chat_probe(48.25, 1072.9, true));
    let text = output::describe(&output::PlanRow {
        for_value: None,
        plan,
    });
    insta::assert_snapshot!(text);
}
