//! Dynamo's router policy YAML: raw schema, validation with locations, and class resolution.
//!
//! Read a document with [`PolicyConfig::from_yaml_str`] (files are read by the layers above,
//! e.g. `scenario::load_policy_file`); pick a
//! profile per model with [`PolicyConfig::profile_for`] (falling back to
//! [`PolicyProfile::synthetic`] when it returns `None`); resolve a request's class with
//! [`PolicyProfile::resolve_class_index`]; ask a class whether a rank is busy with
//! [`PolicyClass::rank_is_busy`].
//!
//! ```
//! use routersim::scheduling::policy::{PolicyConfig, PolicyProfile};
//! use routersim::scheduling::types::QueuePolicy;
//!
//! let text = "\
//! default_policy_family: regular
//! uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
//! policy_classes:
//!   - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512, prefill_busy_threshold: 1536}
//!   - {name: regular, policy_family: regular, cache_bucket: all, quantum: 128, prefill_busy_threshold: 1536}
//! ";
//! let config = PolicyConfig::from_yaml_str(text, Some("policy.yaml")).unwrap();
//! let synthetic = PolicyProfile::synthetic(QueuePolicy::Fcfs, None);
//! let profile = config.profile_for(Some("my-model")).unwrap_or(&synthetic);
//! let class = &profile.classes()[profile.resolve_class_index(Some("gold"), 512)];
//! assert_eq!(class.name, "regular"); // unknown family -> default family
//! assert!(class.rank_is_busy(1537, None) && !class.rank_is_busy(1536, None));
//!
//! let error = PolicyConfig::from_yaml_str(&text.replace("quantum: 128", "quantum: 0"), Some("policy.yaml"))
//!     .unwrap_err();
//! assert_eq!(error.to_string(), "policy.yaml:5: root: class \"regular\": quantum must be > 0");
//! ```
//!
//! Embedding: a scenario file can hold the same keys (e.g. under `router:`) by deserializing
//! a [`RawPolicyConfig`] field with serde-saphyr and calling [`validate`]. Errors then carry
//! the line in the *scenario* file (spans are absolute) and a `field_path` relative to the
//! policy keys; add the outer key with [`PolicyError::with_path_prefix`] and the file name with
//! [`PolicyError::with_source_name`]. If the keys go through `#[serde(flatten)]` the spans are
//! lost: [`PolicyError::placed_in`] finds the line again from the field path.

mod describe;
mod error;
mod profile;
pub mod raw;
mod validate;

pub use describe::describe;
pub use error::PolicyError;
pub use profile::{CacheBucket, DEFAULT_MAX_BATCHED_TOKENS, PolicyClass, PolicyProfile};
pub use raw::RawPolicyConfig;
pub use validate::{IDENTIFIER_RULE, ROUTER_SETTINGS, is_identifier, validate};

use crate::yaml::Document;
use std::collections::BTreeMap;

/// A validated policy document: an optional root profile, per-model profiles, and router
/// settings.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    /// The profile for models without their own (`None` if the document has no root profile).
    pub root: Option<PolicyProfile>,
    /// Model name -> the profile that replaces the root profile for that model.
    pub models: BTreeMap<String, PolicyProfile>,
    /// The root `router:` map: `KvRouterConfig` keys (each one of [`ROUTER_SETTINGS`]) that
    /// replace the router's own values, as Dynamo 1.6.1 applies them; their values are
    /// checked when the caller applies them. Empty when the file has none.
    pub router: BTreeMap<String, serde_json::Value>,
}

impl PolicyConfig {
    /// Parses and validates a policy document. `source_name` (usually the file path) is put
    /// into errors so they read `policy.yaml:12: root: class "x": quantum must be > 0`.
    pub fn from_yaml_str(text: &str, source_name: Option<&str>) -> Result<Self, PolicyError> {
        Self::from_document(&Document::parse(text), source_name)
    }

    /// Like [`from_yaml_str`](Self::from_yaml_str) for a document that may carry `--set`
    /// edits: errors are placed at the original lines, or name the edit that caused them.
    pub fn from_document(doc: &Document, source_name: Option<&str>) -> Result<Self, PolicyError> {
        let with_source = |error: PolicyError| match source_name {
            Some(name) => error.with_source_name(name),
            None => error,
        };
        let raw = raw_of(doc).map_err(with_source)?;
        validate(&raw).map_err(|error| with_source(error.placed_in(doc)))
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
    raw_of(&Document::parse(text))
}

fn raw_of(doc: &Document) -> Result<RawPolicyConfig, PolicyError> {
    match doc.deserialize::<RawPolicyConfig>() {
        Ok(raw) => Ok(raw.unwrap_or_default()),
        Err(error) => Err(PolicyError::from_yaml(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::types::QueuePolicy;
    use proptest::prelude::*;
    use serde::Deserialize;

    const SAMPLE: &str = include_str!("../../../tests/fixtures/policy/sample.yaml");
    const PREMIUM_REGULAR: &str =
        include_str!("../../../tests/fixtures/policy/premium-regular.yaml");
    const MODELS: &str = include_str!("../../../tests/fixtures/policy/models.yaml");

    #[test]
    fn premium_regular_example_is_accepted() {
        let config = PolicyConfig::from_yaml_str(PREMIUM_REGULAR, None).unwrap();
        let root = config.root.as_ref().unwrap();
        let quanta: Vec<(&str, u64)> = root
            .classes()
            .iter()
            .map(|class| (class.name.as_str(), class.quantum_tokens))
            .collect();
        assert_eq!(quanta, [("premium", 512), ("regular", 128)]);
        assert_eq!(root.classes()[0].request_queue_limit_per_worker, Some(1024));
        assert_eq!(root.resolve_class_index(Some("premium"), 512), 0);
        assert_eq!(root.resolve_class_index(Some("gold"), 512), 1);
        assert!(config.models.is_empty());
    }

    #[test]
    fn model_profile_replaces_the_root_wholesale() {
        let config = PolicyConfig::from_yaml_str(MODELS, None).unwrap();
        let llama = config.profile_for(Some("llama")).unwrap();
        let names: Vec<&str> = llama
            .classes()
            .iter()
            .map(|class| class.name.as_str())
            .collect();
        assert_eq!(names, ["bulk_short", "bulk_long"]);
        // The root's families do not leak into the model profile.
        assert_eq!(llama.resolve_class_index(Some("premium"), 2000), 1);
        assert_eq!(llama.default_policy_family(), Some("bulk"));
        let other = config.profile_for(Some("mistral")).unwrap();
        assert_eq!(other.default_policy_family(), Some("regular"));
        assert_eq!(
            config.profile_for(None).unwrap().default_policy_family(),
            Some("regular")
        );
    }

    #[test]
    fn no_profile_applies_without_root_or_matching_model() {
        let models_only: String = MODELS
            .lines()
            .skip_while(|line| !line.starts_with("models:"))
            .map(|line| format!("{line}\n"))
            .collect();
        let config = PolicyConfig::from_yaml_str(&models_only, None).unwrap();
        assert!(config.root.is_none());
        assert!(config.profile_for(Some("llama")).is_some());
        assert!(config.profile_for(Some("mistral")).is_none());
        assert!(config.profile_for(None).is_none());
    }

    /// How a scenario file embeds the policy keys: lines stay absolute in the outer file.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Scenario {
        #[allow(dead_code, reason = "only here to shift the policy down the file")]
        name: String,
        router: RawPolicyConfig,
    }

    #[test]
    fn embedded_policy_errors_keep_absolute_lines_and_a_field_path() {
        let embedded: String = SAMPLE
            .replace("quantum: 512", "quantum: 0")
            .lines()
            .map(|line| format!("  {line}\n"))
            .collect();
        let text = format!("name: demo\nrouter:\n{embedded}");
        let scenario: Scenario = serde_saphyr::from_str(&text).unwrap();
        let error = PolicyConfig::from_raw(&scenario.router)
            .unwrap_err()
            .with_path_prefix("router")
            .with_source_name("scenario.yaml");
        assert_eq!(error.line, Some(2 + 19));
        assert_eq!(&*error.field_path, "router.policy_classes[1].quantum");
        assert_eq!(
            error.to_string(),
            "scenario.yaml:21: root: class \"uncached\": quantum must be > 0"
        );
    }

    /// A router section that mixes the policy keys with other knobs through `flatten`.
    #[derive(Deserialize)]
    struct FlatRouter {
        #[allow(dead_code, reason = "a knob next to the policy keys")]
        router_temperature: f64,
        #[serde(flatten)]
        policy: RawPolicyConfig,
    }

    #[test]
    fn flattened_policy_errors_find_their_line_from_the_field_path() {
        let text = format!(
            "router_temperature: 0.5\n{}",
            SAMPLE.replace("quantum: 512", "quantum: 0")
        );
        let router: FlatRouter = serde_saphyr::from_str(&text).unwrap();
        let error = PolicyConfig::from_raw(&router.policy).unwrap_err();
        assert_eq!(error.line, None, "flatten drops spans");
        let error = error.placed_in(&Document::parse(&text));
        assert_eq!(error.line, Some(20));
        assert_eq!(error.column, Some(14));
    }

    #[test]
    fn model_names_with_dots_are_quoted_in_field_paths() {
        let indented: String = PREMIUM_REGULAR
            .lines()
            .map(|line| format!("    {line}\n"))
            .collect();
        let text = format!(
            "models:\n  meta/llama-3.1:\n{}",
            indented.replace("quantum: 128", "quantum: 0")
        );
        let error = PolicyConfig::from_yaml_str(&text, None).unwrap_err();
        assert_eq!(
            &*error.field_path,
            "models.\"meta/llama-3.1\".policy_classes[1].quantum"
        );
        assert_eq!(error.line, Some(2 + 18));
    }

    #[test]
    fn raw_documents_round_trip_through_serialization() {
        let raw = parse_raw(MODELS).unwrap();
        let written = serde_saphyr::to_string(&raw).unwrap();
        let reread = PolicyConfig::from_yaml_str(&written, None).unwrap();
        assert_eq!(reread, PolicyConfig::from_raw(&raw).unwrap());
        assert!(
            !written.contains("queue_policy"),
            "absent options stay absent:\n{written}"
        );
        let from_json: RawPolicyConfig =
            serde_json::from_str(&serde_json::to_string(&raw).unwrap()).unwrap();
        assert_eq!(PolicyConfig::from_raw(&from_json).unwrap(), reread);
    }

    #[test]
    fn null_document_counts_as_empty() {
        for text in ["~\n", "null\n", "---\n"] {
            let error = PolicyConfig::from_yaml_str(text, None).unwrap_err();
            assert!(
                error
                    .message
                    .starts_with("root: the document defines no profile"),
                "{text:?}: {error}"
            );
        }
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let error = PolicyConfig::from_yaml_str("policy_classes: [\n", Some("p.yaml")).unwrap_err();
        assert_eq!(error.line, Some(1));
        assert!(
            error
                .to_string()
                .starts_with("p.yaml:1: root: policy_classes: invalid YAML:"),
            "{error}"
        );
    }

    #[test]
    fn type_errors_name_the_class_and_field() {
        let text = SAMPLE.replace("quantum: 512", "quantum: -512");
        let error = PolicyConfig::from_yaml_str(&text, Some("p.yaml")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "p.yaml:19: root: class \"uncached\": quantum: expected a whole number >= 0, got `-512`"
        );
        assert_eq!(&*error.field_path, "policy_classes.uncached.quantum");
        assert_eq!(error.column, Some(14));
    }

    #[test]
    fn unknown_values_name_the_path_in_model_profiles() {
        let indented: String = PREMIUM_REGULAR
            .lines()
            .map(|line| format!("    {line}\n"))
            .collect();
        let text = format!("models:\n  m1:\n{indented}").replacen(
            "queue_policy: fcfs",
            "queue_policy: lifo",
            1,
        );
        let error = PolicyConfig::from_yaml_str(&text, Some("p.yaml")).unwrap_err();
        assert_eq!(
            &*error.field_path,
            "models.m1.policy_classes.premium.queue_policy"
        );
        assert_eq!(error.location, "model \"m1\"");
        assert!(
            error.to_string().starts_with(
                "p.yaml:12: model \"m1\": class \"premium\": queue_policy: unknown value `lifo`, expected one of fcfs, wspt, lcfs"
            ),
            "{error}"
        );
    }

    #[test]
    fn duplicate_keys_give_no_library_advice() {
        let text = format!("{SAMPLE}default_policy_family: x\n");
        let error = PolicyConfig::from_yaml_str(&text, Some("p.yaml")).unwrap_err();
        assert!(
            error
                .message
                .ends_with("duplicate key `default_policy_family`"),
            "{error}"
        );
        assert!(!error.message.contains("Options"), "{error}");
    }

    #[test]
    fn a_root_router_map_is_kept_and_may_stand_alone() {
        let config =
            PolicyConfig::from_yaml_str("router:\n  router_track_active_blocks: false\n", None)
                .unwrap();
        assert!(config.root.is_none() && config.models.is_empty());
        assert_eq!(
            config.router.get("router_track_active_blocks"),
            Some(&serde_json::Value::Bool(false))
        );
        let text = format!("{PREMIUM_REGULAR}router:\n  router_temperature: 0.5\n");
        let error = PolicyConfig::from_yaml_str(&text, Some("p.yaml")).unwrap_err();
        assert_eq!(&*error.field_path, "router.router_temperature");
        assert!(
            error.to_string().contains("unknown router setting"),
            "{error}"
        );
    }

    #[test]
    fn synthetic_profile_is_the_fallback_callers_use() {
        let config = PolicyConfig::from_yaml_str(MODELS, None).unwrap();
        let fallback = PolicyProfile::synthetic(QueuePolicy::Fcfs, None);
        let models_only = PolicyConfig {
            root: None,
            models: config.models.clone(),
            router: BTreeMap::new(),
        };
        let chosen = models_only.profile_for(Some("other")).unwrap_or(&fallback);
        assert!(chosen.is_synthetic());
    }

    /// The sample with `insert` put at byte `cut_at` (wrapped, snapped to a char boundary) and
    /// the `delete_len` bytes after it removed: broken documents of every kind.
    fn mutate(text: &str, cut_at: usize, insert: &str, delete_len: usize) -> String {
        let floor_boundary = |mut index: usize| {
            while !text.is_char_boundary(index) {
                index -= 1;
            }
            index
        };
        let cut = floor_boundary(cut_at % (text.len() + 1));
        let resume = floor_boundary(cut.saturating_add(delete_len).min(text.len())).max(cut);
        format!("{}{insert}{}", &text[..cut], &text[resume..])
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
            let _ = PolicyConfig::from_yaml_str(&text, Some("fuzz.yaml"));
        }

        #[test]
        fn yaml_shaped_text_never_panics(
            text in "([a-z_]{1,22}: ?(-?[0-9]{1,4}|\\[|\\]|\\{|\\}|[a-z]{1,6}|\\.nan|~)?\n {0,6}(- )?){0,12}"
        ) {
            let _ = PolicyConfig::from_yaml_str(&text, None);
        }

        #[test]
        fn mutated_sample_never_panics(
            cut_at in 0usize..2000,
            insert in prop::sample::select(vec![
                "", "\n", "  ", "- ", ": ", "0", "-1", "x", "\"", "'", "[", "]", "{", "}", "#",
                "&a ", "*a", "<<: ", "quantum: 0\n", "  - name: z\n", ".nan", "1e400",
                "18446744073709551616", "models:\n  m:\n", "lcfs",
            ]),
            delete_len in 0usize..40,
        ) {
            let text = mutate(SAMPLE, cut_at, insert, delete_len);
            if let Ok(config) = PolicyConfig::from_yaml_str(&text, None) {
                // Whatever was accepted must resolve every request to a real class.
                for profile in config.root.iter().chain(config.models.values()) {
                    for uncached_tokens in [0, 1, 3071, 3072, u64::MAX] {
                        for requested in [None, Some("latency"), Some("cached"), Some("custom_priority")] {
                            let index = profile.resolve_class_index(requested, uncached_tokens);
                            prop_assert!(index < profile.classes().len());
                        }
                    }
                }
                let _ = describe(&config);
            }
        }
    }
}
