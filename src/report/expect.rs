//! Expectations a scenario states about its own results (`expect:`): syntax and bounds.
//!
//! Each expectation names exactly one *figure* (what is measured) and a *bound*:
//!
//! ```yaml
//! expect:
//!   - {prefix_count: {class: premium, n: 320}, within: [240, 320]}
//!   - {remaining_when_done: {class: regular, done: premium}, within: [220, 260]}
//!   - {count_at: {class: regular, when: premium, k: 80}, at_least: 12}
//!   - {growth: {class: regular, when: premium, from: 80, to: 240}, at_least: 32}
//!   - {prefix_count: {class: premium, n: 320}, minus: premium-vs-regular-equal.yaml, at_least: 60}
//!   - {latency: {class: premium, metric: ttft_ms_p99}, at_most: 500}
//!   - {token_share: {class: premium}, tolerance: 0.05}
//! ```
//!
//! `minus: OTHER.yaml` compares with the same figure measured on a companion scenario (a path
//! relative to this scenario's file): the bound applies to `this − other`.

use serde::{Deserialize, Serialize};

/// One expectation as written in a scenario. Exactly one figure key must be set.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawExpectation {
    /// An optional label for reports.
    pub name: Option<String>,
    /// How many of the first `n` completions belong to `class`.
    pub prefix_count: Option<PrefixCount>,
    /// How many requests of `class` are unfinished when `done` completes its `k`-th request
    /// (its last one when `k` is absent).
    pub remaining_when_done: Option<RemainingWhenDone>,
    /// How many requests of `class` have completed when `when` completes its `k`-th.
    pub count_at: Option<CountAt>,
    /// How many requests of `class` complete between `when`'s `from`-th and `to`-th completion.
    pub growth: Option<Growth>,
    /// A latency statistic of `class` (e.g. `ttft_ms_p99`, `e2e_ms_p50`, `queue_wait_ms_max`).
    pub latency: Option<LatencyFigure>,
    /// The gap between `class`'s share of uncached-token service and its ideal DRR share,
    /// over the windows in which two or more classes are backlogged.
    pub token_share: Option<TokenShare>,
    /// A companion scenario whose same figure is subtracted from this one's.
    pub minus: Option<String>,
    /// Inclusive range `[lo, hi]`.
    pub within: Option<[f64; 2]>,
    pub at_least: Option<f64>,
    pub at_most: Option<f64>,
    /// For `token_share`: the largest allowed absolute gap.
    pub tolerance: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixCount {
    pub class: String,
    pub n: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RemainingWhenDone {
    pub class: String,
    pub done: String,
    pub k: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CountAt {
    pub class: String,
    pub when: String,
    pub k: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Growth {
    pub class: String,
    pub when: String,
    pub from: u64,
    pub to: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyFigure {
    pub class: String,
    pub metric: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenShare {
    pub class: String,
}
