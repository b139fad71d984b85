//! The fewest workers in all over two counts: `--minimize A+B --range LO..HI` (e.g.
//! `workers.prefill.count+workers.decode.count`), the question Dynamo's profiler asks of a
//! disaggregated deployment.
//!
//! For each value `a` of A from 1 upward, the fewest B that makes the scenario feasible is
//! one ordinary search (monotone in B, within `LO - a ..= HI - a`): together they are the
//! **frontier**. The answer is the frontier's pair with the smallest sum, ties to the fewer
//! A (the search goes up in A and keeps a pair only if its sum is smaller). It stops once A
//! alone, plus one B, reaches the best sum. Feasibility is assumed monotone in each count, so
//! the frontier never rises with A: a point where it does is reported, not hidden.

use super::checks::{check_joint_row, check_run_count};
use super::output::PlanRow;
use super::{Goal, MAX_PROBES, Parameterized, Plan, PlanOptions, format_value};
use crate::bounds::MAX_SWEEP_RUNS;
use crate::pipeline::{Judgement, RunError};
use crate::yaml::Step;

/// The two counts of a joint search and its result.
#[derive(Clone, Debug)]
pub struct JointPlan {
    /// The first count's `--set` path (A), searched upward one value at a time.
    pub first: String,
    /// The second count's path (B), searched for each value of A.
    pub second: String,
    /// The range of the sum.
    pub range: (u64, u64),
    /// One search of B per value of A, in order (its `for_value` is A's).
    pub rows: Vec<PlanRow>,
    /// The pair `(a, b)` with the fewest workers in all (`None`: nothing is feasible).
    pub answer: Option<(u64, u64)>,
    /// Where the frontier rises with A, described.
    pub contradictions: Vec<String>,
}

impl JointPlan {
    /// The frontier: each value of A searched and the fewest B for it (`None`: none in range).
    pub fn frontier(&self) -> Vec<(u64, Option<u64>)> {
        let first = |row: &PlanRow| {
            let value = row.for_value.as_ref().map(|(_, v)| v.as_str());
            value.and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        let answer = |row: &PlanRow| row.plan.answer.map(|b| b as u64);
        self.rows.iter().map(|r| (first(r), answer(r))).collect()
    }
}

/// The two paths of a `--minimize A+B` parameter, if it is one.
pub fn split_sum(parameter: &str) -> Option<(String, String)> {
    let (a, b) = parameter.split_once('+')?;
    let (a, b) = (a.trim(), b.trim());
    let valid = !a.is_empty() && !b.is_empty() && a != b && !b.contains('+');
    valid.then(|| (a.to_string(), b.to_string()))
}

/// Refuses a sum of anything but two worker counts (`workers.….count`, e.g.
/// `workers.decode.pools.fast.count`): the answer is the fewest workers in all, and adding a
/// rate or a token count to a count means nothing.
pub fn check_worker_counts(first: &str, second: &str) -> Result<(), RunError> {
    let is_count = |path: &str| {
        let steps = crate::yaml::parse_path(path).unwrap_or_default();
        let key = |step: Option<&Step>, name: &str| matches!(step, Some(Step::Key(k)) if k == name);
        steps.len() > 1 && key(steps.first(), "workers") && key(steps.last(), "count")
    };
    match [first, second].into_iter().find(|path| !is_count(path)) {
        None => Ok(()),
        Some(other) => Err(RunError::Input(format!(
            "--minimize {first}+{second}: a joint search sums two worker counts \
             (workers.<role or pool>.count), and `{other}` is not one"
        ))),
    }
}

/// What a joint search runs over, checked before its first probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JointChecked {
    /// The range of the sum, in whole workers.
    pub range: (u64, u64),
    /// The most probes the search can make ([`worst_case_probes`]).
    pub worst_case_probes: u64,
}

/// Everything a joint search of `first+second` checks before its first probe: that both are
/// worker counts ([`check_worker_counts`]); the range of the sum; the scenario taking the
/// pairs at the range's top (the most of B beside one A, the most of A beside one B), each
/// refused in the terms of `--range` as given; and the worst case of probes times seeds
/// within the runs a plan may make.
pub fn check_joint(
    options: &PlanOptions,
    first: &str,
    second: &str,
) -> Result<JointChecked, RunError> {
    check_worker_counts(first, second)?;
    let range = whole_sum_range(options)?;
    check_run_count(1, options.seeds)?;
    for (a, b) in [(1, range.1 - 1), (range.1 - 1, 1)] {
        let at_pair = row_options(options, (first, second), a, (b, b));
        let refused = |e: RunError| {
            RunError::Input(format!(
                "{}: its top sets {first} = {a} and {second} = {b}, which the scenario refuses: {e}",
                shown_range(options)
            ))
        };
        Parameterized::new(&at_pair)?
            .scenario_at(b as f64)
            .map_err(refused)?;
    }
    let first_row = row_options(options, (first, second), 1, row_range(range, 1));
    let integer = check_joint_row(&Parameterized::new(&first_row)?)
        .map_err(|e| row_error(options, (first, second), 1, row_range(range, 1), e))?
        .integer;
    let worst_case_probes = worst_case_probes(range, integer);
    let runs = worst_case_probes.saturating_mul(u64::from(options.seeds));
    if runs > MAX_SWEEP_RUNS {
        return Err(RunError::Input(format!(
            "{}: the joint search of {first}+{second} may make up to {worst_case_probes} probes (one search of {second} for each {first} from 1 to {}) x {} seeds = {runs} runs, more than the {MAX_SWEEP_RUNS} a plan may make; lower the range's top or give fewer --seeds",
            shown_range(options),
            range.1 - 1,
            options.seeds,
        )));
    }
    Ok(JointChecked {
        range,
        worst_case_probes,
    })
}

/// The estimated peak memory of one seed's run of a joint search's probe, in bytes: the
/// larger of the pairs at the sum's top (the most of either count).
pub fn probe_memory_estimate_bytes(
    options: &PlanOptions,
    (first, second): (&str, &str),
    checked: &JointChecked,
) -> Result<u64, RunError> {
    let top = checked.range.1;
    let mut most_bytes = 0;
    for (a, b) in [(1, top - 1), (top - 1, 1)] {
        let at_pair = row_options(options, (first, second), a, (b, b));
        let scenario = Parameterized::new(&at_pair)?.scenario_at(b as f64)?;
        most_bytes = most_bytes.max(Judgement::new(scenario)?.memory_estimate_bytes());
    }
    Ok(most_bytes)
}

/// The joint search of `options`, whose parameter is `first+second` (see the module docs).
pub fn joint_plan(
    options: &PlanOptions,
    first: &str,
    second: &str,
    pool: &rayon::ThreadPool,
) -> Result<JointPlan, RunError> {
    let checked = check_joint(options, first, second)?;
    let search_row = |a: u64, b_range: (u64, u64)| {
        let inner = row_options(options, (first, second), a, b_range);
        let scenarios = Parameterized::new(&inner)?;
        let row_checked = check_joint_row(&scenarios)
            .map_err(|e| row_error(options, (first, second), a, b_range, e))?;
        super::search_checked(scenarios, &row_checked, pool)
    };
    search_rows((first, second), checked.range, search_row)
}

/// The joint search over the sum's `range`, `search_row(a, (lowest_b, highest_b))` searching
/// B for one value of A (see the module docs).
fn search_rows(
    (first, second): (&str, &str),
    range: (u64, u64),
    mut search_row: impl FnMut(u64, (u64, u64)) -> Result<Plan, RunError>,
) -> Result<JointPlan, RunError> {
    let mut joint = JointPlan {
        first: first.to_string(),
        second: second.to_string(),
        range,
        rows: Vec::new(),
        answer: None,
        contradictions: Vec::new(),
    };
    // Each value of A is one search; A never exceeds the range's top less one B: bounded.
    for a in 1..range.1 {
        if joint.answer.is_some_and(|(x, y)| a + 1 >= x + y) {
            break; // with at least one B, no more A can beat the best sum
        }
        let searched = search_row(a, row_range(range, a))?;
        let b = searched.answer.map(|b| b as u64);
        joint.rows.push(PlanRow {
            for_value: Some((first.to_string(), a.to_string())),
            plan: searched,
        });
        if let Some(b) = b
            && joint.answer.is_none_or(|(x, y)| a + b < x + y)
        {
            joint.answer = Some((a, b));
        }
    }
    let names = (joint.first.as_str(), joint.second.as_str());
    joint.contradictions = rising_points(names, &joint.frontier(), range.1);
    Ok(joint)
}

/// The range of B searched beside `a` of A: what keeps the sum in `range`, at least one B.
/// Never empty: `a` is below the range's top.
fn row_range((lo, hi): (u64, u64), a: u64) -> (u64, u64) {
    (lo.saturating_sub(a).max(1), hi - a)
}

/// The options of one search of `second` over `b_range`, with `first` set to `a`.
fn row_options(
    options: &PlanOptions,
    (first, second): (&str, &str),
    a: u64,
    b_range: (u64, u64),
) -> PlanOptions {
    let mut inner = options.clone();
    inner.parameter = second.to_string();
    inner.overrides.push((first.to_string(), a.to_string()));
    inner.range = (b_range.0 as f64, b_range.1 as f64);
    inner
}

/// `--range LO..HI` as given (the sum's, whole numbers once checked).
fn shown_range(options: &PlanOptions) -> String {
    format!(
        "--range {}..{}",
        format_value(options.range.0),
        format_value(options.range.1)
    )
}

/// A refusal of one search of B, in the terms of `--range` as given: which B range the sum's
/// range left beside `a` (the search's own message quotes that range, not the sum's).
fn row_error(
    options: &PlanOptions,
    (first, second): (&str, &str),
    a: u64,
    (lowest_b, highest_b): (u64, u64),
    error: RunError,
) -> RunError {
    let RunError::Input(message) = error else {
        return error;
    };
    let own = format!("--range {lowest_b}..{highest_b}: ");
    let message = message.strip_prefix(&own).unwrap_or(&message);
    RunError::Input(format!(
        "{}: with {first} = {a}, {second} is searched over {lowest_b}..{highest_b} (the sum's range less {a}), and {message}",
        shown_range(options)
    ))
}

/// The most probes a joint search over the sum's `range` can make, whatever each probe's
/// verdict: one search of B for every value of A from 1 to the top less 1 (the loop of
/// [`search_rows`] stops earlier only once an answer is found), each over [`row_range`]'s
/// range and making at most [`search_worst_case_probes`] probes (an integer B), or
/// [`MAX_PROBES`] (a real one).
pub fn worst_case_probes((lo, hi): (u64, u64), integer: bool) -> u64 {
    let rows = hi.saturating_sub(1);
    if !integer {
        return rows.saturating_mul(MAX_PROBES as u64);
    }
    // The values of A below `lo` leave B the range `lo - a ..= hi - a`, all as wide; each
    // value from `lo` (at least 1) up leaves `1 ..= hi - a`, one narrower than the one before.
    let full_width_rows = lo.saturating_sub(1).min(rows);
    let full = full_width_rows.saturating_mul(search_worst_case_probes(hi - lo));
    let narrowing = match (hi - 1).checked_sub(lo.max(1)) {
        Some(widest) => worst_case_probes_over_widths(widest),
        None => 0,
    };
    full.saturating_add(narrowing)
}

/// The most probes one integer `--minimize` search over `width + 1` whole numbers makes,
/// whatever each probe's verdict (see `super::search`): both ends (one, when they meet);
/// then, the low end infeasible, the exponential steps strictly inside (`lo + 2^k - 1 < hi`:
/// `s = floor(log2 width)` of them); then the bisection of the gap where the first feasible
/// value was met: `k - 1` probes at step `k` (a gap of `2^(k-1)`), or `ceil(log2 g)` at the
/// far end (the gap `g = width - 2^s + 1` above the last step).
pub fn search_worst_case_probes(width: u64) -> u64 {
    if width == 0 {
        return 1;
    }
    let steps = u64::from(width.ilog2());
    let far_gap = width - (1 << steps) + 1;
    let bisection = steps.saturating_sub(1).max(ceil_log2(far_gap));
    (2 + steps + bisection).min(MAX_PROBES as u64)
}

/// The sum of [`search_worst_case_probes`] over every width from 0 to `widest`, by the
/// groups of widths with the same number of steps and bisection (about 33 x 33 of them at
/// most, where a width-by-width sum would take up to 2^32 terms).
fn worst_case_probes_over_widths(widest: u64) -> u64 {
    let mut total = 1; // width 0
    for steps in 0..=widest.checked_ilog2().map_or(0, u64::from) {
        let first_width = 1u64 << steps;
        if first_width > widest {
            break;
        }
        // Widths `2^s ..= min(2^(s+1) - 1, widest)` have far gaps `1 ..= gaps`.
        let gaps = first_width.min(widest - first_width + 1);
        for bits in 0..=ceil_log2(gaps) {
            // Far gaps with `ceil(log2 g) == bits`: `2^(bits-1) + 1 ..= 2^bits` (1 for 0).
            let lowest = if bits == 0 { 1 } else { (1 << (bits - 1)) + 1 };
            let count = gaps.min(1 << bits) + 1 - lowest;
            let probes = (2 + steps + steps.saturating_sub(1).max(bits)).min(MAX_PROBES as u64);
            total += count * probes;
        }
    }
    total
}

/// The smallest `c` with `2^c >= n` (0 for `n <= 1`).
fn ceil_log2(n: u64) -> u64 {
    match n {
        0 | 1 => 0,
        n => u64::from(64 - (n - 1).leading_zeros()),
    }
}

/// `--range LO..HI` of the sum, in whole workers: at least 2 (one of each) at the top.
fn whole_sum_range(options: &PlanOptions) -> Result<(u64, u64), RunError> {
    let (lo, hi) = options.range;
    let whole = |v: f64| v.fract() == 0.0 && v >= 0.0 && v <= u32::MAX as f64;
    if options.goal != Goal::Minimize {
        return Err(RunError::Input(format!(
            "--maximize {}: a sum of counts can only be minimized (the fewest workers in all)",
            options.parameter
        )));
    }
    if !whole(lo) || !whole(hi) || hi < 2.0 || lo > hi {
        return Err(RunError::Input(format!(
            "--range {}..{}: a sum of two counts takes whole numbers, LO <= HI, HI at least 2",
            format_value(lo),
            format_value(hi)
        )));
    }
    Ok((lo as u64, hi as u64))
}

/// Where `frontier` (of the counts named `first` and `second`, their sum at most `top`)
/// rises: more A needing more B, or A infeasible at every B in range after a smaller A was
/// feasible with a B still in range.
fn rising_points(
    (first, second): (&str, &str),
    frontier: &[(u64, Option<u64>)],
    top: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    for pair in frontier.windows(2) {
        let ((a0, b0), (a1, b1)) = (pair[0], pair[1]);
        let Some(b0) = b0 else {
            continue;
        };
        // With more A the range of B ends lower: none in range is a rise only if b0 is in it.
        let rises = match b1 {
            Some(b1) => b1 > b0,
            None => b0 <= top - a1,
        };
        if rises {
            let b1 = b1.map_or("none in range".to_string(), |b| b.to_string());
            out.push(format!(
                "{first} = {a1} needs {second} = {b1}, but {a0} needed only {b0}"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Probe;
    use crate::plan::search::Search;

    #[test]
    fn a_sum_of_two_distinct_paths_is_a_joint_search() {
        let pair = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
        assert_eq!(split_sum("a.count+b.count"), pair("a.count", "b.count"));
        assert_eq!(split_sum(" a.count + b.count "), pair("a.count", "b.count"));
        for text in ["a.count", "a.count+", "+b", "a+a", "a+b+c"] {
            assert_eq!(split_sum(text), None, "{text}");
        }
    }

    /// The plan of one search of B over `range` with `feasible` deciding each value.
    fn synthetic_row(range: (u64, u64), feasible: impl Fn(f64) -> bool) -> Plan {
        let mut probe = |value: f64| {
            Ok(Probe {
                value,
                runs: Vec::new(),
                feasible: feasible(value),
            })
        };
        let mut search = Search::new(&mut probe, Goal::Minimize, true, 0.01);
        let range = (range.0 as f64, range.1 as f64);
        let (answer, bracket) = search.run(range).unwrap();
        Plan {
            parameter: "b".into(),
            goal: Goal::Minimize,
            range,
            integer: true,
            latency_figures: Vec::new(),
            answer,
            bracket,
            probes: std::mem::take(&mut search.probes),
            contradictions: Vec::new(),
        }
    }

    /// The probes a joint search over `range` makes when B is feasible beside A exactly
    /// when `feasible(a, b)`.
    fn joint_probes(range: (u64, u64), feasible: impl Fn(u64, f64) -> bool) -> u64 {
        let row = |a, b_range| Ok(synthetic_row(b_range, |b| feasible(a, b)));
        let joint = search_rows(("a", "b"), range, row).unwrap();
        joint.rows.iter().map(|r| r.plan.probes.len() as u64).sum()
    }

    #[test]
    fn one_search_never_makes_more_probes_than_its_worst_case_and_some_verdicts_make_that_many() {
        for width in 0..=10u64 {
            let values = width + 1;
            let most = (0..1u64 << values)
                .map(|verdicts| {
                    let feasible = |b: f64| verdicts >> (b as u64 - 1) & 1 == 1;
                    synthetic_row((1, values), feasible).probes.len() as u64
                })
                .max()
                .unwrap();
            assert_eq!(most, search_worst_case_probes(width), "width {width}");
        }
    }

    #[test]
    fn the_worst_case_summed_by_groups_is_the_width_by_width_sum() {
        let mut by_width = 0;
        for widest in 0..=3000 {
            by_width += search_worst_case_probes(widest);
            assert_eq!(worst_case_probes_over_widths(widest), by_width, "{widest}");
        }
        // The largest sum range a joint search takes, summed without 2^32 terms.
        let top = u64::from(u32::MAX);
        assert!(worst_case_probes((2, top), true) > top);
    }

    #[test]
    fn a_joint_search_never_makes_more_probes_than_its_worst_case() {
        let ranges = [(2, 2), (2, 3), (0, 9), (1, 12), (2, 64), (7, 40), (40, 40)];
        for range in ranges {
            let worst = worst_case_probes(range, true);
            let nothing = joint_probes(range, |_, _| false);
            // Feasible only where the sum is at the range's top: every search bisects its way
            // up from its last exponential step.
            let only_the_top = joint_probes(range, |a, b| a + b as u64 == range.1);
            let patchy = joint_probes(range, |a, b| (a * 7 + b as u64 * 3).is_multiple_of(5));
            for probes in [nothing, only_the_top, patchy] {
                assert!(probes <= worst, "{range:?}: {probes} > {worst}");
            }
        }
        assert_eq!(joint_probes((2, 4096), |_, _| false), 49_140);
        assert_eq!(worst_case_probes((2, 4096), true), 88_044);
        assert_eq!(worst_case_probes((2, 64), false), 63 * MAX_PROBES as u64);
    }

    /// A disaggregated scenario in `dir` whose one expectation no run meets (no run migrates
    /// a request), and a plan of the fewest workers over `range`.
    fn infeasible_joint(dir: &std::path::Path, range: (f64, f64), seeds: u32) -> PlanOptions {
        let path = dir.join("d.yaml");
        std::fs::write(
            &path,
            "name: d\nworkers:\n  prefill: {count: 1}\n  decode: {count: 1}\nworkload:\n  \
             groups:\n    - {name: a, count: 4, input_tokens: 64, output_tokens: 2}\n\
             expect:\n  - {migrations: {}, at_least: 1}\n",
        )
        .unwrap();
        PlanOptions {
            scenario: path,
            overrides: Vec::new(),
            parameter: "workers.prefill.count+workers.decode.count".into(),
            goal: Goal::Minimize,
            range,
            seeds,
            precision: 0.01,
            allow_overload: true,
        }
    }

    const PREFILL: &str = "workers.prefill.count";
    const DECODE: &str = "workers.decode.count";

    #[test]
    fn a_joint_search_with_nothing_feasible_makes_at_most_its_worst_case_of_probes() {
        let dir = tempfile::tempdir().unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let options = infeasible_joint(dir.path(), (2.0, 12.0), 1);
        let checked = check_joint(&options, PREFILL, DECODE).unwrap();
        let joint = joint_plan(&options, PREFILL, DECODE, &pool).unwrap();
        let probes: u64 = joint.rows.iter().map(|r| r.plan.probes.len() as u64).sum();
        assert_eq!(joint.answer, None);
        assert_eq!(
            joint.rows.len(),
            11,
            "every value of A, the last with one B"
        );
        assert_eq!(checked.worst_case_probes, 53);
        assert_eq!(probes, joint_probes((2, 12), |_, _| false));
        assert!(probes <= checked.worst_case_probes, "{probes}");
    }

    #[test]
    fn a_joint_search_past_the_plan_run_bound_is_refused_saying_its_worst_case() {
        let dir = tempfile::tempdir().unwrap();
        // 1041 seeds pass a single search's check (96 probes x 1041 < 100,000).
        let options = infeasible_joint(dir.path(), (2.0, 64.0), 1041);
        let error = check_joint(&options, PREFILL, DECODE)
            .unwrap_err()
            .to_string();
        let expected = "--range 2..64: the joint search of workers.prefill.count+workers.decode.count may make up to 600 probes (one search of workers.decode.count for each workers.prefill.count from 1 to 63) x 1041 seeds = 624600 runs, more than the 100000 a plan may make";
        assert!(error.starts_with(expected), "{error}");
        let within = infeasible_joint(dir.path(), (2.0, 64.0), 166);
        assert_eq!(
            check_joint(&within, PREFILL, DECODE).unwrap().range,
            (2, 64)
        );
    }

    #[test]
    fn a_joint_search_quotes_the_sum_range_as_given() {
        let dir = tempfile::tempdir().unwrap();
        let options = infeasible_joint(dir.path(), (2.0, 8193.0), 1);
        let error = check_joint(&options, PREFILL, DECODE)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("--range 2..8193: its top sets workers.prefill.count = 1 and workers.decode.count = 8192, which the scenario refuses"),
            "{error}"
        );
        assert!(!error.contains("1..8192"), "{error}");
        let refused = RunError::Input("--range 1..8192: its far end 8192 is refused".into());
        let names = (PREFILL, DECODE);
        let error = row_error(&options, names, 1, (1, 8192), refused).to_string();
        assert_eq!(
            error,
            "--range 2..8193: with workers.prefill.count = 1, workers.decode.count is searched over 1..8192 (the sum's range less 1), and its far end 8192 is refused"
        );
    }

    #[test]
    fn a_joint_search_sums_only_worker_counts() {
        let counts = ["workers.prefill.count", "workers.decode.pools.fast.count"];
        assert!(check_worker_counts(counts[0], counts[1]).is_ok());
        for (a, b) in [
            ("workload.rate_per_s", "workers.decode.count"),
            ("workers.prefill.count", "workload.groups.g.count"),
            ("workers.count", "workers.engine.max_num_seqs"),
            ("count", "workers.count"),
        ] {
            let e = check_worker_counts(a, b).unwrap_err().to_string();
            assert!(e.contains("a joint search sums two worker counts"), "{e}");
        }
    }

    #[test]
    fn a_frontier_that_rises_with_more_of_the_first_count_is_reported() {
        let names = ("p", "d");
        assert!(rising_points(names, &[(1, None), (2, Some(3)), (3, Some(3))], 64).is_empty());
        let rises = rising_points(names, &[(1, Some(3)), (2, Some(4))], 64);
        assert_eq!(rises, ["p = 2 needs d = 4, but 1 needed only 3"]);
        let lost = rising_points(names, &[(1, Some(3)), (2, None)], 64);
        assert_eq!(lost, ["p = 2 needs d = none in range, but 1 needed only 3"]);
        // With a sum of at most 4, two of p leave room for at most 2 of d: no contradiction.
        assert!(rising_points(names, &[(1, Some(3)), (2, None)], 4).is_empty());
    }
}
