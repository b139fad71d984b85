//! `--set PATH=VALUE` on a scenario. Each override edits the YAML text before typed parsing
//! (through [`Document::set`]), so an overridden value goes through exactly the same parsing
//! and validation as a written one, and fields left at their default can be set too.
//!
//! A policy kept in its own file (`router: {policy: p.yaml}`) is part of the scenario: an
//! override of its keys (`router.policy_classes.regular.quantum`) edits that file's text, so
//! that its errors still name the policy file and its lines.

use super::ScenarioError;
use crate::yaml::{self, Document};

/// Keys of Dynamo's policy document, which `router:` holds inline or in `router.policy`'s file.
pub const POLICY_KEYS: [&str; 4] = [
    "default_policy_family",
    "uncached_isl_buckets",
    "policy_classes",
    "models",
];

/// Keys whose values are lists in the scenario format: a path through a missing one cannot be
/// created by `--set`.
pub const LIST_KEYS: [&str; 6] = [
    "expect",
    "groups",
    "pools",
    "policy_classes",
    "uncached_isl_buckets",
    "at_ms",
];

/// Applies the overrides to the scenario `doc` (from `file`, for errors). Returns those that
/// edit the policy file `router.policy` names, with the `router.` removed from their paths
/// (empty when the policy is inline or absent: then every override edited `doc`).
pub fn apply(
    file: &str,
    doc: &mut Document,
    overrides: &[(String, String)],
) -> Result<Vec<(String, String)>, ScenarioError> {
    let (policy, scenario): (Vec<_>, Vec<_>) = overrides
        .iter()
        .partition(|(path, _)| policy_key_path(path).is_some());
    for (path, value) in scenario {
        set(doc, path, value).map_err(|e| ScenarioError::from_yaml(file, e))?;
    }
    if external_policy(doc).is_some() {
        let relative = policy.iter().map(|(path, value)| {
            let inner = policy_key_path(path).expect("partitioned on it");
            (inner.to_string(), value.clone())
        });
        return Ok(relative.collect());
    }
    for (path, value) in policy {
        set(doc, path, value).map_err(|e| ScenarioError::from_yaml(file, e))?;
    }
    Ok(Vec::new())
}

/// Applies overrides (paths relative to the policy document) to the policy file's `doc`
/// (made with [`Document::shown_under`]`("router.")`); errors name the policy file and the
/// override's full path.
pub fn apply_to_policy(
    file: &str,
    doc: &mut Document,
    overrides: &[(String, String)],
) -> Result<(), ScenarioError> {
    for (path, value) in overrides {
        set(doc, path, value).map_err(|mut e| {
            e.field_path = format!("router.{}", e.field_path);
            ScenarioError::from_yaml(file, e)
        })?;
    }
    Ok(())
}

fn set(doc: &mut Document, path: &str, value: &str) -> Result<(), yaml::Error> {
    doc.set(path, value, &LIST_KEYS)
}

/// The policy file `router.policy` names, if the policy is kept in its own file.
pub fn external_policy(doc: &Document) -> Option<&str> {
    doc.get("router.policy")
        .filter(|node| !node.is_null())
        .and_then(|node| node.scalar())
}

/// `path` without its `router.` when it names a policy key (`router.policy_classes...`).
fn policy_key_path(path: &str) -> Option<&str> {
    let inner = path.strip_prefix("router.")?;
    let key = inner.split(['.', '[']).next()?;
    POLICY_KEYS.contains(&key).then_some(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXTERNAL: &str = "name: x\nrouter: {policy: p.yaml}\nworkload: {groups: []}\n";

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn policy_keys_of_an_external_policy_go_to_its_file() {
        let mut doc = Document::parse(EXTERNAL);
        let overrides = pairs(&[
            ("router.policy_classes.regular.quantum", "512"),
            ("router.router_temperature", "0.5"),
            ("router.models.\"a.b\".default_policy_family", "x"),
        ]);
        let policy = apply("s.yaml", &mut doc, &overrides).unwrap();
        assert_eq!(
            policy,
            pairs(&[
                ("policy_classes.regular.quantum", "512"),
                ("models.\"a.b\".default_policy_family", "x"),
            ])
        );
        assert!(doc.text().contains("router_temperature: 0.5"));
        assert!(!doc.text().contains("quantum"));
    }

    #[test]
    fn policy_keys_of_an_inline_policy_edit_the_scenario() {
        let mut doc = Document::parse("name: x\nrouter: {}\n");
        let overrides = pairs(&[("router.default_policy_family", "regular")]);
        assert!(apply("s.yaml", &mut doc, &overrides).unwrap().is_empty());
        assert!(doc.text().contains("{default_policy_family: regular}"));
        assert_eq!(policy_key_path("router.policy"), None);
        assert_eq!(
            policy_key_path("router.policy_classes[0]"),
            Some("policy_classes[0]")
        );
    }

    #[test]
    fn policy_file_errors_name_the_file_and_the_full_path() {
        let text = "policy_classes:\n  - {name: regular, quantum: 1}\n";
        let mut doc = Document::parse(text).shown_under("router.");
        let overrides = pairs(&[("policy_classes.gold.quantum", "2")]);
        let error = apply_to_policy("p.yaml", &mut doc, &overrides).unwrap_err();
        assert_eq!(error.file, "p.yaml");
        assert_eq!(error.field_path, "router.policy_classes.gold.quantum");
        assert!(
            error
                .message
                .starts_with("--set router.policy_classes.gold.quantum=2: `policy_classes` has no entry named `gold`"),
            "{error}"
        );
    }
}
