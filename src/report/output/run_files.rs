//! The files of a run's output directory, named as in its contract and ready to write: the
//! data files, the plots, `report.html` and `timeline.json`, each a [`FileBody`] of bytes
//! from `render` (or a streamed exporter of them).

use super::FileBody;
use crate::report::measure::metrics;
use crate::report::render::data_files::{
    classes_csv, scaling_csv, summary_json, write_completions_csv,
};
use crate::report::render::requests_csv::write_requests_csv;
use crate::report::render::{chart, html, plots, run_page, timeline};
use crate::report::verdict::expect;
use crate::sim::SimResult;

/// Every data file of a run (no plots), named as in the output-directory contract:
/// `requests.csv`, `completions.csv`, `classes.csv`, `summary.json`, and `scaling.csv` for a
/// run with a scaling policy. `meta` goes into
/// `summary.json` as is (seed, scenario hash, version, command, ...).
pub fn data_files<'a>(
    result: &'a SimResult,
    metrics: &'a metrics::RunMetrics,
    meta: &serde_json::Value,
) -> Vec<(String, FileBody<'a>)> {
    data_files_with(requests_csv_body(result), metrics, meta)
}

/// The body of `requests.csv` ([`write_requests_csv`]), streamed or formatted ahead by its
/// size: give it to [`data_files_with`], maybe started first ([`FileBody::start_ahead`]).
pub fn requests_csv_body(result: &SimResult) -> FileBody<'_> {
    FileBody::streamed_rows(result.records.len(), |out| write_requests_csv(result, out))
}

/// [`data_files`] with the body of `requests.csv` given ([`requests_csv_body`]).
pub fn data_files_with<'a>(
    requests_csv: FileBody<'a>,
    metrics: &'a metrics::RunMetrics,
    meta: &serde_json::Value,
) -> Vec<(String, FileBody<'a>)> {
    let mut files = vec![
        ("requests.csv".to_string(), requests_csv),
        (
            "completions.csv".to_string(),
            FileBody::streamed(|out| write_completions_csv(metrics, out)),
        ),
        ("classes.csv".to_string(), classes_csv(metrics).into()),
        (
            "summary.json".to_string(),
            summary_json(metrics, meta).into(),
        ),
    ];
    if metrics.fleet.events.is_some() {
        let scaling = scaling_csv(&metrics.fleet).into();
        files.push(("scaling.csv".to_string(), scaling));
    }
    files
}

/// Every file of a run: [`data_files`] then every plot as PNG and SVG
/// ([`plots::render_all`], which draws the latency bounds among `expectations`; pass none
/// for a run without a scenario). Hand the result to an [`output::OutputTarget`], claimed before the run.
pub fn run_files<'a>(
    result: &'a SimResult,
    metrics: &'a metrics::RunMetrics,
    meta: &serde_json::Value,
    expectations: &[expect::Expectation],
) -> Result<Vec<(String, FileBody<'a>)>, chart::PlotError> {
    let mut all = data_files(result, metrics, meta);
    all.extend(plot_files(result, metrics, expectations)?);
    Ok(all)
}

/// Every plot of a run as PNG and SVG, the part of [`run_files`] after [`data_files`].
pub fn plot_files<'a>(
    result: &SimResult,
    metrics: &metrics::RunMetrics,
    expectations: &[expect::Expectation],
) -> Result<Vec<(String, FileBody<'a>)>, chart::PlotError> {
    let plots = plots::render_all(result, metrics, expectations)?;
    Ok(plots
        .into_iter()
        .map(|(name, bytes)| (name, bytes.into()))
        .collect())
}

/// `files` and, after them, their `report.html` ([`run_page::run_report`]): the SVG plots
/// among `files` are drawn inline and every file is linked. A streamed file (the large CSVs)
/// is only linked, never read.
pub fn with_report<'a>(
    mut files: Vec<(String, FileBody<'a>)>,
    page: &run_page::RunPage,
    metrics: &metrics::RunMetrics,
) -> Vec<(String, FileBody<'a>)> {
    let inline: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(name, body)| match body {
            FileBody::Bytes(bytes) => (name.as_str(), bytes.as_slice()),
            FileBody::Streamed { .. } | FileBody::Started(_) => (name.as_str(), &[][..]),
        })
        .collect();
    let report = run_page::run_report(page, metrics, &inline);
    files.push((html::REPORT_FILE.to_string(), report.into()));
    files
}

/// `timeline.json` of `result` (which must hold a timeline), keeping the slices of its first
/// `max_requests` requests by row; `meta` goes into `otherData.run` as is. `None` when the
/// run kept no timeline.
pub fn timeline_file<'a>(
    result: &'a SimResult,
    meta: &serde_json::Value,
    max_requests: u64,
) -> Option<(String, FileBody<'a>)> {
    let export = timeline::timeline_exporter(result, meta, max_requests)?;
    Some((
        timeline::TIMELINE_FILE.to_string(),
        FileBody::streamed(export),
    ))
}
