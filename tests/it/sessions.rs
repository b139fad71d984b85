//! Multi-turn sessions as a user meets them: session traces through `replay` and a scenario's
//! `workload: {trace}` in every replay mode, the `session_id`/`turn_index` columns, and bad
//! session rows. Agreement with Dynamo itself is in fidelity.rs.

use crate::support::{request_columns as columns, run_in_dir};
use std::fs;
use std::path::Path;

/// A session trace of the fidelity fixtures: 40 sessions and 30 plain rows, out of time order.
fn session_trace() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fidelity/sessions-closed-loop/dynamo.trace.jsonl")
}

const TIMELINE: [&str; 8] = [
    "row",
    "arrival_ms",
    "admit_ms",
    "first_token_ms",
    "completion_ms",
    "status",
    "session_id",
    "turn_index",
];

fn ok(dir: &Path, args: &[&str]) {
    let (code, stdout, stderr) = run_in_dir(dir, args);
    assert_eq!(code, 0, "{args:?}\n{stdout}{stderr}");
}

#[test]
fn a_session_trace_replays_the_same_through_a_scenario_in_every_mode() {
    let tmp = tempfile::tempdir().unwrap();
    fs::copy(session_trace(), tmp.path().join("t.jsonl")).unwrap();
    let modes: [(&str, &[&str]); 3] = [
        ("", &[]),
        ("  concurrency: 4\n", &["--replay-concurrency", "4"]),
        (
            "  arrival_speedup_ratio: 2\n",
            &["--arrival-speedup-ratio", "2"],
        ),
    ];
    for (i, (yaml_mode, flags)) in modes.into_iter().enumerate() {
        let yaml = format!("name: s\nworkload:\n  trace: t.jsonl\n{yaml_mode}");
        fs::write(tmp.path().join("s.yaml"), yaml).unwrap();
        let (ran, replayed) = (format!("run{i}"), format!("replay{i}"));
        ok(tmp.path(), &["run", "s.yaml", "--quiet", "--out", &ran]);
        let replay = [
            &[
                "replay", "--trace", "t.jsonl", "--quiet", "--out", &replayed,
            ],
            flags,
        ];
        ok(tmp.path(), &replay.concat());
        let ours = columns(&tmp.path().join(&ran), &TIMELINE);
        assert_eq!(
            ours,
            columns(&tmp.path().join(&replayed), &TIMELINE),
            "mode {i}"
        );
        let turns = ours.iter().filter(|r| !r[7].is_empty()).count();
        assert!(
            turns > 100,
            "mode {i}: the sessions' turns are numbered ({turns})"
        );
    }
}

#[test]
fn a_later_turn_arrives_its_delay_after_the_turn_before_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = [
        r#"{"session_id": "a", "timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]}"#,
        r#"{"timestamp": 5, "input_length": 64, "output_length": 2, "hash_ids": [9]}"#,
        r#"{"session_id": "a", "delay": 100, "input_length": 1536, "output_length": 3, "hash_ids": [1, 2, 3]}"#,
    ];
    fs::write(tmp.path().join("t.jsonl"), trace.join("\n")).unwrap();
    for (out, ratio) in [("o1", "1"), ("o2", "2")] {
        let args = ["replay", "--trace", "t.jsonl", "--quiet", "--out", out];
        ok(
            tmp.path(),
            &[&args[..], &["--arrival-speedup-ratio", ratio]].concat(),
        );
        let rows = columns(
            &tmp.path().join(out),
            &[
                "row",
                "arrival_ms",
                "completion_ms",
                "session_id",
                "turn_index",
                "reused_input_tokens",
            ],
        );
        let ms = |s: &str| s.parse::<f64>().unwrap();
        let delay_ms = 100.0 / ms(ratio);
        let (first, plain, second) = (&rows[0], &rows[1], &rows[2]);
        assert_eq!(first[3..5], ["a", "0"]);
        assert_eq!(plain[3..5], ["", ""], "a plain row is no session's turn");
        assert_eq!(second[3..5], ["a", "1"]);
        assert!(
            (ms(&second[1]) - ms(&first[2]) - delay_ms).abs() < 1e-6,
            "{rows:?}"
        );
        assert_eq!(
            second[5], "1024",
            "the second turn reuses the first's two blocks"
        );
    }
}

#[test]
fn bad_session_rows_are_exit_2_naming_the_file_line_and_field_and_write_nothing() {
    let row = |fields: &str| {
        format!(r#"{{{fields}, "input_length": 64, "output_length": 1, "hash_ids": [1]}}"#)
    };
    let cases = [
        (
            vec![row(r#""session_id": "a", "timestamp": 0, "delay": 5"#)],
            (
                "t.jsonl:1:",
                "delay",
                "trace line 1 sets delay on the first turn of session a",
            ),
        ),
        (
            vec![
                row(r#""session_id": "a", "timestamp": 0"#),
                row(r#""session_id": "a", "delay": -1"#),
            ],
            ("t.jsonl:2:", "delay", "trace line 2 has invalid delay -1"),
        ),
        (
            vec![
                row(r#""session_id": "a", "timestamp": 0"#),
                row(r#""session_id": "a", "delay": 3, "timestamp": 9"#),
            ],
            (
                "t.jsonl:2:",
                "delay",
                "a later turn of a session gives `delay` or `timestamp`, not both",
            ),
        ),
        (
            vec![row(r#""session_id": 7, "timestamp": 0"#)],
            ("t.jsonl:1:", "session_id", ""),
        ),
        (
            vec![
                row(r#""session_id": "a", "timestamp": 0"#),
                row(r#""session_id": "a", "delay": 1, "delay_ms": 1"#),
            ],
            (
                "t.jsonl:2:",
                "delay_ms",
                "give `delay` or its alias `delay_ms`, not both",
            ),
        ),
    ];
    for (lines, expected) in cases {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("t.jsonl"), lines.join("\n")).unwrap();
        fs::write(
            tmp.path().join("s.yaml"),
            "name: s\nworkload:\n  trace: t.jsonl\n",
        )
        .unwrap();
        let commands: [&[&str]; 3] = [
            &["replay", "--trace", "t.jsonl", "--quiet", "--out", "o"],
            &["run", "s.yaml", "--quiet", "--out", "o"],
            &["validate", "s.yaml"],
        ];
        for args in commands {
            let (code, stdout, stderr) = run_in_dir(tmp.path(), args);
            assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
            let (at, field, message) = expected;
            // `replay` says "t.jsonl:2: field `delay`: ...", a scenario "t.jsonl:2: delay: ...".
            let located = [format!("{at} field `{field}`"), format!("{at} {field}:")];
            assert!(
                located.iter().any(|l| stderr.contains(l)),
                "{args:?}: {stderr}"
            );
            assert!(stderr.contains(message), "{args:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
            assert!(!tmp.path().join("o").exists(), "{args:?}: nothing written");
        }
    }
}

/// Runs scenario `yaml` in a fresh directory; returns it with the output in `o`.
fn run_scenario(yaml: &str, extra: &[&str]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("s.yaml"), yaml).unwrap();
    ok(
        tmp.path(),
        &[&["run", "s.yaml", "--quiet", "--out", "o"], extra].concat(),
    );
    tmp
}

/// (arrival_ms, completion_ms, session_id, turn_index, reused_input_tokens) per row.
fn turns(out: &Path) -> Vec<(f64, f64, String, String, u64)> {
    let names = [
        "arrival_ms",
        "completion_ms",
        "session_id",
        "turn_index",
        "reused_input_tokens",
    ];
    columns(out, &names)
        .into_iter()
        .map(|r| {
            (
                r[0].parse().unwrap(),
                r[1].parse().unwrap(),
                r[2].clone(),
                r[3].clone(),
                r[4].parse().unwrap(),
            )
        })
        .collect()
}

const CHAT: &str = "name: chat
workers: {count: 1}
workload:
  groups:
    - name: chat
      count: 4
      input_tokens: 600
      output_tokens: 20
      arrival: {interval: {every_ms: 50}}
      sessions: {turns: 3, think_time_ms: 200, new_input_tokens: 100}
";

#[test]
fn a_synthetic_turn_arrives_its_think_time_after_the_turn_before_and_reuses_the_conversation() {
    for jitter in ["0", "5000"] {
        let set = format!("delays.arrival_jitter_ns={jitter}");
        let tmp = run_scenario(CHAT, &["--set", &set]);
        let rows = turns(&tmp.path().join("o"));
        assert_eq!(rows.len(), 12, "4 sessions of 3 turns");
        for pair in rows.windows(2) {
            let (before, turn) = (&pair[0], &pair[1]);
            if turn.3 == "0" {
                continue;
            }
            assert_eq!(turn.2, before.2, "a session's turns take consecutive rows");
            assert!(
                (turn.0 - before.1 - 200.0).abs() < 1e-6,
                "jitter {jitter}: {pair:?}"
            );
            // 600 + 20 + 100 = 720 tokens: turn 1 reuses turn 0's nine full 64-token blocks.
            let expected = if turn.3 == "1" { 576 } else { 704 };
            assert_eq!(turn.4, expected, "{turn:?}");
        }
        let ids: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
        assert_eq!(
            ids[..4],
            ["session_0", "session_0", "session_0", "session_1"]
        );
    }
}

#[test]
fn a_synthetic_session_holds_its_closed_loop_slot_through_its_think_times() {
    let yaml =
        CHAT.replace("      arrival: {interval: {every_ms: 50}}\n", "") + "  concurrency: 1\n";
    let rows = turns(&run_scenario(&yaml, &[]).path().join("o"));
    for pair in rows.windows(2) {
        let (before, next) = (&pair[0], &pair[1]);
        let gap_ms = next.0 - before.1;
        let expected_ms = if next.3 == "0" { 0.0 } else { 200.0 };
        assert!((gap_ms - expected_ms).abs() < 1e-6, "{pair:?}");
    }
}

#[test]
fn sessions_that_start_inside_the_duration_run_all_their_turns() {
    let yaml = "name: drain
workers: {count: 1}
workload:
  rate_per_s: 4
  duration_s: 3
  groups:
    - {name: chat, share: 1, input_tokens: 300, output_tokens: 10, sessions: {turns: 4, think_time_ms: 1500, new_input_tokens: 40}}
";
    let rows = turns(&run_scenario(yaml, &[]).path().join("o"));
    let starts = rows.iter().filter(|r| r.3 == "0");
    assert!(starts.clone().all(|r| r.0 < 3000.0));
    assert_eq!(
        rows.len(),
        4 * starts.count(),
        "every session runs its four turns"
    );
    assert!(
        rows.iter().any(|r| r.0 > 3000.0),
        "later turns arrive after the window"
    );
}

#[test]
fn a_turn_lost_to_a_fault_or_cancelled_ends_its_session_and_others_run_on() {
    let yaml = "name: faults
workers: {count: 2, engine: {max_num_seqs: 4}}
workload:
  groups:
    - name: chat
      class: default
      count: 40
      input_tokens: 2000
      output_tokens: 200
      arrival: {interval: {every_ms: 100}}
      sessions: {turns: 4, think_time_ms: 300, new_input_tokens: 100}
faults:
  - {worker_down: {worker: 0, at_ms: 2000, until_ms: 4000}}
  - {cancel: {group: chat, fraction: 0.2, after_ms: 500}}
";
    let tmp = run_scenario(yaml, &[]);
    let rows = columns(
        &tmp.path().join("o"),
        &["session_id", "turn_index", "status"],
    );
    let mut sessions: std::collections::BTreeMap<String, Vec<(String, String)>> =
        Default::default();
    for r in rows {
        sessions
            .entry(r[0].clone())
            .or_default()
            .push((r[1].clone(), r[2].clone()));
    }
    assert_eq!(sessions.len(), 40);
    let mut cut_short = 0;
    for (id, turns) in &sessions {
        let indexes: Vec<String> = (0..turns.len()).map(|t| t.to_string()).collect();
        let seen: Vec<String> = turns.iter().map(|t| t.0.clone()).collect();
        assert_eq!(seen, indexes, "{id}: turns in order, none skipped");
        let last = turns.len() - 1;
        for (turn, (_, status)) in turns.iter().enumerate() {
            let ended = status == "aborted" || status == "cancelled";
            assert!(
                !ended || turn == last,
                "{id}: nothing follows a lost turn: {turns:?}"
            );
        }
        if turns.len() < 4 {
            cut_short += 1;
            assert!(
                ["aborted", "cancelled"].contains(&turns[last].1.as_str()),
                "{turns:?}"
            );
        }
    }
    assert!(cut_short > 5, "the faults hit some sessions ({cut_short})");
    assert!(
        sessions.values().any(|t| t.len() == 4),
        "others run all their turns"
    );
}

#[test]
fn plan_finds_the_highest_session_rate_that_keeps_follow_up_turns_fast() {
    let yaml = "name: plan-sessions
seed: 3
workers: {count: 1, engine: {max_num_seqs: 8}}
workload:
  rate_per_s: 1
  duration_s: 60
  groups:
    - {name: chat, share: 1, input_tokens: 1200, output_tokens: 40, prefix: {tokens: 512}, sessions: {turns: 3, think_time_ms: 1000, new_input_tokens: 50}}
expect:
  - {latency: {class: default, metric: followup_ttft_ms_p99}, at_most: 300}
";
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("s.yaml"), yaml).unwrap();
    let args = [
        "plan",
        "s.yaml",
        "--maximize",
        "workload.rate_per_s",
        "--range",
        "1..64",
    ];
    ok(
        tmp.path(),
        &[&args[..], &["--quiet", "--out", "p"]].concat(),
    );
    let plan: serde_json::Value =
        serde_json::from_slice(&fs::read(tmp.path().join("p/plan.json")).unwrap()).unwrap();
    let answer = plan["answer"].as_f64().unwrap();
    assert!(answer > 1.0 && answer < 64.0, "{plan}");
    let above = plan["bracket"]["infeasible"].as_f64().unwrap();
    assert!(above > answer);
    // At the answer the session workload kept up: its later turns were not counted as load
    // that arrived and was never served.
    let probe = plan["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["value"] == answer);
    assert_eq!(probe.unwrap()["overloaded"], false, "{plan}");
}
