//! Faults end to end: a worker lost and back, migration, client cancellation,
//! and the errors a bad `faults:` entry gives.

use assert_cmd::Command;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Two workers under Poisson load; requests long enough that some run at 2,000 ms.
const DOWN: &str = "name: down
seed: 3
workers: {count: 2, engine: {max_num_seqs: 8}}
workload:
  rate_per_s: 8
  duration_s: 10
  arrival: poisson
  groups:
    - {name: all, share: 1, input_tokens: 1024, output_tokens: 300}
";

const WINDOW: &str = "faults:
  - {worker_down: {worker: 0, at_ms: 2000, until_ms: 6000}}
";

/// One busy worker, two classes; half the regular requests give up 300 ms after arrival.
const CANCEL: &str = "name: cancel
seed: 5
router:
  default_policy_family: regular
  uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
  policy_classes:
    - {name: premium, policy_family: premium, cache_bucket: all, quantum: 2048,
       prefill_busy_threshold_frac: 0.5}
    - {name: regular, policy_family: regular, cache_bucket: all, quantum: 512,
       prefill_busy_threshold_frac: 0.5}
workers: {count: 1, engine: {max_num_seqs: 4}}
workload:
  rate_per_s: 20
  duration_s: 5
  arrival: poisson
  groups:
    - {name: premium, class: premium, share: 0.3, input_tokens: 1024, output_tokens: 100}
    - {name: regular, class: regular, share: 0.7, input_tokens: 1024, output_tokens: 100}
faults:
  - {cancel: {group: regular, fraction: 0.5, after_ms: 300}}
";

type Row = BTreeMap<String, String>;

/// Runs `text` as a scenario and returns its requests.csv rows.
fn run(dir: &Path, name: &str, text: &str) -> Vec<Row> {
    fs::write(dir.join(format!("{name}.yaml")), text).unwrap();
    Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(dir)
        .args(["run", &format!("{name}.yaml"), "--quiet", "--out", name])
        .assert()
        .success();
    let mut reader = csv::Reader::from_path(dir.join(name).join("requests.csv")).unwrap();
    reader.deserialize().map(|r| r.unwrap()).collect()
}

fn ms(row: &Row, column: &str) -> f64 {
    row[column].parse().unwrap()
}

fn rows_where(rows: &[Row], keep: impl Fn(&Row) -> bool) -> BTreeSet<String> {
    rows.iter()
        .filter(|r| keep(r))
        .map(|r| r["row"].clone())
        .collect()
}

#[test]
fn a_worker_down_aborts_what_it_ran_and_serves_again_after() {
    let tmp = tempfile::tempdir().unwrap();
    let base = run(tmp.path(), "base", DOWN);
    let down = run(tmp.path(), "down", &format!("{DOWN}{WINDOW}"));
    // Up to 2,000 ms the runs agree: worker 0 then held what it was dispatched and had not
    // finished by 2,000 ms (a pass ending at 2,000 ms is lost with it).
    let running_at_2s = rows_where(&base, |r| {
        r["worker"] == "0" && ms(r, "dispatch_ms") <= 2000.0 && ms(r, "completion_ms") >= 2000.0
    });
    assert!(
        !running_at_2s.is_empty(),
        "the load keeps worker 0 busy at 2 s"
    );
    let aborted = rows_where(&down, |r| r["status"] == "aborted");
    assert_eq!(aborted, running_at_2s);
    for r in down.iter().filter(|r| r["status"] == "aborted") {
        assert_eq!(r["reason"], "worker_down");
        assert_eq!(
            ms(r, "completion_ms"),
            2000.0,
            "ended when the worker stopped"
        );
    }
    let admitted_inside = rows_where(&down, |r| {
        r["worker"] == "0"
            && !r["admit_ms"].is_empty()
            && (2000.0..6000.0).contains(&ms(r, "admit_ms"))
    });
    assert!(
        admitted_inside.is_empty(),
        "admitted on worker 0 while down: {admitted_inside:?}"
    );
    let after = rows_where(&down, |r| {
        r["worker"] == "0" && r["status"] == "completed" && ms(r, "admit_ms") >= 6000.0
    });
    assert!(!after.is_empty(), "worker 0 serves again after 6 s");
    let others = rows_where(&down, |r| r["status"] != "completed");
    assert_eq!(others, aborted, "everything else completes");
}

#[test]
fn with_a_migration_limit_every_request_of_the_window_completes() {
    let tmp = tempfile::tempdir().unwrap();
    let text =
        format!("{DOWN}{WINDOW}").replace("workers: {", "router: {migration_limit: 3}\nworkers: {");
    let aborted_without = rows_where(&run(tmp.path(), "down", &format!("{DOWN}{WINDOW}")), |r| {
        r["status"] == "aborted"
    });
    let rows = run(tmp.path(), "migrate", &text);
    assert!(
        rows.iter().all(|r| r["status"] == "completed"),
        "all complete"
    );
    let moved = rows_where(&rows, |r| r["migrations"] != "0");
    assert_eq!(moved, aborted_without, "exactly the lost requests moved");
    for r in rows.iter().filter(|r| moved.contains(&r["row"])) {
        assert_eq!(r["migrations"], "1");
        assert_eq!(r["worker"], "1", "moved to the worker still up");
    }
}

#[test]
fn cancelled_requests_end_exactly_after_ms_after_arrival() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = run(tmp.path(), "cancel", CANCEL);
    let cancelled: Vec<&Row> = rows.iter().filter(|r| r["status"] == "cancelled").collect();
    assert!(cancelled.len() > 5, "{} cancelled", cancelled.len());
    for r in &cancelled {
        assert_eq!(r["policy_class"], "regular");
        assert_eq!(r["reason"], "client_cancel");
        let waited = ms(r, "completion_ms") - ms(r, "arrival_ms");
        assert!(
            (waited - 300.0).abs() < 1e-6,
            "row {} ended after {waited} ms",
            r["row"]
        );
    }
    for r in rows.iter().filter(|r| r["policy_class"] == "premium") {
        assert_eq!(r["status"], "completed", "premium row {}", r["row"]);
    }
    assert!(
        rows.iter()
            .all(|r| r["status"] == "completed" || r["status"] == "cancelled")
    );
    // The run's own end check found nothing booked or queued (it exits 3 otherwise); the
    // summary counts each status.
    let summary: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(tmp.path().join("cancel/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["cancelled"].as_u64(), Some(cancelled.len() as u64));
}

#[test]
fn a_bad_fault_exits_2_naming_file_line_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            CANCEL.replace("fraction: 0.5", "fraction: 1.5"),
            "cancel.yaml:20: faults.0.cancel.fraction: must be in [0, 1]",
        ),
        (
            CANCEL.replace("group: regular,", "group: nobody,"),
            "faults.0.cancel.group: unknown group `nobody`",
        ),
        (
            format!("{DOWN}{WINDOW}").replace("worker: 0,", "worker: 2,"),
            "faults.0.worker_down.worker: unknown worker 2",
        ),
        (
            format!("{DOWN}{WINDOW}").replace("until_ms: 6000", "until_ms: 2000"),
            "faults.0.worker_down.until_ms: must be after at_ms",
        ),
        (
            format!("{DOWN}{WINDOW}  - {{worker_down: {{worker: 0, at_ms: 5000}}}}\n"),
            "faults.1.worker_down.at_ms: worker 0 is already down then",
        ),
        (
            format!("{DOWN}faults:\n  - {{worker_up: {{pool: h100, at_ms: 1}}}}\n"),
            "faults.0.worker_up.pool: unknown pool `h100`",
        ),
        (
            format!("{DOWN}faults:\n  - {{worker_drain: {{worker: 2, at_ms: 1}}}}\n"),
            "faults.0.worker_drain.worker: unknown worker 2",
        ),
        (
            format!("{DOWN}{WINDOW}  - {{worker_drain: {{worker: 0, at_ms: 7000}}}}\n"),
            "faults.1.worker_drain.worker: this worker goes down in faults[0]",
        ),
        (
            format!(
                "{DOWN}faults:\n  - {{worker_drain: {{worker: 1, at_ms: 1}}}}\n  - {{worker_drain: {{worker: 1, at_ms: 9}}}}\n"
            ),
            "faults.1.worker_drain.worker: this worker already drains in faults[0]",
        ),
        (
            format!("{DOWN}faults:\n  - {{worker_drain: {{worker: 1}}}}\n"),
            "faults.0.worker_drain.at_ms: missing field `at_ms`",
        ),
        (
            DOWN.replace("{count: 2,", "{count: 2, startup_time: -1,"),
            "workers.startup_time: must be a finite number of seconds, 0 or more",
        ),
    ];
    for (text, expected) in cases {
        fs::write(tmp.path().join("cancel.yaml"), &text).unwrap();
        let out = Command::cargo_bin("routersim")
            .unwrap()
            .current_dir(tmp.path())
            .args(["run", "cancel.yaml", "--out", "o"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(expected),
            "expected {expected:?} in {stderr}"
        );
        assert!(!tmp.path().join("o").exists());
    }
}

/// Fault times past the run's time limit could never act: `run` and `check` refuse them at
/// once (exit 2, naming file, line, field and the limit), before any work or output.
#[test]
fn fault_times_past_the_time_limit_exit_2_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let down = format!("{DOWN}{WINDOW}");
    let cases: [(String, &[&str], &str); 6] = [
        (
            CANCEL.replace("after_ms: 300", "after_ms: 3000000000"),
            &[],
            "cancel.yaml:20: faults.0.cancel.after_ms: 3000000000 ms is past the run's time limit, 2592000000 ms (the default limits.max_time_ms, 30 days)",
        ),
        (
            down.replace("at_ms: 2000", "at_ms: 2600000000"),
            &[],
            "faults.0.worker_down.at_ms: 2600000000 ms is past the run's time limit, 2592000000 ms",
        ),
        (
            down.clone(),
            &["--set", "limits.max_time_ms=5000"],
            "cancel.yaml:11: faults.0.worker_down.until_ms: 6000 ms is past the run's time limit, 5000 ms (limits.max_time_ms)",
        ),
        (
            format!("{down}limits: {{max_time_ms: 1500}}\n"),
            &[],
            "faults.0.worker_down.at_ms: 2000 ms is past the run's time limit, 1500 ms (limits.max_time_ms)",
        ),
        (
            format!("{DOWN}faults:\n  - {{worker_up: {{pool: default, at_ms: 3000}}}}\n"),
            &["--set", "limits.max_time_ms=2999.5"],
            "faults.0.worker_up.at_ms: 3000 ms is past the run's time limit, 2999.5 ms",
        ),
        (
            CANCEL.replace("after_ms: 300", "after_ms: 1e300"),
            &[],
            "faults.0.cancel.after_ms: 1e300 ms is beyond the latest time routersim simulates",
        ),
    ];
    for (text, args, expected) in cases {
        fs::write(tmp.path().join("cancel.yaml"), &text).unwrap();
        for command in [
            &["run", "cancel.yaml", "--out", "o"][..],
            &["check", "cancel.yaml"],
        ] {
            let started = std::time::Instant::now();
            let out = Command::cargo_bin("routersim")
                .unwrap()
                .current_dir(tmp.path())
                .args(command)
                .args(args)
                .timeout(std::time::Duration::from_secs(60))
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
            assert!(
                stderr.contains(expected),
                "{command:?}: expected {expected:?} in {stderr}"
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(10));
            assert!(!tmp.path().join("o").exists());
        }
    }
    // At the limit a fault still acts: the bound is inclusive.
    let at_limit = format!("{down}limits: {{max_time_ms: 6000}}\n");
    fs::write(tmp.path().join("cancel.yaml"), &at_limit).unwrap();
    Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(tmp.path())
        .args(["validate", "cancel.yaml"])
        .assert()
        .success();
}

#[test]
fn a_worker_up_joins_the_default_pool_and_takes_work() {
    let tmp = tempfile::tempdir().unwrap();
    let text = DOWN.replace("count: 2,", "count: 1,")
        + "faults:\n  - {worker_up: {pool: default, at_ms: 3000}}\n";
    let rows = run(tmp.path(), "up", &text);
    assert!(rows.iter().all(|r| r["status"] == "completed"));
    let joined = rows_where(&rows, |r| r["worker"] == "1");
    assert!(!joined.is_empty(), "the new worker 1 served");
    assert!(
        rows.iter()
            .filter(|r| r["worker"] == "1")
            .all(|r| ms(r, "dispatch_ms") >= 3000.0 && r["pool"] == "default")
    );
}

#[test]
fn a_drained_worker_takes_nothing_new_and_finishes_what_it_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let text = format!("{DOWN}faults:\n  - {{worker_drain: {{worker: 1, at_ms: 2000}}}}\n");
    let rows = run(tmp.path(), "drain", &text);
    assert!(
        rows.iter().all(|r| r["status"] == "completed"),
        "nothing lost"
    );
    let on_drained: Vec<&Row> = rows.iter().filter(|r| r["worker"] == "1").collect();
    assert!(on_drained.iter().all(|r| ms(r, "dispatch_ms") <= 2000.0));
    assert!(
        on_drained.iter().any(|r| ms(r, "completion_ms") > 2000.0),
        "it finished what it held after the drain"
    );
    assert!(
        rows.iter().any(|r| ms(r, "arrival_ms") > 2000.0),
        "requests kept coming, to worker 0"
    );
}

#[test]
fn an_added_worker_with_a_startup_time_serves_only_once_ready() {
    let tmp = tempfile::tempdir().unwrap();
    let text = DOWN.replace("count: 2,", "count: 1, startup_time: 2.5,")
        + "faults:\n  - {worker_up: {pool: default, at_ms: 3000}}\n";
    let rows = run(tmp.path(), "startup", &text);
    let on_new: Vec<&Row> = rows.iter().filter(|r| r["worker"] == "1").collect();
    assert!(!on_new.is_empty(), "the new worker served");
    assert!(on_new.iter().all(|r| ms(r, "dispatch_ms") >= 5500.0));
}

/// Runs `routersim check FILE` with `args`; returns (exit code, stdout, stderr).
fn check(dir: &Path, file: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(dir)
        .args(["check", file])
        .args(args)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn count_status_gates_check_and_flips_with_its_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = run(tmp.path(), "cancel", CANCEL);
    let cancelled = rows_where(&rows, |r| r["status"] == "cancelled").len();
    let completed = rows_where(&rows, |r| r["status"] == "completed").len();
    let text = format!(
        "{CANCEL}expect:
  - {{count_status: {{class: regular, status: cancelled}}, at_most: {cancelled}}}
  - {{count_status: {{class: premium, status: cancelled}}, at_most: 0}}
  - {{count_status: {{status: completed}}, within: [{completed}, {completed}]}}
  - {{count_status: {{status: aborted}}, at_most: 0}}
"
    );
    fs::write(tmp.path().join("gate.yaml"), text).unwrap();
    let (code, stdout, stderr) = check(tmp.path(), "gate.yaml", &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let want = format!("PASS  regular cancelled requests = {cancelled}  (at most {cancelled})");
    assert!(stdout.contains(&want), "{stdout}");
    assert!(
        stdout.contains("PASS  total completed requests = "),
        "{stdout}"
    );
    // One fewer cancellation allowed than the run had: the gate fails, and says by how much.
    let tighter = format!("expect.0.at_most={}", cancelled - 1);
    let (code, stdout, _) = check(tmp.path(), "gate.yaml", &["--set", &tighter]);
    assert_eq!(code, 1, "{stdout}");
    let want = format!(
        "FAIL  regular cancelled requests = {cancelled}  (at most {})",
        cancelled - 1
    );
    assert!(stdout.contains(&want), "{stdout}");
}

#[test]
fn migrations_figure_counts_the_moves_of_a_lost_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let with_limit =
        format!("{DOWN}{WINDOW}").replace("workers: {", "router: {migration_limit: 3}\nworkers: {");
    let moved = rows_where(&run(tmp.path(), "migrate", &with_limit), |r| {
        r["migrations"] != "0"
    })
    .len();
    assert!(moved > 0);
    let text = format!(
        "{with_limit}expect:
  - {{migrations: {{}}, within: [{moved}, {moved}]}}
  - {{count_status: {{status: aborted}}, at_most: 0}}
"
    );
    fs::write(tmp.path().join("gate.yaml"), &text).unwrap();
    let (code, stdout, stderr) = check(tmp.path(), "gate.yaml", &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("PASS  total migrations = {moved}")),
        "{stdout}"
    );
    // Without migration the same window aborts what it moved: the aborted gate fails.
    let (code, stdout, _) = check(
        tmp.path(),
        "gate.yaml",
        &["--set", "router.migration_limit=0"],
    );
    assert_eq!(code, 1, "{stdout}");
    let want = format!("FAIL  total aborted requests = {moved}  (at most 0)");
    assert!(stdout.contains(&want), "{stdout}");
}

#[test]
fn a_bad_count_status_exits_2_naming_file_line_and_field() {
    let tmp = tempfile::tempdir().unwrap();
    for (expect, field) in [
        (
            "{count_status: {class: regular, status: lost}, at_most: 1}",
            "count_status.status: unknown status `lost` (known: completed, rejected, cancelled, \
             aborted)",
        ),
        (
            "{count_status: {class: gold, status: aborted}, at_most: 1}",
            "count_status.class: unknown class `gold`",
        ),
        (
            "{migrations: {class: gold}, at_most: 1}",
            "migrations.class",
        ),
        (
            "{count_status: {status: aborted}, tolerance: 1}",
            "tolerance: applies to token_share only",
        ),
    ] {
        let text = format!("{CANCEL}expect:\n  - {expect}\n");
        fs::write(tmp.path().join("bad.yaml"), text).unwrap();
        let (code, stdout, stderr) = check(tmp.path(), "bad.yaml", &[]);
        assert_eq!(code, 2, "{stdout}{stderr}");
        assert!(stderr.contains("bad.yaml:22: "), "{stderr}");
        assert!(stderr.contains(field), "expected {field:?} in {stderr}");
    }
}

/// One worker behind a busy threshold, under steady load.
const ALONE: &str = "name: alone
seed: 4
router:
  default_policy_family: all
  uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
  policy_classes:
    - {name: all, policy_family: all, cache_bucket: all, quantum: 512,
       prefill_busy_threshold_frac: 0.5}
workers: {count: 1, engine: {max_num_seqs: 8}}
workload:
  rate_per_s: 10
  duration_s: 6
  arrival: poisson
  groups:
    - {name: all, class: all, share: 1, input_tokens: 512, output_tokens: 20}
";

/// As in 1.6.1's replay, a fleet with no worker is busy: a request that arrives while the
/// only worker is down waits for it instead of being refused.
#[test]
fn with_every_worker_down_a_request_waits_for_one_to_come_back() {
    let tmp = tempfile::tempdir().unwrap();
    let window = "faults:\n  - {worker_down: {worker: 0, at_ms: 2000, until_ms: 4000}}\n";
    let rows = run(tmp.path(), "back", &format!("{ALONE}{window}"));
    let waited = rows_where(&rows, |r| {
        (2100.0..3900.0).contains(&ms(r, "arrival_ms")) && r["status"] == "completed"
    });
    assert!(waited.len() >= 10, "requests arrived while it was down");
    for r in rows.iter().filter(|r| waited.contains(&r["row"])) {
        assert!(
            ms(r, "admit_ms") >= 4000.0,
            "row {} waited for the worker",
            r["row"]
        );
    }
    let refused = rows_where(&rows, |r| {
        r["status"] != "completed" && r["reason"] == "no_endpoints"
    });
    assert!(refused.is_empty(), "refused: {refused:?}");
}

/// A request still waiting for a worker when nothing else can happen (the only worker never
/// returns) is refused at the run's last instant: every run ends.
#[test]
fn requests_waiting_when_no_worker_will_return_are_refused_at_the_end() {
    let tmp = tempfile::tempdir().unwrap();
    let lost = "faults:\n  - {worker_down: {worker: 0, at_ms: 2000}}\n";
    let rows = run(tmp.path(), "lost", &format!("{ALONE}{lost}"));
    // The router hears of the loss a moment after 2,000 ms.
    let late = rows_where(&rows, |r| ms(r, "arrival_ms") > 2001.0);
    let refused = rows_where(&rows, |r| r["reason"] == "no_endpoints");
    assert!(late.len() >= 20, "requests arrived after the loss");
    assert_eq!(refused, late);
    let last_arrival = rows.iter().map(|r| ms(r, "arrival_ms")).fold(0.0, f64::max);
    for r in rows.iter().filter(|r| late.contains(&r["row"])) {
        assert_eq!(r["status"], "rejected");
        assert!(
            ms(r, "completion_ms") >= last_arrival,
            "refused only at the end"
        );
    }
}
