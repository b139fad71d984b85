//! What `routersim plan` refuses before its first probe (exit 2): a range, precision or seed
//! count beyond its bounds, a parameter that is not a number, an override of the searched
//! path, and a range whose ends the scenario refuses. Also decides whether probes may keep
//! their prompt draws for the next ones.

use super::{MAX_PROBES, Parameterized, PlanOptions};
use crate::bounds::{MAX_REQUESTS, MAX_SWEEP_RUNS};
use crate::pipeline::{RequestCache, RunError};
use crate::scenario::{Scenario, Workload};

/// The largest end of an integer parameter's range, 2^52: every whole number up to it, and
/// every difference of two of them, is a double exactly, so the binary search's midpoints are
/// exact.
pub const MAX_INTEGER_END: f64 = 4_503_599_627_370_496.0;

/// Most requests the draws a search keeps for reuse may hold (seeds × the scenario and its
/// companions × its requests): about 100 MB at ~400 bytes a drawn request, so kept draws add
/// little to a probe's runs (each within the per-run bound).
pub const MAX_KEPT_REQUESTS: u64 = MAX_REQUESTS / 4;

/// A value no numeric field takes: a parameter that accepts it is not a number.
const NOT_A_NUMBER: &str = "plan-probe-not-a-number";

/// What one search runs over, once checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    /// Whether the parameter takes whole numbers only.
    pub integer: bool,
    /// The range searched: `--range` itself, or its whole numbers for an integer parameter.
    pub range: (f64, f64),
    /// Whether probes keep their prompt draws for the next probes: only when the parameter
    /// leaves the workload (and seed) alone, and the kept draws stay small.
    pub reuse_draws: bool,
}

/// Checks the options that need no scenario.
pub fn validate(options: &PlanOptions) -> Result<(), RunError> {
    let (lo, hi) = options.range;
    // A NaN end is refused below, with the same message.
    if lo >= hi {
        return Err(RunError::Input(format!(
            "--range {}..{}: needs LO < HI, both finite",
            shown(lo),
            shown(hi)
        )));
    }
    validate_one_value_or_more(options)
}

/// Every check of [`validate`] but `LO < HI`: a joint search's last values of A leave one
/// value of B to search (`LO == HI`), which the search itself handles (one probe).
fn validate_one_value_or_more(options: &PlanOptions) -> Result<(), RunError> {
    let (lo, hi) = options.range;
    if !(lo.is_finite() && hi.is_finite() && lo <= hi && (hi - lo).is_finite()) {
        return Err(RunError::Input(format!(
            "--range {}..{}: needs LO < HI, both finite",
            shown(lo),
            shown(hi)
        )));
    }
    if !(options.precision > 0.0 && options.precision < 1.0) {
        return Err(RunError::Input(format!(
            "--precision {}: must be in (0, 1)",
            shown(options.precision)
        )));
    }
    check_run_count(1, options.seeds)?;
    for (path, value) in &options.overrides {
        check_not_searched(&format!("--set {path}={value}"), path, &options.parameter)?;
    }
    Ok(())
}

/// Refuses more than [`MAX_SWEEP_RUNS`] runs (`searches` × [`MAX_PROBES`] × `seeds`), the
/// bound of a sweep, before anything is allocated per seed.
pub fn check_run_count(searches: usize, seeds: u32) -> Result<(), RunError> {
    if seeds == 0 {
        return Err(RunError::Input("--seeds must be at least 1".into()));
    }
    let runs = (searches as u64)
        .saturating_mul(MAX_PROBES as u64)
        .saturating_mul(u64::from(seeds));
    if runs <= MAX_SWEEP_RUNS {
        return Ok(());
    }
    let searches = match searches {
        1 => String::new(),
        n => format!("{n} searches (--for) x "),
    };
    Err(RunError::Input(format!(
        "--seeds {seeds}: {searches}up to {MAX_PROBES} probes x {seeds} seeds = {runs} runs, more than the {MAX_SWEEP_RUNS} a plan may make"
    )))
}

/// Refuses an override (`flag`, of `path`) that sets the searched `parameter` or a field
/// inside it: the parameter's own value, set after it, would silently replace it.
pub fn check_not_searched(flag: &str, path: &str, parameter: &str) -> Result<(), RunError> {
    let inside = |p: &str| {
        p.strip_prefix(parameter)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    };
    match inside(path.trim()) {
        false => Ok(()),
        true => Err(RunError::Input(format!(
            "{flag}: sets {parameter}, the path the plan searches (--range decides its value)"
        ))),
    }
}

/// The finest `--precision` a real search over `lo..hi` can reach: twice a double's relative
/// spacing (so that a value always lies strictly between two ends further apart than the
/// precision), or coarser on a range so narrow that its zero scale
/// ([`super::search::ZERO_SCALE_FRACTION`] of the width) is below two of the smallest doubles.
pub fn finest_precision(lo: f64, hi: f64) -> f64 {
    let zero_scale = (hi - lo) * super::search::ZERO_SCALE_FRACTION;
    let smallest_two = 2.0 * f64::from_bits(1);
    (2.0 * f64::EPSILON).max(smallest_two / zero_scale)
}

/// A number as a message shows it: whole numbers in full, very small or large ones in
/// exponent form (`1e-300`, not 300 digits).
pub fn shown(value: f64) -> String {
    let tiny_or_huge = value != 0.0 && !(1e-4..1e15).contains(&value.abs());
    match (value.fract() == 0.0 && !tiny_or_huge, tiny_or_huge) {
        (true, _) => format!("{}", value as i64),
        (false, true) => format!("{value:e}"),
        (false, false) => format!("{value}"),
    }
}

/// Everything checked before the first probe of `options`.
pub fn check(options: &PlanOptions) -> Result<Checked, RunError> {
    check_scenarios(&Parameterized::new(options)?)
}

/// Everything checked before the first probe, with the scenario file already read.
pub fn check_scenarios(scenarios: &Parameterized) -> Result<Checked, RunError> {
    validate(scenarios.options())?;
    check_ends(scenarios)
}

/// [`check_scenarios`] for one search of a joint search's B: its range may be one value.
pub fn check_joint_row(scenarios: &Parameterized) -> Result<Checked, RunError> {
    validate_one_value_or_more(scenarios.options())?;
    check_ends(scenarios)
}

/// The checks of a validated range against the scenario: both ends taken, the parameter a
/// number, and a real one's precision resolvable.
fn check_ends(scenarios: &Parameterized) -> Result<Checked, RunError> {
    let options = scenarios.options();
    let (lo, hi) = options.range;
    let near = at_end(scenarios, "low end", lo)?;
    check_numeric(scenarios)?;
    let integer = takes_whole_numbers(scenarios)?;
    let range = match integer {
        true => whole_range(options)?,
        false => (lo, hi),
    };
    let far = at_end(scenarios, "far end", range.1)?;
    if !integer {
        let finest = finest_precision(lo, hi);
        if options.precision < finest {
            return Err(RunError::Input(format!(
                "--precision {}: finer than a double resolves over --range {}..{}; the finest that works there is {finest:e}",
                shown(options.precision),
                shown(lo),
                shown(hi)
            )));
        }
    }
    Ok(Checked {
        integer,
        range,
        reuse_draws: draws_reusable(&near, &far, options.seeds),
    })
}

/// The scenario at one end of the range; its error says which end.
fn at_end(scenarios: &Parameterized, end: &str, value: f64) -> Result<Scenario, RunError> {
    let (lo, hi) = scenarios.options().range;
    scenarios.scenario_at(value).map_err(|e| {
        RunError::Input(format!(
            "--range {}..{}: its {end} {} is refused: {e}",
            shown(lo),
            shown(hi),
            shown(value)
        ))
    })
}

/// Whether the parameter takes whole numbers only: a value halfway between two integers is
/// refused by a whole-numbered field (tried next to the low end, which the scenario takes).
fn takes_whole_numbers(scenarios: &Parameterized) -> Result<bool, RunError> {
    let (lo, hi) = scenarios.options().range;
    if lo.abs() > MAX_INTEGER_END {
        // No double halfway between two integers lies near it.
        return Err(RunError::Input(format!(
            "--range {}..{}: its low end is beyond 2^52 = {MAX_INTEGER_END} in size, where a double cannot tell a whole number from a fraction",
            shown(lo),
            shown(hi)
        )));
    }
    Ok(scenarios.scenario_at(lo.floor() + 0.5).is_err())
}

/// Refuses a parameter that takes a value that is not a number (`name`, a class name, ...).
fn check_numeric(scenarios: &Parameterized) -> Result<(), RunError> {
    let options = scenarios.options();
    match scenarios.scenario_with(NOT_A_NUMBER) {
        Err(_) => Ok(()),
        Ok(_) => Err(RunError::Input(format!(
            "--{} {}: not a number (the scenario takes any text there), so there is nothing to search",
            options.goal.name(),
            options.parameter
        ))),
    }
}

/// The whole numbers of the range of an integer parameter (whose low end the scenario took,
/// so it is whole), within ±[`MAX_INTEGER_END`].
fn whole_range(options: &PlanOptions) -> Result<(f64, f64), RunError> {
    let (lo, hi) = options.range;
    let range = format!("--range {}..{}", shown(lo), shown(hi));
    if lo.abs() > MAX_INTEGER_END || hi.abs() > MAX_INTEGER_END {
        return Err(RunError::Input(format!(
            "{range}: {} takes whole numbers, and an integer range must lie within -{MAX_INTEGER_END}..{MAX_INTEGER_END} (2^52)",
            options.parameter
        )));
    }
    // The low end is a whole number: the scenario took it, and a whole-numbered field takes
    // no fraction.
    assert_eq!(lo.fract(), 0.0, "a whole-numbered field took {lo}");
    Ok((lo, hi.floor()))
}

/// Whether probes may keep their draws: the workload and seed are the same at both ends (the
/// parameter leaves them alone), the cache holds every draw of a probe (the seeds of the
/// scenario and of its companions), and those draws hold at most [`MAX_KEPT_REQUESTS`].
fn draws_reusable(near: &Scenario, far: &Scenario, seeds: u32) -> bool {
    let (Workload::Synthetic(a), Workload::Synthetic(b)) = (near.workload(), far.workload()) else {
        return false;
    };
    let scenarios = 1 + near.companions().len() as u64;
    let draws = scenarios * u64::from(seeds);
    let requests: u64 = a.groups.iter().map(|g| g.count).sum();
    a == b
        && near.seed() == far.seed()
        && draws <= RequestCache::MAX_DRAWS as u64
        && draws.saturating_mul(requests) <= MAX_KEPT_REQUESTS
}
