//! The router policy YAML exactly as written (Dynamo's schema), before any validation.
//!
//! Every struct rejects unknown fields, as Dynamo does, so a typo is an error rather than a
//! silently ignored setting. Values are wrapped in [`Spanned`] so that semantic validation can
//! point at the line of the offending node even when this schema is embedded in a larger file.
//! Serializing writes the plain values (spans are dropped), so a raw document round-trips.

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

/// A whole policy document: an optional root profile plus per-model profiles, and optional
/// router settings.
///
/// The three root profile fields are all-or-nothing; validation enforces that.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicyConfig {
    /// Family used when a request names no known family (root profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_policy_family: Option<Spanned<String>>,
    /// Cache buckets by uncached prompt tokens (root profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncached_isl_buckets: Option<Spanned<Vec<Spanned<RawBucket>>>>,
    /// The physical classes (root profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_classes: Option<Spanned<Vec<Spanned<RawPolicyClass>>>>,
    /// Model name -> profile that replaces the root profile for that model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Spanned<BTreeMap<String, Spanned<RawPolicyProfile>>>>,
    /// Router settings (`KvRouterConfig` keys) the file applies over the router's own, as
    /// 1.6.1 applies a policy file's root `router:` map; only some keys are allowed there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<Spanned<BTreeMap<String, serde_json::Value>>>,
}

/// One complete profile (a `models:` entry); all three fields are required here.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicyProfile {
    /// Family used when a request names no known family.
    pub default_policy_family: Spanned<String>,
    /// Cache buckets by uncached prompt tokens.
    pub uncached_isl_buckets: Spanned<Vec<Spanned<RawBucket>>>,
    /// The physical classes.
    pub policy_classes: Spanned<Vec<Spanned<RawPolicyClass>>>,
}

/// One `uncached_isl_buckets` entry: requests with at least `min_tokens` uncached prompt tokens
/// (and fewer than the next entry's) fall in `bucket`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawBucket {
    /// Lower bound (inclusive) in uncached prompt tokens.
    pub min_tokens: Spanned<u64>,
    /// Bucket name, referenced by classes' `cache_bucket`.
    pub bucket: Spanned<String>,
}

/// Queue order as written; `lcfs` parses (Dynamo knows the word) but validation rejects it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RawQueuePolicy {
    /// First come first served.
    Fcfs,
    /// Weighted shortest processing time.
    Wspt,
    /// Last come first served: not allowed in a policy YAML.
    Lcfs,
}

/// One `policy_classes` entry as written.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawPolicyClass {
    /// Class name (identifier, unique in the profile).
    pub name: Spanned<String>,
    /// Family of a matrix class; absent for an explicit class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_family: Option<Spanned<String>>,
    /// Bucket of a matrix class; absent for an explicit class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_bucket: Option<Spanned<String>>,
    /// Order inside the class; fcfs when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_policy: Option<Spanned<RawQueuePolicy>>,
    /// DRR credit per round in uncached tokens (required, > 0).
    pub quantum: Spanned<u64>,
    /// Absolute active-prefill-token threshold above which a rank is busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_busy_threshold: Option<Spanned<u64>>,
    /// Threshold as a multiple of the rank's `max_num_batched_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_busy_threshold_frac: Option<Spanned<f64>>,
    /// Fraction of eligible ranks that must be busy for the pool to be busy (newer Dynamo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_worker_ratio: Option<Spanned<f64>>,
    /// Queued requests allowed per discovered worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_queue_limit_per_worker: Option<Spanned<u64>>,
    /// Queued raw prompt tokens allowed per discovered worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_isl_token_queue_limit_per_worker: Option<Spanned<u64>>,
    /// Queued cached prompt tokens allowed per discovered worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_token_queue_limit_per_worker: Option<Spanned<u64>>,
}
