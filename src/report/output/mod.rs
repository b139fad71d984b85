//! The one place that writes result files, and the rules that keep a user's files safe;
//! [`run_files`] names a run's files and gathers their bodies from `render`.
//!
//! An output directory is routersim's alone. A command writes into it only when it does not
//! exist, is empty, or holds a previous routersim output: the marker file [`MARKER`] names the
//! command that wrote it and lists every file it wrote with its size and content hash
//! ([`proof`]). A rerun replaces or removes a listed file only while it is still byte for byte
//! what routersim wrote; a listed file that was edited, replaced or turned into a link or a
//! folder stops the command (exit 2) before any work, naming the file, with or without
//! `--force`. Every other file in the directory is left untouched. A marker that does not
//! parse, names an unknown command, or is an older routersim's (bare names, no hashes) proves
//! nothing, so its directory is refused like any other non-empty directory, as are `.`, `..`,
//! `/`, the home directory, their ancestors, and any directory that contains one of the
//! command's input files ([`claim`]).
//!
//! Files are first written into a stage beside the target (`.NAME.routersim-stage-PID`, see
//! [`stage`]), then moved in. Each previous file is proven once more at the moment its name
//! is freed (swapped with its successor, then checked; one that changed is swapped back and
//! stops the write), and a name that was free is never taken over. One process at a time
//! re-checks and commits beside a target ([`lock`]), so concurrent writers take turns. The stage is removed on every exit path: errors (a drop guard),
//! and SIGINT or SIGTERM (a handler that removes registered stages and exits 130). A killed
//! process may leave a stage behind; the next write beside it removes such a stage only if
//! every entry in it proves to be what routersim staged there, and nothing else.

mod body;
mod lock;
mod proof;
pub mod run_files;
mod stage;

use crate::bounds::{self, MAX_FILE_NAME_BYTES};
use body::Contents;
pub use body::FileBody;
use lock::DirLock;
use proof::{OnDisk, Proof, Proofs, Unproven};
use stage::{Stage, lock_stages, stage_base};
use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::panic::resume_unwind;
use std::path::{Component, Path, PathBuf};
use std::thread::ScopedJoinHandle;

/// The marker file in every routersim output directory: which command wrote it, and which
/// files with which sizes and content hashes (and so which files a rerun may replace).
pub const MARKER: &str = ".routersim-output.json";

/// The marker a replace puts in place first: the old files' and the new files' proofs, so an
/// interrupted replace still leaves every routersim file provably routersim's.
const INTERIM_MARKER: &str = ".routersim-output.interim.json";

/// A file's name and the thread formatting its body ahead.
type Rendering<'scope> = (&'scope str, ScopedJoinHandle<'scope, io::Result<Vec<u8>>>);

/// What a single-file output (`--junit`) must contain for routersim to replace it.
pub const JUNIT_SIGNATURE: &str = "<testsuites name=\"routersim check\"";

/// The kind of output a command writes; a directory is rewritten only by the same kind unless
/// `--force` is given.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// `routersim run`: one scenario's result files.
    Run,
    /// `routersim replay`: one trace replay's result files.
    Replay,
    /// `routersim sweep` (whole or one shard) and `routersim merge`.
    Sweep,
    /// `routersim plan`: a capacity search's files.
    Plan,
    /// `routersim check --timeline`: a judged scenario's timeline.
    Check,
}

impl OutputKind {
    const ALL: [OutputKind; 5] = [
        OutputKind::Run,
        OutputKind::Replay,
        OutputKind::Sweep,
        OutputKind::Plan,
        OutputKind::Check,
    ];

    /// The name stored in the marker.
    pub fn label(self) -> &'static str {
        match self {
            OutputKind::Run => "run",
            OutputKind::Replay => "replay",
            OutputKind::Sweep => "sweep",
            OutputKind::Plan => "plan",
            OutputKind::Check => "check",
        }
    }

    /// The kind a marker names, if it is one routersim writes.
    fn from_label(label: &str) -> Option<OutputKind> {
        OutputKind::ALL.into_iter().find(|k| k.label() == label)
    }
}

/// Why an output could not be written. Always the user's to fix (exit 2): a refused target or
/// a file-system error, naming the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputError(pub String);

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OutputError {}

fn io_error(path: &Path, action: &str, e: io::Error) -> OutputError {
    OutputError(format!("{}: cannot {action}: {e}", path.display()))
}

fn refused(dir: &Path, why: impl fmt::Display) -> OutputError {
    OutputError(format!("refusing to write into {}: {why}", dir.display()))
}

/// An output directory checked by [`claim`]: safe to write the given kind into.
#[derive(Clone, Debug)]
pub struct OutputTarget {
    dir: PathBuf,
    kind: OutputKind,
    force: bool,
    inputs: Vec<PathBuf>,
}

/// What an existing target holds.
#[derive(Debug)]
enum Existing {
    /// Nothing there yet.
    Absent,
    /// An empty directory.
    Empty,
    /// A previous routersim output: the command that wrote it, its files still there (each
    /// proven to hold what routersim wrote), and every entry present.
    Previous {
        kind: OutputKind,
        owned: Proofs,
        present: BTreeSet<String>,
        marker: Proof,
    },
}

/// A marker read from disk: the command it names and the files it vouches for.
#[derive(Debug, PartialEq, Eq)]
struct Marker {
    kind: OutputKind,
    proofs: Proofs,
    /// The proof of the marker file itself, as it was read.
    proof: Proof,
}

/// Checks that `dir` may receive an output of `kind`, before any work starts. `inputs` are the
/// files (or directories) the command reads; `dir` may not contain any of them.
pub fn claim(
    dir: &Path,
    kind: OutputKind,
    inputs: &[PathBuf],
    force: bool,
) -> Result<OutputTarget, OutputError> {
    let target = OutputTarget {
        dir: dir.to_path_buf(),
        kind,
        force,
        inputs: inputs.to_vec(),
    };
    target.inspect()?;
    check_writable(dir)?;
    Ok(target)
}

/// Checks, before any work, that the output can be made: a stage can be created in the
/// nearest folder on the way to `dir` that exists (where the missing ones would be made).
fn check_writable(dir: &Path) -> Result<(), OutputError> {
    let mut below = dir.to_path_buf();
    let mut nearest = parent_of(dir);
    // Bounded by the number of components of `dir`.
    for _ in 0..=dir.components().count() {
        if fs::symlink_metadata(&nearest).is_ok() {
            let probe = nearest.join(format!("{}{}", stage_base(&below), std::process::id()));
            return match fs::create_dir(&probe) {
                Ok(()) => fs::remove_dir(&probe).map_err(|e| io_error(&probe, "remove", e)),
                // A stage of a dead process of this id: the folder takes entries.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(refused(
                    dir,
                    format!(
                        "routersim cannot create anything in {} ({e})",
                        nearest.display()
                    ),
                )),
            };
        }
        below = nearest.clone();
        nearest = parent_of(&nearest);
    }
    Ok(())
}

/// Claims `dir` for `kind` (no inputs, no force) and writes `files` into it.
pub fn write_dir<S: AsRef<str>>(
    dir: &Path,
    kind: OutputKind,
    files: &[(S, Vec<u8>)],
) -> Result<(), OutputError> {
    claim(dir, kind, &[], false)?.write(files)
}

/// Names routersim keeps for itself inside an output directory or a stage.
fn is_reserved_name(name: &str) -> bool {
    [MARKER, INTERIM_MARKER, stage::STAGE_MARKER].contains(&name)
}

impl OutputTarget {
    /// Checks the target again (it may have changed while the command worked) and what it
    /// holds, proving each file its marker lists.
    fn inspect(&self) -> Result<Existing, OutputError> {
        check_location(&self.dir, &self.inputs)?;
        let existing = existing(&self.dir)?;
        if let Existing::Previous { kind, .. } = &existing
            && *kind != self.kind
            && !self.force
        {
            return Err(refused(
                &self.dir,
                format!(
                    "it holds the output of `routersim {}`, not of `routersim {}` \
                     (pass --force to replace routersim's files there)",
                    kind.label(),
                    self.kind.label()
                ),
            ));
        }
        Ok(existing)
    }

    /// Writes `files` (name, bytes) into the directory: all of them appear, replacing the
    /// previous output's files; files routersim did not write are never touched.
    pub fn write<S: AsRef<str>>(&self, files: &[(S, Vec<u8>)]) -> Result<(), OutputError> {
        let files: Vec<(&str, Contents)> = files
            .iter()
            .map(|(n, b)| (n.as_ref(), Contents::Bytes(b)))
            .collect();
        self.write_contents(&files)
    }

    /// [`Self::write`] for files that may stream ([`FileBody::Streamed`]).
    pub fn write_bodies<S: AsRef<str>>(
        &self,
        files: &[(S, FileBody<'_>)],
    ) -> Result<(), OutputError> {
        let files: Vec<(&str, Contents)> = files
            .iter()
            .map(|(n, b)| (n.as_ref(), b.contents()))
            .collect();
        self.write_contents(&files)
    }

    /// Writes `files`. Each body marked [`Contents::Ahead`] is formatted meanwhile on a thread
    /// of its own, so that a replay's `requests.csv` costs the command little more than the
    /// inspection and the other files it overlaps.
    fn write_contents(&self, files: &[(&str, Contents)]) -> Result<(), OutputError> {
        for (name, _) in files {
            assert!(
                is_plain_file_name(name) && !is_reserved_name(name),
                "bad output name {name:?}"
            );
        }
        std::thread::scope(|scope| {
            let ahead = files
                .iter()
                .filter(|(_, contents)| matches!(contents, Contents::Ahead(_)))
                .map(|&(name, contents)| (name, scope.spawn(move || contents.render())))
                .collect();
            self.commit(files, ahead)
        })
    }

    /// [`Self::write_contents`] once the bodies formatted ahead are under way. Holds the lock
    /// on the target's parent from the re-check to the end, so that concurrent commits into
    /// one directory follow one another and each leaves one run's files.
    fn commit(&self, files: &[(&str, Contents)], ahead: Vec<Rendering>) -> Result<(), OutputError> {
        let parent = parent_of(&self.dir);
        fs::create_dir_all(&parent).map_err(|e| io_error(&parent, "create the directory", e))?;
        let _one_commit_at_a_time = DirLock::acquire(&parent, lock::MAX_LOCK_WAIT)?;
        let existing = self.inspect()?;
        if let Existing::Previous { owned, present, .. } = &existing
            && let Some((clash, _)) = files
                .iter()
                .find(|(n, _)| present.contains(*n) && !owned.contains_key(*n))
        {
            return Err(refused(
                &self.dir,
                format!("it holds `{clash}`, which routersim did not write"),
            ));
        }
        let replacing = matches!(existing, Existing::Previous { .. });
        let mut names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
        names.push(MARKER);
        if replacing {
            names.push(INTERIM_MARKER);
        }
        let mut stage = Stage::create(&parent, &stage_base(&self.dir), &names)?;
        let mut written = Vec::with_capacity(files.len());
        let formatting = |contents| matches!(contents, Contents::Ahead(_) | Contents::Started(_));
        for &(name, contents) in files {
            if !formatting(contents) {
                written.push((name, stage.write(name, contents)?));
            }
        }
        // Last, to give them the most time.
        for (name, rendering) in ahead {
            let rendered = rendering
                .join()
                .unwrap_or_else(|panic| resume_unwind(panic));
            written.push((name, stage.write_rendered(name, rendered)?));
        }
        for &(name, contents) in files {
            if matches!(contents, Contents::Started(_)) {
                written.push((name, stage.write(name, contents)?));
            }
        }
        let proofs = proof::proofs_from(written);
        assert_eq!(proofs.len(), files.len(), "an output name twice");
        let marker = marker_json(self.kind, &proofs);
        stage.write(MARKER, Contents::Bytes(&marker))?;
        let mut interim = None;
        if let Existing::Previous { owned, .. } = &existing {
            let bytes = marker_json(self.kind, &union(owned, &proofs));
            interim = Some(stage.write(INTERIM_MARKER, Contents::Bytes(&bytes))?);
        }
        stage.seal()?;
        pause_for_interrupt_tests();
        let _no_interrupt = lock_stages();
        match existing {
            Existing::Absent => stage.rename_whole(&self.dir),
            Existing::Empty => {
                fs::remove_dir(&self.dir).map_err(|e| io_error(&self.dir, "replace", e))?;
                stage.rename_whole(&self.dir)
            }
            Existing::Previous { owned, marker, .. } => {
                let interim = interim.expect("an interim marker is staged for a replace");
                let replace = Replace {
                    dir: &self.dir,
                    stage: &stage.path,
                    owned: &owned,
                    proofs: &proofs,
                };
                replace.run(marker, interim)
            }
        }
    }
}

/// Moving a stage's files into a directory that holds a previous output (and maybe files of
/// the user's).
struct Replace<'a> {
    dir: &'a Path,
    stage: &'a Path,
    /// The previous output's files, as proven when the target was inspected.
    owned: &'a Proofs,
    /// The staged files.
    proofs: &'a Proofs,
}

impl Replace<'_> {
    /// The interim marker lists the old and the new proofs until the end, so an interrupted
    /// replace still leaves every routersim file provably routersim's. Each old file is proven
    /// again at the moment its name is freed: one the user changed since the inspection stops
    /// the replace, and stays as the user left it.
    fn run(&self, old_marker: Proof, interim: Proof) -> Result<(), OutputError> {
        let marker = self.dir.join(MARKER);
        swap_in(&self.stage.join(INTERIM_MARKER), &marker, |displaced| {
            proven(displaced, &BTreeSet::from([old_marker]))
        })
        .map_err(|e| self.explain(MARKER, e))?;
        for (old, old_proofs) in self
            .owned
            .iter()
            .filter(|(n, _)| !self.proofs.contains_key(*n))
        {
            remove_own_file(self.dir, old, old_proofs)?;
        }
        for name in self.proofs.keys() {
            let (from, to) = (self.stage.join(name), self.dir.join(name));
            match self.owned.get(name) {
                Some(old) => swap_in(&from, &to, |displaced| proven(displaced, old)),
                None => place_new(&from, &to),
            }
            .map_err(|e| self.explain(name, e))?;
        }
        swap_in(&self.stage.join(MARKER), &marker, |displaced| {
            proven(displaced, &BTreeSet::from([interim]))
        })
        .map_err(|e| self.explain(MARKER, e))
    }

    /// The refusal for a staged file that could not be put in place.
    fn explain(&self, name: &str, e: NotPlaced) -> OutputError {
        match e {
            NotPlaced::Changed(why) if name == MARKER => refused(
                self.dir,
                format!(
                    "its {MARKER} changed while routersim wrote its output ({why}); \
                     it was left as it is"
                ),
            ),
            NotPlaced::Changed(why) => not_routersims(self.dir, name, &why),
            NotPlaced::Appeared => refused(
                self.dir,
                format!(
                    "`{name}` appeared there while routersim wrote its output; \
                     it was left as it is"
                ),
            ),
            NotPlaced::Failed(e) => e,
        }
    }
}

/// Why a staged file was not put in place.
#[derive(Debug)]
enum NotPlaced {
    /// What stood under the name is no longer a file routersim may drop (and why); it is
    /// back where it was.
    Changed(String),
    /// A file appeared under a name that was free when the target was inspected; it is
    /// left as it is.
    Appeared,
    Failed(OutputError),
}

/// Whether the file at `path` is still one of the contents `proofs` allows.
fn proven(path: &Path, proofs: &BTreeSet<Proof>) -> Result<(), String> {
    match proof::on_disk(path, proofs) {
        Ok(OnDisk::Ours(_)) => Ok(()),
        Ok(OnDisk::Changed(why)) => Err(why.to_string()),
        Ok(OnDisk::Absent) => Err("it was moved away".into()),
        Err(e) => Err(format!("it cannot be read: {e}")),
    }
}

/// Puts the staged file `from` at `to`, which holds a file routersim may replace (a previous
/// output's, proven when the target was inspected, or a marker), in one step: `to` is never
/// missing. ext4 writes a file's data out at once when it is renamed over another (so that a
/// crash cannot leave the name empty), 100-170 µs a file on this kind of disk, where swapping
/// the two names takes 12: so the names are swapped, and what was at
/// `to`, now in the stage, must pass `still_ours` (proven once more, at the moment its name
/// is freed) to go with the stage. Anything else (a file the user edited or put there
/// meanwhile, a folder, a link) is swapped back, and the write stops. A `to` that is gone
/// is a free name ([`place_new`]). Where swapping is not supported (another kernel or file
/// system), `to` is proven, then renamed over.
fn swap_in(
    from: &Path,
    to: &Path,
    still_ours: impl Fn(&Path) -> Result<(), String>,
) -> Result<(), NotPlaced> {
    match rename_with(from, to, Rename::Exchange) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return place_new(from, to),
        Err(_) => {
            still_ours(to).map_err(NotPlaced::Changed)?;
            return rename(from, to).map_err(NotPlaced::Failed);
        }
    }
    if let Err(why) = still_ours(from) {
        rename_with(from, to, Rename::Exchange)
            .map_err(|e| NotPlaced::Failed(io_error(to, "restore", e)))?;
        return Err(NotPlaced::Changed(why));
    }
    Ok(())
}

/// Renames the staged file `from` to `to`, a name that was free when the target was
/// inspected, without replacing anything that appeared there since.
fn place_new(from: &Path, to: &Path) -> Result<(), NotPlaced> {
    match rename_with(from, to, Rename::NoReplace) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(NotPlaced::Appeared),
        Err(_) if fs::symlink_metadata(to).is_ok() => Err(NotPlaced::Appeared),
        Err(_) => rename(from, to).map_err(NotPlaced::Failed),
    }
}

/// The proofs of both lists, name by name.
fn union(a: &Proofs, b: &Proofs) -> Proofs {
    let mut all = a.clone();
    for (name, set) in b {
        all.entry(name.clone()).or_default().extend(set);
    }
    all
}

fn rename(from: &Path, to: &Path) -> Result<(), OutputError> {
    fs::rename(from, to).map_err(|e| io_error(to, "write", e))
}

/// The atomic renames beyond a plain one.
#[derive(Copy, Clone)]
enum Rename {
    /// Swap two existing names.
    Exchange,
    /// Rename only if the new name is free.
    NoReplace,
}

/// Renames `from` to `to` as `how` says, atomically (`renameat2`).
#[cfg(target_os = "linux")]
fn rename_with(from: &Path, to: &Path, how: Rename) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let from = CString::new(from.as_os_str().as_bytes())?;
    let to = CString::new(to.as_os_str().as_bytes())?;
    let flags = match how {
        Rename::Exchange => libc::RENAME_EXCHANGE,
        Rename::NoReplace => libc::RENAME_NOREPLACE,
    };
    // SAFETY: both paths are NUL-terminated strings that outlive the call, which only reads
    // them.
    let done = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(not(target_os = "linux"))]
fn rename_with(_: &Path, _: &Path, _: Rename) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// The environment variable that holds a write with a full stage for that many ms before it
/// commits: lets a test interrupt the write phase deterministically. Unset, it costs nothing.
pub const STAGE_PAUSE_ENV: &str = "ROUTERSIM_TEST_STAGE_PAUSE_MS";

/// The line the pause writes to stderr as it begins, once every staged file is whole: a test
/// waits for it rather than for the stage folder, which exists before its files are written.
pub const STAGE_FULL_LINE: &str = "routersim: test pause: stage full";

fn pause_for_interrupt_tests() {
    let pause_ms = std::env::var(STAGE_PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .min(60_000);
    if pause_ms > 0 {
        eprintln!("{STAGE_FULL_LINE}");
        std::thread::sleep(std::time::Duration::from_millis(pause_ms));
    }
}

/// Removes the previous output's file `name`, proven once more just before (it was proven
/// when the target was inspected; a file edited since is kept and stops the write).
fn remove_own_file(dir: &Path, name: &str, proofs: &BTreeSet<Proof>) -> Result<(), OutputError> {
    let path = dir.join(name);
    match proof::on_disk(&path, proofs).map_err(|e| io_error(&path, "inspect", e))? {
        OnDisk::Absent => Ok(()),
        OnDisk::Ours(_) => fs::remove_file(&path).map_err(|e| io_error(&path, "remove", e)),
        OnDisk::Changed(why) => Err(not_routersims(dir, name, why)),
    }
}

/// One path component that names a file: no separators, not `.` or `..`, not empty.
pub fn is_plain_file_name(name: &str) -> bool {
    let mut components = Path::new(name).components();
    matches!(components.next(), Some(Component::Normal(_)))
        && components.next().is_none()
        && !name.contains(['/', '\\'])
}

/// The marker's bytes: deterministic, so reruns produce identical directories.
fn marker_json(kind: OutputKind, proofs: &Proofs) -> Vec<u8> {
    let value = serde_json::json!({
        "routersim_output": kind.label(),
        "files": proof::proofs_json(proofs),
    });
    let mut bytes = serde_json::to_vec_pretty(&value).expect("JSON of strings and numbers");
    bytes.push(b'\n');
    bytes
}

/// Reads the marker of `dir`: a regular file (not a link) of at most
/// [`bounds::MAX_MARKER_BYTES`] in routersim's format, naming a command routersim has.
/// Anything else makes `dir` a directory routersim cannot prove is its own.
fn read_marker(dir: &Path) -> Result<Marker, OutputError> {
    let path = dir.join(MARKER);
    let meta = fs::symlink_metadata(&path).map_err(|e| io_error(&path, "inspect", e))?;
    let foreign = |why: &str| {
        refused(
            dir,
            format!(
                "its {MARKER} {why}, so nothing there is provably routersim's \
                 (--force does not change this); choose a new or empty directory"
            ),
        )
    };
    if !meta.is_file() {
        return Err(foreign("is not a regular file"));
    }
    let text = bounds::read_to_string_capped(&path, bounds::MAX_MARKER_BYTES)
        .map_err(|e| io_error(&path, "read", e))?;
    let not_ours = || foreign("is not a marker routersim wrote");
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|_| not_ours())?;
    let object = value
        .as_object()
        .filter(|o| o.len() == 2)
        .ok_or_else(not_ours)?;
    let label = object
        .get("routersim_output")
        .and_then(|v| v.as_str())
        .ok_or_else(not_ours)?;
    let kind = OutputKind::from_label(label).ok_or_else(|| {
        foreign(&format!(
            "names `routersim {label}`, which writes no output"
        ))
    })?;
    let files = object.get("files").ok_or_else(not_ours)?;
    let allowed = |name: &str| is_plain_file_name(name) && !is_reserved_name(name);
    let proofs = proof::parse_proofs(files, allowed).map_err(|why| match why {
        Unproven::OldFormat => refused(
            dir,
            format!(
                "its {MARKER} comes from an older routersim that recorded no sizes or hashes, \
                 so routersim cannot tell its files there from yours; move or delete the \
                 directory (keeping any file of yours in it), then run again"
            ),
        ),
        Unproven::Malformed => not_ours(),
    })?;
    Ok(Marker {
        kind,
        proofs,
        proof: Proof::of(text.as_bytes()),
    })
}

/// Why `name` in `dir` stops the write: it is not what routersim wrote there.
fn not_routersims(dir: &Path, name: &str, why: &str) -> OutputError {
    refused(
        dir,
        format!(
            "`{name}` is listed in its {MARKER} but is no longer the file routersim wrote \
             there ({why}); routersim never overwrites or removes it, with or without --force: \
             move it out of the directory (or choose another), then run again"
        ),
    )
}

/// What `dir` holds now.
fn existing(dir: &Path) -> Result<Existing, OutputError> {
    let meta = match fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Existing::Absent),
        Err(e) => return Err(io_error(dir, "inspect", e)),
    };
    if !meta.is_dir() {
        return Err(refused(dir, "it exists and is not a directory"));
    }
    let present: BTreeSet<String> = fs::read_dir(dir)
        .map_err(|e| io_error(dir, "list", e))?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    if present.is_empty() {
        return Ok(Existing::Empty);
    }
    if !present.contains(MARKER) {
        let shown: Vec<&str> = present.iter().take(3).map(String::as_str).collect();
        let more = match present.len() > 3 {
            true => format!(" and {} more", present.len() - 3),
            false => String::new(),
        };
        return Err(refused(
            dir,
            format!(
                "it is not empty and not a routersim output (it holds {}{more}); \
                 choose a new or empty directory",
                shown.join(", ")
            ),
        ));
    }
    let marker = read_marker(dir)?;
    Ok(Existing::Previous {
        kind: marker.kind,
        owned: proven_files(dir, &marker.proofs)?,
        present,
        marker: marker.proof,
    })
}

/// The listed files still in `dir`, each with the one content it was proven to hold. A
/// listed file that is gone is simply not there; one that changed stops everything.
fn proven_files(dir: &Path, listed: &Proofs) -> Result<Proofs, OutputError> {
    let mut owned = Proofs::new();
    for (name, proofs) in listed {
        let path = dir.join(name);
        match proof::on_disk(&path, proofs).map_err(|e| io_error(&path, "inspect", e))? {
            OnDisk::Absent => {}
            OnDisk::Ours(found) => {
                owned.insert(name.clone(), BTreeSet::from([found]));
            }
            OnDisk::Changed(why) => return Err(not_routersims(dir, name, why)),
        }
    }
    Ok(owned)
}

/// Refuses directories whose loss or mixing would hurt: the file-system root, the home
/// directory, the working directory and their ancestors, and any directory that contains an
/// input. Returns the absolute, resolved path.
fn check_location(dir: &Path, inputs: &[PathBuf]) -> Result<PathBuf, OutputError> {
    if dir.as_os_str().is_empty() {
        return Err(OutputError("the output directory may not be empty".into()));
    }
    if matches!(
        dir.components().next_back(),
        Some(Component::CurDir | Component::ParentDir | Component::RootDir)
    ) {
        return Err(refused(
            dir,
            "name a directory of its own (not `.`, `..` or `/`)",
        ));
    }
    check_name_length(dir)?;
    let resolved = resolve(dir)?;
    let cwd = std::env::current_dir()
        .and_then(fs::canonicalize)
        .map_err(|e| io_error(Path::new("."), "resolve the working directory", e))?;
    if cwd.starts_with(&resolved) {
        return Err(refused(
            dir,
            "it is the working directory or one of its parents",
        ));
    }
    if let Some(home) = std::env::var_os("HOME").and_then(|h| fs::canonicalize(h).ok())
        && home.starts_with(&resolved)
    {
        return Err(refused(
            dir,
            "it is the home directory or one of its parents",
        ));
    }
    for input in inputs {
        if let Ok(input_resolved) = fs::canonicalize(input)
            && input_resolved.starts_with(&resolved)
        {
            return Err(refused(
                dir,
                format!("it contains {}, an input of this command", input.display()),
            ));
        }
    }
    Ok(resolved)
}

/// Refuses a path with a component longer than a file name may be, before any work (the
/// stage beside it is made to fit, see [`stage_base`]).
fn check_name_length(path: &Path) -> Result<(), OutputError> {
    match path
        .components()
        .map(|c| c.as_os_str().len())
        .find(|len| *len > MAX_FILE_NAME_BYTES)
    {
        Some(len) => Err(OutputError(format!(
            "refusing to write {}: a name in it is {len} bytes long, more than the \
             {MAX_FILE_NAME_BYTES} bytes a file name may have",
            path.display()
        ))),
        None => Ok(()),
    }
}

/// The absolute path `dir` stands for: its longest existing ancestor resolved (links and
/// `..` followed), then the rest, which may not climb with `..`.
fn resolve(dir: &Path) -> Result<PathBuf, OutputError> {
    let absolute = match dir.is_absolute() {
        true => dir.to_path_buf(),
        false => std::env::current_dir()
            .map_err(|e| io_error(dir, "resolve", e))?
            .join(dir),
    };
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    // Bounded by the number of components of the path.
    while fs::symlink_metadata(existing).is_err() {
        let Some(parent) = existing.parent() else {
            break;
        };
        rest.push(existing.file_name().map(PathBuf::from).unwrap_or_default());
        existing = parent;
    }
    let mut resolved = fs::canonicalize(existing).map_err(|e| io_error(dir, "resolve", e))?;
    for part in rest.iter().rev() {
        if !is_plain_file_name(&part.to_string_lossy()) {
            return Err(refused(
                dir,
                "its path climbs out of a directory that does not exist",
            ));
        }
        resolved.push(part);
    }
    Ok(resolved)
}

/// The directory that holds `path` (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// Checks, before any work, that `path` may receive a single-file output ([`write_file`]):
/// it does not exist, or is a regular file holding `signature`, and a stage fits beside it.
pub fn claim_file(path: &Path, signature: &str) -> Result<(), OutputError> {
    check_name_length(path)?;
    check_single_file(path, signature)
}

/// Writes one file (e.g. the `--junit` report) whole or not at all: into a staged sibling
/// first, then renamed over `path`. An existing file is replaced only if it contains
/// `signature` (routersim wrote it); anything else at `path` is refused.
pub fn write_file(path: &Path, bytes: &[u8], signature: &str) -> Result<(), OutputError> {
    let parent = parent_of(path);
    fs::create_dir_all(&parent).map_err(|e| io_error(&parent, "create the directory", e))?;
    let _one_commit_at_a_time = DirLock::acquire(&parent, lock::MAX_LOCK_WAIT)?;
    claim_file(path, signature)?;
    let mut stage = Stage::create(&parent, &stage_base(path), &["file"])?;
    stage.write("file", Contents::Bytes(bytes))?;
    stage.seal()?;
    let _no_interrupt = lock_stages();
    let still_routersims = |displaced: &Path| {
        check_single_file(displaced, signature).map_err(|_| "routersim did not write it".into())
    };
    let refuse = |why: &str| {
        OutputError(format!(
            "refusing to overwrite {}: {why} while routersim wrote it; it was left as it is",
            path.display()
        ))
    };
    swap_in(&stage.path.join("file"), path, still_routersims).map_err(|e| match e {
        NotPlaced::Changed(why) => refuse(&format!("it changed ({why})")),
        NotPlaced::Appeared => refuse("it appeared"),
        NotPlaced::Failed(e) => e,
    })
}

fn check_single_file(path: &Path, signature: &str) -> Result<(), OutputError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(path, "inspect", e)),
    };
    let refuse =
        |why: &str| OutputError(format!("refusing to overwrite {}: {why}", path.display()));
    if !meta.is_file() {
        return Err(refuse("it is not a regular file"));
    }
    let mut head = Vec::new();
    bounds::open_regular(path)
        .and_then(|f| {
            f.take(bounds::JUNIT_SIGNATURE_SCAN_BYTES)
                .read_to_end(&mut head)
        })
        .map_err(|e| io_error(path, "read", e))?;
    match String::from_utf8_lossy(&head).contains(signature) {
        true => Ok(()),
        false => Err(refuse("routersim did not write it")),
    }
}

#[cfg(test)]
mod tests;
