//! Output safety end to end: no command deletes or overwrites a file it did not
//! write, refusals happen before any work and leave nothing behind, reruns keep user files.

use crate::support::{run_in_dir, spawn_held_in_write_phase};
use assert_cmd::Command;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn routersim() -> Command {
    Command::cargo_bin("routersim").unwrap()
}

const TINY_SCENARIO: &str = "name: tiny
workers: {count: 1}
workload:
  groups:
    - {name: a, count: 3, input_tokens: 64, output_tokens: 2}
";

const TRACE: &str =
    "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 2, \"hash_ids\": [1]}\n";

/// A temp tree with `exp/s.yaml` (the tiny scenario), `exp/t.jsonl` (a trace) and
/// `exp/notes.txt`.
fn experiment() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let exp = tmp.path().join("exp");
    fs::create_dir(&exp).unwrap();
    fs::write(exp.join("s.yaml"), TINY_SCENARIO).unwrap();
    fs::write(exp.join("t.jsonl"), TRACE).unwrap();
    fs::write(exp.join("notes.txt"), "mine").unwrap();
    (tmp, exp)
}

/// Every path under `root` with its bytes (directories as `None`).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                pending.push(path.clone());
                out.insert(path, None);
            } else {
                out.insert(path.clone(), Some(fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// Runs `args` in `cwd`; returns (exit code, stderr).
fn run_in(cwd: &Path, args: &[&str]) -> (i32, String) {
    let (code, _, stderr) = run_in_dir(cwd, args);
    (code, stderr)
}

/// Asserts that `args` run in `cwd` exit 2 naming `names`, and change nothing under `root`.
fn assert_refused(root: &Path, cwd: &Path, args: &[&str], names: &[&str]) {
    let before = snapshot(root);
    let (code, stderr) = run_in(cwd, args);
    assert_eq!(code, 2, "{args:?}: {stderr}");
    assert!(stderr.contains("refusing"), "{args:?}: {stderr}");
    for name in names {
        assert!(
            stderr.contains(name),
            "{args:?}: {stderr} should name {name}"
        );
    }
    assert_eq!(snapshot(root), before, "{args:?} changed the tree");
}

#[test]
fn run_out_the_scenarios_own_directory_is_refused() {
    let (tmp, exp) = experiment();
    assert_refused(
        tmp.path(),
        tmp.path(),
        &["run", "exp/s.yaml", "--out", "exp"],
        &["exp"],
    );
    assert_refused(
        tmp.path(),
        &exp,
        &["run", "s.yaml", "--out", "../exp", "--force"],
        &["exp"],
    );
}

#[test]
fn run_out_dot_and_dotdot_and_root_are_refused() {
    let (tmp, exp) = experiment();
    for out in [".", "..", "/", "./", "../.."] {
        assert_refused(tmp.path(), &exp, &["run", "s.yaml", "--out", out], &[]);
    }
}

#[test]
fn run_out_a_users_directory_is_refused() {
    let (tmp, _) = experiment();
    let user = tmp.path().join("photos");
    fs::create_dir(&user).unwrap();
    fs::write(user.join("cat.jpg"), "meow").unwrap();
    for command in [
        vec!["run", "exp/s.yaml", "--out", "photos"],
        vec!["run", "exp/s.yaml", "--out", "photos", "--force"],
        vec!["replay", "--trace", "exp/t.jsonl", "--out", "photos"],
        vec![
            "sweep",
            "exp/s.yaml",
            "--set",
            "seed=1,2",
            "--out",
            "photos",
        ],
    ] {
        assert_refused(tmp.path(), tmp.path(), &command, &["photos", "cat.jpg"]);
    }
}

/// A replay starts reading its trace while it claims its output directory; a refused
/// directory is still the error it reports, before a trace it cannot read.
#[test]
fn a_refused_directory_is_reported_before_an_unreadable_trace() {
    let (tmp, _) = experiment();
    let user = tmp.path().join("photos");
    fs::create_dir(&user).unwrap();
    fs::write(user.join("cat.jpg"), "meow").unwrap();
    for trace in ["exp/missing.jsonl", "exp"] {
        let args = ["replay", "--trace", trace, "--out", "photos"];
        assert_refused(tmp.path(), tmp.path(), &args, &["photos", "cat.jpg"]);
    }
    let (code, stderr) = run_in(
        tmp.path(),
        &["replay", "--trace", "exp/missing.jsonl", "--out", "fresh"],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("exp/missing.jsonl"), "{stderr}");
    assert!(
        !tmp.path().join("fresh").exists(),
        "an output without a trace"
    );
}

#[test]
fn run_out_an_existing_file_is_refused_and_leaves_no_stage() {
    let (tmp, _) = experiment();
    fs::write(tmp.path().join("out"), "a file").unwrap();
    assert_refused(
        tmp.path(),
        tmp.path(),
        &["replay", "--trace", "exp/t.jsonl", "--out", "out"],
        &["out", "not a directory"],
    );
    assert_refused(
        tmp.path(),
        tmp.path(),
        &["run", "exp/s.yaml", "--out", "out"],
        &["out"],
    );
}

#[test]
fn replay_out_the_traces_directory_is_refused() {
    let (tmp, _) = experiment();
    assert_refused(
        tmp.path(),
        tmp.path(),
        &["replay", "--trace", "exp/t.jsonl", "--out", "exp"],
        &["exp", "t.jsonl"],
    );
}

#[test]
fn rerun_into_its_own_output_replaces_its_files_and_keeps_the_users() {
    let (tmp, _) = experiment();
    let (code, stderr) = run_in(
        tmp.path(),
        &["run", "exp/s.yaml", "--quiet", "--out", "out"],
    );
    assert_eq!(code, 0, "{stderr}");
    let out = tmp.path().join("out");
    let first = fs::read(out.join("requests.csv")).unwrap();
    fs::write(out.join("analysis.ipynb"), "mine").unwrap();
    let (code, stderr) = run_in(
        tmp.path(),
        &["run", "exp/s.yaml", "--quiet", "--out", "out"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(fs::read(out.join("requests.csv")).unwrap(), first);
    assert_eq!(
        fs::read_to_string(out.join("analysis.ipynb")).unwrap(),
        "mine"
    );
    // Another command's output needs --force, which still keeps the user's file.
    let replay = [
        "replay",
        "--trace",
        "exp/t.jsonl",
        "--quiet",
        "--out",
        "out",
    ];
    assert_refused(
        tmp.path(),
        tmp.path(),
        &replay,
        &["routersim run", "--force"],
    );
    let (code, stderr) = run_in(tmp.path(), &[&replay[..], &["--force"]].concat());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        fs::read_to_string(out.join("analysis.ipynb")).unwrap(),
        "mine"
    );
}

#[test]
fn run_without_out_writes_only_under_results() {
    let (tmp, _) = experiment();
    let (code, stderr) = run_in(tmp.path(), &["run", "exp/s.yaml", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(tmp.path().join("results/tiny/requests.csv").exists());
    assert_eq!(
        fs::read_to_string(tmp.path().join("exp/notes.txt")).unwrap(),
        "mine"
    );
}

#[test]
fn merge_out_a_shard_directory_is_refused() {
    let (tmp, _) = experiment();
    for k in 1..=2 {
        let (code, stderr) = run_in(
            tmp.path(),
            &[
                "sweep",
                "exp/s.yaml",
                "--set",
                "seed=1,2",
                "--quiet",
                "--shard",
                &format!("{k}/2"),
                "--out",
                &format!("s{k}"),
            ],
        );
        assert_eq!(code, 0, "{stderr}");
    }
    assert_refused(
        tmp.path(),
        tmp.path(),
        &["merge", "s1", "s2", "--out", "s1"],
        &["s1", "input"],
    );
    let (code, stderr) = run_in(tmp.path(), &["merge", "s1", "s2", "--out", "whole"]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn junit_over_a_users_file_is_refused() {
    let (tmp, _) = experiment();
    assert_refused(
        tmp.path(),
        tmp.path(),
        &["check", "exp/s.yaml", "--junit", "exp/notes.txt"],
        &["notes.txt", "did not write"],
    );
    let (code, stderr) = run_in(tmp.path(), &["check", "exp/s.yaml", "--junit", "j.xml"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr) = run_in(tmp.path(), &["check", "exp/s.yaml", "--junit", "j.xml"]);
    assert_eq!(code, 0, "a rerun replaces its own report: {stderr}");
}

#[test]
fn help_of_every_writing_command_says_what_happens_to_an_existing_directory() {
    for command in ["run", "replay", "sweep", "merge"] {
        let out = routersim().args([command, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("refused") && help.contains("keeps every other file"),
            "{command} --help: {help}"
        );
    }
}

/// The stage directories in `dir`.
fn stages_in(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("routersim-stage"))
        .collect()
}

#[test]
fn sigint_during_replay_write_phase_leaves_no_stage() {
    let (tmp, _) = experiment();
    let args = [
        "replay",
        "--trace",
        "exp/t.jsonl",
        "--quiet",
        "--out",
        "out",
    ];
    let (mut child, staged, _) = spawn_held_in_write_phase(tmp.path(), &args, 20_000);
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(staged, "the replay never reached its write phase");
    assert_eq!(status.code(), Some(130), "interrupted, not finished");
    assert!(
        stages_in(tmp.path()).is_empty(),
        "{:?}",
        stages_in(tmp.path())
    );
    assert!(!tmp.path().join("out").exists(), "nothing half-written");
}

#[test]
fn a_killed_runs_stage_is_cleaned_by_the_next_run_and_nothing_else() {
    let (tmp, _) = experiment();
    fs::create_dir(tmp.path().join(".out.routersim-stage-notapid")).unwrap();
    let args = ["run", "exp/s.yaml", "--quiet", "--out", "out"];
    let (mut child, staged, _) = spawn_held_in_write_phase(tmp.path(), &args, 20_000);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(staged, "the run never reached its write phase");
    assert_eq!(stages_in(tmp.path()).len(), 2, "SIGKILL leaves the stage");
    let (code, stderr) = run_in(
        tmp.path(),
        &["run", "exp/s.yaml", "--quiet", "--out", "out"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stages_in(tmp.path()),
        vec![".out.routersim-stage-notapid".to_string()],
        "only the dead process's stage is removed"
    );
}

/// One command of the random file-safety test, run against a chosen target.
#[derive(Clone, Debug)]
enum Step {
    Run { force: bool },
    Replay,
    Sweep,
    Merge,
}

fn step() -> impl Strategy<Value = (Step, usize)> {
    let steps = prop_oneof![
        any::<bool>().prop_map(|force| Step::Run { force }),
        Just(Step::Replay),
        Just(Step::Sweep),
        Just(Step::Merge),
    ];
    (steps, 0..TARGETS.len())
}

/// `--out` targets relative to the tree root: user directories, files, inputs, new paths.
const TARGETS: [&str; 10] = [
    "exp",
    "exp/notes.txt",
    "docs",
    "docs/deep",
    "new",
    "new/a/b",
    ".",
    "..",
    "shard",
    "docs/..",
];

fn args_for(step: &Step, out: &str) -> Vec<String> {
    let args: Vec<&str> = match step {
        Step::Run { force: false } => vec!["run", "exp/s.yaml", "--quiet"],
        Step::Run { force: true } => vec!["run", "exp/s.yaml", "--quiet", "--force"],
        Step::Replay => vec!["replay", "--trace", "exp/t.jsonl", "--quiet"],
        Step::Sweep => vec!["sweep", "exp/s.yaml", "--set", "seed=1", "--quiet"],
        Step::Merge => vec!["merge", "shard"],
    };
    let mut args: Vec<String> = args.into_iter().map(String::from).collect();
    args.extend(["--out".to_string(), out.to_string()]);
    args
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Random --out targets in a tree of user files never lose or change a user file,
    /// whatever sequence of run/replay/sweep/merge is thrown at them.
    #[test]
    fn random_out_targets_never_lose_a_user_file(
        user_files in proptest::collection::btree_map(
            prop_oneof![Just("docs/a.md"), Just("docs/deep/requests.csv"), Just("top.txt"),
                        Just("docs/deep/sweep.csv"), Just("new-not/x")],
            "[a-z]{1,6}", 0..4),
        steps in proptest::collection::vec(step(), 1..5),
    ) {
        let (tmp, _) = experiment();
        let root = tmp.path().join("root");
        fs::create_dir(&root).unwrap();
        let work = root.join("work");
        fs::create_dir(&work).unwrap();
        for name in ["s.yaml", "t.jsonl", "notes.txt"] {
            let dest = work.join("exp").join(name);
            fs::create_dir_all(dest.parent().unwrap()).unwrap();
            fs::copy(tmp.path().join("exp").join(name), dest).unwrap();
        }
        for (path, text) in &user_files {
            let path = work.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, text).unwrap();
        }
        run_in(&work, &["sweep", "exp/s.yaml", "--set", "seed=1", "--quiet",
                        "--shard", "1/1", "--out", "shard"]);
        let user: BTreeMap<PathBuf, Option<Vec<u8>>> = snapshot(&root)
            .into_iter()
            .filter(|(p, bytes)| bytes.is_some() && !p.starts_with(work.join("shard")))
            .collect();
        for (step, target) in &steps {
            let args = args_for(step, TARGETS[*target]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_in(&work, &args);
        }
        let after = snapshot(&root);
        for (path, bytes) in &user {
            prop_assert_eq!(after.get(path), Some(bytes), "{} was lost", path.display());
        }
        let stages: Vec<&PathBuf> = after.keys()
            .filter(|p| p.to_string_lossy().contains("routersim-stage")).collect();
        prop_assert!(stages.is_empty(), "{:?}", stages);
    }
}

/// A bundled scenario, by file name.
fn bundled(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
}

#[test]
fn a_hand_written_marker_listing_a_users_file_never_deletes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = bundled("premium-vs-regular-weighted.yaml");
    let scenario = scenario.to_str().unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("notes.txt"), "precious\n").unwrap();
    for (command, hint) in [("run", "older routersim"), ("tune", "`routersim tune`")] {
        let marker = format!(r#"{{"files": ["notes.txt"], "routersim_output": "{command}"}}"#);
        fs::write(out.join(".routersim-output.json"), &marker).unwrap();
        for force in [&[][..], &["--force"]] {
            let args = [&["run", scenario, "--out", "out", "--quiet"], force].concat();
            assert_refused(tmp.path(), tmp.path(), &args, &["out", hint]);
        }
    }
    assert_eq!(
        fs::read_to_string(out.join("notes.txt")).unwrap(),
        "precious\n"
    );
}

#[test]
fn a_fake_stale_stage_beside_the_target_keeps_its_files() {
    let (tmp, _) = experiment();
    let fake = tmp.path().join(".y.routersim-stage-4000000");
    fs::create_dir(&fake).unwrap();
    fs::write(fake.join(".routersim-stage"), "").unwrap();
    fs::write(fake.join("thesis.tex"), "three years").unwrap();
    let before = snapshot(&fake);
    let (code, stderr) = run_in(tmp.path(), &["run", "exp/s.yaml", "--quiet", "--out", "y"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        snapshot(&fake),
        before,
        "a folder routersim cannot prove is its own"
    );
    assert!(tmp.path().join("y/requests.csv").exists());
}

#[test]
fn an_output_file_edited_after_the_run_stops_the_rerun_before_the_simulation() {
    let tmp = tempfile::tempdir().unwrap();
    let scenario = bundled("premium-vs-regular-weighted.yaml");
    let scenario = scenario.to_str().unwrap();
    let (code, _, stderr) = run_in_dir(tmp.path(), &["run", scenario, "--out", "out", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    let classes = tmp.path().join("out/classes.csv");
    let mut edited = fs::read(&classes).unwrap();
    edited.extend_from_slice(b"my note\n");
    fs::write(&classes, &edited).unwrap();
    let before = snapshot(tmp.path());
    for force in [&[][..], &["--force"]] {
        // Without --quiet a run that started would print its summary: nothing is printed.
        let args = [&["run", scenario, "--out", "out"], force].concat();
        let (code, stdout, stderr) = run_in_dir(tmp.path(), &args);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("`classes.csv`"), "{stderr}");
        assert_eq!(stdout, "", "refused before the simulation");
        assert_eq!(snapshot(tmp.path()), before);
    }
    assert_eq!(fs::read(&classes).unwrap(), edited);
}

#[test]
fn a_240_byte_out_name_is_written_and_rewritten() {
    let (tmp, _) = experiment();
    let name = "r".repeat(240);
    for _ in 0..2 {
        let (code, stderr) = run_in(
            tmp.path(),
            &["run", "exp/s.yaml", "--quiet", "--out", &name],
        );
        assert_eq!(code, 0, "{stderr}");
    }
    assert!(tmp.path().join(&name).join("requests.csv").exists());
    assert!(
        stages_in(tmp.path()).is_empty(),
        "{:?}",
        stages_in(tmp.path())
    );
}

#[test]
fn an_out_name_too_long_for_a_file_name_is_refused_before_the_run() {
    let (tmp, _) = experiment();
    let name = "r".repeat(256);
    let before = snapshot(tmp.path());
    let (code, stdout, stderr) = run_in_dir(tmp.path(), &["run", "exp/s.yaml", "--out", &name]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("256 bytes"), "{stderr}");
    assert_eq!(stdout, "", "refused before the run");
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn junit_over_a_users_file_is_refused_before_any_scenario_runs() {
    let (tmp, _) = experiment();
    let (code, stdout, stderr) = run_in_dir(
        tmp.path(),
        &["check", "exp/s.yaml", "--junit", "exp/notes.txt"],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("notes.txt"), "{stderr}");
    assert_eq!(stdout, "", "no scenario was checked");
}

#[test]
fn the_readme_run_over_the_committed_results_leaves_them_byte_identical() {
    // As on a fresh clone: the committed output, then the README's command, which writes
    // into results/premium-vs-regular-weighted/.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let committed = root.join("results/premium-vs-regular-weighted");
    let copy = tmp.path().join("results/premium-vs-regular-weighted");
    fs::create_dir_all(&copy).unwrap();
    for entry in fs::read_dir(&committed).unwrap().flatten() {
        fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    let before = snapshot(tmp.path());
    let scenario = bundled("premium-vs-regular-weighted.yaml");
    let (code, _, stderr) = run_in_dir(tmp.path(), &["run", scenario.to_str().unwrap(), "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(snapshot(tmp.path()), before);
}
