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

use super::output::PlanRow;
use super::{Goal, PlanOptions, format_value, plan};
use crate::pipeline::RunError;
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

/// The joint search of `options`, whose parameter is `first+second` (see the module docs).
pub fn joint_plan(
    options: &PlanOptions,
    first: &str,
    second: &str,
    pool: &rayon::ThreadPool,
) -> Result<JointPlan, RunError> {
    let range = whole_sum_range(options)?;
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
        let lowest_b = range.0.saturating_sub(a).max(1);
        let highest_b = range.1 - a;
        if lowest_b > highest_b {
            break;
        }
        let mut inner = options.clone();
        inner.parameter = second.to_string();
        inner.overrides.push((first.to_string(), a.to_string()));
        inner.range = (lowest_b as f64, highest_b as f64);
        super::check(&inner)?;
        let searched = plan(&inner, pool)?;
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

    #[test]
    fn a_sum_of_two_distinct_paths_is_a_joint_search() {
        let pair = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
        assert_eq!(split_sum("a.count+b.count"), pair("a.count", "b.count"));
        assert_eq!(split_sum(" a.count + b.count "), pair("a.count", "b.count"));
        for text in ["a.count", "a.count+", "+b", "a+a", "a+b+c"] {
            assert_eq!(split_sum(text), None, "{text}");
        }
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
