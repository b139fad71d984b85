//! Workloads sized by rate and time, closed loops and warmups, end to end through the CLI:
//! what `requests.csv` and `summary.json` show.

use assert_cmd::Command;
use std::fs;
use std::path::{Path, PathBuf};

fn routersim() -> Command {
    Command::cargo_bin("routersim").unwrap()
}

fn capacity() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/capacity-two-tenants.yaml")
}

/// One row of `requests.csv`: class, arrival, first token and end (ms), status.
struct Row {
    class: String,
    arrival_ms: f64,
    first_token_ms: Option<f64>,
    end_ms: Option<f64>,
    status: String,
}

/// Runs `scenario` with `sets` into `out` and reads its `requests.csv`, in row order.
fn run_rows(scenario: &Path, sets: &[&str], out: &Path) -> Vec<Row> {
    let mut cmd = routersim();
    cmd.arg("run")
        .arg(scenario)
        .arg("--quiet")
        .arg("--out")
        .arg(out);
    for set in sets {
        cmd.args(["--set", set]);
    }
    cmd.assert().success();
    let mut reader = csv::Reader::from_path(out.join("requests.csv")).unwrap();
    let headers = reader.headers().unwrap().clone();
    let column = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (class, arrival, first, end, status) = (
        column("policy_class"),
        column("arrival_ms"),
        column("first_token_ms"),
        column("completion_ms"),
        column("status"),
    );
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            Row {
                class: r[class].to_string(),
                arrival_ms: r[arrival].parse().unwrap(),
                first_token_ms: r[first].parse().ok(),
                end_ms: r[end].parse().ok(),
                status: r[status].to_string(),
            }
        })
        .collect()
}

fn count_class(rows: &[Row], class: &str) -> usize {
    rows.iter().filter(|r| r.class == class).count()
}

#[test]
fn set_rate_per_s_scales_both_tenants_of_the_bundled_scenario() {
    let tmp = tempfile::tempdir().unwrap();
    let short = ["workload.duration_s=60", "workers.count=16"];
    let at = |rate: &str, dir: &str| {
        let rate = format!("workload.rate_per_s={rate}");
        let sets = [short[0], short[1], rate.as_str()];
        run_rows(&capacity(), &sets, &tmp.path().join(dir))
    };
    let slow = at("10", "slow");
    let fast = at("40", "fast");
    // 600 and 2400 expected; Poisson standard deviations 24 and 49.
    assert!((500..=700).contains(&slow.len()), "{}", slow.len());
    assert!((2200..=2600).contains(&fast.len()), "{}", fast.len());
    for rows in [&slow, &fast] {
        let premium = count_class(rows, "premium") as f64 / rows.len() as f64;
        assert!((premium - 0.3).abs() < 0.05, "premium share {premium}");
        assert!(
            rows.iter().all(|r| r.arrival_ms < 60_000.0),
            "arrivals stop at 60 s"
        );
    }
}

/// A closed-loop scenario: `concurrency` requests in flight, 40 counted requests.
fn closed_loop_scenario(dir: &Path, extra: &str) -> PathBuf {
    let text = format!(
        "# closed loop\nname: closed\nseed: 3\nworkers: {{count: 1, engine: {{max_num_seqs: 2}}}}\nworkload:\n  concurrency: 3\n{extra}  groups:\n    - {{name: a, count: 40, input_tokens: {{dist: uniform, min: 64, max: 2048}}, output_tokens: {{dist: uniform, min: 1, max: 40}}, arrival: {{poisson: {{rate_per_s: 1000}}}}}}\n"
    );
    let path = dir.join("closed.yaml");
    fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_closed_loop_keeps_concurrency_in_flight_and_issues_at_each_end() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = run_rows(
        &closed_loop_scenario(tmp.path(), ""),
        &[],
        &tmp.path().join("out"),
    );
    assert_eq!(rows.len(), 40, "every request issued");
    assert!(rows.iter().all(|r| r.status == "completed"));
    let mut ends: Vec<f64> = rows.iter().map(|r| r.end_ms.unwrap()).collect();
    ends.sort_by(f64::total_cmp);
    assert!(
        rows[..3].iter().all(|r| r.arrival_ms == 0.0),
        "first 3 at 0"
    );
    assert_eq!(
        rows[3].arrival_ms, ends[0],
        "the 4th is issued at the first end"
    );
    for (i, row) in rows.iter().enumerate().skip(3) {
        assert_eq!(
            row.arrival_ms,
            ends[i - 3],
            "issue {i} at the {}-th end",
            i - 2
        );
    }
    // At every instant a request is issued, at most 3 are in flight.
    for row in &rows {
        let t = row.arrival_ms;
        let issued = rows.iter().filter(|r| r.arrival_ms <= t).count();
        let ended = ends.iter().filter(|&&e| e <= t).count();
        assert!(
            issued - ended <= 3,
            "{} in flight at {t} ms",
            issued - ended
        );
    }
}

#[test]
fn a_closed_loop_issues_nothing_after_duration_s() {
    let tmp = tempfile::tempdir().unwrap();
    let all = run_rows(
        &closed_loop_scenario(tmp.path(), ""),
        &[],
        &tmp.path().join("all"),
    );
    let cut_ms = all[20].arrival_ms;
    assert!(all[19].arrival_ms < cut_ms);
    let duration = format!("  duration_s: {}\n", cut_ms / 1000.0);
    let bounded = run_rows(
        &closed_loop_scenario(tmp.path(), &duration),
        &[],
        &tmp.path().join("bounded"),
    );
    assert_eq!(bounded.len(), 20, "issues before {cut_ms} ms only");
    assert!(bounded.iter().all(|r| r.arrival_ms < cut_ms));
}

/// `summary.json`'s TTFT of `class`: (count, max in ms).
fn ttft_summary(out: &Path, class: &str) -> (u64, f64) {
    let text = fs::read_to_string(out.join("summary.json")).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
    let classes = summary["classes"].as_array().unwrap();
    let entry = classes.iter().find(|c| c["class"] == class).unwrap();
    let ttft = &entry["latency_ms"]["ttft"];
    (
        ttft["count"].as_u64().unwrap(),
        ttft["max"].as_f64().unwrap(),
    )
}

#[test]
fn a_warmup_keeps_early_requests_out_of_latencies_but_not_out_of_requests_csv() {
    let tmp = tempfile::tempdir().unwrap();
    // 4 workers: the backlog (and TTFT) grows over the run, so early requests differ.
    let base = ["workload.duration_s=60", "workers.count=4"];
    let plain = run_rows(&capacity(), &base, &tmp.path().join("plain"));
    let warm_sets = [base[0], base[1], "workload.warmup_s=20"];
    let warm = run_rows(&capacity(), &warm_sets, &tmp.path().join("warm"));
    assert_eq!(plain.len(), warm.len(), "requests.csv keeps every request");
    assert!(warm.iter().any(|r| r.arrival_ms < 20_000.0));
    for class in ["premium", "regular"] {
        let after: Vec<&Row> = warm
            .iter()
            .filter(|r| r.class == class && r.arrival_ms >= 20_000.0 && r.status == "completed")
            .collect();
        let max_ttft = after
            .iter()
            .map(|r| r.first_token_ms.unwrap() - r.arrival_ms)
            .fold(0.0, f64::max);
        let (count, max) = ttft_summary(&tmp.path().join("warm"), class);
        assert_eq!(
            count,
            after.len() as u64,
            "{class}: only requests after the warmup"
        );
        assert!(
            (max - max_ttft).abs() < 1e-5,
            "{class}: {max} vs {max_ttft}"
        );
        let (plain_count, _) = ttft_summary(&tmp.path().join("plain"), class);
        assert!(plain_count > count, "{class}: the warmup left requests out");
    }
}
