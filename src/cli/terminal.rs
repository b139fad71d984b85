//! What routersim prints on a terminal: text that may hold user input (scenario, class,
//! expectation and session names, trace values in messages) escaped by [`crate::text::shown`],
//! so no input can move the cursor, retitle or clear the screen, or make one name look like
//! another.

use crate::text::shown;
use std::io::Write;

/// Prints `text` on stdout, escaped. A closed stdout ends nothing: the exit code stands.
pub fn print_out(text: &str) {
    let _ = std::io::stdout().lock().write_all(shown(text).as_bytes());
}

/// Prints `text` on stderr, escaped.
pub fn print_err(text: &str) {
    let _ = std::io::stderr().lock().write_all(shown(text).as_bytes());
}
