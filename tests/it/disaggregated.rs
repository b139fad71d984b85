//! Disaggregated replays from the command line: the flags Dynamo's replay takes, the handoff
//! columns of requests.csv, and every input 1.6.1 refuses refused the same way (exit 2,
//! naming the flag and the field).

use super::support::{request_columns, run_in_dir};
use std::path::Path;

const TRACE: &str = r#"{"timestamp": 0, "input_length": 1024, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 10, "input_length": 600, "output_length": 2, "hash_ids": [1, 5]}
"#;

/// A directory holding the two-row trace (`trace.jsonl`).
fn trace_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trace.jsonl"), TRACE).unwrap();
    dir
}

/// `routersim replay --trace trace.jsonl --out out --quiet` with `flags`, in `dir`.
fn replay(dir: &Path, flags: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "replay",
        "--trace",
        "trace.jsonl",
        "--out",
        "out",
        "--quiet",
    ];
    args.extend_from_slice(flags);
    run_in_dir(dir, &args)
}

#[test]
fn a_disaggregated_replay_writes_the_handoff_columns() {
    let dir = trace_dir();
    let engine = r#"{"engine": {"kv_transfer_bandwidth": 25, "kv_transfer_bytes_per_token": 131072,
        "kv_transfer_timing_mode": "destination_missing"}}"#;
    let flags = ["--prefill-workers", "1", "--decode-workers", "1"];
    let (code, _, stderr) = replay(
        dir.path(),
        &[&flags[..], &["--prefill-engine", engine]].concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    let columns = [
        "worker",
        "pool",
        "prefill_worker",
        "prefill_end_ms",
        "kv_transfer_start_ms",
        "kv_transfer_end_ms",
        "prefill_release_ms",
        "decode_admit_ms",
        "first_token_ms",
    ];
    let rows = request_columns(&dir.path().join("out"), &columns);
    // docs/disaggregated.md's worked example: R1 waits for the decode pass end and moves
    // only the 2 blocks the decode worker lacks.
    let expected = [
        "0",
        "decode",
        "0",
        "50.331535",
        "55.237735",
        "55.908824",
        "55.908824",
        "55.908824",
        "61.679720",
    ];
    assert_eq!(rows[1], expected);
}

#[test]
fn an_aggregated_replay_leaves_the_handoff_columns_empty() {
    let dir = trace_dir();
    let (code, _, stderr) = replay(dir.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    let rows = request_columns(
        &dir.path().join("out"),
        &["prefill_worker", "decode_admit_ms"],
    );
    assert!(
        rows.iter().all(|r| r.iter().all(String::is_empty)),
        "{rows:?}"
    );
}

/// Exit 2 with a message holding every one of `needles`.
fn assert_refused(flags: &[&str], needles: &[&str]) {
    let dir = trace_dir();
    let (code, _, stderr) = replay(dir.path(), flags);
    assert_eq!(code, 2, "{flags:?}: {stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{flags:?}: {needle:?} not in {stderr}"
        );
    }
    assert!(
        !dir.path().join("out").exists(),
        "{flags:?}: nothing is written"
    );
}

#[test]
fn workers_with_the_disaggregated_flags_is_a_usage_error() {
    assert_refused(
        &[
            "--workers",
            "2",
            "--prefill-workers",
            "1",
            "--decode-workers",
            "1",
        ],
        &["--workers"],
    );
    assert_refused(&["--prefill-workers", "1"], &["--decode-workers"]);
    assert_refused(&["--decode-engine", "{}"], &["--decode-workers"]);
}

#[test]
fn disaggregated_inputs_dynamo_refuses_are_refused_with_its_words() {
    let pools = ["--prefill-workers", "1", "--decode-workers", "1"];
    let with = |extra: &[&'static str]| [&pools[..], extra].concat();
    assert_refused(
        &["--prefill-workers", "0", "--decode-workers", "1"],
        &[
            "--prefill-workers",
            "prefill pool must start with at least one worker",
        ],
    );
    assert_refused(
        &["--prefill-workers", "1", "--decode-workers", "0"],
        &[
            "--decode-workers",
            "decode pool must start with at least one worker",
        ],
    );
    assert_refused(
        &with(&["--decode-engine", r#"{"engine": {"block_size": 32}}"#]),
        &["requires matching prefill/decode block_size, got 64 and 32"],
    );
    assert_refused(
        &with(&[
            "--prefill-engine",
            r#"{"engine": {"kv_transfer_bandwidth": -1}}"#,
        ]),
        &[
            "--prefill-engine",
            "kv_transfer_bandwidth",
            "must be finite and non-negative",
        ],
    );
    assert_refused(
        &with(&[
            "--prefill-engine",
            r#"{"engine": {"kv_transfer_timing_mode": "eager"}}"#,
        ]),
        &[
            "--prefill-engine",
            "kv_transfer_timing_mode",
            "unknown variant `eager`",
        ],
    );
    assert_refused(
        &with(&[
            "--decode-engine",
            r#"{"engine": {"kv_transfer_bytes_per_token": 0}}"#,
        ]),
        &[
            "--decode-engine",
            "kv_transfer_bytes_per_token must be positive",
        ],
    );
    assert_refused(
        &["--engine", r#"{"engine": {"worker_type": "prefill"}}"#],
        &[
            "--engine",
            "offline replay only supports aggregated workers, got Prefill",
        ],
    );
}

#[test]
fn the_decode_engines_transfer_settings_are_ignored_out_loud() {
    let dir = trace_dir();
    let decode = r#"{"engine": {"kv_transfer_bandwidth": 1, "kv_transfer_bytes_per_token": 1000}}"#;
    let args = [
        "replay",
        "--trace",
        "trace.jsonl",
        "--out",
        "out",
        "--prefill-workers",
        "1",
        "--decode-workers",
        "1",
        "--decode-engine",
        decode,
    ];
    let (code, _, stderr) = run_in_dir(dir.path(), &args);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("KV transfer settings are ignored"),
        "{stderr}"
    );
    // No transfer takes time: the prefill engine has no settings.
    let rows = request_columns(
        &dir.path().join("out"),
        &["kv_transfer_start_ms", "kv_transfer_end_ms"],
    );
    assert!(rows.iter().all(|r| r[0] == r[1]), "{rows:?}");
}

#[test]
fn a_disaggregated_summary_gives_each_role_its_part_and_the_transfer_times() {
    let dir = trace_dir();
    let engine = r#"{"engine": {"kv_transfer_bandwidth": 25, "kv_transfer_bytes_per_token": 131072,
        "kv_transfer_timing_mode": "destination_missing"}}"#;
    let flags = [
        "--prefill-workers",
        "1",
        "--decode-workers",
        "1",
        "--prefill-engine",
        engine,
    ];
    let (code, _, stderr) = replay(dir.path(), &flags);
    assert_eq!(code, 0, "{stderr}");
    let text = std::fs::read_to_string(dir.path().join("out/summary.json")).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
    let pools = summary["pools"].as_array().unwrap();
    let part = |i: usize, key: &str| pools[i][key].clone();
    assert_eq!(
        (part(0, "pool"), part(0, "role")),
        ("prefill".into(), "prefill".into())
    );
    assert_eq!(
        (part(1, "pool"), part(1, "role")),
        ("decode".into(), "decode".into())
    );
    // Prefill tokens on the prefill pool (1024 + 600 - 512 reused), output tokens on the
    // decode pool: both requests count on both.
    assert_eq!(
        (part(0, "prefill_tokens"), part(0, "output_tokens")),
        (1112.into(), 0.into())
    );
    assert_eq!(
        (part(1, "prefill_tokens"), part(1, "output_tokens")),
        (0.into(), 5.into())
    );
    assert_eq!(
        (part(0, "requests"), part(1, "requests")),
        (2.into(), 2.into())
    );
    // The worked example's transfers: 5.368709 ms (16 blocks) and 0.671089 ms (2 blocks).
    let transfer = &summary["classes"][0]["kv_transfer_ms"];
    assert_eq!(transfer["mean"], 3.019899);
    assert_eq!(transfer["p99"], 5.368709);
    let classes = std::fs::read_to_string(dir.path().join("out/classes.csv")).unwrap();
    let header: Vec<&str> = classes.lines().next().unwrap().split(',').collect();
    assert_eq!(
        header[header.len() - 2..],
        ["kv_transfer_ms_mean", "kv_transfer_ms_p99"]
    );
    assert!(
        classes
            .lines()
            .nth(1)
            .unwrap()
            .ends_with(",3.019899,5.368709")
    );
}

/// A prefill engine of two data-parallel ranks: 1.6.1 passes a disaggregated worker's ranks
/// together, so both prompts, on different ranks, are held when the longer one's prefill
/// ends, P(1024) = 32.490712 ms.
#[test]
fn a_replay_with_prefill_ranks_holds_both_prompts_at_the_slower_ranks_end() {
    let dir = trace_dir();
    let trace = r#"{"timestamp": 0, "input_length": 1024, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 0, "input_length": 512, "output_length": 2, "hash_ids": [7]}
"#;
    std::fs::write(dir.path().join("trace.jsonl"), trace).unwrap();
    let flags = ["--prefill-workers", "1", "--decode-workers", "1"];
    let engine = r#"{"engine": {}, "dp_size": 2}"#;
    let (code, _, stderr) = replay(
        dir.path(),
        &[&flags[..], &["--prefill-engine", engine]].concat(),
    );
    assert_eq!(code, 0, "{stderr}");
    let rows = request_columns(&dir.path().join("out"), &["prefill_end_ms"]);
    assert_eq!(rows, vec![vec!["32.490712".to_string()]; 2]);
}
