//! Messages about bad or unusual input say what is true: the bound a value is beyond, the
//! real range of worker ids, a trace's byte-order mark accepted as a scenario's is, and bounds
//! printed so that a tiny or huge one reads as written.

use crate::support::run_in_dir;
use std::fs;

/// One worker, four requests, and room for `extra` top-level YAML.
fn small(extra: &str) -> String {
    format!(
        "name: small\nworkers: {{count: 1}}\nworkload:\n  groups:\n    - {{name: a, class: default, count: 4, input_tokens: 64, output_tokens: 1}}\n{extra}"
    )
}

const ROW: &str = r#"{"timestamp": 0, "input_length": 512, "output_length": 2, "hash_ids": [1]}"#;

/// `validate s.yaml ARGS` of `text` exits 2 with every `expected` string in stderr.
fn refused(text: &str, args: &[&str], expected: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("s.yaml"), text).unwrap();
    let (code, _, stderr) = run_in_dir(tmp.path(), &[&["validate", "s.yaml"], args].concat());
    assert_eq!(code, 2, "{stderr}");
    for e in expected {
        assert!(stderr.contains(e), "{stderr:?} should contain {e:?}");
    }
    stderr
}

#[test]
fn a_worker_count_beyond_u32_names_the_rank_bound() {
    let stderr = refused(
        &small(""),
        &["--set", "workers.count=5000000000"],
        &[
            "s.yaml:2: workers.count: --set workers.count=5000000000: ",
            "at most 4096 worker ranks",
        ],
    );
    assert!(!stderr.contains("expected a whole number"), "{stderr}");
}

#[test]
fn a_pool_count_and_dp_size_beyond_u32_name_the_rank_bound() {
    refused(
        &small(""),
        &["--set", "workers.dp_size=5000000000"],
        &["workers.dp_size", "at most 4096 worker ranks"],
    );
    let pools = small("").replace(
        "workers: {count: 1}",
        "workers:\n  pools:\n    - {name: h100, count: 1}",
    );
    refused(
        &pools,
        &["--set", "workers.pools.h100.count=5000000000"],
        &["workers.pools.h100.count", "at most 4096 worker ranks"],
    );
}

#[test]
fn a_migration_limit_of_2_to_the_64_names_the_largest_it_holds() {
    refused(
        &small(""),
        &["--set", "router.migration_limit=18446744073709551616"],
        &[
            "router.migration_limit",
            "`18446744073709551616` is more than 4294967295, the largest whole number this field can hold",
        ],
    );
}

#[test]
fn a_seed_of_1e29_names_the_largest_seed() {
    refused(
        &small(""),
        &["--set", "seed=1e29"],
        &[
            "seed: --set seed=1e29: ",
            "`1e29` is more than 18446744073709551615 (2^64 - 1)",
        ],
    );
}

/// `replay --trace t.jsonl` of `text`: (exit code, stderr).
fn replay(text: &str) -> (i32, String) {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("t.jsonl"), text).unwrap();
    let (code, _, stderr) = run_in_dir(
        tmp.path(),
        &["replay", "--trace", "t.jsonl", "--out", "out", "--quiet"],
    );
    (code, stderr)
}

#[test]
fn trace_hash_ids_above_2_to_the_64_minus_1_say_so() {
    let (code, stderr) = replay(&format!(
        "{}\n",
        ROW.replace("[1]", "[1, 18446744073709551616]")
    ));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("t.jsonl:1: field `hash_ids`: hash_ids[1] = 1.8446744073709552e19 is more than 18446744073709551615 (2^64 - 1), the largest hash id"),
        "{stderr}"
    );
    assert!(!stderr.contains("non-negative"), "{stderr}");
}

#[test]
fn a_trace_timestamp_of_1e300_names_the_time_bounds() {
    let (code, stderr) = replay(&format!(
        "{}\n",
        ROW.replace("\"timestamp\": 0", "\"timestamp\": 1e300")
    ));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("t.jsonl:1: field `timestamp`: 1e300 ms is beyond the timestamps routersim reads, from -1e15 to 1e15 ms"),
        "{stderr}"
    );
    assert!(stderr.contains("4611686018427 ms"), "{stderr}");
}

#[test]
fn a_trace_may_open_with_a_byte_order_mark() {
    let text = format!("\u{feff}{ROW}\n{ROW}\n");
    let (code, stderr) = replay(&text);
    assert_eq!(code, 0, "{stderr}");
    // A scenario's trace reads the same, and so does a scenario with a mark of its own.
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("t.jsonl"), &text).unwrap();
    let scenario = "\u{feff}name: bom\nworkload:\n  trace: t.jsonl\n";
    fs::write(tmp.path().join("s.yaml"), scenario).unwrap();
    let (code, stdout, stderr) =
        run_in_dir(tmp.path(), &["run", "s.yaml", "--out", "out", "--quiet"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let requests = fs::read_to_string(tmp.path().join("out/requests.csv")).unwrap();
    assert_eq!(requests.lines().count(), 3, "a header and both rows");
}

#[test]
fn worker_ranges_read_the_same_in_errors_and_in_validate() {
    // One worker: the error names the one id there is, not a range reading `0..1`.
    refused(
        &small("faults:\n  - {worker_down: {worker: 1, at_ms: 1}}\n"),
        &[],
        &["faults.0.worker_down.worker: unknown worker 1: the run has worker 0"],
    );
    // Pools: `validate` prints each pool's ids in the words the error uses for all of them.
    let pools = small("").replace(
        "workers: {count: 1}",
        "workers:\n  pools:\n    - {name: h100, count: 4}\n    - {name: a100, count: 2}",
    );
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("s.yaml"), &pools).unwrap();
    let (code, stdout, stderr) = run_in_dir(tmp.path(), &["validate", "s.yaml"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("pool h100: 4 x dp 1 (workers 0 to 3)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("pool a100: 2 x dp 1 (workers 4 to 5)"),
        "{stdout}"
    );
    refused(
        &format!("{pools}faults:\n  - {{worker_down: {{worker: 6, at_ms: 1}}}}\n"),
        &[],
        &["unknown worker 6: the run has workers 0 to 5"],
    );
}

/// `check` of a four-request run with one expectation of `bound`; returns its verdict line.
fn verdict(bound: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let expect = format!("expect:\n  - {{name: x, count_status: {{status: aborted}}, {bound}}}\n");
    fs::write(tmp.path().join("s.yaml"), small(&expect)).unwrap();
    let (code, stdout, stderr) = run_in_dir(tmp.path(), &["check", "s.yaml"]);
    assert!(code == 0 || code == 1, "{stdout}{stderr}");
    stdout
        .lines()
        .find(|l| l.contains("x = "))
        .unwrap_or_else(|| panic!("no verdict in {stdout}"))
        .to_string()
}

#[test]
fn tiny_and_huge_bounds_print_as_written_not_rounded_or_in_300_digits() {
    assert!(
        verdict("at_most: 0.000001").ends_with("x = 0  (at most 1e-6)"),
        "{}",
        verdict("at_most: 0.000001")
    );
    let huge = verdict("at_most: 1e300");
    assert!(huge.ends_with("x = 0  (at most 1e300)"), "{huge}");
    let line = verdict("within: [0.0000025, 0.5]");
    assert!(line.ends_with("(within [2.5e-6, 0.5])"), "{line}");
}

#[test]
fn a_tiny_negative_session_delay_prints_as_written_not_in_300_digits() {
    let turn = |fields: &str| {
        format!(
            r#"{{"session_id": "a", {fields}, "input_length": 8, "output_length": 1, "hash_ids": [1]}}"#
        )
    };
    for (second, field) in [
        (turn(r#""delay": -1e-300"#), "delay"),
        (turn(r#""timestamp": -1e-300"#), "timestamp"),
    ] {
        let (code, stderr) = replay(&format!("{}\n{second}\n", turn(r#""timestamp": 0"#)));
        assert_eq!(code, 2, "{stderr}");
        let wanted =
            format!("t.jsonl:2: field `{field}`: trace line 2 has invalid delay -1e-300\n");
        assert!(stderr.contains(&wanted), "{stderr}");
    }
}

#[test]
fn an_empty_sessions_mapping_names_the_missing_field_under_sessions() {
    refused(
        &small("").replace("output_tokens: 1}", "output_tokens: 1, sessions: {}}"),
        &[],
        &["s.yaml:5: workload.groups.a.sessions.turns: missing field `turns`"],
    );
}

#[test]
fn a_fractional_think_time_says_it_takes_whole_ms() {
    let sessions = "sessions: {turns: 2, new_input_tokens: 4, think_time_ms: 1.5}";
    let stderr = refused(
        &small("").replace(
            "output_tokens: 1}",
            &format!("output_tokens: 1, {sessions}}}"),
        ),
        &[],
        &[
            "workload.groups.a.sessions.think_time_ms: ",
            "expected a whole number of ms or {dist: ",
            "got `1.5`",
        ],
    );
    assert!(!stderr.contains("token count"), "{stderr}");
    let turns = "sessions: {turns: 2.5, new_input_tokens: 4}";
    refused(
        &small("").replace("output_tokens: 1}", &format!("output_tokens: 1, {turns}}}")),
        &[],
        &["sessions.turns: expected a whole number of turns or {dist: "],
    );
}

/// A share expectation on classes that can never queue judges nothing DRR decides: `check`,
/// `run` and `validate` say so at load, and name what to set.
#[test]
fn share_expectations_without_any_queueing_class_are_warned_about_at_load() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = |threshold: &str| {
        format!(
            "name: no-queue
seed: 1
router:
  default_policy_family: regular
  uncached_isl_buckets: [{{min_tokens: 0, bucket: all}}]
  policy_classes:
    - {{name: premium, policy_family: premium, cache_bucket: all, quantum: 512{threshold}}}
    - {{name: regular, policy_family: regular, cache_bucket: all, quantum: 128{threshold}}}
workers: {{count: 1, engine: {{max_num_seqs: 4}}}}
workload:
  burst: {{spacing_ns: 1, order: alternate}}
  groups:
    - {{name: premium, class: premium, count: 40, input_tokens: 512, output_tokens: 1}}
    - {{name: regular, class: regular, count: 40, input_tokens: 512, output_tokens: 1}}
expect:
  - prefix_share: {{class: premium, n: 40}}
    at_least: 0.0
"
        )
    };
    let warned = "no class can queue";
    for (threshold, warns) in [("", true), (", prefill_busy_threshold: 1536", false)] {
        let path = tmp.path().join("s.yaml");
        std::fs::write(&path, scenario(threshold)).unwrap();
        for command in ["check", "validate"] {
            let output = assert_cmd::Command::cargo_bin("routersim")
                .unwrap()
                .args([command, path.to_str().unwrap()])
                .output()
                .unwrap();
            assert!(output.status.success(), "{command}: {output:?}");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(
                stderr.contains(warned),
                warns,
                "{command} {threshold:?}: {stderr}"
            );
            if warns {
                assert!(stderr.contains("prefill_busy_threshold"), "{stderr}");
            }
        }
    }
}
