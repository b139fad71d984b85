//! The swept grid: `--set PATH=V1,V2,...` axes, their Cartesian product of points, and the
//! `--shard K/N` slice of those points.

use crate::bounds::MAX_SWEEP_RUNS;
use crate::pipeline::RunError;
use crate::scenario::raw::SCENARIO_KEYS;
use crate::yaml::{self, Step};
use serde::{Deserialize, Serialize};

/// The most points one sweep may have (keeps memory and run time bounded): as many as runs.
pub const MAX_POINTS: usize = MAX_SWEEP_RUNS as usize;

/// Refuses a sweep of more than [`MAX_SWEEP_RUNS`] runs (`points` × `seeds`), before
/// anything is allocated per run.
pub fn check_run_count(points: usize, seeds: u32) -> Result<(), RunError> {
    let runs = (points as u64).saturating_mul(u64::from(seeds));
    match runs <= MAX_SWEEP_RUNS {
        true => Ok(()),
        false => Err(RunError::Input(format!(
            "--seeds {seeds}: {points} points x {seeds} seeds = {runs} runs, more than the {MAX_SWEEP_RUNS} a sweep may have"
        ))),
    }
}

/// One swept field and its values, in the order given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    /// The scenario field path, e.g. `router.policy_classes.regular.quantum`.
    pub path: String,
    /// The values, as written (each is applied as a `--set PATH=VALUE` override).
    pub values: Vec<String>,
}

impl Axis {
    /// Parses `PATH=V1,V2,...`. Values are split on commas outside `[...]` and `{...}`, so a
    /// list value such as `[1,2]` stays whole.
    pub fn parse(set: &str) -> Result<Axis, RunError> {
        let (path, values) = set
            .split_once('=')
            .ok_or_else(|| RunError::Input(format!("--set {set}: expected PATH=V1,V2,...")))?;
        let path = path.trim();
        if path.is_empty() {
            return Err(RunError::Input(format!("--set {set}: the path is empty")));
        }
        let values = split_values(values);
        if values.iter().any(|v| v.is_empty()) {
            return Err(RunError::Input(format!(
                "{path}: an empty value in --set {set}"
            )));
        }
        Ok(Axis {
            path: path.to_string(),
            values,
        })
    }

    /// Whether every value is a number (then plots use them as x positions).
    pub fn is_numeric(&self) -> bool {
        self.values.iter().all(|v| v.parse::<f64>().is_ok())
    }
}

/// Whether `path` is an axis path a sweep could have run: trimmed, a field path (the grammar
/// `--set` takes, no empty step) starting at a scenario key. A sweep's scenario refuses
/// every other path; a merge, which has no scenario, checks `sweep.json` by this much.
pub fn check_path(path: &str) -> Result<(), String> {
    let shown = path.escape_debug();
    if path.trim() != path || path.is_empty() {
        return Err(format!(
            "`{shown}` is not a field path: it is empty or padded"
        ));
    }
    let steps = yaml::parse_path(path)
        .filter(|steps| !steps.is_empty() && !steps.contains(&Step::Key(String::new())))
        .ok_or_else(|| format!("`{shown}` is not a field path"))?;
    match &steps[0] {
        Step::Key(key) if SCENARIO_KEYS.contains(&key.as_str()) => Ok(()),
        _ => Err(format!(
            "`{shown}` is not a field path of a scenario: it starts at none of {}",
            SCENARIO_KEYS.join(", ")
        )),
    }
}

/// Splits on top-level commas, trimming each value.
fn split_values(text: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut depth = 0i32;
    let mut current = String::new();
    for ch in text.chars() {
        match ch {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                values.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    values.push(current.trim().to_string());
    values
}

/// The axes of a sweep. Point `i` takes, for each axis, the value at the mixed-radix digit
/// of `i` (the last axis varies fastest), so points are numbered in row-major order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grid {
    /// The axes in command-line order.
    pub axes: Vec<Axis>,
}

impl Grid {
    /// Parses every `--set`; a path given twice is an error.
    pub fn parse(sets: &[String]) -> Result<Grid, RunError> {
        let axes = sets
            .iter()
            .map(|s| Axis::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        let grid = Grid { axes };
        grid.check()?;
        Ok(grid)
    }

    /// What every grid holds, parsed or read back from a `sweep.json`: each path once, each
    /// axis with a value, and at most [`MAX_POINTS`] points.
    pub fn check(&self) -> Result<(), RunError> {
        for (i, axis) in self.axes.iter().enumerate() {
            if self.axes[..i].iter().any(|a| a.path == axis.path) {
                return Err(RunError::Input(format!(
                    "{}: given twice with --set",
                    axis.path
                )));
            }
            if axis.values.is_empty() {
                return Err(RunError::Input(format!("{}: no values", axis.path)));
            }
        }
        let mut count: usize = 1;
        for axis in &self.axes {
            count = count
                .checked_mul(axis.values.len())
                .filter(|&c| c <= MAX_POINTS)
                .ok_or_else(|| {
                    RunError::Input(format!("more than {MAX_POINTS} points in the sweep"))
                })?;
        }
        Ok(())
    }

    /// How many points the product has (1 without axes).
    pub fn point_count(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product()
    }

    /// The value index on each axis of point `point`.
    pub fn digits(&self, point: usize) -> Vec<usize> {
        debug_assert!(point < self.point_count());
        let mut rest = point;
        let mut digits = vec![0; self.axes.len()];
        for (i, axis) in self.axes.iter().enumerate().rev() {
            digits[i] = rest % axis.values.len();
            rest /= axis.values.len();
        }
        digits
    }

    /// The values of point `point`, one per axis.
    pub fn values(&self, point: usize) -> Vec<String> {
        self.digits(point)
            .iter()
            .zip(&self.axes)
            .map(|(&d, axis)| axis.values[d].clone())
            .collect()
    }

    /// The `(path, value)` overrides of point `point`.
    pub fn overrides(&self, point: usize) -> Vec<(String, String)> {
        self.axes
            .iter()
            .map(|a| a.path.clone())
            .zip(self.values(point))
            .collect()
    }

    /// Indices of the axes with more than one value (those the plots vary).
    pub fn varied_axes(&self) -> Vec<usize> {
        (0..self.axes.len())
            .filter(|&i| self.axes[i].values.len() > 1)
            .collect()
    }
}

/// `--shard K/N`: shard `index` (1-based) of `count`. Shards are strided: shard K runs
/// points K-1, K-1+N, K-1+2N, ..., so neighbouring (similarly expensive) points spread over
/// all shards.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSpec {
    /// 1-based shard number K.
    pub index: usize,
    /// Number of shards N.
    pub count: usize,
}

impl ShardSpec {
    /// Parses `K/N` with `1 <= K <= N`.
    pub fn parse(text: &str) -> Result<ShardSpec, RunError> {
        let bad = || RunError::Input(format!("--shard {text}: expected K/N with 1 <= K <= N"));
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let index: usize = k.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || index > count || count > MAX_POINTS {
            return Err(bad());
        }
        Ok(ShardSpec { index, count })
    }

    /// Whether point `point` belongs to this shard.
    pub fn contains(&self, point: usize) -> bool {
        point % self.count == self.index - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_splits_values_outside_brackets() {
        let axis = Axis::parse("a.b=1, 2,[3,4]").unwrap();
        assert_eq!(axis.path, "a.b");
        assert_eq!(axis.values, vec!["1", "2", "[3,4]"]);
        assert!(!axis.is_numeric());
        assert!(Axis::parse("a.b=32,64").unwrap().is_numeric());
    }

    #[test]
    fn malformed_sets_name_the_problem() {
        assert!(Axis::parse("novalue").is_err());
        let err = Axis::parse("x.y=1,,2").unwrap_err();
        assert!(err.to_string().contains("x.y"), "{err}");
        assert!(matches!(err, RunError::Input(_)), "{err}");
        let twice = Grid::parse(&["a=1".into(), "a=2".into()]).unwrap_err();
        assert!(twice.to_string().contains("given twice"));
    }

    #[test]
    fn points_are_row_major_with_the_last_axis_fastest() {
        let grid = Grid::parse(&["a=1,2".into(), "b=x,y,z".into()]).unwrap();
        assert_eq!(grid.point_count(), 6);
        assert_eq!(grid.values(0), vec!["1", "x"]);
        assert_eq!(grid.values(1), vec!["1", "y"]);
        assert_eq!(grid.values(3), vec!["2", "x"]);
        assert_eq!(grid.values(5), vec!["2", "z"]);
        assert_eq!(
            grid.overrides(4),
            vec![("a".to_string(), "2".to_string()), ("b".into(), "y".into())]
        );
        assert_eq!(grid.varied_axes(), vec![0, 1]);
        assert_eq!(Grid::parse(&[]).unwrap().point_count(), 1);
    }

    #[test]
    fn shards_are_strided_and_cover_every_point_once() {
        assert!(ShardSpec::parse("0/3").is_err());
        assert!(ShardSpec::parse("4/3").is_err());
        assert!(ShardSpec::parse("x").is_err());
        let shards: Vec<ShardSpec> = (1..=3)
            .map(|k| ShardSpec::parse(&format!("{k}/3")).unwrap())
            .collect();
        assert!(shards[0].contains(0) && shards[0].contains(3));
        assert!(shards[1].contains(1) && shards[2].contains(5));
        for point in 0..20 {
            assert_eq!(shards.iter().filter(|s| s.contains(point)).count(), 1);
        }
    }
}
