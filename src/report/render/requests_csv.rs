//! `requests.csv`: one row per request of a run, in row order, formatted as a CSV writer
//! would (a contract; see [`REQUEST_COLUMNS`]).

use super::csv_row;
use crate::report::measure::{metrics, pools};
use crate::sim::{RequestRecord, SimResult};

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
    use super::*;
    use crate::report::test_support::run_fixture;

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
