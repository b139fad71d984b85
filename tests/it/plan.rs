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

/// `plan s.yaml --minimize workers.count --range 1..64 EXTRA --out p`, which must answer:
/// its plan.json and stdout.
fn fewest_workers(dir: &Path, extra: &[&str]) -> (serde_json::Value, String) {
    let search = [
        "plan",
        "s.yaml",
        "--minimize",
        "workers.count",
        "--range",
        "1..64",
    ];
    let args = [&search[..], extra, &["--out", "p"]].concat();
    let (code, stdout, stderr) = routersim(dir, &args);
    assert_eq!(code, 0, "{stdout}{stderr}");
    (plan_json(dir, "p"), stdout)
}

#[test]
fn minimize_workers_agrees_with_check_on_both_sides() {
    let tmp = setup();
    let (plan, stdout) = fewest_workers(tmp.path(), &["--seeds", "2"]);
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
        stdout.lines().next() == Some(format!("workers.count = {answer}").as_str()),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("\n  at {} these fail:\n", answer - 1)),
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

/// The bundled two-tenant scenario (with its SLOs), as a path from the test's directory.
fn bundled_two_tenants() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/capacity-two-tenants.yaml")
        .display()
        .to_string()
}

/// `check` of the bundled two-tenant scenario with `sets` (`PATH=VALUE` each): its exit code.
fn check_bundled(dir: &Path, sets: &[String]) -> i32 {
    let scenario = bundled_two_tenants();
    let mut args = vec!["check".to_string(), scenario];
    for set in sets {
        args.extend(["--set".to_string(), set.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    routersim(dir, &args).0
}

#[test]
fn maximize_answers_a_feasible_far_end_when_the_low_end_fails() {
    let tmp = setup();
    let scenario = bundled_two_tenants();
    let args = [
        "plan",
        &scenario,
        "--maximize",
        "workers.count",
        "--range",
        "1..16",
        "--out",
        "p",
    ];
    let (code, stdout, stderr) = routersim(tmp.path(), &args);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let plan = plan_json(tmp.path(), "p");
    assert_eq!(plan["answer"], 16, "{plan}");
    let verdict = |v: u64| {
        plan["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["value"] == v)
            .map(|p| p["feasible"].as_bool().unwrap())
    };
    assert_eq!((verdict(1), verdict(16)), (Some(false), Some(true)));
    assert_eq!(check_bundled(tmp.path(), &["workers.count=16".into()]), 0);
    assert_eq!(check_bundled(tmp.path(), &["workers.count=1".into()]), 1);
    assert_eq!(
        plan["non_monotone"],
        serde_json::json!([{"feasible": 16, "infeasible": 1}])
    );
    assert!(
        stdout.contains("warning: not monotone: 16 passes but 1 fails"),
        "{stdout}"
    );
}

#[test]
fn maximize_finds_the_highest_rate_when_the_lowest_is_too_short_to_judge() {
    let tmp = setup();
    let scenario = bundled_two_tenants();
    let short = "workload.duration_s=30".to_string();
    let search = |range: &str, out: &str| {
        let args = [
            "plan",
            &scenario,
            "--set",
            &short,
            "--maximize",
            "workload.rate_per_s",
            "--range",
            range,
            "--out",
            out,
        ];
        let (code, stdout, stderr) = routersim(tmp.path(), &args);
        assert_eq!(code, 0, "{range}: {stdout}{stderr}");
        (plan_json(tmp.path(), out), stdout)
    };
    let (plan, stdout) = search("1..400", "wide");
    let answer = plan["answer"].as_f64().unwrap();
    let above = plan["bracket"]["infeasible"].as_f64().unwrap();
    let rate = |r: f64| format!("workload.rate_per_s={r}");
    assert_eq!(check_bundled(tmp.path(), &[short.clone(), rate(answer)]), 0);
    assert_eq!(check_bundled(tmp.path(), &[short.clone(), rate(above)]), 1);
    // Rate 1 is too short to judge: the plan says it fails, as check does, and warns.
    assert_eq!(check_bundled(tmp.path(), &[short.clone(), rate(1.0)]), 1);
    assert_eq!(plan["probes"][0]["value"], 1.0);
    assert_eq!(plan["probes"][0]["feasible"], false);
    assert!(
        plan["non_monotone"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["infeasible"] == 1.0),
        "{plan}"
    );
    assert!(stdout.contains("pass but 1 fails"), "{stdout}");
    // The same search from a judged low end agrees to the precision.
    let (narrow, _) = search("10..400", "narrow");
    let narrow = narrow["answer"].as_f64().unwrap();
    assert!(
        (answer - narrow).abs() <= 0.02 * answer,
        "{answer} vs {narrow}"
    );
}

#[test]
fn an_integer_answer_is_written_as_an_integer_that_check_takes_back() {
    let tmp = setup();
    let (plan, _) = fewest_workers(tmp.path(), &[]);
    let is_integer = |v: &serde_json::Value| v.is_u64();
    assert!(is_integer(&plan["answer"]), "{}", plan["answer"]);
    assert!(is_integer(&plan["bracket"]["feasible"]));
    assert!(is_integer(&plan["bracket"]["infeasible"]));
    assert!(plan["range"].as_array().unwrap().iter().all(is_integer));
    assert!(
        plan["probes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| is_integer(&p["value"]))
    );
    // As a script feeds it back: the answer's JSON text, unchanged.
    let set = format!("workers.count={}", plan["answer"]);
    let (code, _, stderr) = routersim(tmp.path(), &["check", "s.yaml", "--set", &set]);
    assert_eq!(code, 0, "{set}: {stderr}");
}

/// `plan s.yaml ARGS --out o`: exit code 2 with a message containing every `needles`, and
/// nothing written.
fn refused(dir: &Path, args: &[&str], needles: &[&str]) {
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = routersim(
        dir,
        &[&["plan", "s.yaml"][..], args, &["--out", "o"]].concat(),
    );
    assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{args:?}: {needle:?} in {stderr}");
    }
    assert!(!dir.join("o").exists(), "{args:?}: nothing written");
    let elapsed_s = started.elapsed().as_secs_f64();
    assert!(elapsed_s < 10.0, "{args:?}: refused after {elapsed_s:.1} s");
}

#[test]
fn plan_seeds_past_the_sweep_bound_are_refused_before_any_run() {
    let tmp = setup();
    let search = ["--minimize", "workers.count", "--range", "1..16"];
    refused(
        tmp.path(),
        &[&search[..], &["--seeds", "4294967295"]].concat(),
        &["--seeds 4294967295", "100000"],
    );
    refused(
        tmp.path(),
        &[&search[..], &["--seeds", "1000", "--for", "seed=1,2"]].concat(),
        &["--seeds 1000", "2 searches (--for)", "100000"],
    );
}

#[test]
fn a_precision_finer_than_a_double_resolves_is_refused() {
    let tmp = setup();
    let search = [
        "--maximize",
        "workload.groups.standard.arrival.poisson.rate_per_s",
        "--range",
        "10..400",
        "--precision",
    ];
    for precision in ["1e-16", "1e-300"] {
        refused(
            tmp.path(),
            &[&search[..], &[precision]].concat(),
            &[
                &format!("--precision {precision}"),
                "10..400",
                "4.440892098500626e-16",
            ],
        );
    }
}

#[test]
fn a_real_range_whose_far_end_exceeds_a_bound_is_refused_at_once() {
    let tmp = setup();
    two_tenants_without_slos(tmp.path());
    let (code, _, stderr) = routersim(
        tmp.path(),
        &[
            "plan",
            "t.yaml",
            "--maximize",
            "workload.rate_per_s",
            "--range",
            "1..1e18",
            "--out",
            "o",
        ],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--range 1..1e18: its far end 1e18 is refused")
            && stderr.contains("at most 1000000"),
        "{stderr}"
    );
    assert!(!tmp.path().join("o").exists());
}

#[test]
fn a_search_that_means_nothing_is_refused() {
    let tmp = setup();
    refused(
        tmp.path(),
        &["--maximize", "name", "--range", "1..16"],
        &["--maximize name: not a number"],
    );
    let rate = "workload.groups.standard.arrival.poisson.rate_per_s";
    let for_rate = format!("{rate}=1,2");
    refused(
        tmp.path(),
        &["--maximize", rate, "--range", "1..400", "--for", &for_rate],
        &["--for", &format!("sets {rate}, the path the plan searches")],
    );
    refused(
        tmp.path(),
        &[
            "--minimize",
            "workers.count",
            "--range",
            "1..16",
            "--set",
            "workers.count=3",
        ],
        &["--set workers.count=3: sets workers.count"],
    );
    refused(
        tmp.path(),
        &["--minimize", "workers.count", "--range", "1..1e18"],
        &["2^52"],
    );
}

/// The bundled disaggregated scenario, run from the repository (its results are not written).
fn bundled_disaggregated(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/disaggregated-two-tenants.yaml");
    let mut all = vec![args[0], scenario.to_str().unwrap()];
    all.extend_from_slice(&args[1..]);
    routersim(dir, &all)
}

#[test]
fn the_fewest_workers_in_all_is_a_pair_check_passes_at_and_fails_one_fewer() {
    let tmp = tempfile::tempdir().unwrap();
    let sum = "workers.prefill.count+workers.decode.count";
    let (code, stdout, stderr) = bundled_disaggregated(
        tmp.path(),
        &[
            "plan",
            "--minimize",
            sum,
            "--range",
            "2..64",
            "--out",
            "plan",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("= 5 (workers.prefill.count = 2, workers.decode.count = 3)"),
        "{stdout}"
    );
    let plan = plan_json(tmp.path(), "plan");
    let pair =
        serde_json::json!({"workers.prefill.count": 2, "workers.decode.count": 3, "total": 5});
    assert_eq!(plan["answer"], pair);
    let frontier = serde_json::json!([
        {"workers.prefill.count": 1, "workers.decode.count": null},
        {"workers.prefill.count": 2, "workers.decode.count": 3},
        {"workers.prefill.count": 3, "workers.decode.count": 3},
    ]);
    assert_eq!(plan["frontier"], frontier);
    assert_eq!(plan["non_monotone"], serde_json::json!([]));
    assert!(tmp.path().join("plan/capacity.svg").exists());
    // check agrees: it passes at the pair and fails with one decode or one prefill worker fewer.
    let check = |prefill: &str, decode: &str| {
        let prefill = format!("workers.prefill.count={prefill}");
        let decode = format!("workers.decode.count={decode}");
        bundled_disaggregated(tmp.path(), &["check", "--set", &prefill, "--set", &decode]).0
    };
    assert_eq!(
        (check("2", "3"), check("2", "2"), check("1", "3")),
        (0, 1, 1)
    );
}

#[test]
fn a_joint_search_refuses_what_it_cannot_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let sum = "workers.prefill.count+workers.decode.count";
    for (args, needle) in [
        (
            vec!["plan", "--maximize", sum, "--range", "2..8"],
            "can only be minimized",
        ),
        (
            vec!["plan", "--minimize", sum, "--range", "1..1.5"],
            "whole numbers",
        ),
        (
            vec![
                "plan",
                "--minimize",
                sum,
                "--range",
                "2..8",
                "--for",
                "workload.rate_per_s=10,20",
            ],
            "already makes a table",
        ),
    ] {
        let (code, _, stderr) = bundled_disaggregated(tmp.path(), &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn a_joint_search_refuses_a_sum_of_a_rate_and_a_count() {
    let tmp = tempfile::tempdir().unwrap();
    let sum = "workload.rate_per_s+workers.decode.count";
    let args = [
        "plan",
        "--minimize",
        sum,
        "--range",
        "2..8",
        "--out",
        "plan",
    ];
    let (code, stdout, stderr) = bundled_disaggregated(tmp.path(), &args);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("a joint search sums two worker counts")
            && stderr.contains("`workload.rate_per_s` is not one"),
        "{stderr}"
    );
    assert!(!tmp.path().join("plan").exists());
}

/// A small disaggregated scenario whose one expectation no run meets (none migrates).
const NEVER_FEASIBLE: &str = "name: d
workers:
  prefill: {count: 1}
  decode: {count: 1}
workload:
  groups:
    - {name: a, count: 4, input_tokens: 64, output_tokens: 2}
expect:
  - {migrations: {}, at_least: 1}
";

#[test]
fn a_joint_search_with_nothing_feasible_ends_with_no_answer() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("d.yaml"), NEVER_FEASIBLE).unwrap();
    let sum = "workers.prefill.count+workers.decode.count";
    let args = ["plan", "d.yaml", "--minimize", sum, "--range", "2..6"];
    let (code, stdout, stderr) = routersim(tmp.path(), &[&args[..], &["--out", "p"]].concat());
    // The last value of A leaves one value of B: it is probed, not refused as a range.
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("nothing in the range is feasible"),
        "{stderr}"
    );
    let plan = plan_json(tmp.path(), "p");
    assert_eq!(plan["frontier"].as_array().unwrap().len(), 5, "{plan}");
}

#[test]
fn a_joint_search_past_the_plan_run_bound_is_refused_before_any_probe() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("d.yaml"), NEVER_FEASIBLE).unwrap();
    let sum = "workers.prefill.count+workers.decode.count";
    let refused = |range: &str, seeds: &str, expected: &[&str]| {
        let args = ["plan", "d.yaml", "--minimize", sum, "--range", range];
        let (code, _, stderr) = routersim(
            tmp.path(),
            &[&args[..], &["--seeds", seeds, "--out", "p"]].concat(),
        );
        assert_eq!(code, 2, "{stderr}");
        for e in expected {
            assert!(stderr.contains(e), "{stderr:?} should contain {e:?}");
        }
        assert!(!tmp.path().join("p").exists(), "nothing may be written");
    };
    refused(
        "2..64",
        "1041",
        &[
            "--range 2..64",
            "up to 600 probes",
            "x 1041 seeds = 624600 runs",
        ],
    );
    refused(
        "2..8193",
        "1",
        &[
            "--range 2..8193: its top sets",
            "workers.decode.count = 8192",
        ],
    );
}

#[test]
fn a_total_answers_the_split_of_a_fixed_fleet_that_carries_the_most_and_check_agrees() {
    let tmp = tempfile::tempdir().unwrap();
    let short = "workload.duration_s=30";
    let (code, stdout, stderr) = bundled_disaggregated(
        tmp.path(),
        &[
            "plan",
            "--total",
            "workers.prefill.count+workers.decode.count=4",
            "--maximize",
            "workload.rate_per_s",
            "--range",
            "5..100",
            "--precision",
            "0.05",
            "--set",
            short,
            "--out",
            "split",
        ],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    let plan = plan_json(tmp.path(), "split");
    let splits = plan["splits"].as_array().unwrap();
    let pairs: Vec<(u64, u64)> = splits
        .iter()
        .map(|s| {
            let count = |k: &str| s[k].as_u64().unwrap();
            (
                count("workers.prefill.count"),
                count("workers.decode.count"),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [(1, 3), (2, 2), (3, 1)],
        "every split of 4, one of each at least"
    );
    let rate = |v: &serde_json::Value| v["workload.rate_per_s"].as_f64().unwrap();
    let best = splits.iter().map(rate).fold(f64::NEG_INFINITY, f64::max);
    let answer = &plan["answer"];
    assert_eq!(rate(answer), best, "{plan}");
    let (prefill, decode) = (
        answer["workers.prefill.count"].clone(),
        answer["workers.decode.count"].clone(),
    );
    assert!(
        stdout.contains(&format!(
            "best split of 4: workers.prefill.count = {prefill}, workers.decode.count = {decode}: workload.rate_per_s = {best}"
        )),
        "{stdout}"
    );
    // check agrees at the best split: it passes at the rate and fails just above it.
    let row = plan["table"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["answer"].as_f64() == Some(best))
        .unwrap();
    let above = row["bracket"]["infeasible"].as_f64().unwrap();
    let check = |rate: f64| {
        let sets = [
            format!("workers.prefill.count={prefill}"),
            format!("workers.decode.count={decode}"),
            format!("workload.rate_per_s={rate}"),
            short.to_string(),
        ];
        let mut args = vec!["check"];
        for set in &sets {
            args.extend(["--set", set]);
        }
        bundled_disaggregated(tmp.path(), &args).0
    };
    assert_eq!((check(best), check(above)), (0, 1));
}

#[test]
fn a_total_refuses_what_it_cannot_split() {
    let tmp = tempfile::tempdir().unwrap();
    let total = "workers.prefill.count+workers.decode.count=4";
    for (extra, needle) in [
        (
            vec!["--total", "workers.prefill.count+workers.decode.count=1"],
            "--total workers.prefill.count+workers.decode.count=1: T must be a whole number",
        ),
        (
            vec!["--total", "workload.rate_per_s+workers.decode.count=4"],
            "two worker counts",
        ),
        (
            vec!["--total", total, "--set", "workers.decode.count=2"],
            "--set workers.decode.count=2: sets workers.decode.count, which --total",
        ),
        (
            vec![
                "--total",
                total,
                "--for",
                "workers.engine.max_num_seqs=8,16",
            ],
            "give neither --for",
        ),
    ] {
        let args = [
            &[
                "plan",
                "--maximize",
                "workload.rate_per_s",
                "--range",
                "5..100",
            ][..],
            &extra,
            &["--out", "o"],
        ]
        .concat();
        let (code, _, stderr) = bundled_disaggregated(tmp.path(), &args);
        assert_eq!(code, 2, "{extra:?}: {stderr}");
        assert!(stderr.contains(needle), "{extra:?}: {stderr}");
        assert!(!tmp.path().join("o").exists(), "{extra:?}: nothing written");
    }
}

/// The bundled diurnal scenario, with the native planner in the loop.
fn diurnal() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/diurnal-autoscaling.yaml")
        .display()
        .to_string()
}

#[test]
fn minimize_gpu_hours_answers_the_cheapest_feasible_budget_as_a_run_there_measures_it() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = diurnal();
    let args = [
        "plan",
        &scenario,
        "--minimize",
        "gpu_hours",
        "--range",
        "planner.max_gpu_budget=5..9",
        "--out",
        "p",
    ];
    let (code, stdout, stderr) = routersim(tmp.path(), &args);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let plan: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(tmp.path().join("p/plan.json")).unwrap()).unwrap();
    let probes = plan["probes"].as_array().unwrap();
    let values: Vec<i64> = probes
        .iter()
        .map(|p| p["value"].as_i64().unwrap())
        .collect();
    assert_eq!(values, [5, 6, 7, 8, 9], "every value probed");
    // The answer is the feasible probe of least cost ...
    let cost = |p: &serde_json::Value| p["gpu_hours"].as_f64().unwrap();
    let feasible: Vec<&serde_json::Value> =
        probes.iter().filter(|p| p["feasible"] == true).collect();
    let cheapest = feasible
        .iter()
        .min_by(|a, b| cost(a).total_cmp(&cost(b)))
        .unwrap();
    assert_eq!(plan["answer"], cheapest["value"]);
    assert!(
        probes.iter().any(|p| p["feasible"] == false),
        "some budget fails: {plan}"
    );
    assert!(
        probes
            .iter()
            .any(|p| cost(p) < cost(cheapest) && p["feasible"] == false),
        "a cheaper budget fails its SLOs"
    );
    // ... and a run at the answer costs what the plan says and passes.
    let set = format!("planner.max_gpu_budget={}", plan["answer"]);
    let (code, _, stderr) = routersim(
        tmp.path(),
        &["run", &scenario, "--set", &set, "--out", "r", "--quiet"],
    );
    assert_eq!(code, 0, "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(tmp.path().join("r/summary.json")).unwrap())
            .unwrap();
    // summary.json writes six decimals.
    let measured = summary["fleet"]["gpu_hours"].as_f64().unwrap();
    let planned = plan["gpu_hours"].as_f64().unwrap();
    assert!((measured - planned).abs() < 1e-6, "{measured} {planned}");
    assert!(
        stdout.contains(&format!(
            "gpu_hours is least at planner.max_gpu_budget = {}",
            plan["answer"]
        )),
        "{stdout}"
    );
    for file in ["plan.csv", "cost.png", "cost.svg", "report.html"] {
        assert!(tmp.path().join("p").join(file).exists(), "{file}");
    }
}

#[test]
fn minimize_gpu_hours_refuses_a_bare_range_a_table_and_a_value_the_field_does_not_take() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = diurnal();
    let cases: [(&[&str], &str); 4] = [
        (&["--range", "4..12"], "PATH=LO..HI"),
        (
            &[
                "--range",
                "planner.max_gpu_budget=4..5",
                "--for",
                "workers.count=1,2",
            ],
            "neither --for nor --total",
        ),
        (
            &["--range", "planner.max_gpu_budget=4,4.5"],
            "takes whole numbers",
        ),
        (
            &["--range", "planner.no_such_key=1..2"],
            "planner.no_such_key",
        ),
    ];
    for (extra, words) in cases {
        let mut args = vec!["plan", &scenario, "--minimize", "gpu_hours", "--out", "p"];
        args.extend(extra);
        let (code, stdout, stderr) = routersim(tmp.path(), &args);
        assert_eq!(code, 2, "{extra:?}: {stdout}{stderr}");
        assert!(stderr.contains(words), "{extra:?}: {stderr}");
        assert!(
            !tmp.path().join("p/plan.json").exists(),
            "{extra:?} wrote a plan"
        );
    }
}
