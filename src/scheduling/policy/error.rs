//! The one error type of the policy module: what is wrong, where in the document and in which file.

use crate::yaml::{self, Document, Step, join_path, parse_path};
use serde_saphyr::Location;
use std::fmt;

/// A policy document that cannot be read, parsed or accepted.
///
/// `location` names the profile (`root` or `model "name"`); `message` starts with it and then
/// names the class and the field, e.g. `root: class "premium": quantum must be > 0`.
/// `line`/`column` are 1-based and point at the offending node when it is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// The file (or other source) the document came from, when known.
    pub source_name: Option<String>,
    /// 1-based line of the offending node.
    pub line: Option<usize>,
    /// 1-based column of the offending node.
    pub column: Option<usize>,
    /// The profile the error is in: `root`, `model "name"`, or `file` for read errors.
    pub location: String,
    /// Field path inside the policy document: by index for a validation error
    /// (`policy_classes[3].quantum`), by entry name for a parse error
    /// (`policy_classes.regular.quantum`); empty when the error is about the whole document.
    /// A caller that embeds the policy keys in a larger document can prefix it.
    /// (A boxed str keeps the error under clippy's large-`Err` size limit.)
    pub field_path: Box<str>,
    /// The full human-readable message, starting with `location`.
    pub message: String,
}

impl PolicyError {
    /// An error at `location` about `field_path`, positioned at `at` when that is a known place.
    pub(crate) fn new(
        location: &str,
        field_path: String,
        at: Option<&Location>,
        detail: impl fmt::Display,
    ) -> Self {
        let (line, column) = at.map_or((None, None), line_and_column);
        PolicyError {
            source_name: None,
            line,
            column,
            location: location.to_string(),
            field_path: field_path.into_boxed_str(),
            message: format!("{location}: {detail}"),
        }
    }

    /// The same error, attributed to the file or source `source_name`.
    #[must_use]
    pub fn with_source_name(mut self, source_name: impl Into<String>) -> Self {
        self.source_name = Some(source_name.into());
        self
    }

    /// The same error with `prefix` put in front of its field path, for callers that embed
    /// the policy keys under another key (e.g. `router`).
    #[must_use]
    pub fn with_path_prefix(mut self, prefix: &str) -> Self {
        self.field_path = match (prefix.is_empty(), self.field_path.is_empty()) {
            (true, _) => self.field_path,
            (false, true) => prefix.into(),
            (false, false) => format!("{prefix}.{}", self.field_path).into_boxed_str(),
        };
        self
    }
}

impl PolicyError {
    /// The same error placed in `doc`, the document it is about: lines of a document with
    /// `--set` edits are mapped back to the original (and the message names the edit), and a
    /// missing line (e.g. lost through `#[serde(flatten)]`) is found from the field path.
    #[must_use]
    pub fn placed_in(self, doc: &Document) -> Self {
        let placed = match (self.line, self.field_path.is_empty()) {
            (Some(line), _) => doc.error_at_position(
                Some((line, self.column.unwrap_or(1))),
                Some(self.field_path.to_string()),
                self.message,
            ),
            (None, false) => doc.error_at(&self.field_path, self.message),
            (None, true) => return self,
        };
        PolicyError {
            line: placed.line,
            column: placed.column,
            message: placed.message,
            ..self
        }
    }

    /// A document that does not parse into the schema: the profile and class come from the
    /// field path, e.g. `root: class "regular": queue_policy: unknown value `lifo`, ...`.
    pub(crate) fn from_yaml(error: yaml::Error) -> Self {
        let steps: Vec<String> = parse_path(&error.field_path)
            .unwrap_or_default()
            .iter()
            .map(Step::label)
            .collect();
        let (location, rest) = match steps.as_slice() {
            [models, model, rest @ ..] if models == "models" => {
                (format!("model \"{model}\""), rest)
            }
            rest => ("root".to_string(), rest),
        };
        let what = match rest {
            [] => "invalid YAML".to_string(),
            [classes, class, field @ ..] if classes == "policy_classes" && !field.is_empty() => {
                format!("class \"{class}\": {}", join_path(field))
            }
            path => join_path(path),
        };
        PolicyError {
            source_name: None,
            line: error.line,
            column: error.column,
            message: format!("{location}: {what}: {}", error.message),
            location,
            field_path: error.field_path.into_boxed_str(),
        }
    }
}

/// Line and column of a span, or nothing when the span is unknown (serde-saphyr uses 0 then,
/// e.g. for values that went through `#[serde(flatten)]`).
fn line_and_column(at: &Location) -> (Option<usize>, Option<usize>) {
    let line = usize::try_from(at.line()).ok().filter(|&line| line > 0);
    let column = usize::try_from(at.column())
        .ok()
        .filter(|&column| column > 0);
    match line {
        Some(line) => (Some(line), column),
        None => (None, None),
    }
}

impl fmt::Display for PolicyError {
    /// `source:line: message`, dropping whichever prefix part is unknown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.source_name, self.line) {
            (Some(source), Some(line)) => write!(f, "{source}:{line}: ")?,
            (Some(source), None) => write!(f, "{source}: ")?,
            (None, Some(line)) => write!(f, "line {line}: ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for PolicyError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PolicyError {
        PolicyError {
            source_name: None,
            line: Some(12),
            column: Some(5),
            location: "root".into(),
            field_path: "policy_classes[0].quantum".into(),
            message: "root: class \"premium\": quantum must be > 0".into(),
        }
    }

    #[test]
    fn display_puts_source_and_line_first() {
        let error = sample().with_source_name("policy.yaml");
        assert_eq!(
            error.to_string(),
            "policy.yaml:12: root: class \"premium\": quantum must be > 0"
        );
    }

    #[test]
    fn display_without_source_still_gives_the_line() {
        assert_eq!(
            sample().to_string(),
            "line 12: root: class \"premium\": quantum must be > 0"
        );
    }

    #[test]
    fn display_without_line_gives_only_the_source() {
        let mut error = sample().with_source_name("p.yaml");
        error.line = None;
        assert_eq!(
            error.to_string(),
            "p.yaml: root: class \"premium\": quantum must be > 0"
        );
    }

    #[test]
    fn path_prefix_joins_with_a_dot() {
        assert_eq!(
            &*sample().with_path_prefix("router").field_path,
            "router.policy_classes[0].quantum"
        );
        let mut whole_document = sample();
        whole_document.field_path = "".into();
        assert_eq!(
            &*whole_document.with_path_prefix("router").field_path,
            "router"
        );
    }

    #[test]
    fn unknown_span_gives_no_line() {
        let error = PolicyError::new("root", String::new(), Some(&Location::UNKNOWN), "x");
        assert_eq!((error.line, error.column), (None, None));
    }
}
