//! Dotted field paths: `router.policy_classes.regular.quantum`, `expect[0].within`,
//! `router.models."meta/llama-3.1".policy_classes`.

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A mapping key, or a list entry's `name`.
    Key(String),
    /// A list entry by index (`[n]`).
    Index(usize),
}

impl Step {
    /// The step as path text: a key, or an index as digits.
    pub fn label(&self) -> String {
        match self {
            Step::Key(key) => key.clone(),
            Step::Index(i) => i.to_string(),
        }
    }
}

/// The path's steps: dot-separated keys (a key may be a double-quoted string with `\`
/// escapes, so model names with dots survive) and `[n]` indexes. `None` if malformed (an
/// unterminated quote, a non-numeric index, an empty step). The empty path is the root.
pub fn parse_path(path: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    let mut chars = path.chars().peekable();
    while let Some(&next) = chars.peek() {
        match next {
            '.' => {
                chars.next();
                // `a..b`, `.a` and `a.` have an empty step.
                if steps.is_empty() || matches!(chars.peek(), None | Some('.')) {
                    return None;
                }
            }
            '[' => {
                chars.next();
                let digits: String = chars.by_ref().take_while(|c| *c != ']').collect();
                steps.push(Step::Index(digits.parse().ok()?));
            }
            '"' => {
                chars.next();
                steps.push(Step::Key(quoted_key(&mut chars)?));
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
                steps.push(Step::Key(key));
            }
        }
    }
    Some(steps)
}

/// The rest of a `"..."` key after its opening quote; `None` if unterminated.
fn quoted_key(chars: &mut impl Iterator<Item = char>) -> Option<String> {
    let mut key = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(key),
            '\\' => key.push(chars.next()?),
            other => key.push(other),
        }
    }
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
