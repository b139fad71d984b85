//! Raw policy document -> validated profiles: every rule of the schema, each error located.

use super::PolicyConfig;
use super::error::PolicyError;
use super::profile::{CacheBucket, PolicyClass, PolicyProfile};
use super::raw::{RawBucket, RawPolicyClass, RawPolicyConfig, RawQueuePolicy};
use crate::scheduling::types::QueuePolicy;
use serde_saphyr::{Location, Spanned};
use std::collections::BTreeMap;

/// Words for the identifier rule, shared by every identifier error.
const IDENTIFIER_RULE: &str =
    "must be non-empty and use only ASCII letters, digits, '_', '.' and '-'";

/// Validates a deserialized document into profiles ready for the scheduler.
///
/// Errors carry `line`/`column` from the spans serde-saphyr recorded (absolute in whatever
/// document `raw` was read from, so embedding the keys in a larger file keeps them right) and a
/// `field_path` relative to the policy keys. `source_name` is left empty for the caller to set.
pub fn validate(raw: &RawPolicyConfig) -> Result<PolicyConfig, PolicyError> {
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
    if root.is_none() && models.is_empty() {
        let at = raw.models.as_ref().map(|models| &models.referenced);
        return Err(PolicyError::new(
            "root",
            String::new(),
            at,
            "the document defines no profile: give default_policy_family, uncached_isl_buckets \
             and policy_classes, or at least one profile under models",
        ));
    }
    Ok(PolicyConfig { root, models })
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
            path_prefix: format!("models.{model_name}."),
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
        let mut classes = Vec::with_capacity(raw_classes.value.len());
        let mut facts = Vec::with_capacity(raw_classes.value.len());
        let mut first_index_by_name: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, raw_class) in raw_classes.value.iter().enumerate() {
            let class = self.check_class(&raw_class.value, index, &buckets)?;
            let name = raw_class.value.name.value.as_str();
            if let Some(&first) = first_index_by_name.get(name) {
                let first_line = raw_classes.value[first].referenced.line();
                return Err(self.class_error(
                    &raw_class.value,
                    index,
                    "name",
                    &raw_class.value.name.referenced,
                    format!("duplicate class name (first defined at policy_classes[{first}], line {first_line})"),
                ));
            }
            first_index_by_name.insert(name, index);
            let bucket_index = class
                .cache_bucket
                .as_deref()
                .and_then(|bucket| buckets.iter().position(|known| known.name == bucket));
            facts.push(ClassFacts {
                raw: raw_class,
                index,
                family: raw_class
                    .value
                    .policy_family
                    .as_ref()
                    .map(|f| f.value.as_str()),
                bucket_index,
            });
            classes.push(class);
        }
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
            let RawBucket {
                min_tokens,
                bucket: name,
            } = &raw_bucket.value;
            let entry = format!("uncached_isl_buckets[{index}]");
            if !is_identifier(&name.value) {
                return Err(self.error(
                    &format!("{entry}.bucket"),
                    &name.referenced,
                    format!("{entry}: bucket name \"{}\" {IDENTIFIER_RULE}", name.value),
                ));
            }
            if let Some(first) = buckets.iter().position(|known| known.name == name.value) {
                return Err(self.error(
                    &format!("{entry}.bucket"),
                    &name.referenced,
                    format!(
                        "{entry}: duplicate bucket name \"{}\" (first at uncached_isl_buckets[{first}])",
                        name.value
                    ),
                ));
            }
            let min_path = format!("{entry}.min_tokens");
            match buckets.last() {
                None if min_tokens.value != 0 => {
                    return Err(self.error(
                        &min_path,
                        &min_tokens.referenced,
                        format!(
                            "{entry} (bucket \"{}\"): the first bucket must start at min_tokens 0, not {}",
                            name.value, min_tokens.value
                        ),
                    ));
                }
                Some(previous) if min_tokens.value <= previous.min_tokens => {
                    return Err(self.error(
                        &min_path,
                        &min_tokens.referenced,
                        format!(
                            "{entry} (bucket \"{}\"): min_tokens must be strictly increasing, but {} follows {}",
                            name.value, min_tokens.value, previous.min_tokens
                        ),
                    ));
                }
                _ => {}
            }
            buckets.push(CacheBucket {
                min_tokens: min_tokens.value,
                name: name.value.clone(),
            });
        }
        Ok(buckets)
    }

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
        let fail = |field: &str, at: &Location, detail: String| {
            Err(self.class_error(raw, index, field, at, detail))
        };
        let queue_policy = match raw.queue_policy.as_ref().map(|p| (p.value, p.referenced)) {
            None | Some((RawQueuePolicy::Fcfs, _)) => QueuePolicy::Fcfs,
            Some((RawQueuePolicy::Wspt, _)) => QueuePolicy::Wspt,
            Some((RawQueuePolicy::Lcfs, at)) => {
                return fail(
                    "queue_policy",
                    &at,
                    "queue_policy must be fcfs or wspt, not lcfs".into(),
                );
            }
        };
        if raw.quantum.value == 0 {
            return fail(
                "quantum",
                &raw.quantum.referenced,
                "quantum must be > 0".into(),
            );
        }
        match (&raw.policy_family, &raw.cache_bucket) {
            (Some(family), _) if !is_identifier(&family.value) => {
                return fail(
                    "policy_family",
                    &family.referenced,
                    format!("policy_family \"{}\" {IDENTIFIER_RULE}", family.value),
                );
            }
            (Some(_), Some(bucket)) if !buckets.iter().any(|known| known.name == bucket.value) => {
                let declared: Vec<&str> = buckets.iter().map(|known| known.name.as_str()).collect();
                return fail(
                    "cache_bucket",
                    &bucket.referenced,
                    format!(
                        "cache_bucket \"{}\" is not a declared bucket (declared: {})",
                        bucket.value,
                        declared.join(", ")
                    ),
                );
            }
            (Some(family), None) => {
                return fail(
                    "cache_bucket",
                    &family.referenced,
                    "policy_family is set but cache_bucket is not: a matrix class needs both, an explicit class neither".into(),
                );
            }
            (None, Some(bucket)) => {
                return fail(
                    "policy_family",
                    &bucket.referenced,
                    "cache_bucket is set but policy_family is not: a matrix class needs both, an explicit class neither".into(),
                );
            }
            _ => {}
        }
        if let Some(frac) = &raw.prefill_busy_threshold_frac
            && !(frac.value.is_finite() && frac.value >= 0.0)
        {
            return fail(
                "prefill_busy_threshold_frac",
                &frac.referenced,
                format!(
                    "prefill_busy_threshold_frac must be finite and >= 0, not {}",
                    frac.value
                ),
            );
        }
        if let Some(ratio) = &raw.busy_worker_ratio {
            if !(ratio.value.is_finite() && ratio.value > 0.0 && ratio.value <= 1.0) {
                return fail(
                    "busy_worker_ratio",
                    &ratio.referenced,
                    format!("busy_worker_ratio must be in (0, 1], not {}", ratio.value),
                );
            }
            if raw.prefill_busy_threshold.is_none() && raw.prefill_busy_threshold_frac.is_none() {
                return fail(
                    "busy_worker_ratio",
                    &ratio.referenced,
                    "busy_worker_ratio needs prefill_busy_threshold or prefill_busy_threshold_frac"
                        .into(),
                );
            }
        }
        Ok(PolicyClass {
            name: raw.name.value.clone(),
            policy_family: raw.policy_family.as_ref().map(|f| f.value.clone()),
            cache_bucket: raw.cache_bucket.as_ref().map(|b| b.value.clone()),
            queue_policy,
            quantum_tokens: raw.quantum.value,
            prefill_busy_threshold_tokens: raw.prefill_busy_threshold.as_ref().map(|t| t.value),
            prefill_busy_threshold_frac: raw.prefill_busy_threshold_frac.as_ref().map(|f| f.value),
            busy_worker_ratio: raw.busy_worker_ratio.as_ref().map(|r| r.value),
            request_queue_limit_per_worker: raw
                .request_queue_limit_per_worker
                .as_ref()
                .map(|l| l.value),
            raw_isl_token_queue_limit_per_worker: raw
                .raw_isl_token_queue_limit_per_worker
                .as_ref()
                .map(|l| l.value),
            cached_token_queue_limit_per_worker: raw
                .cached_token_queue_limit_per_worker
                .as_ref()
                .map(|l| l.value),
        })
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
        let mut matrix = Vec::with_capacity(cells.len());
        for (cell_index, cell) in cells.iter().enumerate() {
            let family = &families[cell_index / buckets.len()];
            let bucket = &buckets[cell_index % buckets.len()].name;
            match cell {
                Some(class_index) => matrix.push(*class_index),
                None => {
                    let first_of_family = facts
                        .iter()
                        .find(|fact| fact.family == Some(family.as_str()))
                        .map_or(Location::UNKNOWN, |fact| fact.raw.referenced);
                    return Err(self.error(
                        "policy_classes",
                        &first_of_family,
                        format!(
                            "no class for family \"{family}\" and bucket \"{bucket}\": every family needs one class per bucket"
                        ),
                    ));
                }
            }
        }
        Ok(matrix)
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
pub(crate) fn is_identifier(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-'))
}
