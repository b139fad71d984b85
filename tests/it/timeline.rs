//! `--timeline`: the trace file's structure (slices nest, passes do not overlap, counters
//! move forward, a request's phases add up to its latency), its bound, its determinism, and
//! a lost worker as the timeline shows it.

use crate::support::{request_columns, run_in_dir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn scenario(name: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    root.join("scenarios").join(name).display().to_string()
}

/// Runs `routersim ARGS` in `dir`, expecting success; returns `dir/out/timeline.json` parsed.
fn timeline_of(dir: &Path, args: &[&str]) -> Value {
    let (code, _, stderr) = run_in_dir(dir, args);
    assert_eq!(code, 0, "{stderr}");
    let text = fs::read_to_string(dir.join("out/timeline.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A trace time in microseconds (three decimals) as integer nanoseconds.
fn ns(v: &Value) -> u64 {
    (v.as_f64().unwrap() * 1000.0).round() as u64
}

fn events(timeline: &Value) -> &Vec<Value> {
    timeline["traceEvents"].as_array().unwrap()
}

/// One request's async events: its own slice and its children (name, start, end).
#[derive(Default)]
struct RequestSlices {
    open: Vec<(String, u64)>,
    parent: Option<(u64, u64)>,
    children: Vec<(String, u64, u64)>,
}

/// Every request's slices by id; panics if a `b` and an `e` do not pair up as a stack.
fn request_slices(timeline: &Value) -> BTreeMap<u64, RequestSlices> {
    let mut by_id: BTreeMap<u64, RequestSlices> = BTreeMap::new();
    for e in events(timeline) {
        let ph = e["ph"].as_str().unwrap();
        if ph != "b" && ph != "e" {
            continue;
        }
        let slices = by_id.entry(e["id"].as_u64().unwrap()).or_default();
        let name = e["name"].as_str().unwrap().to_string();
        let at = ns(&e["ts"]);
        if ph == "b" {
            slices.open.push((name, at));
            continue;
        }
        let (open_name, start) = slices.open.pop().expect("an end without a begin");
        assert_eq!(open_name, name, "ends close the latest begin");
        match slices.open.is_empty() {
            true => slices.parent = Some((start, at)),
            false => slices.children.push((name, start, at)),
        }
    }
    by_id
}

/// Checks the structure every timeline must have.
fn assert_well_formed(timeline: &Value) {
    for (id, r) in request_slices(timeline) {
        assert!(r.open.is_empty(), "request {id} left a slice open");
        let (start, end) = r.parent.expect("each request has its slice");
        let mut at = start;
        for (name, from, to) in &r.children {
            assert!(
                from <= to && start <= *from && *to <= end,
                "{id} {name} nests"
            );
            assert_eq!(*from, at, "request {id}'s phases follow each other");
            at = *to;
        }
        let total: u64 = r.children.iter().map(|(_, f, t)| t - f).sum();
        assert_eq!(
            total,
            end - start,
            "request {id}'s phases add up to its latency"
        );
    }
    let mut passes: BTreeMap<(u64, u64), Vec<(u64, u64)>> = BTreeMap::new();
    let mut counters: BTreeMap<(u64, String), Vec<u64>> = BTreeMap::new();
    for e in events(timeline) {
        let track = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        match e["ph"].as_str().unwrap() {
            "X" => {
                let start = ns(&e["ts"]);
                passes
                    .entry(track)
                    .or_default()
                    .push((start, start + ns(&e["dur"])));
            }
            "C" => {
                let name = e["name"].as_str().unwrap().to_string();
                counters
                    .entry((track.0, name))
                    .or_default()
                    .push(ns(&e["ts"]));
            }
            _ => {}
        }
    }
    for (track, mut slices) in passes {
        slices.sort();
        for pair in slices.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "passes on {track:?} overlap: {pair:?}"
            );
        }
    }
    for (track, times) in counters {
        assert!(
            times.windows(2).all(|w| w[0] < w[1]),
            "counter {track:?} goes back in time"
        );
    }
}

#[test]
fn a_runs_timeline_nests_every_slice_and_its_phases_add_up_to_each_latency() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario("premium-vs-regular-weighted.yaml");
    let args = ["run", &file, "--out", "out", "--quiet", "--timeline"];
    let timeline = timeline_of(dir.path(), &args);
    assert_well_formed(&timeline);
    let slices = request_slices(&timeline);
    assert_eq!(slices.len(), 640);
    // Each request's slice is its end-to-end latency as requests.csv has it.
    let rows = request_columns(
        &dir.path().join("out"),
        &["row", "arrival_ms", "completion_ms"],
    );
    let ms_ns = |s: &str| (s.parse::<f64>().unwrap() * 1e6).round() as u64;
    for row in rows {
        let (start, end) = slices[&row[0].parse::<u64>().unwrap()].parent.unwrap();
        assert_eq!(
            (start, end),
            (ms_ns(&row[1]), ms_ns(&row[2])),
            "row {}",
            row[0]
        );
    }
    let other = &timeline["otherData"];
    assert_eq!(other["requests_omitted"], 0);
    assert_eq!(timeline["displayTimeUnit"], "ms");
}

#[test]
fn a_rerun_writes_the_same_timeline_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario("worker-loss-at-peak.yaml");
    let mut bytes = Vec::new();
    for out in ["a", "b"] {
        let args = ["run", &file, "--out", out, "--quiet", "--timeline"];
        let (code, _, stderr) = run_in_dir(dir.path(), &args);
        assert_eq!(code, 0, "{stderr}");
        bytes.push(fs::read(dir.path().join(out).join("timeline.json")).unwrap());
    }
    assert!(bytes[0] == bytes[1], "two runs wrote different timelines");
}

#[test]
fn check_writes_the_first_seeds_timeline_whatever_the_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario("premium-vs-regular-weighted.yaml");
    let mut bytes = Vec::new();
    for (out, jobs) in [("one", "1"), ("two", "2")] {
        let args = [
            "check",
            &file,
            "--seeds",
            "3",
            "--jobs",
            jobs,
            "--timeline",
            "--out",
            out,
        ];
        let (code, _, stderr) = run_in_dir(dir.path(), &args);
        assert!(code == 0 || code == 1, "{stderr}");
        bytes.push(fs::read(dir.path().join(out).join("timeline.json")).unwrap());
    }
    assert!(bytes[0] == bytes[1], "--jobs changed the timeline");
    let timeline: Value = serde_json::from_slice(&bytes[0]).unwrap();
    assert_eq!(timeline["otherData"]["run"]["command"], "check");
    assert_well_formed(&timeline);
}

#[test]
fn without_timeline_no_timeline_file_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario("premium-vs-regular-weighted.yaml");
    let (code, _, stderr) = run_in_dir(dir.path(), &["run", &file, "--out", "out", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!dir.path().join("out/timeline.json").exists());
}

#[test]
fn a_bound_without_timeline_or_not_a_number_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario("premium-vs-regular-weighted.yaml");
    for args in [
        vec!["run", &file, "--timeline-max-requests", "5"],
        vec![
            "run",
            &file,
            "--timeline",
            "--timeline-max-requests",
            "many",
        ],
    ] {
        let (code, _, stderr) = run_in_dir(dir.path(), &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
    }
}

/// A trace of `rows` one-block requests, 1 ms apart.
fn small_trace(dir: &Path, rows: u64) -> PathBuf {
    let path = dir.join("trace.jsonl");
    let mut text = String::new();
    for row in 0..rows {
        text.push_str(&format!(
            "{{\"timestamp\": {row}, \"input_length\": 16, \"output_length\": 2, \"hash_ids\": [{row}]}}\n"
        ));
    }
    fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_default_bound_keeps_the_first_20000_requests_and_says_what_it_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let trace = small_trace(dir.path(), 20_010);
    let trace = trace.display().to_string();
    let args = [
        "replay",
        "--trace",
        &trace,
        "--workers",
        "4",
        "--out",
        "out",
        "--quiet",
        "--timeline",
    ];
    let timeline = timeline_of(dir.path(), &args);
    let other = &timeline["otherData"];
    assert_eq!(other["requests_total"], 20_010);
    assert_eq!(other["requests_kept"], 20_000);
    assert_eq!(other["requests_omitted"], 10);
    assert_eq!(other["max_requests"], 20_000);
    let slices = request_slices(&timeline);
    assert_eq!(slices.len(), 20_000);
    assert_eq!(
        slices.keys().last(),
        Some(&19_999),
        "the first rows are kept"
    );
    // Counters count every request, kept or not.
    let in_system = events(&timeline)
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "requests in system")
        .count();
    assert!(in_system > 20_000, "{in_system} samples");
}

#[test]
fn timeline_max_requests_keeps_that_many() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario("premium-vs-regular-weighted.yaml");
    let args = [
        "run",
        &file,
        "--out",
        "out",
        "--quiet",
        "--timeline",
        "--timeline-max-requests",
        "7",
    ];
    let timeline = timeline_of(dir.path(), &args);
    assert_eq!(timeline["otherData"]["requests_kept"], 7);
    assert_eq!(timeline["otherData"]["requests_omitted"], 633);
    assert_eq!(request_slices(&timeline).len(), 7);
}

#[test]
fn a_lost_worker_is_down_from_60_to_120_s_on_its_track_with_its_migrations() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario("worker-loss-at-peak.yaml");
    let timeline = timeline_of(
        dir.path(),
        &["run", &file, "--out", "out", "--quiet", "--timeline"],
    );
    assert_well_formed(&timeline);
    let events = events(&timeline);
    let worker0 = events
        .iter()
        .find(|e| e["ph"] == "M" && e["args"]["name"] == "worker 0 rank 0")
        .map(|e| (e["pid"].clone(), e["tid"].clone()))
        .unwrap();
    let on_worker0: Vec<&Value> = events
        .iter()
        .filter(|e| (e["pid"].clone(), e["tid"].clone()) == worker0)
        .collect();
    let instant_at = |name: &str| {
        on_worker0
            .iter()
            .find(|e| e["ph"] == "i" && e["name"] == name)
            .map(|e| ns(&e["ts"]))
    };
    let (down, up) = (60_000_000_000, 120_000_000_000);
    assert_eq!(instant_at("worker down"), Some(down));
    assert_eq!(instant_at("worker back"), Some(up));
    let passes: Vec<(u64, u64)> = on_worker0
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| (ns(&e["ts"]), ns(&e["ts"]) + ns(&e["dur"])))
        .collect();
    assert!(passes.iter().any(|p| p.0 < down) && passes.iter().any(|p| p.0 >= up));
    let in_gap: Vec<_> = passes.iter().filter(|p| p.1 > down && p.0 < up).collect();
    assert!(
        in_gap.is_empty(),
        "passes while worker 0 is down: {in_gap:?}"
    );
    let migrations = on_worker0
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with("migrate request"))
        .count();
    assert!(migrations >= 1, "the loss migrates what worker 0 ran");
    let migrated = request_columns(&dir.path().join("out"), &["migrations"])
        .iter()
        .filter(|r| r[0] != "0")
        .count();
    assert_eq!(
        migrations, migrated,
        "one instant per request moved off worker 0"
    );
}

/// The instants named `name` on the track of `worker`'s rank 0.
fn instants_on(timeline: &Value, worker: u64, name: &str) -> Vec<u64> {
    let events = events(timeline);
    let label = format!("worker {worker} rank 0");
    let Some(track) = events
        .iter()
        .find(|e| e["ph"] == "M" && e["args"]["name"] == label.as_str())
        .map(|e| (e["pid"].clone(), e["tid"].clone()))
    else {
        return Vec::new();
    };
    events
        .iter()
        .filter(|e| (e["pid"].clone(), e["tid"].clone()) == track)
        .filter(|e| e["ph"] == "i" && e["name"] == name)
        .map(|e| ns(&e["ts"]))
        .collect()
}

/// The slices (name, start, end) on the track named `label`, in time order.
fn slices_on(timeline: &Value, label: &str) -> Vec<(String, u64, u64)> {
    let events = events(timeline);
    let Some(track) = events
        .iter()
        .find(|e| e["ph"] == "M" && e["args"]["name"] == label)
        .map(|e| (e["pid"].clone(), e["tid"].clone()))
    else {
        return Vec::new();
    };
    let mut slices: Vec<(String, u64, u64)> = events
        .iter()
        .filter(|e| (e["pid"].clone(), e["tid"].clone()) == track && e["ph"] == "X")
        .map(|e| {
            let start = ns(&e["ts"]);
            (
                e["name"].as_str().unwrap().to_string(),
                start,
                start + ns(&e["dur"]),
            )
        })
        .collect();
    slices.sort_by_key(|s| s.1);
    slices
}

#[test]
fn a_scaled_fleet_shows_each_workers_life_spans_and_its_instants_on_its_tracks() {
    let dir = tempfile::tempdir().unwrap();
    let text = "name: scaled
seed: 3
workers: {count: 2, startup_time: 1.5, engine: {max_num_seqs: 4}}
workload:
  rate_per_s: 8
  duration_s: 6
  arrival: poisson
  groups:
    - {name: all, share: 1, input_tokens: 1024, output_tokens: 100}
faults:
  - {worker_up: {pool: default, at_ms: 1000}}
  - {worker_drain: {worker: 1, at_ms: 2000}}
";
    std::fs::write(dir.path().join("scaled.yaml"), text).unwrap();
    let timeline = timeline_of(
        dir.path(),
        &[
            "run",
            "scaled.yaml",
            "--out",
            "out",
            "--quiet",
            "--timeline",
        ],
    );
    assert_well_formed(&timeline);
    assert_eq!(
        instants_on(&timeline, 2, "worker starting"),
        [1_000_000_000]
    );
    assert_eq!(instants_on(&timeline, 2, "worker joined"), [2_500_000_000]);
    assert_eq!(
        instants_on(&timeline, 1, "worker draining"),
        [2_000_000_000]
    );
    let left = instants_on(&timeline, 1, "worker left");
    assert_eq!(left.len(), 1, "worker 1 left once");
    assert!(left[0] >= 2_000_000_000);
    // Life spans: worker 2 starts from 1 s to 2.5 s then serves; worker 1 serves to 2 s
    // then drains until it leaves; worker 0 serves the whole run.
    let end = timeline_end(&timeline);
    let life = |worker: u64| slices_on(&timeline, &format!("worker {worker} life"));
    let named = |spans: &[(&str, u64, u64)]| -> Vec<(String, u64, u64)> {
        spans
            .iter()
            .map(|&(n, a, b)| (n.to_string(), a, b))
            .collect()
    };
    assert_eq!(life(0), named(&[("active", 0, end)]));
    let drained = named(&[
        ("active", 0, 2_000_000_000),
        ("draining", 2_000_000_000, left[0]),
    ]);
    assert_eq!(life(1), drained);
    let started = named(&[
        ("starting", 1_000_000_000, 2_500_000_000),
        ("active", 2_500_000_000, end),
    ]);
    assert_eq!(life(2), started);
    // Every pass of a worker lies inside its active and draining spans.
    for worker in 0..3u64 {
        let serving = life(worker).into_iter().filter(|s| s.0 != "starting");
        let (from, until) = serving.fold((u64::MAX, 0), |(a, b), s| (a.min(s.1), b.max(s.2)));
        for (_, start, stop) in slices_on(&timeline, &format!("worker {worker} rank 0")) {
            assert!(
                from <= start && stop <= until,
                "worker {worker}: {start}..{stop}"
            );
        }
    }
}

/// The run's end as the rest of the timeline tells it: the last end of any slice or instant
/// but the life spans.
fn timeline_end(timeline: &Value) -> u64 {
    let life = ["starting", "active", "draining"];
    events(timeline)
        .iter()
        .filter(|e| e["ph"] != "M" && e["ph"] != "C")
        .filter(|e| !life.iter().any(|name| e["name"] == *name))
        .map(|e| ns(&e["ts"]) + e.get("dur").map_or(0, ns))
        .max()
        .unwrap()
}
