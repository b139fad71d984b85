//! Raw policy document -> validated profiles: every rule of the schema, each error located.

use super::PolicyConfig;
use super::error::PolicyError;
use super::profile::{CacheBucket, PolicyClass, PolicyProfile};
use super::raw::{RawBucket, RawPolicyClass, RawPolicyConfig, RawQueuePolicy};
use crate::scheduling::types::QueuePolicy;
use serde_saphyr::{Location, Spanned};
use std::collections::BTreeMap;

/// Words for the identifier rule, shared by every identifier error.
pub const IDENTIFIER_RULE: &str =
    "must be non-empty and use only ASCII letters, digits, '_', '.' and '-'";

/// Validates a deserialized document into profiles ready for the scheduler.
///
/// Errors carry `line`/`column` from the spans serde-saphyr recorded (absolute in whatever
/// document `raw` was read from, so embedding the keys in a larger file keeps them right) and a
/// `field_path` relative to the policy keys. `source_name` is left empty for the caller to set.
pub fn validate(raw: &RawPolicyConfig) -> Result<PolicyConfig, PolicyError> {
    let router = router_settings(raw)?;
    let root = validate_root(raw)?;
    let mut models = BTreeMap::new();
    if let Some(raw_models) = &raw.models {
        for (model_name, raw_profile) in &raw_models.value {
            let checker = ProfileChecker::for_model(model_name);
            if model_name.is_empty() {
                return Err(checker.error(
                    "",
                    &raw_profile.referenced,
                    "model name must not be empty",
                ));
            }
            let profile = &raw_profile.value;
            let built = checker.check(
                &profile.default_policy_family,
                &profile.uncached_isl_buckets,
                &profile.policy_classes,
            )?;
            models.insert(model_name.clone(), built);
        }
    }
    if root.is_none() && models.is_empty() && router.is_empty() {
        let at = raw.models.as_ref().map(|models| &models.referenced);
        return Err(PolicyError::new(
            "root",
            String::new(),
            at,
            "the document defines no profile: give default_policy_family, uncached_isl_buckets \
             and policy_classes, at least one profile under models, or router settings",
        ));
    }
    Ok(PolicyConfig {
        root,
        models,
        router,
    })
}

/// The `KvRouterConfig` keys Dynamo 1.6.1 takes from a policy file's root `router:` map (any
/// other key there is an error in 1.6.1 too).
pub const ROUTER_SETTINGS: [&str; 20] = [
    "host_cache_hit_weight",
    "disk_cache_hit_weight",
    "use_kv_events",
    "router_replica_sync",
    "router_track_active_blocks",
    "router_track_output_blocks",
    "router_assume_kv_reuse",
    "router_track_prefill_tokens",
    "router_tracking_hash",
    "router_tracking_key_file",
    "router_tracking_key_id",
    "router_prefill_load_model",
    "router_ttl_secs",
    "router_approximate_cache_policy",
    "router_event_threads",
    "use_remote_indexer",
    "serve_indexer",
    "enable_session_prefix_index",
    "shared_cache_type",
    "router_predicted_ttl_secs",
];

/// The root `router:` map, each key one of [`ROUTER_SETTINGS`].
fn router_settings(
    raw: &RawPolicyConfig,
) -> Result<BTreeMap<String, serde_json::Value>, PolicyError> {
    let Some(router) = &raw.router else {
        return Ok(BTreeMap::new());
    };
    if let Some(key) = router
        .value
        .keys()
        .find(|k| !ROUTER_SETTINGS.contains(&k.as_str()))
    {
        return Err(PolicyError::new(
            "root",
            format!("router.{key}"),
            Some(&router.referenced),
            format!(
                "unknown router setting `{key}` (a policy file's router: map takes only {})",
                ROUTER_SETTINGS.join(", ")
            ),
        ));
    }
    Ok(router.value.clone())
}

/// The root profile, if the document has one; its three fields are all-or-nothing.
fn validate_root(raw: &RawPolicyConfig) -> Result<Option<PolicyProfile>, PolicyError> {
    let checker = ProfileChecker::root();
    match (
        &raw.default_policy_family,
        &raw.uncached_isl_buckets,
        &raw.policy_classes,
    ) {
        (None, None, None) => Ok(None),
        (Some(family), Some(buckets), Some(classes)) => {
            checker.check(family, buckets, classes).map(Some)
        }
        (family, buckets, classes) => {
            let present = [
                family.as_ref().map(|f| f.referenced),
                buckets.as_ref().map(|b| b.referenced),
                classes.as_ref().map(|c| c.referenced),
            ];
            let names = [
                "default_policy_family",
                "uncached_isl_buckets",
                "policy_classes",
            ];
            let missing: Vec<&str> = names
                .iter()
                .zip(&present)
                .filter(|(_, at)| at.is_none())
                .map(|(name, _)| *name)
                .collect();
            let first_present = present.iter().flatten().next();
            Err(checker.error(
                missing[0],
                first_present.unwrap_or(&Location::UNKNOWN),
                format!(
                    "a root profile needs all of default_policy_family, uncached_isl_buckets \
                     and policy_classes; missing {}",
                    missing.join(", ")
                ),
            ))
        }
    }
}

/// Checks one profile and builds its lookup tables; knows how to word and place its errors.
struct ProfileChecker {
    /// `root` or `model "name"`.
    location: String,
    /// Field-path prefix of the profile's own fields: empty or `models.<name>.`.
    path_prefix: String,
}

/// What is known about a class while the matrix is assembled.
struct ClassFacts<'a> {
    raw: &'a Spanned<RawPolicyClass>,
    index: usize,
    family: Option<&'a str>,
    bucket_index: Option<usize>,
}

impl ProfileChecker {
    fn root() -> Self {
        ProfileChecker {
            location: "root".to_string(),
            path_prefix: String::new(),
        }
    }

    fn for_model(model_name: &str) -> Self {
        ProfileChecker {
            location: format!("model \"{model_name}\""),
            path_prefix: format!("models.{}.", path_key(model_name)),
        }
    }

    /// An error about field `path` of this profile, placed at `at`.
    fn error(&self, path: &str, at: &Location, detail: impl std::fmt::Display) -> PolicyError {
        let field_path = format!("{}{path}", self.path_prefix);
        let field_path = field_path.trim_end_matches('.').to_string();
        PolicyError::new(&self.location, field_path, Some(at), detail)
    }

    /// An error about a class: the message names the class after the profile.
    fn class_error(
        &self,
        class: &RawPolicyClass,
        index: usize,
        field: &str,
        at: &Location,
        detail: impl std::fmt::Display,
    ) -> PolicyError {
        let path = match field {
            "" => format!("policy_classes[{index}]"),
            _ => format!("policy_classes[{index}].{field}"),
        };
        self.error(
            &path,
            at,
            format!("class \"{}\": {detail}", class.name.value),
        )
    }

    /// Validates one profile's three fields and builds its lookup tables.
    fn check(
        &self,
        default_family: &Spanned<String>,
        raw_buckets: &Spanned<Vec<Spanned<RawBucket>>>,
        raw_classes: &Spanned<Vec<Spanned<RawPolicyClass>>>,
    ) -> Result<PolicyProfile, PolicyError> {
        if raw_classes.value.is_empty() {
            return Err(self.error(
                "policy_classes",
                &raw_classes.referenced,
                "policy_classes must not be empty",
            ));
        }
        let buckets = self.check_buckets(raw_buckets)?;
        let (classes, facts) = self.check_classes(&raw_classes.value, &buckets)?;
        let families = families_in_order(&facts);
        let default_family_index = self.check_default_family(default_family, &families)?;
        self.check_explicit_names(&facts, &families)?;
        let matrix = self.build_matrix(&facts, &families, &buckets)?;
        let explicit_index = facts
            .iter()
            .filter(|fact| fact.family.is_none())
            .map(|fact| (fact.raw.value.name.value.clone(), fact.index))
            .collect();
        let family_index = families
            .iter()
            .enumerate()
            .map(|(index, family)| (family.clone(), index))
            .collect();
        Ok(PolicyProfile {
            classes,
            default_policy_family: Some(default_family.value.clone()),
            buckets,
            families,
            family_index,
            explicit_index,
            matrix,
            default_family_index: Some(default_family_index),
        })
    }

    /// Every class on its own, then unique names; returns the classes and what the matrix
    /// assembly needs to know about each.
    fn check_classes<'a>(
        &self,
        raw_classes: &'a [Spanned<RawPolicyClass>],
        buckets: &[CacheBucket],
    ) -> Result<(Vec<PolicyClass>, Vec<ClassFacts<'a>>), PolicyError> {
        let mut classes = Vec::with_capacity(raw_classes.len());
        let mut facts = Vec::with_capacity(raw_classes.len());
        let mut first_index_by_name: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, raw_class) in raw_classes.iter().enumerate() {
            let raw = &raw_class.value;
            let class = self.check_class(raw, index, buckets)?;
            if let Some(&first) = first_index_by_name.get(raw.name.value.as_str()) {
                let first_line = raw_classes[first].referenced.line();
                return Err(self.class_error(
                    raw,
                    index,
                    "name",
                    &raw.name.referenced,
                    format!(
                        "duplicate class name (first defined at policy_classes[{first}], line {first_line})"
                    ),
                ));
            }
            first_index_by_name.insert(&raw.name.value, index);
            facts.push(ClassFacts {
                raw: raw_class,
                index,
                family: raw.policy_family.as_ref().map(|f| f.value.as_str()),
                bucket_index: class
                    .cache_bucket
                    .as_deref()
                    .and_then(|bucket| buckets.iter().position(|known| known.name == bucket)),
            });
            classes.push(class);
        }
        Ok((classes, facts))
    }

    /// The bucket list: non-empty, valid unique names, bounds from 0 strictly increasing.
    fn check_buckets(
        &self,
        raw_buckets: &Spanned<Vec<Spanned<RawBucket>>>,
    ) -> Result<Vec<CacheBucket>, PolicyError> {
        if raw_buckets.value.is_empty() {
            return Err(self.error(
                "uncached_isl_buckets",
                &raw_buckets.referenced,
                "uncached_isl_buckets must not be empty",
            ));
        }
        let mut buckets: Vec<CacheBucket> = Vec::with_capacity(raw_buckets.value.len());
        for (index, raw_bucket) in raw_buckets.value.iter().enumerate() {
            let bucket = self.check_bucket(&raw_bucket.value, index, &buckets)?;
            buckets.push(bucket);
        }
        Ok(buckets)
    }

    /// Entry `index` of the bucket list, given the entries before it.
    fn check_bucket(
        &self,
        raw: &RawBucket,
        index: usize,
        earlier: &[CacheBucket],
    ) -> Result<CacheBucket, PolicyError> {
        let RawBucket {
            min_tokens,
            bucket: name,
        } = raw;
        let entry = format!("uncached_isl_buckets[{index}]");
        let name_error = |detail: String| {
            Err(self.error(
                &format!("{entry}.bucket"),
                &name.referenced,
                format!("{entry}: {detail}"),
            ))
        };
        if !is_identifier(&name.value) {
            return name_error(format!("bucket name \"{}\" {IDENTIFIER_RULE}", name.value));
        }
        if let Some(first) = earlier.iter().position(|known| known.name == name.value) {
            return name_error(format!(
                "duplicate bucket name \"{}\" (first at uncached_isl_buckets[{first}])",
                name.value
            ));
        }
        let bound_problem = match earlier.last() {
            None if min_tokens.value != 0 => Some(format!(
                "the first bucket must start at min_tokens 0, not {}",
                min_tokens.value
            )),
            Some(previous) if min_tokens.value <= previous.min_tokens => Some(format!(
                "min_tokens must be strictly increasing, but {} follows {}",
                min_tokens.value, previous.min_tokens
            )),
            _ => None,
        };
        if let Some(problem) = bound_problem {
            return Err(self.error(
                &format!("{entry}.min_tokens"),
                &min_tokens.referenced,
                format!("{entry} (bucket \"{}\"): {problem}", name.value),
            ));
        }
        Ok(CacheBucket {
            min_tokens: min_tokens.value,
            name: name.value.clone(),
        })
    }

    /// One class on its own: name, queue policy, quantum, binding, busy settings.
    fn check_class(
        &self,
        raw: &RawPolicyClass,
        index: usize,
        buckets: &[CacheBucket],
    ) -> Result<PolicyClass, PolicyError> {
        if !is_identifier(&raw.name.value) {
            return Err(self.error(
                &format!("policy_classes[{index}].name"),
                &raw.name.referenced,
                format!(
                    "policy_classes[{index}]: class name \"{}\" {IDENTIFIER_RULE}",
                    raw.name.value
                ),
            ));
        }
        let queue_policy = match &raw.queue_policy {
            None => QueuePolicy::Fcfs,
            Some(policy) => match policy.value {
                RawQueuePolicy::Fcfs => QueuePolicy::Fcfs,
                RawQueuePolicy::Wspt => QueuePolicy::Wspt,
                RawQueuePolicy::Lcfs => {
                    return Err(self.class_error(
                        raw,
                        index,
                        "queue_policy",
                        &policy.referenced,
                        "queue_policy must be fcfs or wspt, not lcfs",
                    ));
                }
            },
        };
        if raw.quantum.value == 0 {
            return Err(self.class_error(
                raw,
                index,
                "quantum",
                &raw.quantum.referenced,
                "quantum must be > 0",
            ));
        }
        self.check_binding(raw, index, buckets)?;
        self.check_busy_settings(raw, index)?;
        Ok(class_from_raw(raw, queue_policy))
    }

    /// Both `policy_family` and `cache_bucket` (matrix class, bucket declared) or neither.
    fn check_binding(
        &self,
        raw: &RawPolicyClass,
        index: usize,
        buckets: &[CacheBucket],
    ) -> Result<(), PolicyError> {
        const BINDING_RULE: &str = "a matrix class needs both, an explicit class neither";
        let fail = |field: &str, at: &Location, detail: String| {
            Err(self.class_error(raw, index, field, at, detail))
        };
        match (&raw.policy_family, &raw.cache_bucket) {
            (Some(family), _) if !is_identifier(&family.value) => fail(
                "policy_family",
                &family.referenced,
                format!("policy_family \"{}\" {IDENTIFIER_RULE}", family.value),
            ),
            (Some(_), Some(bucket)) if !buckets.iter().any(|known| known.name == bucket.value) => {
                let declared: Vec<&str> = buckets.iter().map(|known| known.name.as_str()).collect();
                fail(
                    "cache_bucket",
                    &bucket.referenced,
                    format!(
                        "cache_bucket \"{}\" is not a declared bucket (declared: {})",
                        bucket.value,
                        declared.join(", ")
                    ),
                )
            }
            (Some(family), None) => fail(
                "cache_bucket",
                &family.referenced,
                format!("policy_family is set but cache_bucket is not: {BINDING_RULE}"),
            ),
            (None, Some(bucket)) => fail(
                "policy_family",
                &bucket.referenced,
                format!("cache_bucket is set but policy_family is not: {BINDING_RULE}"),
            ),
            _ => Ok(()),
        }
    }

    /// The frac threshold is a finite non-negative multiplier; the ratio lies in (0, 1] and
    /// only means something next to a threshold.
    fn check_busy_settings(&self, raw: &RawPolicyClass, index: usize) -> Result<(), PolicyError> {
        if let Some(frac) = &raw.prefill_busy_threshold_frac
            && !(frac.value.is_finite() && frac.value >= 0.0)
        {
            return Err(self.class_error(
                raw,
                index,
                "prefill_busy_threshold_frac",
                &frac.referenced,
                format!(
                    "prefill_busy_threshold_frac must be finite and >= 0, not {}",
                    frac.value
                ),
            ));
        }
        let Some(ratio) = &raw.busy_worker_ratio else {
            return Ok(());
        };
        if !(ratio.value.is_finite() && ratio.value > 0.0 && ratio.value <= 1.0) {
            return Err(self.class_error(
                raw,
                index,
                "busy_worker_ratio",
                &ratio.referenced,
                format!("busy_worker_ratio must be in (0, 1], not {}", ratio.value),
            ));
        }
        if raw.prefill_busy_threshold.is_none() && raw.prefill_busy_threshold_frac.is_none() {
            return Err(self.class_error(
                raw,
                index,
                "busy_worker_ratio",
                &ratio.referenced,
                "busy_worker_ratio needs prefill_busy_threshold or prefill_busy_threshold_frac",
            ));
        }
        Ok(())
    }

    fn check_default_family(
        &self,
        default_family: &Spanned<String>,
        families: &[String],
    ) -> Result<usize, PolicyError> {
        let name = &default_family.value;
        if !is_identifier(name) {
            return Err(self.error(
                "default_policy_family",
                &default_family.referenced,
                format!("default_policy_family \"{name}\" {IDENTIFIER_RULE}"),
            ));
        }
        families.iter().position(|family| family == name).ok_or_else(|| {
            self.error(
                "default_policy_family",
                &default_family.referenced,
                format!(
                    "default_policy_family \"{name}\" is not the policy_family of any class (families: {})",
                    list_or_none(families)
                ),
            )
        })
    }

    /// An explicit class must not share its name with a family: the request header could not
    /// tell them apart.
    fn check_explicit_names(
        &self,
        facts: &[ClassFacts],
        families: &[String],
    ) -> Result<(), PolicyError> {
        let colliding = facts
            .iter()
            .filter(|fact| fact.family.is_none())
            .find(|fact| families.contains(&fact.raw.value.name.value));
        match colliding {
            None => Ok(()),
            Some(fact) => Err(self.class_error(
                &fact.raw.value,
                fact.index,
                "name",
                &fact.raw.value.name.referenced,
                format!(
                    "an explicit class must not be named like the policy family \"{}\"",
                    fact.raw.value.name.value
                ),
            )),
        }
    }

    /// The (family, bucket) -> class table; every cell filled exactly once.
    fn build_matrix(
        &self,
        facts: &[ClassFacts],
        families: &[String],
        buckets: &[CacheBucket],
    ) -> Result<Vec<usize>, PolicyError> {
        let mut cells: Vec<Option<usize>> = vec![None; families.len() * buckets.len()];
        for fact in facts {
            let (Some(family), Some(bucket_index)) = (fact.family, fact.bucket_index) else {
                continue;
            };
            let family_index = families
                .iter()
                .position(|known| known == family)
                .unwrap_or(0);
            let cell = &mut cells[family_index * buckets.len() + bucket_index];
            if let Some(owner) = *cell {
                return Err(self.class_error(
                    &fact.raw.value,
                    fact.index,
                    "",
                    &fact.raw.referenced,
                    format!(
                        "family \"{family}\" and bucket \"{}\" already belong to class \"{}\"; each pair needs exactly one class",
                        buckets[bucket_index].name, facts[owner].raw.value.name.value
                    ),
                ));
            }
            *cell = Some(fact.index);
        }
        match cells.iter().position(Option::is_none) {
            Some(hole) => Err(self.hole_error(hole, facts, families, buckets)),
            None => Ok(cells.into_iter().flatten().collect()),
        }
    }

    /// A (family, bucket) pair without a class, placed at the family's first class.
    fn hole_error(
        &self,
        cell_index: usize,
        facts: &[ClassFacts],
        families: &[String],
        buckets: &[CacheBucket],
    ) -> PolicyError {
        let family = &families[cell_index / buckets.len()];
        let bucket = &buckets[cell_index % buckets.len()].name;
        let first_of_family = facts
            .iter()
            .find(|fact| fact.family == Some(family.as_str()))
            .map_or(Location::UNKNOWN, |fact| fact.raw.referenced);
        self.error(
            "policy_classes",
            &first_of_family,
            format!(
                "no class for family \"{family}\" and bucket \"{bucket}\": every family needs one class per bucket"
            ),
        )
    }
}

/// A model name as one field-path key: bare when it is a plain word, else double-quoted
/// (with `"` and `\` escaped) so names like `meta/llama-3.1` stay one key.
fn path_key(model_name: &str) -> String {
    let plain = !model_name.is_empty()
        && model_name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-'));
    if plain {
        return model_name.to_string();
    }
    let escaped = model_name.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

/// The validated class of a raw class that passed every check.
fn class_from_raw(raw: &RawPolicyClass, queue_policy: QueuePolicy) -> PolicyClass {
    let value_of = |field: &Option<Spanned<u64>>| field.as_ref().map(|spanned| spanned.value);
    PolicyClass {
        name: raw.name.value.clone(),
        policy_family: raw.policy_family.as_ref().map(|f| f.value.clone()),
        cache_bucket: raw.cache_bucket.as_ref().map(|b| b.value.clone()),
        queue_policy,
        quantum_tokens: raw.quantum.value,
        prefill_busy_threshold_tokens: value_of(&raw.prefill_busy_threshold),
        prefill_busy_threshold_frac: raw.prefill_busy_threshold_frac.as_ref().map(|f| f.value),
        busy_worker_ratio: raw.busy_worker_ratio.as_ref().map(|r| r.value),
        request_queue_limit_per_worker: value_of(&raw.request_queue_limit_per_worker),
        raw_isl_token_queue_limit_per_worker: value_of(&raw.raw_isl_token_queue_limit_per_worker),
        cached_token_queue_limit_per_worker: value_of(&raw.cached_token_queue_limit_per_worker),
    }
}

/// Families in order of first appearance among the matrix classes.
fn families_in_order(facts: &[ClassFacts]) -> Vec<String> {
    let mut families: Vec<String> = Vec::new();
    for family in facts.iter().filter_map(|fact| fact.family) {
        if !families.iter().any(|known| known == family) {
            families.push(family.to_string());
        }
    }
    families
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        return "none".to_string();
    }
    names.join(", ")
}

/// Dynamo's identifier rule: non-empty, ASCII alphanumerics and `_ . -` only.
pub fn is_identifier(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::super::PolicyConfig;
    use super::*;

    /// One bucket `all`, family `a`, class `x`; each test edits one line of it.
    const MINIMAL: &str = "\
default_policy_family: a
uncached_isl_buckets:
  - min_tokens: 0
    bucket: all
policy_classes:
  - name: x
    policy_family: a
    cache_bucket: all
    quantum: 1
";

    fn error_of(text: &str) -> PolicyError {
        match PolicyConfig::from_yaml_str(text, Some("p.yaml")) {
            Ok(config) => panic!("accepted an invalid policy: {config:?}\n{text}"),
            Err(error) => error,
        }
    }

    /// `MINIMAL` with `extra` appended as more lines of class `x`.
    fn with_class_lines(extra: &str) -> String {
        format!("{MINIMAL}{extra}")
    }

    fn assert_error(text: &str, line: usize, message: &str, field_path: &str) {
        let error = error_of(text);
        assert_eq!(error.message, message, "{text}");
        assert_eq!(error.line, Some(line), "{error}\n{text}");
        assert_eq!(&*error.field_path, field_path, "{error}");
        assert_eq!(error.source_name.as_deref(), Some("p.yaml"));
    }

    #[test]
    fn minimal_policy_is_accepted() {
        let config = PolicyConfig::from_yaml_str(MINIMAL, None).unwrap();
        let root = config.root.unwrap();
        assert_eq!(root.classes()[0].name, "x");
        assert_eq!(root.classes()[0].queue_policy, QueuePolicy::Fcfs);
    }

    #[test]
    fn root_fields_are_all_or_nothing() {
        let text = "uncached_isl_buckets:\n  - {min_tokens: 0, bucket: all}\n";
        assert_error(
            text,
            2,
            "root: a root profile needs all of default_policy_family, uncached_isl_buckets and \
             policy_classes; missing default_policy_family, policy_classes",
            "default_policy_family",
        );
    }

    #[test]
    fn a_document_without_any_profile_is_rejected() {
        let error = error_of("");
        assert!(
            error
                .message
                .starts_with("root: the document defines no profile"),
            "{error}"
        );
        assert_eq!(error.line, None);
        let error = error_of("# only a comment\nmodels: {}\n");
        assert!(
            error
                .message
                .starts_with("root: the document defines no profile"),
            "{error}"
        );
        assert_eq!(error.line, Some(2));
    }

    #[test]
    fn model_names_must_not_be_empty() {
        let indented: String = MINIMAL
            .lines()
            .map(|line| format!("    {line}\n"))
            .collect();
        let text = format!("models:\n  \"\":\n{indented}");
        assert_error(
            &text,
            3,
            "model \"\": model name must not be empty",
            "models.\"\"",
        );
    }

    #[test]
    fn model_errors_name_the_model_and_its_absolute_line() {
        let indented: String = MINIMAL
            .lines()
            .map(|line| format!("    {line}\n"))
            .collect();
        let text = format!(
            "models:\n  llama:\n{}",
            indented.replace("quantum: 1", "quantum: 0")
        );
        assert_error(
            &text,
            11,
            "model \"llama\": class \"x\": quantum must be > 0",
            "models.llama.policy_classes[0].quantum",
        );
    }

    #[test]
    fn policy_classes_must_not_be_empty() {
        let text = "default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: all}]\npolicy_classes: []\n";
        assert_error(
            text,
            3,
            "root: policy_classes must not be empty",
            "policy_classes",
        );
    }

    #[test]
    fn bucket_list_must_not_be_empty() {
        let text = MINIMAL.replace(
            "uncached_isl_buckets:\n  - min_tokens: 0\n    bucket: all\n",
            "uncached_isl_buckets: []\n",
        );
        assert_error(
            &text,
            2,
            "root: uncached_isl_buckets must not be empty",
            "uncached_isl_buckets",
        );
    }

    #[test]
    fn first_bucket_must_start_at_zero() {
        assert_error(
            &MINIMAL.replace("min_tokens: 0", "min_tokens: 5"),
            3,
            "root: uncached_isl_buckets[0] (bucket \"all\"): the first bucket must start at min_tokens 0, not 5",
            "uncached_isl_buckets[0].min_tokens",
        );
    }

    #[test]
    fn bucket_bounds_must_strictly_increase() {
        let text = MINIMAL.replace(
            "    bucket: all\n",
            "    bucket: all\n  - min_tokens: 0\n    bucket: more\n",
        );
        assert_error(
            &text,
            5,
            "root: uncached_isl_buckets[1] (bucket \"more\"): min_tokens must be strictly increasing, but 0 follows 0",
            "uncached_isl_buckets[1].min_tokens",
        );
    }

    #[test]
    fn bucket_names_must_be_unique() {
        let text = MINIMAL.replace(
            "    bucket: all\n",
            "    bucket: all\n  - min_tokens: 10\n    bucket: all\n",
        );
        assert_error(
            &text,
            6,
            "root: uncached_isl_buckets[1]: duplicate bucket name \"all\" (first at uncached_isl_buckets[0])",
            "uncached_isl_buckets[1].bucket",
        );
    }

    #[test]
    fn bucket_names_follow_the_identifier_rule() {
        assert_error(
            &MINIMAL.replace("bucket: all", "bucket: \"a/b\""),
            4,
            "root: uncached_isl_buckets[0]: bucket name \"a/b\" must be non-empty and use only ASCII \
             letters, digits, '_', '.' and '-'",
            "uncached_isl_buckets[0].bucket",
        );
    }

    #[test]
    fn class_names_follow_the_identifier_rule() {
        assert_error(
            &MINIMAL.replace("name: x", "name: \"x y\""),
            6,
            "root: policy_classes[0]: class name \"x y\" must be non-empty and use only ASCII \
             letters, digits, '_', '.' and '-'",
            "policy_classes[0].name",
        );
    }

    #[test]
    fn family_names_follow_the_identifier_rule() {
        assert_error(
            &MINIMAL.replace("policy_family: a", "policy_family: \"\""),
            7,
            "root: class \"x\": policy_family \"\" must be non-empty and use only ASCII letters, \
             digits, '_', '.' and '-'",
            "policy_classes[0].policy_family",
        );
    }

    #[test]
    fn default_family_follows_the_identifier_rule() {
        assert_error(
            &MINIMAL.replace("default_policy_family: a", "default_policy_family: \"a!\""),
            1,
            "root: default_policy_family \"a!\" must be non-empty and use only ASCII letters, \
             digits, '_', '.' and '-'",
            "default_policy_family",
        );
    }

    #[test]
    fn class_names_must_be_unique() {
        let text = with_class_lines("  - name: x\n    quantum: 2\n");
        assert_error(
            &text,
            10,
            "root: class \"x\": duplicate class name (first defined at policy_classes[0], line 6)",
            "policy_classes[1].name",
        );
    }

    #[test]
    fn lcfs_parses_but_is_rejected() {
        assert_error(
            &with_class_lines("    queue_policy: lcfs\n"),
            10,
            "root: class \"x\": queue_policy must be fcfs or wspt, not lcfs",
            "policy_classes[0].queue_policy",
        );
    }

    #[test]
    fn unknown_queue_policy_is_a_parse_error_with_its_line() {
        let error = error_of(&with_class_lines("    queue_policy: fifo\n"));
        assert_eq!(error.line, Some(10));
        assert_eq!(error.column, Some(19));
        assert!(
            error
                .message
                .starts_with("root: class \"x\": queue_policy: unknown value `fifo`"),
            "{error}"
        );
    }

    #[test]
    fn quantum_must_be_positive() {
        assert_error(
            &MINIMAL.replace("quantum: 1", "quantum: 0"),
            9,
            "root: class \"x\": quantum must be > 0",
            "policy_classes[0].quantum",
        );
    }

    #[test]
    fn quantum_is_required() {
        let error = error_of(&MINIMAL.replace("    quantum: 1\n", ""));
        assert!(error.message.contains("missing field `quantum`"), "{error}");
        // serde-saphyr places a missing field at the end of its mapping: still inside the class.
        assert_eq!(error.line, Some(8));
    }

    #[test]
    fn family_without_bucket_is_rejected() {
        assert_error(
            &MINIMAL.replace("    cache_bucket: all\n", ""),
            7,
            "root: class \"x\": policy_family is set but cache_bucket is not: a matrix class needs \
             both, an explicit class neither",
            "policy_classes[0].cache_bucket",
        );
    }

    #[test]
    fn bucket_without_family_is_rejected() {
        let text = with_class_lines("  - name: y\n    cache_bucket: all\n    quantum: 1\n");
        assert_error(
            &text,
            11,
            "root: class \"y\": cache_bucket is set but policy_family is not: a matrix class needs \
             both, an explicit class neither",
            "policy_classes[1].policy_family",
        );
    }

    #[test]
    fn cache_bucket_must_be_declared() {
        assert_error(
            &MINIMAL.replace("cache_bucket: all", "cache_bucket: zzz"),
            8,
            "root: class \"x\": cache_bucket \"zzz\" is not a declared bucket (declared: all)",
            "policy_classes[0].cache_bucket",
        );
    }

    #[test]
    fn explicit_class_must_not_be_named_like_a_family() {
        let text = with_class_lines("  - name: a\n    quantum: 1\n");
        assert_error(
            &text,
            10,
            "root: class \"a\": an explicit class must not be named like the policy family \"a\"",
            "policy_classes[1].name",
        );
    }

    #[test]
    fn default_family_must_have_matrix_classes() {
        let text = with_class_lines("  - name: b\n    quantum: 1\n")
            .replace("default_policy_family: a", "default_policy_family: b");
        assert_error(
            &text,
            1,
            "root: default_policy_family \"b\" is not the policy_family of any class (families: a)",
            "default_policy_family",
        );
    }

    #[test]
    fn matrix_duplicates_are_reported_at_the_second_class() {
        let text = with_class_lines(
            "  - name: y\n    policy_family: a\n    cache_bucket: all\n    quantum: 1\n",
        );
        assert_error(
            &text,
            10,
            "root: class \"y\": family \"a\" and bucket \"all\" already belong to class \"x\"; each \
             pair needs exactly one class",
            "policy_classes[1]",
        );
    }

    #[test]
    fn matrix_holes_are_reported_at_the_family() {
        let text = MINIMAL.replace(
            "    bucket: all\n",
            "    bucket: all\n  - min_tokens: 100\n    bucket: long\n",
        );
        assert_error(
            &text,
            8,
            "root: no class for family \"a\" and bucket \"long\": every family needs one class per bucket",
            "policy_classes",
        );
    }

    #[test]
    fn threshold_frac_must_be_finite_and_non_negative() {
        for (value, shown) in [("-0.5", "-0.5"), (".nan", "NaN"), (".inf", "inf")] {
            assert_error(
                &with_class_lines(&format!("    prefill_busy_threshold_frac: {value}\n")),
                10,
                &format!(
                    "root: class \"x\": prefill_busy_threshold_frac must be finite and >= 0, not {shown}"
                ),
                "policy_classes[0].prefill_busy_threshold_frac",
            );
        }
        let zero = with_class_lines("    prefill_busy_threshold_frac: 0\n");
        assert!(PolicyConfig::from_yaml_str(&zero, None).is_ok());
    }

    #[test]
    fn busy_worker_ratio_must_be_in_zero_one() {
        for (value, shown) in [("0", "0"), ("1.5", "1.5"), (".nan", "NaN")] {
            let text = with_class_lines(&format!(
                "    prefill_busy_threshold: 10\n    busy_worker_ratio: {value}\n"
            ));
            assert_error(
                &text,
                11,
                &format!("root: class \"x\": busy_worker_ratio must be in (0, 1], not {shown}"),
                "policy_classes[0].busy_worker_ratio",
            );
        }
        let one = with_class_lines("    prefill_busy_threshold: 10\n    busy_worker_ratio: 1\n");
        assert!(PolicyConfig::from_yaml_str(&one, None).is_ok());
    }

    #[test]
    fn busy_worker_ratio_needs_a_threshold() {
        assert_error(
            &with_class_lines("    busy_worker_ratio: 0.5\n"),
            10,
            "root: class \"x\": busy_worker_ratio needs prefill_busy_threshold or prefill_busy_threshold_frac",
            "policy_classes[0].busy_worker_ratio",
        );
    }

    #[test]
    fn fields_newer_dynamo_knows_are_unknown_here() {
        for field in ["slo_ms: 5", "queue_admission: {type: x}"] {
            let error = error_of(&with_class_lines(&format!("    {field}\n")));
            assert!(error.message.contains("unknown field"), "{error}");
            assert_eq!(error.line, Some(10), "{error}");
        }
        for field in [
            "worker_selection: {}",
            "request_classifier: {type: x}",
            "default_policy_class: x",
        ] {
            let error = error_of(&format!("{MINIMAL}{field}\n"));
            assert!(
                error.message.starts_with(&format!(
                    "root: {}: unknown field",
                    field.split(':').next().unwrap()
                )),
                "{error}"
            );
            assert_eq!(error.line, Some(10), "{error}");
        }
    }

    #[test]
    fn parse_errors_inside_a_model_name_the_model() {
        let indented: String = MINIMAL
            .lines()
            .map(|line| format!("    {line}\n"))
            .collect();
        let text = format!(
            "models:\n  llama:\n{}",
            indented.replace("quantum: 1", "quantum: -1")
        );
        let error = error_of(&text);
        assert_eq!(error.location, "model \"llama\"");
        assert!(
            error
                .message
                .starts_with("model \"llama\": class \"x\": quantum: expected a whole number"),
            "{error}"
        );
        assert_eq!(error.line, Some(11));
    }

    #[test]
    fn duplicate_keys_are_rejected() {
        let error = error_of(&format!("default_policy_family: a\n{MINIMAL}"));
        assert!(
            error
                .message
                .ends_with("duplicate key `default_policy_family`"),
            "{error}"
        );
    }

    #[test]
    fn identifier_rule() {
        assert!(is_identifier("a-b_c.9Z"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("a b"));
        assert!(!is_identifier("é"));
    }
}
