//! A minimal YAML node tree with source positions, for field paths and `--set` edits.
//!
//! serde-saphyr reports errors by position only and the typed schema keeps no tree; this
//! tree (built from granit-parser's events) maps positions to dotted field paths and paths
//! to positions. List entries that are mappings with a `name` key are addressed by that name.

use serde_saphyr::granit_parser::{Event, Parser, Span, StructureStyle};

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

/// One step of a dotted path: the policy module's field-path segment.
pub use crate::scheduling::policy::Segment as Step;

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
        let mut cursor = 0;
        build(text, &events, &mut cursor)
    }

    /// The scalar text, if this is a scalar.
    pub fn scalar(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar(text) => Some(text),
            _ => None,
        }
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

    /// The child a path step names: a mapping's key, or a list entry by `name` then by index.
    pub fn child(&self, step: &str) -> Option<&Node> {
        match &self.kind {
            NodeKind::Map { .. } => self.get(step),
            NodeKind::Seq { items, .. } => items
                .iter()
                .find(|item| item.get("name").and_then(Node::scalar) == Some(step))
                .or_else(|| step.parse::<usize>().ok().and_then(|i| items.get(i))),
            NodeKind::Scalar(_) => None,
        }
    }

    /// The node at `steps`, and how many steps were found (all of them when it exists).
    pub fn walk<'a>(&'a self, steps: &[String]) -> (&'a Node, usize) {
        let mut node = self;
        for (depth, step) in steps.iter().enumerate() {
            match node.child(step) {
                Some(child) => node = child,
                None => return (node, depth),
            }
        }
        (node, steps.len())
    }

    /// The dotted path (list entries by name) of the deepest node containing `line:col`
    /// (1-based both), keys included: a position on a key names that key.
    pub fn path_at(&self, line: usize, column: usize) -> String {
        let at = (line, column.saturating_sub(1));
        let mut steps: Vec<String> = Vec::new();
        let mut node = self;
        // Bounded by the tree's depth: every iteration descends one level.
        loop {
            let next = match &node.kind {
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
            };
            match next {
                Some((step, child)) => {
                    steps.push(step);
                    node = child;
                }
                None => return join_path(&steps),
            }
        }
    }

    /// Rewrites a path with index steps (`policy_classes[1].quantum`) into the name form
    /// (`policy_classes.regular.quantum`), following this tree; unknown parts stay as given.
    pub fn name_path(&self, steps: &[Step]) -> String {
        let mut out = Vec::new();
        let mut node = Some(self);
        for step in steps {
            let (label, next) = match step {
                Step::Key(key) => (key.clone(), node.and_then(|n| n.get(key))),
                Step::Index(i) => match node.map(|n| &n.kind) {
                    Some(NodeKind::Seq { items, .. }) if *i < items.len() => {
                        (item_label(&items[*i], *i), Some(&items[*i]))
                    }
                    _ => (i.to_string(), None),
                },
            };
            out.push(label);
            node = next;
        }
        join_path(&out)
    }

    fn contains(&self, (line, col): (usize, usize)) -> bool {
        let at = (line, col);
        (self.start.line, self.start.col) <= at && at < (self.end.line, self.end.col)
            || (self.start.line, self.start.col) == at
    }
}

/// A list entry's path step: its `name` if it has one, else its index.
fn item_label(item: &Node, index: usize) -> String {
    item.get("name")
        .and_then(Node::scalar)
        .map_or_else(|| index.to_string(), str::to_string)
}

/// Joins steps with dots, quoting steps that contain a dot.
pub fn join_path(steps: &[String]) -> String {
    steps
        .iter()
        .map(|s| match s.contains('.') {
            true => format!("\"{s}\""),
            false => s.clone(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Splits a dotted path into steps; `"a.b"` quotes a step containing dots, `[n]` is an
/// index step. `None` if malformed.
pub fn split_path(path: &str) -> Option<Vec<Step>> {
    crate::scheduling::policy::parse_field_path(path)
}

fn pos(text: &str, marker: &serde_saphyr::granit_parser::Marker) -> Pos {
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
    let leaf = |kind| Node {
        start,
        end: pos(text, &span.end),
        kind,
    };
    match event {
        Event::Scalar(value, ..) => Some(leaf(NodeKind::Scalar(value.to_string()))),
        Event::Alias(_) => Some(leaf(NodeKind::Scalar(String::new()))),
        Event::SequenceStart(style, ..) => {
            let mut items = Vec::new();
            let end = collect_children(text, events, cursor, |child| items.push(child));
            Some(Node {
                start,
                end: end.unwrap_or(start),
                kind: NodeKind::Seq {
                    items,
                    flow: *style == StructureStyle::Flow,
                },
            })
        }
        Event::MappingStart(style, ..) => {
            let mut flat = Vec::new();
            let end = collect_children(text, events, cursor, |child| flat.push(child));
            let mut entries = Vec::new();
            let mut iter = flat.into_iter();
            while let (Some(k), Some(v)) = (iter.next(), iter.next()) {
                entries.push((k, v));
            }
            Some(Node {
                start,
                end: end.unwrap_or(start),
                kind: NodeKind::Map {
                    entries,
                    flow: *style == StructureStyle::Flow,
                },
            })
        }
        Event::SequenceEnd | Event::MappingEnd => None,
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
workers: {count: 2}
";

    #[test]
    fn paths_address_list_entries_by_name() {
        let tree = Node::parse(TEXT).unwrap();
        let steps: Vec<String> = ["router", "policy_classes", "regular", "quantum"]
            .map(String::from)
            .to_vec();
        let (node, found) = tree.walk(&steps);
        assert_eq!(found, 4);
        assert_eq!(node.scalar(), Some("128"));
        assert_eq!(node.start.line, 6);
        let (_, found) = tree.walk(&["router".into(), "nope".into()]);
        assert_eq!(found, 1);
    }

    #[test]
    fn path_at_names_keys_and_values() {
        let tree = Node::parse(TEXT).unwrap();
        assert_eq!(tree.path_at(5, 7), "router.policy_classes.premium.quantum");
        assert_eq!(tree.path_at(5, 16), "router.policy_classes.premium.quantum");
        assert_eq!(tree.path_at(6, 33), "router.policy_classes.regular.quantum");
        assert_eq!(tree.path_at(7, 18), "workers.count");
        assert_eq!(tree.path_at(1, 1), "name");
    }

    #[test]
    fn index_paths_become_name_paths() {
        let tree = Node::parse(TEXT).unwrap();
        let steps = split_path("router.policy_classes[1].quantum").unwrap();
        assert_eq!(
            tree.name_path(&steps),
            "router.policy_classes.regular.quantum"
        );
        let steps = split_path("router.models.\"a.b\"").unwrap();
        assert_eq!(steps[2], Step::Key("a.b".into()));
        assert_eq!(tree.name_path(&steps), "router.models.\"a.b\"");
    }

    #[test]
    fn byte_offsets_point_at_the_scalar() {
        let tree = Node::parse(TEXT).unwrap();
        let node = tree.walk(&["workers".into(), "count".into()]).0;
        assert_eq!(&TEXT[node.start.byte..node.end.byte], "2");
        let map = tree.get("workers").unwrap();
        assert_eq!(&TEXT[map.start.byte..map.end.byte], "{count: 2}");
    }

    #[test]
    fn empty_and_broken_texts_do_not_panic() {
        assert!(Node::parse("").is_none());
        assert!(Node::parse("a: [").is_some() || Node::parse("a: [").is_none());
        assert_eq!(split_path("a[x]"), None);
    }
}
