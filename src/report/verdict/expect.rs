//! Expectations a scenario states about its own results (`expect:`): the syntax as written
//! ([`RawExpectation`]) and the typed form ([`Expectation`]) it is parsed into once, at
//! scenario validation.
//!
//! Each expectation names exactly one *figure* (what is measured) and one *bound*:
//!
//! ```yaml
//! expect:
//!   - {prefix_count: {class: premium, n: 320}, within: [240, 320]}
//!   - {prefix_share: {class: premium, n: 200}, at_least: 0.75}
//!   - {remaining_when_done: {class: regular, done: premium}, within: [220, 260]}
//!   - {count_at: {class: regular, when: premium, k: 80}, at_least: 12}
//!   - {growth: {class: regular, when: premium, from: 80, to: 240}, at_least: 32}
//!   - {prefix_count: {class: premium, n: 320}, minus: premium-vs-regular-equal.yaml, at_least: 60}
//!   - {latency: {class: premium, metric: ttft_ms_p99}, at_most: 500}
//!   - {token_share: {class: premium}, tolerance: 0.05}
//!   - {token_share: {class: premium, at_least: 0.75}}
//!   - {token_share: {class: premium, target: 0.8}, tolerance: 0.03}
//!   - {attainment: {class: premium, ttft_ms: 2000, e2e_ms: 10000}, at_least: 0.99}
//!   - {throughput: {class: premium, metric: throughput_rps}, at_least: 10}
//!   - {throughput: {metric: output_tokens_per_s}, at_least: 4000}
//!   - {stable: true}
//!   - {count_status: {class: premium, status: aborted}, at_most: 0}
//!   - {count_status: {status: cancelled}, within: [10, 40]}
//!   - {migrations: {class: premium}, at_most: 50}
//!   - {latency: {class: chat, metric: followup_ttft_ms_p99}, at_most: 500}
//!   - {cache_hit: {class: chat}, at_least: 0.6}
//!   - {gpu_hours: {}, at_most: 2.5}
//!   - {peak_workers: {role: decode}, at_most: 6}
//! ```
//!
//! `minus: OTHER.yaml` compares with the same figure measured on a companion scenario (a path
//! relative to this scenario's file): the bound applies to `this − other`.
//!
//! [`Expectation::parse`] is the only way to build an [`Expectation`], so every value of that
//! type holds these rules: classes exist, counts start at 1, `growth` has `from < to`, the
//! latency metric is known, bounds are finite with `lo <= hi`, `tolerance` (>= 0) goes with
//! `token_share` only, a `prefix_share` or `cache_hit` bound lies in [0, 1] ([-1, 1] with
//! `minus`), an
//! `attainment` has a positive `ttft_ms` and/or `e2e_ms` and an `at_least` or `within` bound
//! in [0, 1], a throughput metric is known, `stable` is `true` with no bound or `minus`, and a
//! `count_status` status is one of completed, rejected, cancelled or aborted.

pub use crate::bounds::number;
use crate::mocker::WorkerRole;
use crate::report::measure::metrics::LatencyMetric;
use crate::report::measure::slo::ThroughputMetric;
use crate::sim::EndStatus;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One expectation as written in a scenario. Exactly one figure key must be set.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawExpectation {
    /// An optional label for reports.
    pub name: Option<String>,
    /// How many of the first `n` completions belong to `class`.
    pub prefix_count: Option<PrefixCount>,
    /// The fraction (in [0, 1]) of the first `n` completions that belong to `class`.
    pub prefix_share: Option<PrefixCount>,
    /// How many requests of `class` are unfinished when `done` completes its `k`-th request
    /// (its last one when `k` is absent).
    pub remaining_when_done: Option<RemainingWhenDone>,
    /// How many requests of `class` have completed when `when` completes its `k`-th.
    pub count_at: Option<CountAt>,
    /// How many requests of `class` complete between `when`'s `from`-th and `to`-th completion.
    pub growth: Option<Growth>,
    /// A latency statistic of `class` over its completed requests (e.g. `ttft_ms_p99`).
    pub latency: Option<LatencyFigure>,
    /// The gap between `class`'s share of uncached-token service and its ideal DRR share,
    /// over the windows in which two or more classes are backlogged.
    pub token_share: Option<TokenShare>,
    /// The fraction of `class`'s requests that completed within every given latency bound.
    pub attainment: Option<AttainmentFigure>,
    /// Completed requests or output tokens per second of `class` (all classes without one),
    /// over the run's measured window.
    pub throughput: Option<ThroughputFigure>,
    /// `true`: the run kept up with its offered load (not overloaded). Takes no bound.
    pub stable: Option<bool>,
    /// How many requests of `class` (all classes without one) ended with `status`.
    pub count_status: Option<CountStatusFigure>,
    /// Migrations off lost workers, summed over `class`'s requests (all classes without one).
    pub migrations: Option<MigrationsFigure>,
    /// Reused over input tokens of `class`'s completed requests (all classes without one).
    pub cache_hit: Option<MigrationsFigure>,
    /// GPU-hours of `role`'s workers (every worker without one), start-up and drain included.
    pub gpu_hours: Option<FleetFigure>,
    /// The most workers of `role` (every worker without one) billed at once.
    pub peak_workers: Option<FleetFigure>,
    /// A companion scenario whose same figure is subtracted from this one's.
    pub minus: Option<String>,
    /// Inclusive range `[lo, hi]`.
    pub within: Option<[f64; 2]>,
    pub at_least: Option<f64>,
    pub at_most: Option<f64>,
    /// For `token_share`: the largest allowed absolute gap.
    pub tolerance: Option<f64>,
}

/// `{class, n}`: the first `n` completions, for `prefix_count` and `prefix_share`.
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

/// `{class}`: the gap from the ideal DRR share (which moves with the quanta); with `at_least`
/// or `at_most`, the backlogged token share itself, bounded there (no outer bound); with
/// `target`, the gap from that fixed share (bounded outside, e.g. by `tolerance`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenShare {
    pub class: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_least: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_most: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<f64>,
}

/// What a `token_share` figure compares the class's backlogged token share with.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum ShareReference {
    /// The ideal DRR share of the current quanta: the figure is the gap from it.
    Ideal,
    /// A fixed share: the figure is the gap from it.
    Target(f64),
    /// Nothing: the figure is the share itself.
    Absolute,
}

/// `{class, ttft_ms, e2e_ms}`: at least one bound, in ms.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AttainmentFigure {
    pub class: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

/// `{class, metric}`: `metric` is `throughput_rps` or `output_tokens_per_s`; no `class`
/// means every class together.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ThroughputFigure {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    pub metric: String,
}

/// `{class, status}`: `status` is completed, rejected, cancelled or aborted; no `class` means
/// every class together.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CountStatusFigure {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    pub status: String,
}

/// `{class}`: no `class` (`migrations: {}`, `cache_hit: {}`) means every class together.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MigrationsFigure {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
}

/// `{role}`: `aggregated`, `prefill` or `decode`; none (`gpu_hours: {}`) means every worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FleetFigure {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// The ends `count_status` can count. `pending` (a run stopped by a limit) is left out on
/// purpose: a gate on requests a limit cut off would judge the limit, not the system.
pub const COUNTABLE_ENDS: [EndStatus; 4] = [
    EndStatus::Completed,
    EndStatus::Rejected,
    EndStatus::Cancelled,
    EndStatus::Aborted,
];

/// What an expectation measures on a run. Classes are names from the scenario's class table:
/// a companion's run may order its classes differently, so evaluation looks them up by name.
#[derive(Clone, Debug, PartialEq)]
pub enum Figure {
    /// Completions of `class` among the first `n` completions (all of them when fewer).
    PrefixCount { class: String, n: u64 },
    /// `class`'s fraction of the first `n` completions; unmeasurable when fewer than `n`
    /// requests completed.
    PrefixShare { class: String, n: u64 },
    /// Requests of `class` unfinished when `done` completes its `k`-th (`None`: last) request.
    RemainingWhenDone {
        class: String,
        done: String,
        k: Option<u64>,
    },
    /// Completions of `class` when `when` completes its `k`-th request.
    CountAt { class: String, when: String, k: u64 },
    /// Completions of `class` between `when`'s `from`-th and `to`-th completions (`from < to`).
    Growth {
        class: String,
        when: String,
        from: u64,
        to: u64,
    },
    /// A latency statistic of `class`, in ms.
    Latency {
        class: String,
        metric: LatencyMetric,
    },
    /// `class`'s backlogged token share, minus its ideal DRR share or a fixed target, or
    /// itself ([`ShareReference`]).
    TokenShare {
        class: String,
        reference: ShareReference,
    },
    /// The fraction of `class`'s requests completed within every given bound (ms; at least
    /// one is set).
    Attainment {
        class: String,
        ttft_ms: Option<f64>,
        e2e_ms: Option<f64>,
    },
    /// Throughput of `class` (every class for `None`) over the measured window.
    Throughput {
        class: Option<String>,
        metric: ThroughputMetric,
    },
    /// 1 when the run kept up with its offered load, 0 when overloaded; always bound
    /// `at least 1`.
    Stable,
    /// Requests of `class` (every class for `None`) that ended with `status`.
    CountStatus {
        class: Option<String>,
        status: EndStatus,
    },
    /// Migrations of `class`'s requests (every class for `None`), summed.
    Migrations { class: Option<String> },
    /// The prefix-cache hit rate of `class`'s completed requests (every class for `None`):
    /// reused over input tokens.
    CacheHit { class: Option<String> },
    /// GPU-hours of `role`'s workers (every worker for `None`).
    GpuHours { role: Option<WorkerRole> },
    /// The most workers of `role` (every worker for `None`) billed at once.
    PeakWorkers { role: Option<WorkerRole> },
}

/// The range a figure must fall in; every value is finite.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Bound {
    AtLeast(f64),
    AtMost(f64),
    /// Inclusive, `lo <= hi`.
    Within {
        lo: f64,
        hi: f64,
    },
    /// `|value| <= tolerance`, for `token_share` only.
    Tolerance(f64),
}

/// The scenario named by `minus:`, exactly as written (relative to the scenario's directory):
/// its run's same figure is subtracted from this run's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Companion {
    pub file: String,
}

/// One validated expectation. Fields are private: [`Expectation::parse`] is the only
/// constructor, so the rules in the module doc hold for every value.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(into = "RawExpectation")]
pub struct Expectation {
    name: Option<String>,
    figure: Figure,
    bound: Bound,
    companion: Option<Companion>,
}

/// A problem with one expectation, naming the field at fault (e.g. `prefix_count.class`;
/// empty for the entry as a whole). The scenario loader adds file and line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectationError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for ExpectationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field.is_empty() {
            true => f.write_str(&self.message),
            false => write!(f, "{}: {}", self.field, self.message),
        }
    }
}

impl std::error::Error for ExpectationError {}

fn invalid(field: &str, message: impl Into<String>) -> ExpectationError {
    ExpectationError {
        field: field.to_string(),
        message: message.into(),
    }
}

/// The figure keys, in the order errors list them.
const FIGURE_KEYS: &str = "prefix_count, prefix_share, remaining_when_done, count_at, growth, \
     latency, token_share, attainment, throughput, stable, count_status, migrations, cache_hit, \
     gpu_hours or peak_workers";

impl Expectation {
    /// Parses one `expect:` entry and checks it against the scenario's class names: the one
    /// place expectations are validated.
    pub fn parse(
        raw: &RawExpectation,
        class_names: &[String],
    ) -> Result<Expectation, ExpectationError> {
        let figure = match raw.figures()[..] {
            [(_, RawFigure::Stable(stable))] => return parse_stable(raw, stable),
            [(_, figure)] => figure,
            ref figures => {
                let keys: Vec<&str> = figures.iter().map(|&(key, _)| key).collect();
                let found = describe_keys(&keys);
                let message = format!("needs exactly one figure ({FIGURE_KEYS}), found {found}");
                return Err(invalid("", message));
            }
        };
        let bound = match figure {
            RawFigure::TokenShare(f) => parse_share_bound(raw, f)?,
            _ => None,
        };
        let bound = bound.map_or_else(|| parse_bound(raw), Ok)?;
        let figure = parse_figure(figure, class_names)?;
        let companion = parse_companion(raw)?;
        check_bound_fits(&figure, bound, companion.is_some())?;
        Ok(Expectation {
            name: raw.name.clone(),
            figure,
            bound,
            companion,
        })
    }

    /// The `name` written in the scenario, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    pub fn figure(&self) -> &Figure {
        &self.figure
    }

    pub fn bound(&self) -> Bound {
        self.bound
    }

    pub fn companion(&self) -> Option<&Companion> {
        self.companion.as_ref()
    }

    /// The `name`, or a description of the figure (with ` minus OTHER`), for reports.
    pub fn label(&self) -> String {
        match (&self.name, &self.companion) {
            (Some(name), _) => name.clone(),
            (None, Some(other)) => format!("{} minus {}", self.figure, other.file),
            (None, None) => self.figure.to_string(),
        }
    }
}

/// One figure as written: the figure key set in a [`RawExpectation`], with its fields.
#[derive(Clone, Copy, Debug)]
enum RawFigure<'a> {
    PrefixCount(&'a PrefixCount),
    PrefixShare(&'a PrefixCount),
    RemainingWhenDone(&'a RemainingWhenDone),
    CountAt(&'a CountAt),
    Growth(&'a Growth),
    Latency(&'a LatencyFigure),
    TokenShare(&'a TokenShare),
    Attainment(&'a AttainmentFigure),
    Throughput(&'a ThroughputFigure),
    Stable(bool),
    CountStatus(&'a CountStatusFigure),
    Migrations(&'a MigrationsFigure),
    CacheHit(&'a MigrationsFigure),
    GpuHours(&'a FleetFigure),
    PeakWorkers(&'a FleetFigure),
}

impl RawExpectation {
    /// Every figure that is set, with its key, in [`FIGURE_KEYS`] order (a valid entry has
    /// exactly one).
    fn figures(&self) -> Vec<(&'static str, RawFigure<'_>)> {
        use RawFigure as F;
        let figures = [
            (
                "prefix_count",
                self.prefix_count.as_ref().map(F::PrefixCount),
            ),
            (
                "prefix_share",
                self.prefix_share.as_ref().map(F::PrefixShare),
            ),
            (
                "remaining_when_done",
                self.remaining_when_done.as_ref().map(F::RemainingWhenDone),
            ),
            ("count_at", self.count_at.as_ref().map(F::CountAt)),
            ("growth", self.growth.as_ref().map(F::Growth)),
            ("latency", self.latency.as_ref().map(F::Latency)),
            ("token_share", self.token_share.as_ref().map(F::TokenShare)),
            ("attainment", self.attainment.as_ref().map(F::Attainment)),
            ("throughput", self.throughput.as_ref().map(F::Throughput)),
            ("stable", self.stable.map(F::Stable)),
            (
                "count_status",
                self.count_status.as_ref().map(F::CountStatus),
            ),
            ("migrations", self.migrations.as_ref().map(F::Migrations)),
            ("cache_hit", self.cache_hit.as_ref().map(F::CacheHit)),
            ("gpu_hours", self.gpu_hours.as_ref().map(F::GpuHours)),
            (
                "peak_workers",
                self.peak_workers.as_ref().map(F::PeakWorkers),
            ),
        ];
        let set = figures.into_iter().filter_map(|(key, f)| Some((key, f?)));
        set.collect()
    }
}

/// The bound keys that are set, by name.
fn bounds_set(e: &RawExpectation) -> Vec<&'static str> {
    [
        ("within", e.within.is_some()),
        ("at_least", e.at_least.is_some()),
        ("at_most", e.at_most.is_some()),
        ("tolerance", e.tolerance.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect()
}

fn describe_keys(keys: &[&str]) -> String {
    match keys.is_empty() {
        true => "none".to_string(),
        false => keys.join(", "),
    }
}

fn parse_bound(raw: &RawExpectation) -> Result<Bound, ExpectationError> {
    let keys = bounds_set(raw);
    if keys.len() != 1 {
        return Err(invalid(
            "",
            format!(
                "needs exactly one bound (within, at_least, at_most or tolerance), found {}",
                describe_keys(&keys)
            ),
        ));
    }
    if let Some([lo, hi]) = raw.within {
        if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
            let message = format!(
                "needs finite lo <= hi, got [{}, {}]",
                number(lo),
                number(hi)
            );
            return Err(invalid("within", message));
        }
        return Ok(Bound::Within { lo, hi });
    }
    if let Some(v) = raw.at_least {
        return finite("at_least", v).map(Bound::AtLeast);
    }
    if let Some(v) = raw.at_most {
        return finite("at_most", v).map(Bound::AtMost);
    }
    let tolerance = raw.tolerance.unwrap_or_default();
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        let message = format!("must be finite and >= 0, got {tolerance}");
        return Err(invalid("tolerance", message));
    }
    Ok(Bound::Tolerance(tolerance))
}

/// The bound written inside a `token_share` figure (`at_least` or `at_most`, an absolute
/// share in [0, 1]), if any: then no bound may stand outside it. At most one of `at_least`,
/// `at_most` and `target` is set, each a fraction.
fn parse_share_bound(
    raw: &RawExpectation,
    f: &TokenShare,
) -> Result<Option<Bound>, ExpectationError> {
    let inner = [
        ("token_share.at_least", f.at_least),
        ("token_share.at_most", f.at_most),
        ("token_share.target", f.target),
    ];
    let set: Vec<(&str, f64)> = inner
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect();
    if let [_, (second, _), ..] = set[..] {
        let message = "takes one of at_least, at_most or target";
        return Err(invalid(second, message));
    }
    let Some(&(field, v)) = set.first() else {
        return Ok(None);
    };
    if !(0.0..=1.0).contains(&v) {
        let message = format!("a share is a fraction in [0, 1], got {}", number(v));
        return Err(invalid(field, message));
    }
    let bound = match field {
        "token_share.at_least" => Bound::AtLeast(v),
        "token_share.at_most" => Bound::AtMost(v),
        _ => return Ok(None),
    };
    if let Some(key) = bounds_set(raw).first() {
        let message = format!("{field} is the bound already");
        return Err(invalid(key, message));
    }
    Ok(Some(bound))
}

fn finite(field: &str, v: f64) -> Result<f64, ExpectationError> {
    match v.is_finite() {
        true => Ok(v),
        false => Err(invalid(field, format!("must be finite, got {v}"))),
    }
}

/// The figure written, its classes and counts checked: one validator per kind.
fn parse_figure(raw: RawFigure, class_names: &[String]) -> Result<Figure, ExpectationError> {
    let class = |field: &str, name: &str| known_class(field, name, class_names);
    match raw {
        RawFigure::PrefixCount(f) => Ok(Figure::PrefixCount {
            class: class("prefix_count.class", &f.class)?,
            n: at_least_one("prefix_count.n", f.n)?,
        }),
        RawFigure::PrefixShare(f) => Ok(Figure::PrefixShare {
            class: class("prefix_share.class", &f.class)?,
            n: at_least_one("prefix_share.n", f.n)?,
        }),
        RawFigure::RemainingWhenDone(f) => parse_remaining_when_done(f, class_names),
        RawFigure::CountAt(f) => Ok(Figure::CountAt {
            class: class("count_at.class", &f.class)?,
            when: class("count_at.when", &f.when)?,
            k: at_least_one("count_at.k", f.k)?,
        }),
        RawFigure::Growth(f) => parse_growth(f, class_names),
        RawFigure::Latency(f) => Ok(Figure::Latency {
            class: class("latency.class", &f.class)?,
            metric: parse_metric(&f.metric)?,
        }),
        RawFigure::TokenShare(f) => Ok(Figure::TokenShare {
            class: class("token_share.class", &f.class)?,
            reference: match (f.target, f.at_least.or(f.at_most)) {
                (Some(target), _) => ShareReference::Target(target),
                (None, Some(_)) => ShareReference::Absolute,
                (None, None) => ShareReference::Ideal,
            },
        }),
        RawFigure::Attainment(f) => parse_attainment(f, class_names),
        RawFigure::Throughput(f) => parse_throughput(f, class_names),
        // `Expectation::parse` takes `stable` first: it is its own bound.
        RawFigure::Stable(_) => Ok(Figure::Stable),
        RawFigure::CountStatus(f) => parse_count_status(f, class_names),
        RawFigure::Migrations(f) => Ok(Figure::Migrations {
            class: optional_class("migrations.class", f.class.as_deref(), class_names)?,
        }),
        RawFigure::CacheHit(f) => Ok(Figure::CacheHit {
            class: optional_class("cache_hit.class", f.class.as_deref(), class_names)?,
        }),
        RawFigure::GpuHours(f) => Ok(Figure::GpuHours {
            role: optional_role("gpu_hours.role", f.role.as_deref())?,
        }),
        RawFigure::PeakWorkers(f) => Ok(Figure::PeakWorkers {
            role: optional_role("peak_workers.role", f.role.as_deref())?,
        }),
    }
}

/// A worker role by its name, if one is given.
fn optional_role(field: &str, name: Option<&str>) -> Result<Option<WorkerRole>, ExpectationError> {
    let Some(name) = name else { return Ok(None) };
    let roles = [
        WorkerRole::Aggregated,
        WorkerRole::Prefill,
        WorkerRole::Decode,
    ];
    match roles.into_iter().find(|r| r.label() == name) {
        Some(role) => Ok(Some(role)),
        None => Err(invalid(
            field,
            format!("unknown role `{name}` (known: aggregated, prefill, decode)"),
        )),
    }
}

fn parse_remaining_when_done(
    f: &RemainingWhenDone,
    class_names: &[String],
) -> Result<Figure, ExpectationError> {
    Ok(Figure::RemainingWhenDone {
        class: known_class("remaining_when_done.class", &f.class, class_names)?,
        done: known_class("remaining_when_done.done", &f.done, class_names)?,
        k: f.k
            .map(|k| at_least_one("remaining_when_done.k", k))
            .transpose()?,
    })
}

/// `stable: true` is a figure and its own bound: a verdict has nothing to be compared with,
/// and demanding an overloaded run (`false`) states nothing a capacity plan could use.
fn parse_stable(raw: &RawExpectation, stable: bool) -> Result<Expectation, ExpectationError> {
    if !stable {
        return Err(invalid("stable", "only `stable: true` can be demanded"));
    }
    if let Some(key) = bounds_set(raw).first() {
        return Err(invalid(key, "`stable: true` takes no bound"));
    }
    if raw.minus.is_some() {
        return Err(invalid(
            "minus",
            "`stable: true` compares with no companion",
        ));
    }
    Ok(Expectation {
        name: raw.name.clone(),
        figure: Figure::Stable,
        bound: Bound::AtLeast(1.0),
        companion: None,
    })
}

fn parse_attainment(
    f: &AttainmentFigure,
    class_names: &[String],
) -> Result<Figure, ExpectationError> {
    let class = known_class("attainment.class", &f.class, class_names)?;
    if f.ttft_ms.is_none() && f.e2e_ms.is_none() {
        return Err(invalid("attainment", "needs ttft_ms, e2e_ms or both"));
    }
    let ttft_ms = f
        .ttft_ms
        .map(|v| positive_ms("attainment.ttft_ms", v))
        .transpose()?;
    let e2e_ms = f
        .e2e_ms
        .map(|v| positive_ms("attainment.e2e_ms", v))
        .transpose()?;
    Ok(Figure::Attainment {
        class,
        ttft_ms,
        e2e_ms,
    })
}

fn positive_ms(field: &str, v: f64) -> Result<f64, ExpectationError> {
    match v.is_finite() && v > 0.0 {
        true => Ok(v),
        false => Err(invalid(
            field,
            format!("must be a finite number of ms > 0, got {}", number(v)),
        )),
    }
}

fn parse_throughput(
    f: &ThroughputFigure,
    class_names: &[String],
) -> Result<Figure, ExpectationError> {
    let class = f
        .class
        .as_deref()
        .map(|c| known_class("throughput.class", c, class_names))
        .transpose()?;
    let metric = ThroughputMetric::parse(&f.metric).ok_or_else(|| {
        let known = ThroughputMetric::ALL.map(ThroughputMetric::name).join(", ");
        let message = format!("unknown metric `{}` (known: {known})", f.metric);
        invalid("throughput.metric", message)
    })?;
    Ok(Figure::Throughput { class, metric })
}

fn parse_count_status(
    f: &CountStatusFigure,
    class_names: &[String],
) -> Result<Figure, ExpectationError> {
    let class = optional_class("count_status.class", f.class.as_deref(), class_names)?;
    let countable = EndStatus::parse(&f.status).filter(|s| COUNTABLE_ENDS.contains(s));
    let status = countable.ok_or_else(|| {
        let known = COUNTABLE_ENDS.map(EndStatus::label).join(", ");
        let message = format!("unknown status `{}` (known: {known})", f.status);
        invalid("count_status.status", message)
    })?;
    Ok(Figure::CountStatus { class, status })
}

/// A class that may be left out (every class together), checked when given.
fn optional_class(
    field: &str,
    name: Option<&str>,
    class_names: &[String],
) -> Result<Option<String>, ExpectationError> {
    name.map(|c| known_class(field, c, class_names)).transpose()
}

/// `growth` counts completions strictly between two points of `when`'s completions, so it
/// needs `1 <= from < to`: with `from == to` it is 0 whatever the scheduler does.
fn parse_growth(f: &Growth, class_names: &[String]) -> Result<Figure, ExpectationError> {
    let class = known_class("growth.class", &f.class, class_names)?;
    let when = known_class("growth.when", &f.when, class_names)?;
    let from = at_least_one("growth.from", f.from)?;
    if f.to <= from {
        let message = format!("must be greater than from ({from}), got {}", f.to);
        return Err(invalid("growth.to", message));
    }
    Ok(Figure::Growth {
        class,
        when,
        from,
        to: f.to,
    })
}

fn known_class(
    field: &str,
    name: &str,
    class_names: &[String],
) -> Result<String, ExpectationError> {
    if class_names.iter().any(|c| c == name) {
        return Ok(name.to_string());
    }
    Err(invalid(
        field,
        format!(
            "unknown class `{name}`: the scenario's classes are {}",
            class_names.join(", ")
        ),
    ))
}

fn at_least_one(field: &str, v: u64) -> Result<u64, ExpectationError> {
    match v {
        0 => Err(invalid(field, "must be at least 1")),
        _ => Ok(v),
    }
}

fn parse_metric(name: &str) -> Result<LatencyMetric, ExpectationError> {
    LatencyMetric::parse(name).ok_or_else(|| {
        let known = LatencyMetric::all_names().join(", ");
        invalid(
            "latency.metric",
            format!("unknown metric `{name}` (known: {known})"),
        )
    })
}

fn parse_companion(raw: &RawExpectation) -> Result<Option<Companion>, ExpectationError> {
    match &raw.minus {
        Some(file) if file.trim().is_empty() => {
            Err(invalid("minus", "names no companion scenario"))
        }
        Some(file) => Ok(Some(Companion { file: file.clone() })),
        None => Ok(None),
    }
}

/// The bound suits the figure: `tolerance` only for `token_share`, and a share's bound is a
/// fraction (a difference of two fractions with `minus`), so "75" for 75% is refused.
fn check_bound_fits(
    figure: &Figure,
    bound: Bound,
    has_companion: bool,
) -> Result<(), ExpectationError> {
    let is_token_share = matches!(figure, Figure::TokenShare { .. });
    if matches!(bound, Bound::Tolerance(_)) && !is_token_share {
        let message = format!("applies to token_share only, not {}", figure.key());
        return Err(invalid("tolerance", message));
    }
    let is_attainment = matches!(figure, Figure::Attainment { .. });
    if is_attainment && matches!(bound, Bound::AtMost(_)) {
        let message = "an attainment goal is at_least or within, not at_most";
        return Err(invalid("at_most", message));
    }
    let is_fraction = matches!(figure, Figure::PrefixShare { .. } | Figure::CacheHit { .. });
    if !is_fraction && !is_attainment {
        return Ok(());
    }
    let (lowest, range) = match (has_companion, is_attainment) {
        (false, false) => (0.0, "a share is a fraction in [0, 1]"),
        (true, false) => (-1.0, "a difference of two shares lies in [-1, 1]"),
        (false, true) => (0.0, "an attainment is a fraction in [0, 1]"),
        (true, true) => (-1.0, "a difference of two attainments lies in [-1, 1]"),
    };
    match bound
        .values()
        .into_iter()
        .find(|v| !(lowest..=1.0).contains(v))
    {
        Some(v) => Err(invalid(bound.key(), format!("{range}, got {}", number(v)))),
        None => Ok(()),
    }
}

impl Figure {
    /// The key this figure is written under, e.g. `prefix_count`.
    pub fn key(&self) -> &'static str {
        match self {
            Figure::PrefixCount { .. } => "prefix_count",
            Figure::PrefixShare { .. } => "prefix_share",
            Figure::RemainingWhenDone { .. } => "remaining_when_done",
            Figure::CountAt { .. } => "count_at",
            Figure::Growth { .. } => "growth",
            Figure::Latency { .. } => "latency",
            Figure::TokenShare { .. } => "token_share",
            Figure::Attainment { .. } => "attainment",
            Figure::Throughput { .. } => "throughput",
            Figure::Stable => "stable",
            Figure::CountStatus { .. } => "count_status",
            Figure::Migrations { .. } => "migrations",
            Figure::CacheHit { .. } => "cache_hit",
            Figure::GpuHours { .. } => "gpu_hours",
            Figure::PeakWorkers { .. } => "peak_workers",
        }
    }
}

/// How reports describe a figure, e.g. `premium among first 320`.
impl fmt::Display for Figure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Figure::PrefixCount { class, n } => write!(f, "{class} among first {n}"),
            Figure::PrefixShare { class, n } => write!(f, "{class} share of first {n}"),
            Figure::RemainingWhenDone { class, done, k } => match k {
                None => write!(f, "{class} remaining when {done} done"),
                Some(k) => write!(
                    f,
                    "{class} remaining at {done}'s {} completion",
                    ordinal(*k)
                ),
            },
            Figure::CountAt { class, when, k } => {
                write!(
                    f,
                    "{class} completed at {when}'s {} completion",
                    ordinal(*k)
                )
            }
            Figure::Growth {
                class,
                when,
                from,
                to,
            } => write!(
                f,
                "{class} completed between {when}'s {} and {} completions",
                ordinal(*from),
                ordinal(*to)
            ),
            Figure::Latency { class, metric } => write!(f, "{class} {}", metric.name()),
            Figure::TokenShare { class, reference } => match reference {
                ShareReference::Ideal => write!(f, "{class} token share minus ideal (backlogged)"),
                ShareReference::Target(target) => {
                    let target = number(*target);
                    write!(f, "{class} token share minus {target} (backlogged)")
                }
                ShareReference::Absolute => write!(f, "{class} token share (backlogged)"),
            },
            Figure::Attainment {
                class,
                ttft_ms,
                e2e_ms,
            } => {
                let bounds: Vec<String> = [("ttft", ttft_ms), ("e2e", e2e_ms)]
                    .into_iter()
                    .filter_map(|(name, v)| v.map(|v| format!("{name} <= {} ms", number(v))))
                    .collect();
                write!(f, "{class} attainment ({})", bounds.join(", "))
            }
            Figure::Throughput { class, metric } => {
                let class = class.as_deref().unwrap_or("total");
                write!(f, "{class} {}", metric.name())
            }
            Figure::Stable => write!(f, "keeps up with the offered load"),
            Figure::CountStatus { class, status } => {
                let class = class.as_deref().unwrap_or("total");
                write!(f, "{class} {} requests", status.label())
            }
            Figure::Migrations { class } => {
                let class = class.as_deref().unwrap_or("total");
                write!(f, "{class} migrations")
            }
            Figure::CacheHit { class } => {
                let class = class.as_deref().unwrap_or("total");
                write!(f, "{class} cache hit (reused / input tokens)")
            }
            Figure::GpuHours { role } => {
                let role = role.map_or("total", WorkerRole::label);
                write!(f, "{role} GPU-hours")
            }
            Figure::PeakWorkers { role } => {
                let role = role.map_or("total", WorkerRole::label);
                write!(f, "{role} peak workers")
            }
        }
    }
}

impl Bound {
    /// Whether `value` is inside the bound (NaN never is).
    pub fn holds(self, value: f64) -> bool {
        match self {
            Bound::AtLeast(lo) => value >= lo,
            Bound::AtMost(hi) => value <= hi,
            Bound::Within { lo, hi } => lo <= value && value <= hi,
            Bound::Tolerance(tolerance) => value.abs() <= tolerance,
        }
    }

    /// How far inside the bound `value` is: >= 0 exactly when it holds, negative outside
    /// (NaN for NaN). Ranks values from worst to best, e.g. across seeds.
    pub fn margin(self, value: f64) -> f64 {
        match self {
            Bound::AtLeast(lo) => value - lo,
            Bound::AtMost(hi) => hi - value,
            Bound::Within { lo, hi } => (value - lo).min(hi - value),
            Bound::Tolerance(tolerance) => tolerance - value.abs(),
        }
    }

    /// The key this bound is written under, e.g. `at_least`.
    pub fn key(self) -> &'static str {
        match self {
            Bound::AtLeast(_) => "at_least",
            Bound::AtMost(_) => "at_most",
            Bound::Within { .. } => "within",
            Bound::Tolerance(_) => "tolerance",
        }
    }

    fn values(self) -> Vec<f64> {
        match self {
            Bound::AtLeast(v) | Bound::AtMost(v) | Bound::Tolerance(v) => vec![v],
            Bound::Within { lo, hi } => vec![lo, hi],
        }
    }
}

/// The bound as reports print it: `within [240, 320]`, `at least 60`, `at most 500`,
/// `within ±0.05`.
impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Bound::Within { lo, hi } => write!(f, "within [{}, {}]", number(lo), number(hi)),
            Bound::AtLeast(lo) => write!(f, "at least {}", number(lo)),
            Bound::AtMost(hi) => write!(f, "at most {}", number(hi)),
            Bound::Tolerance(tolerance) => write!(f, "within ±{}", number(tolerance)),
        }
    }
}

/// Back to the syntax: what `validate` prints, and a check that parsing lost nothing.
impl From<Expectation> for RawExpectation {
    fn from(e: Expectation) -> RawExpectation {
        let mut raw = RawExpectation {
            name: e.name,
            minus: e.companion.map(|c| c.file),
            ..RawExpectation::default()
        };
        if e.figure == Figure::Stable {
            raw.stable = Some(true);
            return raw;
        }
        let absolute = matches!(
            e.figure,
            Figure::TokenShare {
                reference: ShareReference::Absolute,
                ..
            }
        );
        set_raw_figure(&mut raw, e.figure);
        if let (true, Some(share)) = (absolute, raw.token_share.as_mut()) {
            match e.bound {
                Bound::AtLeast(v) => share.at_least = Some(v),
                _ => share.at_most = e.bound.values().first().copied(),
            }
            return raw;
        }
        match e.bound {
            Bound::AtLeast(v) => raw.at_least = Some(v),
            Bound::AtMost(v) => raw.at_most = Some(v),
            Bound::Within { lo, hi } => raw.within = Some([lo, hi]),
            Bound::Tolerance(v) => raw.tolerance = Some(v),
        }
        raw
    }
}

fn set_raw_figure(raw: &mut RawExpectation, figure: Figure) {
    match figure {
        Figure::PrefixCount { class, n } => raw.prefix_count = Some(PrefixCount { class, n }),
        Figure::PrefixShare { class, n } => raw.prefix_share = Some(PrefixCount { class, n }),
        Figure::RemainingWhenDone { class, done, k } => {
            raw.remaining_when_done = Some(RemainingWhenDone { class, done, k })
        }
        Figure::CountAt { class, when, k } => raw.count_at = Some(CountAt { class, when, k }),
        Figure::Growth {
            class,
            when,
            from,
            to,
        } => {
            raw.growth = Some(Growth {
                class,
                when,
                from,
                to,
            })
        }
        Figure::Latency { class, metric } => {
            let metric = metric.name();
            raw.latency = Some(LatencyFigure { class, metric })
        }
        Figure::TokenShare { class, reference } => {
            raw.token_share = Some(TokenShare {
                class,
                at_least: None,
                at_most: None,
                target: match reference {
                    ShareReference::Target(v) => Some(v),
                    _ => None,
                },
            })
        }
        Figure::Attainment {
            class,
            ttft_ms,
            e2e_ms,
        } => {
            raw.attainment = Some(AttainmentFigure {
                class,
                ttft_ms,
                e2e_ms,
            })
        }
        Figure::Throughput { class, metric } => {
            let metric = metric.name().to_string();
            raw.throughput = Some(ThroughputFigure { class, metric })
        }
        Figure::Stable => raw.stable = Some(true),
        Figure::CountStatus { class, status } => {
            let status = status.label().to_string();
            raw.count_status = Some(CountStatusFigure { class, status })
        }
        Figure::Migrations { class } => raw.migrations = Some(MigrationsFigure { class }),
        Figure::CacheHit { class } => raw.cache_hit = Some(MigrationsFigure { class }),
        Figure::GpuHours { role } => {
            let role = role.map(|r| r.label().to_string());
            raw.gpu_hours = Some(FleetFigure { role })
        }
        Figure::PeakWorkers { role } => {
            let role = role.map(|r| r.label().to_string());
            raw.peak_workers = Some(FleetFigure { role })
        }
    }
}

fn ordinal(k: u64) -> String {
    let suffix = match (k % 10, k % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{k}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::measure::latency::Stat;
    use crate::report::measure::metrics::LatencyKind;

    fn classes() -> Vec<String> {
        vec!["premium".into(), "regular".into()]
    }

    fn parse(yaml: &str) -> Result<Expectation, ExpectationError> {
        let raw: RawExpectation = serde_saphyr::from_str(yaml).unwrap();
        Expectation::parse(&raw, &classes())
    }

    fn figure_of(yaml: &str) -> Figure {
        parse(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}")).figure
    }

    fn field_of(yaml: &str) -> String {
        parse(yaml).unwrap_err().field
    }

    const DOCUMENTED: [&str; 10] = [
        "{prefix_count: {class: premium, n: 320}, within: [240, 320]}",
        "{prefix_share: {class: premium, n: 200}, at_least: 0.75}",
        "{name: half, prefix_share: {class: premium, n: 200}, minus: eq.yaml, at_least: -0.5}",
        "{remaining_when_done: {class: regular, done: premium}, within: [220, 260]}",
        "{remaining_when_done: {class: regular, done: premium, k: 5}, at_most: 3}",
        "{count_at: {class: regular, when: premium, k: 80}, at_least: 12}",
        "{growth: {class: regular, when: premium, from: 80, to: 240}, at_least: 32}",
        "{prefix_count: {class: premium, n: 320}, minus: eq.yaml, at_least: 60}",
        "{latency: {class: premium, metric: ttft_ms_p99}, at_most: 500}",
        "{token_share: {class: premium}, tolerance: 0.05}",
    ];

    #[test]
    fn every_documented_form_parses_and_prints_back_as_written() {
        for yaml in DOCUMENTED {
            let raw: RawExpectation = serde_saphyr::from_str(yaml).unwrap();
            let typed = Expectation::parse(&raw, &classes()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(RawExpectation::from(typed), raw, "{yaml}");
        }
    }

    #[test]
    fn each_figure_parses_to_its_typed_value() {
        let (premium, regular) = ("premium".to_string(), "regular".to_string());
        assert_eq!(
            figure_of(DOCUMENTED[0]),
            Figure::PrefixCount {
                class: premium.clone(),
                n: 320
            }
        );
        assert_eq!(
            figure_of(DOCUMENTED[1]),
            Figure::PrefixShare {
                class: premium.clone(),
                n: 200
            }
        );
        assert_eq!(
            figure_of(DOCUMENTED[4]),
            Figure::RemainingWhenDone {
                class: regular.clone(),
                done: premium.clone(),
                k: Some(5)
            }
        );
        assert_eq!(
            figure_of(DOCUMENTED[5]),
            Figure::CountAt {
                class: regular.clone(),
                when: premium.clone(),
                k: 80
            }
        );
        assert_eq!(
            figure_of(DOCUMENTED[6]),
            Figure::Growth {
                class: regular,
                when: premium.clone(),
                from: 80,
                to: 240
            }
        );
        let metric = LatencyMetric {
            kind: LatencyKind::Ttft,
            stat: Stat::P99,
        };
        assert_eq!(
            figure_of(DOCUMENTED[8]),
            Figure::Latency {
                class: premium.clone(),
                metric
            }
        );
        assert_eq!(
            figure_of(DOCUMENTED[9]),
            Figure::TokenShare {
                class: premium,
                reference: ShareReference::Ideal
            }
        );
    }

    #[test]
    fn token_share_takes_an_absolute_bound_or_a_fixed_target() {
        let at_least = parse("{token_share: {class: premium, at_least: 0.75}}").unwrap();
        assert_eq!(at_least.bound(), Bound::AtLeast(0.75));
        assert_eq!(at_least.label(), "premium token share (backlogged)");
        let target = parse("{token_share: {class: premium, target: 0.8}, tolerance: 0.03}");
        let target = target.unwrap();
        assert_eq!(target.bound(), Bound::Tolerance(0.03));
        assert_eq!(target.label(), "premium token share minus 0.8 (backlogged)");
        for e in [at_least, target] {
            let raw = RawExpectation::from(e.clone());
            assert_eq!(
                Expectation::parse(&raw, &classes()).unwrap(),
                e,
                "round trip"
            );
        }
        let at_most = parse("{token_share: {class: premium, at_most: 0.9}}").unwrap();
        assert_eq!(at_most.bound(), Bound::AtMost(0.9));
        for (yaml, field) in [
            (
                "{token_share: {class: premium, at_least: 75}}",
                "token_share.at_least",
            ),
            (
                "{token_share: {class: premium, at_least: 0.7}, at_most: 0.9}",
                "at_most",
            ),
            (
                "{token_share: {class: premium, at_least: 0.7, target: 0.8}}",
                "token_share.target",
            ),
            ("{token_share: {class: premium, target: 0.8}}", ""),
        ] {
            assert_eq!(field_of(yaml), field, "{yaml}");
        }
    }

    #[test]
    fn bounds_names_and_companions_are_typed() {
        let e = parse(DOCUMENTED[2]).unwrap();
        assert_eq!(e.bound(), Bound::AtLeast(-0.5));
        assert_eq!(e.name(), Some("half"));
        assert_eq!(e.companion().map(|c| c.file.as_str()), Some("eq.yaml"));
        assert_eq!(
            parse(DOCUMENTED[0]).unwrap().bound(),
            Bound::Within {
                lo: 240.0,
                hi: 320.0
            }
        );
        assert_eq!(parse(DOCUMENTED[8]).unwrap().bound(), Bound::AtMost(500.0));
        assert_eq!(
            parse(DOCUMENTED[9]).unwrap().bound(),
            Bound::Tolerance(0.05)
        );
    }

    #[test]
    fn exactly_one_figure() {
        let err = parse("{at_most: 5}").unwrap_err();
        assert_eq!(err.field, "");
        assert!(err.message.ends_with("found none"), "{err}");
        let both =
            "{prefix_count: {class: premium, n: 3}, token_share: {class: premium}, at_most: 5}";
        let err = parse(both).unwrap_err();
        assert!(
            err.message.ends_with("found prefix_count, token_share"),
            "{err}"
        );
    }

    #[test]
    fn exactly_one_sound_bound() {
        let err = parse("{prefix_count: {class: premium, n: 3}}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "needs exactly one bound (within, at_least, at_most or tolerance), found none"
        );
        let two = "{prefix_count: {class: premium, n: 3}, at_least: 1, at_most: 2}";
        assert!(
            parse(two)
                .unwrap_err()
                .message
                .ends_with("found at_least, at_most")
        );
        let err = parse("{prefix_count: {class: premium, n: 3}, within: [5, 1]}").unwrap_err();
        assert_eq!(err.to_string(), "within: needs finite lo <= hi, got [5, 1]");
        assert_eq!(
            field_of("{prefix_count: {class: premium, n: 3}, at_least: .nan}"),
            "at_least"
        );
        assert_eq!(
            field_of("{prefix_count: {class: premium, n: 3}, at_most: .inf}"),
            "at_most"
        );
        assert_eq!(
            field_of("{token_share: {class: premium}, tolerance: -0.1}"),
            "tolerance"
        );
    }

    #[test]
    fn a_reversed_within_prints_its_ends_compactly() {
        let huge = parse("{prefix_count: {class: premium, n: 3}, within: [1e300, 1]}");
        let huge = huge.unwrap_err().to_string();
        assert_eq!(huge, "within: needs finite lo <= hi, got [1e300, 1]");
    }

    #[test]
    fn tolerance_goes_with_token_share_only() {
        let err = parse("{prefix_count: {class: premium, n: 3}, tolerance: 0.1}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "tolerance: applies to token_share only, not prefix_count"
        );
    }

    #[test]
    fn share_bounds_are_fractions() {
        let err = parse("{prefix_share: {class: premium, n: 200}, at_least: 150}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "at_least: a share is a fraction in [0, 1], got 150"
        );
        assert_eq!(
            field_of("{prefix_share: {class: premium, n: 200}, within: [0.5, 1.5]}"),
            "within"
        );
        assert_eq!(
            field_of("{prefix_share: {class: premium, n: 200}, at_most: -0.1}"),
            "at_most"
        );
        let err = parse("{prefix_share: {class: premium, n: 2}, minus: e.yaml, at_least: -2}")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "at_least: a difference of two shares lies in [-1, 1], got -2"
        );
        assert!(parse("{prefix_share: {class: premium, n: 2}, within: [0, 1]}").is_ok());
    }

    #[test]
    fn classes_must_exist() {
        let err = parse("{count_at: {class: regular, when: gold, k: 1}, at_least: 1}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "count_at.when: unknown class `gold`: the scenario's classes are premium, regular"
        );
        for (yaml, field) in [
            (
                "{prefix_count: {class: x, n: 3}, at_least: 1}",
                "prefix_count.class",
            ),
            (
                "{prefix_share: {class: x, n: 3}, at_least: 1}",
                "prefix_share.class",
            ),
            (
                "{token_share: {class: x}, tolerance: 0.1}",
                "token_share.class",
            ),
            (
                "{latency: {class: x, metric: ttft_ms_p50}, at_most: 1}",
                "latency.class",
            ),
            (
                "{remaining_when_done: {class: x, done: premium}, at_most: 1}",
                "remaining_when_done.class",
            ),
            (
                "{remaining_when_done: {class: regular, done: x}, at_most: 1}",
                "remaining_when_done.done",
            ),
            (
                "{count_at: {class: x, when: premium, k: 1}, at_least: 1}",
                "count_at.class",
            ),
            (
                "{growth: {class: x, when: premium, from: 1, to: 2}, at_least: 1}",
                "growth.class",
            ),
            (
                "{growth: {class: regular, when: x, from: 1, to: 2}, at_least: 1}",
                "growth.when",
            ),
        ] {
            assert_eq!(field_of(yaml), field, "{yaml}");
        }
    }

    #[test]
    fn counts_start_at_one() {
        for (yaml, field) in [
            (
                "{prefix_count: {class: premium, n: 0}, at_least: 1}",
                "prefix_count.n",
            ),
            (
                "{prefix_share: {class: premium, n: 0}, at_least: 1}",
                "prefix_share.n",
            ),
            (
                "{count_at: {class: regular, when: premium, k: 0}, at_least: 1}",
                "count_at.k",
            ),
            (
                "{remaining_when_done: {class: regular, done: premium, k: 0}, at_most: 1}",
                "remaining_when_done.k",
            ),
            (
                "{growth: {class: regular, when: premium, from: 0, to: 2}, at_least: 1}",
                "growth.from",
            ),
        ] {
            let err = parse(yaml).unwrap_err();
            assert_eq!(
                (err.field.as_str(), err.message.as_str()),
                (field, "must be at least 1")
            );
        }
    }

    #[test]
    fn growth_needs_from_before_to() {
        let growth = |from: u64, to: u64| {
            parse(&format!(
                "{{growth: {{class: regular, when: premium, from: {from}, to: {to}}}, at_least: 0}}"
            ))
        };
        assert!(growth(1, 2).is_ok());
        let err = growth(80, 80).unwrap_err();
        assert_eq!(
            err.to_string(),
            "growth.to: must be greater than from (80), got 80"
        );
        assert_eq!(growth(240, 80).unwrap_err().field, "growth.to");
    }

    #[test]
    fn unknown_latency_metrics_and_empty_companions_are_rejected() {
        let err = parse("{latency: {class: premium, metric: ttft_p99}, at_most: 1}").unwrap_err();
        assert_eq!(err.field, "latency.metric");
        assert!(
            err.message
                .starts_with("unknown metric `ttft_p99` (known: ttft_ms_mean, "),
            "{err}"
        );
        let err = parse("{prefix_count: {class: premium, n: 3}, minus: ' ', at_least: 1}");
        assert_eq!(err.unwrap_err().field, "minus");
    }

    #[test]
    fn labels_and_bounds_print_as_reports_show_them() {
        let label = |yaml: &str| parse(yaml).unwrap().label();
        assert_eq!(label(DOCUMENTED[1]), "premium share of first 200");
        assert_eq!(label(DOCUMENTED[2]), "half");
        assert_eq!(
            label(DOCUMENTED[4]),
            "regular remaining at premium's 5th completion"
        );
        assert_eq!(
            label(DOCUMENTED[7]),
            "premium among first 320 minus eq.yaml"
        );
        assert_eq!(label(DOCUMENTED[8]), "premium ttft_ms_p99");
        assert_eq!(
            Bound::Within {
                lo: 240.0,
                hi: 320.0
            }
            .to_string(),
            "within [240, 320]"
        );
        assert_eq!(Bound::AtLeast(0.75).to_string(), "at least 0.75");
        assert_eq!(Bound::AtMost(500.0).to_string(), "at most 500");
        assert_eq!(Bound::Tolerance(0.05).to_string(), "within ±0.05");
    }

    #[test]
    fn margins_are_non_negative_exactly_when_the_bound_holds() {
        let bounds = [
            Bound::AtLeast(2.0),
            Bound::AtMost(2.0),
            Bound::Within { lo: 1.0, hi: 3.0 },
            Bound::Tolerance(1.0),
        ];
        for bound in bounds {
            for v in [-4.0, -1.0, 0.0, 0.5, 1.0, 2.0, 2.5, 3.0, 9.0, f64::NAN] {
                assert_eq!(bound.holds(v), bound.margin(v) >= 0.0, "{bound} {v}");
            }
        }
        assert_eq!(Bound::AtLeast(240.0).margin(255.0), 15.0);
        assert_eq!(Bound::Within { lo: 1.0, hi: 3.0 }.margin(2.5), 0.5);
        assert_eq!(Bound::Tolerance(0.05).margin(-0.07), 0.05 - 0.07);
    }

    const SLO_FORMS: [&str; 6] = [
        "{attainment: {class: premium, ttft_ms: 2000}, at_least: 0.99}",
        "{attainment: {class: premium, ttft_ms: 2000, e2e_ms: 10000}, within: [0.9, 1]}",
        "{throughput: {class: premium, metric: throughput_rps}, at_least: 10}",
        "{throughput: {metric: output_tokens_per_s}, at_most: 4000}",
        "{stable: true}",
        "{name: keeps up, stable: true}",
    ];

    #[test]
    fn slo_forms_parse_and_print_back_as_written() {
        for yaml in SLO_FORMS {
            let raw: RawExpectation = serde_saphyr::from_str(yaml).unwrap();
            let typed = Expectation::parse(&raw, &classes()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(RawExpectation::from(typed), raw, "{yaml}");
        }
        assert_eq!(
            figure_of(SLO_FORMS[3]),
            Figure::Throughput {
                class: None,
                metric: ThroughputMetric::OutputTokensPerS
            }
        );
        let stable = parse(SLO_FORMS[5]).unwrap();
        assert_eq!(
            (stable.figure(), stable.bound()),
            (&Figure::Stable, Bound::AtLeast(1.0))
        );
        assert_eq!(
            parse(SLO_FORMS[1]).unwrap().label(),
            "premium attainment (ttft <= 2000 ms, e2e <= 10000 ms)"
        );
        assert_eq!(
            parse(SLO_FORMS[3]).unwrap().label(),
            "total output_tokens_per_s"
        );
    }

    #[test]
    fn slo_figures_are_validated_field_by_field() {
        for (yaml, field, message) in [
            (
                "{attainment: {class: premium}, at_least: 0.9}",
                "attainment",
                "needs ttft_ms, e2e_ms or both",
            ),
            (
                "{attainment: {class: x, ttft_ms: 1}, at_least: 0.9}",
                "attainment.class",
                "",
            ),
            (
                "{attainment: {class: premium, ttft_ms: 0}, at_least: 0.9}",
                "attainment.ttft_ms",
                "",
            ),
            (
                "{attainment: {class: premium, e2e_ms: -1}, at_least: 0.9}",
                "attainment.e2e_ms",
                "",
            ),
            (
                "{attainment: {class: premium, ttft_ms: 1}, at_least: 99}",
                "at_least",
                "an attainment is a fraction in [0, 1], got 99",
            ),
            (
                "{attainment: {class: premium, ttft_ms: 1}, within: [0.5, 2]}",
                "within",
                "",
            ),
            (
                "{attainment: {class: premium, ttft_ms: 1}, at_most: 0.5}",
                "at_most",
                "an attainment goal is at_least or within, not at_most",
            ),
            (
                "{throughput: {class: x, metric: throughput_rps}, at_least: 1}",
                "throughput.class",
                "",
            ),
            (
                "{throughput: {metric: rps}, at_least: 1}",
                "throughput.metric",
                "unknown metric `rps` (known: throughput_rps, output_tokens_per_s)",
            ),
            (
                "{stable: false}",
                "stable",
                "only `stable: true` can be demanded",
            ),
            (
                "{stable: true, at_least: 1}",
                "at_least",
                "`stable: true` takes no bound",
            ),
            ("{stable: true, minus: a.yaml}", "minus", ""),
        ] {
            let err = parse(yaml).unwrap_err();
            assert_eq!(err.field, field, "{yaml}: {err}");
            assert!(err.message.contains(message), "{yaml}: {err}");
        }
    }

    const FAULT_FORMS: [&str; 4] = [
        "{count_status: {class: premium, status: aborted}, at_most: 0}",
        "{count_status: {status: cancelled}, within: [10, 40]}",
        "{migrations: {class: premium}, at_most: 50}",
        "{name: moves, migrations: {}, minus: calm.yaml, at_least: 1}",
    ];

    #[test]
    fn fault_forms_parse_and_print_back_as_written() {
        for yaml in FAULT_FORMS {
            let raw: RawExpectation = serde_saphyr::from_str(yaml).unwrap();
            let typed = Expectation::parse(&raw, &classes()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(RawExpectation::from(typed), raw, "{yaml}");
        }
        assert_eq!(
            figure_of(FAULT_FORMS[0]),
            Figure::CountStatus {
                class: Some("premium".into()),
                status: EndStatus::Aborted
            }
        );
        assert_eq!(
            figure_of(FAULT_FORMS[1]),
            Figure::CountStatus {
                class: None,
                status: EndStatus::Cancelled
            }
        );
        assert_eq!(
            figure_of(FAULT_FORMS[3]),
            Figure::Migrations { class: None }
        );
        let label = |yaml: &str| parse(yaml).unwrap().label();
        assert_eq!(label(FAULT_FORMS[0]), "premium aborted requests");
        assert_eq!(label(FAULT_FORMS[1]), "total cancelled requests");
        assert_eq!(label(FAULT_FORMS[2]), "premium migrations");
        for status in COUNTABLE_ENDS {
            let yaml = format!(
                "{{count_status: {{status: {}}}, at_most: 0}}",
                status.label()
            );
            let class = None;
            assert_eq!(figure_of(&yaml), Figure::CountStatus { class, status });
        }
    }

    #[test]
    fn session_figures_parse_and_a_cache_hit_bound_is_a_fraction() {
        let forms = [
            "{latency: {class: premium, metric: followup_ttft_ms_p99}, at_most: 500}",
            "{cache_hit: {class: premium}, at_least: 0.6}",
            "{cache_hit: {}, within: [0.2, 0.9]}",
        ];
        for yaml in forms {
            let raw: RawExpectation = serde_saphyr::from_str(yaml).unwrap();
            let typed = Expectation::parse(&raw, &classes()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(RawExpectation::from(typed), raw, "{yaml}");
        }
        assert_eq!(figure_of(forms[2]), Figure::CacheHit { class: None });
        assert_eq!(
            parse(forms[1]).unwrap().label(),
            "premium cache hit (reused / input tokens)"
        );
        let err = parse("{cache_hit: {class: premium}, at_least: 60}").unwrap_err();
        assert_eq!(err.field, "at_least");
        assert!(
            err.message.contains("a share is a fraction in [0, 1]"),
            "{err}"
        );
        let err = parse("{cache_hit: {class: x}, at_least: 0.5}").unwrap_err();
        assert_eq!(err.field, "cache_hit.class");
    }

    #[test]
    fn fault_figures_are_validated_field_by_field() {
        for (yaml, field, message) in [
            (
                "{count_status: {class: premium, status: pending}, at_most: 0}",
                "count_status.status",
                "unknown status `pending` (known: completed, rejected, cancelled, aborted)",
            ),
            (
                "{count_status: {class: x, status: aborted}, at_most: 0}",
                "count_status.class",
                "unknown class `x`",
            ),
            (
                "{migrations: {class: x}, at_most: 0}",
                "migrations.class",
                "unknown class `x`",
            ),
            (
                "{migrations: {}, tolerance: 1}",
                "tolerance",
                "applies to token_share only, not migrations",
            ),
            (
                "{count_status: {status: aborted}, migrations: {}, at_most: 0}",
                "",
                "found count_status, migrations",
            ),
        ] {
            let err = parse(yaml).unwrap_err();
            assert_eq!(err.field, field, "{yaml}: {err}");
            assert!(err.message.contains(message), "{yaml}: {err}");
        }
        let raw: Result<RawExpectation, _> =
            serde_saphyr::from_str("{count_status: {class: premium}, at_most: 0}");
        assert!(raw.is_err(), "status is required");
    }

    #[test]
    fn numbers_print_as_written() {
        assert_eq!(number(240.0), "240");
        assert_eq!(number(-3.0), "-3");
        assert_eq!(number(0.05), "0.05");
        assert_eq!(number(0.123456), "0.1235");
        assert_eq!(number(-0.00001), "-1e-5");
        assert_eq!(number(-0.0), "0");
    }

    #[test]
    fn tiny_and_huge_bounds_print_in_scientific_notation() {
        assert_eq!(Bound::AtMost(0.000001).to_string(), "at most 1e-6");
        assert_eq!(Bound::AtLeast(1e300).to_string(), "at least 1e300");
        assert_eq!(number(1.23456789e20), "1.2346e20");
        assert_eq!(number(-2.5e-7), "-2.5e-7");
        assert_eq!(number(1e15), "1e15");
        assert_eq!(number(999_999_999_999_999.0), "999999999999999");
    }

    #[test]
    fn small_fractions_keep_four_significant_digits() {
        assert_eq!(number(0.0123456), "0.01235");
        assert_eq!(number(0.00012345), "0.0001234");
        assert_eq!(number(0.0001), "0.0001");
        assert_eq!(number(1234.56789), "1234.5679");
        assert_eq!(number(0.99999), "1");
        assert_eq!(ordinal(1), "1st");
        assert_eq!(ordinal(12), "12th");
        assert_eq!(ordinal(22), "22nd");
        assert_eq!(ordinal(103), "103rd");
    }
}
