//! Validated policy profiles: the classes the scheduler runs, and how a request finds its class.

use crate::scheduling::types::QueuePolicy;
use std::collections::BTreeMap;

/// `max_num_batched_tokens` assumed for a rank that does not report one (Dynamo's default).
pub const DEFAULT_MAX_BATCHED_TOKENS: u64 = 10_000_000;

/// One physical policy class: its own queue, DRR quantum, busy thresholds and queue limits.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyClass {
    /// Unique name within the profile.
    pub name: String,
    /// Family of a matrix class (`None` for an explicit or synthetic class).
    pub policy_family: Option<String>,
    /// Cache bucket of a matrix class (`None` for an explicit or synthetic class).
    pub cache_bucket: Option<String>,
    /// Order of requests inside the class.
    pub queue_policy: QueuePolicy,
    /// DRR credit earned per round, in uncached tokens (> 0).
    pub quantum_tokens: u64,
    /// A rank is busy when its active prefill tokens exceed this.
    pub prefill_busy_threshold_tokens: Option<u64>,
    /// A rank is busy when its active prefill tokens exceed this times its
    /// `max_num_batched_tokens` (finite, >= 0).
    pub prefill_busy_threshold_frac: Option<f64>,
    /// The pool is busy when at least this fraction of eligible ranks is busy (in (0, 1]);
    /// `None` means all eligible ranks must be busy.
    pub busy_worker_ratio: Option<f64>,
    /// Queued requests allowed per discovered worker.
    pub request_queue_limit_per_worker: Option<u64>,
    /// Queued raw prompt tokens allowed per discovered worker.
    pub raw_isl_token_queue_limit_per_worker: Option<u64>,
    /// Queued cached prompt tokens allowed per discovered worker.
    pub cached_token_queue_limit_per_worker: Option<u64>,
}

impl PolicyClass {
    /// Whether requests of this class can ever wait in the queue: only with a busy threshold.
    /// A class without one always dispatches immediately, whatever its limits say.
    pub fn queueing_enabled(&self) -> bool {
        self.prefill_busy_threshold_tokens.is_some() || self.prefill_busy_threshold_frac.is_some()
    }

    /// Whether a rank with `active_prefill_tokens` counts as busy for this class.
    ///
    /// Strictly greater than the absolute threshold, or strictly greater than
    /// `frac × max_num_batched_tokens` (`DEFAULT_MAX_BATCHED_TOKENS` when the rank reports
    /// none). So an idle rank is never busy, and frac 0.0 is busy from the first token.
    pub fn rank_is_busy(
        &self,
        active_prefill_tokens: u64,
        max_num_batched_tokens: Option<u64>,
    ) -> bool {
        let over_absolute = self
            .prefill_busy_threshold_tokens
            .is_some_and(|threshold_tokens| active_prefill_tokens > threshold_tokens);
        let over_fraction = self.prefill_busy_threshold_frac.is_some_and(|frac| {
            let max_batched_tokens = max_num_batched_tokens.unwrap_or(DEFAULT_MAX_BATCHED_TOKENS);
            // f64 like Dynamo; exact for every realistic token count (< 2^53).
            active_prefill_tokens as f64 > frac * max_batched_tokens as f64
        });
        over_absolute || over_fraction
    }

    /// Whether the pool of eligible ranks counts as busy, given how many of them are busy.
    ///
    /// No eligible rank is never busy (the request falls through to selection, which reports
    /// the error). Without `busy_worker_ratio` every eligible rank must be busy; with ratio r,
    /// at least `r × eligible` must be.
    pub fn pool_is_busy(&self, busy_ranks: usize, eligible_ranks: usize) -> bool {
        debug_assert!(
            busy_ranks <= eligible_ranks,
            "more busy ranks than eligible ones"
        );
        if eligible_ranks == 0 {
            return false;
        }
        match self.busy_worker_ratio {
            Some(ratio) => busy_ranks as f64 >= ratio * eligible_ranks as f64,
            None => busy_ranks >= eligible_ranks,
        }
    }

    /// The class's thresholds in words, e.g. `prefill > 1536 tok, > 0.5 x max_batched`.
    pub fn describe_thresholds(&self) -> String {
        let mut parts = Vec::new();
        if let Some(threshold_tokens) = self.prefill_busy_threshold_tokens {
            parts.push(format!("prefill > {threshold_tokens} tok"));
        }
        if let Some(frac) = self.prefill_busy_threshold_frac {
            parts.push(format!("prefill > {frac} x max_batched"));
        }
        if let Some(ratio) = self.busy_worker_ratio {
            parts.push(format!("ratio {ratio}"));
        }
        if parts.is_empty() {
            return "never queues".to_string();
        }
        parts.join(", ")
    }

    /// The class's per-worker queue limits in words, e.g. `1024 req, 65536 raw tok`.
    pub fn describe_limits(&self) -> String {
        let limits = [
            (self.request_queue_limit_per_worker, "req"),
            (self.raw_isl_token_queue_limit_per_worker, "raw tok"),
            (self.cached_token_queue_limit_per_worker, "cached tok"),
        ];
        let parts: Vec<String> = limits
            .iter()
            .filter_map(|(limit, unit)| limit.map(|limit| format!("{limit} {unit}")))
            .collect();
        if parts.is_empty() {
            return "none".to_string();
        }
        format!("{} /worker", parts.join(", "))
    }
}

/// One cache bucket: requests with at least `min_tokens` uncached prompt tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheBucket {
    /// Inclusive lower bound in uncached prompt tokens; the first bucket's is 0.
    pub min_tokens: u64,
    /// Bucket name.
    pub name: String,
}

/// A validated profile: classes in YAML order plus the lookup tables of class resolution
/// (docs/scheduling.md#class-resolution).
///
/// Build one with [`PolicyConfig::from_yaml_str`](super::PolicyConfig::from_yaml_str) or
/// [`PolicyProfile::synthetic`]; every instance satisfies the schema's rules.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyProfile {
    pub(crate) classes: Vec<PolicyClass>,
    pub(crate) default_policy_family: Option<String>,
    pub(crate) buckets: Vec<CacheBucket>,
    /// Families in order of first appearance in `policy_classes`.
    pub(crate) families: Vec<String>,
    /// Family name -> index in `families`.
    pub(crate) family_index: BTreeMap<String, usize>,
    /// Explicit class name -> class index.
    pub(crate) explicit_index: BTreeMap<String, usize>,
    /// Class index for `family_index × buckets.len() + bucket_index`.
    pub(crate) matrix: Vec<usize>,
    /// Index of the default family in `families` (`None` only for the synthetic profile).
    pub(crate) default_family_index: Option<usize>,
}

impl PolicyProfile {
    /// The profile used when no YAML profile applies (docs/scheduling.md#the-default-class):
    /// one class `default`, quantum 1, `queue_policy` from `--router-queue-policy`, frac
    /// threshold from `--router-queue-threshold` (`None` = never queues), no limits. Always
    /// resolved directly.
    ///
    /// # Panics
    /// If `router_queue_threshold_frac` is NaN, infinite or negative: validate user input first.
    pub fn synthetic(queue_policy: QueuePolicy, router_queue_threshold_frac: Option<f64>) -> Self {
        assert!(
            router_queue_threshold_frac.is_none_or(|frac| frac.is_finite() && frac >= 0.0),
            "router queue threshold must be finite and >= 0"
        );
        let class = PolicyClass {
            name: "default".to_string(),
            policy_family: None,
            cache_bucket: None,
            queue_policy,
            quantum_tokens: 1,
            prefill_busy_threshold_tokens: None,
            prefill_busy_threshold_frac: router_queue_threshold_frac,
            busy_worker_ratio: None,
            request_queue_limit_per_worker: None,
            raw_isl_token_queue_limit_per_worker: None,
            cached_token_queue_limit_per_worker: None,
        };
        PolicyProfile {
            classes: vec![class],
            default_policy_family: None,
            buckets: Vec::new(),
            families: Vec::new(),
            family_index: BTreeMap::new(),
            explicit_index: BTreeMap::new(),
            matrix: Vec::new(),
            default_family_index: None,
        }
    }

    /// All classes, in YAML order (the DRR ring order). Never empty.
    pub fn classes(&self) -> &[PolicyClass] {
        &self.classes
    }

    /// Sets class `class`'s DRR quantum (what tuning varies). A zero quantum would never
    /// earn credit, so it is a caller's bug.
    pub fn set_quantum(&mut self, class: usize, quantum_tokens: u64) {
        assert!(quantum_tokens > 0, "a DRR quantum must be positive");
        self.classes[class].quantum_tokens = quantum_tokens;
    }

    /// The family used for requests that name no known family; `None` for the synthetic profile.
    pub fn default_policy_family(&self) -> Option<&str> {
        self.default_policy_family.as_deref()
    }

    /// Cache buckets in increasing `min_tokens`; empty for the synthetic profile.
    pub fn buckets(&self) -> &[CacheBucket] {
        &self.buckets
    }

    /// Family names in order of first appearance; empty for the synthetic profile.
    pub fn families(&self) -> &[String] {
        &self.families
    }

    /// Whether this is the synthetic no-YAML profile.
    pub fn is_synthetic(&self) -> bool {
        self.default_family_index.is_none()
    }

    /// The class a request resolves to without looking at the cache: the explicit class it
    /// names, or the synthetic profile's only class. `None` means it needs a cache sample
    /// (family/bucket resolution).
    pub fn direct_class_index(&self, requested: Option<&str>) -> Option<usize> {
        if self.is_synthetic() {
            return Some(0);
        }
        requested.and_then(|name| self.explicit_index.get(name).copied())
    }

    /// Whether resolving `requested` needs the request's uncached token count.
    pub fn needs_cache_sample(&self, requested: Option<&str>) -> bool {
        self.direct_class_index(requested).is_none()
    }

    /// The class index for a request (docs/scheduling.md#class-resolution): an explicit class
    /// name wins; otherwise the named family if it is one, else the default family (a matrix
    /// class name is *not* a shortcut), and the last bucket whose `min_tokens <=
    /// uncached_tokens`.
    pub fn resolve_class_index(&self, requested: Option<&str>, uncached_tokens: u64) -> usize {
        if let Some(direct) = self.direct_class_index(requested) {
            return direct;
        }
        let family = requested
            .and_then(|name| self.family_index.get(name).copied())
            .or(self.default_family_index)
            .unwrap_or(0);
        // The first bucket starts at 0, so at least one bucket qualifies.
        let qualifying = self
            .buckets
            .partition_point(|bucket| bucket.min_tokens <= uncached_tokens);
        let bucket = qualifying.saturating_sub(1);
        self.matrix[family * self.buckets.len() + bucket]
    }

    /// Whether any class can queue at all; without one the scheduler never needs to drain.
    pub fn any_queueing_enabled(&self) -> bool {
        self.classes.iter().any(PolicyClass::queueing_enabled)
    }

    /// Whether a request naming `name` finds it: a class or a family of the policy (the
    /// synthetic profile has neither, so every name falls through to its one class).
    pub fn knows_name(&self, name: &str) -> bool {
        self.explicit_index.contains_key(name) || self.family_index.contains_key(name)
    }

    /// Index of the class called `name`, if any.
    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|class| class.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::super::PolicyConfig;
    use super::*;

    const SAMPLE: &str = include_str!("../../../tests/fixtures/policy/sample.yaml");

    fn sample_profile() -> PolicyProfile {
        PolicyConfig::from_yaml_str(SAMPLE, Some("sample.yaml"))
            .unwrap()
            .root
            .unwrap()
    }

    fn resolved_name<'a>(
        profile: &'a PolicyProfile,
        requested: Option<&str>,
        uncached_tokens: u64,
    ) -> &'a str {
        &profile.classes()[profile.resolve_class_index(requested, uncached_tokens)].name
    }

    fn class_with_thresholds(threshold_tokens: Option<u64>, frac: Option<f64>) -> PolicyClass {
        PolicyClass {
            prefill_busy_threshold_tokens: threshold_tokens,
            ..PolicyProfile::synthetic(QueuePolicy::Fcfs, frac).classes()[0].clone()
        }
    }

    #[test]
    fn named_family_picks_its_bucket_class() {
        assert_eq!(
            resolved_name(&sample_profile(), Some("latency"), 0),
            "latency_cached"
        );
    }

    #[test]
    fn unknown_name_uses_the_default_family() {
        assert_eq!(
            resolved_name(&sample_profile(), Some("nonesuch"), 3071),
            "cached"
        );
        assert_eq!(resolved_name(&sample_profile(), Some(""), 3071), "cached");
    }

    #[test]
    fn no_name_uses_the_default_family_and_bucket_floor_is_inclusive() {
        assert_eq!(resolved_name(&sample_profile(), None, 3072), "uncached");
    }

    #[test]
    fn matrix_class_name_does_not_bypass_bucketing() {
        let profile = sample_profile();
        assert_eq!(
            resolved_name(&profile, Some("cached"), u64::MAX),
            "uncached"
        );
        assert!(profile.needs_cache_sample(Some("cached")));
        assert_eq!(profile.direct_class_index(Some("cached")), None);
    }

    #[test]
    fn explicit_class_name_resolves_directly() {
        let profile = sample_profile();
        let explicit = profile.class_index("custom_priority").unwrap();
        assert_eq!(
            profile.direct_class_index(Some("custom_priority")),
            Some(explicit)
        );
        assert!(!profile.needs_cache_sample(Some("custom_priority")));
        for uncached_tokens in [0, 3072, u64::MAX] {
            assert_eq!(
                profile.resolve_class_index(Some("custom_priority"), uncached_tokens),
                explicit
            );
        }
        assert!(profile.needs_cache_sample(None));
    }

    #[test]
    fn families_keep_first_appearance_order_and_buckets_their_bounds() {
        let profile = sample_profile();
        assert_eq!(profile.families(), ["standard", "latency"]);
        assert_eq!(profile.default_policy_family(), Some("standard"));
        let bounds: Vec<(u64, &str)> = profile
            .buckets()
            .iter()
            .map(|bucket| (bucket.min_tokens, bucket.name.as_str()))
            .collect();
        assert_eq!(bounds, [(0, "cached"), (3072, "uncached")]);
    }

    #[test]
    fn sample_fields_reach_the_validated_classes() {
        let profile = sample_profile();
        let uncached = &profile.classes()[profile.class_index("uncached").unwrap()];
        assert_eq!(uncached.quantum_tokens, 512);
        assert_eq!(uncached.prefill_busy_threshold_tokens, Some(1536));
        assert_eq!(uncached.request_queue_limit_per_worker, Some(64));
        let custom = &profile.classes()[profile.class_index("custom_priority").unwrap()];
        assert_eq!(custom.queue_policy, QueuePolicy::Wspt);
        assert_eq!(custom.raw_isl_token_queue_limit_per_worker, Some(65536));
        assert_eq!(custom.cached_token_queue_limit_per_worker, Some(32768));
        assert!(!custom.queueing_enabled());
        assert!(profile.any_queueing_enabled());
    }

    #[test]
    fn synthetic_profile_is_one_direct_default_class() {
        let profile = PolicyProfile::synthetic(QueuePolicy::Wspt, Some(0.25));
        let class = &profile.classes()[0];
        assert_eq!(profile.classes().len(), 1);
        assert_eq!(class.name, "default");
        assert_eq!(class.queue_policy, QueuePolicy::Wspt);
        assert_eq!(class.quantum_tokens, 1);
        assert_eq!(class.prefill_busy_threshold_tokens, None);
        assert_eq!(class.prefill_busy_threshold_frac, Some(0.25));
        assert_eq!(class.describe_limits(), "none");
        assert!(profile.is_synthetic());
        assert_eq!(profile.default_policy_family(), None);
        assert_eq!(profile.direct_class_index(Some("anything")), Some(0));
        assert_eq!(profile.direct_class_index(None), Some(0));
        assert_eq!(profile.resolve_class_index(Some("latency"), 99), 0);
        assert!(!profile.needs_cache_sample(None));
        assert!(profile.any_queueing_enabled());
    }

    #[test]
    fn synthetic_profile_without_threshold_never_queues() {
        let profile = PolicyProfile::synthetic(QueuePolicy::Fcfs, None);
        assert!(!profile.any_queueing_enabled());
        assert!(!profile.classes()[0].rank_is_busy(u64::MAX, Some(1)));
    }

    #[test]
    #[should_panic(expected = "router queue threshold")]
    fn synthetic_profile_refuses_a_negative_threshold() {
        let _ = PolicyProfile::synthetic(QueuePolicy::Fcfs, Some(-1.0));
    }

    #[test]
    fn absolute_threshold_is_strict() {
        let class = class_with_thresholds(Some(1536), None);
        assert!(!class.rank_is_busy(1536, None));
        assert!(class.rank_is_busy(1537, None));
        assert!(!class.rank_is_busy(0, None));
    }

    #[test]
    fn zero_fraction_is_busy_from_the_first_token() {
        let class = class_with_thresholds(None, Some(0.0));
        assert!(!class.rank_is_busy(0, Some(8192)));
        assert!(class.rank_is_busy(1, Some(8192)));
    }

    #[test]
    fn fraction_multiplies_max_batched_tokens_with_a_default() {
        let class = class_with_thresholds(None, Some(0.5));
        assert!(!class.rank_is_busy(4096, Some(8192)));
        assert!(class.rank_is_busy(4097, Some(8192)));
        assert!(!class.rank_is_busy(5_000_000, None));
        assert!(class.rank_is_busy(5_000_001, None));
    }

    #[test]
    fn either_threshold_makes_a_rank_busy() {
        let class = class_with_thresholds(Some(100), Some(1.0));
        assert!(class.rank_is_busy(101, Some(1000)));
        assert!(class.rank_is_busy(50, Some(10)));
        assert!(!class.rank_is_busy(100, Some(1000)));
    }

    #[test]
    fn pool_is_busy_only_when_every_eligible_rank_is_by_default() {
        let class = class_with_thresholds(Some(1), None);
        assert!(!class.pool_is_busy(0, 0));
        assert!(!class.pool_is_busy(3, 4));
        assert!(class.pool_is_busy(4, 4));
    }

    #[test]
    fn busy_worker_ratio_lowers_the_pool_bar() {
        let class = PolicyClass {
            busy_worker_ratio: Some(0.5),
            ..class_with_thresholds(Some(1), None)
        };
        assert!(!class.pool_is_busy(1, 4));
        assert!(class.pool_is_busy(2, 4));
        assert!(!class.pool_is_busy(0, 0));
    }

    #[test]
    fn thresholds_and_limits_read_as_words() {
        let profile = sample_profile();
        let uncached = &profile.classes()[profile.class_index("uncached").unwrap()];
        assert_eq!(uncached.describe_thresholds(), "prefill > 1536 tok");
        assert_eq!(uncached.describe_limits(), "64 req /worker");
        let custom = &profile.classes()[profile.class_index("custom_priority").unwrap()];
        assert_eq!(custom.describe_thresholds(), "never queues");
        assert_eq!(
            custom.describe_limits(),
            "65536 raw tok, 32768 cached tok /worker"
        );
    }
}
