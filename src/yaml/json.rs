//! Typed JSON (the engine and router configs Dynamo takes as JSON), with the same errors as
//! YAML: the field path (by `serde_path_to_error`), line, column and a message in words.

use super::Error;
use super::de::{out_of_range, type_words};
use serde::de::DeserializeOwned;

/// `text` as a `T`, strictly as JSON (duplicate keys and unknown fields as `T` refuses them).
pub fn from_json_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(path_error)?;
    deserializer
        .end()
        .map_err(|e| json_error(String::new(), &e))?;
    Ok(value)
}

/// `value` as a `T` (e.g. one router knob of a scenario); errors name the field path.
pub fn from_json_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(value).map_err(path_error)
}

fn path_error(error: serde_path_to_error::Error<serde_json::Error>) -> Error {
    // `?` is the path of a value serde_path_to_error could not name (e.g. the top level).
    let path = error.path().to_string();
    let path = if path == "." || path == "?" {
        String::new()
    } else {
        path
    };
    json_error(path, error.inner())
}

fn json_error(field_path: String, error: &serde_json::Error) -> Error {
    let position = (error.line() > 0).then(|| (error.line(), error.column()));
    Error {
        line: position.map(|(line, _)| line),
        column: position.map(|(_, column)| column),
        field_path,
        message: in_words(&without_position(error)),
    }
}

/// serde_json's message without the ` at line L column C` it appends when the position is
/// known (the position is kept apart, in the error's line and column).
fn without_position(error: &serde_json::Error) -> String {
    let full = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    match full.strip_suffix(&suffix) {
        Some(message) => message.to_string(),
        None => full,
    }
}

/// serde's wording made the user's: variants are values, and the list of every known field
/// after an unknown one is dropped (the field path names it).
fn in_words(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        return format!("unknown value {rest}");
    }
    if let Some(rest) = message.strip_prefix("duplicate field ") {
        return format!("duplicate key {rest}");
    }
    if let Some((got, expected)) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|rest| rest.rsplit_once(", expected "))
    {
        // serde_json quotes the value: integer `5000000000`, floating point `1e29`.
        let number = got.split('`').nth(1);
        return match number.and_then(|text| out_of_range(expected, text)) {
            Some(message) => message,
            None => format!("expected {}, got {got}", type_words(expected)),
        };
    }
    match message.find(", expected one of") {
        Some(cut) if message.starts_with("unknown field") => message[..cut].to_string(),
        _ => message.to_string(),
    }
}

impl std::fmt::Display for Error {
    /// `path: message (line L, column C)`, dropping what is unknown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.field_path.is_empty() {
            write!(f, "{}: ", self.field_path)?;
        }
        f.write_str(&self.message)?;
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, " (line {line}, column {column})"),
            (Some(line), None) => write!(f, " (line {line})"),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for Error {}
