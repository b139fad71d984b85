//! Output safety: what routersim may write where, and that a user's files survive everything.

use super::stage::{STAGE_INFIX, STAGE_MARKER};
use super::*;
use crate::report::render::plots::file_name_part;
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

/// The names the marker of `dir` lists.
fn listed(dir: &Path) -> BTreeSet<String> {
    read_marker(dir).unwrap().proofs.into_keys().collect()
}

/// Proofs of (name, bytes) pairs, a name possibly twice.
fn proofs_of(entries: &[(&str, &[u8])]) -> Proofs {
    proof::proofs_of(entries.iter().copied())
}

#[test]
fn a_new_directory_gets_the_files_and_a_marker_and_no_stage_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("a/b/out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv", "y.csv"])).unwrap();
    assert_eq!(entries(&out), set(&["x.csv", "y.csv", MARKER]));
    assert_eq!(entries(out.parent().unwrap()), set(&["out"]));
    let marker = read_marker(&out).unwrap();
    assert_eq!(
        marker,
        Marker {
            kind: OutputKind::Run,
            proofs: proofs_of(&[("x.csv", b"x.csv bytes"), ("y.csv", b"y.csv bytes")]),
            proof: Proof::of(&fs::read(out.join(MARKER)).unwrap()),
        }
    );
}

#[test]
fn a_streamed_file_lands_byte_for_byte_and_its_marker_proves_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let rows = |w: &mut dyn std::io::Write| -> std::io::Result<()> {
        (0..10_000).try_for_each(|i| writeln!(w, "{i},row {i}"))
    };
    let expected = FileBody::streamed(rows).to_bytes().unwrap();
    let bodies = vec![
        ("rows.csv".to_string(), FileBody::streamed(rows)),
        ("x.csv".to_string(), b"x".to_vec().into()),
    ];
    let target = claim(&out, OutputKind::Run, &[], false).unwrap();
    target.write_bodies(&bodies).unwrap();
    assert_eq!(fs::read(out.join("rows.csv")).unwrap(), expected);
    assert_eq!(
        read_marker(&out).unwrap().proofs,
        proofs_of(&[("rows.csv", &expected), ("x.csv", b"x")])
    );
    assert_eq!(entries(tmp.path()), set(&["out"]));
}

/// Writes `rows` rows and tells which thread formatted them.
fn rows_from_a_thread(
    rows: usize,
    formatted_on: &std::sync::Mutex<Vec<std::thread::ThreadId>>,
) -> FileBody<'_> {
    FileBody::streamed_rows(rows, move |w: &mut dyn std::io::Write| {
        formatted_on
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        (0..rows).try_for_each(|i| writeln!(w, "{i},row {i}"))
    })
}

/// Writes `body` as `rows.csv`, beside a small `x.csv`, into the new directory `out`.
fn write_rows_beside_x(out: &Path, body: FileBody<'_>) {
    let bodies = vec![
        ("rows.csv".to_string(), body),
        ("x.csv".to_string(), b"x".to_vec().into()),
    ];
    let target = claim(out, OutputKind::Run, &[], false).unwrap();
    target.write_bodies(&bodies).unwrap();
}

/// Checks what [`write_rows_beside_x`] left in `tmp`: `rows` rows formatted once, on another
/// thread than this one if `elsewhere`, landed as `expected` with their proof, and nothing
/// else beside the output.
fn assert_rows_landed(
    tmp: &Path,
    rows: usize,
    expected: &[u8],
    formatted_on: &std::sync::Mutex<Vec<std::thread::ThreadId>>,
    elsewhere: bool,
) {
    let out = tmp.join("out");
    let threads = formatted_on.lock().unwrap().clone();
    assert_eq!(threads.len(), 1, "{rows} rows: formatted once");
    assert_eq!(
        threads[0] != std::thread::current().id(),
        elsewhere,
        "{rows} rows"
    );
    assert_eq!(fs::read(out.join("rows.csv")).unwrap(), expected);
    assert_eq!(
        read_marker(&out).unwrap().proofs,
        proofs_of(&[("rows.csv", expected), ("x.csv", b"x")])
    );
    assert_eq!(entries(tmp), set(&["out"]));
}

#[test]
fn a_mid_sized_streamed_body_is_formatted_on_another_thread_and_lands_byte_for_byte() {
    for (rows, elsewhere) in [(10, false), (1000, true), (8192, true), (10_000, false)] {
        let tmp = tempfile::tempdir().unwrap();
        let formatted_on = std::sync::Mutex::new(Vec::new());
        let body = rows_from_a_thread(rows, &formatted_on);
        let expected = body.to_bytes().unwrap();
        formatted_on.lock().unwrap().clear();
        write_rows_beside_x(&tmp.path().join("out"), body);
        assert_rows_landed(tmp.path(), rows, &expected, &formatted_on, elsewhere);
    }
}

#[test]
fn a_body_started_ahead_is_formatted_before_the_write_on_another_thread_and_lands_alike() {
    for (rows, elsewhere) in [(10, false), (1000, true), (10_000, false)] {
        let tmp = tempfile::tempdir().unwrap();
        let formatted_on = std::sync::Mutex::new(Vec::new());
        let expected = rows_from_a_thread(rows, &formatted_on).to_bytes().unwrap();
        formatted_on.lock().unwrap().clear();
        std::thread::scope(|scope| {
            let body = rows_from_a_thread(rows, &formatted_on).start_ahead(scope);
            let started = matches!(body, FileBody::Started(_));
            assert_eq!(started, elsewhere, "{rows} rows");
            if elsewhere {
                // Under way before any file is written: the caller's work overlaps it.
                let under_way = (0..10_000).any(|_| {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    !formatted_on.lock().unwrap().is_empty()
                });
                assert!(under_way, "{rows} rows: formatting started");
            }
            write_rows_beside_x(&tmp.path().join("out"), body);
        });
        assert_rows_landed(tmp.path(), rows, &expected, &formatted_on, elsewhere);
    }
}

#[test]
fn a_body_started_ahead_whose_formatting_fails_leaves_nothing_behind() {
    let broken = |_: &mut dyn std::io::Write| -> std::io::Result<()> {
        Err(std::io::Error::other("the exporter failed"))
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let err = std::thread::scope(|scope| {
        let bodies = vec![
            (
                "rows.csv".to_string(),
                FileBody::streamed_rows(1000, broken).start_ahead(scope),
            ),
            ("x.csv".to_string(), b"x".to_vec().into()),
        ];
        let target = claim(&out, OutputKind::Run, &[], false).unwrap();
        target.write_bodies(&bodies).unwrap_err()
    });
    assert!(err.0.contains("the exporter failed"), "{}", err.0);
    assert!(err.0.contains("rows.csv"), "the file is named: {}", err.0);
    assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
}

#[test]
fn a_streamed_file_whose_write_fails_leaves_nothing_behind() {
    let broken = |_: &mut dyn std::io::Write| -> std::io::Result<()> {
        Err(std::io::Error::other("the exporter failed"))
    };
    // Formatted in place, and ahead on a thread of its own beside another file.
    let cases = [
        vec![("rows.csv".to_string(), FileBody::streamed(broken))],
        vec![
            (
                "rows.csv".to_string(),
                FileBody::streamed_rows(1000, broken),
            ),
            ("x.csv".to_string(), b"x".to_vec().into()),
        ],
    ];
    for bodies in cases {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let target = claim(&out, OutputKind::Run, &[], false).unwrap();
        let err = target.write_bodies(&bodies).unwrap_err();
        assert!(err.0.contains("the exporter failed"), "{}", err.0);
        assert!(err.0.contains("rows.csv"), "the file is named: {}", err.0);
        assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
    }
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
    assert_eq!(listed(&out), set(&["x.csv", "new.png"]));
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
fn a_listed_file_the_user_replaced_by_a_directory_stops_the_write_and_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv", "old.csv"])).unwrap();
    fs::remove_file(out.join("old.csv")).unwrap();
    fs::create_dir(out.join("old.csv")).unwrap();
    fs::write(out.join("old.csv/kept"), "mine").unwrap();
    let e = write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap_err();
    assert!(e.0.contains("`old.csv`"), "{e}");
    assert!(out.join("old.csv/kept").exists());
    assert_eq!(fs::read(out.join("x.csv")).unwrap(), b"x.csv bytes");
}

#[test]
fn an_edited_marker_cannot_point_outside_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(tmp.path().join("victim"), "mine").unwrap();
    let proof = proof::proofs_json(&proofs_of(&[("x", b"mine")]))[0].clone();
    for name in ["../victim", "/etc/passwd", ".", MARKER, STAGE_MARKER] {
        let mut entry = proof.clone();
        entry["name"] = name.into();
        let marker = serde_json::json!({"routersim_output": "run", "files": [entry]});
        fs::write(out.join(MARKER), marker.to_string()).unwrap();
        let e = claim(&out, OutputKind::Run, &[], true).unwrap_err();
        assert!(e.0.contains("not a marker routersim wrote"), "{name}: {e}");
    }
    assert_eq!(
        fs::read_to_string(tmp.path().join("victim")).unwrap(),
        "mine"
    );
}

#[test]
fn a_marker_that_does_not_parse_is_a_foreign_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    for text in [
        "not json",
        "[]",
        r#"{"routersim_output": "run"}"#,
        r#"{"routersim_output": "run", "files": [], "extra": 1}"#,
    ] {
        fs::write(out.join(MARKER), text).unwrap();
        for force in [false, true] {
            let e = claim(&out, OutputKind::Run, &[], force).unwrap_err();
            assert!(e.0.contains("not a marker routersim wrote"), "{text}: {e}");
        }
    }
}

#[test]
fn a_hand_written_old_format_marker_never_costs_the_user_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("notes.txt"), "precious\n").unwrap();
    let marker = r#"{"files": ["notes.txt"], "routersim_output": "run"}"#;
    fs::write(out.join(MARKER), marker).unwrap();
    for force in [false, true] {
        let e = claim(&out, OutputKind::Run, &[], force).unwrap_err();
        assert!(
            e.0.contains("older routersim") && e.0.contains("move or delete the directory"),
            "{e}"
        );
        let e = write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap_err();
        assert!(e.0.contains("older routersim"), "{e}");
    }
    assert_eq!(entries(&out), set(&["notes.txt", MARKER]));
    assert_eq!(
        fs::read_to_string(out.join("notes.txt")).unwrap(),
        "precious\n"
    );
}

#[test]
fn a_marker_naming_an_unknown_command_is_refused_even_with_force() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("notes.txt"), "precious").unwrap();
    let listing = proof::proofs_json(&proofs_of(&[("notes.txt", b"precious")]));
    let marker = serde_json::json!({"routersim_output": "tune", "files": listing});
    fs::write(out.join(MARKER), marker.to_string()).unwrap();
    let e = claim(&out, OutputKind::Run, &[], true).unwrap_err();
    assert!(e.0.contains("`routersim tune`"), "{e}");
    assert_eq!(
        fs::read_to_string(out.join("notes.txt")).unwrap(),
        "precious"
    );
}

#[test]
fn an_output_file_edited_after_the_run_is_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv", "y.csv"])).unwrap();
    fs::write(out.join("y.csv"), "y.csv bytes, and my note").unwrap();
    for force in [false, true] {
        let e = claim(&out, OutputKind::Run, &[], force).unwrap_err();
        assert!(
            e.0.contains("`y.csv`") && e.0.contains("size changed"),
            "{e}"
        );
    }
    // The same size with other bytes is caught by the hash.
    fs::write(out.join("y.csv"), "Y.csv bytes").unwrap();
    let e = claim(&out, OutputKind::Run, &[], true).unwrap_err();
    assert!(
        e.0.contains("`y.csv`") && e.0.contains("content changed"),
        "{e}"
    );
    assert_eq!(
        fs::read_to_string(out.join("y.csv")).unwrap(),
        "Y.csv bytes"
    );
}

#[test]
fn an_output_file_edited_between_claim_and_write_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv", "old.csv"])).unwrap();
    let target = claim(&out, OutputKind::Run, &[], false).unwrap();
    fs::write(out.join("old.csv"), "edited while the run ran").unwrap();
    let e = target.write(&files(&["x.csv"])).unwrap_err();
    assert!(e.0.contains("`old.csv`"), "{e}");
    assert_eq!(
        fs::read_to_string(out.join("old.csv")).unwrap(),
        "edited while the run ran"
    );
    assert_eq!(entries(tmp.path()), set(&["out"]), "no stage is left");
}

#[test]
fn a_deleted_output_file_is_no_obstacle_to_a_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv", "y.csv"])).unwrap();
    fs::remove_file(out.join("y.csv")).unwrap();
    write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap();
    assert_eq!(entries(&out), set(&["x.csv", MARKER]));
    assert_eq!(listed(&out), set(&["x.csv"]));
}

#[test]
fn an_interrupted_replace_leaves_every_file_provable() {
    // A replace in progress lists the old and the new content of each name: whichever a
    // killed replace left in place, the next run proves it and goes on.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap();
    let old_and_new = proofs_of(&[("x.csv", b"x.csv bytes"), ("x.csv", b"new"), ("n", b"n")]);
    fs::write(out.join(MARKER), marker_json(OutputKind::Run, &old_and_new)).unwrap();
    for bytes in [&b"x.csv bytes"[..], b"new"] {
        fs::write(out.join("x.csv"), bytes).unwrap();
        write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap();
        fs::write(out.join(MARKER), marker_json(OutputKind::Run, &old_and_new)).unwrap();
    }
    fs::write(out.join("x.csv"), "neither").unwrap();
    assert!(write_dir(&out, OutputKind::Run, &files(&["x.csv"])).is_err());
}

#[test]
fn a_marker_that_is_a_link_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap();
    fs::rename(out.join(MARKER), tmp.path().join("m.json")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("m.json"), out.join(MARKER)).unwrap();
    let e = claim(&out, OutputKind::Run, &[], true).unwrap_err();
    assert!(e.0.contains("not a regular file"), "{e}");
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

/// A stage folder `name` in `parent` holding `files`, with a stage marker listing `listed`
/// (or the raw `marker` text).
fn fake_stage(
    parent: &Path,
    name: &str,
    files: &[(&str, &[u8])],
    marker: Option<&[(&str, &[u8])]>,
) -> PathBuf {
    let stage = parent.join(name);
    fs::create_dir(&stage).unwrap();
    for (file, bytes) in files {
        fs::write(stage.join(file), bytes).unwrap();
    }
    let text = match marker {
        Some(listed) => serde_json::json!({
            "routersim_stage": true,
            "files": proof::proofs_json(&proofs_of(listed)),
        })
        .to_string(),
        None => String::new(),
    };
    fs::write(stage.join(STAGE_MARKER), text).unwrap();
    stage
}

#[test]
fn a_dead_processs_stage_is_removed_only_when_every_entry_proves_routersims() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let staged: &[(&str, &[u8])] = &[("requests.csv", b"rows"), (MARKER, b"{}")];
    // A stage whose move had begun: one listed file is gone already.
    let proven = fake_stage(
        root,
        ".out.routersim-stage-4000000000",
        &staged[..1],
        Some(staged),
    );
    let extra = fake_stage(
        root,
        ".out.routersim-stage-4000000001",
        &[("requests.csv", b"rows"), ("mine.txt", b"mine")],
        Some(staged),
    );
    let edited = fake_stage(
        root,
        ".out.routersim-stage-4000000002",
        &[("requests.csv", b"ROWS")],
        Some(staged),
    );
    let half = fake_stage(
        root,
        ".out.routersim-stage-4000000003",
        &[("requests.csv", b"ro")],
        Some(staged),
    );
    let bare = fake_stage(
        root,
        ".out.routersim-stage-4000000004",
        &[("notes.txt", b"mine")],
        None,
    );
    let nested = fake_stage(root, ".out.routersim-stage-4000000005", &[], Some(staged));
    fs::create_dir(nested.join("sub")).unwrap();
    let other_target = fake_stage(
        root,
        ".other.routersim-stage-4000000000",
        &staged[..1],
        Some(staged),
    );
    let outside = |paths: Vec<String>, skip: &Path| -> BTreeSet<String> {
        let skip = skip.to_string_lossy().into_owned();
        paths
            .into_iter()
            .filter(|p| !p.starts_with(&skip))
            .collect()
    };
    let before = outside(walk(root), &proven);
    write_dir(&root.join("out"), OutputKind::Run, &files(&["x.csv"])).unwrap();
    assert!(
        !proven.exists(),
        "a proven stage of a dead process is removed"
    );
    assert_eq!(
        outside(walk(root), &root.join("out")),
        before,
        "every unproven stage is left exactly as it was"
    );
    for stage in [&extra, &edited, &half, &bare, &nested, &other_target] {
        assert!(stage.join(STAGE_MARKER).exists(), "{}", stage.display());
    }
}

#[test]
fn a_stage_that_is_a_link_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = fake_stage(
        tmp.path(),
        "elsewhere",
        &[("f", b"f")],
        Some(&[("f", b"f")]),
    );
    let link = tmp.path().join(".out.routersim-stage-4000000000");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    write_dir(&tmp.path().join("out"), OutputKind::Run, &files(&["x.csv"])).unwrap();
    assert!(elsewhere.join("f").exists() && link.exists());
}

#[test]
fn a_target_name_of_240_bytes_gets_a_stage_that_fits() {
    let tmp = tempfile::tempdir().unwrap();
    for name in [
        "a".repeat(240),
        "é".repeat(120),
        "b".repeat(MAX_FILE_NAME_BYTES),
    ] {
        let out = tmp.path().join(&name);
        let base = stage_base(&out);
        assert!(
            base.len() + 10 <= MAX_FILE_NAME_BYTES,
            "{} bytes",
            base.len()
        );
        assert_eq!(base, stage_base(&out), "the same stage name each time");
        write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap();
        write_dir(&out, OutputKind::Run, &files(&["x.csv"])).unwrap();
        assert_eq!(entries(&out), set(&["x.csv", MARKER]));
    }
    assert_ne!(
        stage_base(&tmp.path().join("c".repeat(240))),
        stage_base(&tmp.path().join(format!("{}d", "c".repeat(239)))),
        "names alike in their first bytes get stages of their own"
    );
    assert_eq!(stage_base(Path::new("x/out")), ".out.routersim-stage-");
}

#[test]
fn a_name_longer_than_a_file_name_may_be_is_refused_at_claim() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp
        .path()
        .join("a".repeat(MAX_FILE_NAME_BYTES + 1))
        .join("x");
    let e = claim(&out, OutputKind::Run, &[], false).unwrap_err();
    assert!(e.0.contains("256 bytes"), "{e}");
    let e = claim_file(&tmp.path().join("j".repeat(300)), JUNIT_SIGNATURE).unwrap_err();
    assert!(e.0.contains("300 bytes"), "{e}");
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

#[test]
fn a_stage_writes_each_file_once_and_is_sealed_last_with_their_proofs() {
    let tmp = tempfile::tempdir().unwrap();
    let exports = std::sync::atomic::AtomicUsize::new(0);
    let streamed = FileBody::streamed(|out: &mut dyn std::io::Write| {
        exports.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        out.write_all(b"streamed rows")
    });
    let mut stage =
        Stage::create(tmp.path(), ".out.routersim-stage-", &["a.csv", "b.csv"]).unwrap();
    stage.write("a.csv", Contents::Bytes(b"bytes")).unwrap();
    stage.write("b.csv", streamed.contents()).unwrap();
    let marker = stage.path.join(STAGE_MARKER);
    assert!(!marker.exists(), "a stage has no marker until it is whole");
    stage.seal().unwrap();
    assert_eq!(
        exports.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "a streamed file is formatted once"
    );
    let text = fs::read_to_string(&marker).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let expected = proofs_of(&[("a.csv", b"bytes"), ("b.csv", b"streamed rows")]);
    assert_eq!(value["files"], proof::proofs_json(&expected));
    assert_eq!(
        fs::read(stage.path.join("b.csv")).unwrap(),
        b"streamed rows"
    );
}

#[test]
fn a_dead_processs_stage_without_its_marker_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    // Killed while it wrote its files: the marker, written last, never came.
    let unsealed = tmp.path().join(".out.routersim-stage-4000000000");
    fs::create_dir(&unsealed).unwrap();
    fs::write(unsealed.join("requests.csv"), b"ro").unwrap();
    write_dir(&tmp.path().join("out"), OutputKind::Run, &files(&["x.csv"])).unwrap();
    assert_eq!(entries(&unsealed), set(&["requests.csv"]));
}

/// The check a swap makes of a displaced file: it holds `bytes`.
fn holds(bytes: &'static [u8]) -> impl Fn(&Path) -> Result<(), String> {
    move |path| proven(path, &BTreeSet::from([Proof::of(bytes)]))
}

#[test]
fn swapping_in_puts_the_new_bytes_in_place_and_keeps_the_old_beside() {
    let tmp = tempfile::tempdir().unwrap();
    let (from, to) = (tmp.path().join("staged"), tmp.path().join("marker"));
    fs::write(&from, b"new").unwrap();
    fs::write(&to, b"old").unwrap();
    swap_in(&from, &to, holds(b"old")).unwrap();
    assert_eq!(fs::read(&to).unwrap(), b"new");
    // Swapped, not renamed over (Linux's ext4 and tmpfs swap names): the stage holds the old
    // file and drops it with itself.
    #[cfg(target_os = "linux")]
    assert_eq!(fs::read(&from).unwrap(), b"old");
}

#[test]
fn swapping_in_over_an_absent_name_renames() {
    let tmp = tempfile::tempdir().unwrap();
    let (from, to) = (tmp.path().join("staged"), tmp.path().join("out.xml"));
    fs::write(&from, b"new").unwrap();
    swap_in(&from, &to, holds(b"old")).unwrap();
    assert_eq!(fs::read(&to).unwrap(), b"new");
    assert!(!from.exists());
}

#[test]
fn swapping_in_over_a_folder_put_in_the_files_place_restores_it_and_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let (from, to) = (tmp.path().join("staged"), tmp.path().join("marker"));
    fs::write(&from, b"new").unwrap();
    fs::create_dir(&to).unwrap();
    fs::write(to.join("keep"), b"user's").unwrap();
    let error = swap_in(&from, &to, holds(b"old")).unwrap_err();
    assert!(matches!(error, NotPlaced::Changed(_)), "{error:?}");
    assert_eq!(fs::read(to.join("keep")).unwrap(), b"user's");
    assert_eq!(fs::read(&from).unwrap(), b"new");
}

#[test]
fn swapping_in_over_a_file_edited_since_it_was_proven_restores_the_edit_and_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let (from, to) = (tmp.path().join("staged"), tmp.path().join("requests.csv"));
    fs::write(&from, b"new").unwrap();
    fs::write(&to, b"old, and the user's edit").unwrap();
    let error = swap_in(&from, &to, holds(b"old")).unwrap_err();
    assert!(matches!(error, NotPlaced::Changed(_)), "{error:?}");
    assert_eq!(fs::read(&to).unwrap(), b"old, and the user's edit");
    assert_eq!(fs::read(&from).unwrap(), b"new");
}

#[test]
fn placing_a_new_file_never_replaces_one_that_appeared_meanwhile() {
    let tmp = tempfile::tempdir().unwrap();
    let (from, to) = (tmp.path().join("staged"), tmp.path().join("summary.json"));
    fs::write(&from, b"new").unwrap();
    fs::write(&to, b"the user's own").unwrap();
    let error = place_new(&from, &to).unwrap_err();
    assert!(matches!(error, NotPlaced::Appeared), "{error:?}");
    assert_eq!(fs::read(&to).unwrap(), b"the user's own");
    assert_eq!(fs::read(&from).unwrap(), b"new");
}

#[test]
fn file_name_parts_keep_policy_names_and_escape_everything_else_reversibly() {
    for kept in ["premium", "a.b", "a_b", "tier-1", "..", "A9"] {
        assert_eq!(file_name_part(kept), kept);
    }
    assert_eq!(file_name_part("team a/b"), "team~20a~2Fb");
    assert_eq!(file_name_part("~"), "~7E");
    assert_eq!(file_name_part("é"), "~C3~A9");
    assert_eq!(file_name_part(""), "");
}

proptest! {
    /// Distinct texts never share a file name, and every name made from one is a plain
    /// file name, so that no user text can collide with another or climb out of the output.
    #[test]
    fn file_name_parts_are_distinct_for_distinct_texts_and_plain(
        a in "[a-z._~/ \\\\-]{0,6}",
        b in "[a-z._~/ \\\\-]{0,6}",
    ) {
        let (pa, pb) = (file_name_part(&a), file_name_part(&b));
        prop_assert_eq!(a == b, pa == pb);
        let name = format!("x_{pa}.png");
        prop_assert!(is_plain_file_name(&name));
    }
}
