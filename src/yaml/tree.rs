//! The node tree: every mapping, list and scalar of a document with its source positions.
//!
//! serde-saphyr reports errors by position only and typed schemas keep no tree; this tree
//! (built from granit-parser's events) maps positions to field paths and paths to positions.

use super::path::{Step, join_path};
use serde_saphyr::granit_parser::{Event, Marker, Parser, Span, StructureStyle};

/// A position in the text: 1-based line, 0-based column, byte offset.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 0-based column.
    pub col: usize,
    /// Byte offset in the text.
    pub byte: usize,
}

/// One node and where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Where the node starts.
    pub start: Pos,
    /// Where the node ends (exclusive).
    pub end: Pos,
    /// What the node is.
    pub kind: NodeKind,
}

/// What a node is.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// A scalar (or alias) with its text after escape processing.
    Scalar(String),
    /// A sequence; `flow` for `[a, b]`.
    Seq {
        /// The entries.
        items: Vec<Node>,
        /// Written as `[a, b]`.
        flow: bool,
    },
    /// A mapping in source order; `flow` for `{a: 1}`.
    Map {
        /// (key, value) pairs.
        entries: Vec<(Node, Node)>,
        /// Written as `{a: 1}`.
        flow: bool,
    },
}

impl Node {
    /// The first document of `text`, or `None` if it has no node (empty, or a syntax error
    /// before the first node). A syntax error later leaves the tree built so far.
    pub fn parse(text: &str) -> Option<Node> {
        let mut events = Vec::new();
        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { break };
            match event {
                Event::DocumentEnd | Event::StreamEnd => break,
                Event::Scalar(..)
                | Event::Alias(_)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
                | Event::SequenceEnd
                | Event::MappingEnd => events.push((event, span)),
                _ => {}
            }
        }
        build(text, &events, &mut 0)
    }

    /// The scalar text, if this is a scalar.
    pub fn scalar(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar(text) => Some(text),
            _ => None,
        }
    }

    /// Whether this is an empty or null scalar (`key:`, `~`, `null`).
    pub fn is_null(&self) -> bool {
        matches!(self.scalar(), Some("" | "~" | "null" | "Null" | "NULL"))
    }

    /// The value of `key` in this mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            NodeKind::Map { entries, .. } => entries
                .iter()
                .find(|(k, _)| k.scalar() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The child a step names: a mapping's key; a list entry by `name`, else by index.
    pub fn child(&self, step: &Step) -> Option<&Node> {
        match (&self.kind, step) {
            (NodeKind::Map { .. }, Step::Key(key)) => self.get(key),
            (NodeKind::Seq { items, .. }, Step::Index(i)) => items.get(*i),
            (NodeKind::Seq { items, .. }, Step::Key(key)) => items
                .iter()
                .find(|item| item.get("name").and_then(Node::scalar) == Some(key))
                .or_else(|| key.parse::<usize>().ok().and_then(|i| items.get(i))),
            _ => None,
        }
    }

    /// The node at `steps`, and how many steps were found (all of them when it exists).
    pub fn walk<'a>(&'a self, steps: &[Step]) -> (&'a Node, usize) {
        let mut node = self;
        for (depth, step) in steps.iter().enumerate() {
            match node.child(step) {
                Some(child) => node = child,
                None => return (node, depth),
            }
        }
        (node, steps.len())
    }

    /// The dotted path (list entries by name) of the deepest node containing `line:column`
    /// (1-based both), keys included: a position on a key names that key.
    pub fn path_at(&self, line: usize, column: usize) -> String {
        let at = (line, column.saturating_sub(1));
        let mut steps: Vec<String> = Vec::new();
        let mut node = self;
        // Bounded by the tree's depth: every iteration descends one level.
        while let Some((step, child)) = node.child_at(at, &mut steps) {
            steps.push(step);
            node = child;
        }
        join_path(&steps)
    }

    /// The child containing `at` with its step; a key containing `at` is pushed to `steps`
    /// and ends the descent.
    fn child_at(&self, at: (usize, usize), steps: &mut Vec<String>) -> Option<(String, &Node)> {
        match &self.kind {
            NodeKind::Scalar(_) => None,
            NodeKind::Map { entries, .. } => entries.iter().find_map(|(k, v)| {
                let key = k.scalar().unwrap_or_default().to_string();
                if k.contains(at) {
                    steps.push(key);
                    return None;
                }
                v.contains(at).then_some((key, v))
            }),
            NodeKind::Seq { items, .. } => items
                .iter()
                .enumerate()
                .find_map(|(i, item)| item.contains(at).then(|| (item_label(item, i), item))),
        }
    }

    /// Rewrites a path with index steps (`policy_classes[1].quantum`) into the name form
    /// (`policy_classes.regular.quantum`), following this tree; unknown parts stay as given.
    pub fn name_path(&self, steps: &[Step]) -> String {
        let mut out = Vec::new();
        let mut node = Some(self);
        for step in steps {
            let next = node.and_then(|n| n.child(step));
            let label = match (step, next) {
                (Step::Index(i), Some(item)) => item_label(item, *i),
                _ => step.label(),
            };
            out.push(label);
            node = next;
        }
        join_path(&out)
    }

    fn contains(&self, (line, col): (usize, usize)) -> bool {
        let at = (line, col);
        let start = (self.start.line, self.start.col);
        start <= at && at < (self.end.line, self.end.col) || start == at
    }
}

/// A list entry's path step: its `name` if it has one, else its index.
fn item_label(item: &Node, index: usize) -> String {
    item.get("name")
        .and_then(Node::scalar)
        .map_or_else(|| index.to_string(), str::to_string)
}

fn pos(text: &str, marker: &Marker) -> Pos {
    let byte = marker.byte_offset().unwrap_or_else(|| {
        text.char_indices()
            .nth(marker.index())
            .map_or(text.len(), |(b, _)| b)
    });
    Pos {
        line: marker.line(),
        col: marker.col(),
        byte,
    }
}

/// Builds the node starting at `events[*cursor]`, leaving the cursor after it.
fn build(text: &str, events: &[(Event, Span)], cursor: &mut usize) -> Option<Node> {
    let (event, span) = events.get(*cursor)?;
    *cursor += 1;
    let start = pos(text, &span.start);
    let node = |end: Option<Pos>, kind| Node {
        start,
        end: end.unwrap_or(start),
        kind,
    };
    match event {
        Event::Scalar(value, ..) => Some(node(
            Some(pos(text, &span.end)),
            NodeKind::Scalar(value.to_string()),
        )),
        Event::Alias(_) => Some(node(
            Some(pos(text, &span.end)),
            NodeKind::Scalar(String::new()),
        )),
        Event::SequenceStart(style, ..) => {
            let mut items = Vec::new();
            let end = collect_children(text, events, cursor, |child| items.push(child));
            let flow = *style == StructureStyle::Flow;
            Some(node(end, NodeKind::Seq { items, flow }))
        }
        Event::MappingStart(style, ..) => {
            let mut flat = Vec::new();
            let end = collect_children(text, events, cursor, |child| flat.push(child));
            let mut entries = Vec::new();
            let mut iter = flat.into_iter();
            while let (Some(k), Some(v)) = (iter.next(), iter.next()) {
                entries.push((k, v));
            }
            let flow = *style == StructureStyle::Flow;
            Some(node(end, NodeKind::Map { entries, flow }))
        }
        _ => None,
    }
}

/// Builds children until the matching end event; returns the end position of the last
/// child's content (the collection's end), or `None` if there is none.
fn collect_children(
    text: &str,
    events: &[(Event, Span)],
    cursor: &mut usize,
    mut push: impl FnMut(Node),
) -> Option<Pos> {
    let mut end = None;
    while let Some((event, span)) = events.get(*cursor) {
        if matches!(event, Event::SequenceEnd | Event::MappingEnd) {
            *cursor += 1;
            // Flow collections end at their bracket; block ones at their last child.
            let close = pos(text, &span.end);
            let is_bracket = text[..close.byte.min(text.len())].ends_with([']', '}']);
            return if is_bracket { Some(close) } else { end };
        }
        let child = build(text, events, cursor)?;
        end = Some(child.end);
        push(child);
    }
    end
}
