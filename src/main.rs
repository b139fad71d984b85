//! The `routersim` binary: parses the command line and maps errors to exit codes.

fn main() {
    restore_default_sigpipe();
    let code = routersim::cli::main();
    exit_without_teardown(code)
}

/// Rust ignores SIGPIPE, which turns a closed pipe (`routersim run ... | head`) into a panic
/// in `println!`; a command-line tool should end quietly instead, as `cat` does.
fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called once at start-up, before any thread exists; resetting a signal's
    // disposition to its default has no other effect on this process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Ends the process once stdout is flushed, skipping the C runtime's exit handlers. The only
/// one that does work here is the allocator's, which hands every freed page back to the
/// kernel one `madvise` call at a time (79 calls after a one-row replay, 0.5 ms or more of a
/// small replay), pages the kernel reclaims anyway, all at once, as the process ends.
/// The instrumented build of `tools/pgo-build.sh` (`--cfg routersim_pgo_training`) runs them:
/// its profile is written by one.
fn exit_without_teardown(code: i32) -> ! {
    use std::io::Write;
    // A closed or full stdout has nothing left to tell: the code stands.
    let _ = std::io::stdout().flush();
    #[cfg(all(unix, not(routersim_pgo_training)))]
    // SAFETY: every file routersim writes is closed by now (the command has returned and
    // dropped its writers), and stdout was flushed above; `_exit` ends the process at once.
    unsafe {
        libc::_exit(code)
    }
    #[cfg(any(not(unix), routersim_pgo_training))]
    std::process::exit(code)
}
