//! Sweeps, merges and tunes through the command line: byte-identical output for any thread
//! count, sharded + merged equal to unsharded, bad `--set` input as exit 2, runs stopped by a
//! limit counted, and `tune --seeds/--set` with its spread, class names and unmeasurable
//! shares.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn routersim() -> Command {
    Command::cargo_bin("routersim").unwrap()
}

fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/premium-vs-regular-weighted.yaml")
}

/// Runs routersim with `args`; returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = routersim().args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap(),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// The test sweep (6 points x 3 seeds, jittered) into `out`, with `extra` arguments.
fn sweep(out: &Path, jobs: usize, extra: &[&str]) -> (i32, String, String) {
    let (scenario, out, jobs) = (scenario(), out.display().to_string(), jobs.to_string());
    let mut args = vec![
        "sweep",
        scenario.to_str().unwrap(),
        "--set",
        "router.policy_classes.regular.quantum=64,128,512",
        "--set",
        "workload.burst.spacing_ns=0,1",
        "--seeds",
        "3",
        "--arrival-jitter-ns",
        "500",
        "--quiet",
        "--jobs",
        &jobs,
        "--out",
        &out,
    ];
    args.extend(extra);
    run(&args)
}

/// Every file of a directory, sorted by name.
fn read_dir(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn sweep_output_is_identical_for_one_and_four_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let (one, four) = (tmp.path().join("one"), tmp.path().join("four"));
    assert_eq!(sweep(&one, 1, &[]).0, 0);
    assert_eq!(sweep(&four, 4, &[]).0, 0);
    let files = read_dir(&one);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"sweep.csv") && names.contains(&"sweep-summary.csv"));
    assert!(
        names.contains(&"heatmap_premium_share_first_n.png"),
        "{names:?}"
    );
    let csv = String::from_utf8(files.iter().find(|f| f.0 == "sweep.csv").unwrap().1.clone());
    assert_eq!(
        csv.unwrap().lines().count(),
        1 + 6 * 3,
        "one row per point and seed"
    );
    assert_eq!(files, read_dir(&four));
}

#[test]
fn sharded_and_merged_equals_unsharded_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = tmp.path().join("whole");
    assert_eq!(sweep(&whole, 2, &[]).0, 0);
    let shards: Vec<String> = (1..=4)
        .map(|k| {
            let dir = tmp.path().join(format!("shard-{k}"));
            assert_eq!(sweep(&dir, 1, &["--shard", &format!("{k}/4")]).0, 0);
            dir.display().to_string()
        })
        .collect();
    let merged = tmp.path().join("merged").display().to_string();
    let mut merge = vec!["merge"];
    merge.extend(shards.iter().rev().map(String::as_str));
    merge.extend(["--out", &merged]);
    assert_eq!(run(&merge).0, 0);
    assert_eq!(read_dir(Path::new(&merged)), read_dir(&whole));
    let (code, _, stderr) = run(&[
        "merge", &shards[0], &shards[1], &shards[2], "--out", &merged,
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("shard 4/4 is missing"), "{stderr}");
}

#[test]
fn bad_set_paths_and_values_are_exit_2_naming_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    for (set, path) in [
        (
            "router.policy_classes.regular.quantun=64",
            "router.policy_classes.regular.quantun",
        ),
        (
            "router.policy_classes.regular.quantum=64,-5",
            "router.policy_classes.regular.quantum",
        ),
        ("workers.count=two", "workers.count"),
    ] {
        let (code, _, stderr) = sweep(&out, 1, &["--set", set]);
        assert_eq!(code, 2, "{set}: {stderr}");
        assert!(stderr.contains(path), "{set}: {stderr}");
    }
    assert!(!out.exists(), "nothing is written for bad input");
    let (code, _, stderr) = sweep(&out, 1, &["--shard", "5/4"]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn a_sweep_counts_the_runs_a_limit_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    // The premium scenario without its expectations (they name a companion file), with limits.
    let text = std::fs::read_to_string(scenario()).unwrap();
    let (text, _) = text.split_once("expect:").unwrap();
    let path = tmp.path().join("limited.yaml");
    std::fs::write(
        &path,
        format!("{text}limits: {{max_events: 10000000, max_time_ms: 3600000}}\n"),
    )
    .unwrap();
    let out = tmp.path().join("out").display().to_string();
    let (code, stdout, stderr) = run(&[
        "sweep",
        path.to_str().unwrap(),
        "--set",
        "limits.max_events=100,10000000",
        "--out",
        &out,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("2 runs; wrote"), "{stdout}");
    assert!(
        stderr.contains("1 of 2 runs stopped early: event limit reached"),
        "{stderr}"
    );
    let csv = std::fs::read_to_string(Path::new(&out).join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "both runs have their row");
}

#[test]
fn tune_with_seeds_and_set_prints_the_spread_and_names_the_classes() {
    let scenario = scenario();
    let (code, stdout, stderr) = run(&[
        "tune",
        scenario.to_str().unwrap(),
        "--target",
        "premium=0.8",
        "--seeds",
        "3",
        "--set",
        "delays.arrival_jitter_ns=1000",
        "--jobs",
        "2",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("mean over 3 seeds"), "{stdout}");
    let achieved = stdout
        .lines()
        .find(|l| l.starts_with("  premium: target 0.8000, achieved "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(achieved.contains("(seeds: min 0.7"), "{achieved}");
    let sensitivity: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("sensitivity"))
        .skip(1)
        .collect();
    assert_eq!(sensitivity.len(), 8, "{stdout}");
    assert!(sensitivity[0].starts_with("  premium quantum 512 -> 256: premium 0."));
    assert!(sensitivity[4].starts_with("  regular quantum 128 -> 64: premium 0."));
    // Jitter on: the seeds differ, so every line shows its min-max.
    assert!(sensitivity.iter().all(|l| l.ends_with(')')), "{stdout}");
    let (code, _, stderr) = run(&[
        "tune",
        scenario.to_str().unwrap(),
        "--target",
        "premium=0.8",
        "--set",
        "delays.arrival_jitter_nz=1000",
    ]);
    assert_eq!(code, 2);
    assert!(stderr.contains("delays.arrival_jitter_nz"), "{stderr}");
}

#[test]
fn tune_says_in_words_when_a_share_cannot_be_measured() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("apart.yaml");
    // Premium at 0, 1, 2, 3 s and regular half a second later: each request finds the
    // worker idle, so the classes never wait together.
    std::fs::write(
        &path,
        r#"name: apart
seed: 0
router:
  default_policy_family: regular
  uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
  policy_classes:
    - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512,
       prefill_busy_threshold: 1536, request_queue_limit_per_worker: 1024}
    - {name: regular, policy_family: regular, cache_bucket: all, quantum: 128,
       prefill_busy_threshold: 1536, request_queue_limit_per_worker: 1024}
workers:
  count: 1
  engine: {max_num_seqs: 4, max_num_batched_tokens: 8192, enable_prefix_caching: false}
workload:
  groups:
    - {name: premium, class: premium, count: 4, input_tokens: 64, output_tokens: 1,
       arrival: {interval: {every_ms: 1000, start_ms: 0}}}
    - {name: regular, class: regular, count: 4, input_tokens: 64, output_tokens: 1,
       arrival: {interval: {every_ms: 1000, start_ms: 500}}}
"#,
    )
    .unwrap();
    let (code, stdout, stderr) = run(&["tune", path.to_str().unwrap(), "--target", "premium=0.8"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("premium's share of the first 4 completions cannot be measured"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the classes are never backlogged together"),
        "{stderr}"
    );
    assert!(!stdout.contains("NaN") && !stderr.contains("NaN"));
}
