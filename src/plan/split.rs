//! The best split of a fixed number of workers between two counts: `--total A+B=T` with
//! `--maximize PATH` (or `--minimize PATH`), e.g. `--total
//! workers.prefill.count+workers.decode.count=8 --maximize workload.rate_per_s`: how to divide
//! eight workers between prefill and decode to carry the most load.
//!
//! Each split `a + b = T` (`a` from 1 to `T - 1`, one of each at least) is one ordinary
//! search of PATH with both counts set, as one row of a `--for` table; the answer is the split
//! whose search answers best (the most for `--maximize`, the fewest for `--minimize`), ties to
//! the fewer A. No split is assumed to tell anything about another (capacity over the split is
//! usually highest in the middle, but nothing makes it so), so every split is searched: the
//! work is `T - 1` searches, each bounded as any search is, and refused before the first
//! probe when that many searches' runs could exceed a plan's bound.

use super::checks::{check_not_searched, check_run_count};
use super::joint::{check_worker_counts, split_sum};
use super::output::PlanRow;
use super::{Goal, MAX_PROBES, PlanOptions};
use crate::bounds::MAX_SWEEP_RUNS;
use crate::pipeline::RunError;

/// `--total A+B=T`: two worker counts and the total they split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Total {
    /// The first count's `--set` path (A).
    pub first: String,
    /// The second count's path (B).
    pub second: String,
    /// Their sum, at least 2.
    pub total: u64,
}

impl Total {
    /// `A+B`, as a table's `for` path.
    pub fn sum(&self) -> String {
        format!("{}+{}", self.first, self.second)
    }
}

/// Parses `--total A+B=T`: two distinct worker counts and a whole total of at least 2.
pub fn parse_total(text: &str) -> Result<Total, RunError> {
    let bad = |why: &str| RunError::Input(format!("--total {text}: {why}"));
    let (sum, total) = text
        .split_once('=')
        .ok_or_else(|| bad("expected A+B=T, e.g. workers.prefill.count+workers.decode.count=8"))?;
    let (first, second) =
        split_sum(sum).ok_or_else(|| bad("expected two different paths joined by +, then =T"))?;
    check_worker_counts(&first, &second)
        .map_err(|_| bad("a total splits two worker counts (workers.<role or pool>.count)"))?;
    let total = total
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|t| (2..=u64::from(u32::MAX)).contains(t))
        .ok_or_else(|| bad("T must be a whole number of workers, at least 2 (one of each)"))?;
    Ok(Total {
        first,
        second,
        total,
    })
}

/// One split's search: its `for` value (`A+B`, `a+b`) and its options (both counts set).
pub type SplitSearch = (Option<(String, String)>, PlanOptions);

/// The searches of a split plan, one per split `a + (T - a)`, each with both counts set,
/// checked before any run: the searched path is neither count, no `--set` sets either, and
/// the `T - 1` searches' runs stay within a plan's bound. (Each search's range is checked
/// against its scenario by the caller, as a `--for` table's are.)
pub fn split_searches(options: &PlanOptions, total: &Total) -> Result<Vec<SplitSearch>, RunError> {
    let flag = format!("--total {}={}", total.sum(), total.total);
    for count in [&total.first, &total.second] {
        check_not_searched(&flag, count, &options.parameter)?;
    }
    for (path, value) in &options.overrides {
        for count in [&total.first, &total.second] {
            check_not_searched(&format!("--set {path}={value}"), path, count).map_err(|_| {
                RunError::Input(format!(
                    "--set {path}={value}: sets {count}, which {flag} decides"
                ))
            })?;
        }
    }
    check_run_count(1, options.seeds)?;
    let splits = total.total - 1;
    let runs = splits
        .saturating_mul(MAX_PROBES as u64)
        .saturating_mul(u64::from(options.seeds));
    if runs > MAX_SWEEP_RUNS {
        return Err(RunError::Input(format!(
            "{flag}: {splits} splits (one search each) x up to {MAX_PROBES} probes x {} seeds = {runs} runs, more than the {MAX_SWEEP_RUNS} a plan may make; lower the total or give fewer --seeds",
            options.seeds
        )));
    }
    let search = |a: u64| {
        let b = total.total - a;
        let mut at = options.clone();
        at.overrides.push((total.first.clone(), a.to_string()));
        at.overrides.push((total.second.clone(), b.to_string()));
        (Some((total.sum(), format!("{a}+{b}"))), at)
    };
    Ok((1..total.total).map(search).collect())
}

/// The row of `rows` (one per split, in order of A) whose answer is best for `goal`, ties to
/// the fewer A; `None` when no split has an answer.
pub fn best_split(rows: &[PlanRow], goal: Goal) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, row) in rows.iter().enumerate() {
        let Some(answer) = row.plan.answer else {
            continue;
        };
        let better = best.is_none_or(|(_, b)| match goal {
            Goal::Maximize => answer > b,
            Goal::Minimize => answer < b,
        });
        if better {
            best = Some((i, answer));
        }
    }
    best.map(|(i, _)| i)
}

/// The counts `(a, b)` of a split row (its `for` value `a+b`).
pub fn split_of(row: &PlanRow) -> Option<(u64, u64)> {
    let (_, value) = row.for_value.as_ref()?;
    let (a, b) = value.split_once('+')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Plan, Probe};

    #[test]
    fn a_total_is_two_worker_counts_and_a_whole_number_of_at_least_two() {
        let total = parse_total("workers.prefill.count+workers.decode.count=8").unwrap();
        assert_eq!(
            (total.first.as_str(), total.second.as_str(), total.total),
            ("workers.prefill.count", "workers.decode.count", 8)
        );
        for (text, why) in [
            (
                "workers.prefill.count+workers.decode.count",
                "expected A+B=T",
            ),
            ("workers.prefill.count=8", "two different paths"),
            (
                "workload.rate_per_s+workers.decode.count=8",
                "two worker counts",
            ),
            ("workers.prefill.count+workers.decode.count=1", "at least 2"),
            (
                "workers.prefill.count+workers.decode.count=7.5",
                "whole number",
            ),
        ] {
            let error = parse_total(text).unwrap_err().to_string();
            assert!(error.starts_with(&format!("--total {text}: ")), "{error}");
            assert!(error.contains(why), "{text}: {error}");
        }
    }

    fn row(split: &str, answer: Option<f64>) -> PlanRow {
        PlanRow {
            for_value: Some(("a+b".into(), split.into())),
            plan: Plan {
                parameter: "rate".into(),
                goal: Goal::Maximize,
                range: (1.0, 100.0),
                integer: false,
                latency_figures: Vec::new(),
                answer,
                bracket: (None, answer),
                probes: Vec::<Probe>::new(),
                contradictions: Vec::new(),
            },
        }
    }

    #[test]
    fn the_best_split_has_the_best_answer_ties_to_fewer_of_the_first_count() {
        let rows = [
            row("1+7", None),
            row("2+6", Some(40.0)),
            row("3+5", Some(48.0)),
            row("4+4", Some(48.0)),
            row("5+3", Some(30.0)),
        ];
        assert_eq!(best_split(&rows, Goal::Maximize), Some(2));
        assert_eq!(split_of(&rows[2]), Some((3, 5)));
        assert_eq!(best_split(&rows, Goal::Minimize), Some(4));
        assert_eq!(best_split(&rows[..1], Goal::Maximize), None);
    }

    #[test]
    fn a_split_plan_refuses_a_count_searched_or_set() {
        let total = parse_total("workers.prefill.count+workers.decode.count=4").unwrap();
        let options = |parameter: &str, set: Option<(&str, &str)>| PlanOptions {
            scenario: "s.yaml".into(),
            overrides: Vec::from_iter(set.map(|(p, v)| (p.to_string(), v.to_string()))),
            parameter: parameter.into(),
            goal: Goal::Maximize,
            range: (1.0, 100.0),
            seeds: 1,
            precision: 0.01,
            allow_overload: false,
        };
        let searches = split_searches(&options("workload.rate_per_s", None), &total).unwrap();
        let splits: Vec<_> = searches.iter().map(|(f, _)| f.clone().unwrap().1).collect();
        assert_eq!(splits, ["1+3", "2+2", "3+1"]);
        let error = |o| split_searches(&o, &total).unwrap_err().to_string();
        let searched = error(options("workers.decode.count", None));
        assert!(searched.contains("sets workers.decode.count"), "{searched}");
        let set = error(options(
            "workload.rate_per_s",
            Some(("workers.prefill.count", "2")),
        ));
        assert!(
            set.starts_with(
                "--set workers.prefill.count=2: sets workers.prefill.count, which --total"
            ),
            "{set}"
        );
        let mut many = options("workload.rate_per_s", None);
        many.seeds = 600;
        assert!(
            error(many).contains("3 splits (one search each) x up to 96 probes x 600 seeds"),
            "the runs of every split are bounded"
        );
    }
}
