//! The one place that writes result files: all files of a run appear together or not at all.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Writes `files` (name, bytes) into `dir`. They are first written into a fresh sibling
/// directory, which then replaces `dir`, so an interrupted or failed write never leaves a
/// half-written result behind.
pub fn write_dir<S: AsRef<str>>(dir: &Path, files: &[(S, Vec<u8>)]) -> io::Result<()> {
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(parent)?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let staging: PathBuf = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    fs::create_dir(&staging)?;
    let written = files
        .iter()
        .try_for_each(|(file, bytes)| fs::write(staging.join(file.as_ref()), bytes));
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&staging);
        return Err(e);
    }
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    fs::rename(&staging, dir)
}

/// Writes one file (e.g. the `--junit` report) whole or not at all: into a sibling temporary
/// file first, then renamed over `path`.
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(parent)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let staging = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    if let Err(e) = fs::write(&staging, bytes) {
        let _ = fs::remove_file(&staging);
        return Err(e);
    }
    fs::rename(&staging, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_all_files_and_replaces_an_old_result() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("a/b/out");
        write_dir(&out, &[("x.csv", b"1".to_vec())]).unwrap();
        write_dir(&out, &[("y.csv", b"2".to_vec())]).unwrap();
        assert!(!out.join("x.csv").exists());
        assert_eq!(fs::read(out.join("y.csv")).unwrap(), b"2");
        let leftovers: Vec<_> = fs::read_dir(out.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no staging directory is left behind");
    }

    #[test]
    fn writes_one_file_whole_and_replaces_it() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("ci/junit.xml");
        write_file(&file, b"old").unwrap();
        write_file(&file, b"new").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"new");
        let entries: Vec<_> = fs::read_dir(file.parent().unwrap()).unwrap().collect();
        assert_eq!(entries.len(), 1, "no staging file is left behind");
    }
}
