//! A document: its text, its tree, and the `--set` edits made to it, so that every error
//! found in the edited text is reported at the original line or at the edit that caused it.
//!
//! A set replaces the scalar at PATH in place (same line, so every other line keeps its
//! number). A PATH whose keys are missing from an existing mapping adds the first missing key,
//! with nested flow mappings for the rest (`delays: {arrival_jitter_ns: 1000}`): in a flow
//! mapping on the same line, in a block mapping as a new line after the mapping's last line.
//! Lists are addressed by their entries' `name` (or index); a set cannot add an entry. Values
//! are YAML scalars: anything that is not a plain number, boolean, null or simple word is
//! written quoted, so a value can never change the document's structure.

use super::path::{Step, join_path, parse_path};
use super::tree::{Node, NodeKind};
use super::{Error, Located};

/// Text, tree and edits of one document.
#[derive(Clone, Debug)]
pub struct Document {
    text: String,
    tree: Option<Node>,
    /// Every `(path, value)` set so far, in order.
    sets: Vec<(String, String)>,
    /// (line in the edited text, set index) of every replaced value.
    replaced: Vec<(usize, usize)>,
    /// (line in the edited text, set index) of every added line.
    inserted: Vec<(usize, usize)>,
    /// Put before set paths in messages, for a document embedded under a key elsewhere.
    shown_prefix: String,
}

impl Document {
    /// The document of `text`, unedited.
    pub fn parse(text: &str) -> Document {
        Document {
            text: text.to_string(),
            tree: Node::parse(text),
            sets: Vec::new(),
            replaced: Vec::new(),
            inserted: Vec::new(),
            shown_prefix: String::new(),
        }
    }

    /// The same document, its sets named in messages as `--set {prefix}PATH=VALUE`: for a
    /// document that is part of another under `prefix` (a policy file under `router.`).
    #[must_use]
    pub fn shown_under(mut self, prefix: &str) -> Self {
        self.shown_prefix = prefix.to_string();
        self
    }

    /// The (edited) text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The root node, if the text has one.
    pub fn root(&self) -> Option<&Node> {
        self.tree.as_ref()
    }

    /// The node at dotted `path`, if it exists.
    pub fn get(&self, path: &str) -> Option<&Node> {
        let steps = parse_path(path)?;
        let (node, found) = self.tree.as_ref()?.walk(&steps);
        (found == steps.len()).then_some(node)
    }

    /// `path` in the name form (`policy_classes[1]` becomes `policy_classes.regular`).
    pub fn name_path(&self, path: &str) -> String {
        match (&self.tree, parse_path(path)) {
            (Some(tree), Some(steps)) => tree.name_path(&steps),
            _ => path.to_string(),
        }
    }

    /// An error about the node `path` names (or the deepest part of it that exists).
    pub fn error_at(&self, path: &str, message: impl Into<String>) -> Error {
        let node = match (&self.tree, parse_path(path)) {
            (Some(tree), Some(steps)) => Some(tree.walk(&steps).0),
            _ => None,
        };
        let position = node.map(|n| (n.start.line, n.start.col + 1));
        self.error_at_position(position, Some(self.name_path(path)), message)
    }

    /// An error at edited-text `position` (1-based line and column), about `field_path`
    /// (the path of the node there when `None`), mapped back to the original text.
    pub fn error_at_position(
        &self,
        position: Option<(usize, usize)>,
        field_path: Option<String>,
        message: impl Into<String>,
    ) -> Error {
        let field_path = field_path.unwrap_or_else(|| match (&self.tree, position) {
            (Some(tree), Some((line, column))) => tree.path_at(line, column),
            _ => String::new(),
        });
        let located = position.map(|(line, column)| self.origin(line, column));
        let mut error = Error {
            line: located.and_then(|at| at.line),
            column: located.and_then(|at| at.line.and(Some(at.column))),
            field_path,
            message: message.into(),
        };
        if let Some(index) = located.and_then(|at| at.set_by) {
            let (path, value) = &self.sets[index];
            let shown = &self.shown_prefix;
            error.message = format!("--set {shown}{path}={value}: {}", error.message);
            if error.line.is_none() || error.field_path.is_empty() {
                error.field_path = path.clone();
            }
        }
        error
    }

    /// Where edited `line:column` came from.
    pub fn origin(&self, line: usize, column: usize) -> Located {
        if let Some(&(_, index)) = self.inserted.iter().find(|(at, _)| *at == line) {
            return Located {
                line: None,
                column,
                set_by: Some(index),
            };
        }
        let shift = self.inserted.iter().filter(|(at, _)| *at < line).count();
        let set_by = self.replaced.iter().rev().find(|(at, _)| *at == line);
        Located {
            line: Some(line - shift),
            column,
            set_by: set_by.map(|&(_, index)| index),
        }
    }

    /// Sets the scalar at dotted `path` to `value`, creating missing mapping keys. `lists`
    /// names keys whose values are lists, so that a path through a missing one is refused
    /// (a set cannot create list entries). Errors name the path.
    pub fn set(&mut self, path: &str, value: &str, lists: &[&str]) -> Result<(), Error> {
        let index = self.sets.len();
        self.sets.push((path.to_string(), value.to_string()));
        let result = self.apply_set(index, path, value, lists);
        if result.is_err() {
            self.sets.pop();
        }
        result
    }

    fn apply_set(
        &mut self,
        index: usize,
        path: &str,
        value: &str,
        lists: &[&str],
    ) -> Result<(), Error> {
        let shown = &self.shown_prefix;
        let fail = |line: Option<usize>, message: String| Error {
            line,
            column: None,
            field_path: path.to_string(),
            message: format!("--set {shown}{path}={value}: {message}"),
        };
        let steps = parse_path(path)
            .filter(|steps| !steps.is_empty())
            .ok_or_else(|| fail(None, "not a field path".into()))?;
        if steps.contains(&Step::Key(String::new())) {
            return Err(fail(None, "not a field path (empty step)".into()));
        }
        let rendered = render_scalar(value).map_err(|m| fail(None, m))?;
        let Some(tree) = &self.tree else {
            return Err(fail(None, "the document has no fields to set".into()));
        };
        let (node, found) = tree.walk(&steps);
        let line = self.origin(node.start.line, 0).line;
        let edit = plan(node, &steps, found, &rendered, lists).map_err(|m| fail(line, m))?;
        if !edit.fits(&self.text) {
            return Err(fail(
                line,
                "the YAML around it is malformed; fix the file".into(),
            ));
        }
        self.apply_edit(index, edit);
        Ok(())
    }

    fn apply_edit(&mut self, index: usize, edit: Edit) {
        match edit {
            Edit::Replace {
                start,
                end,
                line,
                text,
            } => {
                let (start, end, text) = self.empty_value_span(start, end, text);
                self.text.replace_range(start..end, &text);
                self.replaced.push((line, index));
            }
            Edit::InsertLine {
                after_byte,
                line,
                text,
            } => {
                self.text.insert_str(after_byte, &text);
                for (at, _) in self.replaced.iter_mut().chain(self.inserted.iter_mut()) {
                    if *at >= line {
                        *at += 1;
                    }
                }
                self.inserted.push((line, index));
            }
        }
        self.tree = Node::parse(&self.text);
    }
}

impl Document {
    /// An empty value (`key:`) has an empty span, before or after the colon: the value goes
    /// after the colon, with a space.
    fn empty_value_span(&self, start: usize, end: usize, text: String) -> (usize, usize, String) {
        if start != end {
            return (start, end, text);
        }
        let at = match self.text[start..].starts_with(':') {
            true => start + 1,
            false => start,
        };
        match self.text[..at].ends_with(':') {
            true => (at, at, format!(" {text}")),
            false => (at, at, text),
        }
    }
}

/// One text edit a set makes.
enum Edit {
    /// Replace bytes `start..end` (on edited line `line`) with `text`.
    Replace {
        start: usize,
        end: usize,
        line: usize,
        text: String,
    },
    /// Insert `text` (starting with a newline) at `after_byte`, becoming edited line `line`.
    InsertLine {
        after_byte: usize,
        line: usize,
        text: String,
    },
}

impl Edit {
    /// Whether the edit's bytes lie on character boundaries of `text`. Positions come from
    /// the tree; in malformed text (an unclosed flow mapping) they can fall anywhere.
    fn fits(&self, text: &str) -> bool {
        match self {
            Edit::Replace { start, end, .. } => {
                start <= end && text.is_char_boundary(*start) && text.is_char_boundary(*end)
            }
            Edit::InsertLine { after_byte, .. } => text.is_char_boundary(*after_byte),
        }
    }
}

/// The edit that sets `steps` to `rendered`, given the walk reached `node` after `found` steps.
fn plan(
    node: &Node,
    steps: &[Step],
    found: usize,
    rendered: &str,
    lists: &[&str],
) -> Result<Edit, String> {
    let labels: Vec<String> = steps.iter().map(Step::label).collect();
    let reached = join_path(&labels[..found]);
    if found == steps.len() {
        return replace(node, rendered);
    }
    let missing = &steps[found..];
    if let Some(list) = missing[..missing.len() - 1]
        .iter()
        .find(|step| matches!(step, Step::Key(k) if lists.contains(&k.as_str())))
    {
        return Err(format!(
            "`{}` is a list the file does not have: --set cannot add list entries, write the entry in the file",
            join_path(&labels[..=found + missing.iter().position(|s| s == list).unwrap_or(0)])
        ));
    }
    match &node.kind {
        NodeKind::Seq { .. } => Err(format!(
            "`{reached}` has no entry named `{}` (--set cannot add list entries: write the entry in the file)",
            labels[found]
        )),
        NodeKind::Map { .. } => insert(node, missing, rendered),
        NodeKind::Scalar(_) if node.is_null() && found > 0 => {
            replace(node, &nested_value(missing, rendered)?)
        }
        NodeKind::Scalar(_) => Err(format!(
            "`{reached}` is a single value: it has no field `{}`",
            labels[found]
        )),
    }
}

/// Replaces the scalar `node` with `rendered`.
fn replace(node: &Node, rendered: &str) -> Result<Edit, String> {
    match &node.kind {
        NodeKind::Map { .. } => return Err("is a mapping; --set sets single values".into()),
        NodeKind::Seq { .. } => return Err("is a list; --set sets single values".into()),
        NodeKind::Scalar(_) if node.start.line != node.end.line => {
            return Err("is a multi-line value; --set sets one-line values".into());
        }
        NodeKind::Scalar(_) => {}
    }
    Ok(Edit::Replace {
        start: node.start.byte,
        end: node.end.byte,
        line: node.start.line,
        text: rendered.to_string(),
    })
}

/// `missing[0]: value` added to mapping `map`, where value nests the other missing keys.
fn insert(map: &Node, missing: &[Step], rendered: &str) -> Result<Edit, String> {
    let NodeKind::Map { entries, flow } = &map.kind else {
        unreachable!("insert is only called on mappings");
    };
    let key = key_text(&missing[0])?;
    let value = nested_value(&missing[1..], rendered)?;
    if *flow {
        // Just before the closing brace.
        let separator = if entries.is_empty() { "" } else { ", " };
        return Ok(Edit::Replace {
            start: map.end.byte.saturating_sub(1),
            end: map.end.byte.saturating_sub(1),
            line: map.end.line,
            text: format!("{separator}{key}: {value}"),
        });
    }
    let indent = entries.first().map_or(0, |(k, _)| k.start.col);
    Ok(Edit::InsertLine {
        after_byte: map.end.byte,
        line: map.end.line + 1,
        text: format!("\n{}{key}: {value}", " ".repeat(indent)),
    })
}

/// `rendered` inside flow mappings for each of `keys`: `{a: {b: 1}}`.
fn nested_value(keys: &[Step], rendered: &str) -> Result<String, String> {
    let mut value = rendered.to_string();
    for step in keys.iter().rev() {
        value = format!("{{{}: {value}}}", key_text(step)?);
    }
    Ok(value)
}

/// A missing step as a mapping key (an index names a list entry, which cannot be created).
fn key_text(step: &Step) -> Result<String, String> {
    match step {
        Step::Key(key) => render_scalar(key),
        Step::Index(i) => Err(format!(
            "there is no list entry [{i}]: --set cannot add list entries"
        )),
    }
}

/// A value as YAML scalar text: plain if it is a simple word or number, else double-quoted.
pub(super) fn render_scalar(value: &str) -> Result<String, String> {
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
