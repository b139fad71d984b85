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

/// A problem with one expectation, naming the field at fault (e.g. `prefix_count.class`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectationError {
    /// The field path inside the expectation, e.g. `within` or `latency.metric`.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for ExpectationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for ExpectationError {}

fn invalid(field: &str, message: impl Into<String>) -> ExpectationError {
    ExpectationError {
        field: field.to_string(),
        message: message.into(),
    }
}

/// The figure keys that are set, by name.
fn figures_set(e: &RawExpectation) -> Vec<&'static str> {
    [
        ("prefix_count", e.prefix_count.is_some()),
        ("remaining_when_done", e.remaining_when_done.is_some()),
        ("count_at", e.count_at.is_some()),
        ("growth", e.growth.is_some()),
        ("latency", e.latency.is_some()),
        ("token_share", e.token_share.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect()
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

/// Checks one expectation against the run's class names: exactly one figure, exactly one
/// bound (finite, `lo <= hi`, a non-negative `tolerance` only with `token_share`), classes
/// that exist, counts that start at 1, `from < to`, and a known latency metric. This is the
/// reference check: evaluation assumes it passed.
pub fn validate_expectation(
    e: &RawExpectation,
    class_names: &[String],
) -> Result<(), ExpectationError> {
    let figures = figures_set(e);
    if figures.len() != 1 {
        return Err(invalid(
            "expect",
            format!(
                "exactly one figure is needed (one of prefix_count, remaining_when_done, \
                 count_at, growth, latency, token_share), found {}",
                describe_keys(&figures)
            ),
        ));
    }
    validate_bound(e, figures[0])?;
    validate_figure(e, class_names)
}

fn describe_keys(keys: &[&str]) -> String {
    if keys.is_empty() {
        "none".to_string()
    } else {
        keys.join(", ")
    }
}

fn validate_bound(e: &RawExpectation, figure: &str) -> Result<(), ExpectationError> {
    let bounds = bounds_set(e);
    if bounds.len() != 1 {
        return Err(invalid(
            "expect",
            format!(
                "exactly one bound is needed (within, at_least, at_most or tolerance), found {}",
                describe_keys(&bounds)
            ),
        ));
    }
    let finite = |field: &str, v: f64| {
        if v.is_finite() {
            Ok(())
        } else {
            Err(invalid(field, format!("{v} is not a finite number")))
        }
    };
    if let Some([lo, hi]) = e.within {
        finite("within", lo)?;
        finite("within", hi)?;
        if lo > hi {
            return Err(invalid("within", format!("[{lo}, {hi}] has lo > hi")));
        }
    }
    if let Some(v) = e.at_least {
        finite("at_least", v)?;
    }
    if let Some(v) = e.at_most {
        finite("at_most", v)?;
    }
    if let Some(v) = e.tolerance {
        finite("tolerance", v)?;
        if v < 0.0 {
            return Err(invalid("tolerance", format!("{v} is negative")));
        }
        if figure != "token_share" {
            return Err(invalid(
                "tolerance",
                format!("tolerance applies to token_share only, not {figure}"),
            ));
        }
    }
    Ok(())
}

fn validate_class(field: &str, name: &str, class_names: &[String]) -> Result<(), ExpectationError> {
    if class_names.iter().any(|c| c == name) {
        return Ok(());
    }
    Err(invalid(
        field,
        format!(
            "unknown class `{name}` (classes: {})",
            class_names.join(", ")
        ),
    ))
}

fn validate_positive(field: &str, v: u64) -> Result<(), ExpectationError> {
    if v == 0 {
        return Err(invalid(field, "must be at least 1"));
    }
    Ok(())
}

fn validate_figure(e: &RawExpectation, class_names: &[String]) -> Result<(), ExpectationError> {
    if let Some(f) = &e.prefix_count {
        validate_class("prefix_count.class", &f.class, class_names)?;
        validate_positive("prefix_count.n", f.n)?;
    }
    if let Some(f) = &e.remaining_when_done {
        validate_class("remaining_when_done.class", &f.class, class_names)?;
        validate_class("remaining_when_done.done", &f.done, class_names)?;
        if let Some(k) = f.k {
            validate_positive("remaining_when_done.k", k)?;
        }
    }
    if let Some(f) = &e.count_at {
        validate_class("count_at.class", &f.class, class_names)?;
        validate_class("count_at.when", &f.when, class_names)?;
        validate_positive("count_at.k", f.k)?;
    }
    if let Some(f) = &e.growth {
        validate_class("growth.class", &f.class, class_names)?;
        validate_class("growth.when", &f.when, class_names)?;
        validate_positive("growth.from", f.from)?;
        if f.to <= f.from {
            return Err(invalid(
                "growth.to",
                format!("must be greater than from ({} <= {})", f.to, f.from),
            ));
        }
    }
    if let Some(f) = &e.latency {
        validate_class("latency.class", &f.class, class_names)?;
        if crate::report::metrics::LatencyMetric::parse(&f.metric).is_none() {
            return Err(invalid(
                "latency.metric",
                format!(
                    "unknown metric `{}` (known: {})",
                    f.metric,
                    crate::report::metrics::LatencyMetric::all_names().join(", ")
                ),
            ));
        }
    }
    if let Some(f) = &e.token_share {
        validate_class("token_share.class", &f.class, class_names)?;
    }
    if let Some(m) = &e.minus
        && m.trim().is_empty()
    {
        return Err(invalid("minus", "names no companion scenario"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes() -> Vec<String> {
        vec!["premium".into(), "regular".into()]
    }

    fn check(yaml: &str) -> Result<(), ExpectationError> {
        let e: RawExpectation = serde_saphyr::from_str(yaml).unwrap();
        validate_expectation(&e, &classes())
    }

    fn field_of(yaml: &str) -> String {
        check(yaml).unwrap_err().field
    }

    #[test]
    fn accepts_every_documented_form() {
        for yaml in [
            "{prefix_count: {class: premium, n: 320}, within: [240, 320]}",
            "{remaining_when_done: {class: regular, done: premium}, within: [220, 260]}",
            "{remaining_when_done: {class: regular, done: premium, k: 5}, at_most: 3}",
            "{count_at: {class: regular, when: premium, k: 80}, at_least: 12}",
            "{growth: {class: regular, when: premium, from: 80, to: 240}, at_least: 32}",
            "{prefix_count: {class: premium, n: 320}, minus: eq.yaml, at_least: 60}",
            "{latency: {class: premium, metric: ttft_ms_p99}, at_most: 500}",
            "{token_share: {class: premium}, tolerance: 0.05}",
        ] {
            assert_eq!(check(yaml), Ok(()), "{yaml}");
        }
    }

    #[test]
    fn exactly_one_figure() {
        assert_eq!(field_of("{at_most: 5}"), "expect");
        let both =
            "{prefix_count: {class: premium, n: 3}, token_share: {class: premium}, at_most: 5}";
        let err = check(both).unwrap_err();
        assert!(
            err.message.contains("found prefix_count, token_share"),
            "{err}"
        );
    }

    #[test]
    fn exactly_one_sound_bound() {
        let err = check("{prefix_count: {class: premium, n: 3}}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "expect: exactly one bound is needed (within, at_least, at_most or tolerance), found none"
        );
        assert_eq!(
            field_of("{prefix_count: {class: premium, n: 3}, at_least: 1, at_most: 2}"),
            "expect"
        );
        let err = check("{prefix_count: {class: premium, n: 3}, within: [5, 1]}").unwrap_err();
        assert_eq!(err.to_string(), "within: [5, 1] has lo > hi");
        assert_eq!(
            field_of("{token_share: {class: premium}, tolerance: -0.1}"),
            "tolerance"
        );
        assert_eq!(
            field_of("{prefix_count: {class: premium, n: 3}, tolerance: 0.1}"),
            "tolerance"
        );
    }

    #[test]
    fn classes_must_exist() {
        let err = check("{count_at: {class: regular, when: gold, k: 1}, at_least: 1}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "count_at.when: unknown class `gold` (classes: premium, regular)"
        );
        assert_eq!(
            field_of("{prefix_count: {class: x, n: 3}, at_least: 1}"),
            "prefix_count.class"
        );
        assert_eq!(
            field_of("{token_share: {class: x}, tolerance: 0.1}"),
            "token_share.class"
        );
        assert_eq!(
            field_of("{latency: {class: x, metric: ttft_ms_p50}, at_most: 1}"),
            "latency.class"
        );
        assert_eq!(
            field_of("{remaining_when_done: {class: regular, done: x}, at_most: 1}"),
            "remaining_when_done.done"
        );
    }

    #[test]
    fn counts_start_at_one_and_growth_moves_forward() {
        assert_eq!(
            field_of("{prefix_count: {class: premium, n: 0}, at_least: 1}"),
            "prefix_count.n"
        );
        assert_eq!(
            field_of("{count_at: {class: regular, when: premium, k: 0}, at_least: 1}"),
            "count_at.k"
        );
        assert_eq!(
            field_of("{growth: {class: regular, when: premium, from: 80, to: 80}, at_least: 1}"),
            "growth.to"
        );
    }

    #[test]
    fn unknown_latency_metrics_are_rejected() {
        let err = check("{latency: {class: premium, metric: ttft_p99}, at_most: 1}").unwrap_err();
        assert_eq!(err.field, "latency.metric");
        assert!(
            err.message
                .starts_with("unknown metric `ttft_p99` (known: ttft_ms_mean, "),
            "{err}"
        );
    }
}
