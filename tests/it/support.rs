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
