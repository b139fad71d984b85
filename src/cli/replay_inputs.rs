//! What a replay records of its inputs: the engine and router settings it ran, the trace
//! rows whose `policy_class` the policy does not know (a warning, or with `--strict-classes`
//! an error before anything is written), and the rows whose hash ids outrun their input.

use super::CliError;
use crate::pipeline::ReplaySetup;
use crate::report::render::run_inputs::{UnknownClasses, engine_json, router_json};
use crate::scheduling::scheduler::select_profile;
use crate::sim::SimResult;
use crate::workload::trace::SurplusHashIds;
use serde_json::Value;

/// The engine(s) and router settings the replay ran, in full, as one-line JSON facts for the
/// terminal and the page.
pub(super) fn settings_facts(setup: &ReplaySetup) -> Vec<(String, String)> {
    let mut facts = match &setup.disaggregated {
        None => vec![("engine", engine_json(&setup.engine))],
        Some(d) => vec![
            ("prefill engine", engine_json(&d.prefill_engine)),
            ("decode engine", engine_json(&d.decode_engine)),
        ],
    };
    facts.push(("router", router_json(&setup.router)));
    let line = |(name, settings): (&str, Value)| (name.to_string(), settings.to_string());
    facts.into_iter().map(line).collect()
}

/// Adds the engine(s) and router settings the replay ran, in full, and the unknown-class
/// count to `meta`; returns the warning to print about unknown classes, or under `strict` an
/// error.
pub(super) fn record_inputs(
    meta: &mut Value,
    setup: &ReplaySetup,
    result: &SimResult,
    strict: bool,
) -> Result<Option<String>, CliError> {
    match &setup.disaggregated {
        None => meta["engine"] = engine_json(&setup.engine),
        Some(d) => {
            meta["prefill_engine"] = engine_json(&d.prefill_engine);
            meta["decode_engine"] = engine_json(&d.decode_engine);
        }
    }
    meta["router"] = router_json(&setup.router);
    let profile = select_profile(&setup.router, setup.policy.as_ref(), None);
    let unknown = UnknownClasses::of(&result.records, &profile);
    meta["unknown_policy_classes"] = unknown.json();
    let Some(mut found) = unknown.describe(&setup.trace.display().to_string()) else {
        return Ok(None);
    };
    if setup.policy.is_none() {
        found += ", and no policy was given";
    }
    match strict {
        true => Err(CliError::Input(format!(
            "{found}: refused by --strict-classes"
        ))),
        false => Ok(Some(format!(
            "warning: {found}; they were served as the default class (--strict-classes makes \
             this an error)"
        ))),
    }
}

/// summary.json's `surplus_hash_ids`: how many rows have hash ids past their input_length,
/// and the first one's line (null when none).
pub(super) fn surplus_json(surplus: &SurplusHashIds) -> Value {
    let first_line = (surplus.rows > 0).then_some(surplus.first_line);
    serde_json::json!({ "rows": surplus.rows, "first_line": first_line })
}
