//! Dynamo's router policy YAML: raw schema, validation with locations, and class resolution.
//!
//! Read a document with [`PolicyConfig::from_yaml_str`] or [`PolicyConfig::from_path`]; pick a
//! profile per model with [`PolicyConfig::profile_for`] (falling back to
//! [`PolicyProfile::synthetic`] when it returns `None`); resolve a request's class with
//! [`PolicyProfile::resolve_class_index`]. A document embedded in a larger YAML file can be
//! deserialized as [`RawPolicyConfig`] and checked with [`validate`].

mod describe;
mod error;
mod profile;
pub mod raw;
mod validate;

pub use describe::describe;
pub use error::PolicyError;
pub use profile::{CacheBucket, DEFAULT_MAX_BATCHED_TOKENS, PolicyClass, PolicyProfile};
pub use raw::RawPolicyConfig;
pub use validate::validate;

use std::collections::BTreeMap;
use std::path::Path;

/// A validated policy document: an optional root profile and per-model profiles.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    /// The profile for models without their own (`None` if the document has no root profile).
    pub root: Option<PolicyProfile>,
    /// Model name -> the profile that replaces the root profile for that model.
    pub models: BTreeMap<String, PolicyProfile>,
}

impl PolicyConfig {
    /// Parses and validates a policy document. `source_name` (usually the file path) is put
    /// into errors so they read `policy.yaml:12: root: class "x": quantum must be > 0`.
    pub fn from_yaml_str(text: &str, source_name: Option<&str>) -> Result<Self, PolicyError> {
        let with_source = |error: PolicyError| match source_name {
            Some(name) => error.with_source_name(name),
            None => error,
        };
        let raw = parse_raw(text).map_err(with_source)?;
        validate(&raw).map_err(with_source)
    }

    /// Reads, parses and validates the policy file at `path`.
    pub fn from_path(path: &Path) -> Result<Self, PolicyError> {
        let source_name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|io_error| {
            PolicyError::new(
                "file",
                String::new(),
                None,
                format!("cannot read the policy file: {io_error}"),
            )
            .with_source_name(source_name.clone())
        })?;
        Self::from_yaml_str(&text, Some(&source_name))
    }

    /// Builds a config from an already deserialized document (e.g. the policy keys embedded
    /// in a scenario file); the same as [`validate`].
    pub fn from_raw(raw: &RawPolicyConfig) -> Result<Self, PolicyError> {
        validate(raw)
    }

    /// The profile for `model`: its own profile if it has one (which replaces the root profile
    /// wholesale), else the root profile, else `None` meaning "use the synthetic profile".
    pub fn profile_for(&self, model: Option<&str>) -> Option<&PolicyProfile> {
        model
            .and_then(|name| self.models.get(name))
            .or(self.root.as_ref())
    }
}

/// Parses text into the raw schema; an empty or null document is an empty config.
pub fn parse_raw(text: &str) -> Result<RawPolicyConfig, PolicyError> {
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    match serde_saphyr::from_str_with_options::<Option<RawPolicyConfig>>(text, options) {
        Ok(raw) => Ok(raw.unwrap_or_default()),
        Err(parse_error) => Err(describe_parse_error(text, &parse_error)),
    }
}

/// A serde-saphyr error as a [`PolicyError`]: the profile found from the error's line, the
/// message without serde-saphyr's own " at line X, column Y" tail (the Display adds the line).
fn describe_parse_error(text: &str, parse_error: &serde_saphyr::Error) -> PolicyError {
    let location = parse_error.location();
    let rendered = parse_error.to_string();
    let detail = match rendered.rfind(" at line ") {
        Some(tail_start) if location.is_some() => &rendered[..tail_start],
        _ => rendered.as_str(),
    };
    let line = location.map_or(0, |at| usize::try_from(at.line()).unwrap_or(0));
    let profile = profile_at_line(text, line);
    PolicyError::new(
        &profile,
        String::new(),
        location.as_ref(),
        format!("invalid YAML: {detail}"),
    )
}

/// Which profile a (block-style) document is describing at 1-based `line`: `model "name"` if
/// the line lies under `models:` and a model key, else `root`. A heuristic for parse errors,
/// which serde-saphyr reports by position only.
fn profile_at_line(text: &str, line: usize) -> String {
    let mut in_models = false;
    let mut model_indent: Option<usize> = None;
    let mut model: Option<String> = None;
    for source_line in text.lines().take(line) {
        let trimmed = source_line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = source_line.len() - trimmed.len();
        let key = trimmed
            .split_once(':')
            .map(|(key, _)| key.trim().trim_matches(['"', '\'']));
        if indent == 0 {
            in_models = key == Some("models");
            model_indent = None;
            model = None;
        } else if in_models && model_indent.is_none_or(|model_indent| indent <= model_indent) {
            model_indent = Some(indent);
            model = key.map(str::to_string);
        }
    }
    match model {
        Some(name) => format!("model \"{name}\""),
        None => "root".to_string(),
    }
}
