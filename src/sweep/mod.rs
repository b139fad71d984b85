//! Quantum tuning: parallel parameter sweeps with seeded replications, shards and their
//! merge, and `tune` (the inverse problem: quanta for target shares).
//!
//! A sweep takes a scenario and `--set PATH=V1,V2,...` axes, runs every point of their
//! Cartesian product with N seeds on a rayon pool, and writes `sweep.json` (what was swept),
//! `sweep.csv` (one row per point and seed), `sweep-summary.csv` (per point: mean, min, max
//! and a Student-t 95% confidence interval over seeds) and plots. Results are collected in
//! (point, replication) order before anything is written, so the bytes do not depend on
//! `--jobs`, and no wall-clock time reaches a file.
//!
//! The module takes typed options and returns data; the CLI parses flags, claims the output
//! directory, prints and maps errors to exit codes. A sweep: [`SweepPlan::new`] (loads every
//! point, runs nothing), [`SweepPlan::run`] (rows), [`SweepPlan::files`]. A merge:
//! [`shard::read_shards`], then [`table::sweep_files`]. Tuning: [`tune::tune`]. Every run
//! goes through [`crate::pipeline`]; input and simulator errors are its
//! [`RunError`](crate::pipeline::RunError), drawing errors are a
//! [`PlotError`](crate::report::render::chart::PlotError).

pub mod grid;
pub mod plots;
pub mod report;
pub mod run;
pub mod shard;
pub mod shard_check;
pub mod stats;
pub mod table;
pub mod tune;

pub use grid::{Axis, Grid, ShardSpec};
pub use run::{
    ClassMetric, ClassRow, PlanPoint, Row, StoppedRun, SweepOptions, SweepPlan, SweepRun,
};
pub use shard::Manifest;
pub use table::PointSummary;
pub use tune::{ShareKind, Spread, TuneOptions, TuneOutcome, TuneTarget};

/// The terminal summary of a whole sweep: per point, the axis values and each class's share
/// of the first N completions (mean and 95% interval over seeds) beside its ideal there, the
/// request split DRR implies for the classes' sizes (the run table's `ideal`, mean over seeds;
/// not the quantum share, which splits tokens).
pub fn summary_table(manifest: &Manifest, summaries: &[PointSummary]) -> String {
    let mut out = String::new();
    for axis in &manifest.grid.axes {
        out += &format!("{:>14} ", short_path(&axis.path));
    }
    for class in &manifest.class_names {
        out += &format!("{:>24} ", format!("{class} share [95% CI]"));
        out += &format!("{:>w$} ", format!("{class} ideal"), w = ideal_width(class));
    }
    out = out.trim_end().to_string() + "\n";
    for summary in summaries {
        out += &summary_line(summary, &manifest.class_names);
    }
    out
}

/// The width of a class's ideal column: its header's, at least the 12 of a short name's.
fn ideal_width(class: &str) -> usize {
    (class.len() + " ideal".len()).max(12)
}

fn summary_line(summary: &PointSummary, class_names: &[String]) -> String {
    let mut line = String::new();
    for value in &summary.values {
        line += &format!("{value:>14} ");
    }
    for (class, name) in class_names.iter().enumerate() {
        let cell = match summary.get(class, ClassMetric::ShareFirstN) {
            Some(s) => format!("{:.3} [{:.3}, {:.3}]", s.mean, s.ci95_low, s.ci95_high),
            // No run had a first-N share to measure.
            None => "-".to_string(),
        };
        line += &format!("{cell:>24} ");
        let ideal = summary.ideal(class, ClassMetric::ShareFirstN);
        let ideal = ideal.map_or_else(|| "-".to_string(), |i| format!("{i:.3}"));
        line += &format!("{ideal:>w$} ", w = ideal_width(name));
    }
    line.trim_end().to_string() + "\n"
}

/// The last two segments of a dotted path (`regular.quantum`), to keep columns narrow.
fn short_path(path: &str) -> String {
    let parts: Vec<&str> = path.rsplitn(3, '.').collect();
    parts
        .iter()
        .take(2)
        .rev()
        .copied()
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests;
