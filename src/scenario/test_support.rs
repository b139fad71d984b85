//! What the scenario tests share: a scenario read from text with `--set` overrides.

use super::{Scenario, ScenarioError};
use std::path::Path;

/// The scenario `text` (as if in `s.yaml`) with `overrides` (`--set PATH=VALUE` pairs).
pub(super) fn load(text: &str, overrides: &[(&str, &str)]) -> Result<Scenario, ScenarioError> {
    let overrides: Vec<(String, String)> = overrides
        .iter()
        .map(|(p, v)| (p.to_string(), v.to_string()))
        .collect();
    Scenario::from_text(Path::new("s.yaml"), text, &overrides)
}
