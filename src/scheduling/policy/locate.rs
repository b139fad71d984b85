//! Finds the line of a field path (`policy_classes[3].quantum`) in YAML text.
//!
//! Validation errors normally carry lines from serde-saphyr's spans. Those are lost when the
//! raw schema is deserialized through `#[serde(flatten)]` (or from a non-YAML source); this
//! walks the YAML events of the original text to recover them from the error's field path.

use serde_saphyr::granit_parser::{Event, Parser, Span};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// A mapping key (or, in scenario paths, a list entry's `name`).
    Key(String),
    /// A list entry by index.
    Index(usize),
}

/// 1-based (line, column) of the node `field_path` names in the first document of `text`:
/// the value of the last key, the entry of the last index. When only a prefix of the path
/// exists (e.g. a missing field), the deepest node found. `None` if the text does not parse
/// far enough or the path is malformed.
pub fn locate_field_path(text: &str, field_path: &str) -> Option<(usize, usize)> {
    let segments = parse_field_path(field_path)?;
    let events = first_document_events(text);
    let root = events.iter().position(|(event, _)| is_node_start(event))?;
    let found = descend(&events, root, &segments);
    let (_, span) = &events[found];
    Some((span.start.line(), span.start.col() + 1))
}

/// The path's segments: dot-separated keys (a key may be a double-quoted string with `\`
/// escapes, so model names with dots survive) and `[n]` indexes.
pub fn parse_field_path(field_path: &str) -> Option<Vec<Segment>> {
    let mut segments = Vec::new();
    let mut chars = field_path.chars().peekable();
    while let Some(&next) = chars.peek() {
        match next {
            '.' => {
                chars.next();
            }
            '[' => {
                chars.next();
                let digits: String = chars.by_ref().take_while(|c| *c != ']').collect();
                segments.push(Segment::Index(digits.parse().ok()?));
            }
            '"' => {
                chars.next();
                let mut key = String::new();
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => key.push(chars.next()?),
                        other => key.push(other),
                    }
                }
                segments.push(Segment::Key(key));
            }
            _ => {
                let mut key = String::new();
                while let Some(&c) = chars.peek() {
                    if c == '.' || c == '[' {
                        break;
                    }
                    key.push(c);
                    chars.next();
                }
                segments.push(Segment::Key(key));
            }
        }
    }
    Some(segments)
}

/// Node events of the first document (comments and other metadata dropped), stopping at its
/// end or at the first syntax error.
fn first_document_events(text: &str) -> Vec<(Event<'_>, Span)> {
    let mut events = Vec::new();
    for item in Parser::new_from_str(text) {
        let Ok((event, span)) = item else { break };
        if matches!(event, Event::DocumentEnd | Event::StreamEnd) {
            break;
        }
        let structural =
            is_node_start(&event) || matches!(event, Event::SequenceEnd | Event::MappingEnd);
        if structural {
            events.push((event, span));
        }
    }
    events
}

fn is_node_start(event: &Event) -> bool {
    matches!(
        event,
        Event::Scalar(..) | Event::SequenceStart(..) | Event::MappingStart(..) | Event::Alias(_)
    )
}

/// Index of the event after the node starting at `start` (past its end event).
fn skip_node(events: &[(Event, Span)], start: usize) -> usize {
    let mut depth = 0usize;
    let mut index = start;
    while index < events.len() {
        match events[index].0 {
            Event::SequenceStart(..) | Event::MappingStart(..) => depth += 1,
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
        index += 1;
        if depth == 0 {
            break;
        }
    }
    index
}

/// Follows `segments` from the node at `node`; returns the deepest node reached.
fn descend(events: &[(Event, Span)], node: usize, segments: &[Segment]) -> usize {
    let Some((segment, rest)) = segments.split_first() else {
        return node;
    };
    let child = match (&events[node].0, segment) {
        (Event::MappingStart(..), Segment::Key(key)) => mapping_value(events, node, key),
        (Event::SequenceStart(..), Segment::Index(wanted)) => sequence_item(events, node, *wanted),
        _ => None,
    };
    match child {
        Some(child) => descend(events, child, rest),
        None => node,
    }
}

/// Index of the value whose key is `key` in the mapping starting at `mapping`.
fn mapping_value(events: &[(Event, Span)], mapping: usize, key: &str) -> Option<usize> {
    let mut index = mapping + 1;
    while index < events.len() && is_node_start(&events[index].0) {
        let value = skip_node(events, index);
        if value >= events.len() {
            return None;
        }
        if matches!(&events[index].0, Event::Scalar(text, ..) if text == key) {
            return Some(value);
        }
        index = skip_node(events, value);
    }
    None
}

/// Index of item `wanted` of the sequence starting at `sequence`.
fn sequence_item(events: &[(Event, Span)], sequence: usize, wanted: usize) -> Option<usize> {
    let mut index = sequence + 1;
    let mut position = 0;
    while index < events.len() && is_node_start(&events[index].0) {
        if position == wanted {
            return Some(index);
        }
        index = skip_node(events, index);
        position += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# comments are not nodes
router:
  default_policy_family: a
  policy_classes:
    - name: x
      quantum: 1
    - {name: y, quantum: 0}
  models:
    \"meta/llama-3.1\":
      policy_classes: []
";

    #[test]
    fn finds_values_of_keys_and_items_of_lists() {
        assert_eq!(
            locate_field_path(TEXT, "router.default_policy_family"),
            Some((3, 26))
        );
        assert_eq!(
            locate_field_path(TEXT, "router.policy_classes[0].quantum"),
            Some((6, 16))
        );
        assert_eq!(
            locate_field_path(TEXT, "router.policy_classes[1].quantum"),
            Some((7, 26))
        );
        assert_eq!(
            locate_field_path(TEXT, "router.policy_classes[1]").map(|at| at.0),
            Some(7)
        );
    }

    #[test]
    fn quoted_keys_may_contain_dots() {
        let path = "router.models.\"meta/llama-3.1\".policy_classes";
        assert_eq!(locate_field_path(TEXT, path).map(|at| at.0), Some(10));
    }

    #[test]
    fn missing_fields_stop_at_the_deepest_existing_node() {
        assert_eq!(
            locate_field_path(TEXT, "router.policy_classes[0].cache_bucket").map(|at| at.0),
            Some(5)
        );
        assert_eq!(
            locate_field_path(TEXT, "router.policy_classes[7]").map(|at| at.0),
            Some(5)
        );
    }

    #[test]
    fn malformed_paths_and_texts_give_nothing_or_the_root() {
        assert_eq!(locate_field_path(TEXT, "router.policy_classes[x]"), None);
        assert_eq!(locate_field_path(TEXT, "router.\"unterminated"), None);
        assert_eq!(locate_field_path("", "a"), None);
        assert_eq!(locate_field_path("a: [", "a").map(|at| at.0), Some(1));
    }

    #[test]
    fn path_parser_splits_keys_indexes_and_quoted_keys() {
        assert_eq!(
            parse_field_path("models.\"a.b\\\"c\".policy_classes[12].quantum"),
            Some(vec![
                Segment::Key("models".into()),
                Segment::Key("a.b\"c".into()),
                Segment::Key("policy_classes".into()),
                Segment::Index(12),
                Segment::Key("quantum".into()),
            ])
        );
    }
}
