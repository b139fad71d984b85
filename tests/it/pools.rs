//! Worker pools end to end: a two-pool run's result files show each pool's own
//! TTFT, `--set` resizes a pool, and a replay is one `default` pool.

use assert_cmd::Command;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// One fast and one slow worker under round robin; ten requests a second apart, so each runs
/// alone and its TTFT is its worker's prefill time.
const TWO_POOLS: &str = "name: two-pools
router: {router_mode: round_robin}
workers:
  pools:
    - {name: fast, count: 1, engine: {speedup_ratio: 10}}
    - {name: slow, count: 1, engine: {speedup_ratio: 1}}
workload:
  groups:
    - {name: all, count: 10, input_tokens: 512, output_tokens: 1,
       arrival: {interval: {every_ms: 1000}}}
";

fn run(dir: &Path, out: &str, sets: &[&str]) {
    let mut cmd = Command::cargo_bin("routersim").unwrap();
    cmd.current_dir(dir)
        .args(["run", "s.yaml", "--quiet", "--out", out]);
    for set in sets {
        cmd.args(["--set", set]);
    }
    cmd.assert().success();
}

type Row = BTreeMap<String, String>;

fn rows(path: &Path) -> Vec<Row> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    reader.deserialize().map(|r| r.unwrap()).collect()
}

fn ms(row: &Row, column: &str) -> f64 {
    row[column].parse().unwrap()
}

fn setup() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("s.yaml"), TWO_POOLS).unwrap();
    tmp
}

#[test]
fn a_two_pool_run_shows_each_pools_own_ttft_in_every_result_file() {
    let tmp = setup();
    run(tmp.path(), "o", &[]);
    let out = tmp.path().join("o");
    let requests = rows(&out.join("requests.csv"));
    let mut ttft: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (i, r) in requests.iter().enumerate() {
        let (pool, worker) = [("fast", "0"), ("slow", "1")][i % 2];
        assert_eq!((r["pool"].as_str(), r["worker"].as_str()), (pool, worker));
        let t = ms(r, "first_token_ms") - ms(r, "arrival_ms");
        ttft.entry(pool.into()).or_default().push(format!("{t:.6}"));
    }
    // Five requests each, every one with its pool's TTFT: 24.385704 ms unscaled, a tenth of it
    // at speedup 10.
    assert_eq!(ttft["fast"], vec!["2.438570"; 5]);
    assert_eq!(ttft["slow"], vec!["24.385704"; 5]);

    let classes = rows(&out.join("classes.csv"));
    let completed = |pool: &str| classes[0][&format!("completed_{pool}")].clone();
    assert_eq!(
        (completed("fast"), completed("slow")),
        ("5".into(), "5".into())
    );
    assert!(classes[0].contains_key("prefill_tokens_per_s_slow"));

    let summary: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let pools = summary["pools"].as_array().unwrap();
    let figure = |i: usize, key: &str| pools[i][key].clone();
    assert_eq!(
        (figure(0, "pool"), figure(1, "pool")),
        ("fast".into(), "slow".into())
    );
    assert_eq!(pools[1]["latency_ms"]["ttft"]["p99"], 24.385704);
    assert_eq!(pools[0]["latency_ms"]["ttft"]["p50"], 2.43857);
    // Each pool ran five prefill passes: busy 5 x TTFT, over a makespan of 9024.385704 ms.
    assert_eq!(figure(1, "busy_ms"), 121.92852);
    let utilisation = figure(1, "utilisation").as_f64().unwrap();
    assert!(
        (utilisation - 121.92852 / 9024.385704).abs() < 1e-6,
        "{utilisation}"
    );
    // Pool token rates add up to the run's.
    let rate = |i: usize| figure(i, "output_tokens_per_s").as_f64().unwrap();
    let total = summary["output_tokens_per_s"].as_f64().unwrap();
    assert!((rate(0) + rate(1) - total).abs() < 1e-5, "{total}");
    assert_eq!(summary["classes"][0]["pools"][1]["completed"], 5);
}

#[test]
fn set_resizes_a_pool_by_name_and_ids_follow_the_pools() {
    let tmp = setup();
    run(tmp.path(), "o", &["workers.pools.slow.count=3"]);
    let requests = rows(&tmp.path().join("o/requests.csv"));
    let placed: Vec<(&str, &str)> = requests
        .iter()
        .take(5)
        .map(|r| (r["worker"].as_str(), r["pool"].as_str()))
        .collect();
    assert_eq!(
        placed,
        vec![
            ("0", "fast"),
            ("1", "slow"),
            ("2", "slow"),
            ("3", "slow"),
            ("0", "fast")
        ]
    );
}

#[test]
fn a_bad_pool_exits_2_naming_file_line_and_field() {
    let tmp = setup();
    let text = TWO_POOLS.replace("{name: slow, count: 1,", "{name: slow, count: 0,");
    fs::write(tmp.path().join("s.yaml"), text).unwrap();
    let out = Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(tmp.path())
        .args(["run", "s.yaml", "--out", "o"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("s.yaml:6: workers.pools.slow.count: must be positive"),
        "{stderr}"
    );
    assert!(
        !tmp.path().join("o").exists(),
        "no output for a bad scenario"
    );
}

#[test]
fn a_replay_is_one_default_pool() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fidelity/premium-weighted");
    let out = tmp.path().join("r");
    Command::cargo_bin("routersim")
        .unwrap()
        .arg("replay")
        .arg("--trace")
        .arg(fixture.join("dynamo.trace.jsonl"))
        .arg("--engine")
        .arg(fixture.join("engine.json"))
        .args(["--workers", "3", "--quiet", "--out"])
        .arg(&out)
        .assert()
        .success();
    let requests = rows(&out.join("requests.csv"));
    assert!(requests.iter().all(|r| r["pool"] == "default"));
    let summary: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["pools"].as_array().unwrap().len(), 1);
    assert_eq!(summary["pools"][0]["workers"], 3);
    assert_eq!(summary["pools"][0]["requests"], requests.len());
}

/// Pools timed by fixed models of 10 and 100 ms prefill under
/// round robin; five requests see exactly 10 ms to first token and five exactly 100 ms.
#[test]
fn fixed_prefill_pools_give_each_pool_its_own_exact_ttft() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = "name: fixed-pools
router: {router_mode: round_robin}
workers:
  pools:
    - {name: quick, count: 1, engine: {timing_model: {type: fixed, prefill_ms: 10, decode_ms: 5}}}
    - {name: steady, count: 1, engine: {timing_model: {type: fixed, prefill_ms: 100, decode_ms: 5}}}
workload:
  groups:
    - {name: all, count: 10, input_tokens: 512, output_tokens: 1,
       arrival: {interval: {every_ms: 1000}}}
";
    fs::write(tmp.path().join("s.yaml"), scenario).unwrap();
    run(tmp.path(), "o", &[]);
    let requests = rows(&tmp.path().join("o/requests.csv"));
    let mut ttft_by_pool: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &requests {
        let ttft_ms = ms(r, "first_token_ms") - ms(r, "arrival_ms");
        let entry = ttft_by_pool.entry(r["pool"].clone()).or_default();
        entry.push(format!("{ttft_ms:.6}"));
    }
    assert_eq!(ttft_by_pool["quick"], vec!["10.000000"; 5]);
    assert_eq!(ttft_by_pool["steady"], vec!["100.000000"; 5]);
}
