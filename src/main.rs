//! The `routersim` binary: parses the command line and maps errors to exit codes.

fn main() {
    std::process::exit(routersim::cli::main());
}
