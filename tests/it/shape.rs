//! The shape of the simulated system, kept by test: only the worker fleet builds workers,
//! so every worker gets the same set-up; and no file or function in src/ outgrows what a
//! reader can hold.

use std::fs;
use std::path::{Path, PathBuf};

/// The one file outside `mocker` that may build a worker.
const WORKER_BUILDER: &str = "sim/fleet.rs";

/// The calls that build a mock worker.
const BUILDS_A_WORKER: [&str; 2] = ["MockWorker::new(", "MockWorker::try_new("];

/// Every `.rs` file under src/, with its path relative to src/ (forward slashes), sorted.
fn source_files() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("src is readable") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    walk(&src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// Whether a file holds only tests (by its name).
fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.ends_with("tests.rs") || name == "test_support.rs" || name == "dynamo_parity.rs"
}

/// The lines of `text` before its inline `mod tests`, if it has one at the end.
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .take_while(|l| l.trim() != "mod tests {")
        .enumerate()
}

#[test]
fn only_the_fleet_builds_workers() {
    let mut builders = Vec::new();
    for (rel, text) in source_files() {
        if rel.starts_with("mocker/") || is_test_file(&rel) || rel == WORKER_BUILDER {
            continue;
        }
        for (i, line) in code_lines(&text) {
            if BUILDS_A_WORKER.iter().any(|call| line.contains(call)) {
                builders.push(format!("src/{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        builders.is_empty(),
        "workers are built by src/{WORKER_BUILDER} alone (its set-up is every worker's):\n{}",
        builders.join("\n")
    );
}

#[test]
fn the_worker_builder_really_builds_workers() {
    let files = source_files();
    let (_, fleet) = files.iter().find(|(rel, _)| rel == WORKER_BUILDER).unwrap();
    assert!(
        BUILDS_A_WORKER.iter().any(|call| fleet.contains(call)),
        "src/{WORKER_BUILDER} no longer builds workers: update WORKER_BUILDER"
    );
}
