//! Plan tests: the search on synthetic feasibility (integer and real, both goals, edges), and
//! the report of probes that contradict monotonicity.

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
    let mut s = Search {
        probe: &mut probe_fn,
        goal,
        integer,
        precision: 0.01,
        probes: Vec::new(),
    };
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
    let ((answer, _), probes) = search(Goal::Maximize, false, (1.0, 8.0), |_| false);
    assert_eq!(answer, None);
    assert_eq!(probes.len(), 1, "the low end decides a maximize");
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
}
