//! The one place that writes result files, and the rules that keep a user's files safe.
//!
//! An output directory is routersim's alone. A command writes into it only when it does not
//! exist, is empty, or holds a previous routersim output (recognised by the marker file
//! [`MARKER`], which lists the files routersim wrote there). A rerun replaces exactly those
//! files and leaves everything else in the directory untouched. Any other directory is refused
//! before work starts ([`claim`]), as are `.`, `..`, `/`, the home directory, their ancestors,
//! and any directory that contains one of the command's input files.
//!
//! Files are first written into a stage beside the target (`.NAME.routersim-stage-PID`), then
//! moved in. The stage is removed on every exit path: errors (a drop guard), and SIGINT or
//! SIGTERM (a handler that removes registered stages and exits 130). A killed process may leave
//! a stage behind; the next write beside it removes stages whose process is gone, and nothing
//! else.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, Once};

/// The marker file in every routersim output directory: which command wrote it, and which
/// files (and so which files a rerun may replace).
pub const MARKER: &str = ".routersim-output.json";

/// The file inside a stage that proves the stage is routersim's.
const STAGE_MARKER: &str = ".routersim-stage";

/// The infix of stage names: `.NAME.routersim-stage-PID`.
const STAGE_INFIX: &str = ".routersim-stage-";

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
}

impl OutputKind {
    /// The name stored in the marker.
    pub fn label(self) -> &'static str {
        match self {
            OutputKind::Run => "run",
            OutputKind::Replay => "replay",
            OutputKind::Sweep => "sweep",
            OutputKind::Plan => "plan",
        }
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
    /// A previous routersim output: the command that wrote it, the files its marker lists,
    /// and every entry present.
    Previous {
        kind: String,
        listed: BTreeSet<String>,
        present: BTreeSet<String>,
    },
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
    Ok(target)
}

/// Claims `dir` for `kind` (no inputs, no force) and writes `files` into it.
pub fn write_dir<S: AsRef<str>>(
    dir: &Path,
    kind: OutputKind,
    files: &[(S, Vec<u8>)],
) -> Result<(), OutputError> {
    claim(dir, kind, &[], false)?.write(files)
}

impl OutputTarget {
    /// Checks the target again (it may have changed while the command worked) and what it
    /// holds.
    fn inspect(&self) -> Result<Existing, OutputError> {
        check_location(&self.dir, &self.inputs)?;
        let existing = existing(&self.dir)?;
        if let Existing::Previous { kind, .. } = &existing
            && kind != self.kind.label()
            && !self.force
        {
            return Err(refused(
                &self.dir,
                format!(
                    "it holds the output of `routersim {kind}`, not of `routersim {}` \
                     (pass --force to replace routersim's files there)",
                    self.kind.label()
                ),
            ));
        }
        Ok(existing)
    }

    /// Writes `files` (name, bytes) into the directory: all of them appear, replacing the
    /// previous output's files; files routersim did not write are never touched.
    pub fn write<S: AsRef<str>>(&self, files: &[(S, Vec<u8>)]) -> Result<(), OutputError> {
        let names: BTreeSet<String> = files.iter().map(|(n, _)| n.as_ref().to_string()).collect();
        for name in &names {
            assert!(
                is_plain_file_name(name) && name != MARKER,
                "bad output name {name:?}"
            );
        }
        let existing = self.inspect()?;
        if let Existing::Previous {
            listed, present, ..
        } = &existing
            && let Some(clash) = names
                .iter()
                .find(|n| present.contains(*n) && !listed.contains(*n))
        {
            return Err(refused(
                &self.dir,
                format!("it holds `{clash}`, which routersim did not write"),
            ));
        }
        let parent = parent_of(&self.dir);
        fs::create_dir_all(&parent).map_err(|e| io_error(&parent, "create the directory", e))?;
        let stage = Stage::create(&parent, &stage_base(&self.dir))?;
        for (name, bytes) in files {
            let path = stage.path.join(name.as_ref());
            fs::write(&path, bytes).map_err(|e| io_error(&path, "write", e))?;
        }
        let marker = marker_json(self.kind, &names);
        let marker_path = stage.path.join(MARKER);
        fs::write(&marker_path, &marker).map_err(|e| io_error(&marker_path, "write", e))?;
        pause_for_interrupt_tests();
        let _no_interrupt = lock_stages();
        match existing {
            Existing::Absent => stage.rename_whole(&self.dir),
            Existing::Empty => {
                fs::remove_dir(&self.dir).map_err(|e| io_error(&self.dir, "replace", e))?;
                stage.rename_whole(&self.dir)
            }
            Existing::Previous { listed, .. } => {
                self.replace_files(&stage.path, &listed, &names, &marker)
            }
        }
    }

    /// Moves the staged files into a directory that holds a previous output (and maybe files
    /// of the user's). The marker lists the union of old and new names until the end, so an
    /// interrupted replace still leaves every routersim file recognisable.
    fn replace_files(
        &self,
        stage: &Path,
        listed: &BTreeSet<String>,
        names: &BTreeSet<String>,
        marker: &[u8],
    ) -> Result<(), OutputError> {
        let union: BTreeSet<String> = listed.union(names).cloned().collect();
        let interim = stage.join(".interim-marker");
        fs::write(&interim, marker_json(self.kind, &union))
            .map_err(|e| io_error(&interim, "write", e))?;
        rename(&interim, &self.dir.join(MARKER))?;
        for old in listed.difference(names) {
            remove_own_file(&self.dir.join(old))?;
        }
        for name in names {
            rename(&stage.join(name), &self.dir.join(name))?;
        }
        let final_marker = stage.join(MARKER);
        debug_assert_eq!(fs::read(&final_marker).ok().as_deref(), Some(marker));
        rename(&final_marker, &self.dir.join(MARKER))
    }
}

fn rename(from: &Path, to: &Path) -> Result<(), OutputError> {
    fs::rename(from, to).map_err(|e| io_error(to, "write", e))
}

/// The environment variable that holds a write with a full stage for that many ms before it
/// commits: lets a test interrupt the write phase deterministically. Unset, it costs nothing.
pub const STAGE_PAUSE_ENV: &str = "ROUTERSIM_TEST_STAGE_PAUSE_MS";

fn pause_for_interrupt_tests() {
    let pause_ms = std::env::var(STAGE_PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .min(60_000);
    if pause_ms > 0 {
        std::thread::sleep(std::time::Duration::from_millis(pause_ms));
    }
}

/// Removes a file routersim listed in its marker, if it is still a regular file (a user may
/// have replaced it with a directory or a link: then it is theirs).
fn remove_own_file(path: &Path) -> Result<(), OutputError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => {
            fs::remove_file(path).map_err(|e| io_error(path, "remove", e))
        }
        _ => Ok(()),
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
fn marker_json(kind: OutputKind, names: &BTreeSet<String>) -> Vec<u8> {
    let value = serde_json::json!({
        "routersim_output": kind.label(),
        "files": names.iter().collect::<Vec<_>>(),
    });
    let mut bytes = serde_json::to_vec_pretty(&value).expect("JSON of strings");
    bytes.push(b'\n');
    bytes
}

/// The largest marker routersim reads; its own are a few hundred bytes.
const MARKER_MAX_BYTES: u64 = 1 << 20;

/// Reads a marker: (kind, listed files). Names that are not plain file names are ignored, so
/// an edited marker cannot point routersim at files outside the directory.
fn read_marker(dir: &Path) -> Result<(String, BTreeSet<String>), OutputError> {
    let path = dir.join(MARKER);
    let mut text = String::new();
    fs::File::open(&path)
        .and_then(|f| f.take(MARKER_MAX_BYTES).read_to_string(&mut text))
        .map_err(|e| io_error(&path, "read", e))?;
    let unreadable = || {
        refused(
            dir,
            format!("its {MARKER} is not a routersim marker (remove it if it is yours)"),
        )
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|_| unreadable())?;
    let kind = value["routersim_output"].as_str().ok_or_else(unreadable)?;
    let files = value["files"].as_array().ok_or_else(unreadable)?;
    let listed = files
        .iter()
        .filter_map(|f| f.as_str())
        .filter(|f| is_plain_file_name(f) && *f != MARKER)
        .map(String::from)
        .collect();
    Ok((kind.to_string(), listed))
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
    let (kind, listed) = read_marker(dir)?;
    Ok(Existing::Previous {
        kind,
        listed,
        present,
    })
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

/// The stage name prefix for `target`: `.NAME.routersim-stage-`.
fn stage_base(target: &Path) -> String {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    format!(".{name}{STAGE_INFIX}")
}

/// The stages of this process, removed by the SIGINT/SIGTERM handler.
static STAGES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

fn lock_stages() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    STAGES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Installs (once) the handler that removes this process's stages on SIGINT or SIGTERM. It
/// takes the stage lock, so a commit in progress finishes first.
fn install_interrupt_handler() {
    HANDLER.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            for stage in lock_stages().iter() {
                remove_stage(stage);
            }
            std::process::exit(130);
        });
    });
}

/// A staging directory beside the target; removed when dropped, whatever happened.
struct Stage {
    path: PathBuf,
}

impl Stage {
    fn create(parent: &Path, base: &str) -> Result<Stage, OutputError> {
        install_interrupt_handler();
        remove_stale_stages(parent, base);
        let path = parent.join(format!("{base}{}", std::process::id()));
        if path.exists() {
            remove_stage(&path);
        }
        // Registered before it exists, under the lock, so an interrupt never misses it.
        let mut stages = lock_stages();
        stages.push(path.clone());
        let made = fs::create_dir(&path).and_then(|()| fs::write(path.join(STAGE_MARKER), b""));
        drop(stages);
        let stage = Stage { path };
        made.map_err(|e| io_error(&stage.path, "create the stage", e))?;
        Ok(stage)
    }
}

impl Stage {
    /// Turns the whole stage into `dir` (which does not exist), without its proof file.
    fn rename_whole(&self, dir: &Path) -> Result<(), OutputError> {
        let proof = self.path.join(STAGE_MARKER);
        fs::remove_file(&proof).map_err(|e| io_error(&proof, "remove", e))?;
        rename(&self.path, dir)
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let mut stages = lock_stages();
        stages.retain(|s| s != &self.path);
        remove_stage(&self.path);
    }
}

/// Removes a stage of routersim's: its regular files, then the directory itself. Anything
/// else inside (a user's subdirectory) keeps the stage in place.
fn remove_stage(path: &Path) {
    if !path.join(STAGE_MARKER).exists() && path.exists() {
        // Not (or not yet) proven ours: only an empty directory may go.
        let _ = fs::remove_dir(path);
        return;
    }
    if let Ok(entries) = fs::read_dir(path) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
    let _ = fs::remove_dir(path);
}

/// Removes stages beside a target that a process no longer running left behind.
fn remove_stale_stages(parent: &Path, base: &str) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(base).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !process_is_running(pid) {
            let path = entry.path();
            if path.join(STAGE_MARKER).is_file() {
                remove_stage(&path);
            }
        }
    }
}

/// Whether process `pid` is alive. Without `/proc` nothing can be known: assume it is, so a
/// stage is never taken from a live process.
fn process_is_running(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

/// Writes one file (e.g. the `--junit` report) whole or not at all: into a staged sibling
/// first, then renamed over `path`. An existing file is replaced only if it contains
/// `signature` (routersim wrote it); anything else at `path` is refused.
pub fn write_file(path: &Path, bytes: &[u8], signature: &str) -> Result<(), OutputError> {
    check_single_file(path, signature)?;
    let parent = parent_of(path);
    fs::create_dir_all(&parent).map_err(|e| io_error(&parent, "create the directory", e))?;
    let stage = Stage::create(&parent, &stage_base(path))?;
    let staged = stage.path.join("file");
    fs::write(&staged, bytes).map_err(|e| io_error(&staged, "write", e))?;
    let _no_interrupt = lock_stages();
    rename(&staged, path)
}

/// The largest prefix of an existing single-file output read to find its signature.
const SIGNATURE_SCAN_BYTES: u64 = 4096;

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
    let mut head = String::new();
    let _ =
        fs::File::open(path).and_then(|f| f.take(SIGNATURE_SCAN_BYTES).read_to_string(&mut head));
    match head.contains(signature) {
        true => Ok(()),
        false => Err(refuse("routersim did not write it")),
    }
}

#[cfg(test)]
mod tests;
