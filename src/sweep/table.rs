//! The sweep's files: `sweep.csv` (one row per run, written and read back losslessly),
//! `sweep-summary.csv` (per point, statistics over seeds), and the set of files a whole sweep
//! writes.

use super::plots;
use super::run::{ClassMetric, ClassRow, Row};
use super::shard::Manifest;
use super::stats::Summary;
use crate::pipeline::RunError;
use crate::report::render::chart::PlotError;
use crate::report::verdict::expect::Expectation;

/// A point's statistics over its replications.
#[derive(Clone, Debug, PartialEq)]
pub struct PointSummary {
    /// The point's index in the grid.
    pub point: usize,
    /// Its value on each axis.
    pub values: Vec<String>,
    /// How many runs (seeds) it has.
    pub runs: usize,
    /// Per class, the ideal DRR token share (mean over runs; equal in all of them).
    pub ideal_share: Vec<f64>,
    /// Per class, per [`ClassMetric::ALL`] entry, the summary (`None` if no run had a value).
    pub metrics: Vec<Vec<Option<Summary>>>,
    /// Per class, the mean over runs of its ideal share of the first N completions (the
    /// request split DRR implies for the sizes each seed drew); `None` if no run had one.
    pub ideal_share_first_n: Vec<Option<f64>>,
    /// What the fleet cost over the runs: GPU-hours, and the most workers at once.
    pub gpu_hours: Option<Summary>,
    pub peak_workers: Option<Summary>,
}

impl PointSummary {
    /// The summary of `metric` for class `class`.
    pub fn get(&self, class: usize, metric: ClassMetric) -> Option<Summary> {
        let m = ClassMetric::ALL.iter().position(|&x| x == metric)?;
        *self.metrics.get(class)?.get(m)?
    }

    /// The reference of share `metric` for class `class`: the first-N request ideal for
    /// [`ClassMetric::ShareFirstN`], the token ideal for [`ClassMetric::BackloggedTokenShare`]
    /// (`None` for a metric that is no share, or when no run had a first-N ideal).
    pub fn ideal(&self, class: usize, metric: ClassMetric) -> Option<f64> {
        match metric {
            ClassMetric::ShareFirstN => *self.ideal_share_first_n.get(class)?,
            ClassMetric::BackloggedTokenShare => self.ideal_share.get(class).copied(),
            _ => None,
        }
    }
}

/// Every file of a whole (or merged) sweep: `sweep.json`, `sweep.csv`, `sweep-summary.csv`
/// and the plots (PNG and SVG). `rows` must be sorted by (point, replication). The plots draw
/// no latency bounds: [`sweep_files_with_expectations`] draws the scenario's.
pub fn sweep_files(manifest: &Manifest, rows: &[Row]) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    sweep_files_with_expectations(manifest, rows, &[])
}

/// [`sweep_files`], with the latency bounds among `expectations` (the swept scenario's) drawn
/// on the matching latency charts.
pub fn sweep_files_with_expectations(
    manifest: &Manifest,
    rows: &[Row],
    expectations: &[Expectation],
) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    debug_assert!(
        rows.windows(2)
            .all(|w| (w[0].point, w[0].replication) < (w[1].point, w[1].replication))
    );
    let whole = Manifest {
        shard: None,
        ..manifest.clone()
    };
    let summaries = summarize(&whole, rows);
    let mut files = vec![
        ("sweep.json".to_string(), whole.to_json()),
        ("sweep.csv".to_string(), rows_csv(&whole, rows)),
        (
            "sweep-summary.csv".to_string(),
            summary_csv(&whole, &summaries),
        ),
    ];
    files.extend(plots::render_all(&whole, &summaries, expectations)?);
    Ok(files)
}

/// The `sweep.csv` header: `point`, the axis paths, `replication`, `seed`, `prefix_n`, then
/// per class `<class>.ideal_share` and `<class>.<metric>` for every [`ClassMetric`], then
/// per class `<class>.ideal_share_first_n`, then the fleet's `gpu_hours` and `peak_workers`
/// (each added last, so earlier columns kept their places).
pub fn rows_header(manifest: &Manifest) -> Vec<String> {
    let mut header = vec!["point".to_string()];
    header.extend(manifest.grid.axes.iter().map(|a| a.path.clone()));
    header.extend(["replication", "seed", "prefix_n"].map(String::from));
    for class in &manifest.class_names {
        header.push(format!("{class}.ideal_share"));
        header.extend(
            ClassMetric::ALL
                .iter()
                .map(|m| format!("{class}.{}", m.name())),
        );
    }
    header.extend(first_n_ideal_columns(manifest));
    header.extend(FLEET_COLUMNS.map(String::from));
    header
}

/// The fleet's columns, last in both CSVs.
const FLEET_COLUMNS: [&str; 2] = ["gpu_hours", "peak_workers"];

/// `<class>.ideal_share_first_n` per class: the last columns of both CSVs.
fn first_n_ideal_columns(manifest: &Manifest) -> impl Iterator<Item = String> + '_ {
    let names = manifest.class_names.iter();
    names.map(|class| format!("{class}.ideal_share_first_n"))
}

/// `sweep.csv` bytes. Floats use Rust's shortest round-trip form, so [`parse_rows_csv`] gives
/// back exactly the same rows.
pub fn rows_csv(manifest: &Manifest, rows: &[Row]) -> Vec<u8> {
    let mut out = csv::Writer::from_writer(Vec::new());
    write_record(&mut out, &rows_header(manifest));
    for row in rows {
        let mut record = vec![row.point.to_string()];
        record.extend(row.values.iter().cloned());
        record.extend([
            row.replication.to_string(),
            row.seed.to_string(),
            row.prefix_n.to_string(),
        ]);
        for class in &row.classes {
            record.push(class.ideal_share.to_string());
            record.extend(ClassMetric::ALL.iter().map(|m| cell(m.of(class))));
        }
        record.extend(row.classes.iter().map(|c| cell(c.ideal_share_first_n)));
        record.extend([row.gpu_hours.to_string(), row.peak_workers.to_string()]);
        write_record(&mut out, &record);
    }
    finish(out)
}

fn cell(value: Option<f64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// Every record has the header's width, so the writer's only failure left is I/O, and a
/// `Vec` has none.
fn write_record(out: &mut csv::Writer<Vec<u8>>, record: &[String]) {
    out.write_record(record)
        .expect("writing CSV to memory cannot fail");
}

fn finish(out: csv::Writer<Vec<u8>>) -> Vec<u8> {
    out.into_inner().expect("writing CSV to memory cannot fail")
}

/// Reads a `sweep.csv` written by [`rows_csv`] for `manifest` (`source` names the file in
/// errors), with each row's line. More than `max_rows` rows is an error as soon as the next
/// one is read, so a file far longer than its manifest allows is never read whole.
pub fn parse_rows_csv(
    manifest: &Manifest,
    input: impl std::io::Read,
    source: &str,
    max_rows: usize,
) -> Result<Vec<(Row, usize)>, RunError> {
    let bad = |line: usize, what: String| RunError::Input(format!("{source}:{line}: {what}"));
    let mut reader = csv::Reader::from_reader(input);
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| bad(1, e.to_string()))?
        .iter()
        .map(String::from)
        .collect();
    if header != rows_header(manifest) {
        return Err(bad(1, "the header does not match sweep.json".into()));
    }
    let axes = manifest.grid.axes.len();
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let line = i + 2;
        if i == max_rows {
            return Err(bad(
                line,
                format!("more rows than the {max_rows} runs sweep.json gives this file"),
            ));
        }
        let record = record.map_err(|e| bad(line, e.to_string()))?;
        let fields: Vec<&str> = record.iter().collect();
        let row = parse_row(&fields, &header, axes).map_err(|what| bad(line, what))?;
        rows.push((row, line));
    }
    Ok(rows)
}

/// One record of `sweep.csv` (as wide as `header`, which the reader checks) as a row; an
/// error names the column.
fn parse_row(fields: &[&str], header: &[String], axes: usize) -> Result<Row, String> {
    let cell = |i: usize| (fields[i], &header[i]);
    let int = |i: usize| {
        let (text, column) = cell(i);
        text.parse::<u64>().map_err(|_| {
            format!("column `{column}`: not a whole number from 0 to 2^64 - 1: {text:?}")
        })
    };
    let float = |i: usize| {
        let (text, column) = cell(i);
        text.parse::<f64>()
            .map_err(|_| format!("column `{column}`: not a number: {text:?}"))
    };
    let optional = |i: usize| match fields[i] {
        "" => Ok(None),
        _ => float(i).map(Some),
    };
    let fixed = 1 + axes + 3;
    let per_class = 1 + ClassMetric::ALL.len();
    // Each class has its block, then one first-N ideal among the last columns, then the
    // fleet's.
    let fleet = fields.len() - FLEET_COLUMNS.len();
    let class_count = (fleet - fixed) / (per_class + 1);
    let first_n_ideals = fixed + class_count * per_class;
    let classes = (0..class_count)
        .map(|k| {
            let c = fixed + k * per_class;
            Ok(ClassRow {
                ideal_share: float(c)?,
                completed: int(c + 1)?,
                share_first_n: optional(c + 2)?,
                backlogged_token_share: optional(c + 3)?,
                ttft_ms_p50: optional(c + 4)?,
                ttft_ms_p99: optional(c + 5)?,
                e2e_ms_p50: optional(c + 6)?,
                e2e_ms_p99: optional(c + 7)?,
                ideal_share_first_n: optional(first_n_ideals + k)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let replication = int(axes + 1)?;
    Ok(Row {
        point: usize::try_from(int(0)?).map_err(|_| "column `point`: too large".to_string())?,
        values: fields[1..=axes].iter().map(|v| v.to_string()).collect(),
        replication: u32::try_from(replication).map_err(|_| {
            format!("column `replication`: {replication} is more than 4,294,967,295")
        })?,
        seed: int(axes + 2)?,
        prefix_n: int(axes + 3)?,
        classes,
        gpu_hours: float(fleet)?,
        peak_workers: int(fleet + 1)?,
    })
}

/// Per point, the statistics over its runs. `rows` sorted by (point, replication).
pub fn summarize(manifest: &Manifest, rows: &[Row]) -> Vec<PointSummary> {
    rows.chunk_by(|a, b| a.point == b.point)
        .map(|runs| summarize_point(manifest.class_names.len(), runs))
        .collect()
}

fn summarize_point(class_count: usize, runs: &[Row]) -> PointSummary {
    let ideal_share = (0..class_count)
        .map(|c| runs.iter().map(|r| r.classes[c].ideal_share).sum::<f64>() / runs.len() as f64)
        .collect();
    let metrics = (0..class_count)
        .map(|c| {
            ClassMetric::ALL
                .iter()
                .map(|m| {
                    let values: Vec<f64> =
                        runs.iter().filter_map(|r| m.of(&r.classes[c])).collect();
                    Summary::of(&values)
                })
                .collect()
        })
        .collect();
    let ideal_share_first_n = (0..class_count)
        .map(|c| {
            let ideals: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.classes[c].ideal_share_first_n)
                .collect();
            Summary::of(&ideals).map(|s| s.mean)
        })
        .collect();
    let gpu_hours: Vec<f64> = runs.iter().map(|r| r.gpu_hours).collect();
    let peak_workers: Vec<f64> = runs.iter().map(|r| r.peak_workers as f64).collect();
    PointSummary {
        point: runs[0].point,
        values: runs[0].values.clone(),
        runs: runs.len(),
        ideal_share,
        metrics,
        ideal_share_first_n,
        gpu_hours: Summary::of(&gpu_hours),
        peak_workers: Summary::of(&peak_workers),
    }
}

/// `sweep-summary.csv` bytes: `point`, the axis paths, `runs`, then per class
/// `<class>.ideal_share` (the token ideal) and, per metric, `.mean .min .max .ci95_low
/// .ci95_high`, then per class `<class>.ideal_share_first_n` (the mean first-N request ideal,
/// the reference of `share_first_n`), then `gpu_hours` and `peak_workers` with the same five
/// statistics; 6 decimals, empty when no run had a value.
pub fn summary_csv(manifest: &Manifest, summaries: &[PointSummary]) -> Vec<u8> {
    let mut out = csv::Writer::from_writer(Vec::new());
    let mut header = vec!["point".to_string()];
    header.extend(manifest.grid.axes.iter().map(|a| a.path.clone()));
    header.push("runs".into());
    for class in &manifest.class_names {
        header.push(format!("{class}.ideal_share"));
        for m in ClassMetric::ALL {
            for stat in ["mean", "min", "max", "ci95_low", "ci95_high"] {
                header.push(format!("{class}.{}.{stat}", m.name()));
            }
        }
    }
    header.extend(first_n_ideal_columns(manifest));
    for column in FLEET_COLUMNS {
        for stat in ["mean", "min", "max", "ci95_low", "ci95_high"] {
            header.push(format!("{column}.{stat}"));
        }
    }
    write_record(&mut out, &header);
    for s in summaries {
        let mut record = vec![s.point.to_string()];
        record.extend(s.values.iter().cloned());
        record.push(s.runs.to_string());
        for (c, ideal) in s.ideal_share.iter().enumerate() {
            record.push(format!("{ideal:.6}"));
            for summary in &s.metrics[c] {
                record.extend(summary_cells(summary));
            }
        }
        let first_n_ideals = s.ideal_share_first_n.iter();
        record.extend(first_n_ideals.map(|i| i.map(|v| format!("{v:.6}")).unwrap_or_default()));
        record.extend(summary_cells(&s.gpu_hours));
        record.extend(summary_cells(&s.peak_workers));
        write_record(&mut out, &record);
    }
    finish(out)
}

fn summary_cells(summary: &Option<Summary>) -> Vec<String> {
    match summary {
        None => vec![String::new(); 5],
        Some(s) => [s.mean, s.min, s.max, s.ci95_low, s.ci95_high]
            .iter()
            .map(|v| format!("{v:.6}"))
            .collect(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sweep::grid::Grid;

    pub(crate) fn manifest() -> Manifest {
        Manifest {
            format: Manifest::FORMAT.into(),
            scenario: "s".into(),
            source_hash: "0123456789abcdef".into(),
            grid: Grid::parse(&["router.policy_classes.b.quantum=1,2".into()]).unwrap(),
            replications: 2,
            arrival_jitter_ns: 0,
            prefix_n: None,
            class_names: vec!["a".into(), "b".into()],
            shard: None,
        }
    }

    fn class(share: Option<f64>, completed: u64) -> ClassRow {
        ClassRow {
            completed,
            ideal_share: 1.0 / 3.0,
            share_first_n: share,
            backlogged_token_share: share.map(|s| s * 0.1 + 1e-17),
            ttft_ms_p50: Some(0.1 + 0.2),
            ttft_ms_p99: None,
            e2e_ms_p50: Some(1234.567891),
            e2e_ms_p99: Some(f64::MIN_POSITIVE),
            ideal_share_first_n: share.map(|s| s + 0.1 + 1e-16),
        }
    }

    pub(crate) fn rows() -> Vec<Row> {
        let mut rows = Vec::new();
        for point in 0..2 {
            for replication in 0..2u32 {
                let share = 0.25 + 0.125 * replication as f64;
                rows.push(Row {
                    point,
                    replication,
                    // As a sweep derives them, so a merge believes them.
                    seed: crate::pipeline::replication_seeds(u64::MAX, 2)[replication as usize],
                    values: vec![(point + 1).to_string()],
                    prefix_n: 320,
                    classes: vec![class(Some(share), 10), class(None, 3)],
                    // A cost with no short form, so reading it back is a real check.
                    gpu_hours: 0.1 + 0.2 * point as f64 + 1e-17,
                    peak_workers: 3 + u64::from(replication),
                });
            }
        }
        rows
    }

    #[test]
    fn sweep_csv_reads_back_exactly() {
        let (m, rows) = (manifest(), rows());
        let bytes = rows_csv(&m, &rows);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with("point,router.policy_classes.b.quantum,replication,seed,prefix_n,a.ideal_share,a.completed,a.share_first_n,"));
        let header = text.lines().next().unwrap();
        assert!(
            header.ends_with(
                ",b.e2e_ms_p99,a.ideal_share_first_n,b.ideal_share_first_n,gpu_hours,peak_workers"
            ),
            "the first-N ideals, then the fleet, come after every earlier column: {header}"
        );
        let back = parse_rows_csv(&m, &bytes[..], "x.csv", rows.len()).unwrap();
        assert_eq!(
            back.iter().map(|(r, _)| r.clone()).collect::<Vec<_>>(),
            rows
        );
        assert_eq!(
            back.iter().map(|&(_, line)| line).collect::<Vec<_>>(),
            [2, 3, 4, 5]
        );
        let short = parse_rows_csv(&m, &bytes[..], "x.csv", 3).unwrap_err();
        assert!(
            short
                .to_string()
                .starts_with("x.csv:5: more rows than the 3 runs"),
            "{short}"
        );
    }

    #[test]
    fn a_csv_of_another_sweep_is_rejected_naming_the_file() {
        let bytes = rows_csv(&manifest(), &rows());
        let mut other = manifest();
        other.class_names[1] = "c".into();
        let err = parse_rows_csv(&other, &bytes[..], "x.csv", 4).unwrap_err();
        assert!(matches!(err, RunError::Input(_)), "{err}");
        assert!(err.to_string().starts_with("x.csv:1:"), "{err}");
        let garbled = String::from_utf8(bytes).unwrap().replacen("320", "lots", 1);
        let err = parse_rows_csv(&manifest(), garbled.as_bytes(), "x.csv", 4).unwrap_err();
        assert!(
            err.to_string()
                .contains("x.csv:2: column `prefix_n`: not a whole number"),
            "{err}"
        );
    }

    #[test]
    fn summary_is_per_point_over_seeds_and_skips_missing_values() {
        let summaries = summarize(&manifest(), &rows());
        assert_eq!(summaries.len(), 2);
        let s = &summaries[1];
        assert_eq!(
            (s.point, s.runs, s.values.clone()),
            (1, 2, vec!["2".to_string()])
        );
        let share = s.get(0, ClassMetric::ShareFirstN).unwrap();
        assert_eq!(
            (share.n, share.mean, share.min, share.max),
            (2, 0.3125, 0.25, 0.375)
        );
        assert!(share.ci95_low < 0.25 && share.ci95_high > 0.375);
        assert_eq!(s.get(1, ClassMetric::ShareFirstN), None);
        assert_eq!(s.get(0, ClassMetric::Completed).unwrap().mean, 10.0);
        let csv = String::from_utf8(summary_csv(&manifest(), &summaries)).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].contains("a.share_first_n.mean,a.share_first_n.min,a.share_first_n.max,a.share_first_n.ci95_low,a.share_first_n.ci95_high"));
        assert!(
            lines[2].starts_with("1,2,2,0.333333,10.000000,"),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn the_summary_compares_the_first_n_share_with_the_mean_request_ideal() {
        let summaries = summarize(&manifest(), &rows());
        let s = &summaries[1];
        // The two seeds' first-N ideals are 0.35 and 0.475; the token ideal stays 1/3.
        let ideal = s.ideal(0, ClassMetric::ShareFirstN).unwrap();
        assert!((ideal - 0.4125).abs() < 1e-12, "{ideal}");
        assert_eq!(s.ideal(1, ClassMetric::ShareFirstN), None);
        assert_eq!(
            s.ideal(0, ClassMetric::BackloggedTokenShare),
            Some(1.0 / 3.0)
        );
        assert_eq!(s.ideal(0, ClassMetric::TtftMsP99), None);
        let csv = String::from_utf8(summary_csv(&manifest(), &summaries)).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert!(
            lines[0].contains(",a.ideal_share_first_n,b.ideal_share_first_n,gpu_hours.mean,"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].ends_with(",peak_workers.ci95_high"),
            "{}",
            lines[0]
        );
        // Point 1: the first-N ideals, then 0.3 GPU-hours in both runs and 3 then 4 workers
        // at the peak.
        let fleet = "0.300000,0.300000,0.300000,0.300000,0.300000,3.500000,3.000000,4.000000,";
        let tail = format!(",0.412500,,{fleet}-2.853000,9.853000");
        assert!(lines[2].ends_with(&tail), "{}", lines[2]);
    }
}
