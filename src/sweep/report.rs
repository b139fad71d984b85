//! The `report.html` of a whole (or merged) sweep: what was swept, the summary table (per
//! point: each class's first-N share with its 95% interval over seeds beside its first-N
//! request ideal, and its p99 TTFT; the fleet's mean GPU-hours) and the metric charts, built with
//! [`crate::report::render::html::Page`] (bytes from data).

use super::ClassMetric;
use super::shard::Manifest;
use super::table::PointSummary;
use crate::report::render::html::{Page, linked_names};
use crate::report::verdict::evaluate::number;

/// The sweep page of `summaries` whose directory holds `files`.
pub fn sweep_report<S: AsRef<str>, B: AsRef<[u8]>>(
    manifest: &Manifest,
    summaries: &[PointSummary],
    files: &[(S, B)],
) -> Vec<u8> {
    let mut page = Page::new("sweep", &manifest.scenario);
    page.facts(&facts(manifest));
    page.section("summary", "Summary");
    let (header, rows) = summary_cells(manifest, summaries);
    page.table("summary", &header, &rows);
    page.paragraph(
        "Means over each point's seeds; the share is of the first N completions, with its \
         Student-t 95% confidence interval, and the ideal is the share of them DRR implies for \
         the classes' request sizes (the run table's ideal; the quantum share splits tokens, \
         not requests). sweep-summary.csv holds every metric.",
    );
    page.section("plots", "Plots");
    match files.iter().any(|(n, _)| n.as_ref().ends_with(".svg")) {
        true => page.charts(files),
        false => page.paragraph("No plots: a sweep draws them for one or two varied axes."),
    }
    page.section("files", "Files");
    page.links(&linked_names(files));
    page.finish()
}

fn facts(manifest: &Manifest) -> Vec<(String, String)> {
    let mut facts = vec![("command".to_string(), "routersim sweep".to_string())];
    for axis in &manifest.grid.axes {
        facts.push((format!("axis {}", axis.path), axis.values.join(", ")));
    }
    facts.push(("seeds per point".into(), manifest.replications.to_string()));
    if manifest.arrival_jitter_ns > 0 {
        facts.push((
            "arrival jitter (ns)".into(),
            manifest.arrival_jitter_ns.to_string(),
        ));
    }
    facts
}

/// The columns the terminal summary shows, and each class's p99 TTFT.
fn summary_cells(
    manifest: &Manifest,
    summaries: &[PointSummary],
) -> (Vec<String>, Vec<Vec<String>>) {
    let mut header = vec!["point".to_string()];
    header.extend(
        manifest
            .grid
            .axes
            .iter()
            .map(|a| super::short_path(&a.path)),
    );
    header.push("runs".into());
    for class in &manifest.class_names {
        header.push(format!("{class} share [95% CI]"));
        header.push(format!("{class} ideal"));
        header.push(format!("{class} ttft p99 ms"));
    }
    header.push("gpu-hours".into());
    let rows = summaries.iter().map(|s| summary_row(s, manifest)).collect();
    (header, rows)
}

fn summary_row(summary: &PointSummary, manifest: &Manifest) -> Vec<String> {
    let mut row = vec![summary.point.to_string()];
    row.extend(summary.values.iter().cloned());
    row.push(summary.runs.to_string());
    for class in 0..manifest.class_names.len() {
        row.push(match summary.get(class, ClassMetric::ShareFirstN) {
            Some(s) => format!("{:.3} [{:.3}, {:.3}]", s.mean, s.ci95_low, s.ci95_high),
            None => "-".to_string(),
        });
        let ideal = summary.ideal(class, ClassMetric::ShareFirstN);
        row.push(ideal.map_or_else(|| "-".to_string(), |i| format!("{i:.3}")));
        row.push(
            summary
                .get(class, ClassMetric::TtftMsP99)
                .map_or_else(|| "-".to_string(), |s| number(s.mean)),
        );
    }
    // What the fleet cost, mean over the runs: what a sweep over planner keys trades.
    row.push(
        summary
            .gpu_hours
            .map_or_else(|| "-".to_string(), |s| format!("{:.4}", s.mean)),
    );
    row
}
