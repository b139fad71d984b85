//! Output safety against other processes: a user editing an output while a rerun writes it,
//! and several routersim processes writing into one directory at once. Each test runs real
//! processes side by side; the pause hook only makes one of them deterministic.

use crate::support::spawn_held_in_write_phase;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A scenario whose every output file depends on the seed (Poisson arrivals).
const SEEDED_SCENARIO: &str = "name: seeded
workers: {count: 2}
workload:
  groups:
    - name: a
      count: 40
      input_tokens: {dist: uniform, min: 64, max: 512}
      output_tokens: 4
      arrival: {poisson: {rate_per_s: 200}}
";

fn routersim(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(assert_cmd::cargo::cargo_bin("routersim"));
    command.current_dir(dir).args(args);
    command
}

/// Runs routersim to its end: (exit code, stderr).
fn finish(mut command: Command) -> (i32, String) {
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr)
}

fn experiment() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("s.yaml"), SEEDED_SCENARIO).unwrap();
    tmp
}

fn run_seed(dir: &Path, seed: u64, out: &str) -> Command {
    let seed = seed.to_string();
    routersim(
        dir,
        &["run", "s.yaml", "--seed", &seed, "--quiet", "--out", out],
    )
}

/// Every file in `dir` (not recursive) with its bytes.
fn files_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, fs::read(e.path()).unwrap())
        })
        .collect()
}

/// Starts a rerun whose write phase is held `pause_ms`, once its stage is whole.
fn spawn_held(dir: &Path, args: &[&str], pause_ms: u64) -> (Child, JoinHandle<String>) {
    let (child, full, stderr) = spawn_held_in_write_phase(dir, args, pause_ms);
    assert!(full, "the rerun never reached its write phase");
    (child, stderr)
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

#[test]
fn a_file_edited_while_a_rerun_writes_is_kept_and_the_rerun_exits_2_naming_it() {
    let tmp = experiment();
    assert_eq!(finish(run_seed(tmp.path(), 1, "o")).0, 0);
    let out = tmp.path().join("o");
    let (mut rerun, stderr) = spawn_held(
        tmp.path(),
        &["run", "s.yaml", "--seed", "2", "--quiet", "--out", "o"],
        1500,
    );
    append(&out.join("requests.csv"), "my edit\n");
    let mine = fs::read(out.join("requests.csv")).unwrap();
    assert_eq!(rerun.wait().unwrap().code(), Some(2));
    let stderr: String = stderr.join().unwrap();
    assert!(stderr.contains("`requests.csv`"), "{stderr}");
    assert_eq!(fs::read(out.join("requests.csv")).unwrap(), mine);
}

#[test]
fn a_users_file_put_under_an_output_name_while_a_rerun_writes_is_kept() {
    let tmp = experiment();
    assert_eq!(finish(run_seed(tmp.path(), 1, "o")).0, 0);
    let summary = tmp.path().join("o/summary.json");
    let (mut rerun, stderr) = spawn_held(
        tmp.path(),
        &["run", "s.yaml", "--seed", "2", "--quiet", "--out", "o"],
        1500,
    );
    fs::remove_file(&summary).unwrap();
    fs::write(&summary, "{\"mine\": true}\n").unwrap();
    assert_eq!(rerun.wait().unwrap().code(), Some(2));
    let stderr: String = stderr.join().unwrap();
    assert!(stderr.contains("`summary.json`"), "{stderr}");
    assert_eq!(fs::read_to_string(&summary).unwrap(), "{\"mine\": true}\n");
}

/// The stage folder of a write into `target`, once it appears (at most `within`).
fn wait_for_stage(parent: &Path, target: &str, within: Duration) -> Option<PathBuf> {
    let prefix = format!(".{target}.routersim-stage-");
    let started = Instant::now();
    while started.elapsed() < within {
        let found = fs::read_dir(parent)
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with(&prefix));
        if let Some(entry) = found {
            return Some(entry.path());
        }
        std::thread::yield_now();
    }
    None
}

#[test]
fn text_appended_once_a_reruns_stage_appears_is_never_lost() {
    // No pause hook: the edit lands wherever the rerun happens to be (re-checking, writing
    // its stage, moving files in, or done). The rerun may fail or succeed; the text stays.
    let tmp = experiment();
    let trace: String = (0..20_000)
        .map(|i| format!("{{\"timestamp\": {i}, \"input_length\": 64, \"output_length\": 2, \"hash_ids\": [{i}]}}\n"))
        .collect();
    fs::write(tmp.path().join("t.jsonl"), trace).unwrap();
    let replay = ["replay", "--trace", "t.jsonl", "--quiet", "--out", "o"];
    assert_eq!(finish(routersim(tmp.path(), &replay)).0, 0);
    for trial in 0..3 {
        let summary = tmp.path().join("o/summary.json");
        let mut rerun = routersim(tmp.path(), &replay)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stage = wait_for_stage(tmp.path(), "o", Duration::from_secs(30));
        let text = format!("\nmy note {trial}\n");
        append(&summary, &text);
        let code = rerun.wait().unwrap().code();
        assert!(stage.is_some(), "trial {trial}: no stage appeared");
        assert!(matches!(code, Some(0 | 2)), "trial {trial}: {code:?}");
        let kept = fs::read_to_string(&summary).unwrap();
        assert!(
            kept.contains(&text),
            "trial {trial} (exit {code:?}) lost the note"
        );
        // Start the next trial from routersim's own output again.
        fs::remove_dir_all(tmp.path().join("o")).unwrap();
        assert_eq!(finish(routersim(tmp.path(), &replay)).0, 0);
    }
}

#[test]
fn concurrent_reruns_into_one_directory_leave_one_runs_files() {
    let tmp = experiment();
    let seeds: Vec<u64> = (1..=6).collect();
    let references: BTreeMap<Vec<u8>, BTreeMap<String, Vec<u8>>> = seeds
        .iter()
        .map(|&seed| {
            let name = format!("ref{seed}");
            assert_eq!(finish(run_seed(tmp.path(), seed, &name)).0, 0);
            let files = files_of(&tmp.path().join(&name));
            (files["summary.json"].clone(), files)
        })
        .collect();
    assert_eq!(
        references.len(),
        seeds.len(),
        "every seed's summary differs"
    );
    for trial in 0..6 {
        // Every other trial starts from an earlier run, so every process replaces files in
        // it; the rest from nothing, so all but the first find another's whole output.
        let out = format!("shared{trial}");
        if trial % 2 == 0 {
            assert_eq!(finish(run_seed(tmp.path(), 0, &out)).0, 0);
        }
        let children: Vec<Child> = seeds
            .iter()
            .map(|&seed| {
                run_seed(tmp.path(), seed, &out)
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let done = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&done.stderr);
            // Each waits for the one writing before it, then replaces its whole output.
            assert_eq!(done.status.code(), Some(0), "trial {trial}: {stderr}");
        }
        let found = files_of(&tmp.path().join(&out));
        let seed_run = &references[&found["summary.json"]];
        assert_eq!(&found, seed_run, "trial {trial}: files of different runs");
        let (code, stderr) = finish(run_seed(tmp.path(), 3, &out));
        assert_eq!(code, 0, "a later rerun takes the directory: {stderr}");
    }
}
