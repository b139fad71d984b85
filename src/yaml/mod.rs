//! YAML with positions, for scenario and policy files: a node tree with line and column of
//! every node, field paths (`router.policy_classes.regular.quantum`, list entries by `name`),
//! `--set` edits at a path, and typed deserialisation whose errors carry line, column, field
//! path and a message in the user's words; JSON configs get the same errors through
//! [`from_json_str`]. No file IO: callers read the text.
//!
//! ```
//! use routersim::yaml::Document;
//!
//! let mut doc = Document::parse("name: demo\nclasses:\n  - {name: gold, quantum: 8}\n");
//! doc.set("classes.gold.quantum", "16", &[]).unwrap();
//! doc.set("delays.jitter_ms", "1", &[]).unwrap();
//! assert_eq!(doc.get("classes.gold.quantum").and_then(|n| n.scalar()), Some("16"));
//! assert!(doc.text().ends_with("delays: {jitter_ms: 1}\n"));
//! let error = doc.error_at("classes[0].quantum", "too small");
//! assert_eq!((error.line, error.field_path.as_str()), (Some(3), "classes.gold.quantum"));
//! assert!(error.message.starts_with("--set classes.gold.quantum=16: "));
//! ```

mod de;
mod document;
mod json;
mod path;
mod tree;

pub use document::Document;
pub use json::{from_json_str, from_json_value};
pub use path::{Step, join_path, parse_path};
pub use tree::{Node, NodeKind, Pos};

/// A problem at a place in a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// 1-based line in the original text (`None` for a line a set added, or unknown).
    pub line: Option<usize>,
    /// 1-based column, when the line is known.
    pub column: Option<usize>,
    /// Dotted path of the field, list entries by name; empty for the whole document.
    pub field_path: String,
    /// What is wrong; starts with `--set PATH=VALUE: ` when a set wrote the offending node.
    pub message: String,
}

/// Where a position of the edited text came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The line in the original text (`None` for a line a set added).
    pub line: Option<usize>,
    /// The 1-based column.
    pub column: usize,
    /// The set (by order) that wrote this line, if any.
    pub set_by: Option<usize>,
}

#[cfg(test)]
mod tests;
