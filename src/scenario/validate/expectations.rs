//! `expect:` validated: each entry parsed once into its typed form, companions located.

use crate::report::verdict::expect::{Expectation, RawExpectation};
use crate::scenario::ScenarioError;
use std::collections::BTreeSet;
use std::path::PathBuf;

use super::Source;

/// Parses and checks every expectation, once: the typed values, and the companion files
/// named by `minus:`. Errors name the field inside the entry (e.g. `prefix_count.class`).
pub(super) fn expectations(
    source: &Source,
    expect: &[RawExpectation],
    class_names: &[String],
) -> Result<(Vec<Expectation>, Vec<PathBuf>), ScenarioError> {
    let mut typed = Vec::with_capacity(expect.len());
    let mut companions = BTreeSet::new();
    for (index, raw) in expect.iter().enumerate() {
        let at = |field: &str, message: String| {
            let path = match field.is_empty() {
                true => format!("expect[{index}]"),
                false => format!("expect[{index}].{field}"),
            };
            source.at(&path, message)
        };
        let e = Expectation::parse(raw, class_names).map_err(|err| at(&err.field, err.message))?;
        if let Some(other) = e.companion() {
            let path = source.resolve(&other.file);
            if !path.is_file() {
                return Err(at(
                    "minus",
                    format!("companion scenario {} does not exist", path.display()),
                ));
            }
            companions.insert(path);
        }
        typed.push(e);
    }
    Ok((typed, companions.into_iter().collect()))
}
