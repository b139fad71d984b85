//! `--set PATH=VALUE`: edits of the scenario text, made before typed parsing so that an
//! overridden value goes through exactly the same parsing and validation as a written one.
//!
//! A value replaces the scalar at PATH in place (same line, so every other line keeps its
//! number). A PATH whose last key is absent from an existing mapping adds the key: in a flow
//! mapping on the same line, in a block mapping as a new line after the mapping's last line
//! (later lines are mapped back to their original numbers). Lists are addressed by their
//! entries' `name` (or index). Values are YAML scalars; anything that is not a plain number,
//! boolean, null or simple word is written as a quoted string, so a value can never change
//! the document's structure. Replacing a whole mapping or list is not supported.

use super::ScenarioError;
use super::tree::{Node, NodeKind, Step, split_path};

/// The scenario text after overrides, and where each override landed.
#[derive(Clone, Debug, Default)]
pub struct Edited {
    /// The edited scenario text.
    pub text: String,
    /// (line in the edited text, override index) of every replaced value.
    replaced: Vec<(usize, usize)>,
    /// (line in the edited text, override index) of every added line.
    inserted: Vec<(usize, usize)>,
}

/// Where a line of the edited text came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LineOrigin {
    /// The line in the original file (`None` for a line an override added).
    pub original_line: Option<usize>,
    /// The override that wrote this line, if any.
    pub override_index: Option<usize>,
}

impl Edited {
    /// The text unchanged.
    pub fn unchanged(text: &str) -> Self {
        Edited {
            text: text.to_string(),
            ..Edited::default()
        }
    }

    /// The original line and the override behind edited line `line`.
    pub fn origin(&self, line: usize) -> LineOrigin {
        if let Some(&(_, index)) = self.inserted.iter().find(|(at, _)| *at == line) {
            return LineOrigin {
                original_line: None,
                override_index: Some(index),
            };
        }
        let shift = self.inserted.iter().filter(|(at, _)| *at < line).count();
        LineOrigin {
            original_line: Some(line - shift),
            override_index: self
                .replaced
                .iter()
                .rev()
                .find(|(at, _)| *at == line)
                .map(|&(_, index)| index),
        }
    }

    fn shift_lines_from(&mut self, line: usize) {
        for (at, _) in self.replaced.iter_mut().chain(self.inserted.iter_mut()) {
            if *at >= line {
                *at += 1;
            }
        }
    }
}

/// Applies every `(path, value)` in order to `text` (from `file`, for errors).
pub fn apply(
    file: &str,
    text: &str,
    overrides: &[(String, String)],
) -> Result<Edited, ScenarioError> {
    let mut edited = Edited::unchanged(text);
    for (index, (path, value)) in overrides.iter().enumerate() {
        apply_one(file, &mut edited, index, path, value)?;
    }
    Ok(edited)
}

fn apply_one(
    file: &str,
    edited: &mut Edited,
    index: usize,
    path: &str,
    value: &str,
) -> Result<(), ScenarioError> {
    let fail = |line: Option<usize>, message: String| ScenarioError {
        file: file.to_string(),
        line,
        column: None,
        field_path: path.to_string(),
        message: format!("--set {path}={value}: {message}"),
    };
    let steps: Vec<String> = split_path(path)
        .filter(|steps| !steps.is_empty())
        .ok_or_else(|| fail(None, "not a field path".into()))?
        .into_iter()
        .map(|step| match step {
            Step::Key(key) => key,
            Step::Index(i) => i.to_string(),
        })
        .collect();
    if steps.iter().any(String::is_empty) {
        return Err(fail(None, "not a field path (empty step)".into()));
    }
    let rendered = render_scalar(value).map_err(|m| fail(None, m))?;
    let Some(tree) = Node::parse(&edited.text) else {
        return Err(fail(None, "the scenario has no fields to set".into()));
    };
    let (node, found) = tree.walk(&steps);
    let at = edited.origin(node.start.line).original_line;
    let line = |_: &Node| at;
    if found == steps.len() {
        return replace(edited, index, node, &rendered).map_err(|m| fail(at, m));
    }
    let missing = &steps[found];
    match &node.kind {
        NodeKind::Map { .. } if found + 1 == steps.len() => {
            insert(edited, index, node, missing, &rendered);
            Ok(())
        }
        NodeKind::Seq { .. } => Err(fail(
            line(node),
            format!(
                "`{}` has no entry named `{missing}`",
                steps[..found].join(".")
            ),
        )),
        _ if found == 0 => Err(fail(None, format!("the scenario has no field `{missing}`"))),
        _ => Err(fail(
            line(node),
            format!("`{}` has no field `{missing}`", steps[..found].join(".")),
        )),
    }
}

/// Replaces the scalar `node` with `rendered`.
fn replace(edited: &mut Edited, index: usize, node: &Node, rendered: &str) -> Result<(), String> {
    match &node.kind {
        NodeKind::Map { .. } => return Err("is a mapping; --set sets single values".into()),
        NodeKind::Seq { .. } => return Err("is a list; --set sets single values".into()),
        NodeKind::Scalar(_) if node.start.line != node.end.line => {
            return Err("is a multi-line value; --set sets one-line values".into());
        }
        NodeKind::Scalar(_) => {}
    }
    let (start, end) = (node.start.byte, node.end.byte);
    // An empty value (`key:`) has an empty span: keep a space after the colon.
    let padded = match start == end && edited.text[..start].ends_with(':') {
        true => format!(" {rendered}"),
        false => rendered.to_string(),
    };
    edited.text.replace_range(start..end, &padded);
    edited.replaced.push((node.start.line, index));
    Ok(())
}

/// Adds `key: rendered` to the mapping `map`.
fn insert(edited: &mut Edited, index: usize, map: &Node, key: &str, rendered: &str) {
    let NodeKind::Map { entries, flow } = &map.kind else {
        unreachable!("insert is only called on mappings");
    };
    let key = render_scalar(key).unwrap_or_else(|_| format!("{key:?}"));
    if *flow {
        // Just before the closing brace.
        let close = map.end.byte.saturating_sub(1);
        let separator = if entries.is_empty() { "" } else { ", " };
        edited
            .text
            .insert_str(close, &format!("{separator}{key}: {rendered}"));
        edited.replaced.push((map.end.line, index));
        return;
    }
    let indent = entries.first().map_or(0, |(k, _)| k.start.col);
    let line_end = edited.text[map.end.byte..]
        .find('\n')
        .map_or(edited.text.len(), |offset| map.end.byte + offset);
    let new_line = format!("\n{}{key}: {rendered}", " ".repeat(indent));
    edited.text.insert_str(line_end, &new_line);
    let added = map.end.line + 1;
    edited.shift_lines_from(added);
    edited.inserted.push((added, index));
}

/// A value as YAML scalar text: plain if it is a simple word or number, else double-quoted.
fn render_scalar(value: &str) -> Result<String, String> {
    if value.contains(['\n', '\r']) {
        return Err("a value must be one line".into());
    }
    let plain = !value.is_empty()
        && !value.starts_with(['-', '.'])
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.+-/~".contains(c));
    let number_like = value.parse::<f64>().is_ok();
    if plain || number_like {
        Ok(value.to_string())
    } else {
        Ok(serde_json::to_string(value).expect("strings serialise"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
name: demo
router:
  policy_classes:
    - name: premium
      quantum: 512
    - {name: regular, quantum: 128}
workers:
  count: 1
  engine: {max_num_seqs: 4}
workload:
  groups: []
";

    fn set(pairs: &[(&str, &str)]) -> Result<Edited, ScenarioError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect();
        apply("s.yaml", TEXT, &pairs)
    }

    #[test]
    fn replaces_values_in_place_by_entry_name() {
        let edited = set(&[
            ("router.policy_classes.regular.quantum", "64"),
            ("router.policy_classes.premium.quantum", "1024"),
            ("workers.engine.max_num_seqs", "8"),
        ])
        .unwrap();
        assert!(edited.text.contains("{name: regular, quantum: 64}"));
        assert!(edited.text.contains("      quantum: 1024\n"));
        assert!(edited.text.contains("engine: {max_num_seqs: 8}"));
        assert_eq!(edited.text.lines().count(), TEXT.lines().count());
        assert_eq!(edited.origin(6).override_index, Some(0));
        assert_eq!(edited.origin(5).override_index, Some(1));
        assert_eq!(edited.origin(1).override_index, None);
    }

    #[test]
    fn adds_missing_keys_and_maps_lines_back() {
        let edited = set(&[
            ("workers.dp_size", "2"),
            ("workers.engine.block_size", "16"),
            ("router.router_temperature", "0.5"),
        ])
        .unwrap();
        let lines: Vec<&str> = edited.text.lines().collect();
        assert_eq!(lines[10], "  dp_size: 2");
        assert!(lines[9].contains("{max_num_seqs: 4, block_size: 16}"));
        assert_eq!(lines[6], "  router_temperature: 0.5");
        let origin = edited.origin(7);
        assert_eq!(
            origin,
            LineOrigin {
                original_line: None,
                override_index: Some(2)
            }
        );
        // The original `workers:` line 7 is now line 8; `workload:` (10) is now 12.
        assert_eq!(edited.origin(8).original_line, Some(7));
        assert_eq!(edited.origin(12).original_line, Some(10));
        assert_eq!(edited.origin(11).override_index, Some(0));
    }

    #[test]
    fn bad_paths_are_errors_naming_the_path() {
        let error = set(&[("workers.engin.max_num_seqs", "8")]).unwrap_err();
        assert_eq!(error.field_path, "workers.engin.max_num_seqs");
        assert_eq!(error.line, Some(8));
        assert!(
            error.message.contains("`workers` has no field `engin`"),
            "{error}"
        );
        let error = set(&[("router.policy_classes.gold.quantum", "8")]).unwrap_err();
        assert!(error.message.contains("no entry named `gold`"), "{error}");
        let error = set(&[("router.policy_classes", "8")]).unwrap_err();
        assert!(error.message.contains("is a list"), "{error}");
        let error = set(&[("", "8")]).unwrap_err();
        assert!(error.message.contains("not a field path"), "{error}");
        // An unknown top-level key is added; typed parsing then refuses it by name.
        assert!(set(&[("bogus", "8")]).unwrap().text.ends_with("bogus: 8\n"));
    }

    #[test]
    fn values_cannot_change_the_structure() {
        let edited = set(&[("name", "x, y: {z}\"")]).unwrap();
        assert!(edited.text.starts_with("name: \"x, y: {z}\\\"\"\n"));
        assert!(set(&[("name", "a\nb: 1")]).is_err());
        assert_eq!(render_scalar("-1").unwrap(), "-1");
        assert_eq!(render_scalar("true").unwrap(), "true");
        assert_eq!(render_scalar("~").unwrap(), "~");
        assert_eq!(render_scalar("- 1").unwrap(), "\"- 1\"");
    }
}
