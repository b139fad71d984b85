//! Stability through the commands: `run` warns about an overloaded run and records the verdict
//! in summary.json; `check` fails `stable: true` on it (exit 1) and passes it once the offered
//! load fits (exit 0). The bundled poisson-multi-worker scenario is overloaded on purpose; its
//! header gives the rates at which it is not.

use assert_cmd::Command;
use std::fs;
use std::path::{Path, PathBuf};

const LIGHT_LOAD: [&str; 4] = [
    "--set",
    "workload.groups.gold.arrival.poisson.rate_per_s=8",
    "--set",
    "workload.groups.standard.arrival.poisson.rate_per_s=24",
];

fn routersim() -> Command {
    Command::cargo_bin("routersim").unwrap()
}

/// The poisson scenario with its expectations replaced by `{stable: true}`, in `dir`.
fn stable_scenario(dir: &Path) -> PathBuf {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/poisson-multi-worker.yaml");
    let text = fs::read_to_string(bundled).unwrap();
    let (head, _) = text
        .split_once("\nexpect:")
        .expect("the scenario has expectations");
    let path = dir.join("stable.yaml");
    fs::write(&path, format!("{head}\nexpect:\n  - {{stable: true}}\n")).unwrap();
    path
}

/// Runs `run` on the bundled scenario; returns (stdout, summary.json's stability object).
fn run(extra: &[&str]) -> (String, serde_json::Value) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let output = routersim()
        .args(["run", "scenarios/poisson-multi-worker.yaml", "--out"])
        .arg(&out)
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let summary: serde_json::Value =
        serde_json::from_slice(&fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert!(out.join("in_system.svg").exists());
    let stdout = String::from_utf8(output.stdout).unwrap();
    (stdout, summary["stability"].clone())
}

#[test]
fn run_warns_about_an_overloaded_run_only() {
    let (stdout, stability) = run(&[]);
    let warning = "warning: overloaded: requests in the system grew from ";
    assert!(stdout.contains(warning), "{stdout}");
    assert_eq!(stability["overloaded"], true);
    assert!(stability["served_rps"].as_f64() < stability["offered_rps"].as_f64());
    let (stdout, stability) = run(&LIGHT_LOAD);
    assert!(!stdout.contains("warning: overloaded"), "{stdout}");
    assert_eq!(stability["overloaded"], false);
    assert_eq!(stability["capacity_seqs"], 64, "4 workers of 16 sequences");
}

#[test]
fn check_gates_on_stable_true() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = stable_scenario(tmp.path());
    let overloaded = routersim().arg("check").arg(&scenario).output().unwrap();
    assert_eq!(overloaded.status.code(), Some(1), "{overloaded:?}");
    let stdout = String::from_utf8(overloaded.stdout).unwrap();
    assert!(
        stdout.contains("FAIL  keeps up with the offered load: no, overloaded: "),
        "{stdout}"
    );
    assert!(stdout.contains("  warning: overloaded: "), "{stdout}");
    let light = routersim()
        .arg("check")
        .arg(&scenario)
        .args(LIGHT_LOAD)
        .output()
        .unwrap();
    assert_eq!(light.status.code(), Some(0), "{light:?}");
    let stdout = String::from_utf8(light.stdout).unwrap();
    assert!(
        stdout.contains("PASS  keeps up with the offered load: yes\n"),
        "{stdout}"
    );
}
