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
        .filter(|l| !l.starts_with("  note: "))
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

/// Two shards of a small sweep (2 points x 2 seeds, one point each) under `tmp`, for
/// tampering with: `shard-1` holds point 0, `shard-2` point 1.
fn two_shards(tmp: &Path) -> [PathBuf; 2] {
    let scenario = scenario();
    [1, 2].map(|k| {
        let dir = tmp.join(format!("shard-{k}"));
        let (code, _, stderr) = run(&[
            "sweep",
            scenario.to_str().unwrap(),
            "--set",
            "router.policy_classes.regular.quantum=64,512",
            "--seeds",
            "2",
            "--quiet",
            "--shard",
            &format!("{k}/2"),
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{stderr}");
        dir
    })
}

/// Merges `shards` into `tmp/merged`; returns (exit code, stderr).
fn merge(tmp: &Path, shards: &[PathBuf]) -> (i32, String) {
    let merged = tmp.join("merged");
    let mut args = vec!["merge"];
    args.extend(shards.iter().map(|d| d.to_str().unwrap()));
    args.extend(["--out", merged.to_str().unwrap()]);
    let (code, _, stderr) = run(&args);
    (code, stderr)
}

/// Replaces the `column` cell of data line `line` (1-based, after the header) of `csv`.
fn edit_cell(csv: &Path, line: usize, column: &str, value: &str) {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let index = lines[0].split(',').position(|c| c == column).unwrap();
    let mut cells: Vec<&str> = lines[line].split(',').collect();
    cells[index] = value;
    lines[line] = cells.join(",");
    std::fs::write(csv, lines.join("\n") + "\n").unwrap();
}

/// A tampered shard's bad cell, and the words merge must say about it (after the file,
/// line and column, which every case names).
fn assert_merge_refuses(column: &str, value: &str, words: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let shards = two_shards(tmp.path());
    let csv = shards[1].join("sweep.csv");
    edit_cell(&csv, 2, column, value);
    let (code, stderr) = merge(tmp.path(), &shards);
    assert_eq!(code, 2, "{column}={value}: {stderr}");
    let place = format!("{}:3: column `{column}`: ", csv.display());
    assert!(stderr.contains(&place), "{column}={value}: {stderr}");
    assert!(stderr.contains(words), "{column}={value}: {stderr}");
    assert!(!tmp.path().join("merged/sweep-summary.csv").exists());
}

#[test]
fn merge_refuses_a_share_that_is_not_a_number_from_0_to_1() {
    assert_merge_refuses("premium.share_first_n", "NaN", "NaN is not a share");
    assert_merge_refuses("premium.share_first_n", "-5", "-5 is not a share");
    assert_merge_refuses("regular.ideal_share", "1.5", "1.5 is not a share");
    assert_merge_refuses("premium.ideal_share_first_n", "2", "2 is not a share");
    assert_merge_refuses(
        "regular.backlogged_token_share",
        "inf",
        "inf is not a share",
    );
}

#[test]
fn merge_refuses_a_negative_or_infinite_latency_and_an_impossible_count() {
    assert_merge_refuses("premium.ttft_ms_p99", "-1", "must be finite and at least 0");
    assert_merge_refuses("regular.e2e_ms_p50", "inf", "must be finite and at least 0");
    assert_merge_refuses(
        "premium.completed",
        "2000000",
        "more than the 1000000 requests",
    );
    assert_merge_refuses("premium.completed", "-3", "not a whole number");
}

#[test]
fn merge_refuses_a_seed_no_sweep_of_the_manifest_runs() {
    assert_merge_refuses("seed", "7", "is not the seed of point 1 replication 1");
    let tmp = tempfile::tempdir().unwrap();
    let shards = two_shards(tmp.path());
    let csv = shards[1].join("sweep.csv");
    edit_cell(&csv, 1, "seed", "7");
    let (code, stderr) = merge(tmp.path(), &shards);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("column `seed`: 7 is not the seed of point 1 replication 0")
            && stderr.contains("as no axis varies `seed`"),
        "{stderr}"
    );
}

#[test]
fn merge_names_the_axis_value_a_shard_row_changed() {
    assert_merge_refuses(
        "router.policy_classes.regular.quantum",
        "65",
        "`65` is not point 1's value, which sweep.json says is `512`",
    );
    assert_merge_refuses(
        "replication",
        "5",
        "5 is not below the sweep's 2 replications",
    );
    assert_merge_refuses("prefix_n", "99999999", "more than the 1000000 requests");
}

/// The `column` cells of `csv`, row by row.
fn column_of(csv: &Path, column: &str) -> Vec<String> {
    let mut reader = csv::Reader::from_path(csv).unwrap();
    let at = reader.headers().unwrap().iter().position(|h| h == column);
    let at = at.unwrap_or_else(|| panic!("no column {column} in {}", csv.display()));
    reader
        .records()
        .map(|r| r.unwrap()[at].to_string())
        .collect()
}

#[test]
fn merge_keeps_each_runs_first_n_request_ideal() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = two_shards(tmp.path());
    assert_eq!(merge(tmp.path(), &shards).0, 0);
    let merged = tmp.path().join("merged");
    let header = std::fs::read_to_string(merged.join("sweep.csv")).unwrap();
    let header = header.lines().next().unwrap().to_string();
    assert!(
        header.ends_with(
            ",regular.e2e_ms_p99,premium.ideal_share_first_n,regular.ideal_share_first_n,\
             gpu_hours,peak_workers"
        ),
        "the new columns come after every earlier one: {header}"
    );
    for class in ["premium", "regular"] {
        let column = format!("{class}.ideal_share_first_n");
        let from_shards: Vec<String> = shards
            .iter()
            .flat_map(|dir| column_of(&dir.join("sweep.csv"), &column))
            .collect();
        assert_eq!(from_shards.len(), 4);
        assert!(
            from_shards.iter().all(|v| v.parse::<f64>().is_ok()),
            "{from_shards:?}"
        );
        assert_eq!(column_of(&merged.join("sweep.csv"), &column), from_shards);
        let means = column_of(&merged.join("sweep-summary.csv"), &column);
        assert_eq!(means.len(), 2, "one mean per point");
    }
}

#[test]
fn merge_names_both_places_of_a_run_given_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = two_shards(tmp.path());
    let csv = shards[1].join("sweep.csv");
    edit_cell(&csv, 2, "replication", "0");
    let (code, stderr) = merge(tmp.path(), &shards);
    assert_eq!(code, 2, "{stderr}");
    let wanted = format!(
        "{0}:3: point 1 replication 0 is also at {0}:2",
        csv.display()
    );
    assert!(stderr.contains(&wanted), "{stderr}");
}

#[test]
fn merge_reads_no_shard_file_past_its_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = two_shards(tmp.path());
    for name in ["sweep.json", "sweep.csv"] {
        let path = shards[0].join(name);
        let saved = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
            let (code, stderr) = merge(tmp.path(), &shards);
            assert_eq!(code, 2, "{name} -> /dev/zero: {stderr}");
            assert!(stderr.contains("a character device"), "{stderr}");
            std::fs::remove_file(&path).unwrap();
        }
        // A sparse file of 300 MB costs no disk, and would cost 300 MB of memory if read.
        let huge = std::fs::File::create(&path).unwrap();
        huge.set_len(300 << 20).unwrap();
        let (code, stderr) = merge(tmp.path(), &shards);
        assert_eq!(code, 2, "{name} of 300 MB: {stderr}");
        assert!(stderr.contains("is larger than"), "{stderr}");
        std::fs::write(&path, saved).unwrap();
    }
    assert_eq!(merge(tmp.path(), &shards).0, 0);
}

#[test]
fn merge_refuses_a_manifest_no_sweep_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = two_shards(tmp.path());
    let json = shards[0].join("sweep.json");
    let text = std::fs::read_to_string(&json).unwrap();
    for (from, to, words) in [
        (
            "\"replications\": 2",
            "\"replications\": 0",
            "field `replications`: 0",
        ),
        (
            "\"index\": 1",
            "\"index\": 0",
            "field `shard`: 0/2 is not shard K of N",
        ),
        (
            "\"index\": 1",
            "\"index\": 9",
            "field `shard`: 9/2 is not shard K of N",
        ),
        (
            "\"arrival_jitter_ns\": 0",
            "\"arrival_jitter_ns\": 18446744073709551615",
            "field `arrival_jitter_ns`",
        ),
    ] {
        assert!(text.contains(from), "{from} in {text}");
        std::fs::write(&json, text.replacen(from, to, 1)).unwrap();
        let (code, stderr) = merge(tmp.path(), &shards);
        assert_eq!(code, 2, "{to}: {stderr}");
        assert!(
            stderr.contains(&format!("{}: {words}", json.display())),
            "{stderr}"
        );
    }
}

/// Writes `from` -> `to` into both shards' sweep.json and sweep.csv header, as a hand-edited
/// sweep would have them; then merges, checks nothing was written, and returns (exit code,
/// stderr, the first shard's sweep.json).
fn merge_renamed(from: &str, to: &str) -> (i32, String, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let shards = two_shards(tmp.path());
    for shard in &shards {
        let json = shard.join("sweep.json");
        let text = std::fs::read_to_string(&json).unwrap();
        let quoted = serde_json::to_string(to).unwrap();
        let text = text.replace(&format!("\"{from}\""), &quoted);
        std::fs::write(&json, text).unwrap();
        let csv = shard.join("sweep.csv");
        let text = std::fs::read_to_string(&csv).unwrap();
        let (header, rows) = text.split_once('\n').unwrap();
        let header = header
            .split(',')
            .map(|c| match c.strip_prefix(from) {
                Some(rest) if rest.is_empty() || rest.starts_with('.') => format!("{to}{rest}"),
                _ => c.to_string(),
            })
            .collect::<Vec<_>>()
            .join(",");
        std::fs::write(&csv, format!("{header}\n{rows}")).unwrap();
    }
    let (code, stderr) = merge(tmp.path(), &shards);
    assert!(!tmp.path().join("merged").exists(), "{to}: {stderr}");
    (code, stderr, shards[0].join("sweep.json"))
}

#[test]
fn merge_refuses_class_names_no_policy_admits_naming_the_field() {
    // `.routersim-output.json` is not among them: a policy admits it, and a sweep writes it
    // (its files are `heatmap_.routersim-output.json_share_first_n.png` and the like).
    for bad in ["../../evil", "a/b", "<script>", ""] {
        let (code, stderr, json) = merge_renamed("premium", bad);
        assert_eq!(code, 2, "{bad}: {stderr}");
        let wanted = format!("{}: field `class_names[0]`: ", json.display());
        assert!(stderr.contains(&wanted), "{bad}: {stderr}");
        assert!(stderr.contains("is not a class name"), "{bad}: {stderr}");
    }
}

#[test]
fn merge_refuses_a_class_given_twice() {
    let (code, stderr, json) = merge_renamed("premium", "regular");
    assert_eq!(code, 2, "{stderr}");
    let wanted = format!(
        "{}: field `class_names[1]`: class `regular` is given twice",
        json.display()
    );
    assert!(stderr.contains(&wanted), "{stderr}");
}

#[test]
fn merge_refuses_axis_paths_no_scenario_has_naming_the_field() {
    for bad in ["x/../../y", "<img onerror=alert(1)>", "", "router..quantum"] {
        let (code, stderr, json) = merge_renamed("router.policy_classes.regular.quantum", bad);
        assert_eq!(code, 2, "{bad}: {stderr}");
        let wanted = format!("{}: field `grid.axes[0].path`: ", json.display());
        assert!(stderr.contains(&wanted), "{bad}: {stderr}");
        assert!(stderr.contains("is not a field path"), "{bad}: {stderr}");
    }
}

#[test]
fn a_sweep_over_a_planner_key_writes_each_runs_fleet_cost() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/diurnal-autoscaling.yaml");
    let out = dir.path().join("s");
    let (code, _, stderr) = run(&[
        "sweep",
        scenario.to_str().unwrap(),
        "--set",
        "planner.max_gpu_budget=4,8",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let mut reader = csv::Reader::from_path(out.join("sweep.csv")).unwrap();
    let header = reader.headers().unwrap().clone();
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let (budget, gpu_hours, peak) = (
        column("planner.max_gpu_budget"),
        column("gpu_hours"),
        column("peak_workers"),
    );
    let rows: Vec<(u64, f64, u64)> = reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            (
                r[budget].parse().unwrap(),
                r[gpu_hours].parse().unwrap(),
                r[peak].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 2);
    for &(budget, _, peak) in &rows {
        assert!(
            peak <= budget && peak > 1,
            "the planner scaled within its budget: {rows:?}"
        );
    }
    assert!(
        rows[0].1 < rows[1].1,
        "a smaller budget costs less: {rows:?}"
    );
    let summary = std::fs::read_to_string(out.join("sweep-summary.csv")).unwrap();
    assert!(
        summary
            .lines()
            .next()
            .unwrap()
            .ends_with(",peak_workers.ci95_high"),
        "{summary}"
    );
    // The page's summary table gives each point's cost beside its shares.
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("<th>gpu-hours</th>"), "no cost column");
    for &(_, gpu_hours, _) in &rows {
        assert!(
            page.contains(&format!("<td>{gpu_hours:.4}</td>")),
            "{gpu_hours}"
        );
    }
}
