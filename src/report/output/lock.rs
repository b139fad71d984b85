//! The lock that lets one routersim process at a time commit an output beside a target: an
//! advisory OS lock (`flock`) on the directory that holds the target and its stage.
//!
//! A commit re-checks the target, writes its stage and moves the files in; two processes
//! doing that at once into one directory would each prove the other's half-moved files and
//! leave a mix of two runs. Under the lock the second one waits, then re-checks a directory
//! that holds the first one's whole output, and replaces it whole. The lock is on the parent
//! (which exists before and after, whatever the target is: absent, empty or an output), so
//! no file is made for it, and the kernel drops it when the process ends, however it ends.

use super::{OutputError, io_error};
use crate::bounds;
use std::fs::File;
use std::path::Path;
use std::time::Duration;

/// The longest a commit waits for another process's commit beside the same target. A commit
/// holds the lock while it writes its stage: seconds for a million requests' files.
pub(super) const MAX_LOCK_WAIT: Duration = Duration::from_secs(600);

/// How often a waiting commit tries the lock again.
const RETRY_EVERY: Duration = Duration::from_millis(5);

/// An exclusive lock on a directory, released when dropped (its file is closed).
pub(super) struct DirLock {
    _dir: File,
}

impl DirLock {
    /// Takes the exclusive lock on the directory `dir`, waiting about `max_wait` at most (in
    /// tries a few ms apart, no clock read) for another holder to let go.
    pub(super) fn acquire(dir: &Path, max_wait: Duration) -> Result<DirLock, OutputError> {
        let file = bounds::open_directory(dir).map_err(|e| io_error(dir, "lock", e))?;
        let tries = max_wait.as_millis() / RETRY_EVERY.as_millis() + 1;
        for _ in 0..tries {
            match try_lock(&file) {
                Ok(true) => return Ok(DirLock { _dir: file }),
                Ok(false) => std::thread::sleep(RETRY_EVERY),
                Err(e) => return Err(io_error(dir, "lock", e)),
            }
        }
        Err(OutputError(format!(
            "{}: another routersim process has been writing an output there for more than \
             {} s; try again when it has finished",
            dir.display(),
            max_wait.as_secs()
        )))
    }
}

/// Tries the exclusive lock once: `Ok(false)` if another open file holds it.
#[cfg(unix)]
fn try_lock(file: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the whole call, which only locks it.
    let done = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if done == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        Some(libc::EINTR) => Ok(false),
        _ => Err(e),
    }
}

/// Without `flock`, commits are not serialised between processes.
#[cfg(not(unix))]
fn try_lock(_: &File) -> std::io::Result<bool> {
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_makes_a_second_holder_wait_and_then_give_up() {
        let dir = tempfile::tempdir().unwrap();
        let held = DirLock::acquire(dir.path(), MAX_LOCK_WAIT).unwrap();
        let e = DirLock::acquire(dir.path(), Duration::from_millis(30))
            .err()
            .expect("the lock is taken");
        assert!(e.0.contains("another routersim process"), "{e}");
        drop(held);
        DirLock::acquire(dir.path(), Duration::ZERO).expect("free once dropped");
    }
}
