//! A planner configuration: Dynamo 1.6.1's `PlannerConfig` keys as its planner takes them
//! (YAML or JSON), validated with 1.6.1's rules and messages into what the native planner
//! runs. Keys 1.6.1 accepts but the native planner has no use for (Prometheus, reports,
//! ports, the performance model of `sla`) are accepted and ignored; a key 1.6.1 does not know
//! is refused (1.6.1 ignores it silently, which hides a typo).

use crate::yaml::{Document, Error};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// What the planner optimises for (`optimization_target`): the three the native planner runs
/// scale on load alone, each with its thresholds.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Target {
    /// Fixed thresholds: a rank's KV use above 100 % scales up, every rank below 60 % down.
    Throughput,
    /// Fixed thresholds: above 40 % up, every rank below 10 % down.
    Latency,
    /// The user's thresholds (`decode_scale_*_kv_rate`, `prefill_scale_*_queue_tokens`).
    Load {
        kv_up_percent: f64,
        kv_down_percent: f64,
        /// Disaggregated serving's prefill thresholds in queued tokens (`None` in aggregated).
        prefill_tokens: Option<(u64, u64)>,
    },
}

/// Aggregated or disaggregated serving (`mode`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Agg,
    Disagg,
}

/// A validated planner configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannerConfig {
    /// `None`: the run's serving mode.
    pub mode: Option<Mode>,
    pub target: Target,
    /// Seconds between ticks (`scheduling.scale_interval_seconds`).
    pub tick_s: f64,
    /// Seconds between load decisions (`load_adjustment_interval_seconds`).
    pub load_interval_s: f64,
    /// Fewest workers of a role (`min_endpoint`, or the role's own).
    pub min_prefill: i64,
    pub min_decode: i64,
    /// GPU budget bounds; negative: none.
    pub min_gpu_budget: i64,
    pub max_gpu_budget: i64,
}

// The keys accepted and ignored are read only to be accepted.
#[allow(dead_code)]
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlannerConfig {
    mode: Option<String>,
    optimization_target: Option<String>,
    #[serde(alias = "load_adjustment_interval")]
    load_adjustment_interval_seconds: Option<i64>,
    scheduling: Option<RawScheduling>,
    min_endpoint: Option<i64>,
    prefill_min_endpoint: Option<i64>,
    decode_min_endpoint: Option<i64>,
    max_gpu_budget: Option<i64>,
    min_gpu_budget: Option<i64>,
    decode_scale_up_kv_rate: Option<f64>,
    decode_scale_down_kv_rate: Option<f64>,
    prefill_scale_up_queue_tokens: Option<i64>,
    prefill_scale_down_queue_tokens: Option<i64>,
    #[serde(alias = "ttft")]
    ttft_ms: Option<f64>,
    fpm_sample_bucket_size: Option<i64>,
    aic_perf_model: Option<IgnoredAny>,
    // Accepted and ignored: no effect on the load decisions the native planner makes.
    pre_deployment_sweeping_mode: Option<IgnoredAny>,
    environment: Option<IgnoredAny>,
    namespace: Option<IgnoredAny>,
    backend: Option<IgnoredAny>,
    log_dir: Option<IgnoredAny>,
    #[serde(alias = "throughput_adjustment_interval")]
    throughput_adjustment_interval_seconds: Option<IgnoredAny>,
    max_throughput_scaling_replicas: Option<IgnoredAny>,
    control_api_port: Option<IgnoredAny>,
    decode_engine_num_gpu: Option<IgnoredAny>,
    prefill_engine_num_gpu: Option<IgnoredAny>,
    profile_results_dir: Option<IgnoredAny>,
    aic_interpolation: Option<IgnoredAny>,
    ais_perf_model: Option<IgnoredAny>,
    #[serde(alias = "itl")]
    itl_ms: Option<IgnoredAny>,
    load_predictor: Option<IgnoredAny>,
    load_predictor_log1p: Option<IgnoredAny>,
    prophet_window_size: Option<IgnoredAny>,
    load_predictor_warmup_trace: Option<IgnoredAny>,
    kalman_q_level: Option<IgnoredAny>,
    kalman_q_trend: Option<IgnoredAny>,
    kalman_r: Option<IgnoredAny>,
    kalman_min_points: Option<IgnoredAny>,
    metric_pulling_prometheus_endpoint: Option<IgnoredAny>,
    metric_pulling_prometheus_token: Option<IgnoredAny>,
    metric_pulling_prometheus_token_file: Option<IgnoredAny>,
    metric_pulling_prometheus_ssl_verify: Option<IgnoredAny>,
    metric_pulling_prometheus_extra_query_params: Option<IgnoredAny>,
    metric_pulling_prometheus_ca_bundle: Option<IgnoredAny>,
    metric_pulling_prometheus_request_timeout_seconds: Option<IgnoredAny>,
    metric_reporting_prometheus_port: Option<IgnoredAny>,
    throughput_metrics_source: Option<IgnoredAny>,
    model_name: Option<IgnoredAny>,
    global_planner_namespace: Option<IgnoredAny>,
    enable_throughput_scaling: Option<IgnoredAny>,
    enable_load_scaling: Option<IgnoredAny>,
    max_num_fpm_samples: Option<IgnoredAny>,
    load_scaling_down_sensitivity: Option<IgnoredAny>,
    load_min_observations: Option<IgnoredAny>,
    speculative_nextn: Option<IgnoredAny>,
    advisory: Option<IgnoredAny>,
    enable_power_awareness: Option<IgnoredAny>,
    total_gpu_power_limit: Option<IgnoredAny>,
    report_interval_hours: Option<IgnoredAny>,
    report_output_dir: Option<IgnoredAny>,
    report_filename: Option<IgnoredAny>,
    report_write_gzip_log: Option<IgnoredAny>,
    live_dashboard_port: Option<IgnoredAny>,
    plugin_registration: Option<IgnoredAny>,
}

#[allow(dead_code)]
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScheduling {
    scale_interval_seconds: Option<f64>,
    tick_max_duration_seconds: Option<IgnoredAny>,
    external_plugins: Option<IgnoredAny>,
    gateway: Option<IgnoredAny>,
}

impl PlannerConfig {
    /// The configuration `text` (YAML or JSON) holds; errors carry line, column and key.
    pub fn parse(text: &str) -> Result<PlannerConfig, Error> {
        let doc = Document::parse(text);
        let raw: RawPlannerConfig = doc.deserialize()?.unwrap_or_default();
        raw.validate(&doc)
    }
}

impl RawPlannerConfig {
    fn validate(self, doc: &Document) -> Result<PlannerConfig, Error> {
        let fail = |path: &str, message: String| Err(doc.error_at(path, message));
        if self.aic_perf_model.is_some() {
            let message = "aic_perf_model is no longer supported; use ais_perf_model.roles with \
                           canonical AISimulate configurations";
            return fail("aic_perf_model", message.into());
        }
        let mode = match self.mode.as_deref() {
            None => None,
            Some("agg") => Some(Mode::Agg),
            Some("disagg") => Some(Mode::Disagg),
            Some(other) => {
                let message = format!(
                    "planner-in-the-loop replay supports mode='agg' or 'disagg', got '{other}'"
                );
                return fail("mode", message);
            }
        };
        let (tick_s, load_interval_s) = self.intervals(doc)?;
        let min_endpoint = self.min_endpoint.unwrap_or(1);
        if min_endpoint < 0 {
            return fail(
                "min_endpoint",
                "Input should be greater than or equal to 0".into(),
            );
        }
        for (key, value) in [
            ("prefill_min_endpoint", self.prefill_min_endpoint),
            ("decode_min_endpoint", self.decode_min_endpoint),
        ] {
            if value.is_some_and(|v| v < 1) {
                return fail(key, "Input should be greater than or equal to 1".into());
            }
        }
        if let Some(ttft) = self.ttft_ms.filter(|t| *t <= 0.0) {
            return fail("ttft_ms", format!("ttft_ms must be > 0, got {ttft}"));
        }
        if mode == Some(Mode::Agg)
            && (self.prefill_min_endpoint.is_some() || self.decode_min_endpoint.is_some())
        {
            let message = "prefill_min_endpoint and decode_min_endpoint are not supported when \
                           mode='agg'; use min_endpoint";
            return fail("mode", message.into());
        }
        if let Some(size) = self.fpm_sample_bucket_size {
            let root = (size.max(0) as f64).sqrt().round() as i64;
            if size <= 0 || root * root != size {
                let message =
                    format!("fpm_sample_bucket_size must be a perfect square, got {size}");
                return fail("fpm_sample_bucket_size", message);
            }
        }
        let target = self.target(doc, mode)?;
        Ok(PlannerConfig {
            mode,
            target,
            tick_s,
            load_interval_s,
            min_prefill: self.prefill_min_endpoint.unwrap_or(min_endpoint),
            min_decode: self.decode_min_endpoint.unwrap_or(min_endpoint),
            min_gpu_budget: self.min_gpu_budget.unwrap_or(-1),
            max_gpu_budget: self.max_gpu_budget.unwrap_or(8),
        })
    }

    /// The ticks' interval and the load decisions', in seconds: the second a multiple of the
    /// first, as 1.6.1 checks.
    fn intervals(&self, doc: &Document) -> Result<(f64, f64), Error> {
        let load_interval_s = match self.load_adjustment_interval_seconds {
            None => 5.0,
            Some(s) if s > 0 => s as f64,
            Some(_) => {
                let message = "Input should be greater than 0";
                return Err(doc.error_at("load_adjustment_interval_seconds", message));
            }
        };
        let scheduled = self
            .scheduling
            .as_ref()
            .and_then(|s| s.scale_interval_seconds);
        let tick_s = scheduled.unwrap_or(load_interval_s);
        let ratio = load_interval_s / tick_s;
        let divides = (ratio - ratio.round()).abs() <= 1e-9 * ratio.abs().max(1.0) + 1e-9;
        if !(tick_s.is_finite() && tick_s > 0.0 && divides) {
            let message = "scheduling.scale_interval_seconds must evenly divide \
                           load_adjustment_interval_seconds and, when throughput scaling is \
                           enabled, throughput_adjustment_interval_seconds";
            return Err(doc.error_at("scheduling.scale_interval_seconds", message));
        }
        Ok((tick_s, load_interval_s))
    }

    /// The optimisation target and its thresholds, checked as 1.6.1 checks them.
    fn target(&self, doc: &Document, mode: Option<Mode>) -> Result<Target, Error> {
        let fail = |path: &str, message: &str| Err(doc.error_at(path, message.to_string()));
        match self.optimization_target.as_deref().unwrap_or("throughput") {
            "throughput" => Ok(Target::Throughput),
            "latency" => Ok(Target::Latency),
            "sla" => fail(
                "optimization_target",
                "sla scales by Dynamo's performance-model regression (AISimulate's), which the \
                 native planner does not have: run Dynamo's own planner instead, \
                 `--scaling-policy \"tools/dynamo-planner PLANNER.yaml\"`",
            ),
            "load" => {
                let (up, down) =
                    match (self.decode_scale_up_kv_rate, self.decode_scale_down_kv_rate) {
                        (Some(up), Some(down)) => (up, down),
                        _ => {
                            return fail(
                                "optimization_target",
                                "optimization_target='load' requires decode_scale_up_kv_rate and \
                             decode_scale_down_kv_rate for decode scaling",
                            );
                        }
                    };
                for (key, rate) in [
                    ("decode_scale_up_kv_rate", up),
                    ("decode_scale_down_kv_rate", down),
                ] {
                    if !(0.0..=100.0).contains(&rate) {
                        return fail(key, "Input should be a percentage from 0 to 100");
                    }
                }
                if up <= down {
                    return fail(
                        "decode_scale_up_kv_rate",
                        "decode_scale_up_kv_rate must be greater than decode_scale_down_kv_rate",
                    );
                }
                let tokens = (
                    self.prefill_scale_up_queue_tokens,
                    self.prefill_scale_down_queue_tokens,
                );
                let prefill_tokens = match (mode, tokens) {
                    (Some(Mode::Agg), _) | (None, (None, None)) => None,
                    (_, (Some(up), Some(down))) if up >= 0 && down >= 0 => {
                        if up <= down {
                            return fail(
                                "prefill_scale_up_queue_tokens",
                                "prefill_scale_up_queue_tokens must be greater than \
                                 prefill_scale_down_queue_tokens",
                            );
                        }
                        Some((up as u64, down as u64))
                    }
                    (_, (Some(_), Some(_))) => {
                        return fail(
                            "prefill_scale_up_queue_tokens",
                            "Input should be greater than or equal to 0",
                        );
                    }
                    _ => {
                        return fail(
                            "optimization_target",
                            "optimization_target='load' requires prefill_scale_up_queue_tokens \
                             and prefill_scale_down_queue_tokens for prefill scaling",
                        );
                    }
                };
                Ok(Target::Load {
                    kv_up_percent: up,
                    kv_down_percent: down,
                    prefill_tokens,
                })
            }
            other => fail(
                "optimization_target",
                &format!("Input should be 'throughput', 'latency', 'load' or 'sla', got '{other}'"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Mode, PlannerConfig, Target};

    #[test]
    fn defaults_are_dynamos() {
        let config = PlannerConfig::parse("{}").unwrap();
        assert_eq!(config.target, Target::Throughput);
        assert_eq!((config.tick_s, config.load_interval_s), (5.0, 5.0));
        assert_eq!((config.min_prefill, config.min_decode), (1, 1));
        assert_eq!((config.min_gpu_budget, config.max_gpu_budget), (-1, 8));
        assert_eq!(config.mode, None);
    }

    #[test]
    fn keys_read_as_dynamos_planner_reads_them() {
        let text = "optimization_target: load\nload_adjustment_interval: 10\n\
                    scheduling: {scale_interval_seconds: 5}\ndecode_scale_up_kv_rate: 10\n\
                    decode_scale_down_kv_rate: 2\nmode: agg\nmin_endpoint: 2\n\
                    environment: kubernetes\nttft: 300\n";
        let config = PlannerConfig::parse(text).unwrap();
        assert_eq!((config.tick_s, config.load_interval_s), (5.0, 10.0));
        assert_eq!(config.mode, Some(Mode::Agg));
        assert_eq!(config.min_decode, 2);
        let Target::Load {
            kv_up_percent,
            kv_down_percent,
            prefill_tokens,
        } = config.target
        else {
            panic!("load");
        };
        assert_eq!(
            (kv_up_percent, kv_down_percent, prefill_tokens),
            (10.0, 2.0, None)
        );
    }

    #[test]
    fn bad_keys_are_refused_with_dynamos_words_and_their_line() {
        let cases = [
            ("optimization_target: sla\n", "tools/dynamo-planner"),
            (
                "optimization_target: load\n",
                "requires decode_scale_up_kv_rate",
            ),
            (
                "optimization_target: load\nmode: disagg\ndecode_scale_up_kv_rate: 5\ndecode_scale_down_kv_rate: 1\n",
                "requires prefill_scale_up_queue_tokens",
            ),
            ("mode: agg\ndecode_min_endpoint: 2\n", "use min_endpoint"),
            ("mode: prefill\n", "supports mode='agg' or 'disagg'"),
            ("fpm_sample_bucket_size: 10\n", "perfect square, got 10"),
            (
                "load_adjustment_interval_seconds: 5\nscheduling: {scale_interval_seconds: 2}\n",
                "evenly divide",
            ),
            ("max_gpu_budget: 8\nmin_endpont: 2\n", "min_endpont"),
        ];
        for (text, expected) in cases {
            let error = PlannerConfig::parse(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let unknown = PlannerConfig::parse("max_gpu_budget: 8\nmin_endpont: 2\n").unwrap_err();
        assert_eq!(unknown.line, Some(2));
    }
}
