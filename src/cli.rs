//! The command line: clap commands, and the mapping of errors to exit codes (0, 1, 2).

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "routersim",
    version,
    about = "Simulate Dynamo's KV-router scheduling in virtual time"
)]
pub struct Cli {}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    match Cli::try_parse() {
        Ok(_) => 0,
        Err(e) => {
            let _ = e.print();
            if e.use_stderr() { 2 } else { 0 }
        }
    }
}
