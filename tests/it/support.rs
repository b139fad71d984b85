//! Helpers the integration tests share: running the routersim binary and reading what it
//! wrote.

use assert_cmd::Command;
use std::path::Path;

/// Runs `routersim ARGS` in `dir`; returns (exit code, stdout, stderr), after checking that
/// it did not panic.
pub fn run_in_dir(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("routersim")
        .unwrap()
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), stdout, stderr)
}

/// Starts routersim in `dir` with its write phase held `pause_ms` once its stage is whole, and
/// waits for that moment (the pause's own stderr line: the stage folder alone appears before
/// its files are whole). Returns the child, whether the moment came (false if its stderr
/// closed first), and a thread gathering the rest of its stderr, so that a later message is
/// never a write into a closed pipe.
pub fn spawn_held_in_write_phase(
    dir: &Path,
    args: &[&str],
    pause_ms: u64,
) -> (std::process::Child, bool, std::thread::JoinHandle<String>) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("routersim"))
        .current_dir(dir)
        .env(
            routersim::report::output::STAGE_PAUSE_ENV,
            pause_ms.to_string(),
        )
        .args(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let full = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line == routersim::report::output::STAGE_FULL_LINE);
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect());
    (child, full, rest)
}

/// The named columns of `out`'s requests.csv, row by row.
pub fn request_columns(out: &Path, names: &[&str]) -> Vec<Vec<String>> {
    let mut reader = csv::Reader::from_path(out.join("requests.csv")).unwrap();
    let headers = reader.headers().unwrap().clone();
    let index: Vec<usize> = names
        .iter()
        .map(|n| headers.iter().position(|h| h == *n).unwrap())
        .collect();
    reader
        .records()
        .map(|r| {
            let r = r.unwrap();
            index.iter().map(|&i| r[i].to_string()).collect()
        })
        .collect()
}
