//! `routersim plan` end to end: the answer agrees with `check` on both sides of the
//! boundary, `--for` makes a table, and the exit codes say answer / nothing feasible / bad input.

use std::fs;
use std::path::Path;

/// Two Poisson classes on `workers.count` workers (default 4) with TTFT p99 SLOs.
const SCENARIO: &str = "name: plan-probe
seed: 7
router:
  default_policy_family: standard
  uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
  policy_classes:
    - {name: gold, policy_family: gold, cache_bucket: all, queue_policy: fcfs, quantum: 2048,
       prefill_busy_threshold_frac: 0.5}
    - {name: standard, policy_family: standard, cache_bucket: all, queue_policy: fcfs,
       quantum: 512, prefill_busy_threshold_frac: 0.5}
workers:
  count: 4
  engine: {max_num_seqs: 16}
workload:
  groups:
    - {name: gold, class: gold, count: 150, input_tokens: 1500, output_tokens: 100,
       arrival: {poisson: {rate_per_s: 20}}}
    - {name: standard, class: standard, count: 450, input_tokens: 1500, output_tokens: 100,
       arrival: {poisson: {rate_per_s: 60}}}
expect:
  - {latency: {class: gold, metric: ttft_ms_p99}, at_most: 2500}
  - {latency: {class: standard, metric: ttft_ms_p99}, at_most: 10000}
  - {stable: true}
";

fn routersim(dir: &Path, args: &[&str]) -> (i32, String, String) {
    crate::support::run_in_dir(dir, args)
}

fn setup() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("s.yaml"), SCENARIO).unwrap();
    tmp
}

fn plan_json(dir: &Path, out: &str) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(dir.join(out).join("plan.json")).unwrap()).unwrap()
}

/// `check --seeds 2` with workers.count at `workers`: its exit code.
fn check_at(dir: &Path, workers: u64) -> i32 {
    let set = format!("workers.count={workers}");
    routersim(dir, &["check", "s.yaml", "--seeds", "2", "--set", &set]).0
}

#[test]
fn minimize_workers_agrees_with_check_on_both_sides() {
    let tmp = setup();
    let args = [
        "plan",
        "s.yaml",
        "--minimize",
        "workers.count",
        "--range",
        "1..64",
    ];
    let (code, stdout, stderr) = routersim(
        tmp.path(),
        &[&args[..], &["--seeds", "2", "--out", "p"]].concat(),
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let plan = plan_json(tmp.path(), "p");
    let answer = plan["answer"].as_f64().unwrap() as u64;
    assert!(answer > 1, "{plan}");
    assert_eq!(
        plan["bracket"]["infeasible"].as_f64(),
        Some((answer - 1) as f64)
    );
    assert_eq!(
        check_at(tmp.path(), answer),
        0,
        "check passes at the answer"
    );
    assert_eq!(check_at(tmp.path(), answer - 1), 1, "check fails one below");
    assert!(
        stdout.contains(&format!("workers.count = {answer}:")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("workers.count = {} fails", answer - 1)),
        "{stdout}"
    );
    let csv = fs::read_to_string(tmp.path().join("p/plan.csv")).unwrap();
    let probes = plan["probes"].as_array().unwrap().len();
    assert_eq!(
        csv.lines().count(),
        1 + 2 * probes,
        "one row per probe and seed"
    );
    assert!(
        tmp.path().join("p/capacity.png").exists() && tmp.path().join("p/capacity.svg").exists()
    );
    assert!(plan["binding"]["expectation"].is_string(), "{plan}");
}

#[test]
fn for_makes_a_capacity_table_of_the_highest_rate() {
    let tmp = setup();
    let (code, stdout, stderr) = routersim(
        tmp.path(),
        &[
            "plan",
            "s.yaml",
            "--maximize",
            "workload.groups.standard.arrival.poisson.rate_per_s",
            "--range",
            "1..400",
            "--precision",
            "0.05",
            "--for",
            "workers.count=2,8",
            "--out",
            "t",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let table = plan_json(tmp.path(), "t");
    let rows = table["table"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let rate = |i: usize| rows[i]["answer"].as_f64().unwrap();
    assert!(
        rate(1) > rate(0),
        "more workers carry more load: {} vs {}",
        rate(0),
        rate(1)
    );
    assert_eq!(rows[1]["for"]["value"], "8");
    assert!(
        stdout.contains("workers.count=2: ") && stdout.contains("workers.count=8: "),
        "{stdout}"
    );
}

#[test]
fn nothing_feasible_exits_1_and_bad_input_exits_2() {
    let tmp = setup();
    let (code, _, stderr) = routersim(
        tmp.path(),
        &[
            "plan",
            "s.yaml",
            "--minimize",
            "workers.count",
            "--range",
            "1..2",
            "--out",
            "n",
        ],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(plan_json(tmp.path(), "n")["answer"].is_null());
    for bad in [
        vec!["--minimize", "workers.count", "--range", "8..1"],
        vec!["--minimize", "workers.count", "--range", "lots"],
        vec!["--minimize", "workers.bogus", "--range", "1..4"],
        vec!["--range", "1..4"],
    ] {
        let (code, _, stderr) = routersim(
            tmp.path(),
            &[&["plan", "s.yaml"][..], &bad, &["--out", "b"]].concat(),
        );
        assert_eq!(code, 2, "{bad:?}: {stderr}");
    }
}

/// The bundled two-tenant scenario on 2 workers for 60 s, without its SLOs: only stability
/// decides.
fn two_tenants_without_slos(dir: &Path) {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/capacity-two-tenants.yaml");
    let text = fs::read_to_string(bundled).unwrap();
    let text = text.split("\nexpect:").next().unwrap();
    fs::write(dir.join("t.yaml"), text).unwrap();
}

/// Completions per second of the second half of the arrival window, from summary.json.
fn served_rps(dir: &Path, out: &str) -> f64 {
    let text = fs::read_to_string(dir.join(out).join("summary.json")).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
    summary["stability"]["served_rps"].as_f64().unwrap()
}

#[test]
fn without_slos_the_highest_rate_stays_within_what_the_workers_serve_flat_out() {
    let tmp = setup();
    two_tenants_without_slos(tmp.path());
    let fleet = [
        "--set",
        "workers.count=2",
        "--set",
        "workload.duration_s=60",
    ];
    let flood = [&fleet[..], &["--set", "workload.rate_per_s=400"]].concat();
    let run = [&["run", "t.yaml", "--quiet", "--out", "flat"][..], &flood].concat();
    let (code, _, stderr) = routersim(tmp.path(), &run);
    assert_eq!(code, 0, "{stderr}");
    let flat_out_rps = served_rps(tmp.path(), "flat");
    let search = [
        "plan",
        "t.yaml",
        "--maximize",
        "workload.rate_per_s",
        "--range",
        "1..400",
    ];
    let plan = [&search[..], &fleet, &["--precision", "0.05", "--out", "p"]].concat();
    let (code, stdout, stderr) = routersim(tmp.path(), &plan);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let answer = plan_json(tmp.path(), "p")["answer"].as_f64().unwrap();
    assert!(
        answer <= flat_out_rps * 1.05,
        "{answer} req/s vs flat out {flat_out_rps}"
    );
    let allowed = [&plan[..plan.len() - 1], &["q", "--allow-overload"]].concat();
    let (code, _, stderr) = routersim(tmp.path(), &allowed);
    assert_eq!(code, 0, "{stderr}");
    let reach = plan_json(tmp.path(), "q")["answer"].as_f64().unwrap();
    assert!(
        reach > answer,
        "overload allowed reaches further: {reach} vs {answer}"
    );
}

/// `s.yaml` with its four workers split into pools: `big` (the searched one) and one `slow`
/// worker at half speed that stays.
fn setup_pools() -> tempfile::TempDir {
    let tmp = setup();
    let text = SCENARIO.replace(
        "  count: 4\n  engine: {max_num_seqs: 16}\n",
        "  pools:\n    - {name: big, count: 4, engine: {max_num_seqs: 16}}\n    - {name: slow, count: 1, engine: {max_num_seqs: 16, speedup_ratio: 0.5}}\n",
    );
    assert_ne!(text, SCENARIO);
    fs::write(tmp.path().join("s.yaml"), text).unwrap();
    tmp
}

#[test]
fn minimize_a_pool_count_agrees_with_check_on_both_sides() {
    let tmp = setup_pools();
    let parameter = "workers.pools.big.count";
    let args = [
        "plan",
        "s.yaml",
        "--minimize",
        parameter,
        "--range",
        "1..32",
    ];
    let (code, stdout, stderr) = routersim(
        tmp.path(),
        &[&args[..], &["--seeds", "2", "--out", "p"]].concat(),
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let plan = plan_json(tmp.path(), "p");
    assert_eq!(plan["parameter"], parameter);
    assert_eq!(plan["integer"], true, "a pool count is whole");
    let answer = plan["answer"].as_f64().unwrap() as u64;
    assert!(answer > 1, "{plan}");
    let check = |big: u64| {
        let set = format!("{parameter}={big}");
        routersim(
            tmp.path(),
            &["check", "s.yaml", "--seeds", "2", "--set", &set],
        )
        .0
    };
    assert_eq!(check(answer), 0, "check passes at the answer");
    assert_eq!(check(answer - 1), 1, "check fails one below");
}
