//! Stages: the folders beside a target (`.NAME.routersim-stage-PID`) where an output is written
//! before it is moved in, their removal on every exit path, and the removal of stages a killed
//! process left behind, only when they prove to be routersim's.
//!
//! A stage's marker ([`STAGE_MARKER`]) is written last, once every file is whole, and lists
//! each with its size and content hash ([`super::proof`], worked out as the file was
//! written). A stale stage is removed only if each of its entries is the marker or a regular
//! file it lists, holding the listed bytes; anything else there (a user's file, a
//! half-written file, a subfolder, a stage with no marker) leaves the folder alone entirely.

use super::body::Contents;
use super::proof::{self, OnDisk, Proof, Proofs};
use super::{OutputError, io_error, is_plain_file_name};
use crate::bounds::{self, MAX_FILE_NAME_BYTES};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once};

/// The file inside a stage that proves the stage is routersim's.
pub(super) const STAGE_MARKER: &str = ".routersim-stage";

/// The infix of stage names: `.NAME.routersim-stage-PID`.
pub(super) const STAGE_INFIX: &str = ".routersim-stage-";

/// Digits of the largest process id (`u32::MAX`).
const PID_MAX_DIGITS: usize = 10;

/// How much of a long target name a stage name keeps (the rest is stood for by its hash).
const STAGE_NAME_KEPT_BYTES: usize = 200;

/// The stage name prefix for `target`: `.NAME.routersim-stage-`. A name too long for the
/// whole stage name to fit [`MAX_FILE_NAME_BYTES`] is cut to its first
/// [`STAGE_NAME_KEPT_BYTES`] and a hash of the whole (`.NAME-CUT~HASH.routersim-stage-`),
/// so every legal target name gets a legal stage name, the same one each time.
pub(super) fn stage_base(target: &Path) -> String {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let whole = format!(".{name}{STAGE_INFIX}");
    if whole.len() + PID_MAX_DIGITS <= MAX_FILE_NAME_BYTES {
        return whole;
    }
    let mut cut = STAGE_NAME_KEPT_BYTES;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let hash = xxhash_rust::xxh3::xxh3_64(name.as_bytes());
    format!(".{}~{hash:016x}{STAGE_INFIX}", &name[..cut])
}

/// The stages of this process (each with the names it holds), removed by the SIGINT/SIGTERM
/// handler.
static STAGES: Mutex<Vec<(PathBuf, Vec<String>)>> = Mutex::new(Vec::new());
static HANDLER: Once = Once::new();

/// The lock on this process's stages. Held while an output is committed, so an interrupt
/// never removes a stage halfway through its commit.
pub(super) fn lock_stages() -> MutexGuard<'static, Vec<(PathBuf, Vec<String>)>> {
    STAGES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Installs (once) the handler that removes this process's stages on SIGINT or SIGTERM. It
/// takes the stage lock, so a commit in progress finishes first.
fn install_interrupt_handler() {
    HANDLER.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            for (stage, names) in lock_stages().iter() {
                remove_own_stage(stage, names);
            }
            std::process::exit(130);
        });
    });
}

/// A staging directory beside the target, holding the files of one output; removed when
/// dropped, whatever happened.
pub(super) struct Stage {
    pub(super) path: PathBuf,
    names: Vec<String>,
    /// The files written so far, with the proof of each.
    written: Proofs,
}

impl Stage {
    /// Creates the stage `base` + this process's id in `parent`, to hold the files `names`
    /// (plain names, none of them [`STAGE_MARKER`]). Stale stages of the same target are
    /// removed first, where they prove to be routersim's.
    pub(super) fn create(parent: &Path, base: &str, names: &[&str]) -> Result<Stage, OutputError> {
        install_interrupt_handler();
        remove_stale_stages(parent, base);
        let path = parent.join(format!("{base}{}", std::process::id()));
        if fs::symlink_metadata(&path).is_ok() {
            // A process of this id that died earlier; unproven, it stays and create_dir fails.
            remove_proven_stage(&path);
        }
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        for name in &names {
            assert!(
                is_plain_file_name(name) && name != STAGE_MARKER,
                "bad stage name {name:?}"
            );
        }
        // Registered before it exists, under the lock, so an interrupt never misses it.
        let mut stages = lock_stages();
        stages.push((path.clone(), names.clone()));
        let made = fs::create_dir(&path);
        drop(stages);
        let stage = Stage {
            path,
            names,
            written: Proofs::new(),
        };
        made.map_err(|e| io_error(&stage.path, "create the stage", e))?;
        Ok(stage)
    }

    /// Writes `contents` as the stage's file `name` (one of its names), once, hashing it on
    /// the way; returns the proof of what it wrote.
    pub(super) fn write(&mut self, name: &str, contents: Contents) -> Result<Proof, OutputError> {
        assert!(
            self.names.iter().any(|n| n == name) && !self.written.contains_key(name),
            "{name:?} is not a file this stage has still to write"
        );
        let path = self.path.join(name);
        let proof = contents
            .write_file(&path)
            .map_err(|e| io_error(&path, "write", e))?;
        self.written
            .insert(name.to_string(), std::collections::BTreeSet::from([proof]));
        Ok(proof)
    }

    /// [`Self::write`] for a body already formatted (or its formatting's error).
    pub(super) fn write_rendered(
        &mut self,
        name: &str,
        rendered: io::Result<Vec<u8>>,
    ) -> Result<Proof, OutputError> {
        match rendered {
            Ok(bytes) => self.write(name, Contents::Bytes(&bytes)),
            Err(e) => Err(io_error(&self.path.join(name), "write", e)),
        }
    }

    /// Writes the stage marker, which lists every file written with its proof. Written last,
    /// so a stage whose process was killed before it was whole has no marker and is left
    /// alone rather than taken for routersim's.
    pub(super) fn seal(&self) -> Result<(), OutputError> {
        assert_eq!(
            self.written.len(),
            self.names.len(),
            "a stage sealed half-written"
        );
        let mut marker = serde_json::to_vec_pretty(&serde_json::json!({
            "routersim_stage": true,
            "files": proof::proofs_json(&self.written),
        }))
        .expect("JSON of strings and numbers");
        marker.push(b'\n');
        let marker_path = self.path.join(STAGE_MARKER);
        fs::write(&marker_path, &marker).map_err(|e| io_error(&marker_path, "write", e))
    }

    /// Turns the whole stage into `dir` (which does not exist), without its marker.
    pub(super) fn rename_whole(&self, dir: &Path) -> Result<(), OutputError> {
        let proof = self.path.join(STAGE_MARKER);
        fs::remove_file(&proof).map_err(|e| io_error(&proof, "remove", e))?;
        super::rename(&self.path, dir)
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let mut stages = lock_stages();
        stages.retain(|(s, _)| s != &self.path);
        remove_own_stage(&self.path, &self.names);
    }
}

/// Removes a stage this process made (with `create_dir`, so it was new): the files it put
/// there, whatever state a failed write left them in, then the folder, which stays if anyone
/// else put something in it meanwhile.
fn remove_own_stage(path: &Path, names: &[String]) {
    for name in names.iter().map(String::as_str).chain([STAGE_MARKER]) {
        let file = path.join(name);
        if fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) {
            let _ = fs::remove_file(&file);
        }
    }
    let _ = fs::remove_dir(path);
}

/// Removes the stage at `path` of another (dead) process only if it proves to be
/// routersim's ([`proven_stage_files`]); otherwise leaves it exactly as it is.
fn remove_proven_stage(path: &Path) {
    let Some(files) = proven_stage_files(path) else {
        return;
    };
    for name in files.iter().map(String::as_str).chain([STAGE_MARKER]) {
        let _ = fs::remove_file(path.join(name));
    }
    let _ = fs::remove_dir(path);
}

/// The files of the stage at `path` (besides its marker), if it is a real directory whose
/// marker parses and every entry is the marker or a regular file holding bytes the marker
/// lists for its name. `None` for anything else.
fn proven_stage_files(path: &Path) -> Option<Vec<String>> {
    if !fs::symlink_metadata(path).ok()?.is_dir() {
        return None;
    }
    let listed = read_stage_marker(&path.join(STAGE_MARKER))?;
    let mut files = Vec::new();
    for entry in fs::read_dir(path).ok()? {
        let name = entry.ok()?.file_name().into_string().ok()?;
        if name == STAGE_MARKER {
            continue;
        }
        let proofs = listed.get(&name)?;
        match proof::on_disk(&path.join(&name), proofs).ok()? {
            OnDisk::Ours(_) => files.push(name),
            OnDisk::Absent | OnDisk::Changed(_) => return None,
        }
    }
    Some(files)
}

/// The files a stage marker lists, if it is a regular file (not a link) in routersim's format.
fn read_stage_marker(path: &Path) -> Option<Proofs> {
    if !fs::symlink_metadata(path).ok()?.is_file() {
        return None;
    }
    let text = bounds::read_to_string_capped(path, bounds::MAX_MARKER_BYTES).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    let object = value.as_object()?;
    if object.len() != 2 || object.get("routersim_stage")? != &serde_json::Value::Bool(true) {
        return None;
    }
    proof::parse_proofs(object.get("files")?, |name| {
        is_plain_file_name(name) && name != STAGE_MARKER
    })
    .ok()
}

/// Removes stages beside a target that a process no longer running left behind, where they
/// prove to be routersim's.
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
            remove_proven_stage(&entry.path());
        }
    }
}

/// Whether process `pid` is alive. Without `/proc` nothing can be known: assume it is, so a
/// stage is never taken from a live process.
fn process_is_running(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}
