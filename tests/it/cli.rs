//! The command line: exit codes, error messages that name the place, no half-written output.

use assert_cmd::Command;
use std::fs;
use std::path::{Path, PathBuf};

fn routersim() -> Command {
    Command::cargo_bin("routersim").unwrap()
}

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

const GOOD_ROW: &str =
    r#"{"timestamp": 0, "input_length": 512, "output_length": 2, "hash_ids": [1]}"#;

/// Replays `trace_text` with extra args; returns (exit code, stderr, whether --out exists).
fn replay_with(trace_text: &str, extra: &[&str]) -> (i32, String, bool) {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("t.jsonl");
    fs::write(&trace, trace_text).unwrap();
    let out = tmp.path().join("out");
    let output = routersim()
        .arg("replay")
        .arg("--trace")
        .arg(&trace)
        .arg("--out")
        .arg(&out)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let leftovers = fs::read_dir(tmp.path()).unwrap().count();
    (
        output.status.code().unwrap_or(-1),
        stderr,
        out.exists() || leftovers > 1,
    )
}

fn assert_bad_input(trace_text: &str, extra: &[&str], expected: &[&str]) {
    let (code, stderr, wrote) = replay_with(trace_text, extra);
    assert_eq!(code, 2, "{stderr}");
    for e in expected {
        assert!(stderr.contains(e), "stderr {stderr:?} should contain {e:?}");
    }
    assert!(!wrote, "no output may be left behind");
}

#[test]
fn replay_writes_requests_and_summary() {
    let (code, stderr, wrote) = replay_with(&format!("{GOOD_ROW}\n{GOOD_ROW}\n"), &["--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(wrote);
}

/// Plots cost more than the replay itself, so `replay` draws them only with
/// `--plots`; a rerun without it removes the plots an earlier run drew.
#[test]
fn replay_draws_plots_only_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("t.jsonl");
    fs::write(&trace, format!("{GOOD_ROW}\n{GOOD_ROW}\n")).unwrap();
    let out = tmp.path().join("out");
    let replay = |extra: &[&str]| {
        routersim()
            .args(["replay", "--quiet", "--trace"])
            .arg(&trace)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .assert()
            .success();
        let mut names: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let pictures = |names: &[String]| {
        names
            .iter()
            .filter(|n| n.ends_with(".png") || n.ends_with(".svg"))
            .count()
    };
    let plain = replay(&[]);
    assert!(plain.contains(&"requests.csv".to_string()), "{plain:?}");
    assert_eq!(pictures(&plain), 0, "{plain:?}");
    let drawn = replay(&["--plots"]);
    assert!(drawn.contains(&"ttft_cdf.png".to_string()), "{drawn:?}");
    assert!(drawn.contains(&"ttft_cdf.svg".to_string()), "{drawn:?}");
    assert_eq!(replay(&[]), plain, "a rerun without --plots removes them");
}

#[test]
fn replay_refuses_a_trace_row_without_output_length() {
    let row = r#"{"timestamp": 0, "input_length": 512, "hash_ids": [1]}"#;
    assert_bad_input(
        &format!("{GOOD_ROW}\n{row}\n"),
        &[],
        &["t.jsonl:2", "output_length", "missing"],
    );
}

#[test]
fn replay_refuses_a_non_json_line() {
    assert_bad_input(
        &format!("{GOOD_ROW}\n{{oops\n"),
        &[],
        &["t.jsonl:2", "not valid JSON"],
    );
}

#[test]
fn replay_refuses_negative_lengths_and_wrong_types() {
    let negative = r#"{"timestamp": 0, "input_length": -4, "output_length": 1, "hash_ids": [1]}"#;
    assert_bad_input(
        negative,
        &[],
        &["t.jsonl:1", "input_length", "non-negative integer"],
    );
    let wrong = r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "abc"}"#;
    assert_bad_input(wrong, &[], &["t.jsonl:1", "hash_ids"]);
}

#[test]
fn replay_refuses_zero_workers() {
    assert_bad_input(
        GOOD_ROW,
        &["--workers", "0"],
        &["--workers: must be positive"],
    );
}

#[test]
fn replay_refuses_an_unknown_engine_key() {
    assert_bad_input(
        GOOD_ROW,
        &["--engine", r#"{"engine": {"max_num_seqz": 4}}"#],
        &["--engine", "max_num_seqz"],
    );
}

#[test]
fn replay_refuses_kv_transfer_settings_dynamo_refuses_even_when_aggregated() {
    let cases = [
        (
            r#"{"engine": {"kv_transfer_bandwidth": -1}}"#,
            "kv_transfer_bandwidth must be finite and non-negative",
        ),
        (
            r#"{"engine": {"kv_transfer_bytes_per_token": 0}}"#,
            "kv_transfer_bytes_per_token must be positive",
        ),
        (
            r#"{"engine": {"kv_transfer_timing_mode": "eager"}}"#,
            "expected `full_prompt` or `destination_missing`",
        ),
    ];
    for (engine, message) in cases {
        assert_bad_input(GOOD_ROW, &["--engine", engine], &["--engine", message]);
    }
}

#[test]
fn replay_refuses_an_unknown_router_key() {
    assert_bad_input(
        GOOD_ROW,
        &["--router", r#"{"router_temprature": 1}"#],
        &["--router", "router_temprature"],
    );
}

#[test]
fn replay_refuses_a_missing_trace_and_a_bad_policy() {
    let (code, stderr, _) = replay_with(GOOD_ROW, &["--trace", "/nonexistent.jsonl"]);
    assert_eq!(code, 2, "{stderr}");
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("p.yaml");
    fs::write(&policy, "default_policy_family: x\n").unwrap();
    assert_bad_input(
        GOOD_ROW,
        &["--policy", policy.to_str().unwrap()],
        &["p.yaml"],
    );
}

#[test]
fn replay_is_byte_identical_when_repeated() {
    let dir = fixture("fidelity/prefix-sharing");
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let out = tmp.path().join(name);
        routersim()
            .args(["replay", "--quiet", "--workers", "3"])
            .arg("--trace")
            .arg(dir.join("trace.jsonl"))
            .arg("--out")
            .arg(&out)
            .assert()
            .success();
        (
            fs::read(out.join("requests.csv")).unwrap(),
            fs::read(out.join("summary.json")).unwrap(),
        )
    };
    assert_eq!(run("a"), run("b"));
}

#[test]
fn replay_runs_several_workers_and_dp_ranks() {
    let dir = fixture("fidelity/prefix-sharing");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    routersim()
        .args([
            "replay",
            "--quiet",
            "--workers",
            "4",
            "--engine",
            r#"{"engine": {}, "dp_size": 2}"#,
        ])
        .arg("--trace")
        .arg(dir.join("trace.jsonl"))
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let text = fs::read_to_string(out.join("requests.csv")).unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let mut used = std::collections::BTreeSet::new();
    for row in reader.records() {
        let row = row.unwrap();
        assert_eq!(&row[12], "completed");
        used.insert((row[6].to_string(), row[7].to_string()));
    }
    assert!(
        used.len() > 4,
        "work spreads over workers and ranks: {used:?}"
    );
}

#[test]
fn validate_prints_the_resolved_classes() {
    let out = routersim()
        .arg("validate")
        .arg(fixture("fidelity/classes-wspt/policy.yaml"))
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(stdout.contains("valid"), "{stdout}");
}

#[test]
fn validate_names_file_line_and_field_of_a_bad_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("bad.yaml");
    let text = "default_policy_family: regular\nuncached_isl_buckets:\n  - {min_tokens: 0, bucket: all}\npolicy_classes:\n  - name: regular\n    policy_family: regular\n    cache_bucket: all\n    quantum: 0\n";
    fs::write(&policy, text).unwrap();
    let out = routersim().arg("validate").arg(&policy).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.yaml:8"), "{stderr}");
    assert!(stderr.contains("quantum"), "{stderr}");
}

#[test]
fn usage_errors_exit_2() {
    let out = routersim().arg("replay").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = routersim().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn replay_names_the_field_of_a_wrongly_typed_engine_or_router_value() {
    assert_bad_input(
        GOOD_ROW,
        &["--engine", r#"{"engine": {"max_num_seqs": "four"}}"#],
        &[
            "--engine (inline JSON): engine config: engine.max_num_seqs: expected a whole number >= 0, got string \"four\" (line 1, column 34)",
        ],
    );
    assert_bad_input(
        GOOD_ROW,
        &["--engine", r#"{"engine": {"preemption_mode": "newest"}}"#],
        &["engine.preemption_mode: unknown value `newest`, expected `lifo` or `fifo`"],
    );
    assert_bad_input(
        GOOD_ROW,
        &[
            "--engine",
            r#"{"engine": {"max_num_seqs": 4, "max_num_seqs": 5}}"#,
        ],
        &["engine: duplicate key `max_num_seqs`"],
    );
    assert_bad_input(
        GOOD_ROW,
        &["--router", r#"{"router_temperature": "hot"}"#],
        &["--router (inline JSON): router_temperature: expected a number, got string \"hot\""],
    );
}

#[test]
fn replay_names_the_class_and_field_of_an_unknown_policy_value() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("p.yaml");
    let text = fs::read_to_string(fixture("policy/premium-regular.yaml")).unwrap();
    fs::write(
        &policy,
        text.replacen("queue_policy: fcfs", "queue_policy: lifo", 1),
    )
    .unwrap();
    assert_bad_input(
        GOOD_ROW,
        &["--policy", policy.to_str().unwrap()],
        &["p.yaml:10: root: class \"premium\": queue_policy: unknown value `lifo`"],
    );
}

#[test]
fn a_closed_stdout_pipe_ends_quietly_without_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("routersim");
    let mut child = std::process::Command::new(bin)
        .current_dir(tmp.path())
        .arg("validate")
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("scenarios/premium-vs-regular-weighted.yaml"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `check --quiet` prints nothing on a pass, and on a failure only the error line; the exit
/// status carries the verdict either way.
#[test]
fn check_quiet_prints_nothing_but_errors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scenario = root.join("scenarios/premium-vs-regular-weighted.yaml");
    let pass = routersim()
        .args(["check", "--quiet"])
        .arg(&scenario)
        .output()
        .unwrap();
    assert_eq!(pass.status.code(), Some(0));
    assert!(pass.stdout.is_empty() && pass.stderr.is_empty(), "{pass:?}");
    let fail = routersim()
        .args([
            "check",
            "--quiet",
            "--set",
            "router.policy_classes.regular.quantum=512",
        ])
        .arg(&scenario)
        .output()
        .unwrap();
    assert_eq!(fail.status.code(), Some(1));
    assert!(fail.stdout.is_empty(), "{fail:?}");
    let stderr = String::from_utf8_lossy(&fail.stderr);
    assert!(stderr.contains("expectations failed"), "{stderr}");
}
