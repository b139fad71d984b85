//! The one error type of scenarios: which file, where in it, which field, and what is wrong.

use std::fmt;

/// A scenario that cannot be read, parsed, overridden or accepted.
///
/// Displays as `file:line: field.path: message`, dropping the parts that are unknown (a read
/// error has no line, a whole-document error no field path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file the problem is in (the scenario, or a policy/trace/companion file it names).
    pub file: String,
    /// 1-based line of the offending node, when known.
    pub line: Option<usize>,
    /// 1-based column of the offending node, when known.
    pub column: Option<usize>,
    /// Dotted path of the offending field, list entries by name
    /// (`router.policy_classes.regular.quantum`); empty for the whole document.
    pub field_path: String,
    /// What is wrong.
    pub message: String,
}

impl ScenarioError {
    /// An error about the whole `file` (unreadable, empty, ...).
    pub fn in_file(file: impl Into<String>, message: impl Into<String>) -> Self {
        ScenarioError {
            file: file.into(),
            line: None,
            column: None,
            field_path: String::new(),
            message: message.into(),
        }
    }
}

impl From<crate::workload::trace::TraceError> for ScenarioError {
    /// A bad row of a trace the scenario names: the trace's file, line and field.
    fn from(e: crate::workload::trace::TraceError) -> Self {
        ScenarioError {
            file: e.source_name,
            line: Some(e.line),
            column: None,
            field_path: e.field.unwrap_or_default(),
            message: e.message,
        }
    }
}

impl ScenarioError {
    /// A problem the YAML layer found in `file`.
    pub fn from_yaml(file: impl Into<String>, error: crate::yaml::Error) -> Self {
        ScenarioError {
            file: file.into(),
            line: error.line,
            column: error.column,
            field_path: error.field_path,
            message: error.message,
        }
    }
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        if !self.field_path.is_empty() {
            write!(f, "{}: ", self.field_path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScenarioError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_file_line_path_message() {
        let mut error = ScenarioError {
            file: "s.yaml".into(),
            line: Some(12),
            column: Some(3),
            field_path: "workers.count".into(),
            message: "must be positive".into(),
        };
        assert_eq!(
            error.to_string(),
            "s.yaml:12: workers.count: must be positive"
        );
        error.line = None;
        error.field_path.clear();
        assert_eq!(error.to_string(), "s.yaml: must be positive");
    }
}
