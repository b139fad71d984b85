//! Request-by-request parity with Dynamo 1.6.1's offline replay on whole traces.
//!
//! Each fixture is a `tools/dynamo-replay` run: the tagged trace it replayed and the per-request
//! CSV it wrote. The mock worker must reproduce every admit, first-token and completion time
//! (to the nanosecond Dynamo prints) and every reused-token count.
//!
//! `replay_trace_from_env` (ignored) replays any such trace and writes the same CSV columns,
//! for exploring new probes: `MOCKER_TRACE=t.jsonl MOCKER_ENGINE='{"engine":{}}'
//! MOCKER_OUT=o.csv cargo test --lib mocker::dynamo_parity -- --ignored`.

use super::config::EngineArgs;
use super::protocol::MockRequest;
use super::test_support::{Seen, drive_checked, row};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Parses a mooncake JSONL trace into (arrival ns, request) in arrival order, row = id.
/// Dynamo rebases a trace so that its earliest row arrives at 0.
fn parse_trace(text: &str, bs: u64) -> Vec<(u64, MockRequest)> {
    let first_ms = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["timestamp"].as_f64())
        .fold(f64::INFINITY, f64::min);
    let first_ms = if first_ms.is_finite() { first_ms } else { 0.0 };
    let mut rows: Vec<(u64, MockRequest)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            let v: Value = serde_json::from_str(line).expect("trace row is JSON");
            let ts_ms = v["timestamp"].as_f64().unwrap_or(0.0) - first_ms;
            let hash_ids: Vec<u32> = v["hash_ids"]
                .as_array()
                .expect("hash_ids")
                .iter()
                .map(|h| h.as_u64().expect("hash id") as u32)
                .collect();
            let input = v["input_length"].as_u64().expect("input_length");
            let output = v["output_length"].as_u64().expect("output_length");
            (
                (ts_ms * 1e6).round() as u64,
                row(i as u64, input, output, &hash_ids, bs),
            )
        })
        .collect();
    rows.sort_by_key(|(t, r)| (*t, r.id));
    rows
}

fn fmt_ms(ns: Option<u64>) -> String {
    ns.map_or(String::new(), crate::time::format_ms)
}

/// The CSV the comparison reads: row, admit, first token, completion (ms), reused, tokens.
fn to_csv(seen: &BTreeMap<u64, Seen>) -> String {
    let mut out = String::from("row,admit_ms,first_token_ms,completion_ms,reused,tokens\n");
    for (id, s) in seen {
        let done = s.done_ns.or(s.rejected_ns);
        let (a, f, d) = (fmt_ms(s.admit_ns), fmt_ms(s.first_ns), fmt_ms(done));
        writeln!(out, "{id},{a},{f},{d},{},{}", s.reused, s.tokens).unwrap();
    }
    out
}

/// Dynamo's CSV reduced to the same columns, times rounded to whole ns.
fn dynamo_csv(text: &str) -> String {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (row, admit, first, done, reused, out_len) = (
        col("row"),
        col("admit_ms"),
        col("first_token_ms"),
        col("completion_ms"),
        col("reused_input_tokens"),
        col("output_length"),
    );
    let ns = |s: &str| -> Option<u64> { s.parse::<f64>().ok().map(|x| (x * 1e6).round() as u64) };
    let mut rows: Vec<(u64, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let id: u64 = f[row].parse().unwrap();
            let line = format!(
                "{id},{},{},{},{},{}",
                fmt_ms(ns(f[admit])),
                fmt_ms(ns(f[first])),
                fmt_ms(ns(f[done])),
                f[reused].parse::<u64>().unwrap_or(0),
                f[out_len].parse::<u64>().unwrap_or(0)
            );
            (id, line)
        })
        .collect();
    rows.sort();
    let mut out = String::from("row,admit_ms,first_token_ms,completion_ms,reused,tokens\n");
    for (_, l) in rows {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn replay(trace: &str, engine_json: &str, check: bool) -> String {
    let args = EngineArgs::from_json_str(engine_json).expect("engine config");
    let arrivals = parse_trace(trace, args.common.block_size);
    to_csv(&drive_checked(args, arrivals, check))
}

/// Compares line by line so a failure names the first differing request.
fn assert_parity(ours: &str, dynamo: &str) {
    for (a, b) in ours.lines().zip(dynamo.lines()) {
        assert_eq!(a, b, "routersim (left) vs Dynamo 1.6.1 (right)");
    }
    assert_eq!(
        ours.lines().count(),
        dynamo.lines().count(),
        "row counts differ"
    );
}

#[test]
#[ignore = "explores a trace given in MOCKER_TRACE; not a regression test"]
fn replay_trace_from_env() {
    let trace = std::fs::read_to_string(std::env::var("MOCKER_TRACE").unwrap()).unwrap();
    let engine = std::env::var("MOCKER_ENGINE").unwrap_or_else(|_| r#"{"engine":{}}"#.into());
    let csv = replay(&trace, &engine, false);
    std::fs::write(std::env::var("MOCKER_OUT").unwrap(), csv).unwrap();
}

#[test]
fn dynamo_csv_reduction_rounds_to_ns() {
    let text = "row,admit_ms,first_token_ms,completion_ms,reused_input_tokens,output_length\n\
                0,0.0,32.490711999999995,55.662105,0,5\n";
    assert_eq!(
        dynamo_csv(text),
        "row,admit_ms,first_token_ms,completion_ms,reused,tokens\n\
         0,0.000000,32.490712,55.662105,0,5\n"
    );
}

/// Replays fixture `name` (trace, engine, Dynamo CSV under `src/mocker/fixtures/`).
macro_rules! fixture_parity {
    ($test:ident, $name:literal) => {
        #[test]
        fn $test() {
            let dir = concat!("fixtures/", $name, "/");
            let ours = replay(
                include_str!(concat!("fixtures/", $name, "/trace.jsonl")),
                include_str!(concat!("fixtures/", $name, "/engine.json")),
                true,
            );
            let dynamo = dynamo_csv(include_str!(concat!("fixtures/", $name, "/dynamo.csv")));
            assert!(ours.lines().count() > 8, "{dir}: fixture lost its rows");
            assert_parity(&ours, &dynamo);
        }
    };
}

// 150 rows, 100-block pool, FIFO victims (some ahead of the running cursor).
fixture_parity!(fifo_preemption_matches_dynamo, "fifo-pressure");
// 300 rows without chunked prefill; includes a request whose readmission reuses less than
// its first admission (reported reuse is the max).
fixture_parity!(unchunked_prefill_matches_dynamo, "no-chunk");
// Block size 100, 80-block pool, budget 512, speedup 0.7 with decode speedup 1.3.
fixture_parity!(speedup_and_odd_block_size_match_dynamo, "speedup-block100");
// Prefix caching off, block 16, two running at most, max_model_len 1500 (54 rejections).
fixture_parity!(
    no_caching_and_model_len_match_dynamo,
    "no-caching-model-len"
);
// 8 rows (delta-debugged): two requests compute the same block; the duplicate copy keeps its
// capacity, so one more cached block is evicted before the last request's prefix lookup.
fixture_parity!(duplicate_block_copies_match_dynamo, "duplicate-blocks");
// 120 rows, block 16, FIFO, max_model_len 2500 with rejections and capped generation.
fixture_parity!(
    model_len_fifo_block16_matches_dynamo,
    "model-len-fifo-block16"
);
