//! A scaling policy in the loop, end to end: a policy process that dies, hangs or answers
//! garbage ends the replay with exit 2, naming the policy and the tick, and writes nothing.
//! (The fixtures in fidelity.rs check a working policy against 1.6.1.)

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fidelity/scale-up-startup/dynamo.trace.jsonl")
}

/// Runs `replay` on the scaling fixture's trace with `policy` as the scaling policy (and
/// `extra` flags) in a fresh directory; returns (exit code, stderr, whether --out exists).
fn replay_with(policy: &str, extra: &[&str]) -> (i32, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(dir.path())
        .arg("replay")
        .arg("--trace")
        .arg(trace())
        .args(["--scaling-policy", policy, "--out", "o", "--quiet"])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (
        out.status.code().unwrap_or(-1),
        stderr,
        dir.path().join("o").exists(),
    )
}

/// Answers the first question with a first tick at 1 s, then every tick with `answer`.
fn answering(answer: &str) -> String {
    format!(r#"read q; echo '{{"initial_tick_ms": 1000}}'; while read q; do echo '{answer}'; done"#)
}

#[test]
fn a_policy_that_fails_ends_the_replay_with_exit_2_naming_the_tick_and_writes_nothing() {
    let cases = [
        // Gone before it is asked: writing to it fails (no SIGPIPE ends routersim).
        ("exec true".to_string(), vec!["asked for its first tick"]),
        (
            "echo 'planner crashed' >&2; exit 4".to_string(),
            vec!["asked for its first tick", "planner crashed"],
        ),
        (
            answering("not json"),
            vec!["tick 0 at 1000.000000 ms", "is not JSON"],
        ),
        (
            answering(r#"{"target_decode": 2, "next_tick_ms": null}"#),
            vec!["tick 0", "has no `target_prefill`"],
        ),
        (
            answering(r#"{"target_prefill": null, "target_decode": -1, "next_tick_ms": null}"#),
            vec!["tick 0", "a whole number"],
        ),
    ];
    for (policy, expected) in cases {
        let (code, stderr, wrote) = replay_with(&policy, &[]);
        assert_eq!(code, 2, "{policy}: {stderr}");
        assert!(stderr.contains("scaling policy `"), "{stderr}");
        for text in expected {
            assert!(
                stderr.contains(text),
                "{policy}: expected {text:?} in {stderr}"
            );
        }
        assert!(!wrote, "{policy}: nothing is written");
    }
}

#[test]
fn a_policy_that_hangs_ends_the_replay_at_its_time_limit() {
    let policy = r#"read q; echo '{"initial_tick_ms": 1000}'; read q; sleep 30"#;
    let (code, stderr, wrote) = replay_with(policy, &["--scaling-policy-timeout-s", "0.5"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("tick 0") && stderr.contains("no answer within 0.5 s"),
        "{stderr}"
    );
    assert!(!wrote);
}

#[test]
fn a_bad_policy_timeout_is_refused_before_the_replay() {
    let (code, stderr, wrote) = replay_with("true", &["--scaling-policy-timeout-s", "0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--scaling-policy-timeout-s"), "{stderr}");
    assert!(!wrote);
}

#[test]
fn a_policy_that_never_ticks_leaves_the_replay_as_it_was() {
    let never = r#"read q; echo '{"initial_tick_ms": null}'"#;
    let (code, stderr, _) = replay_with(never, &[]);
    assert_eq!(code, 0, "{stderr}");
}

/// Two workers' worth of load on one worker; the planner adds a second at 1 s.
const SCALED: &str = "name: scaled
seed: 3
workers: {count: 1, engine: {max_num_seqs: 8}}
workload:
  rate_per_s: 8
  duration_s: 6
  arrival: poisson
  groups:
    - {name: all, share: 1, input_tokens: 1024, output_tokens: 300}
planner:
  command: ./policy.sh
";

const POLICY: &str = r#"#!/bin/sh
read -r q
echo '{"initial_tick_ms": 1000}'
read -r q
echo '{"target_prefill": null, "target_decode": 2, "next_tick_ms": null}'
"#;

/// Runs `text` as s.yaml beside policy.sh; returns (exit code, stderr, requests.csv rows).
fn run_scenario(text: &str) -> (i32, String, Vec<csv::StringRecord>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.yaml"), text).unwrap();
    let policy = dir.path().join("policy.sh");
    std::fs::write(&policy, POLICY).unwrap();
    std::fs::set_permissions(&policy, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(dir.path())
        .args(["run", "s.yaml", "--out", "o", "--quiet"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let rows = match csv::Reader::from_path(dir.path().join("o/requests.csv")) {
        Ok(mut reader) => reader.records().map(Result::unwrap).collect(),
        Err(_) => Vec::new(),
    };
    (out.status.code().unwrap_or(-1), stderr, rows)
}

#[test]
fn a_scenario_planner_scales_the_fleet_from_the_scenarios_directory() {
    let (code, stderr, rows) = run_scenario(SCALED);
    assert_eq!(code, 0, "{stderr}");
    // Column 6 is `worker`, 14 `dispatch_ms`.
    let on_new: Vec<f64> = (rows.iter())
        .filter(|r| &r[6] == "1")
        .map(|r| r[14].parse().unwrap())
        .collect();
    assert!(!on_new.is_empty(), "the added worker served");
    assert!(on_new.iter().all(|&at| at >= 1000.0));
}

#[test]
fn a_bad_planner_section_exits_2_naming_the_field() {
    let cases = [
        (
            SCALED.replace("./policy.sh", "' '"),
            "s.yaml:11: planner.command: give a command",
        ),
        (
            SCALED.replace(
                "  command: ./policy.sh",
                "  command: ./policy.sh\n  timeout_s: 0",
            ),
            "planner.timeout_s: seconds in (0, 86400]",
        ),
        (
            SCALED.replace(
                "workers: {count: 1, engine: {max_num_seqs: 8}}",
                "workers: {pools: [{name: a, count: 1}, {name: b, count: 1}]}",
            ),
            "planner: a scaling policy sets one count per role, but pools `a` and `b` are both aggregated",
        ),
        (
            SCALED.replace(
                "  command: ./policy.sh",
                "  command: ./policy.sh\n  mode: agg",
            ),
            "planner.mode: a planner is either `command` (and `timeout_s`) or the native planner's keys",
        ),
    ];
    assert_each_exits_2(&cases);
}

/// Each scenario text ends in exit 2 with its message, writing no request.
fn assert_each_exits_2(cases: &[(String, &str)]) {
    for (text, expected) in cases {
        let (code, stderr, rows) = run_scenario(text);
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in {stderr}"
        );
        assert!(rows.is_empty());
    }
}

/// The native planner from a scenario's `planner:` keys: one worker grows under load,
/// `scaling.csv` says when and why, and `summary.json` what the fleet cost.
#[test]
fn a_scenario_runs_the_native_planner_from_its_keys() {
    let text = SCALED.replace(
        "  command: ./policy.sh\n",
        "  optimization_target: load\n  load_adjustment_interval_seconds: 1\n  decode_scale_up_kv_rate: 0.5\n  decode_scale_down_kv_rate: 0.05\n  max_gpu_budget: 3\n",
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.yaml"), &text).unwrap();
    let out = Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(dir.path())
        .args(["run", "s.yaml", "--out", "o", "--quiet"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scaling = std::fs::read_to_string(dir.path().join("o/scaling.csv")).unwrap();
    let mut lines = scaling.lines();
    assert_eq!(lines.next(), Some("time_ms,role,from,to,reason"));
    let first = lines.next().expect("the planner scaled");
    assert!(first.ends_with(",aggregated,1,2,scale_up"), "{scaling}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("o/summary.json")).unwrap()).unwrap();
    let fleet = &summary["fleet"];
    assert!(fleet["peak_workers"].as_u64().unwrap() <= 3, "{fleet}");
    assert!(fleet["peak_workers"].as_u64().unwrap() >= 2, "{fleet}");
    assert!(fleet["gpu_hours"].as_f64().unwrap() > 0.0);
    assert_eq!(
        fleet["scaling_events"].as_u64().unwrap() as usize,
        scaling.lines().count() - 1
    );
}

/// A native planner configuration that cannot run: each error names its key (and line), exit 2,
/// nothing written.
#[test]
fn a_bad_native_planner_exits_2_naming_the_key() {
    let native = |keys: &str| SCALED.replace("  command: ./policy.sh\n", keys);
    let cases = [
        (
            native("  optimization_target: sla\n"),
            "planner.optimization_target: sla scales by Dynamo's performance-model regression",
        ),
        (
            native("  optimization_target: load\n"),
            "requires decode_scale_up_kv_rate and decode_scale_down_kv_rate",
        ),
        (native("  min_endpont: 2\n"), "min_endpont"),
        (
            native(
                "  optimization_target: load\n  decode_scale_up_kv_rate: 1\n  decode_scale_down_kv_rate: 5\n",
            ),
            "decode_scale_up_kv_rate must be greater than decode_scale_down_kv_rate",
        ),
    ];
    assert_each_exits_2(&cases);
}

/// `replay --planner`: a configuration file's errors name the file and the key's line; the
/// native planner and `--scaling-policy` are one or the other.
#[test]
fn replay_planner_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let planner = dir.path().join("planner.yaml");
    std::fs::write(&planner, "optimization_target: load\nmax_gpu_budget: 4\n").unwrap();
    let out = Command::cargo_bin("routersim")
        .unwrap()
        .arg("replay")
        .arg("--trace")
        .arg(trace())
        .arg("--planner")
        .arg(&planner)
        .arg("--out")
        .arg(dir.path().join("o"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("planner.yaml") && stderr.contains("line 1"),
        "{stderr}"
    );
    assert!(!dir.path().join("o").exists());
    let both = Command::cargo_bin("routersim")
        .unwrap()
        .arg("replay")
        .arg("--trace")
        .arg(trace())
        .arg("--planner")
        .arg(&planner)
        .args(["--scaling-policy", "true"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2));
}
