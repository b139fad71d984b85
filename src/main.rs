//! The `routersim` binary: parses the command line and maps errors to exit codes.

fn main() {
    restore_default_sigpipe();
    std::process::exit(routersim::cli::main());
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
