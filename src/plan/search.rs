//! The search of one plan over verdicts it asks for value by value: both ends of the range
//! first, then exponential steps up from the low end and bisection, every value probed at
//! most once and every loop bounded by [`MAX_PROBES`].

use super::{Goal, MAX_PROBES, Probe};
use crate::pipeline::RunError;

/// A real answer's precision is relative to the larger of its own size and this fraction of
/// the range's width, so that an answer at or near 0 is found too (a relative precision alone
/// would halve towards 0 for ever).
pub const ZERO_SCALE_FRACTION: f64 = 1.0 / 1024.0;

/// The answer and the (infeasible, feasible) bracket around it.
pub type Found = (Option<f64>, (Option<f64>, Option<f64>));

/// The state of one search: how to probe a value, and the probes made (each value once).
pub struct Search<'a> {
    probe: &'a mut dyn FnMut(f64) -> Result<Probe, RunError>,
    goal: Goal,
    integer: bool,
    precision: f64,
    /// The smallest size a real answer's precision is relative to (set from the range).
    scale_floor: f64,
    /// Every probe, in the order made.
    pub probes: Vec<Probe>,
}

impl<'a> Search<'a> {
    /// A search deciding each value with `probe`, to the relative `precision` (reals only).
    pub fn new(
        probe: &'a mut dyn FnMut(f64) -> Result<Probe, RunError>,
        goal: Goal,
        integer: bool,
        precision: f64,
    ) -> Search<'a> {
        Search {
            probe,
            goal,
            integer,
            precision,
            scale_floor: 0.0,
            probes: Vec::new(),
        }
    }

    /// Whether `value` is feasible (probing it once).
    fn feasible(&mut self, value: f64) -> Result<bool, RunError> {
        if let Some(p) = self.probes.iter().find(|p| p.value == value) {
            return Ok(p.feasible);
        }
        if self.probes.len() >= MAX_PROBES {
            return Err(RunError::Input(format!(
                "the search needed more than {MAX_PROBES} probes; narrow --range or loosen --precision"
            )));
        }
        let probe = (self.probe)(value)?;
        let feasible = probe.feasible;
        self.probes.push(probe);
        Ok(feasible)
    }

    /// Searches `lo..=hi` (whole numbers already, for an integer parameter: see
    /// [`super::checks`]); returns the answer and the bracket around it. Both ends are
    /// probed first, so the answer never rests on one end alone.
    pub fn run(&mut self, (lo, hi): (f64, f64)) -> Result<Found, RunError> {
        assert!(lo <= hi, "a validated range {lo}..{hi}");
        self.scale_floor = (hi - lo) * ZERO_SCALE_FRACTION;
        let near = self.feasible(lo)?;
        let far = self.feasible(hi)?;
        match self.goal {
            Goal::Minimize => self.minimize(lo, hi, near),
            Goal::Maximize => self.maximize(lo, hi, near, far),
        }
    }

    /// The smallest feasible value: `lo` when feasible, else exponential steps up from `lo`
    /// to the first feasible value (`hi`, when feasible, ends them), then bisection. When
    /// neither end is feasible the steps still look for a feasible value between them.
    fn minimize(&mut self, lo: f64, hi: f64, near: bool) -> Result<Found, RunError> {
        if near {
            return Ok((Some(lo), (None, Some(lo))));
        }
        let mut bad = lo;
        for next in self.exponential(lo, hi) {
            if self.feasible(next)? {
                let (bad, good) = self.bisect(bad, next)?;
                return Ok((Some(good), (Some(bad), Some(good))));
            }
            bad = next;
        }
        Ok((None, (Some(hi), None)))
    }

    /// The largest feasible value: `hi` when feasible, else exponential steps up from `lo`:
    /// past infeasible values to a first feasible one (`lo` itself, when feasible), then to
    /// the first infeasible value above it (`hi` at the latest), then bisection.
    fn maximize(&mut self, lo: f64, hi: f64, near: bool, far: bool) -> Result<Found, RunError> {
        if far {
            return Ok((Some(hi), (None, Some(hi))));
        }
        let mut good = near.then_some(lo);
        for next in self.exponential(lo, hi) {
            match (good, self.feasible(next)?) {
                (_, true) => good = Some(next),
                (None, false) => {}
                (Some(last_good), false) => {
                    let (bad, good) = self.bisect(next, last_good)?;
                    return Ok((Some(good), (Some(bad), Some(good))));
                }
            }
        }
        // The steps end at `hi`, which is infeasible: had any step been feasible, the steps
        // after it would have met an infeasible one and bisected.
        assert!(good.is_none(), "the steps end at the infeasible far end");
        Ok((None, (Some(lo), None)))
    }

    /// The values an exponential search visits after `lo`, ending at `hi`: `lo + 1, lo + 3,
    /// lo + 7, ...` for integers, `lo × 2, lo × 4, ...` for reals (steps of `hi - lo` / 64
    /// doubling when `lo` is not positive). At most about 2,100 values (a double doubles past
    /// any finite `hi` in that many steps); the probes made of them stop at [`MAX_PROBES`].
    fn exponential(&self, lo: f64, hi: f64) -> Vec<f64> {
        let mut values = Vec::new();
        let mut step = match self.integer {
            true => 1.0,
            false if lo > 0.0 => lo,
            false => (hi - lo) / 64.0,
        };
        let mut value = lo;
        while value < hi {
            value = (value + step).min(hi);
            values.push(value);
            step *= 2.0;
        }
        values
    }

    /// Narrows (bad, good) until they are adjacent integers or within the relative
    /// precision; returns the final pair.
    ///
    /// Bounded: no probe lies strictly between `bad` and `good` (they are neighbouring
    /// values of the steps, then of the bisection), each pass probes a value strictly
    /// between them (asserted: the validated precision and integer range always leave one,
    /// see [`super::finest_precision`]), so each pass makes a new probe, and probes stop at
    /// [`MAX_PROBES`] with an error.
    fn bisect(&mut self, mut bad: f64, mut good: f64) -> Result<(f64, f64), RunError> {
        for _ in 0..=MAX_PROBES {
            if self.close_enough(bad, good) {
                return Ok((bad, good));
            }
            let mid = self.midpoint(bad, good);
            assert!(
                bad.min(good) < mid && mid < bad.max(good),
                "a value strictly between {bad} and {good}"
            );
            assert!(
                self.probes.iter().all(|p| p.value != mid),
                "no probe between the bracket's ends"
            );
            if self.feasible(mid)? {
                good = mid;
            } else {
                bad = mid;
            }
        }
        unreachable!("every pass makes a new probe, and probes stop at {MAX_PROBES}")
    }

    /// Halfway between `bad` and `good`: the lower of the two middle integers for an integer
    /// parameter (then the gap is at least 2, so it lies strictly between).
    fn midpoint(&self, bad: f64, good: f64) -> f64 {
        let (low, high) = (bad.min(good), bad.max(good));
        match self.integer {
            true => low + ((high - low) / 2.0).floor(),
            false => low + (high - low) / 2.0,
        }
    }

    fn close_enough(&self, bad: f64, good: f64) -> bool {
        let gap = (good - bad).abs();
        match self.integer {
            true => gap <= 1.0,
            false => {
                let scale = good.abs().max(bad.abs()).max(self.scale_floor);
                gap <= self.precision * scale
            }
        }
    }
}

/// Pairs of probes whose verdicts contradict monotonicity: for minimize, a feasible value
/// below an infeasible one; for maximize, a feasible value above an infeasible one.
pub fn contradictions(probes: &[Probe], goal: Goal) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for good in probes.iter().filter(|p| p.feasible) {
        for bad in probes.iter().filter(|p| !p.feasible) {
            let contradicts = match goal {
                Goal::Minimize => good.value < bad.value,
                Goal::Maximize => good.value > bad.value,
            };
            if contradicts {
                out.push((good.value, bad.value));
            }
        }
    }
    out.sort_by(|a, b| a.partial_cmp(b).expect("finite values"));
    out
}
