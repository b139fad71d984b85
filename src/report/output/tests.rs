//! Output safety: what routersim may write where, and that a user's files survive everything.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn files(names: &[&str]) -> Vec<(String, Vec<u8>)> {
    names
        .iter()
        .map(|n| (n.to_string(), format!("{n} bytes").into_bytes()))
        .collect()
}

fn entries(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_new_directory_gets_the_files_and_a_marker_and_no_stage_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("a/b/out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv", "y.csv"])).unwrap();
    assert_eq!(entries(&out), set(&["x.csv", "y.csv", MARKER]));
    assert_eq!(entries(out.parent().unwrap()), set(&["out"]));
    let (kind, listed) = read_marker(&out).unwrap();
    assert_eq!((kind.as_str(), listed), ("run", set(&["x.csv", "y.csv"])));
}

#[test]
fn a_rerun_replaces_only_its_own_files_and_keeps_the_users() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv", "old.png"])).unwrap();
    fs::write(out.join("notes.txt"), "mine").unwrap();
    write_dir(&out, OutputKind::Run, &files(&["x.csv", "new.png"])).unwrap();
    assert_eq!(
        entries(&out),
        set(&["x.csv", "new.png", "notes.txt", MARKER])
    );
    assert_eq!(fs::read_to_string(out.join("notes.txt")).unwrap(), "mine");
    assert_eq!(read_marker(&out).unwrap().1, set(&["x.csv", "new.png"]));
    assert_eq!(entries(tmp.path()), set(&["out"]), "no stage is left");
}

#[test]
fn an_empty_directory_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    write_dir(&out, OutputKind::Sweep, &files(&["sweep.csv"])).unwrap();
    assert_eq!(entries(&out), set(&["sweep.csv", MARKER]));
}

#[test]
fn a_users_directory_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("exp");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("s.yaml"), "name: s").unwrap();
    let e = claim(&out, OutputKind::Run, &[], true).unwrap_err();
    assert!(e.0.contains("exp") && e.0.contains("s.yaml"), "{e}");
    assert!(write_dir(&out, OutputKind::Run, &files(&["x.csv"])).is_err());
    assert_eq!(entries(&out), set(&["s.yaml"]));
    assert_eq!(entries(tmp.path()), set(&["exp"]));
}

#[test]
fn an_existing_regular_file_is_refused_and_no_stage_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    fs::write(&out, "a file").unwrap();
    let e = write_dir(&out, OutputKind::Replay, &files(&["x.csv"])).unwrap_err();
    assert!(e.0.contains("not a directory"), "{e}");
    assert_eq!(fs::read_to_string(&out).unwrap(), "a file");
    assert_eq!(entries(tmp.path()), set(&["out"]));
}

#[test]
fn another_kind_needs_force_and_force_still_keeps_user_files() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Sweep, &files(&["sweep.csv"])).unwrap();
    fs::write(out.join("mine.txt"), "mine").unwrap();
    let e = write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap_err();
    assert!(
        e.0.contains("routersim sweep") && e.0.contains("--force"),
        "{e}"
    );
    claim(&out, OutputKind::Run, &[], true)
        .unwrap()
        .write(&files(&["x.csv"]))
        .unwrap();
    assert_eq!(entries(&out), set(&["x.csv", "mine.txt", MARKER]));
}

#[test]
fn a_user_file_with_an_output_name_is_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap();
    fs::write(out.join("y.csv"), "mine").unwrap();
    let e = write_dir(&out, OutputKind::Run, &files(&["x.csv", "y.csv"])).unwrap_err();
    assert!(e.0.contains("y.csv"), "{e}");
    assert_eq!(fs::read_to_string(out.join("y.csv")).unwrap(), "mine");
}

#[test]
fn a_listed_file_the_user_replaced_by_a_directory_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv", "old.csv"])).unwrap();
    fs::remove_file(out.join("old.csv")).unwrap();
    fs::create_dir(out.join("old.csv")).unwrap();
    fs::write(out.join("old.csv/kept"), "mine").unwrap();
    write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap();
    assert!(out.join("old.csv/kept").exists());
}

#[test]
fn an_edited_marker_cannot_point_outside_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(tmp.path().join("victim"), "mine").unwrap();
    let marker = r#"{"routersim_output": "run", "files": ["../victim", "/etc/passwd", "."]}"#;
    fs::write(out.join(MARKER), marker).unwrap();
    write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap();
    assert_eq!(
        fs::read_to_string(tmp.path().join("victim")).unwrap(),
        "mine"
    );
}

#[test]
fn a_foreign_marker_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join(MARKER), "not json").unwrap();
    let e = write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap_err();
    assert!(e.0.contains("not a routersim marker"), "{e}");
}

#[test]
fn dot_dotdot_root_and_the_working_directorys_parents_are_refused() {
    for dir in [".", "..", "/", "./", "a/..", "../.."] {
        let e = claim(Path::new(dir), OutputKind::Run, &[], true).unwrap_err();
        assert!(e.0.starts_with("refusing"), "{dir}: {e}");
    }
    let cwd = std::env::current_dir().unwrap();
    let parent = cwd.parent().unwrap().to_path_buf();
    for dir in [cwd, parent] {
        let e = claim(&dir, OutputKind::Run, &[], true).unwrap_err();
        assert!(e.0.contains("working directory"), "{e}");
    }
}

#[test]
fn the_home_directory_is_refused() {
    let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
        return;
    };
    if fs::canonicalize(&home).is_err() {
        return;
    }
    let e = claim(&home, OutputKind::Run, &[], true).unwrap_err();
    assert!(
        e.0.contains("home") || e.0.contains("working directory"),
        "{e}"
    );
}

#[test]
fn a_directory_holding_an_input_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let exp = tmp.path().join("exp");
    fs::create_dir_all(exp.join("deep")).unwrap();
    let input = exp.join("deep/s.yaml");
    fs::write(&input, "x").unwrap();
    let e = claim(&exp, OutputKind::Run, std::slice::from_ref(&input), false).unwrap_err();
    assert!(e.0.contains("s.yaml") && e.0.contains("input"), "{e}");
    // The same input through another spelling of the path is still found.
    let other = exp.join("deep/../deep/s.yaml");
    assert!(claim(&exp.join("deep"), OutputKind::Run, &[other], false).is_err());
}

#[test]
fn a_path_climbing_out_of_a_missing_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let e = claim(
        &tmp.path().join("missing/../x"),
        OutputKind::Run,
        &[],
        false,
    )
    .unwrap_err();
    assert!(e.0.contains("climbs"), "{e}");
}

#[test]
fn stale_stages_of_dead_processes_are_removed_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let dead = tmp.path().join(".out.routersim-stage-4000000000");
    fs::create_dir(&dead).unwrap();
    fs::write(dead.join(STAGE_MARKER), "").unwrap();
    fs::write(dead.join("requests.csv"), "half").unwrap();
    let unproven = tmp.path().join(".out.routersim-stage-4000000001");
    fs::create_dir(&unproven).unwrap();
    fs::write(unproven.join("mine"), "mine").unwrap();
    let other_target = tmp.path().join(".other.routersim-stage-4000000000");
    fs::create_dir(&other_target).unwrap();
    fs::write(other_target.join(STAGE_MARKER), "").unwrap();
    write_dir(&tmp.path().join("out"), OutputKind::Run, &files(&["x.csv"])).unwrap();
    assert!(!dead.exists(), "a dead process's stage is removed");
    assert!(
        unproven.join("mine").exists(),
        "a stage without proof is kept"
    );
    assert!(
        other_target.exists(),
        "another target's stage is not touched"
    );
}

#[test]
fn a_single_file_is_replaced_only_if_routersim_wrote_it() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("ci/junit.xml");
    let ours = format!("<?xml?>\n{JUNIT_SIGNATURE} tests=\"1\">");
    write_file(&file, ours.as_bytes(), JUNIT_SIGNATURE).unwrap();
    write_file(&file, ours.as_bytes(), JUNIT_SIGNATURE).unwrap();
    assert_eq!(entries(file.parent().unwrap()), set(&["junit.xml"]));
    let user = tmp.path().join("report.xml");
    fs::write(&user, "<mine/>").unwrap();
    let e = write_file(&user, ours.as_bytes(), JUNIT_SIGNATURE).unwrap_err();
    assert!(e.0.contains("did not write"), "{e}");
    assert_eq!(fs::read_to_string(&user).unwrap(), "<mine/>");
    assert!(write_file(tmp.path(), b"x", JUNIT_SIGNATURE).is_err());
}

/// A step of the random file-safety test: write an output of some kind, maybe forced, into
/// one of the tree's directories.
#[derive(Clone, Debug)]
struct WriteStep {
    target: usize,
    kind: OutputKind,
    force: bool,
    names: Vec<&'static str>,
}

fn write_step() -> impl Strategy<Value = WriteStep> {
    let kinds = prop_oneof![
        Just(OutputKind::Run),
        Just(OutputKind::Replay),
        Just(OutputKind::Sweep)
    ];
    let names = proptest::sample::subsequence(
        vec![
            "requests.csv",
            "summary.json",
            "a.png",
            "notes.txt",
            "sweep.csv",
        ],
        1..4,
    );
    (0usize..8, kinds, any::<bool>(), names).prop_map(|(target, kind, force, names)| WriteStep {
        target,
        kind,
        force,
        names,
    })
}

/// The candidate targets inside the tree: existing user directories, a user file, new paths.
const TARGETS: [&str; 8] = [
    "u1",
    "u1/sub",
    "u2",
    "u2/file.txt",
    "new",
    "new/deeper",
    "u1/sub/..",
    "empty",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random writes into a tree of user files never change or remove a user file.
    #[test]
    fn random_writes_never_lose_a_user_file(
        user_files in proptest::collection::btree_map(
            prop_oneof![Just("u1/a.txt"), Just("u1/sub/requests.csv"), Just("u2/file.txt"),
                        Just("u2/notes.txt"), Just("top.txt"), Just("u1/sub/b")],
            "[a-z]{1,8}", 1..6),
        steps in proptest::collection::vec(write_step(), 1..8),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir_all(root.join("empty")).unwrap();
        let mut expected: BTreeMap<PathBuf, String> = BTreeMap::new();
        for (path, text) in &user_files {
            let path = root.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, text).unwrap();
            expected.insert(path, text.clone());
        }
        for step in &steps {
            let target = root.join(TARGETS[step.target]);
            if let Ok(out) = claim(&target, step.kind, &[], step.force) {
                let _ = out.write(&files(&step.names));
            }
        }
        for (path, text) in &expected {
            let found = fs::read_to_string(path).ok();
            prop_assert_eq!(found.as_ref(), Some(text), "{}", path.display());
        }
        let stages: Vec<String> = walk(root).into_iter()
            .filter(|p| p.contains(STAGE_INFIX)).collect();
        prop_assert!(stages.is_empty(), "stages left: {:?}", stages);
    }
}

/// Every path under `root`, as strings.
fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            out.push(path.display().to_string());
            if entry.file_type().unwrap().is_dir() {
                pending.push(path);
            }
        }
    }
    out
}
