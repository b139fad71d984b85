//! Engine arguments of a mock worker: Dynamo 1.6.1's canonical engine JSON, defaults, validation.
//!
//! Dynamo's offline replay (and `tools/dynamo-replay`) takes an engine launch config shaped
//! `{"engine": {...}, "dp_size": 1, ...}`. [`EngineLaunchConfig`] and [`EngineSection`] accept
//! exactly the keys 1.6.1 accepts (an unknown key is an error naming it), keys that do not change
//! an aggregated vLLM worker are accepted and ignored, and keys selecting behaviour this mocker
//! does not model (other backends, disaggregation, offload tiers, speculative decoding, memory
//! derived pool sizes) are rejected with [`ConfigError::Unsupported`] rather than silently
//! ignored. The result is a validated [`EngineArgs`].

use super::profile::ProfileError;
use super::timing::{self, DecodeBatch, FixedTiming, PrefillBatch, TimingModel};
use super::timing_source::TimingSource;
use super::transfer::KvTransfer;
use crate::bounds::{MAX_BLOCK_TOKENS, MAX_RANKS, MAX_STEP_MS, MAX_TOKENS, MIN_SPEEDUP_RATIO};
use crate::time::SimDuration;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// Which running request is evicted when KV blocks run out.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreemptionMode {
    /// The most recently admitted running request (Dynamo's default).
    #[default]
    Lifo,
    /// The oldest running request.
    Fifo,
}

/// What a worker does in the serving system (the engine's `worker_type`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkerRole {
    /// Prefill and decode on one worker (Dynamo's default).
    #[default]
    Aggregated,
    /// Computes prompts only and holds their KV until a decode worker takes it.
    Prefill,
    /// Receives computed prompts and generates their tokens.
    Decode,
}

impl WorkerRole {
    /// The role an engine config's `worker_type` names, if it names one.
    pub fn from_worker_type(worker_type: &str) -> Option<WorkerRole> {
        match worker_type {
            "aggregated" => Some(WorkerRole::Aggregated),
            "prefill" => Some(WorkerRole::Prefill),
            "decode" => Some(WorkerRole::Decode),
            _ => None,
        }
    }

    /// The name 1.6.1's messages give the role (`Aggregated`, `Prefill`, `Decode`).
    pub fn dynamo_name(self) -> &'static str {
        match self {
            WorkerRole::Aggregated => "Aggregated",
            WorkerRole::Prefill => "Prefill",
            WorkerRole::Decode => "Decode",
        }
    }

    /// The lower-case name routersim's outputs and scenarios use.
    pub fn label(self) -> &'static str {
        match self {
            WorkerRole::Aggregated => "aggregated",
            WorkerRole::Prefill => "prefill",
            WorkerRole::Decode => "decode",
        }
    }
}

/// Validated engine arguments of one mock worker, with Dynamo's names and defaults: what
/// every worker kind shares ([`CommonArgs`]) and the knobs only its backend reads
/// ([`Backend`], which also says which kind of worker runs them).
///
/// Every data-parallel rank of a worker runs its own scheduler and KV pool with these
/// arguments; `dp_size` only says how many ranks the simulator should create.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineArgs {
    /// The settings every engine backend has.
    pub common: CommonArgs,
    /// The engine backend (the config's `backend`) with its own settings.
    pub backend: Backend,
}

/// Engine settings every backend of Dynamo 1.6.1's mocker reads (vLLM, SGLang and TRT-LLM
/// alike): the KV geometry and pool, the rank count, the role, the transfer to a decode
/// worker, prefix caching, and how passes are timed and scaled.
#[derive(Clone, Debug, PartialEq)]
pub struct CommonArgs {
    /// Tokens per KV block (default 64).
    pub block_size: u64,
    /// Data-parallel ranks per worker (default 1).
    pub dp_size: u32,
    /// What the worker does (`worker_type`; default aggregated).
    pub role: WorkerRole,
    /// KV transfer to a decode worker (a prefill engine's; none by default). An aggregated
    /// worker transfers nothing, but 1.6.1 checks the settings all the same.
    pub kv_transfer: KvTransfer,
    /// What one rank holds at most.
    pub capacity: CapacityArgs,
    /// Reuse cached prompt blocks and publish KV events (default true). Every 1.6.1 core
    /// reads it (SGLang's too), so it is not a vLLM knob.
    pub enable_prefix_caching: bool,
    /// How passes are timed (default: Dynamo's polynomial). A profile is shared, not copied,
    /// when the arguments are cloned.
    pub timing: TimingSource,
    /// Divides every modelled duration; 0 leaves durations unscaled, as in Dynamo (default 1).
    pub speedup_ratio: f64,
    /// Extra divisor for decode time; a product of ratios of 0 leaves decode unscaled
    /// (default 1).
    pub decode_speedup_ratio: f64,
    /// How long a worker added while the run goes on takes to start (the launch config's
    /// top-level `startup_time`, in seconds; none by default). The workers a run starts
    /// with are ready at once, as in 1.6.1's replay.
    pub startup_delay: SimDuration,
    /// GPUs each rank runs on (the launch config's `tensor_parallel_size`; default 1). It
    /// does not change the timing model; it counts what the fleet costs in GPUs.
    pub tensor_parallel_size: u32,
}

impl CommonArgs {
    /// GPUs one worker runs on: its ranks times each rank's tensor-parallel GPUs.
    pub fn gpus_per_worker(&self) -> u64 {
        u64::from(self.dp_size) * u64::from(self.tensor_parallel_size)
    }
}

impl Default for CommonArgs {
    fn default() -> Self {
        CommonArgs {
            block_size: 64,
            dp_size: 1,
            role: WorkerRole::Aggregated,
            kv_transfer: KvTransfer::default(),
            capacity: CapacityArgs::default(),
            enable_prefix_caching: true,
            timing: TimingSource::Polynomial,
            speedup_ratio: 1.0,
            decode_speedup_ratio: 1.0,
            startup_delay: SimDuration::ZERO,
            tensor_parallel_size: 1,
        }
    }
}

/// The limits of one rank, per rank: its KV pool, running batch, pass budget and longest
/// sequence. Every engine has each (SGLang names its pass budget differently, so a kind
/// reports its [`Capacity`](super::protocol::Capacity) through [`super::WorkerKind`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CapacityArgs {
    /// KV pool size in blocks, per rank (default 16384).
    pub num_gpu_blocks: u64,
    /// Most requests running at once, per rank (default 256).
    pub max_num_seqs: u64,
    /// Token budget of one forward pass (default 8192).
    pub max_num_batched_tokens: u64,
    /// Longest sequence (prompt + output); a prompt this long or longer is rejected, and
    /// generation stops when the sequence reaches it (default none).
    pub max_model_len: Option<u64>,
}

impl Default for CapacityArgs {
    fn default() -> Self {
        CapacityArgs {
            num_gpu_blocks: 16384,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            max_model_len: None,
        }
    }
}

/// The engine backend a worker models (the config's `backend`), with the settings only it
/// reads. The worker kind follows from it ([`super::WorkerKind::of`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// vLLM (Dynamo's default and the only backend modelled).
    Vllm(VllmArgs),
    /// A scratch kind for tests: every pass takes the same time (`kind/fixed_latency.rs`).
    #[cfg(test)]
    FixedLatency(FixedLatencyArgs),
}

impl Backend {
    /// The vLLM settings, if the backend is vLLM.
    pub fn vllm(&self) -> Option<&VllmArgs> {
        match self {
            Backend::Vllm(vllm) => Some(vllm),
            #[cfg(test)]
            Backend::FixedLatency(_) => None,
        }
    }
}

impl Default for Backend {
    fn default() -> Self {
        Backend::Vllm(VllmArgs::default())
    }
}

/// The scratch fixed-latency kind's own setting (tests only).
#[cfg(test)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FixedLatencyArgs {
    /// How long every pass takes.
    pub pass_time: SimDuration,
}

/// The settings only 1.6.1's vLLM-style core reads (SGLang chunks by its own sizes and
/// retracts instead of preempting).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct VllmArgs {
    /// Split prompts larger than the remaining budget over several passes (default true).
    pub enable_chunked_prefill: bool,
    /// Victim choice under KV pressure (default LIFO).
    pub preemption_mode: PreemptionMode,
}

impl Default for VllmArgs {
    fn default() -> Self {
        VllmArgs {
            enable_chunked_prefill: true,
            preemption_mode: PreemptionMode::Lifo,
        }
    }
}

impl CommonArgs {
    /// The modelled, scaled duration of a pass's prefill part: the timing model's time,
    /// scaled by `speedup_ratio`. An empty batch takes no time under every model.
    pub fn prefill_duration(&self, batch: &PrefillBatch) -> SimDuration {
        let ms = self.timing.prefill_batch_ms(batch);
        timing::scaled_duration(ms, self.speedup_ratio)
    }

    /// The modelled, scaled duration of a pass's decode part: the timing model's time, scaled
    /// by `speedup_ratio × decode_speedup_ratio`. An empty batch takes no time.
    pub fn decode_duration(&self, batch: &DecodeBatch) -> SimDuration {
        if batch.count == 0 {
            return SimDuration::ZERO;
        }
        let ms = (self.timing).decode_batch_ms(batch, self.total_kv_tokens());
        timing::scaled_duration(ms, self.speedup_ratio * self.decode_speedup_ratio)
    }

    /// Total KV capacity of one rank in tokens (the decode model's denominator).
    pub fn total_kv_tokens(&self) -> u64 {
        self.capacity.num_gpu_blocks.saturating_mul(self.block_size)
    }

    /// Whether a rank's pool builds KV events: with prefix caching (Dynamo publishes none
    /// without), and not on a decode rank, whose events reach no router (see `sim`). A decode
    /// rank still marks its blocks published, so its quiet runs are planned as any rank's.
    pub fn builds_kv_events(&self) -> bool {
        self.enable_prefix_caching && self.role != WorkerRole::Decode
    }
}

/// Largest pool the block slab can index (block ids are `u32`, one value kept as a sentinel).
pub const MAX_NUM_GPU_BLOCKS: u64 = (u32::MAX - 1) as u64;

/// Why an engine config was refused. Every variant names the offending field.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigError {
    /// The text is not valid JSON, a key is unknown, or a value has the wrong type.
    Parse(String),
    /// A field's value is out of range.
    Invalid {
        /// Dynamo's name of the field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A field selects Dynamo behaviour this mocker does not model.
    Unsupported {
        /// Dynamo's name of the field.
        field: &'static str,
        /// The value given, as JSON.
        value: String,
    },
    /// The timing profile a field names cannot be used; the error names the file and key.
    Profile {
        /// The field naming the profile (`planner_profile_data` or `timing_model.config.path`).
        field: &'static str,
        /// What is wrong with the file.
        error: ProfileError,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Parse(msg) => write!(f, "engine config: {msg}"),
            ConfigError::Invalid { field, reason } => {
                write!(f, "engine config: field `{field}`: {reason}")
            }
            ConfigError::Unsupported { field, value } => write!(
                f,
                "engine config: field `{field}` = {value} is not supported by routersim's mocker"
            ),
            ConfigError::Profile { field, error } => {
                write!(f, "engine config: field `{field}`: {error}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl EngineArgs {
    /// Parses Dynamo's canonical engine launch JSON, e.g.
    /// `{"engine": {"backend": "vllm", "worker_type": "aggregated", "max_num_seqs": 4}}`,
    /// applies defaults and validates.
    /// A profile path in it is taken relative to the current directory.
    pub fn from_json_str(text: &str) -> Result<EngineArgs, ConfigError> {
        EngineArgs::from_json_str_in(text, Path::new(""))
    }

    /// As [`EngineArgs::from_json_str`], with a relative profile path taken relative to
    /// `base_dir` (the directory of the file holding the JSON).
    pub fn from_json_str_in(text: &str, base_dir: &Path) -> Result<EngineArgs, ConfigError> {
        // The error names the field path (`engine.max_num_seqs`), line and column.
        let launch: EngineLaunchConfig =
            crate::yaml::from_json_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        launch.into_args_in(base_dir)
    }

    /// Checks every field's range. Mirrors 1.6.1's rules (positive sizes, vLLM block size at
    /// least 2, finite non-negative ratios) plus the limits of this implementation.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &'static str, reason: &str| {
            Err(ConfigError::Invalid {
                field,
                reason: reason.to_string(),
            })
        };
        let (common, capacity) = (&self.common, &self.common.capacity);
        // The two-token minimum is vLLM's (SGLang's blocks hold one), the only backend here.
        if common.block_size < 2 {
            return invalid("block_size", "a vLLM block must hold at least two tokens");
        }
        if capacity.num_gpu_blocks == 0 {
            return invalid("num_gpu_blocks", "must be positive");
        }
        if capacity.num_gpu_blocks > MAX_NUM_GPU_BLOCKS {
            return invalid("num_gpu_blocks", "must be at most 4294967294");
        }
        if common.total_kv_tokens() > u64::MAX / 4 {
            return invalid("num_gpu_blocks", "num_gpu_blocks * block_size is too large");
        }
        if capacity.max_num_seqs == 0 {
            return invalid("max_num_seqs", "must be positive");
        }
        if capacity.max_num_batched_tokens == 0 {
            return invalid("max_num_batched_tokens", "must be positive");
        }
        self.validate_bounds()?;
        self.validate_speedup_ratios()?;
        if common.dp_size == 0 {
            return invalid("dp_size", "must be positive");
        }
        if capacity.max_model_len == Some(0) {
            return invalid("max_model_len", "must be positive");
        }
        if let TimingSource::Fixed(fixed) = &common.timing {
            check_fixed_ms("timing_model.prefill_ms", fixed.prefill_ms)?;
            check_fixed_ms("timing_model.decode_ms", fixed.decode_ms)?;
        }
        Ok(())
    }
}

/// A fixed step time: finite, non-negative (as 1.6.1 requires) and at most one day.
fn check_fixed_ms(field: &'static str, ms: f64) -> Result<(), ConfigError> {
    if ms.is_finite() && (0.0..=MAX_STEP_MS).contains(&ms) {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        field,
        reason: format!("{ms:?}: must be a finite number of ms from 0 to {MAX_STEP_MS} (one day)"),
    })
}

impl EngineArgs {
    /// The bounds of docs/scenarios.md ("Limits and bounds") on sizes.
    fn validate_bounds(&self) -> Result<(), ConfigError> {
        let over = |field: &'static str, value: u64, max: u64| match value > max {
            true => Err(ConfigError::Invalid {
                field,
                reason: format!("{value} is more than the {max} routersim accepts"),
            }),
            false => Ok(()),
        };
        let common = &self.common;
        over("block_size", common.block_size, MAX_BLOCK_TOKENS)?;
        over(
            "max_num_batched_tokens",
            common.capacity.max_num_batched_tokens,
            MAX_TOKENS,
        )?;
        over("dp_size", u64::from(common.dp_size), MAX_RANKS)
    }

    /// Each ratio, and their product (the decode divisor), is 0 (unscaled, as in Dynamo) or
    /// finite and at least [`MIN_SPEEDUP_RATIO`], so no modelled pass can overflow time.
    fn validate_speedup_ratios(&self) -> Result<(), ConfigError> {
        let (speedup, decode_speedup) =
            (self.common.speedup_ratio, self.common.decode_speedup_ratio);
        let product = speedup * decode_speedup;
        let checks = [
            ("speedup_ratio", "", speedup),
            ("decode_speedup_ratio", "", decode_speedup),
            (
                "decode_speedup_ratio",
                "speedup_ratio x decode_speedup_ratio = ",
                product,
            ),
        ];
        for (field, what, ratio) in checks {
            if !(ratio == 0.0 || (ratio.is_finite() && ratio >= MIN_SPEEDUP_RATIO)) {
                return Err(ConfigError::Invalid {
                    field,
                    reason: format!(
                        "{what}{ratio:?}: must be 0 (unscaled) or a finite number >= {MIN_SPEEDUP_RATIO}"
                    ),
                });
            }
        }
        Ok(())
    }
}

/// The top level of Dynamo's engine launch config (`{"engine": {...}, "dp_size": ...}`).
/// Field names are 1.6.1's; unknown keys are refused.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineLaunchConfig {
    /// The engine section.
    #[serde(default)]
    pub engine: EngineSection,
    /// Data-parallel ranks per worker.
    pub dp_size: Option<u32>,
    /// GPUs per rank (must be positive): counts what the fleet costs; tensor parallelism
    /// does not change the timing model.
    pub tensor_parallel_size: Option<u64>,
    /// Simulated start-up delay in seconds of a worker added while the run goes on: must be
    /// finite and non-negative (0, as in 1.6.1, means none).
    pub startup_time: Option<f64>,
    /// Accepted and ignored.
    pub num_gpu_blocks_is_explicit: Option<bool>,
    /// Memory-derived pool sizing; unsupported unless null.
    pub gpu_memory_utilization: Option<Value>,
    /// Memory-derived pool sizing; unsupported unless null.
    pub mem_fraction_static: Option<Value>,
    /// Memory-derived pool sizing; unsupported unless null.
    pub free_gpu_memory_fraction: Option<Value>,
    /// Memory-derived pool sizing; unsupported unless null.
    pub cuda_graph_reserved_bytes: Option<Value>,
}

/// Dynamo 1.6.1's `engine` section. Every key 1.6.1 accepts is listed; those that matter to an
/// aggregated vLLM worker are typed, the rest are accepted as raw JSON and checked in
/// [`EngineSection::into_args`].
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    /// Must be `"vllm"` (the default).
    pub backend: Option<String>,
    /// KV pool size in blocks (default 16384).
    pub num_gpu_blocks: Option<u64>,
    /// Tokens per KV block (default 64, at least 2).
    pub block_size: Option<u64>,
    /// Longest sequence; none by default.
    pub max_model_len: Option<u64>,
    /// Most running requests (default 256). An explicit null (1.6.1: unbounded) is refused.
    #[serde(default, deserialize_with = "null_kept")]
    pub max_num_seqs: Option<Option<u64>>,
    /// Token budget per pass (default 8192). An explicit null (1.6.1: unbounded) is refused.
    #[serde(default, deserialize_with = "null_kept")]
    pub max_num_batched_tokens: Option<Option<u64>>,
    /// vLLM prefill cadence; only 1 (every pass) is supported.
    pub prefill_schedule_interval: Option<u64>,
    /// SGLang only; must be 0.
    pub prefill_decode_interval: Option<u64>,
    /// Prefix cache and KV events (default true).
    pub enable_prefix_caching: Option<bool>,
    /// Chunked prefill (default true).
    pub enable_chunked_prefill: Option<bool>,
    /// Divisor of all durations; 0 = unscaled (default 1).
    pub speedup_ratio: Option<f64>,
    /// Extra divisor of decode durations (default 1).
    pub decode_speedup_ratio: Option<f64>,
    /// Speculative decoding; unsupported unless null.
    pub aic_nextn: Option<Value>,
    /// Speculative decoding's acceptance rates; unsupported unless null (1.6.1 takes them
    /// only with `aic_nextn`, which is unsupported).
    pub aic_nextn_accept_rates: Option<Value>,
    /// Speculative decoding seed; accepted and ignored.
    pub aic_mtp_seed: Option<Value>,
    /// `"aggregated"` (the default), `"prefill"` or `"decode"`.
    pub worker_type: Option<String>,
    /// `"lifo"` (default) or `"fifo"`.
    pub preemption_mode: Option<PreemptionMode>,
    /// Accepted and ignored: the simulator decides where KV events go.
    pub emit_kv_events: Option<bool>,
    /// Accepted and ignored; true needs `emit_kv_events: true`, as in 1.6.1.
    pub emit_kv_token_ids: Option<bool>,
    /// 1.6.1's other name for `kv_transfer_bytes_per_token` (give one of the two).
    pub kv_bytes_per_token: Option<Value>,
    /// Bytes of KV per token a transfer moves (positive; see [`KvTransfer`]).
    pub kv_transfer_bytes_per_token: Option<Value>,
    /// Offload geometry; accepted and ignored.
    pub kv_cache_bytes_per_token: Option<Value>,
    /// Hybrid cache groups; unsupported unless null.
    pub kv_cache_groups: Option<Value>,
    /// Cache-group capacity; unsupported unless null (1.6.1 takes it only with
    /// `kv_cache_groups`, which are unsupported).
    pub kv_cache_capacity_bytes: Option<Value>,
    /// Host offload tier; unsupported unless null.
    pub native_host_offload: Option<Value>,
    /// Recurrent state cache; unsupported unless null.
    pub state_cache: Option<Value>,
    /// Sub-block prefix matching; unsupported unless null.
    pub prefix_match_unit: Option<Value>,
    /// G3 offload tier; unsupported unless null.
    pub g3_offload: Option<Value>,
    /// Transfer bandwidth in decimal GB/s (finite, >= 0; 0: transfers take no time).
    pub kv_transfer_bandwidth: Option<Value>,
    /// `"full_prompt"` (the default) or `"destination_missing"`.
    pub kv_transfer_timing_mode: Option<Value>,
    /// `{"type": "polynomial"}` (the default), `{"type": "fixed", "prefill_ms": ..,
    /// "decode_ms": ..}`, or 1.6.1's profile form `{"type": "external", "provider":
    /// "dynamo_profile", "config": {"path": ..}}`.
    pub timing_model: Option<Value>,
    /// A planner profile to time passes by (Dynamo's mocker argument
    /// `--planner-profile-data`): a mocker-format NPZ or a profiler results directory, relative
    /// to the file that names it. The same as the `dynamo_profile` timing model.
    pub planner_profile_data: Option<String>,
    /// SGLang settings: accepted and ignored by the vLLM core.
    pub sglang: Option<Value>,
    /// TRT-LLM settings: accepted and ignored by the vLLM core.
    pub trtllm: Option<Value>,
}

/// Keeps an explicit null apart from an absent key: absent is `None` (via `default`), null is
/// `Some(None)`.
fn null_kept<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// An explicit limit, its default when absent; null (1.6.1: unbounded) is refused.
fn limit(
    field: &'static str,
    value: Option<Option<u64>>,
    default: u64,
) -> Result<u64, ConfigError> {
    match value {
        None => Ok(default),
        Some(Some(limit)) => Ok(limit),
        Some(None) => Err(ConfigError::Invalid {
            field,
            reason: "null (unbounded in Dynamo 1.6.1) is not supported by routersim: give a number"
                .to_string(),
        }),
    }
}

fn unsupported(field: &'static str, value: &impl fmt::Display) -> ConfigError {
    ConfigError::Unsupported {
        field,
        value: value.to_string(),
    }
}

/// Refuses a behaviour-changing option unless it is absent or null.
fn require_null(field: &'static str, value: &Option<Value>) -> Result<(), ConfigError> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(v) => Err(unsupported(field, v)),
    }
}

impl EngineLaunchConfig {
    /// Applies defaults, refuses unsupported options and validates; a relative profile path is
    /// taken relative to the current directory.
    pub fn into_args(self) -> Result<EngineArgs, ConfigError> {
        self.into_args_in(Path::new(""))
    }

    /// As [`EngineLaunchConfig::into_args`], with a relative profile path taken relative to
    /// `base_dir`.
    pub fn into_args_in(self, base_dir: &Path) -> Result<EngineArgs, ConfigError> {
        if let Some(t) = self.startup_time.filter(|t| !(t.is_finite() && *t >= 0.0)) {
            return Err(ConfigError::Invalid {
                field: "startup_time",
                reason: format!("{t} is not finite and non-negative"),
            });
        }
        require_null("gpu_memory_utilization", &self.gpu_memory_utilization)?;
        require_null("mem_fraction_static", &self.mem_fraction_static)?;
        require_null("free_gpu_memory_fraction", &self.free_gpu_memory_fraction)?;
        require_null("cuda_graph_reserved_bytes", &self.cuda_graph_reserved_bytes)?;
        let tensor_parallel_size = match self.tensor_parallel_size {
            None => None,
            Some(tp) => Some(u32::try_from(tp).ok().filter(|&tp| tp > 0).ok_or_else(|| {
                ConfigError::Invalid {
                    field: "tensor_parallel_size",
                    reason: format!("{tp} is not a positive count of GPUs"),
                }
            })?),
        };
        let mut args = self.engine.into_unvalidated_args(base_dir)?;
        if let Some(tp) = tensor_parallel_size {
            args.common.tensor_parallel_size = tp;
        }
        if let Some(dp) = self.dp_size {
            args.common.dp_size = dp;
        }
        if let Some(seconds) = self.startup_time {
            args.common.startup_delay = SimDuration::from_ms_f64(seconds * 1000.0);
        }
        args.validate()?;
        Ok(args)
    }
}

impl EngineSection {
    /// Applies defaults, refuses unsupported options and validates (dp_size stays 1); a
    /// relative profile path is taken relative to the current directory.
    pub fn into_args(self) -> Result<EngineArgs, ConfigError> {
        self.into_args_in(Path::new(""))
    }

    /// As [`EngineSection::into_args`], with a relative profile path taken relative to
    /// `base_dir` (the directory of the file holding the section).
    pub fn into_args_in(self, base_dir: &Path) -> Result<EngineArgs, ConfigError> {
        let args = self.into_unvalidated_args(base_dir)?;
        args.validate()?;
        Ok(args)
    }

    /// The profile file this section names (by `planner_profile_data` or the
    /// `dynamo_profile` timing model), resolved against `base_dir`, without reading it.
    pub fn profile_path(&self, base_dir: &Path) -> Option<std::path::PathBuf> {
        match self.timing_choice() {
            Ok(TimingChoice::Profile { path, .. }) => Some(base_dir.join(path)),
            _ => None,
        }
    }

    /// What `timing_model` and `planner_profile_data` select, before any file is read.
    fn timing_choice(&self) -> Result<TimingChoice, ConfigError> {
        let model = parse_timing_model(self.timing_model.as_ref())?;
        match (&self.planner_profile_data, model) {
            (None, model) => Ok(model),
            (Some(path), TimingChoice::Polynomial) => Ok(TimingChoice::Profile {
                field: "planner_profile_data",
                path: path.clone(),
            }),
            (Some(_), _) => Err(ConfigError::Invalid {
                field: "planner_profile_data",
                reason:
                    "give either planner_profile_data or a fixed or external timing_model, not both"
                        .to_string(),
            }),
        }
    }

    /// The backend `backend` names, with its own settings: vLLM (also when absent); every
    /// other backend is refused.
    fn backend(&self) -> Result<Backend, ConfigError> {
        match self.backend.as_deref() {
            None | Some("vllm") => {
                let d = VllmArgs::default();
                Ok(Backend::Vllm(VllmArgs {
                    enable_chunked_prefill: (self.enable_chunked_prefill)
                        .unwrap_or(d.enable_chunked_prefill),
                    preemption_mode: self.preemption_mode.unwrap_or(d.preemption_mode),
                }))
            }
            Some(other) => Err(unsupported("backend", &other)),
        }
    }

    /// Refuses the settings of behaviour the mocker does not model (the backend is checked
    /// before, by [`EngineSection::backend`]).
    fn check_supported(&self) -> Result<(), ConfigError> {
        if let Some(w) = self.worker_type.as_deref()
            && WorkerRole::from_worker_type(w).is_none()
        {
            return Err(unsupported("worker_type", &w));
        }
        if let Some(i) = self.prefill_schedule_interval.filter(|i| *i != 1) {
            return Err(unsupported("prefill_schedule_interval", &i));
        }
        if let Some(i) = self.prefill_decode_interval.filter(|i| *i != 0) {
            return Err(unsupported("prefill_decode_interval", &i));
        }
        require_null("aic_nextn", &self.aic_nextn)?;
        require_null("aic_nextn_accept_rates", &self.aic_nextn_accept_rates)?;
        require_null("kv_cache_groups", &self.kv_cache_groups)?;
        require_null("kv_cache_capacity_bytes", &self.kv_cache_capacity_bytes)?;
        if self.emit_kv_token_ids == Some(true) && self.emit_kv_events != Some(true) {
            return Err(ConfigError::Invalid {
                field: "emit_kv_token_ids",
                reason: "true requires emit_kv_events: true, as in Dynamo 1.6.1".to_string(),
            });
        }
        require_null("native_host_offload", &self.native_host_offload)?;
        require_null("state_cache", &self.state_cache)?;
        require_null("prefix_match_unit", &self.prefix_match_unit)?;
        require_null("g3_offload", &self.g3_offload)?;
        Ok(())
    }

    /// The transfer settings, checked as 1.6.1 checks them (even for an aggregated worker).
    fn kv_transfer(&self) -> Result<KvTransfer, ConfigError> {
        let invalid = |field: &'static str, reason: String| ConfigError::Invalid { field, reason };
        let present = |v: &Option<Value>| v.clone().filter(|v| !v.is_null());
        let (field, bytes) = match (
            present(&self.kv_transfer_bytes_per_token),
            present(&self.kv_bytes_per_token),
        ) {
            (Some(_), Some(_)) => {
                let reason = "give it or its other name kv_bytes_per_token, not both".to_string();
                return Err(invalid("kv_transfer_bytes_per_token", reason));
            }
            (None, Some(v)) => ("kv_bytes_per_token", Some(v)),
            (given, None) => ("kv_transfer_bytes_per_token", given),
        };
        let bytes = match bytes {
            None => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                let reason = format!("expected a whole number of bytes, got {v}");
                invalid(field, reason)
            })?),
        };
        let bandwidth = match present(&self.kv_transfer_bandwidth) {
            None => None,
            Some(v) => Some(v.as_f64().ok_or_else(|| {
                invalid("kv_transfer_bandwidth", format!("expected GB/s, got {v}"))
            })?),
        };
        let mode = match present(&self.kv_transfer_timing_mode) {
            None => None,
            Some(Value::String(mode)) => Some(mode),
            Some(v) => {
                let reason = format!("expected full_prompt or destination_missing, got {v}");
                return Err(invalid("kv_transfer_timing_mode", reason));
            }
        };
        KvTransfer::from_settings(bytes, bandwidth, mode.as_deref())
            .map_err(|(field, reason)| invalid(field, reason))
    }

    fn into_unvalidated_args(self, base_dir: &Path) -> Result<EngineArgs, ConfigError> {
        let backend = self.backend()?;
        self.check_supported()?;
        let kv_transfer = self.kv_transfer()?;
        let timing = match self.timing_choice()? {
            TimingChoice::Polynomial => TimingSource::Polynomial,
            TimingChoice::Fixed {
                prefill_ms,
                decode_ms,
            } => TimingSource::Fixed(FixedTiming {
                prefill_ms,
                decode_ms,
            }),
            TimingChoice::Profile { field, path } => {
                let profile = super::profile_dir::load(&base_dir.join(path))
                    .map_err(|error| ConfigError::Profile { field, error })?;
                TimingSource::Profile(Arc::new(profile))
            }
        };
        let d = CommonArgs::default();
        let capacity = CapacityArgs {
            num_gpu_blocks: self.num_gpu_blocks.unwrap_or(d.capacity.num_gpu_blocks),
            max_num_seqs: limit("max_num_seqs", self.max_num_seqs, d.capacity.max_num_seqs)?,
            max_num_batched_tokens: limit(
                "max_num_batched_tokens",
                self.max_num_batched_tokens,
                d.capacity.max_num_batched_tokens,
            )?,
            max_model_len: self.max_model_len,
        };
        let common = CommonArgs {
            block_size: self.block_size.unwrap_or(d.block_size),
            dp_size: d.dp_size,
            role: (self.worker_type.as_deref())
                .and_then(WorkerRole::from_worker_type)
                .unwrap_or_default(),
            kv_transfer,
            capacity,
            enable_prefix_caching: self
                .enable_prefix_caching
                .unwrap_or(d.enable_prefix_caching),
            timing,
            speedup_ratio: self.speedup_ratio.unwrap_or(d.speedup_ratio),
            decode_speedup_ratio: self.decode_speedup_ratio.unwrap_or(d.decode_speedup_ratio),
            // Top-level keys: the launch config sets them.
            startup_delay: d.startup_delay,
            tensor_parallel_size: d.tensor_parallel_size,
        };
        Ok(EngineArgs { common, backend })
    }
}

/// A timing model as configured, before a profile is read.
enum TimingChoice {
    Polynomial,
    Fixed { prefill_ms: f64, decode_ms: f64 },
    Profile { field: &'static str, path: String },
}

/// Reads `timing_model` as 1.6.1's engine config spells it (a `type` tag and its fields).
fn parse_timing_model(value: Option<&Value>) -> Result<TimingChoice, ConfigError> {
    let invalid = |field: &'static str, reason: String| ConfigError::Invalid { field, reason };
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(TimingChoice::Polynomial);
    };
    let Some(map) = value.as_object() else {
        return Err(invalid(
            "timing_model",
            format!("expected a map with a `type`, got {value}"),
        ));
    };
    let kind = map.get("type").and_then(Value::as_str).unwrap_or_default();
    let allowed: &[&str] = match kind {
        "polynomial" => &["type"],
        "fixed" => &["type", "prefill_ms", "decode_ms"],
        "external" => &["type", "provider", "config"],
        _ => return Err(unsupported("timing_model", value)),
    };
    if let Some(key) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(invalid(
            "timing_model",
            format!(
                "unknown key `{key}` for type {kind} (expected {})",
                allowed.join(", ")
            ),
        ));
    }
    match kind {
        "polynomial" => Ok(TimingChoice::Polynomial),
        "fixed" => {
            let ms = |field: &'static str, key: &str| match map.get(key) {
                Some(v) => v
                    .as_f64()
                    .ok_or_else(|| invalid(field, format!("expected a number of ms, got {v}"))),
                None => Err(invalid(field, "a fixed timing model needs it".to_string())),
            };
            let prefill_ms = ms("timing_model.prefill_ms", "prefill_ms")?;
            let decode_ms = ms("timing_model.decode_ms", "decode_ms")?;
            check_fixed_ms("timing_model.prefill_ms", prefill_ms)?;
            check_fixed_ms("timing_model.decode_ms", decode_ms)?;
            Ok(TimingChoice::Fixed {
                prefill_ms,
                decode_ms,
            })
        }
        _ => external_profile(value),
    }
}

/// 1.6.1's `{"type": "external", "provider": "dynamo_profile", "config": {"path": ..}}`, the
/// form its mocker gives `--planner-profile-data`; other providers are not modelled.
fn external_profile(value: &Value) -> Result<TimingChoice, ConfigError> {
    if value.get("provider").and_then(Value::as_str) != Some("dynamo_profile") {
        return Err(unsupported("timing_model", value));
    }
    match value
        .get("config")
        .and_then(|c| c.get("path"))
        .and_then(Value::as_str)
    {
        Some(path) => Ok(TimingChoice::Profile {
            field: "timing_model.config.path",
            path: path.to_string(),
        }),
        None => Err(ConfigError::Invalid {
            field: "timing_model.config.path",
            reason: "the dynamo_profile timing model needs `config: {path: FILE}`".to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_dynamo_1_6_1() {
        let args = EngineArgs::from_json_str(
            r#"{"engine": {"backend": "vllm", "worker_type": "aggregated"}}"#,
        )
        .unwrap();
        assert_eq!(args, EngineArgs::default());
        assert_eq!(args.common.block_size, 64);
        assert_eq!(args.common.capacity.num_gpu_blocks, 16384);
        assert_eq!(args.common.capacity.max_num_seqs, 256);
        assert_eq!(args.common.capacity.max_num_batched_tokens, 8192);
        let vllm = *args.backend.vllm().unwrap();
        assert!(args.common.enable_prefix_caching && vllm.enable_chunked_prefill);
        assert_eq!(vllm.preemption_mode, PreemptionMode::Lifo);
        assert_eq!(args.common.total_kv_tokens(), 1_048_576);
    }

    #[test]
    fn canonical_json_sets_every_modelled_field() {
        let args = EngineArgs::from_json_str(
            r#"{"engine": {"block_size": 16, "num_gpu_blocks": 100, "max_num_seqs": 4,
                "max_num_batched_tokens": 512, "enable_prefix_caching": false,
                "enable_chunked_prefill": false, "speedup_ratio": 2.5,
                "decode_speedup_ratio": 0.5, "preemption_mode": "fifo", "max_model_len": 4096},
                "dp_size": 2}"#,
        )
        .unwrap();
        assert_eq!(args.common.block_size, 16);
        assert_eq!(args.common.capacity.num_gpu_blocks, 100);
        assert_eq!(args.common.capacity.max_num_seqs, 4);
        assert_eq!(args.common.capacity.max_num_batched_tokens, 512);
        let vllm = *args.backend.vllm().unwrap();
        assert!(!args.common.enable_prefix_caching && !vllm.enable_chunked_prefill);
        assert_eq!(args.common.speedup_ratio, 2.5);
        assert_eq!(args.common.decode_speedup_ratio, 0.5);
        assert_eq!(vllm.preemption_mode, PreemptionMode::Fifo);
        assert_eq!(args.common.capacity.max_model_len, Some(4096));
        assert_eq!(args.common.dp_size, 2);
    }

    #[test]
    fn the_normalised_form_dynamo_prints_is_accepted() {
        // The engine section exactly as 1.6.1's `_normalize_mocker_config` writes it.
        let text = r#"{"engine": {"backend": "vllm", "num_gpu_blocks": 16384, "block_size": 64,
            "max_model_len": null, "max_num_seqs": 256, "max_num_batched_tokens": 8192,
            "prefill_schedule_interval": 1, "prefill_decode_interval": 0,
            "enable_prefix_caching": true, "enable_chunked_prefill": true, "speedup_ratio": 1.0,
            "decode_speedup_ratio": 1.0, "aic_nextn": null, "aic_nextn_accept_rates": null,
            "aic_mtp_seed": 42, "worker_type": "aggregated", "preemption_mode": "lifo",
            "emit_kv_events": false, "emit_kv_token_ids": false,
            "kv_transfer_bytes_per_token": null, "kv_transfer_bandwidth": null,
            "kv_transfer_timing_mode": "full_prompt", "timing_model": {"type": "polynomial"},
            "sglang": {"schedule_policy": "fifo", "max_prefill_tokens": 16384,
                       "chunked_prefill_size": 8192, "clip_max_new_tokens": 4096,
                       "schedule_conservativeness": 1.0},
            "trtllm": {"capacity_scheduler_policy": "guaranteed_no_evict"}},
            "dp_size": 1, "tensor_parallel_size": 1, "startup_time": null,
            "num_gpu_blocks_is_explicit": false, "gpu_memory_utilization": null,
            "mem_fraction_static": null, "free_gpu_memory_fraction": null,
            "cuda_graph_reserved_bytes": null}"#;
        assert_eq!(
            EngineArgs::from_json_str(text).unwrap(),
            EngineArgs::default()
        );
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let err = EngineArgs::from_json_str(r#"{"engine": {"bogus_knob": 1}}"#).unwrap_err();
        assert!(err.to_string().contains("bogus_knob"), "{err}");
        let err = EngineArgs::from_json_str(r#"{"engine": {}, "dynamo": {}}"#).unwrap_err();
        assert!(err.to_string().contains("dynamo"), "{err}");
    }

    #[test]
    fn transfer_settings_are_read_and_checked_as_dynamo_checks_them_even_when_aggregated() {
        let text = r#"{"engine": {"kv_transfer_bytes_per_token": 131072,
            "kv_transfer_bandwidth": 25, "kv_transfer_timing_mode": "destination_missing"}}"#;
        let transfer = EngineArgs::from_json_str(text).unwrap().common.kv_transfer;
        assert_eq!(transfer.delay(1024).as_ns(), 5_368_709);
        assert_eq!(
            transfer.mode,
            super::super::transfer::TransferTimingMode::DestinationMissing
        );
        let none = EngineArgs::from_json_str(r#"{"engine": {"kv_transfer_bandwidth": null}}"#);
        assert_eq!(none.unwrap().common.kv_transfer, KvTransfer::default());
        for (text, field, message) in [
            (
                r#"{"engine": {"kv_transfer_bandwidth": -1}}"#,
                "kv_transfer_bandwidth",
                "must be finite and non-negative",
            ),
            (
                r#"{"engine": {"kv_transfer_bytes_per_token": 0}}"#,
                "kv_transfer_bytes_per_token",
                "must be positive",
            ),
            (
                r#"{"engine": {"kv_transfer_bytes_per_token": 1.5}}"#,
                "kv_transfer_bytes_per_token",
                "a whole number",
            ),
            (
                r#"{"engine": {"kv_transfer_timing_mode": "eager"}}"#,
                "kv_transfer_timing_mode",
                "unknown variant `eager`",
            ),
            (
                r#"{"engine": {"kv_transfer_timing_mode": 3}}"#,
                "kv_transfer_timing_mode",
                "expected full_prompt",
            ),
        ] {
            match EngineArgs::from_json_str(text) {
                Err(ConfigError::Invalid { field: f, reason }) => {
                    assert_eq!(f, field, "{text}");
                    assert!(reason.contains(message), "{text}: {reason}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn worker_type_names_the_role() {
        for (worker_type, role) in [
            ("aggregated", WorkerRole::Aggregated),
            ("prefill", WorkerRole::Prefill),
            ("decode", WorkerRole::Decode),
        ] {
            let text = format!(r#"{{"engine": {{"worker_type": "{worker_type}"}}}}"#);
            assert_eq!(EngineArgs::from_json_str(&text).unwrap().common.role, role);
        }
        let default = EngineArgs::from_json_str(r#"{"engine": {}}"#).unwrap();
        assert_eq!(default.common.role, WorkerRole::Aggregated);
    }

    #[test]
    fn backend_selects_vllm_and_refuses_the_others_as_before() {
        let named = EngineArgs::from_json_str(r#"{"engine": {"backend": "vllm"}}"#).unwrap();
        assert_eq!(named.backend, Backend::Vllm(VllmArgs::default()));
        let err = EngineArgs::from_json_str(r#"{"engine": {"backend": "trtllm"}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "engine config: field `backend` = trtllm is not supported by routersim's mocker"
        );
    }

    #[test]
    fn unsupported_behaviour_is_refused_by_name() {
        for (text, field) in [
            (r#"{"engine": {"backend": "sglang"}}"#, "backend"),
            (r#"{"engine": {"worker_type": "encode"}}"#, "worker_type"),
            (r#"{"engine": {"aic_nextn": 2}}"#, "aic_nextn"),
            (
                r#"{"engine": {"timing_model": {"type": "external", "provider": "ais"}}}"#,
                "timing_model",
            ),
            (
                r#"{"engine": {"timing_model": {"type": "roofline"}}}"#,
                "timing_model",
            ),
            (
                r#"{"engine": {"prefill_schedule_interval": 2}}"#,
                "prefill_schedule_interval",
            ),
            (
                r#"{"engine": {}, "gpu_memory_utilization": 0.9}"#,
                "gpu_memory_utilization",
            ),
        ] {
            match EngineArgs::from_json_str(text) {
                Err(ConfigError::Unsupported { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: expected Unsupported({field}), got {other:?}"),
            }
        }
    }

    #[test]
    fn settings_1_6_1_takes_only_with_an_unsupported_feature_are_refused_by_name() {
        for (text, field) in [
            (
                r#"{"engine": {"aic_nextn_accept_rates": "0.9"}}"#,
                "aic_nextn_accept_rates",
            ),
            (
                r#"{"engine": {"kv_cache_capacity_bytes": 1024}}"#,
                "kv_cache_capacity_bytes",
            ),
        ] {
            match EngineArgs::from_json_str(text) {
                Err(ConfigError::Unsupported { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: expected Unsupported({field}), got {other:?}"),
            }
        }
        let ids = EngineArgs::from_json_str(r#"{"engine": {"emit_kv_token_ids": true}}"#);
        assert!(
            matches!(
                ids,
                Err(ConfigError::Invalid {
                    field: "emit_kv_token_ids",
                    ..
                })
            ),
            "{ids:?}"
        );
        let both = r#"{"engine": {"emit_kv_token_ids": true, "emit_kv_events": true}}"#;
        assert_eq!(EngineArgs::from_json_str(both), Ok(EngineArgs::default()));
    }

    #[test]
    fn an_explicit_null_limit_is_refused_not_taken_as_the_default() {
        for field in ["max_num_seqs", "max_num_batched_tokens"] {
            let text = format!(r#"{{"engine": {{"{field}": null}}}}"#);
            match EngineArgs::from_json_str(&text) {
                Err(ConfigError::Invalid { field: f, reason }) => {
                    assert_eq!(f, field);
                    assert!(reason.contains("unbounded"), "{reason}");
                }
                other => panic!("{text}: expected Invalid({field}), got {other:?}"),
            }
        }
    }

    #[test]
    fn kv_bytes_per_token_is_the_other_name_of_the_transfer_bytes() {
        let named = |key: &str| {
            let text = format!(
                r#"{{"engine": {{"worker_type": "prefill", "{key}": 131072, "kv_transfer_bandwidth": 1.0}}}}"#
            );
            EngineArgs::from_json_str(&text).unwrap().common.kv_transfer
        };
        assert_eq!(
            named("kv_bytes_per_token"),
            named("kv_transfer_bytes_per_token")
        );
        assert_ne!(named("kv_bytes_per_token"), KvTransfer::default());
        let twice = r#"{"engine": {"kv_bytes_per_token": 8, "kv_transfer_bytes_per_token": 8}}"#;
        assert!(matches!(
            EngineArgs::from_json_str(twice),
            Err(ConfigError::Invalid {
                field: "kv_transfer_bytes_per_token",
                ..
            })
        ));
    }

    #[test]
    fn validation_names_the_bad_field() {
        for (text, field) in [
            (r#"{"engine": {"block_size": 1}}"#, "block_size"),
            (r#"{"engine": {"num_gpu_blocks": 0}}"#, "num_gpu_blocks"),
            (r#"{"engine": {"max_num_seqs": 0}}"#, "max_num_seqs"),
            (
                r#"{"engine": {"max_num_batched_tokens": 0}}"#,
                "max_num_batched_tokens",
            ),
            (r#"{"engine": {"speedup_ratio": -1.0}}"#, "speedup_ratio"),
            (
                r#"{"engine": {"decode_speedup_ratio": -0.5}}"#,
                "decode_speedup_ratio",
            ),
            (r#"{"engine": {"max_model_len": 0}}"#, "max_model_len"),
            (r#"{"engine": {}, "dp_size": 0}"#, "dp_size"),
            (r#"{"engine": {}, "startup_time": -1.0}"#, "startup_time"),
        ] {
            match EngineArgs::from_json_str(text) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: expected Invalid({field}), got {other:?}"),
            }
        }
        let late = EngineArgs::from_json_str(r#"{"engine": {}, "startup_time": 2.5}"#);
        assert_eq!(
            late.unwrap().common.startup_delay,
            SimDuration::from_ms(2500),
            "a top-level key, in seconds"
        );
        let mut zero_ratio = EngineArgs::default();
        zero_ratio.common.speedup_ratio = 0.0;
        assert!(
            zero_ratio.validate().is_ok(),
            "0 means unscaled in Dynamo, not an error"
        );
    }

    #[test]
    fn fixed_timing_model_is_read_as_1_6_1_spells_it() {
        let args = EngineArgs::from_json_str(
            r#"{"engine": {"timing_model": {"type": "fixed", "prefill_ms": 40, "decode_ms": 9.5}}}"#,
        )
        .unwrap();
        assert_eq!(
            args.common.timing,
            TimingSource::Fixed(FixedTiming {
                prefill_ms: 40.0,
                decode_ms: 9.5
            })
        );
        let poly = r#"{"engine": {"timing_model": {"type": "polynomial"}}}"#;
        assert_eq!(
            EngineArgs::from_json_str(poly).unwrap(),
            EngineArgs::default()
        );
    }

    #[test]
    fn bad_fixed_timing_names_the_field() {
        for (model, field) in [
            (
                r#"{"type": "fixed", "decode_ms": 1}"#,
                "timing_model.prefill_ms",
            ),
            (
                r#"{"type": "fixed", "prefill_ms": 1}"#,
                "timing_model.decode_ms",
            ),
            (
                r#"{"type": "fixed", "prefill_ms": -1, "decode_ms": 1}"#,
                "timing_model.prefill_ms",
            ),
            (
                r#"{"type": "fixed", "prefill_ms": 1, "decode_ms": 1e12}"#,
                "timing_model.decode_ms",
            ),
            (
                r#"{"type": "fixed", "prefill_ms": "ten", "decode_ms": 1}"#,
                "timing_model.prefill_ms",
            ),
            (
                r#"{"type": "fixed", "prefill_ms": 1, "decode_ms": 1, "prefil_ms": 2}"#,
                "timing_model",
            ),
            (r#""fixed""#, "timing_model"),
            (
                r#"{"type": "external", "provider": "dynamo_profile"}"#,
                "timing_model.config.path",
            ),
        ] {
            let text = format!(r#"{{"engine": {{"timing_model": {model}}}}}"#);
            match EngineArgs::from_json_str(&text) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: expected Invalid({field}), got {other:?}"),
            }
        }
        let both = r#"{"engine": {"planner_profile_data": "p.npz",
            "timing_model": {"type": "fixed", "prefill_ms": 1, "decode_ms": 1}}}"#;
        match EngineArgs::from_json_str(both) {
            Err(ConfigError::Invalid { field, reason }) => {
                assert_eq!(field, "planner_profile_data");
                assert!(reason.contains("not both"), "{reason}");
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn a_profile_path_is_relative_to_the_engine_file_and_errors_name_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = crate::mocker::profile::npz_writer::profile(
            (&[0.0, 100.0], &[1.0, 2.0]),
            &[0.0, 10.0],
            &[1.0, 10.0],
            &[1.0, 2.0, 3.0, 4.0],
        );
        std::fs::write(dir.path().join("p.npz"), bytes).unwrap();
        for text in [
            r#"{"engine": {"planner_profile_data": "p.npz"}}"#,
            r#"{"engine": {"timing_model": {"type": "external", "provider": "dynamo_profile",
                "config": {"path": "p.npz"}}}}"#,
        ] {
            let args = EngineArgs::from_json_str_in(text, dir.path()).unwrap();
            let source = dir.path().join("p.npz").display().to_string();
            assert_eq!(args.common.timing.profile_source(), Some(source.as_str()));
            // Cloning shares the profile.
            let (TimingSource::Profile(a), TimingSource::Profile(b)) =
                (&args.common.timing, &args.clone().common.timing)
            else {
                panic!("not a profile: {:?}", args.common.timing)
            };
            assert!(Arc::ptr_eq(a, b));
        }
        let err = EngineArgs::from_json_str_in(
            r#"{"engine": {"planner_profile_data": "missing.npz"}}"#,
            dir.path(),
        )
        .unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("engine config: field `planner_profile_data`: ")
                && message.contains("missing.npz: cannot read the profile"),
            "{message}"
        );
    }

    /// The message of a parse error, which must name the field path.
    fn parse_error(text: &str) -> String {
        match EngineArgs::from_json_str(text) {
            Err(ConfigError::Parse(message)) => message,
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn wrong_types_are_parse_errors_naming_the_field() {
        assert_eq!(
            parse_error(r#"{"engine": {"max_num_seqs": "four"}}"#),
            "engine.max_num_seqs: expected a whole number >= 0, got string \"four\" (line 1, column 34)"
        );
        assert_eq!(
            parse_error(r#"{"engine": {"preemption_mode": "random"}}"#),
            "engine.preemption_mode: unknown value `random`, expected `lifo` or `fifo` (line 1, column 39)"
        );
        assert_eq!(
            parse_error(r#"{"dp_size": -1}"#),
            "dp_size: expected a whole number >= 0, got integer `-1` (line 1, column 14)"
        );
        assert!(parse_error(r#"{"engine": {"block_size": 1,}}"#).contains("(line 1"));
    }
}
