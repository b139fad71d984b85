//! Reports: run metrics, pure exporters from a run to bytes (CSV, JSON, plots, JUnit), the
//! terminal table, and expectation verdicts.
//!
//! Nothing here touches the file system; `output` is the one place that writes files.
//!
//! A run's report, in order: [`metrics::RunMetrics::compute`] once, then
//! [`run_files`] (every result file) and [`table::class_table`] (the terminal); for
//! `check`, [`evaluate::evaluate`], [`evaluate::format_outcome`] and [`junit::junit_xml`];
//! last, [`with_report`] adds `report.html` (a page of all of them, [`run_page`]).

pub mod chart;
mod csv_row;
pub mod evaluate;
pub mod expect;
pub mod files;
pub mod html;
pub mod junit;
pub mod metrics;
pub mod output;
pub mod phases;
pub mod plots;
pub mod pools;
pub mod run_inputs;
pub mod run_page;
pub mod sessions;
pub mod slo;
pub mod stability;
pub mod table;
#[cfg(test)]
pub(crate) mod test_support;
pub mod timeline;

/// Every data file of a run (no plots), named as in the output-directory contract:
/// `requests.csv`, `completions.csv`, `classes.csv`, `summary.json`. `meta` goes into
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
    vec![
        ("requests.csv".to_string(), requests_csv),
        (
            "completions.csv".to_string(),
            FileBody::streamed(|out| files::write_completions_csv(metrics, out)),
        ),
        (
            "classes.csv".to_string(),
            files::classes_csv(metrics).into(),
        ),
        (
            "summary.json".to_string(),
            files::summary_json(metrics, meta).into(),
        ),
    ]
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

use crate::sim::{RequestRecord, SimResult};
pub use output::FileBody;

/// Columns of `requests.csv` (a contract: the first thirteen match the CSV of
/// `tools/dynamo-replay`; later ones are only ever appended).
pub const REQUEST_COLUMNS: [&str; 28] = [
    "row",
    "policy_class",
    "arrival_ms",
    "admit_ms",
    "first_token_ms",
    "completion_ms",
    "worker",
    "dp_rank",
    "path",
    "input_length",
    "output_length",
    "reused_input_tokens",
    "status",
    "resolved_class",
    "dispatch_ms",
    "reason",
    "pool",
    "migrations",
    "session_id",
    "turn_index",
    "prefill_worker",
    "prefill_admit_ms",
    "prefill_end_ms",
    "kv_transfer_start_ms",
    "kv_transfer_end_ms",
    "prefill_release_ms",
    "decode_admit_ms",
    "decode_reused_input_tokens",
];

/// `requests.csv`: one row per request, in row order. `pool` names the pool of the worker the
/// request was sent to (empty if it never was). `session_id` names a session's turn (empty
/// for a plain request), and `turn_index` is its place from 0, empty when the run replays
/// its sessions as plain requests (a trace whose sessions all have one turn, as Dynamo
/// 1.6.1 does). In disaggregated serving `worker` and `dp_rank` are the decode worker's (a
/// worker's number within its role, as Dynamo numbers them), `admit_ms` the prefill
/// admission, and the last eight columns the handoff's (empty in aggregated serving).
pub fn requests_csv(result: &SimResult) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(result.records.len() * 128);
    write_requests_csv(result, &mut bytes).expect("writing to memory");
    bytes
}

/// Writes `requests.csv` (see [`requests_csv`]) to `out` row by row: a run of a million
/// requests writes 150 MB of it, which need not be held in memory at once.
pub fn write_requests_csv(result: &SimResult, out: &mut dyn std::io::Write) -> csv::Result<()> {
    let mut header = csv::Writer::from_writer(&mut *out);
    header.write_record(REQUEST_COLUMNS)?;
    header.flush()?;
    drop(header);
    // Records are kept in row order by every run; sorting references is the fallback.
    if result.records.is_sorted_by_key(|r| r.row) {
        return write_request_rows(out, result, &result.records);
    }
    let mut rows: Vec<&RequestRecord> = result.records.iter().collect();
    rows.sort_by_key(|r| r.row);
    write_request_rows(out, result, &rows)
}

/// The rows of `requests.csv` for `rows`, in that order.
fn write_request_rows<R: std::borrow::Borrow<RequestRecord> + Sync>(
    out: &mut dyn std::io::Write,
    result: &SimResult,
    rows: &[R],
) -> csv::Result<()> {
    csv_row::write_chunked(out, rows, |_, chunk, buf| {
        let mut row = csv_row::CsvRow::default();
        for r in chunk {
            request_row(&mut row, result, r.borrow());
            row.write(buf, REQUEST_COLUMNS.len());
        }
        Ok(())
    })
}

/// The fields of `r`'s row of `requests.csv`.
fn request_row(row: &mut csv_row::CsvRow, result: &SimResult, r: &RequestRecord) {
    let class = metrics::resolved_class(r, &result.class_names)
        .map(|i| result.class_names[i].as_str())
        .unwrap_or("");
    row.clear();
    row.u64(r.row);
    row.text(r.policy_class.as_deref().map_or("", String::as_str));
    row.ms(r.arrival);
    row.opt_ms(r.admit);
    row.opt_ms(r.first_token);
    row.opt_ms(r.completion);
    match r.rank() {
        Some(k) => {
            row.u64(pools::worker_in_role(result, k.worker_id));
            row.u64(u64::from(k.dp_rank));
        }
        None => {
            row.text("");
            row.text("");
        }
    }
    match r.path {
        Some(p) => row.display(p),
        None => row.text("rejected"),
    }
    row.u64(r.input_tokens.into());
    row.u64(r.output_tokens.into());
    row.u64(r.reused_input_tokens.into());
    row.text(r.status.label());
    row.text(class);
    row.opt_ms(r.dispatched);
    row.text(r.status.reason());
    row.text(
        r.rank()
            .map_or("", |k| pools::pool_name(result, k.worker_id)),
    );
    row.u64(u64::from(r.migrations()));
    match r.session() {
        Some(s) if s.named => {
            row.text(&s.id);
            match s.chained {
                true => row.u64(u64::from(s.turn)),
                false => row.text(""),
            }
        }
        _ => {
            row.text("");
            row.text("");
        }
    }
    handoff_fields(row, result, r);
}

/// The eight handoff columns of a request's row (empty without a handoff).
fn handoff_fields(row: &mut csv_row::CsvRow, result: &SimResult, r: &RequestRecord) {
    let Some(h) = r.handoff() else {
        for _ in 0..8 {
            row.text("");
        }
        return;
    };
    row.u64(pools::worker_in_role(result, h.prefill_rank.worker_id));
    row.opt_ms(r.admit);
    for at in [
        h.prefill_end,
        h.transfer_start,
        h.transfer_end,
        h.prefill_release,
        h.decode_admit,
    ] {
        row.opt_ms(at);
    }
    match h.decode_admit {
        Some(_) => row.u64(h.decode_reused_input_tokens),
        None => row.text(""),
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::run_fixture;
    use super::*;

    #[test]
    fn requests_csv_is_in_row_order_however_the_records_are_held() {
        let (result, _) = run_fixture("premium-weighted");
        let mut shuffled = result.clone();
        shuffled.records.reverse();
        shuffled.records.swap(0, 17);
        let text = requests_csv(&result);
        assert_eq!(requests_csv(&shuffled), text);
        let rows: Vec<u64> = String::from_utf8(text)
            .unwrap()
            .lines()
            .skip(1)
            .map(|line| line.split(',').next().unwrap().parse().unwrap())
            .collect();
        assert!(rows.is_sorted() && rows.len() == result.records.len());
    }
}
