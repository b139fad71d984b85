//! `check --seeds N` as a CI gate: one seed can pass by luck, N replications with
//! the sweep's seeds cannot; each line names the worst value and the replication that gave
//! it, and a note gives a derived replication's seed.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn weighted() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/premium-vs-regular-weighted.yaml")
}

/// `check` of the weighted burst with 1 µs of arrival jitter and premium's first-320 bound
/// raised to 254; returns (exit code, stdout).
fn check_at_254(extra: &[&str]) -> (i32, String) {
    let out = Command::cargo_bin("routersim")
        .unwrap()
        .arg("check")
        .arg(weighted())
        .args(["--set", "delays.arrival_jitter_ns=1000"])
        .args(["--set", "expect.0.at_least=254"])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), stdout)
}

/// The seed of the replication a `[... replication R]` suffix of `line` names: the seed
/// itself for replication 0, else the one the note under the lines gives
/// (`replication R = S`).
fn seed_named(stdout: &str, line: &str) -> u64 {
    let named = line.rsplit(": ").next().unwrap().trim_end_matches(']');
    if let Some(seed) = named.strip_prefix("replication 0, seed ") {
        return seed.parse().unwrap();
    }
    let note = stdout
        .lines()
        .find(|l| l.contains("run seeds drawn from the scenario's seed"))
        .unwrap_or_else(|| panic!("no note on the derived seeds in {stdout}"));
    let given = note.split(&format!("{named} = ")).nth(1).unwrap();
    given.split(',').next().unwrap().parse().unwrap()
}

/// Premium's count among the first 320 completions of a run with `seed`.
fn premium_first_320(seed: u64) -> u64 {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("routersim")
        .unwrap()
        .arg("run")
        .arg(weighted())
        .args([
            "--set",
            "delays.arrival_jitter_ns=1000",
            "--quiet",
            "--seed",
        ])
        .arg(seed.to_string())
        .arg("--out")
        .arg(tmp.path().join("o"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let classes = std::fs::read_to_string(tmp.path().join("o/classes.csv")).unwrap();
    let mut reader = csv::Reader::from_reader(classes.as_bytes());
    let header = reader.headers().unwrap().clone();
    let column = header.iter().position(|h| h == "prefix_count").unwrap();
    let premium = reader.records().next().unwrap().unwrap();
    premium[column].parse().unwrap()
}

#[test]
fn one_seed_passes_by_luck_where_eight_seeds_fail_and_name_the_worst_seed() {
    let (code, stdout) = check_at_254(&[]);
    assert_eq!(code, 0, "seed 0 gives 254: {stdout}");
    let (code, stdout) = check_at_254(&["--seeds", "8"]);
    assert_eq!(code, 1, "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains("premium in first 320"))
        .unwrap();
    assert!(
        line.starts_with("  FAIL") && line.contains("worst of 8 seeds: replication "),
        "{line}"
    );
    let longest_number = line
        .split(|c: char| !c.is_ascii_digit())
        .map(str::len)
        .max();
    assert!(
        longest_number < Some(6),
        "no 20-digit seed on the line: {line}"
    );
    let value: u64 = line
        .split(" = ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(value < 254, "{line}");
    assert_eq!(
        premium_first_320(seed_named(&stdout, line)),
        value,
        "the named seed reproduces it"
    );
}

#[test]
fn a_quantile_judges_the_share_of_seeds_that_pass() {
    let (code, stdout) = check_at_254(&["--seeds", "8", "--quantile", "0.5"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("0.5-quantile of 8 seeds"), "{stdout}");
    let (code, _) = check_at_254(&["--seeds", "8", "--quantile", "1"]);
    assert_eq!(code, 1, "the 1-quantile is the worst seed");
    let (code, _) = check_at_254(&["--seeds", "8", "--quantile", "0"]);
    assert_eq!(code, 2, "a quantile outside (0, 1] is bad input");
}
