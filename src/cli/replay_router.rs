//! `replay`'s router inputs as Dynamo 1.6.1 takes them: `--router` (KvRouterConfig keyword
//! arguments) and the policy YAML named by `--policy` or by `--router`'s
//! `router_policy_config`, whose root `router:` settings replace `--router`'s values.

use super::replay_setup::json_arg;
use super::{CliError, input};
use crate::scenario;
use crate::scheduling::policy::PolicyConfig;
use crate::scheduling::router_config::RouterConfig;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The router a replay runs: its knobs, its policy and the file that policy came from.
pub(super) struct ReplayRouter {
    pub config: RouterConfig,
    pub policy: Option<PolicyConfig>,
    pub policy_file: Option<PathBuf>,
}

/// Reads `--router` (default: Dynamo's KvRouterConfig defaults) and the policy file that
/// `--policy` or its `router_policy_config` names (a relative path is taken from the current
/// directory, as 1.6.1 reads it); giving both is a usage error. Unless `quiet`, says on stderr
/// which keys have no effect.
pub(super) fn replay_router(
    router: Option<&str>,
    policy_flag: Option<&Path>,
    quiet: bool,
) -> Result<ReplayRouter, CliError> {
    let (name, text) = match router {
        Some(value) => json_arg("--router", value)?,
        None => ("--router".to_string(), "{}".to_string()),
    };
    let given =
        RouterConfig::from_json_str(&text).map_err(|e| CliError::Input(format!("{name}: {e}")))?;
    let policy_file = policy_file(&name, policy_flag, given.router_policy_config.as_deref())?;
    let policy = policy_file
        .as_deref()
        .map(scenario::load_policy_file)
        .transpose()
        .map_err(input)?;
    let (config, settings) = match (&policy, &policy_file) {
        (Some(p), Some(file)) if !p.router.is_empty() => {
            (with_policy_settings(&text, p, file)?, Some((p, file)))
        }
        _ => (given, None),
    };
    config.validate().map_err(|e| match settings {
        // A value the policy file set is reported against that file.
        Some((p, file)) if p.router.contains_key(e.field) => CliError::Input(format!(
            "{}: router.{}: {}",
            file.display(),
            e.field,
            e.message
        )),
        _ => CliError::Input(format!("{name}: {e}")),
    })?;
    let no_effect = config.ignored_fields_set();
    if !quiet && !no_effect.is_empty() {
        errln!(
            "note: {name}: {} accepted with no effect, as in Dynamo 1.6.1's offline replay (docs/fidelity.md)",
            no_effect.join(", ")
        );
    }
    Ok(ReplayRouter {
        config,
        policy,
        policy_file,
    })
}

/// The policy file: `--policy`'s or `router_policy_config`'s, not both.
fn policy_file(
    name: &str,
    flag: Option<&Path>,
    key: Option<&str>,
) -> Result<Option<PathBuf>, CliError> {
    match (flag, key) {
        (Some(flag), Some(key)) => Err(CliError::Input(format!(
            "--policy {} and {name}'s router_policy_config {key:?} both name the policy YAML: give it once",
            flag.display()
        ))),
        (flag, key) => Ok(flag
            .map(Path::to_path_buf)
            .or_else(|| key.map(PathBuf::from))),
    }
}

/// `--router`'s keys (`text`, already known to parse) with the policy file's `router:`
/// settings put over them; a bad setting is an error naming the file and the key.
fn with_policy_settings(
    text: &str,
    policy: &PolicyConfig,
    file: &Path,
) -> Result<RouterConfig, CliError> {
    let shown = file.display();
    for (key, value) in &policy.router {
        let single = Value::Object([(key.clone(), value.clone())].into_iter().collect());
        if let Err(e) = crate::yaml::from_json_value::<RouterConfig>(single) {
            return Err(CliError::Input(format!(
                "{shown}: router.{key}: {}",
                e.message
            )));
        }
    }
    let mut merged: serde_json::Map<String, Value> =
        serde_json::from_str(text).map_err(|e| CliError::Bug(format!("--router: {e}")))?;
    merged.extend(policy.router.clone());
    crate::yaml::from_json_value(Value::Object(merged))
        .map_err(|e| CliError::Input(format!("{shown}: router: {e}")))
}
