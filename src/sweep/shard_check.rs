//! What `merge` believes of a shard's rows: every value finite and in its range, every row's
//! point, axis values and replication as the manifest has them, and every seed the one a
//! sweep of that manifest would have run. A shard edited by hand, or by a bug, is an input
//! error naming its file, line and column, never a silently wrong mean.

use super::run::{ClassMetric, ClassRow, Row};
use super::shard::Manifest;
use crate::bounds::MAX_REQUESTS;
use crate::pipeline::{self, RunError};

/// Where a row was read: its shard's `sweep.csv` and its line there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowSource {
    /// The file, as its error messages name it.
    pub file: String,
    /// The 1-based line (the header is line 1).
    pub line: usize,
}

impl RowSource {
    fn error(&self, column: &str, what: String) -> RunError {
        RunError::Input(format!(
            "{}:{}: column `{column}`: {what}",
            self.file, self.line
        ))
    }
}

/// The longest a `sweep.csv` of `manifest` holding `runs` rows can be, in bytes: each cell
/// at its longest form (a float's shortest round-trip digits are at most 330 characters,
/// an integer's 20, an axis value as long as the manifest's, doubled for CSV quoting). A
/// larger file is not one routersim wrote, and is refused before it is parsed.
pub fn max_rows_csv_bytes(manifest: &Manifest, runs: usize) -> u64 {
    const INTEGER_CELL: u64 = 20 + 1;
    const FLOAT_CELL: u64 = 330 + 1;
    let quoted = |text: &str| 2 * text.len() as u64 + 2 + 1;
    let axes: u64 = manifest
        .grid
        .axes
        .iter()
        .map(|a| a.values.iter().map(|v| quoted(v)).max().unwrap_or(1))
        .sum();
    // `completed`, then as floats `ideal_share`, the other metrics and `ideal_share_first_n`.
    let per_class = INTEGER_CELL + FLOAT_CELL * (ClassMetric::ALL.len() as u64 + 1);
    let classes = manifest.class_names.len() as u64;
    let row = 4 * INTEGER_CELL + axes + classes * per_class + 1;
    let header: u64 = super::table::rows_header(manifest)
        .iter()
        .map(|name| quoted(name))
        .sum();
    header + 1 + row * runs as u64
}

/// Checks one row against its manifest: the point is in the grid, the axis values are that
/// point's, the replication and `prefix_n` are the sweep's, and every metric is finite and
/// in range (shares in [0, 1], latencies >= 0, counts within the request bound).
pub fn check_row(manifest: &Manifest, row: &Row, at: &RowSource) -> Result<(), RunError> {
    let points = manifest.grid.point_count();
    if row.point >= points {
        return Err(at.error(
            "point",
            format!(
                "{} is not in the grid, whose points are 0..={}",
                row.point,
                points - 1
            ),
        ));
    }
    let expected = manifest.grid.values(row.point);
    for ((axis, value), want) in manifest.grid.axes.iter().zip(&row.values).zip(&expected) {
        if value != want {
            return Err(at.error(
                &axis.path,
                format!(
                    "`{value}` is not point {}'s value, which sweep.json says is `{want}`",
                    row.point
                ),
            ));
        }
    }
    if row.replication >= manifest.replications {
        return Err(at.error(
            "replication",
            format!(
                "{} is not below the sweep's {} replications",
                row.replication, manifest.replications
            ),
        ));
    }
    check_prefix_n(manifest, row, at)?;
    for (class, name) in row.classes.iter().zip(&manifest.class_names) {
        check_class(class, name, at)?;
    }
    Ok(())
}

fn check_prefix_n(manifest: &Manifest, row: &Row, at: &RowSource) -> Result<(), RunError> {
    match manifest.prefix_n {
        Some(n) if row.prefix_n != n => Err(at.error(
            "prefix_n",
            format!("{}, but sweep.json fixes it at {n}", row.prefix_n),
        )),
        _ if row.prefix_n > MAX_REQUESTS => Err(at.error(
            "prefix_n",
            format!(
                "{} is more than the {MAX_REQUESTS} requests a run may have",
                row.prefix_n
            ),
        )),
        _ => Ok(()),
    }
}

fn check_class(class: &ClassRow, name: &str, at: &RowSource) -> Result<(), RunError> {
    let column = |suffix: &str| format!("{name}.{suffix}");
    check_share(Some(class.ideal_share), &column("ideal_share"), at)?;
    let first_n_ideal = column("ideal_share_first_n");
    check_share(class.ideal_share_first_n, &first_n_ideal, at)?;
    if class.completed > MAX_REQUESTS {
        return Err(at.error(
            &column("completed"),
            format!(
                "{} is more than the {MAX_REQUESTS} requests a run may have",
                class.completed
            ),
        ));
    }
    for metric in ClassMetric::ALL {
        let value = metric.of(class);
        let column = column(metric.name());
        match metric.is_share() {
            true => check_share(value, &column, at)?,
            false => check_latency(value, &column, at)?,
        }
    }
    Ok(())
}

fn check_share(value: Option<f64>, column: &str, at: &RowSource) -> Result<(), RunError> {
    match value {
        Some(v) if !(0.0..=1.0).contains(&v) => Err(at.error(
            column,
            format!("{v} is not a share: a share is a number from 0 to 1"),
        )),
        _ => Ok(()),
    }
}

fn check_latency(value: Option<f64>, column: &str, at: &RowSource) -> Result<(), RunError> {
    match value {
        Some(v) if !(v.is_finite() && v >= 0.0) => Err(at.error(
            column,
            format!("{v} is not a count or a latency: it must be finite and at least 0"),
        )),
        _ => Ok(()),
    }
}

/// Checks the seeds of every run, given in (point, replication) order with where each was
/// read: each point's replications have the seeds a sweep derives from its replication 0's
/// seed, and replication 0's seed is the point's `seed` axis value when the sweep varies
/// `seed`, or else the same for every point (the scenario's seed).
pub fn check_seeds(manifest: &Manifest, runs: &[(Row, RowSource)]) -> Result<(), RunError> {
    let reps = manifest.replications as usize;
    let seed_axis = manifest.grid.axes.iter().position(|a| a.path == "seed");
    let first_base = runs.first().map(|(row, _)| row.seed);
    for point in runs.chunks(reps) {
        let (head, at) = &point[0];
        let base_want = match seed_axis {
            Some(axis) => head.values[axis].parse::<u64>().ok(),
            None => first_base,
        };
        if base_want.is_some_and(|want| want != head.seed) {
            let why = match seed_axis {
                Some(_) => "its `seed` axis value".to_string(),
                None => format!("point 0's ({}), as no axis varies `seed`", runs[0].0.seed),
            };
            return Err(at.error(
                "seed",
                format!(
                    "{} is not the seed of point {} replication 0, which must be {why}",
                    head.seed, head.point
                ),
            ));
        }
        let seeds = pipeline::replication_seeds(head.seed, manifest.replications);
        for ((row, at), want) in point.iter().zip(seeds).skip(1) {
            if row.seed != want {
                return Err(at.error(
                    "seed",
                    format!(
                        "{} is not the seed of point {} replication {}: a sweep derives it from replication 0's seed {} as {want}",
                        row.seed, row.point, row.replication, head.seed
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::table::tests::{manifest, rows};
    use crate::sweep::table::{parse_rows_csv, rows_csv};

    fn at() -> RowSource {
        RowSource {
            file: "s.csv".into(),
            line: 7,
        }
    }

    #[test]
    fn rows_at_their_longest_fit_the_csv_bound() {
        let m = manifest();
        let mut longest = rows();
        for row in &mut longest {
            row.seed = u64::MAX;
            row.prefix_n = MAX_REQUESTS;
            for class in &mut row.classes {
                class.completed = u64::MAX;
                class.ideal_share = f64::MIN_POSITIVE / 4.0;
                class.share_first_n = Some(-f64::MIN_POSITIVE / 3.0);
                class.backlogged_token_share = Some(-f64::MAX);
                class.ttft_ms_p50 = Some(5e-324);
                class.ttft_ms_p99 = Some(-5e-324);
                class.e2e_ms_p50 = Some(f64::MAX);
                class.e2e_ms_p99 = Some(-1.2345678901234567e-300);
                class.ideal_share_first_n = Some(-2.2250738585072014e-308 / 7.0);
            }
        }
        let bytes = rows_csv(&m, &longest).len() as u64;
        let bound = max_rows_csv_bytes(&m, longest.len());
        assert!(bytes <= bound, "{bytes} > {bound}");
        assert!(
            bound < 2 * bytes,
            "a bound far above the longest: {bound} vs {bytes}"
        );
        assert!(max_rows_csv_bytes(&m, longest.len() - 1) < bytes);
    }

    #[test]
    fn the_rows_a_sweep_writes_pass_every_check() {
        let m = manifest();
        let bytes = rows_csv(&m, &rows());
        for (row, line) in parse_rows_csv(&m, &bytes[..], "s.csv", 4).unwrap() {
            check_row(
                &m,
                &row,
                &RowSource {
                    file: "s.csv".into(),
                    line,
                },
            )
            .unwrap();
        }
    }

    #[test]
    fn a_point_past_the_grid_is_named_with_the_grids_range() {
        let mut row = rows()[0].clone();
        row.point = 2;
        let err = check_row(&manifest(), &row, &at()).unwrap_err().to_string();
        assert_eq!(
            err,
            "s.csv:7: column `point`: 2 is not in the grid, whose points are 0..=1"
        );
    }

    #[test]
    fn a_fixed_first_n_must_be_every_rows() {
        let m = Manifest {
            prefix_n: Some(100),
            ..manifest()
        };
        let err = check_row(&m, &rows()[0], &at()).unwrap_err().to_string();
        assert!(
            err.ends_with("column `prefix_n`: 320, but sweep.json fixes it at 100"),
            "{err}"
        );
    }

    fn runs(seeds: [u64; 4], values: [&str; 2]) -> Vec<(Row, RowSource)> {
        rows()
            .into_iter()
            .zip(seeds)
            .map(|(mut row, seed)| {
                row.seed = seed;
                row.values = vec![values[row.point].to_string()];
                (row, at())
            })
            .collect()
    }

    #[test]
    fn replication_seeds_follow_from_replication_0s() {
        let m = manifest();
        let derived = |base| pipeline::replication_seeds(base, 2)[1];
        let good = runs([9, derived(9), 9, derived(9)], ["1", "2"]);
        check_seeds(&m, &good).unwrap();
        let other_base = runs([9, derived(9), 10, derived(10)], ["1", "2"]);
        let err = check_seeds(&m, &other_base).unwrap_err().to_string();
        assert!(
            err.contains("10 is not the seed of point 1 replication 0"),
            "{err}"
        );
        let bad_derived = runs([9, 1, 9, derived(9)], ["1", "2"]);
        let err = check_seeds(&m, &bad_derived).unwrap_err().to_string();
        assert!(
            err.contains("1 is not the seed of point 0 replication 1"),
            "{err}"
        );
    }

    #[test]
    fn a_seed_axis_gives_each_point_its_own_base_seed() {
        let mut m = manifest();
        m.grid.axes[0].path = "seed".into();
        let derived = |base| pipeline::replication_seeds(base, 2)[1];
        let good = runs([3, derived(3), 4, derived(4)], ["3", "4"]);
        check_seeds(&m, &good).unwrap();
        let swapped = runs([4, derived(4), 3, derived(3)], ["3", "4"]);
        let err = check_seeds(&m, &swapped).unwrap_err().to_string();
        assert!(err.contains("which must be its `seed` axis value"), "{err}");
    }
}
