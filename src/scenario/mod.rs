//! Scenario files: one YAML file that says everything a run needs, validated into a config.
//!
//! ```yaml
//! name: premium-vs-regular
//! seed: 1
//! router:                       # Dynamo's policy keys inline (or `policy: file.yaml`),
//!   default_policy_family: regular   # `router_mode`, and KvRouterConfig knobs by name
//!   uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
//!   policy_classes: [...]
//!   router_temperature: 0.0
//! workers:
//!   count: 1
//!   engine: {max_num_seqs: 4, enable_prefix_caching: false}   # Dynamo's engine keys
//! workload:
//!   burst: {at_ms: 0, order: alternate, spacing_ns: 1}
//!   groups:
//!     - {name: premium, class: premium, count: 320, input_tokens: 512, output_tokens: 1}
//! expect:
//!   - {prefix_count: {class: premium, n: 320}, at_least: 240}
//! limits: {max_events: 10000000, max_time_ms: 3600000}
//! delays: {router_to_worker_ms: 0, worker_to_router_ms: 0, kv_event_lag_ms: 0,
//!          jitter_ms: 0, arrival_jitter_ns: 0}   # jitters: seeded variation, default off
//! ```
//!
//! Workload syntax (`workload.groups[]`, each group: `name`, optional `class`, `count` or
//! `share`, `input_tokens`, `output_tokens`, optional `arrival`, `prefix`, `priority`,
//! `strict_priority`, `pinned_worker`):
//! - sizing: `count` requests, or `share` of `workload.rate_per_s` for `workload.duration_s`
//!   seconds by `workload.arrival` (`poisson` | `{gamma: {cv}}` | `uniform`), the count
//!   following from the draws; `workload.concurrency: N` runs a closed loop;
//!   `workload.warmup_s` keeps early arrivals out of latency and share figures;
//! - lengths: a token count (`512`) or `{dist: uniform, min, max}`,
//!   `{dist: normal, mean, std_dev}`, `{dist: lognormal, mean, std_dev}` (of the length
//!   itself), `{dist: exponential, mean}`; draws are rounded and clamped to `[min, max]`,
//!   default `[1, 2^20]`;
//! - arrivals: `burst` (default: released with `workload.burst: {at_ms, order, spacing_ns}`,
//!   `order` = `sequential` (default) | `round_robin` | `alternate`, request `m` of the burst at
//!   `at_ms + m * spacing_ns`), `{poisson: {rate_per_s, start_ms}}`,
//!   `{interval: {every_ms, start_ms}}`, `{at_ms: [t0, t1, ...]}` (one per request);
//! - prompts: distinct unless `prefix: {tokens, groups}` (request `k` shares the first
//!   `tokens` tokens, in whole KV blocks, with the group's other requests of prefix group
//!   `k % groups`); a prompt is hash ids with `tokens_per_hash` = the engine block size;
//! - `pinned_worker: {worker_id, dp_rank}` sends every request of the group to that rank's
//!   exact-worker lane;
//! - or, instead of groups, `trace: file.jsonl` (mooncake, relative to the scenario file)
//!   with `trace_block_size` (default 512).
//!
//! Engine arguments go under `workers.engine:` (as in Dynamo's `{"engine": {...}}`), with
//! `workers.dp_size` beside it: one pool, named `default`. Or `workers.pools:` lists named
//! pools, each `{name, count, dp_size, engine}`; worker ids are assigned pool by pool in file
//! order. Field paths name list entries by their `name`:
//! `router.policy_classes.regular.quantum`, `workload.groups.premium.count`,
//! `workers.pools.h100.count`. Use
//! [`Scenario::load`] / [`Scenario::load_with_overrides`], then [`Scenario::config`] and
//! [`Scenario::workload`]. Every problem is a [`ScenarioError`] naming file, line and field.

pub mod bounds_check;
pub mod error;
mod overrides;
pub mod raw;
mod validate;

pub use error::ScenarioError;

use crate::bounds;
use crate::planner::config::PlannerConfig;
use crate::report::verdict::expect::{Expectation, Figure};
use crate::scheduling::policy::{PolicyConfig, PolicyError};
use crate::sim::{ClosedLoop, SimConfig, WorkerPool};
use crate::time::SimDuration;
use crate::workload::synth::SynthWorkload;
use crate::workload::trace::SurplusHashIds;
use std::path::{Path, PathBuf};

/// A validated scenario: everything a run needs except the seed it is run with.
#[derive(Clone, Debug)]
pub struct Scenario {
    file: PathBuf,
    name: String,
    source_hash: String,
    policy: Option<PolicyConfig>,
    /// The policy file named by `router.policy`, if the policy is not inline.
    policy_file: Option<PathBuf>,
    /// What every run of the scenario starts from: the router, its profile, the worker pools
    /// (in file order: worker ids go pool by pool), limits, delays, the closed loop
    /// (`workload.concurrency`), the faults (cancel groups resolved to classes, pools to
    /// indices), `router.migration_limit`, and the scenario's `seed` (a run may replace it).
    config: SimConfig,
    workload: Workload,
    expectations: Vec<Expectation>,
    companions: Vec<PathBuf>,
    class_names: Vec<String>,
    /// Seeded arrival jitter (`delays.arrival_jitter_ns`).
    arrival_jitter_ns: u64,
    /// `workload.warmup_s`: requests arriving before it stay out of latency and share figures.
    warmup: SimDuration,
    /// `planner:`: the scaling policy in the loop, if any.
    planner: Option<Planner>,
}

/// A scenario's scaling policy: a process, or the native planner.
#[derive(Clone, Debug, PartialEq)]
pub enum Planner {
    /// `command`, run by `sh -c` in `dir` (the scenario's directory), answering each question
    /// within `timeout`.
    Process {
        command: String,
        dir: PathBuf,
        timeout: std::time::Duration,
    },
    /// Dynamo's planner, native, with these settings.
    Native(PlannerConfig),
}

/// Where a scenario's requests come from.
#[derive(Clone, Debug)]
pub enum Workload {
    /// Generated from request groups.
    Synthetic(SynthWorkload),
    /// A mooncake trace (already scanned once at load: it is valid).
    Trace {
        /// The trace file.
        path: PathBuf,
        /// Tokens per hash id.
        block_size: u64,
        /// Timestamps are divided by this (`workload.arrival_speedup_ratio`, default 1).
        arrival_speedup_ratio: f64,
        /// The rows whose hash ids outrun their input, found by the scan (a warning).
        surplus_hash_ids: SurplusHashIds,
    },
}

/// What a YAML file is, for `routersim validate FILE`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A scenario (its top level has a scenario key such as `workload` or `workers`).
    Scenario,
    /// A bare Dynamo router policy YAML.
    Policy,
}

/// Top-level keys that only a scenario has (a policy has `default_policy_family`,
/// `uncached_isl_buckets`, `policy_classes`, `models`).
const SCENARIO_KEYS: [&str; 9] = [
    "name", "seed", "model", "router", "workers", "workload", "expect", "limits", "delays",
];

/// Whether `text` is a scenario or a bare policy: a scenario iff its top-level mapping has
/// one of the scenario's own keys. Anything else (including unparsable text) is left to the
/// policy reader, whose errors then apply.
pub fn file_kind(text: &str) -> FileKind {
    let Some(root) = crate::yaml::Node::parse(text) else {
        return FileKind::Policy;
    };
    match SCENARIO_KEYS.iter().any(|key| root.get(key).is_some()) {
        true => FileKind::Scenario,
        false => FileKind::Policy,
    }
}

/// [`file_kind`] of the file at `path`.
pub fn file_kind_of_path(path: &Path) -> Result<FileKind, ScenarioError> {
    read_file(path).map(|text| file_kind(&text))
}

/// Reads, parses and validates the bare policy file at `path` (for `validate FILE` and
/// `replay --policy`); its errors name the file. (File IO lives here, not in `scheduling`.)
pub fn load_policy_file(path: &Path) -> Result<PolicyConfig, PolicyError> {
    let name = path.display().to_string();
    let text = bounds::read_to_string_capped(path, bounds::MAX_INPUT_FILE_BYTES).map_err(|e| {
        PolicyError::new(
            "file",
            String::new(),
            None,
            format!("cannot read the policy file: {e}"),
        )
        .with_source_name(name.clone())
    })?;
    PolicyConfig::from_yaml_str(&text, Some(&name))
}

/// A scenario file's text (capped as every input file is), for callers that parse it many
/// times with different overrides ([`Scenario::from_text`]).
pub fn read_scenario_text(path: &Path) -> Result<String, ScenarioError> {
    read_file(path)
}

fn read_file(path: &Path) -> Result<String, ScenarioError> {
    bounds::read_to_string_capped(path, bounds::MAX_INPUT_FILE_BYTES).map_err(|e| {
        ScenarioError::in_file(
            path.display().to_string(),
            format!("cannot read the file: {e}"),
        )
    })
}

impl Scenario {
    /// Reads, parses and validates the scenario at `path`.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        Self::load_with_overrides(path, &[])
    }

    /// Like [`load`](Self::load), with `--set PATH=VALUE` overrides applied (in order) to the
    /// YAML text before parsing, so they go through the same validation. Any field of the
    /// format can be set: present, left at its default, or in the policy file `router.policy`
    /// names. A path that is not a field or a value of the wrong type is an error naming the path.
    pub fn load_with_overrides(
        path: &Path,
        overrides: &[(String, String)],
    ) -> Result<Scenario, ScenarioError> {
        let text = read_file(path)?;
        Self::from_text(path, &text, overrides)
    }

    /// Parses and validates scenario `text` as if read from `path` (relative paths inside it
    /// are resolved against `path`'s directory).
    pub fn from_text(
        path: &Path,
        text: &str,
        overrides: &[(String, String)],
    ) -> Result<Scenario, ScenarioError> {
        validate::load(path, text, overrides)
    }

    /// The scenario's `name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scenario's `seed` (the CLI's `--seed` may replace it).
    pub fn seed(&self) -> u64 {
        self.config.seed()
    }

    /// The file the scenario was read from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// A stable hash of the file text and the overrides (16 hex digits), for `summary.json`.
    pub fn source_hash(&self) -> &str {
        &self.source_hash
    }

    /// The resolved class names of the active profile, in DRR ring order.
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// The `expect:` entries, parsed and validated.
    pub fn expectations(&self) -> &[Expectation] {
        &self.expectations
    }

    /// What to warn about at load, one line each: share expectations no class can make
    /// meaningful ([`Self::share_warning`]), and trace rows whose hash ids outrun their input.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = self.share_warning().into_iter().collect();
        if let Workload::Trace {
            path,
            surplus_hash_ids,
            ..
        } = &self.workload
        {
            warnings.extend(surplus_hash_ids.warning(&path.display().to_string()));
        }
        warnings
    }

    /// A warning when expectations judge how classes share the workers but no class can ever
    /// queue: without a busy threshold every request is dispatched at once, DRR never picks
    /// between classes, and the shares only follow the arrival order.
    pub fn share_warning(&self) -> Option<String> {
        if self.config.profile().any_queueing_enabled() {
            return None;
        }
        let about_shares = |e: &&Expectation| {
            matches!(
                e.figure(),
                Figure::PrefixCount { .. }
                    | Figure::PrefixShare { .. }
                    | Figure::RemainingWhenDone { .. }
                    | Figure::CountAt { .. }
                    | Figure::Growth { .. }
                    | Figure::TokenShare { .. }
            )
        };
        let first = self.expectations.iter().find(about_shares)?;
        Some(format!(
            "warning: {}: `{}` judges how classes share the workers, but no class can queue (none \
             has a busy threshold), so every request is dispatched on arrival and the quanta never \
             apply; set prefill_busy_threshold or prefill_busy_threshold_frac on the classes \
             (router.policy_classes), or router_queue_threshold without a policy",
            self.file.display(),
            first.label()
        ))
    }

    /// Companion scenarios named by `minus:` (resolved against this file's directory, sorted,
    /// without duplicates).
    pub fn companions(&self) -> Vec<PathBuf> {
        self.companions.clone()
    }

    /// Every file this scenario reads: itself, its policy file, its trace, every pool's timing
    /// profile and its companions. An output directory may not contain any of them.
    pub fn input_files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.file.clone()];
        files.extend(self.policy_file.clone());
        let profiles = self
            .config
            .pools()
            .iter()
            .filter_map(|p| p.engine.common.timing.profile_source());
        files.extend(profiles.map(PathBuf::from));
        if let Workload::Trace { path, .. } = &self.workload {
            files.push(path.clone());
        }
        files.extend(self.companions.iter().cloned());
        files
    }

    /// The companion file an expectation's `minus:` names, resolved as [`companions`](Self::companions) are.
    pub fn companion_path(&self, minus: &str) -> PathBuf {
        self.file.parent().unwrap_or(Path::new("")).join(minus)
    }

    /// The seeded arrival jitter (`delays.arrival_jitter_ns`), 0 when off.
    pub fn arrival_jitter_ns(&self) -> u64 {
        self.arrival_jitter_ns
    }

    /// The workload description.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The worker pools, in file order: one named `default` for a plain `workers:`.
    pub fn pools(&self) -> &[WorkerPool] {
        self.config.pools()
    }

    /// The simulator configuration every run of the scenario starts from, with the
    /// scenario's own seed (a run may set another: the pipeline's `RunSpec::from_scenario`).
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// The scaling policy in the loop (`planner:`), if any.
    pub fn planner(&self) -> Option<&Planner> {
        self.planner.as_ref()
    }

    /// The warmup (`workload.warmup_s`; zero when absent).
    pub fn warmup(&self) -> SimDuration {
        self.warmup
    }

    /// The closed loop (`workload.concurrency`), if the workload runs in one.
    pub fn closed_loop(&self) -> Option<ClosedLoop> {
        self.config.closed_loop()
    }

    /// A plain-text summary for `routersim validate`: the scenario, the resolved classes
    /// (as [`crate::scheduling::policy::describe`] prints them), workers, workload and expectations.
    pub fn describe(&self) -> String {
        validate::describe(self)
    }
}

/// A synthetic workload's draw error, as a scenario error naming the file and the field.
pub fn synth_error(file: &Path, error: &crate::workload::synth::SynthError) -> ScenarioError {
    ScenarioError {
        file: file.display().to_string(),
        line: None,
        column: None,
        field_path: validate::synth_error_path(error),
        message: error.message.clone(),
    }
}

#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod rate_tests;
#[cfg(test)]
mod role_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
