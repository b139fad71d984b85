//! The router's knobs under Dynamo 1.6.1's `KvRouterConfig` names, their validation, and the
//! list of knobs accepted for compatibility that have no effect in this model.

use super::types::QueuePolicy;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The router knobs, with the keyword names of ai-dynamo-runtime 1.6.1's `KvRouterConfig`.
///
/// Deserialises from the same JSON/YAML keys Dynamo accepts; unknown keys are errors. Keys
/// that exist in Dynamo but have no effect in this model are accepted for compatibility and
/// listed by [`RouterConfig::ignored_fields_set`]. Call [`RouterConfig::validate`] after
/// parsing.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterConfig {
    /// Weight of device-cache overlap blocks credited against prefill blocks (default 1.0).
    pub overlap_score_credit: f64,
    /// Shrinks the overlap credit on ranks with more active prefill than the least loaded
    /// eligible rank (default 0.0 = off).
    pub overlap_score_credit_decay: f64,
    /// Weight of the (credited) prefill blocks in the cost (default 1.0).
    pub prefill_load_scale: f64,
    /// Cost per active request on the rank (default 0.0).
    pub decode_active_request_weight: f64,
    /// Deprecated: sets `prefill_load_scale`; 0 also sets `overlap_score_credit` to 0.
    pub overlap_score_weight: Option<f64>,
    /// Credit per host-tier cache hit block, in [0, 1] (default 0.75; no host tier here).
    pub host_cache_hit_weight: f64,
    /// Credit per disk-tier cache hit block, in [0, 1] (default 0.25; no disk tier here).
    pub disk_cache_hit_weight: f64,
    /// Credit per shared-cache block beyond the device overlap, in [0, 1] (default none = 0).
    pub shared_cache_multiplier: Option<f64>,
    /// 0 = argmin with random tie-break; > 0 = softmax sampling over normalised costs.
    pub router_temperature: f64,
    /// Track active prompt blocks per rank (default true).
    pub router_track_active_blocks: bool,
    /// No effect, as in 1.6.1's replay, which never reads it (default false); true needs
    /// `router_track_active_blocks`, as 1.6.1 checks.
    pub router_track_output_blocks: bool,
    /// Track prompt blocks by their real sequence hashes (default true) rather than random
    /// hashes (no cross-request sharing).
    pub router_assume_kv_reuse: bool,
    /// Track active prefill tokens per rank (default true).
    pub router_track_prefill_tokens: bool,
    /// `none` (static model). `aic` is rejected: the AIC duration model is not modelled.
    pub router_prefill_load_model: String,
    /// Busy fraction of `max_num_batched_tokens` for the synthetic default class (None = no
    /// queueing).
    pub router_queue_threshold: Option<f64>,
    /// In-class order of the synthetic default class (`fcfs` or `wspt`).
    pub router_queue_policy: QueuePolicy,
    /// routersim's addition: seed for tie-breaks and softmax draws (default 0).
    pub router_seed: u64,

    // Accepted for compatibility with 1.6.1; no effect in this model.
    /// No effect, as in 1.6.1's replay, which always takes prefix overlap from the KV-event
    /// index: the `use_kv_events` key as given. Validation still
    /// refuses what 1.6.1 refuses with it (`lru` needs false, a predicted TTL needs true).
    #[serde(rename = "use_kv_events")]
    pub use_kv_events_setting: Option<bool>,
    /// No effect: replica sync (single router here).
    pub router_replica_sync: Option<bool>,
    /// No effect: approximate-indexer TTL.
    pub router_ttl_secs: Option<f64>,
    /// No effect: approximate-indexer policy (`ttl` or `lru`).
    pub router_approximate_cache_policy: Option<String>,
    /// No effect: indexer thread count (>= 1).
    pub router_event_threads: Option<u32>,
    /// No effect: remote indexer.
    pub use_remote_indexer: Option<bool>,
    /// No effect: serving the indexer to other routers.
    pub serve_indexer: Option<bool>,
    /// No effect: session prefix index.
    pub enable_session_prefix_index: Option<bool>,
    /// No effect: shared cache tier type (`none` or `hicache`); the tier is not modelled.
    pub shared_cache_type: Option<String>,
    /// No effect: predicted-block TTL.
    pub router_predicted_ttl_secs: Option<f64>,
    /// No effect: conditional disaggregation (aggregated workers only).
    pub conditional_disagg_enabled: Option<bool>,
    /// No effect: conditional disaggregation policy.
    pub conditional_disagg_policy: Option<String>,
    /// No effect: conditional disaggregation ISL threshold.
    pub conditional_disagg_eff_isl_threshold: Option<u64>,
    /// No effect: conditional disaggregation ISL ratio threshold.
    pub conditional_disagg_eff_isl_ratio_threshold: Option<f64>,
    /// No effect: conditional disaggregation prefill busy threshold.
    pub conditional_disagg_prefill_busy_threshold: Option<f64>,
    /// No effect: conditional disaggregation decode busy threshold.
    pub conditional_disagg_decode_busy_threshold: Option<f64>,
    /// The policy YAML's path, as 1.6.1 takes it (relative to the current directory); the
    /// caller loads it (`replay` does; a scenario names its policy with `policy:` instead).
    pub router_policy_config: Option<String>,
    /// No effect: prefill-pool selection policy (disaggregated serving).
    pub router_prefill_policy: Option<String>,
    /// No effect: decode-pool selection policy (disaggregated serving).
    pub router_decode_policy: Option<String>,
    /// No effect: tracking hash (`public-xxh3-v1` or `keyed-xxh3-v1`).
    pub router_tracking_hash: Option<String>,
    /// No effect: key file for the keyed tracking hash.
    pub router_tracking_key_file: Option<String>,
    /// No effect: key id for the keyed tracking hash.
    pub router_tracking_key_id: Option<String>,
    /// Must be false (1.6.1 rejects true as well).
    pub durable_kv_events: Option<bool>,
    /// No effect: indexer snapshot threshold.
    pub router_snapshot_threshold: Option<u64>,
    /// No effect: reset persisted router state at start.
    pub router_reset_states: Option<bool>,
    /// No effect: waiting for the first worker at start.
    pub skip_initial_worker_wait: Option<bool>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            overlap_score_credit: 1.0,
            overlap_score_credit_decay: 0.0,
            prefill_load_scale: 1.0,
            decode_active_request_weight: 0.0,
            overlap_score_weight: None,
            host_cache_hit_weight: 0.75,
            disk_cache_hit_weight: 0.25,
            shared_cache_multiplier: None,
            router_temperature: 0.0,
            router_track_active_blocks: true,
            router_track_output_blocks: false,
            router_assume_kv_reuse: true,
            router_track_prefill_tokens: true,
            router_prefill_load_model: "none".to_string(),
            router_queue_threshold: None,
            router_queue_policy: QueuePolicy::Fcfs,
            router_seed: 0,
            use_kv_events_setting: None,
            router_replica_sync: None,
            router_ttl_secs: None,
            router_approximate_cache_policy: None,
            router_event_threads: None,
            use_remote_indexer: None,
            serve_indexer: None,
            enable_session_prefix_index: None,
            shared_cache_type: None,
            router_predicted_ttl_secs: None,
            conditional_disagg_enabled: None,
            conditional_disagg_policy: None,
            conditional_disagg_eff_isl_threshold: None,
            conditional_disagg_eff_isl_ratio_threshold: None,
            conditional_disagg_prefill_busy_threshold: None,
            conditional_disagg_decode_busy_threshold: None,
            router_policy_config: None,
            router_prefill_policy: None,
            router_decode_policy: None,
            router_tracking_hash: None,
            router_tracking_key_file: None,
            router_tracking_key_id: None,
            durable_kv_events: None,
            router_snapshot_threshold: None,
            router_reset_states: None,
            skip_initial_worker_wait: None,
        }
    }
}

/// A router config value that is out of range or not supported; names the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterConfigError {
    /// The offending key, spelled as in the config.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for RouterConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "router config `{}`: {}", self.field, self.message)
    }
}

impl std::error::Error for RouterConfigError {}

fn config_error(field: &'static str, message: impl Into<String>) -> RouterConfigError {
    RouterConfigError {
        field,
        message: message.into(),
    }
}

fn check_non_negative(field: &'static str, value: f64) -> Result<(), RouterConfigError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(config_error(
            field,
            format!("must be finite and >= 0, got {value}"),
        ))
    }
}

fn check_unit_interval(field: &'static str, value: f64) -> Result<(), RouterConfigError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(config_error(
            field,
            format!("must be between 0 and 1, got {value}"),
        ))
    }
}

fn check_one_of(
    field: &'static str,
    value: Option<&str>,
    allowed: &[&str],
) -> Result<(), RouterConfigError> {
    match value {
        Some(v) if !allowed.contains(&v) => Err(config_error(
            field,
            format!("unknown value {v:?}, expected one of {allowed:?}"),
        )),
        _ => Ok(()),
    }
}

impl RouterConfig {
    /// Parses `KvRouterConfig` keyword arguments given as JSON; errors name the field path,
    /// line and column. Call [`validate`](Self::validate) after.
    pub fn from_json_str(text: &str) -> Result<RouterConfig, crate::yaml::Error> {
        crate::yaml::from_json_str(text)
    }

    /// Checks every value as 1.6.1 does and rejects what this model cannot honour.
    pub fn validate(&self) -> Result<(), RouterConfigError> {
        self.validate_cost_weights()?;
        self.validate_tracking()?;
        self.validate_ignored_values()
    }

    fn validate_cost_weights(&self) -> Result<(), RouterConfigError> {
        check_non_negative("overlap_score_credit", self.overlap_score_credit)?;
        check_non_negative(
            "overlap_score_credit_decay",
            self.overlap_score_credit_decay,
        )?;
        check_non_negative("prefill_load_scale", self.prefill_load_scale)?;
        check_non_negative(
            "decode_active_request_weight",
            self.decode_active_request_weight,
        )?;
        if let Some(weight) = self.overlap_score_weight {
            check_non_negative("overlap_score_weight", weight)?;
        }
        check_unit_interval("host_cache_hit_weight", self.host_cache_hit_weight)?;
        check_unit_interval("disk_cache_hit_weight", self.disk_cache_hit_weight)?;
        if let Some(multiplier) = self.shared_cache_multiplier {
            check_unit_interval("shared_cache_multiplier", multiplier)?;
        }
        check_non_negative("router_temperature", self.router_temperature)
    }

    fn validate_tracking(&self) -> Result<(), RouterConfigError> {
        if let Some(threshold) = self.router_queue_threshold
            && (threshold.is_nan() || threshold < 0.0)
        {
            return Err(config_error(
                "router_queue_threshold",
                format!("must be >= 0, got {threshold}"),
            ));
        }
        match self.router_prefill_load_model.as_str() {
            "none" => {}
            "aic" => {
                return Err(config_error(
                    "router_prefill_load_model",
                    "`aic` is not supported by routersim (static prefill model only)",
                ));
            }
            other => {
                return Err(config_error(
                    "router_prefill_load_model",
                    format!("unknown value {other:?}, expected \"none\""),
                ));
            }
        }
        if self.router_track_output_blocks && !self.router_track_active_blocks {
            return Err(config_error(
                "router_track_output_blocks",
                "requires router_track_active_blocks: true, as in Dynamo 1.6.1",
            ));
        }
        Ok(())
    }

    fn validate_ignored_values(&self) -> Result<(), RouterConfigError> {
        if let Some(ttl) = self.router_ttl_secs {
            check_non_negative("router_ttl_secs", ttl)?;
        }
        if self.router_event_threads == Some(0) {
            return Err(config_error("router_event_threads", "must be at least 1"));
        }
        if self.durable_kv_events == Some(true) {
            return Err(config_error("durable_kv_events", "true is not supported"));
        }
        check_one_of(
            "router_approximate_cache_policy",
            self.router_approximate_cache_policy.as_deref(),
            &["ttl", "lru"],
        )?;
        self.validate_kv_events_pairing()?;
        // 1.6.1's replay takes only the built-in worker selection.
        check_one_of(
            "router_prefill_policy",
            self.router_prefill_policy.as_deref(),
            &["default"],
        )?;
        check_one_of(
            "router_decode_policy",
            self.router_decode_policy.as_deref(),
            &["default"],
        )?;
        check_one_of(
            "shared_cache_type",
            self.shared_cache_type.as_deref(),
            &["none", "hicache"],
        )?;
        check_one_of(
            "router_tracking_hash",
            self.router_tracking_hash.as_deref(),
            &["public-xxh3-v1", "keyed-xxh3-v1"],
        )
    }

    /// The two settings 1.6.1 accepts only with a given `use_kv_events` (default true).
    fn validate_kv_events_pairing(&self) -> Result<(), RouterConfigError> {
        let kv_events = self.use_kv_events_setting.unwrap_or(true);
        if kv_events && self.router_approximate_cache_policy.as_deref() == Some("lru") {
            return Err(config_error(
                "router_approximate_cache_policy",
                "`lru` requires use_kv_events: false, as in Dynamo 1.6.1",
            ));
        }
        if !kv_events && self.router_predicted_ttl_secs.is_some() {
            return Err(config_error(
                "router_predicted_ttl_secs",
                "requires use_kv_events: true, as in Dynamo 1.6.1",
            ));
        }
        Ok(())
    }

    /// `prefill_load_scale`, or the legacy `overlap_score_weight` when that is set (it wins).
    pub fn effective_prefill_load_scale(&self) -> f64 {
        self.overlap_score_weight.unwrap_or(self.prefill_load_scale)
    }

    /// `overlap_score_credit`, forced to 0 by a legacy `overlap_score_weight` of 0.
    pub fn effective_overlap_score_credit(&self) -> f64 {
        if self.overlap_score_weight == Some(0.0) {
            0.0
        } else {
            self.overlap_score_credit
        }
    }

    /// The shared-cache multiplier (None means 0).
    pub fn effective_shared_cache_multiplier(&self) -> f64 {
        self.shared_cache_multiplier.unwrap_or(0.0)
    }

    /// The keys that were set but have no effect in this model, for a note to the user.
    pub fn ignored_fields_set(&self) -> Vec<&'static str> {
        let flags: [(&'static str, bool); 26] = [
            ("use_kv_events", self.use_kv_events_setting.is_some()),
            (
                "router_track_output_blocks",
                self.router_track_output_blocks,
            ),
            ("router_replica_sync", self.router_replica_sync.is_some()),
            ("router_ttl_secs", self.router_ttl_secs.is_some()),
            (
                "router_approximate_cache_policy",
                self.router_approximate_cache_policy.is_some(),
            ),
            ("router_event_threads", self.router_event_threads.is_some()),
            ("use_remote_indexer", self.use_remote_indexer.is_some()),
            ("serve_indexer", self.serve_indexer.is_some()),
            (
                "enable_session_prefix_index",
                self.enable_session_prefix_index.is_some(),
            ),
            ("shared_cache_type", self.shared_cache_type.is_some()),
            (
                "router_predicted_ttl_secs",
                self.router_predicted_ttl_secs.is_some(),
            ),
            (
                "conditional_disagg_enabled",
                self.conditional_disagg_enabled.is_some(),
            ),
            (
                "conditional_disagg_policy",
                self.conditional_disagg_policy.is_some(),
            ),
            (
                "conditional_disagg_eff_isl_threshold",
                self.conditional_disagg_eff_isl_threshold.is_some(),
            ),
            (
                "conditional_disagg_eff_isl_ratio_threshold",
                self.conditional_disagg_eff_isl_ratio_threshold.is_some(),
            ),
            (
                "conditional_disagg_prefill_busy_threshold",
                self.conditional_disagg_prefill_busy_threshold.is_some(),
            ),
            (
                "conditional_disagg_decode_busy_threshold",
                self.conditional_disagg_decode_busy_threshold.is_some(),
            ),
            (
                "router_prefill_policy",
                self.router_prefill_policy.is_some(),
            ),
            ("router_decode_policy", self.router_decode_policy.is_some()),
            ("router_tracking_hash", self.router_tracking_hash.is_some()),
            (
                "router_tracking_key_file",
                self.router_tracking_key_file.is_some(),
            ),
            (
                "router_tracking_key_id",
                self.router_tracking_key_id.is_some(),
            ),
            ("durable_kv_events", self.durable_kv_events.is_some()),
            (
                "router_snapshot_threshold",
                self.router_snapshot_threshold.is_some(),
            ),
            ("router_reset_states", self.router_reset_states.is_some()),
            (
                "skip_initial_worker_wait",
                self.skip_initial_worker_wait.is_some(),
            ),
        ];
        flags
            .into_iter()
            .filter(|(_, set)| *set)
            .map(|(name, _)| name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_match_dynamo() {
        let cfg: RouterConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(cfg, RouterConfig::default());
        assert_eq!(cfg.overlap_score_credit, 1.0);
        assert_eq!(cfg.prefill_load_scale, 1.0);
        assert_eq!(cfg.host_cache_hit_weight, 0.75);
        assert_eq!(cfg.disk_cache_hit_weight, 0.25);
        assert_eq!(cfg.router_temperature, 0.0);
        assert!(cfg.router_track_active_blocks);
        assert!(cfg.router_assume_kv_reuse && cfg.router_track_prefill_tokens);
        assert!(!cfg.router_track_output_blocks);
        assert_eq!(cfg.router_queue_threshold, None);
        assert_eq!(cfg.router_queue_policy, QueuePolicy::Fcfs);
        assert_eq!(cfg.effective_shared_cache_multiplier(), 0.0);
        cfg.validate().unwrap();
    }

    #[test]
    fn config_reads_dynamo_names_and_rejects_misspellings() {
        let cfg: RouterConfig = serde_json::from_str(
            r#"{"router_temperature": 0.5, "router_queue_policy": "wspt",
                "router_queue_threshold": 2, "router_seed": 9, "router_event_threads": 4}"#,
        )
        .unwrap();
        assert_eq!(cfg.router_temperature, 0.5);
        assert_eq!(cfg.router_queue_policy, QueuePolicy::Wspt);
        assert_eq!(cfg.router_queue_threshold, Some(2.0));
        assert_eq!(cfg.router_seed, 9);
        assert_eq!(cfg.ignored_fields_set(), vec!["router_event_threads"]);
        let typo = serde_json::from_str::<RouterConfig>(r#"{"router_temprature": 0.5}"#);
        assert!(typo.unwrap_err().to_string().contains("router_temprature"));
        assert!(
            serde_json::from_str::<RouterConfig>(r#"{"router_queue_policy": "lcfs"}"#).is_err()
        );
    }

    #[test]
    fn config_reads_from_yaml_with_integer_numbers() {
        let yaml = "router_queue_threshold: 2\nprefill_load_scale: 1\nrouter_queue_policy: wspt\n";
        let cfg: RouterConfig = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(cfg.router_queue_threshold, Some(2.0));
        assert_eq!(cfg.prefill_load_scale, 1.0);
        assert_eq!(cfg.router_queue_policy, QueuePolicy::Wspt);
        assert!(serde_saphyr::from_str::<RouterConfig>("prefill_load_scal: 1\n").is_err());
    }

    #[test]
    fn legacy_overlap_score_weight_maps_like_dynamo() {
        let cfg = RouterConfig {
            overlap_score_weight: Some(2.0),
            prefill_load_scale: 3.0,
            ..RouterConfig::default()
        };
        assert_eq!(cfg.effective_prefill_load_scale(), 2.0);
        assert_eq!(cfg.effective_overlap_score_credit(), 1.0);
        let zero = RouterConfig {
            overlap_score_weight: Some(0.0),
            overlap_score_credit: 0.5,
            ..RouterConfig::default()
        };
        assert_eq!(zero.effective_prefill_load_scale(), 0.0);
        assert_eq!(zero.effective_overlap_score_credit(), 0.0);
    }

    /// Validation refuses `cfg`, and its error names `field`.
    fn refused_naming(cfg: RouterConfig, field: &str) {
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.field, field);
        assert!(err.to_string().contains(field), "{err}");
    }

    #[test]
    fn validation_names_the_number_out_of_range() {
        refused_naming(
            RouterConfig {
                overlap_score_credit: -1.0,
                ..Default::default()
            },
            "overlap_score_credit",
        );
        refused_naming(
            RouterConfig {
                prefill_load_scale: f64::NAN,
                ..Default::default()
            },
            "prefill_load_scale",
        );
        refused_naming(
            RouterConfig {
                router_temperature: f64::INFINITY,
                ..Default::default()
            },
            "router_temperature",
        );
        refused_naming(
            RouterConfig {
                host_cache_hit_weight: 1.5,
                ..Default::default()
            },
            "host_cache_hit_weight",
        );
        refused_naming(
            RouterConfig {
                shared_cache_multiplier: Some(-0.1),
                ..Default::default()
            },
            "shared_cache_multiplier",
        );
        refused_naming(
            RouterConfig {
                router_queue_threshold: Some(-1.0),
                ..Default::default()
            },
            "router_queue_threshold",
        );
    }

    #[test]
    fn validation_names_the_unsupported_setting() {
        refused_naming(
            RouterConfig {
                router_prefill_load_model: "aic".into(),
                ..Default::default()
            },
            "router_prefill_load_model",
        );
        refused_naming(
            RouterConfig {
                router_track_output_blocks: true,
                router_track_active_blocks: false,
                ..Default::default()
            },
            "router_track_output_blocks",
        );
        refused_naming(
            RouterConfig {
                router_event_threads: Some(0),
                ..Default::default()
            },
            "router_event_threads",
        );
        refused_naming(
            RouterConfig {
                shared_cache_type: Some("hicahe".into()),
                ..Default::default()
            },
            "shared_cache_type",
        );
    }

    #[test]
    fn use_kv_events_is_read_but_never_turns_overlap_off() {
        let cfg: RouterConfig = serde_json::from_str(r#"{"use_kv_events": false}"#).unwrap();
        assert_eq!(cfg.use_kv_events_setting, Some(false));
        assert_eq!(cfg.ignored_fields_set(), vec!["use_kv_events"]);
        cfg.validate().unwrap();
    }

    #[test]
    fn settings_that_need_a_given_use_kv_events_are_refused_without_it() {
        refused_naming(
            RouterConfig {
                router_approximate_cache_policy: Some("lru".into()),
                ..Default::default()
            },
            "router_approximate_cache_policy",
        );
        refused_naming(
            RouterConfig {
                use_kv_events_setting: Some(false),
                router_predicted_ttl_secs: Some(5.0),
                ..Default::default()
            },
            "router_predicted_ttl_secs",
        );
        let lru = RouterConfig {
            use_kv_events_setting: Some(false),
            router_approximate_cache_policy: Some("lru".into()),
            ..Default::default()
        };
        assert!(lru.validate().is_ok());
    }

    #[test]
    fn only_the_built_in_worker_selection_is_accepted() {
        refused_naming(
            RouterConfig {
                router_decode_policy: Some("custom".into()),
                ..Default::default()
            },
            "router_decode_policy",
        );
        let builtin = RouterConfig {
            router_prefill_policy: Some("default".into()),
            ..Default::default()
        };
        assert_eq!(builtin.ignored_fields_set(), vec!["router_prefill_policy"]);
        assert!(builtin.validate().is_ok());
    }

    #[test]
    fn validation_accepts_an_unbounded_threshold_and_a_credit_above_one() {
        let unbounded = RouterConfig {
            router_queue_threshold: Some(f64::INFINITY),
            overlap_score_credit: 2.0,
            ..Default::default()
        };
        assert!(unbounded.validate().is_ok(), "1.6.1 accepts both");
    }
}
