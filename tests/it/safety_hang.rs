//! No hang, ever: pools too small for the load finish by preempting, requests that can never
//! be served are rejected with a reason (exit 0, not an internal error), and a run cut short
//! by a limit says so and fails `check`.

use assert_cmd::Command;
use std::fs;
use std::path::Path;

/// What one command left behind.
struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
    /// `(status, reason)` per row of requests.csv, in row order (empty if none was written).
    rows: Vec<(String, String)>,
    preemptions: u64,
}

fn routersim(args: &[&str], dir: &Path) -> Outcome {
    let output = Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(dir)
        .args(args)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let out = dir.join("out");
    let summary = fs::read_to_string(out.join("summary.json")).unwrap_or_default();
    let preemptions = serde_json::from_str::<serde_json::Value>(&summary)
        .ok()
        .and_then(|v| v["preemptions"].as_u64())
        .unwrap_or(0);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr,
        rows: rows(&out.join("requests.csv")),
        preemptions,
    }
}

fn rows(csv: &Path) -> Vec<(String, String)> {
    let Ok(text) = fs::read_to_string(csv) else {
        return Vec::new();
    };
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (status, reason) = (column("status"), column("reason"));
    lines
        .map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            (cells[status].to_string(), cells[reason].to_string())
        })
        .collect()
}

/// `routersim run` of a scenario with `workers:` and `workload.groups:` as given.
fn run(workers: &str, groups: &str, extra: &str) -> Outcome {
    let tmp = tempfile::tempdir().unwrap();
    let yaml =
        format!("name: hang\nseed: 0\nworkers: {workers}\nworkload:\n  groups:\n{groups}\n{extra}");
    fs::write(tmp.path().join("s.yaml"), yaml).unwrap();
    routersim(&["run", "s.yaml", "--out", "out"], tmp.path())
}

fn group(count: u64, input: &str, output: &str) -> String {
    format!("    - {{name: a, count: {count}, input_tokens: {input}, output_tokens: {output}}}")
}

fn count(o: &Outcome, status: &str, reason: &str) -> usize {
    o.rows
        .iter()
        .filter(|(s, r)| s == status && r == reason)
        .count()
}

/// Exit 0, every row ended (completed or rejected with a reason).
fn assert_every_request_ended(o: &Outcome, n: usize) {
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.rows.len(), n, "{}", o.stdout);
    for (status, reason) in &o.rows {
        let ended = status == "completed" || (status == "rejected" && !reason.is_empty());
        assert!(ended, "row ended as {status} / {reason:?}");
    }
    assert!(!o.stdout.contains("stopped early"), "{}", o.stdout);
}

#[test]
fn livelock_four_long_requests_on_sixteen_blocks_are_rejected_as_outgrowing_the_pool() {
    // 16 blocks of 64 hold the 1024-token prompt but not one token more.
    let o = run(
        "{count: 1, engine: {num_gpu_blocks: 16}}",
        &group(4, "1024", "1000"),
        "",
    );
    assert_every_request_ended(&o, 4);
    assert_eq!(count(&o, "rejected", "sequence_exceeds_kv_pool"), 4);
}

#[test]
fn livelock_four_requests_overcommitting_sixty_four_blocks_finish_with_preemptions() {
    // Each request peaks at 763 tokens (48 blocks of 16) alone; four need four times that.
    for mode in ["lifo", "fifo"] {
        let engine = format!(
            "{{count: 1, engine: {{num_gpu_blocks: 64, block_size: 16, \
             max_num_batched_tokens: 256, enable_prefix_caching: false, \
             preemption_mode: {mode}}}}}"
        );
        let o = run(&engine, &group(4, "64", "700"), "");
        assert_every_request_ended(&o, 4);
        assert_eq!(count(&o, "completed", ""), 4, "{mode}");
        assert!(o.preemptions > 0, "{mode}: no preemption");
    }
}

#[test]
fn livelock_four_requests_overcommitting_sixteen_blocks_of_sixty_four_finish() {
    let o = run(
        "{count: 1, engine: {num_gpu_blocks: 16}}",
        &group(4, "256", "700"),
        "",
    );
    assert_every_request_ended(&o, 4);
    assert_eq!(count(&o, "completed", ""), 4);
    assert!(o.preemptions > 0);
}

#[test]
fn normal_lengths_with_a_huge_std_dev_end_with_rejections_not_a_hang() {
    // Half the prompts clamp to 2^20 tokens: the whole default pool, and then one more.
    let input = "{dist: normal, mean: 1000, std_dev: 16777216}";
    let o = run("{count: 1}", &group(8, input, "100"), "");
    assert_every_request_ended(&o, 8);
    let outgrew = count(&o, "rejected", "sequence_exceeds_kv_pool");
    assert!(outgrew > 0 && outgrew < 8, "{:?}", o.rows);
    assert_eq!(count(&o, "completed", ""), 8 - outgrew);
}

#[test]
fn prompt_filling_the_whole_default_pool_is_rejected_with_a_reason() {
    let o = run("{count: 1}", &group(2, "1048576", "10"), "");
    assert_every_request_ended(&o, 2);
    assert_eq!(count(&o, "rejected", "sequence_exceeds_kv_pool"), 2);
}

#[test]
fn one_gpu_block_rejects_longer_prompts_and_serves_the_short_one() {
    let groups = format!(
        "{}\n    - {{name: b, count: 1, input_tokens: 10, output_tokens: 5}}",
        group(2, "100", "10")
    );
    let o = run("{count: 1, engine: {num_gpu_blocks: 1}}", &groups, "");
    assert_every_request_ended(&o, 3);
    assert_eq!(count(&o, "rejected", "prompt_exceeds_kv_pool"), 2);
    assert_eq!(count(&o, "completed", ""), 1);
}

#[test]
fn output_longer_than_the_pool_is_rejected_with_a_reason() {
    let o = run(
        "{count: 2, engine: {num_gpu_blocks: 100}}",
        &group(3, "100", "1000000"),
        "",
    );
    assert_every_request_ended(&o, 3);
    assert_eq!(count(&o, "rejected", "sequence_exceeds_kv_pool"), 3);
}

#[test]
fn unchunked_prompt_over_the_token_budget_is_rejected_with_a_reason() {
    let engine = "{count: 1, engine: {enable_chunked_prefill: false, max_num_batched_tokens: 256}}";
    let groups = format!(
        "{}\n    - {{name: b, count: 1, input_tokens: 200, output_tokens: 3}}",
        group(1, "600", "3")
    );
    let o = run(engine, &groups, "");
    assert_every_request_ended(&o, 2);
    assert_eq!(count(&o, "rejected", "prompt_exceeds_token_budget"), 1);
    assert_eq!(count(&o, "completed", ""), 1);
}

#[test]
fn trace_row_with_an_output_longer_than_the_pool_is_rejected_in_replay() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = [
        r#"{"timestamp": 0, "input_length": 512, "output_length": 100000, "hash_ids": [1]}"#,
        r#"{"timestamp": 1, "input_length": 512, "output_length": 4, "hash_ids": [2]}"#,
    ];
    fs::write(tmp.path().join("t.jsonl"), rows.join("\n")).unwrap();
    let engine = r#"{"engine": {"num_gpu_blocks": 64}}"#;
    let args = [
        "replay", "--trace", "t.jsonl", "--engine", engine, "--out", "out",
    ];
    let o = routersim(&args, tmp.path());
    assert_every_request_ended(&o, 2);
    assert_eq!(count(&o, "rejected", "sequence_exceeds_kv_pool"), 1);
    assert_eq!(count(&o, "completed", ""), 1);
}

// Two events: the first pass (every prefill) and the run of quiet decode passes after it.
const LIMITED: &str = "limits: {max_events: 2}\n";

#[test]
fn event_limit_stop_is_printed_with_the_unfinished_count() {
    let o = run("{count: 1}", &group(20, "512", "50"), LIMITED);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("stopped early: event limit reached"))
        .unwrap_or_else(|| panic!("no stop line in {}", o.stdout));
    let pending = o.rows.iter().filter(|(s, _)| s == "pending").count();
    assert!(pending > 0);
    assert!(
        line.ends_with(&format!("{pending} of 20 requests unfinished")),
        "{line}"
    );
}

#[test]
fn time_limit_stop_is_printed() {
    let o = run(
        "{count: 1}",
        &group(20, "512", "50"),
        "limits: {max_time_ms: 100}\n",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout
            .lines()
            .any(|l| l.starts_with("stopped early: simulated-time limit reached")),
        "{}",
        o.stdout
    );
}

#[test]
fn limit_stop_fails_check_with_its_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let yaml = format!(
        "name: hang\nseed: 0\nworkers: {{count: 1}}\nworkload:\n  groups:\n{}\n{LIMITED}",
        group(20, "512", "50")
    );
    fs::write(tmp.path().join("s.yaml"), yaml).unwrap();
    let o = routersim(&["check", "s.yaml"], tmp.path());
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    let fail = o
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("FAIL"))
        .unwrap_or_else(|| panic!("no FAIL line in {}", o.stdout));
    assert!(
        fail.contains("stopped early: event limit reached"),
        "{fail}"
    );
    // Without the limit the same scenario passes.
    let unlimited = format!(
        "name: hang\nseed: 0\nworkers: {{count: 1}}\nworkload:\n  groups:\n{}\n",
        group(20, "512", "50")
    );
    fs::write(tmp.path().join("s.yaml"), unlimited).unwrap();
    let o = routersim(&["check", "s.yaml"], tmp.path());
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
}
