//! Dynamo's other replay modes, closed loop (`--replay-concurrency`, `workload.concurrency`
//! over a trace) and arrival speed-up (`--arrival-speedup-ratio`,
//! `workload.arrival_speedup_ratio`): flags, YAML fields, their errors and how they combine.
//! Agreement with Dynamo itself is in fidelity.rs.

use assert_cmd::Command;
use std::fs;
use std::path::{Path, PathBuf};

fn routersim() -> Command {
    Command::cargo_bin("routersim").unwrap()
}

fn fidelity(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fidelity")
        .join(name)
}

/// A prefix-sharing trace whose timestamps are out of file order (closed-prefix-sharing).
fn shuffled_trace() -> PathBuf {
    fidelity("closed-prefix-sharing").join("dynamo.trace.jsonl")
}

/// `requests.csv` rows as (row, arrival_ms, admit_ms, first_token_ms, completion_ms, status).
fn timeline(out: &Path) -> Vec<Vec<String>> {
    let names = [
        "row",
        "arrival_ms",
        "admit_ms",
        "first_token_ms",
        "completion_ms",
        "status",
    ];
    crate::support::request_columns(out, &names)
}

/// Replays `trace` with `extra` flags into `out`; returns (exit code, stderr).
fn replay(trace: &Path, out: &Path, extra: &[&str]) -> (i32, String) {
    let output = routersim()
        .arg("replay")
        .arg("--trace")
        .arg(trace)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (output.status.code().unwrap_or(-1), stderr)
}

#[test]
fn bad_replay_flags_are_usage_errors_that_name_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let cases: [(&[&str], &str); 9] = [
        (
            &["--arrival-speedup-ratio", "0"],
            "--arrival-speedup-ratio: must be a finite number >= 0.001",
        ),
        (
            &["--arrival-speedup-ratio", "-2"],
            "--arrival-speedup-ratio: must be a finite number >= 0.001",
        ),
        (&["--arrival-speedup-ratio", "0.0001"], "got 0.0001"),
        (&["--arrival-speedup-ratio", "NaN"], "got NaN"),
        (&["--arrival-speedup-ratio", "inf"], "got inf"),
        (
            &["--replay-concurrency", "0"],
            "--replay-concurrency: must be from 1 to 1000000, got 0",
        ),
        (
            &["--replay-concurrency", "1000001"],
            "must be from 1 to 1000000",
        ),
        (
            &["--kv-event-lag-ms", "-5"],
            "--kv-event-lag-ms: must be a finite number >= 0, got -5",
        ),
        (
            &["--kv-event-lag-ms", "NaN"],
            "--kv-event-lag-ms: must be a finite",
        ),
    ];
    for (extra, expected) in cases {
        let (code, stderr) = replay(&shuffled_trace(), &out, extra);
        assert_eq!(code, 2, "{extra:?}: {stderr}");
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
        assert!(!out.exists(), "{extra:?}: nothing may be written");
    }
}

#[test]
fn a_closed_loop_ignores_the_speedup_ratio_as_dynamo_does_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let (code, stderr) = replay(&shuffled_trace(), &a, &["--replay-concurrency", "6"]);
    assert_eq!(code, 0, "{stderr}");
    let both = ["--replay-concurrency", "6", "--arrival-speedup-ratio", "5"];
    let (code, stderr) = replay(&shuffled_trace(), &b, &both);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("--arrival-speedup-ratio has no effect with --replay-concurrency"),
        "{stderr}"
    );
    assert_eq!(timeline(&a), timeline(&b));
    let summary: serde_json::Value =
        serde_json::from_slice(&fs::read(b.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["meta"]["replay_concurrency"], 6);
}

#[test]
fn an_open_loop_summary_records_its_speedup_and_a_plain_one_records_neither() {
    let tmp = tempfile::tempdir().unwrap();
    let meta = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let (code, stderr) = replay(&shuffled_trace(), &out, &[&["--quiet"], extra].concat());
        assert_eq!(code, 0, "{stderr}");
        let summary: serde_json::Value =
            serde_json::from_slice(&fs::read(out.join("summary.json")).unwrap()).unwrap();
        summary["meta"].clone()
    };
    let sped = meta("s", &["--arrival-speedup-ratio", "2.5"]);
    assert_eq!(sped["arrival_speedup_ratio"], 2.5);
    let plain = meta("p", &[]);
    assert!(plain.get("arrival_speedup_ratio").is_none(), "{plain}");
    assert!(plain.get("replay_concurrency").is_none(), "{plain}");
}

/// Writes scenario `yaml` (with the shuffled trace beside it as t.jsonl) and runs `args` on
/// it; returns the directory, the exit code and stdout followed by stderr.
fn scenario_cmd(yaml: &str, args: &[&str]) -> (tempfile::TempDir, i32, String) {
    let tmp = tempfile::tempdir().unwrap();
    fs::copy(shuffled_trace(), tmp.path().join("t.jsonl")).unwrap();
    let path = tmp.path().join("s.yaml");
    fs::write(&path, yaml).unwrap();
    let output = routersim()
        .arg(args[0])
        .arg(&path)
        .args(&args[1..])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!text.contains("panicked"), "{text}");
    (tmp, output.status.code().unwrap_or(-1), text)
}

#[test]
fn a_scenario_closed_loop_over_a_trace_is_the_replay_closed_loop() {
    let yaml = "name: cl\nworkload:\n  trace: t.jsonl\n  concurrency: 6\n";
    let (tmp, code, stderr) = scenario_cmd(yaml, &["run", "--out", "o", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    let replayed = tmp.path().join("r");
    let (code, stderr) = replay(&shuffled_trace(), &replayed, &["--replay-concurrency", "6"]);
    assert_eq!(code, 0, "{stderr}");
    let ours = timeline(&tmp.path().join("o"));
    assert_eq!(ours, timeline(&replayed));
    // File order: the first six rows are issued at 0 whatever their timestamps.
    assert!(ours[..6].iter().all(|r| r[1] == "0.000000"), "{ours:?}");
    assert!(ours[6..].iter().all(|r| r[1] != "0.000000"));
}

#[test]
fn a_scenario_trace_takes_an_arrival_speedup_ratio_and_set_overrides_it() {
    let yaml = "name: su\nworkload:\n  trace: t.jsonl\n  arrival_speedup_ratio: 4\n";
    let (tmp, code, stderr) = scenario_cmd(yaml, &["run", "--out", "o", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr) = replay(
        &shuffled_trace(),
        &tmp.path().join("r"),
        &["--arrival-speedup-ratio", "4"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        timeline(&tmp.path().join("o")),
        timeline(&tmp.path().join("r"))
    );
    // --set replaces the ratio; the arrivals follow.
    let (tmp, code, stderr) = scenario_cmd(
        yaml,
        &[
            "run",
            "--out",
            "o",
            "--quiet",
            "--set",
            "workload.arrival_speedup_ratio=1",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr) = replay(&shuffled_trace(), &tmp.path().join("r"), &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        timeline(&tmp.path().join("o")),
        timeline(&tmp.path().join("r"))
    );
    let (_tmp, code, out) = scenario_cmd(yaml, &["validate"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("timestamps divided by 4"), "{out}");
}

#[test]
fn bad_scenario_speedups_name_the_field_and_line() {
    let trace = "name: x\nworkload:\n  trace: t.jsonl\n";
    let cases = [
        (
            format!("{trace}  arrival_speedup_ratio: 0\n"),
            "s.yaml:4: workload.arrival_speedup_ratio: must be a finite number >= 0.001",
        ),
        (
            format!("{trace}  arrival_speedup_ratio: .nan\n"),
            "workload.arrival_speedup_ratio: must be a finite number >= 0.001",
        ),
        (
            format!("{trace}  concurrency: 4\n  arrival_speedup_ratio: 2\n"),
            "workload.arrival_speedup_ratio: has no effect with `concurrency`",
        ),
        (
            "name: x\nworkload:\n  arrival_speedup_ratio: 2\n  groups:\n    - {name: a, count: 2, input_tokens: 64, output_tokens: 1}\n".to_string(),
            "workload.arrival_speedup_ratio: only applies to `trace`",
        ),
    ];
    for (yaml, expected) in cases {
        let (_tmp, code, stderr) = scenario_cmd(&yaml, &["validate"]);
        assert_eq!(code, 2, "{yaml}: {stderr}");
        assert!(stderr.contains(expected), "{yaml}: {stderr}");
    }
}
