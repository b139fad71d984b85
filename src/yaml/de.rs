//! Typed deserialisation of a [`Document`] with serde-saphyr, its errors turned into
//! (line, column, field path, message) in words for the user: no serde or library advice.

use super::{Document, Error, NodeKind, Step, join_path, parse_path};
use serde::de::DeserializeOwned;
use serde_saphyr::{DefaultMessageFormatter, MessageFormatter};

impl Document {
    /// The document as a `T`; `None` for an empty or null document.
    pub fn deserialize<T: DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        let mut options = serde_saphyr::Options::default();
        options.with_snippet = false;
        serde_saphyr::from_str_with_options::<Option<T>>(self.text(), options)
            .map_err(|error| self.parse_error(&error))
    }

    /// A serde-saphyr error at its structured location, with the field path found there.
    fn parse_error(&self, error: &serde_saphyr::Error) -> Error {
        let error = innermost(error);
        let position = error
            .location()
            .filter(|at| at.line() > 0)
            .map(|at| (to_usize(at.line()), to_usize(at.column()).max(1)));
        let field_path = match (self.root(), position) {
            (Some(tree), Some((line, column))) => tree.path_at(line, column),
            _ => String::new(),
        };
        let field_path = match error {
            serde_saphyr::Error::SerdeMissingField { field, .. } => {
                self.missing_field_path(&field_path, field)
            }
            _ => field_path,
        };
        let scalar = self.get(&field_path).and_then(|n| n.scalar());
        self.error_at_position(position, Some(field_path.clone()), describe(error, scalar))
    }
}

impl Document {
    /// The path of missing `field`: serde-saphyr reports it at the end of its mapping, so
    /// `near` is a sibling (or inside one); the field belongs to the deepest mapping on the way
    /// to `near` that lacks it.
    fn missing_field_path(&self, near: &str, field: &str) -> String {
        let steps = parse_path(near).unwrap_or_default();
        let Some(mut node) = self.root() else {
            return field.to_string();
        };
        let mut owner = 0;
        let lacks = |node: &super::Node| {
            matches!(node.kind, NodeKind::Map { .. }) && node.get(field).is_none()
        };
        for (depth, step) in steps.iter().enumerate() {
            if lacks(node) {
                owner = depth;
            }
            match node.child(step) {
                Some(child) => node = child,
                None => return owned_path(&steps[..owner], field),
            }
        }
        // `near` itself is a flow mapping (`sessions: {}`): the error is at its own `}`, in no
        // entry of it, so the field is its own.
        if matches!(node.kind, NodeKind::Map { flow: true, .. }) && lacks(node) {
            owner = steps.len();
        }
        owned_path(&steps[..owner], field)
    }
}

/// `field` under the mapping at `steps`.
fn owned_path(steps: &[Step], field: &str) -> String {
    let mut path: Vec<String> = steps.iter().map(Step::label).collect();
    path.push(field.to_string());
    join_path(&path)
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The error an alias or snippet wrapper carries.
fn innermost(error: &serde_saphyr::Error) -> &serde_saphyr::Error {
    match error.without_snippet() {
        serde_saphyr::Error::AliasError { error, .. } => innermost(error),
        other => other,
    }
}

/// The message of `error` in the user's terms; `scalar` is the offending value's text.
fn describe(error: &serde_saphyr::Error, scalar: Option<&str>) -> String {
    use serde_saphyr::Error as E;
    let got = |message: String| match scalar {
        Some(text) => format!("{message}, got `{text}`"),
        None => message,
    };
    // A number beyond the type says the bound; anything else, what the type takes.
    let invalid = |ty: &str| match scalar.and_then(|text| out_of_range(ty, text)) {
        Some(message) => message,
        None => got(format!("expected {}", type_words(ty))),
    };
    match error {
        E::SerdeUnknownVariant {
            variant, expected, ..
        } => format!("unknown value `{variant}`{}", one_of(expected)),
        E::SerdeUnknownField { field, .. } => format!("unknown field `{field}`"),
        E::DuplicateMappingKey { key: Some(key), .. } => format!("duplicate key `{key}`"),
        E::DuplicateMappingKey { key: None, .. } => "duplicate key".to_string(),
        E::InvalidScalar { ty, .. } => invalid(ty),
        E::SerdeInvalidType { expected, .. } | E::SerdeInvalidValue { expected, .. } => {
            invalid(expected)
        }
        E::SerdeMissingField { field, .. } => format!("missing field `{field}`"),
        // Messages of the schema's own checks (e.g. a custom visitor), already in words.
        E::Message { msg, .. } => msg.clone(),
        // What is left is about the YAML itself: syntax, anchors, limits.
        other => format!(
            "invalid YAML: {}",
            DefaultMessageFormatter.format_message(other)
        ),
    }
}

/// `, expected one of a, b, c` (nothing if serde gave no list).
fn one_of(expected: &[&str]) -> String {
    match expected {
        [] => String::new(),
        [only] => format!(", expected `{only}`"),
        many => format!(", expected one of {}", many.join(", ")),
    }
}

/// The smallest and largest value of an integer type, by its Rust name.
fn integer_range(ty: &str) -> Option<(i128, u128)> {
    Some(match ty {
        "u8" => (0, u8::MAX.into()),
        "u16" => (0, u16::MAX.into()),
        "u32" => (0, u32::MAX.into()),
        "u64" | "usize" => (0, u64::MAX.into()),
        "i8" => (i8::MIN.into(), i8::MAX as u128),
        "i16" => (i16::MIN.into(), i16::MAX as u128),
        "i32" => (i32::MIN.into(), i32::MAX as u128),
        "i64" | "isize" => (i64::MIN.into(), i64::MAX as u128),
        _ => None?,
    })
}

/// For a number `text` beyond what integer type `ty` holds (e.g. `5000000000` for a `u32`,
/// `1e29` for a `u64`), a message that says the bound; `None` for anything else (a word, a
/// fraction, a negative number for an unsigned type), which the type's words describe.
pub(super) fn out_of_range(ty: &str, text: &str) -> Option<String> {
    let (min, max) = integer_range(ty)?;
    let value: f64 = text
        .trim()
        .trim_start_matches('+')
        .replace('_', "")
        .parse()
        .ok()?;
    let largest = match max {
        max if max == u128::from(u64::MAX) => format!("{max} (2^64 - 1)"),
        max => max.to_string(),
    };
    // `max as f64 + 1.0` is the first whole number past `max` (2^64 exactly for u64::MAX).
    if value >= max as f64 + 1.0 {
        return Some(format!(
            "`{text}` is more than {largest}, the largest whole number this field can hold"
        ));
    }
    if min < 0 && value <= min as f64 - 1.0 {
        return Some(format!(
            "`{text}` is less than {min}, the smallest whole number this field can hold"
        ));
    }
    None
}

/// A Rust type name as a user reads it (`u64` is "a whole number >= 0").
pub(super) fn type_words(ty: &str) -> String {
    match ty {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number >= 0".to_string(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".to_string(),
        "f32" | "f64" => "a number".to_string(),
        "bool" | "a boolean" => "true or false".to_string(),
        other => other.to_string(),
    }
}
