//! Bounded resources and validated inputs: every input beyond a documented bound is
//! refused with exit 2 and a message naming the file and field, before any work or output.

use assert_cmd::Command;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

fn routersim() -> Command {
    Command::cargo_bin("routersim").unwrap()
}

const GROUP: &str = "{name: a, count: 4, input_tokens: 64, output_tokens: 1}";
const ROW: &str = r#"{"timestamp": 0, "input_length": 512, "output_length": 2, "hash_ids": [1]}"#;

/// A scenario `s.yaml` of `name: ok` with `extra` top-level YAML and the groups given.
fn scenario(extra: &str, groups: &[String]) -> String {
    let groups: Vec<String> = groups.iter().map(|g| format!("    - {g}\n")).collect();
    format!(
        "name: ok\n{extra}\nworkload:\n  groups:\n{}",
        groups.concat()
    )
}

/// Runs `routersim run s.yaml` (default output directory) in a fresh directory holding `text`
/// as `s.yaml`; asserts exit 2, that stderr names `s.yaml` and every `expected` string, and
/// that nothing was written. Returns stderr.
fn refused_run(text: &str, expected: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("s.yaml"), text).unwrap();
    let output = routersim()
        .current_dir(tmp.path())
        .args(["run", "s.yaml", "--quiet"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("s.yaml"), "{stderr} should name the file");
    for e in expected {
        assert!(stderr.contains(e), "{stderr:?} should contain {e:?}");
    }
    let entries = fs::read_dir(tmp.path()).unwrap().count();
    assert_eq!(entries, 1, "only s.yaml: nothing may be written");
    stderr
}

fn refused_group(group: &str, expected: &[&str]) -> String {
    refused_run(&scenario("", &[group.to_string()]), expected)
}

fn refused_extra(extra: &str, expected: &[&str]) -> String {
    refused_run(&scenario(extra, &[GROUP.to_string()]), expected)
}

/// Runs `routersim ARGS` in a fresh directory with `t.jsonl` (one good row) and `s.yaml`
/// (a small scenario); asserts exit 2 and every `expected` string in stderr.
fn refused_cli(args: &[&str], expected: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("t.jsonl"), format!("{ROW}\n")).unwrap();
    fs::write(
        tmp.path().join("s.yaml"),
        scenario("", &[GROUP.to_string()]),
    )
    .unwrap();
    let output = routersim()
        .current_dir(tmp.path())
        .args(args)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    for e in expected {
        assert!(stderr.contains(e), "{stderr:?} should contain {e:?}");
    }
    assert!(!tmp.path().join("out").exists(), "nothing may be written");
    stderr
}

fn named(name: &str, expected: &str) {
    let text = scenario("", &[GROUP.to_string()]).replace("name: ok", &format!("name: {name}"));
    refused_run(&text, &["s.yaml:1: name: ", expected]);
}

#[test]
fn traversal_name_dot_dot_slash_is_refused() {
    named("../../x", "not a file name");
}

#[test]
fn absolute_name_is_refused() {
    named("/abs/dir", "not a file name");
}

#[test]
fn name_with_a_slash_is_refused() {
    named("a/b", "not a file name");
}

#[test]
fn name_with_a_backslash_is_refused() {
    named("'a\\b'", "not a file name");
}

#[test]
fn empty_name_is_refused() {
    named("\"\"", "must not be empty");
}

#[test]
fn dot_dot_name_is_refused() {
    named("..", "not a file name");
}

#[test]
fn dot_name_is_refused() {
    named(".", "not a file name");
}

#[test]
fn overlong_name_is_refused() {
    named(&"x".repeat(129), "at most 128 bytes");
}

#[test]
fn name_with_a_control_character_is_refused() {
    named("\"a\\tb\"", "not a file name");
}

#[test]
fn huge_worker_count_is_refused() {
    refused_extra(
        "workers: {count: 1000000000}",
        &["workers.count", "4096 worker ranks"],
    );
}

#[test]
fn huge_dp_size_is_refused() {
    refused_extra(
        "workers: {dp_size: 1000000000}",
        &["workers.dp_size", "4096 worker ranks"],
    );
}

#[test]
fn workers_times_dp_size_over_the_rank_bound_is_refused() {
    refused_extra(
        "workers: {count: 100, dp_size: 100}",
        &["workers.dp_size", "100 workers x dp_size 100"],
    );
}

#[test]
fn replay_huge_workers_is_refused() {
    refused_cli(
        &[
            "replay",
            "--trace",
            "t.jsonl",
            "--workers",
            "1000000000",
            "--out",
            "out",
        ],
        &[
            "--workers: 1000000000 is more than a run may have",
            "at most 4096",
        ],
    );
}

#[test]
fn replay_workers_times_engine_dp_size_is_refused() {
    let engine = r#"{"engine": {}, "dp_size": 100}"#;
    refused_cli(
        &[
            "replay",
            "--trace",
            "t.jsonl",
            "--workers",
            "100",
            "--engine",
            engine,
            "--out",
            "out",
        ],
        &["--workers: 100 workers x dp_size 100", "4096"],
    );
}

/// `replay --prefill-workers P --decode-workers D` with `extra` flags; asserts the refusal
/// (exit 2, nothing written, each of `expected` in stderr) comes at once, before any work.
fn refused_disaggregated_replay(pools: [&str; 2], extra: &[&str], expected: &[&str]) {
    let mut args = vec!["replay", "--trace", "t.jsonl", "--out", "out"];
    args.extend(["--prefill-workers", pools[0], "--decode-workers", pools[1]]);
    args.extend(extra);
    let started = Instant::now();
    refused_cli(&args, expected);
    assert!(started.elapsed() < Duration::from_secs(10), "refused late");
}

#[test]
fn replay_prefill_and_decode_workers_over_the_rank_bound_together_are_refused() {
    refused_disaggregated_replay(
        ["4096", "4096"],
        &[],
        &[
            "--prefill-workers and --decode-workers",
            "8192 worker ranks",
            "at most 4096",
        ],
    );
    // At the bound exactly, summed, is the largest fleet refused by neither role alone.
    refused_disaggregated_replay(["2048", "2049"], &[], &["4097 worker ranks"]);
}

#[test]
fn replay_decode_workers_times_decode_engine_dp_size_is_refused() {
    let engine = r#"{"engine": {}, "dp_size": 4096}"#;
    refused_disaggregated_replay(
        ["1", "2"],
        &["--decode-engine", engine],
        &[
            "--decode-workers with --decode-engine's dp_size",
            "2 workers x dp_size 4096",
        ],
    );
    // One worker of 4096 ranks is within its role's bound, but not beside a prefill worker.
    refused_disaggregated_replay(
        ["1", "1"],
        &["--decode-engine", engine],
        &[
            "--prefill-workers and --decode-workers",
            "4097 worker ranks",
        ],
    );
}

#[test]
fn replay_prefill_workers_times_prefill_engine_dp_size_is_refused() {
    let engine = r#"{"engine": {}, "dp_size": 64}"#;
    refused_disaggregated_replay(
        ["65", "1"],
        &["--prefill-engine", engine],
        &[
            "--prefill-workers with --prefill-engine's dp_size",
            "65 workers x dp_size 64",
        ],
    );
}

#[test]
fn replay_disaggregated_fleet_at_the_rank_bound_runs() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("t.jsonl"), format!("{ROW}\n")).unwrap();
    let output = routersim()
        .current_dir(tmp.path())
        .args(["replay", "--trace", "t.jsonl", "--out", "out", "--quiet"])
        .args(["--prefill-workers", "2048", "--decode-workers", "2048"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

#[test]
fn one_group_of_ten_million_requests_is_refused() {
    refused_group(
        "{name: a, count: 10000000, input_tokens: 64, output_tokens: 1}",
        &["workload.groups.a.count", "at most 1000000"],
    );
}

#[test]
fn hundred_groups_of_ten_million_requests_are_refused() {
    let groups: Vec<String> = (0..100)
        .map(|i| format!("{{name: g{i}, count: 10000000, input_tokens: 64, output_tokens: 1}}"))
        .collect();
    refused_run(&scenario("", &groups), &["count", "at most 1000000"]);
}

#[test]
fn groups_over_the_total_request_bound_are_refused() {
    let groups: Vec<String> = (0..11)
        .map(|i| format!("{{name: g{i}, count: 100000, input_tokens: 64, output_tokens: 1}}"))
        .collect();
    refused_run(
        &scenario("", &groups),
        &["workload.groups", "1100000 requests in all"],
    );
}

#[test]
fn prompts_over_the_block_bound_are_refused() {
    refused_group(
        "{name: a, count: 1000000, input_tokens: 16000000, output_tokens: 1}",
        &["workload.groups.a.input_tokens", "KV blocks in all"],
    );
}

#[test]
fn huge_fixed_input_tokens_are_refused() {
    refused_group(
        "{name: a, count: 1, input_tokens: 100000000, output_tokens: 1}",
        &["workload.groups.a.input_tokens", "16777216"],
    );
}

#[test]
fn huge_output_tokens_are_refused() {
    refused_group(
        "{name: a, count: 1, input_tokens: 64, output_tokens: 1000000000000}",
        &["workload.groups.a.output_tokens", "16777216"],
    );
}

#[test]
fn huge_distribution_max_is_refused() {
    refused_group(
        "{name: a, count: 1, input_tokens: {dist: uniform, min: 1, max: 100000000}, output_tokens: 1}",
        &["workload.groups.a.input_tokens.max", "16777216"],
    );
}

#[test]
fn lognormal_with_huge_std_dev_is_exit_2_not_a_panic() {
    refused_group(
        "{name: a, count: 4, input_tokens: {dist: lognormal, mean: 512, std_dev: 1e200}, output_tokens: 1}",
        &["workload.groups.a.input_tokens.std_dev", "1e200"],
    );
}

#[test]
fn lognormal_with_tiny_mean_is_refused() {
    refused_group(
        "{name: a, count: 4, input_tokens: {dist: lognormal, mean: 1e-300, std_dev: 100}, output_tokens: 1}",
        &["workload.groups.a.input_tokens.mean", "from 1 to"],
    );
}

#[test]
fn normal_with_huge_mean_is_refused() {
    refused_group(
        "{name: a, count: 4, input_tokens: 64, output_tokens: {dist: normal, mean: 1e300, std_dev: 1}}",
        &["workload.groups.a.output_tokens.mean", "from 1 to"],
    );
}

#[test]
fn exponential_with_huge_mean_is_refused() {
    refused_group(
        "{name: a, count: 4, input_tokens: {dist: exponential, mean: 1e300}, output_tokens: 1}",
        &["workload.groups.a.input_tokens.mean"],
    );
}

#[test]
fn poisson_rate_1e_minus_300_is_refused() {
    refused_group(
        "{name: a, count: 4, input_tokens: 64, output_tokens: 1, arrival: {poisson: {rate_per_s: 1e-300}}}",
        &[
            "workload.groups.a.arrival.poisson.rate_per_s",
            "latest time",
        ],
    );
}

#[test]
fn poisson_start_ms_1e18_is_refused() {
    refused_group(
        "{name: a, count: 4, input_tokens: 64, output_tokens: 1, arrival: {poisson: {rate_per_s: 1, start_ms: 1e18}}}",
        &["workload.groups.a.arrival.poisson.start_ms", "latest time"],
    );
}

#[test]
fn interval_every_ms_1e300_is_refused() {
    refused_group(
        "{name: a, count: 4, input_tokens: 64, output_tokens: 1, arrival: {interval: {every_ms: 1e300}}}",
        &["workload.groups.a.arrival.interval.every_ms", "latest time"],
    );
}

#[test]
fn interval_span_past_the_time_bound_is_refused() {
    refused_group(
        "{name: a, count: 1000000, input_tokens: 64, output_tokens: 1, arrival: {interval: {every_ms: 1e10}}}",
        &[
            "workload.groups.a.arrival.interval.every_ms",
            "last of 1000000",
        ],
    );
}

#[test]
fn interval_start_ms_1e18_is_refused() {
    refused_group(
        "{name: a, count: 4, input_tokens: 64, output_tokens: 1, arrival: {interval: {every_ms: 1, start_ms: 1e18}}}",
        &["workload.groups.a.arrival.interval.start_ms", "latest time"],
    );
}

#[test]
fn listed_at_ms_1e18_is_refused() {
    refused_group(
        "{name: a, count: 2, input_tokens: 64, output_tokens: 1, arrival: {at_ms: [0, 1e18]}}",
        &["workload.groups.a.arrival.at_ms", "latest time"],
    );
}

#[test]
fn burst_at_ms_1e18_is_refused() {
    refused_run(
        &format!("name: ok\nworkload:\n  burst: {{at_ms: 1e18}}\n  groups: [{GROUP}]\n"),
        &["workload.burst.at_ms", "latest time"],
    );
}

#[test]
fn burst_spacing_past_the_time_bound_is_refused() {
    refused_run(
        &format!(
            "name: ok\nworkload:\n  burst: {{spacing_ns: 4611686018427387904}}\n  groups: [{GROUP}]\n"
        ),
        &["workload.burst.spacing_ns", "latest time"],
    );
}

#[test]
fn speedup_ratio_1e_minus_300_is_refused() {
    refused_extra(
        "workers: {engine: {speedup_ratio: 1e-300}}",
        &["workers.engine.speedup_ratio", "0.001"],
    );
}

#[test]
fn decode_speedup_ratio_1e_minus_300_is_refused() {
    refused_extra(
        "workers: {engine: {decode_speedup_ratio: 1e-300}}",
        &["workers.engine.decode_speedup_ratio", "0.001"],
    );
}

#[test]
fn speedup_ratio_product_below_the_minimum_is_refused() {
    refused_extra(
        "workers: {engine: {speedup_ratio: 0.01, decode_speedup_ratio: 0.01}}",
        &["workers.engine.decode_speedup_ratio", "speedup_ratio x"],
    );
}

#[test]
fn huge_delay_ms_is_refused() {
    refused_extra(
        "delays: {router_to_worker_ms: 1e300}",
        &["delays.router_to_worker_ms", "latest time"],
    );
}

#[test]
fn huge_jitter_ms_is_refused() {
    refused_extra(
        "delays: {jitter_ms: 1e19}",
        &["delays.jitter_ms", "latest time"],
    );
}

#[test]
fn huge_arrival_jitter_ns_is_refused() {
    refused_extra(
        "delays: {arrival_jitter_ns: 18446744073709551615}",
        &["delays.arrival_jitter_ns", "146 years"],
    );
}

#[test]
fn huge_max_time_ms_is_refused() {
    refused_extra(
        "limits: {max_time_ms: 1e300}",
        &["limits.max_time_ms", "latest time"],
    );
}

#[test]
fn huge_block_size_is_refused() {
    refused_extra(
        "workers: {engine: {block_size: 1000000000000}}",
        &["workers.engine.block_size", "65536"],
    );
}

/// Runs `f` unless /dev/zero is missing (then the case cannot be built here).
fn with_dev_zero(f: impl FnOnce()) {
    if Path::new("/dev/zero").exists() {
        let started = Instant::now();
        f();
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "refused quickly"
        );
    }
}

#[test]
fn dev_zero_as_scenario_is_refused() {
    with_dev_zero(|| {
        refused_cli(
            &["run", "/dev/zero", "--out", "out"],
            &["/dev/zero", "character device, not a regular file"],
        );
        refused_cli(
            &["validate", "/dev/zero"],
            &["/dev/zero", "character device, not a regular file"],
        );
    });
}

#[test]
fn dev_zero_as_policy_is_refused() {
    with_dev_zero(|| {
        refused_cli(
            &[
                "replay",
                "--trace",
                "t.jsonl",
                "--policy",
                "/dev/zero",
                "--out",
                "out",
            ],
            &["/dev/zero", "character device, not a regular file"],
        );
        refused_extra(
            "router: {policy: /dev/zero}",
            &[
                "router.policy",
                "/dev/zero",
                "character device, not a regular file",
            ],
        );
    });
}

#[test]
fn dev_zero_as_engine_is_refused() {
    with_dev_zero(|| {
        refused_cli(
            &[
                "replay",
                "--trace",
                "t.jsonl",
                "--engine",
                "/dev/zero",
                "--out",
                "out",
            ],
            &["--engine /dev/zero", "character device, not a regular file"],
        );
        refused_cli(
            &[
                "replay",
                "--trace",
                "t.jsonl",
                "--router",
                "/dev/zero",
                "--out",
                "out",
            ],
            &["--router /dev/zero", "character device, not a regular file"],
        );
    });
}

#[test]
fn dev_zero_as_trace_is_refused() {
    with_dev_zero(|| {
        refused_cli(
            &["replay", "--trace", "/dev/zero", "--out", "out"],
            &["/dev/zero", "character device, not a regular file"],
        );
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.yaml");
        fs::write(&path, "name: ok\nworkload: {trace: /dev/zero}\n").unwrap();
        let output = routersim()
            .args(["validate"])
            .arg(&path)
            .timeout(Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("workload.trace: cannot read /dev/zero")
                && stderr.contains("character device"),
            "{stderr}"
        );
    });
}

#[test]
fn oversized_scenario_file_is_refused() {
    let padding = format!("# {}\n", "x".repeat(100)).repeat(50_000);
    refused_run(
        &format!("{padding}{}", scenario("", &[GROUP.to_string()])),
        &["larger than 4 MiB"],
    );
}

#[test]
fn trace_row_with_huge_output_length_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let row = ROW.replace("\"output_length\": 2", "\"output_length\": 100000000");
    fs::write(tmp.path().join("big.jsonl"), format!("{ROW}\n{row}\n")).unwrap();
    let output = routersim()
        .current_dir(tmp.path())
        .args(["replay", "--trace", "big.jsonl", "--out", "out"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("big.jsonl:2: field `output_length`"),
        "{stderr}"
    );
}

#[test]
fn trace_row_with_huge_input_length_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let row = ROW.replace("\"input_length\": 512", "\"input_length\": 100000000");
    fs::write(tmp.path().join("big.jsonl"), format!("{row}\n")).unwrap();
    let output = routersim()
        .current_dir(tmp.path())
        .args(["replay", "--trace", "big.jsonl", "--out", "out"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("big.jsonl:1: field `input_length`"),
        "{stderr}"
    );
    assert!(stderr.contains("16777216"), "{stderr}");
}

#[test]
fn trace_timestamps_past_the_time_bound_are_refused() {
    let late = ROW.replace("\"timestamp\": 0", "\"timestamp\": 1e14");
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("late.jsonl"), format!("{ROW}\n{late}\n")).unwrap();
    let output = routersim()
        .current_dir(tmp.path())
        .args(["replay", "--trace", "late.jsonl", "--out", "out"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("late.jsonl:2: field `timestamp`"),
        "{stderr}"
    );
}

#[test]
fn sweep_with_4294967295_seeds_exits_2_quickly() {
    let started = Instant::now();
    refused_cli(
        &["sweep", "s.yaml", "--seeds", "4294967295", "--out", "out"],
        &["--seeds 4294967295", "more than the 100000"],
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn sweep_points_times_seeds_over_the_bound_is_refused() {
    let values: Vec<String> = (1..=1001).map(|v| v.to_string()).collect();
    let set = format!("workload.groups.a.count={}", values.join(","));
    refused_cli(
        &[
            "sweep", "s.yaml", "--set", &set, "--seeds", "100", "--out", "out",
        ],
        &["1001 points x 100 seeds"],
    );
}

#[test]
fn sweep_with_10000_jobs_runs() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(
        tmp.path().join("s.yaml"),
        scenario("", &[GROUP.to_string()]),
    )
    .unwrap();
    let output = routersim()
        .current_dir(tmp.path())
        .args([
            "sweep", "s.yaml", "--jobs", "10000", "--quiet", "--out", "out",
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

#[test]
fn replay_huge_trace_block_size_is_refused() {
    refused_cli(
        &[
            "replay",
            "--trace",
            "t.jsonl",
            "--trace-block-size",
            "100000000",
            "--out",
            "out",
        ],
        &["--trace-block-size: must be from 1 to 65536, got 100000000"],
    );
}

/// Runs `routersim ARGS` in `dir` with a 30 s limit (a blocked open would never return);
/// asserts exit 2 and every `expected` string in stderr.
fn refused_quickly_in(dir: &Path, args: &[&str], expected: &[&str]) {
    let started = Instant::now();
    let output = routersim()
        .current_dir(dir)
        .args(args)
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    for e in expected {
        assert!(
            stderr.contains(e),
            "{args:?}: {stderr:?} should contain {e:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "refused quickly"
    );
}

/// Makes a FIFO at `path`; false where mkfifo is missing (then the case cannot be built).
fn make_fifo(path: &Path) -> bool {
    std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_fifo_as_the_profile_path_is_refused_without_blocking() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("p.npz");
    if !make_fifo(&fifo) {
        return;
    }
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/calibrated-profile.yaml");
    let set = format!("workers.engine.planner_profile_data={}", fifo.display());
    refused_quickly_in(
        tmp.path(),
        &["validate", scenario.to_str().unwrap(), "--set", &set],
        &["p.npz", "FIFO"],
    );
}

#[test]
fn a_fifo_as_a_scenario_policy_engine_or_trace_is_refused_without_blocking() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("t.jsonl"), format!("{ROW}\n")).unwrap();
    if !make_fifo(&tmp.path().join("p")) {
        return;
    }
    fs::write(
        tmp.path().join("s.yaml"),
        scenario("router: {policy: p}", &[GROUP.to_string()]),
    )
    .unwrap();
    fs::write(tmp.path().join("t.yaml"), "name: t\nworkload: {trace: p}\n").unwrap();
    for args in [
        &["run", "p", "--out", "out"][..],
        &["validate", "s.yaml"],
        &["validate", "t.yaml"],
        &["replay", "--trace", "p", "--out", "out"],
        &[
            "replay", "--trace", "t.jsonl", "--engine", "p", "--out", "out",
        ],
        &[
            "replay", "--trace", "t.jsonl", "--router", "p", "--out", "out",
        ],
        &[
            "replay", "--trace", "t.jsonl", "--policy", "p", "--out", "out",
        ],
    ] {
        refused_quickly_in(tmp.path(), args, &["FIFO (named pipe), not a regular file"]);
    }
    assert!(!tmp.path().join("out").exists(), "nothing may be written");
}

#[test]
fn links_to_dev_zero_are_refused_as_devices() {
    if !Path::new("/dev/zero").exists() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("t.jsonl"), format!("{ROW}\n")).unwrap();
    for name in ["z.yaml", "z.jsonl", "z.json", "z.npz"] {
        std::os::unix::fs::symlink("/dev/zero", tmp.path().join(name)).unwrap();
    }
    let profile = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/calibrated-profile.yaml");
    let set = format!(
        "workers.engine.planner_profile_data={}",
        tmp.path().join("z.npz").display()
    );
    for args in [
        &["run", "z.yaml", "--out", "out"][..],
        &["replay", "--trace", "z.jsonl", "--out", "out"],
        &[
            "replay", "--trace", "t.jsonl", "--engine", "z.json", "--out", "out",
        ],
        &[
            "replay", "--trace", "t.jsonl", "--policy", "z.yaml", "--out", "out",
        ],
        &["validate", profile.to_str().unwrap(), "--set", &set],
    ] {
        refused_quickly_in(tmp.path(), args, &["character device, not a regular file"]);
    }
    assert!(!tmp.path().join("out").exists(), "nothing may be written");
}

#[test]
fn a_directory_where_a_file_is_expected_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("d")).unwrap();
    for args in [
        &["run", "d", "--out", "out"][..],
        &["replay", "--trace", "d", "--out", "out"],
    ] {
        refused_quickly_in(tmp.path(), args, &["d", "a directory, not a regular file"]);
    }
}

/// The `ideal_share` column of `classes.csv` after `run --set` of both quanta to `quantum`.
fn ideal_shares_with_both_quanta(quantum: &str) -> Vec<f64> {
    let tmp = tempfile::tempdir().unwrap();
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/premium-vs-regular-weighted.yaml");
    let out = tmp.path().join("out");
    let output = routersim()
        .arg("run")
        .arg(&scenario)
        .args(["--quiet", "--out"])
        .arg(&out)
        .args([
            "--set",
            &format!("router.policy_classes.premium.quantum={quantum}"),
        ])
        .args([
            "--set",
            &format!("router.policy_classes.regular.quantum={quantum}"),
        ])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let csv = fs::read_to_string(out.join("classes.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = header.iter().position(|h| *h == "ideal_share").unwrap();
    lines
        .map(|l| l.split(',').nth(column).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn quanta_past_2_pow_63_give_finite_ideal_shares_adding_to_one() {
    for quantum in ["9223372036854775808", "18446744073709551615"] {
        assert_eq!(
            ideal_shares_with_both_quanta(quantum),
            [0.5, 0.5],
            "both quanta at {quantum}"
        );
    }
}
