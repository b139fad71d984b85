//! Sweeps through the library API (the CLI wiring comes later): byte-identical output for
//! any thread count, sharded + merged equal to unsharded, and bad `--set` input as exit 2.

use routersim::sweep::{self, MergeArgs, SweepArgs};
use std::path::{Path, PathBuf};

fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/premium-vs-regular-weighted.yaml")
}

fn args(out: &Path, jobs: usize, shard: Option<&str>) -> SweepArgs {
    SweepArgs {
        scenario: scenario(),
        sets: vec![
            "router.policy_classes.regular.quantum=64,128,512".into(),
            "workload.burst.spacing_ns=0,1".into(),
        ],
        seeds: 3,
        jobs: Some(jobs),
        out: out.to_path_buf(),
        force: false,
        quiet: true,
        shard: shard.map(String::from),
        arrival_jitter_ns: 500,
        prefix_n: None,
    }
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
    sweep::run_sweep(&args(&one, 1, None)).unwrap();
    sweep::run_sweep(&args(&four, 4, None)).unwrap();
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
    sweep::run_sweep(&args(&whole, 2, None)).unwrap();
    let shards: Vec<PathBuf> = (1..=4)
        .map(|k| {
            let dir = tmp.path().join(format!("shard-{k}"));
            sweep::run_sweep(&args(&dir, 1, Some(&format!("{k}/4")))).unwrap();
            dir
        })
        .collect();
    let merged = tmp.path().join("merged");
    sweep::run_merge(&MergeArgs {
        dirs: shards.iter().rev().cloned().collect(),
        out: merged.clone(),
        force: false,
    })
    .unwrap();
    assert_eq!(read_dir(&merged), read_dir(&whole));
    let err = sweep::run_merge(&MergeArgs {
        dirs: shards[..3].to_vec(),
        out: merged,
        force: false,
    })
    .unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("shard 4/4 is missing"), "{err}");
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
        let mut a = args(&out, 1, None);
        a.sets = vec![set.to_string()];
        let err = sweep::run_sweep(&a).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{set}: {err}");
        assert!(err.to_string().contains(path), "{set}: {err}");
    }
    assert!(!out.exists(), "nothing is written for bad input");
    let mut bad_shard = args(&out, 1, Some("5/4"));
    bad_shard.sets.clear();
    assert_eq!(sweep::run_sweep(&bad_shard).unwrap_err().exit_code(), 2);
}
