//! The scenario YAML exactly as written, before validation. Unknown fields are errors at
//! every depth (the `router` section checks its knobs against Dynamo's `KvRouterConfig`).

use crate::mocker::config::EngineSection;
use crate::report::verdict::expect::RawExpectation;
use crate::scheduling::policy::raw::{RawBucket, RawPolicyClass, RawPolicyProfile};
use crate::sim::RouterMode;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;
use std::collections::BTreeMap;
use std::fmt;

/// The keys a scenario file may have at its top, in [`RawScenario`]'s order: every field path
/// (`--set`, a sweep's axis) starts at one of them.
pub const SCENARIO_KEYS: [&str; 11] = [
    "name", "seed", "model", "router", "workers", "workload", "expect", "limits", "delays",
    "faults", "planner",
];

/// A whole scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    /// The scenario's name (the default output directory).
    pub name: String,
    /// The run seed (default 0); `--seed` replaces it.
    #[serde(default)]
    pub seed: u64,
    /// The served model's name: picks a `models:` profile of the policy (default none).
    #[serde(default)]
    pub model: Option<String>,
    /// `router:` (policy keys, `policy`, `router_mode`, KvRouterConfig knobs).
    #[serde(default)]
    pub router: RawRouter,
    /// `workers:` (count, dp_size, engine).
    #[serde(default)]
    pub workers: RawWorkers,
    /// `workload:` (groups or trace).
    pub workload: RawWorkload,
    /// `expect:` (what the run must show).
    #[serde(default)]
    pub expect: Vec<RawExpectation>,
    /// `limits:` (max events, max simulated time).
    #[serde(default)]
    pub limits: RawLimits,
    /// `delays:` (transport latencies).
    #[serde(default)]
    pub delays: RawDelays,
    /// `faults:` (workers down and up, client cancellations).
    #[serde(default)]
    pub faults: Vec<RawFault>,
    /// `planner:` a scaling policy in the loop.
    #[serde(default)]
    pub planner: Option<RawPlanner>,
}

/// `planner:`: a scaling policy in the loop, `command` (run by `sh -c` in the scenario's
/// directory), answering each question within `timeout_s` seconds (default 60); or, without
/// `command`, the native planner's keys (Dynamo's `PlannerConfig`, in `keys`).
#[derive(Clone, Debug, Deserialize)]
pub struct RawPlanner {
    pub command: Option<String>,
    pub timeout_s: Option<f64>,
    #[serde(flatten)]
    pub keys: serde_json::Map<String, serde_json::Value>,
}

/// One entry of `faults:`; exactly one key is set. A struct of options rather than a serde
/// enum, so that unknown keys and several keys give the messages they always gave; validation
/// takes its one [`RawFault::kind`].
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFault {
    pub worker_down: Option<RawWorkerDown>,
    pub cancel: Option<RawCancel>,
    pub worker_up: Option<RawWorkerUp>,
    pub worker_drain: Option<RawWorkerDrain>,
}

/// The one kind a `faults:` entry sets.
#[derive(Clone, Copy, Debug)]
pub enum RawFaultKind<'a> {
    WorkerDown(&'a RawWorkerDown),
    Cancel(&'a RawCancel),
    WorkerUp(&'a RawWorkerUp),
    WorkerDrain(&'a RawWorkerDrain),
}

impl RawFault {
    /// The kinds' keys, in the order errors list them.
    pub const KEYS: [&'static str; 4] = ["worker_down", "cancel", "worker_up", "worker_drain"];

    /// The kind set, or `None` when none or several are.
    pub fn kind(&self) -> Option<RawFaultKind<'_>> {
        let set = [
            self.worker_down.as_ref().map(RawFaultKind::WorkerDown),
            self.cancel.as_ref().map(RawFaultKind::Cancel),
            self.worker_up.as_ref().map(RawFaultKind::WorkerUp),
            self.worker_drain.as_ref().map(RawFaultKind::WorkerDrain),
        ];
        let mut kinds = set.into_iter().flatten();
        match (kinds.next(), kinds.next()) {
            (Some(kind), None) => Some(kind),
            _ => None,
        }
    }
}

/// `{role?, worker, at_ms, until_ms}`: a worker stops at `at_ms` (returns at `until_ms` if
/// given). In disaggregated serving `role` (`prefill` or `decode`) says whose `worker` it is,
/// numbered within the role.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkerDown {
    pub role: Option<String>,
    pub worker: u64,
    pub at_ms: f64,
    pub until_ms: Option<f64>,
}

/// `{group, fraction, after_ms}`: this share of the group's requests gives up `after_ms`
/// after arrival.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCancel {
    pub group: String,
    pub fraction: f64,
    pub after_ms: f64,
}

/// `{role?, worker, at_ms}`: a worker is scaled down at `at_ms`: it takes no new request,
/// finishes what it holds, then leaves. `role` as in [`RawWorkerDown`].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkerDrain {
    pub role: Option<String>,
    pub worker: u64,
    pub at_ms: f64,
}

/// `{pool, at_ms}`: a new worker of the pool joins (after the pool's `startup_time`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkerUp {
    pub pool: String,
    pub at_ms: f64,
}

/// `router:`: Dynamo's policy keys inline (or `policy: path`), `router_mode`, and
/// `KvRouterConfig` knobs by their Dynamo names.
#[derive(Clone, Debug, Default)]
pub struct RawRouter {
    /// Dynamo's `default_policy_family`.
    pub default_policy_family: Option<Spanned<String>>,
    /// Dynamo's `uncached_isl_buckets`.
    pub uncached_isl_buckets: Option<Spanned<Vec<Spanned<RawBucket>>>>,
    /// Dynamo's `policy_classes`.
    pub policy_classes: Option<Spanned<Vec<Spanned<RawPolicyClass>>>>,
    /// Dynamo's `models` (per-model profiles).
    pub models: Option<Spanned<BTreeMap<String, Spanned<RawPolicyProfile>>>>,
    /// A Dynamo policy YAML file, relative to the scenario file.
    pub policy: Option<String>,
    /// `kv_router` (default) or `round_robin`.
    pub router_mode: Option<RouterMode>,
    /// Dynamo frontend's `migration_limit` (default 0).
    pub migration_limit: Option<u32>,
    /// Every other key: checked against `KvRouterConfig` after parsing.
    pub knobs: serde_json::Map<String, serde_json::Value>,
}

impl<'de> Deserialize<'de> for RawRouter {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RouterVisitor)
    }
}

struct RouterVisitor;

impl<'de> Visitor<'de> for RouterVisitor {
    type Value = RawRouter;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping of policy keys and router knobs")
    }

    fn visit_unit<E: de::Error>(self) -> Result<RawRouter, E> {
        Ok(RawRouter::default())
    }

    /// Each value is read straight from the YAML deserializer, so the policy's spans (and
    /// serde-saphyr's error positions) survive; a flatten would lose them.
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawRouter, A::Error> {
        let mut router = RawRouter::default();
        while let Some(key) = map.next_key::<String>()? {
            let duplicate = match key.as_str() {
                "default_policy_family" => router
                    .default_policy_family
                    .replace(map.next_value()?)
                    .is_some(),
                "uncached_isl_buckets" => router
                    .uncached_isl_buckets
                    .replace(map.next_value()?)
                    .is_some(),
                "policy_classes" => router.policy_classes.replace(map.next_value()?).is_some(),
                "models" => router.models.replace(map.next_value()?).is_some(),
                "policy" => router.policy.replace(map.next_value()?).is_some(),
                "router_mode" => router.router_mode.replace(map.next_value()?).is_some(),
                "migration_limit" => router.migration_limit.replace(map.next_value()?).is_some(),
                _ => router
                    .knobs
                    .insert(key.clone(), map.next_value()?)
                    .is_some(),
            };
            if duplicate {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
        }
        Ok(router)
    }
}

/// `workers:`: how many aggregated workers and their engine (Dynamo's `engine` keys), as one
/// unnamed pool; or `pools`, each with its own count and engine (not both forms).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkers {
    /// Number of workers (default 1).
    pub count: Option<u64>,
    /// Data-parallel ranks per worker (default 1), as Dynamo's top-level `dp_size`.
    pub dp_size: Option<u64>,
    /// Seconds a worker added while the run goes on (`worker_up`) takes to start, as
    /// Dynamo's top-level `startup_time` (default 0: ready at once).
    pub startup_time: Option<f64>,
    /// GPUs per rank, as Dynamo's top-level `tensor_parallel_size` (default 1): what the
    /// fleet costs in GPUs (the timing model does not change).
    pub tensor_parallel_size: Option<u64>,
    /// Engine arguments with Dynamo 1.6.1's names (`max_num_seqs`, `block_size`, ...).
    pub engine: Option<EngineSection>,
    /// Named pools of workers, each with its own engine; worker ids go pool by pool.
    pub pools: Option<Vec<RawPool>>,
    /// Disaggregated serving: the prefill workers (with `decode`, instead of the fields above).
    pub prefill: Option<RawRole>,
    /// Disaggregated serving: the decode workers.
    pub decode: Option<RawRole>,
}

/// `workers.prefill` or `workers.decode`: the workers of one role, as one pool
/// (`count`, `dp_size`, `engine`; named after the role) or as named `pools`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRole {
    /// Number of workers (default 1).
    pub count: Option<u64>,
    /// Data-parallel ranks per worker (default 1).
    pub dp_size: Option<u64>,
    /// Seconds a worker added while the run goes on (`worker_up`) takes to start, as
    /// Dynamo's top-level `startup_time` (default 0: ready at once).
    pub startup_time: Option<f64>,
    /// GPUs per rank, as Dynamo's top-level `tensor_parallel_size` (default 1): what the
    /// fleet costs in GPUs (the timing model does not change).
    pub tensor_parallel_size: Option<u64>,
    /// Engine arguments (Dynamo 1.6.1's names); `worker_type`, if given, must be the role.
    pub engine: Option<EngineSection>,
    /// Named pools of this role's workers.
    pub pools: Option<Vec<RawPool>>,
}

/// One entry of `workers.pools`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    /// The pool's name (addresses it in `--set` paths and names it in the results).
    pub name: Option<String>,
    /// Number of workers in the pool (required).
    pub count: Option<u64>,
    /// Data-parallel ranks per worker of this pool (default 1).
    pub dp_size: Option<u64>,
    /// Seconds a worker added while the run goes on (`worker_up`) takes to start, as
    /// Dynamo's top-level `startup_time` (default 0: ready at once).
    pub startup_time: Option<f64>,
    /// GPUs per rank, as Dynamo's top-level `tensor_parallel_size` (default 1): what the
    /// fleet costs in GPUs (the timing model does not change).
    pub tensor_parallel_size: Option<u64>,
    /// The pool's engine arguments (Dynamo 1.6.1's names).
    #[serde(default)]
    pub engine: EngineSection,
}

/// `workload:`: request groups, or a mooncake trace.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    /// A mooncake JSONL trace, relative to the scenario file.
    pub trace: Option<String>,
    /// Tokens per hash id of the trace (default 512, Dynamo's).
    pub trace_block_size: Option<u64>,
    /// Divides the trace's timestamps (default 1; Dynamo's `arrival_speedup_ratio`).
    pub arrival_speedup_ratio: Option<f64>,
    /// How groups with `arrival: burst` are released.
    pub burst: Option<RawBurst>,
    /// Synthetic request groups.
    pub groups: Option<Vec<RawGroup>>,
    /// Total open-loop arrival rate of the groups that have `share`, per second.
    pub rate_per_s: Option<f64>,
    /// Arrivals of the shared groups stop after this many seconds; with `concurrency`, no
    /// request is issued after it.
    pub duration_s: Option<f64>,
    /// The arrival process of the shared groups (default `poisson`).
    pub arrival: Option<RawProcess>,
    /// The shared groups' rate over time: `rate_per_s` times each piece's `scale`.
    pub rate_shape: Option<Vec<RawRatePiece>>,
    /// Closed loop: keep this many requests in flight, each end issuing the next.
    pub concurrency: Option<u64>,
    /// Requests arriving before this many seconds stay out of the latency and share metrics.
    pub warmup_s: Option<f64>,
}

/// A piece of `workload.rate_shape`: the rate is `rate_per_s × scale` from the previous
/// piece's end (or 0) until `until_s`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRatePiece {
    pub until_s: f64,
    pub scale: f64,
}

/// `workload.arrival:`: `poisson`, `uniform` or `{gamma: {cv}}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawProcess {
    /// Exponential gaps (default).
    Poisson,
    /// Gamma gaps with this coefficient of variation.
    Gamma {
        /// Standard deviation of a gap over its mean.
        cv: f64,
    },
    /// Evenly spaced arrivals.
    Uniform,
}

/// `workload.burst:`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBurst {
    /// When the first burst request is released, in ms (default 0).
    #[serde(default)]
    pub at_ms: f64,
    /// `sequential` (default), `round_robin` or `alternate`.
    #[serde(default)]
    pub order: Option<RawBurstOrder>,
    /// Release stagger in creation order, in ns (default 0).
    #[serde(default)]
    pub spacing_ns: u64,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
/// Creation order of a burst across groups.
#[serde(rename_all = "snake_case")]
pub enum RawBurstOrder {
    /// All of the first group, then the next, ...
    Sequential,
    /// One request of every group per step, in group order.
    RoundRobin,
    /// Like `round_robin`, odd steps in reverse group order (Dynamo's test).
    Alternate,
}

/// One request group.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    /// Unique group name (addresses the group in `--set` paths).
    pub name: String,
    /// The `policy_class` the requests ask for.
    pub class: Option<String>,
    /// How many requests (positive); or give `share`.
    pub count: Option<u64>,
    /// The group's fraction of `workload.rate_per_s` (instead of `count`).
    pub share: Option<f64>,
    /// Prompt length in tokens.
    pub input_tokens: RawLength,
    /// Output length in tokens.
    pub output_tokens: RawLength,
    /// `burst` (default), `{poisson: ...}`, `{interval: ...}` or `{at_ms: [...]}`.
    pub arrival: Option<RawArrival>,
    /// Shared prompt prefixes (default: every prompt distinct).
    pub prefix: Option<RawPrefix>,
    /// Soft priority of every request (default 0).
    #[serde(default)]
    pub priority: f64,
    /// Strict priority tier of every request (default 0).
    #[serde(default)]
    pub strict_priority: u32,
    /// Pin every request to one worker rank (not yet passed to the simulator).
    pub pinned_worker: Option<RawPin>,
    /// Draw multi-turn sessions instead of independent requests.
    pub sessions: Option<RawSessions>,
}

/// `sessions: {turns, think_time_ms, new_input_tokens}`: each a length (a number or a
/// distribution).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSessions {
    /// Turns per session.
    #[serde(deserialize_with = "turn_count")]
    pub turns: RawLength,
    /// From a turn's end to the next turn's arrival, in ms (default 0).
    #[serde(default, deserialize_with = "whole_ms")]
    pub think_time_ms: Option<RawLength>,
    /// Tokens each later turn adds after the previous prompt and output.
    pub new_input_tokens: RawLength,
}

/// A length: a plain integer, or `{dist: ..., mean, std_dev, min, max}`.
#[derive(Clone, Debug, PartialEq)]
pub enum RawLength {
    /// A plain token count.
    Fixed(u64),
    /// A distribution.
    Dist(RawDist),
}

/// The distribution form of a length.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDist {
    /// `uniform`, `normal`, `lognormal` or `exponential`.
    pub dist: RawDistKind,
    /// Mean length (normal, lognormal, exponential).
    pub mean: Option<f64>,
    /// Standard deviation of the length (normal, lognormal).
    pub std_dev: Option<f64>,
    /// Lower bound (uniform) or clamp (others; default 1).
    pub min: Option<u64>,
    /// Upper bound (uniform) or clamp (others; default 2^20).
    pub max: Option<u64>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
/// The name of a length distribution.
#[serde(rename_all = "snake_case")]
pub enum RawDistKind {
    /// Uniform over the integers `[min, max]`.
    Uniform,
    /// Normal(mean, std_dev).
    Normal,
    /// Log-normal with the length's mean and std_dev.
    Lognormal,
    /// Exponential with the given mean.
    Exponential,
}

impl<'de> Deserialize<'de> for RawLength {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LengthVisitor("a token count"))
    }
}

/// `sessions.turns`: a length whose errors say it counts turns.
fn turn_count<'de, D: Deserializer<'de>>(deserializer: D) -> Result<RawLength, D::Error> {
    deserializer.deserialize_any(LengthVisitor("a whole number of turns"))
}

/// `sessions.think_time_ms`: a length whose errors say it is a time in whole ms.
fn whole_ms<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<RawLength>, D::Error> {
    deserializer.deserialize_option(OptionalLength(LengthVisitor("a whole number of ms")))
}

/// A length's visitor; its words say what the length counts (tokens, turns, ms).
struct LengthVisitor(&'static str);

/// A [`LengthVisitor`] for an optional length (`null` is none).
struct OptionalLength(LengthVisitor);

impl<'de> Visitor<'de> for OptionalLength {
    type Value = Option<RawLength>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self.0).map(Some)
    }
}

impl<'de> Visitor<'de> for LengthVisitor {
    type Value = RawLength;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{} or {{dist: uniform|normal|lognormal|exponential, ...}}",
            self.0
        )
    }

    fn visit_u64<E: de::Error>(self, tokens: u64) -> Result<RawLength, E> {
        Ok(RawLength::Fixed(tokens))
    }

    fn visit_i64<E: de::Error>(self, tokens: i64) -> Result<RawLength, E> {
        u64::try_from(tokens)
            .map(RawLength::Fixed)
            .map_err(|_| E::custom(format_args!("a length must be positive, got {tokens}")))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawLength, A::Error> {
        RawDist::deserialize(de::value::MapAccessDeserializer::new(map)).map(RawLength::Dist)
    }
}

/// A group's arrival process.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawArrival {
    /// Released with the workload's burst (default).
    Burst,
    /// A Poisson process.
    Poisson {
        /// Mean arrivals per second.
        rate_per_s: f64,
        /// When the process starts, in ms (default 0).
        #[serde(default)]
        start_ms: f64,
    },
    /// One request every `every_ms`.
    Interval {
        /// Gap between arrivals, in ms.
        every_ms: f64,
        /// The first arrival, in ms (default 0).
        #[serde(default)]
        start_ms: f64,
    },
    /// Listed arrival times in ms, one per request.
    AtMs(Vec<f64>),
}

/// `prefix: {tokens, groups}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrefix {
    /// Shared prefix length in tokens (rounded down to whole KV blocks).
    pub tokens: u64,
    /// How many distinct prefixes (default 1); request k uses prefix k % groups.
    #[serde(default = "one")]
    pub groups: u64,
}

fn one() -> u64 {
    1
}

/// `pinned_worker: {worker_id, dp_rank}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPin {
    /// The worker id (0-based).
    pub worker_id: u64,
    /// The dp rank (default 0).
    #[serde(default)]
    pub dp_rank: u32,
}

/// `limits:`: stop a run early.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// Stop after this many events.
    pub max_events: Option<u64>,
    /// Stop at this simulated time, in ms.
    pub max_time_ms: Option<f64>,
}

/// `delays:`: transport latencies in ms (default 0).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDelays {
    /// Router to worker, in ms.
    #[serde(default)]
    pub router_to_worker_ms: f64,
    /// Worker to router (tokens), in ms.
    #[serde(default)]
    pub worker_to_router_ms: f64,
    /// Worker KV events to the router's indexer, in ms.
    #[serde(default)]
    pub kv_event_lag_ms: f64,
    /// Seeded variation: each dispatch and token message is late by up to this many ms more
    /// (so a pass's completions reach clients in a seed-dependent order).
    #[serde(default)]
    pub jitter_ms: f64,
    /// Seeded variation: each request arrives up to this many ns late (so requests released
    /// together arrive in a seed-dependent order).
    #[serde(default)]
    pub arrival_jitter_ns: u64,
}
