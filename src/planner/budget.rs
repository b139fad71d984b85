//! The planner's GPU budget, as 1.6.1's planner keeps it: a role's (or a pair of roles')
//! worker counts clamped into `[min_gpu_budget, max_gpu_budget]` GPUs (a negative bound is
//! none) and never below each role's floor, and guards that hold a count rather than move it
//! against the budget. Integers throughout, floor division as Python's; the quotients 1.6.1
//! takes in floating point are taken so here too.

/// The budget: GPU bounds (negative: none).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Budget {
    pub min_gpus: i64,
    pub max_gpus: i64,
}

impl Budget {
    pub fn both_bounds(self) -> bool {
        self.min_gpus >= 0 && self.max_gpus >= 0
    }

    pub fn no_bounds(self) -> bool {
        self.min_gpus < 0 && self.max_gpus < 0
    }

    /// Whether `total` GPUs are within the bounds, the floor loosened by `tolerance`.
    pub fn holds(self, total: i64, tolerance: i64) -> bool {
        !(self.max_gpus >= 0 && total > self.max_gpus
            || self.min_gpus >= 0 && total < self.min_gpus - tolerance)
    }

    /// One pool of `desired` workers of `gpus` GPUs each, brought within the bounds (at least
    /// `floor` workers; none at all when even `floor` workers exceed the ceiling).
    pub fn clamp_single(self, desired: i64, gpus: i64, floor: i64) -> i64 {
        if self.no_bounds() || gpus <= 0 {
            return desired;
        }
        let tolerance = if self.both_bounds() { gpus } else { 0 };
        if self.holds(desired * gpus, tolerance) {
            return desired;
        }
        if self.max_gpus >= 0 && desired * gpus > self.max_gpus {
            return match self.max_gpus < floor * gpus {
                true => 0,
                false => floor.max(self.max_gpus.div_euclid(gpus)),
            };
        }
        floor.max((self.min_gpus as f64 / gpus as f64).ceil() as i64)
    }

    /// A pool of `current` workers asked to go to `proposed`: a count out of the bounds is
    /// brought back into them; at a bound nothing moves past it; otherwise the proposal,
    /// clamped, if that still lies between the two, else `current`.
    pub fn guard_single(self, current: i64, proposed: i64, gpus: i64, floor: i64) -> i64 {
        if gpus <= 0 {
            return proposed;
        }
        let tolerance = if self.both_bounds() { gpus } else { 0 };
        if !self.holds(current * gpus, tolerance) {
            return self.clamp_single(current, gpus, floor);
        }
        let total = current * gpus;
        if self.min_gpus >= 0 && total <= self.min_gpus && proposed < current
            || self.max_gpus >= 0 && total >= self.max_gpus && proposed > current
        {
            return current;
        }
        let clamped = self.clamp_single(proposed, gpus, floor);
        match (current.min(proposed)..=current.max(proposed)).contains(&clamped) {
            true => clamped,
            false => current,
        }
    }
}

/// Two roles: prefill and decode workers' GPUs each, and each role's floor.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Pair {
    pub budget: Budget,
    pub prefill_gpus: i64,
    pub decode_gpus: i64,
    pub min_prefill: i64,
    pub min_decode: i64,
}

impl Pair {
    pub fn total(self, p: i64, d: i64) -> i64 {
        p * self.prefill_gpus + d * self.decode_gpus
    }

    pub fn tolerance(self) -> i64 {
        match self.budget.both_bounds() {
            true => self.prefill_gpus.max(self.decode_gpus),
            false => 0,
        }
    }

    /// `(p, d)` workers brought within the budget in proportion (the ceiling scales both
    /// down; the floor scales prefill up and fills the rest with decode).
    pub fn proportional_clamp(self, p: i64, d: i64) -> (i64, i64) {
        let (pg, dg, budget) = (self.prefill_gpus, self.decode_gpus, self.budget);
        if budget.no_bounds() || pg <= 0 || dg <= 0 {
            return (p, d);
        }
        let total = self.total(p, d);
        if budget.holds(total, self.tolerance()) {
            return (p, d);
        }
        let (min, max) = (budget.min_gpus, budget.max_gpus);
        if max >= 0 && total > max {
            if max < self.min_prefill * pg + self.min_decode * dg {
                return (0, 0);
            }
            let scale = max as f64 / total as f64;
            let max_p = ((max - self.min_decode * dg) as f64 / pg as f64).floor() as i64;
            let new_p = self
                .min_prefill
                .max(max_p.min((p as f64 * scale).floor() as i64));
            let new_d = self
                .min_decode
                .max(((max - new_p * pg) as f64 / dg as f64).floor() as i64);
            return (new_p, new_d);
        }
        let new_p = match total <= 0 {
            true => self
                .min_prefill
                .max((min as f64 / 2.0 / pg as f64).ceil() as i64),
            false => {
                let scale = min as f64 / total as f64;
                self.min_prefill.max((p as f64 * scale).ceil() as i64)
            }
        };
        let rest = (min - new_p * pg).max(0);
        let new_d = self.min_decode.max((rest as f64 / dg as f64).ceil() as i64);
        let shrink = new_d < d;
        let new_d = new_d.max(d);
        if max >= 0 && self.total(new_p, new_d) > max {
            return match shrink {
                false => (p, d),
                true => self.fit_directional((p, d), (new_p, d)),
            };
        }
        (new_p, new_d)
    }

    /// From `current` toward `proposed` within the budget, each role staying between its
    /// current and proposed counts: the nearest such pair to the proposal (then the one that
    /// moves both roles most evenly, then the one that moves most), `current` if none.
    pub fn fit_directional(self, current: (i64, i64), proposed: (i64, i64)) -> (i64, i64) {
        let (pg, dg, budget) = (self.prefill_gpus, self.decode_gpus, self.budget);
        if pg <= 0 || dg <= 0 {
            return proposed;
        }
        let ((cp, cd), (pp, pd)) = (current, proposed);
        let tolerance = self.tolerance();
        let (min, max) = (budget.min_gpus, budget.max_gpus);
        let opposing = pp < cp && pd > cd || pp > cp && pd < cd;
        let mut p_range = (cp.min(pp).max(self.min_prefill), cp.max(pp));
        let mut d_range = (cd.min(pd).max(self.min_decode), cd.max(pd));
        if max >= 0 {
            p_range.1 = p_range.1.min((max - d_range.0 * dg).div_euclid(pg));
            d_range.1 = d_range.1.min((max - p_range.0 * pg).div_euclid(dg));
        }
        let floor = min - tolerance;
        if min >= 0 {
            p_range.0 = p_range.0.max(ceil_div(floor - d_range.1 * dg, pg));
            d_range.0 = d_range.0.max(ceil_div(floor - p_range.1 * pg, dg));
        }
        if p_range.0 > p_range.1 || d_range.0 > d_range.1 {
            return current;
        }
        if pp >= self.min_prefill
            && pd >= self.min_decode
            && budget.holds(self.total(pp, pd), tolerance)
        {
            return proposed;
        }
        let search = Search {
            pair: self,
            current,
            proposed,
            opposing,
            floor,
        };
        let best = match p_range.1 - p_range.0 <= d_range.1 - d_range.0 {
            true => search.best(p_range, d_range, false),
            false => search.best(d_range, p_range, true),
        };
        best.unwrap_or(current)
    }

    /// `(cp, cd)` asked to go to `(pp, pd)`: held where the budget forbids the move, fitted
    /// where roles move in opposite ways at a bound, else clamped in proportion if that
    /// stays between current and proposed.
    pub fn guard(self, current: (i64, i64), proposed: (i64, i64)) -> (i64, i64) {
        let (pg, dg, budget) = (self.prefill_gpus, self.decode_gpus, self.budget);
        if pg <= 0 || dg <= 0 {
            return self.proportional_clamp(proposed.0, proposed.1);
        }
        let ((cp, cd), (pp, pd)) = (current, proposed);
        let tolerance = if budget.max_gpus >= 0 { pg.max(dg) } else { 0 };
        let now = self.total(cp, cd);
        if !budget.holds(now, tolerance) {
            return self.proportional_clamp(cp, cd);
        }
        let any_down = pp < cp || pd < cd;
        let any_up = pp > cp || pd > cd;
        let opposing = pp < cp && pd > cd || pp > cp && pd < cd;
        let (min, max) = (budget.min_gpus, budget.max_gpus);
        if min >= 0 && now <= min && any_down && !any_up {
            return current;
        }
        if min >= 0 && now <= min && opposing {
            return self.fit_directional(current, proposed);
        }
        if max >= 0 && now >= max && any_up {
            return match opposing {
                false => current,
                true => self.fit_directional(current, proposed),
            };
        }
        let (np, nd) = self.proportional_clamp(pp, pd);
        let between = |c: i64, p: i64, x: i64| (c.min(p)..=c.max(p)).contains(&x);
        if !between(cp, pp, np)
            || !between(cd, pd, nd)
            || !budget.holds(self.total(np, nd), tolerance)
        {
            return current;
        }
        (np, nd)
    }
}

/// How far a candidate is from the proposal, how unevenly it moves the two roles, how little
/// it moves them, then the candidate itself: the smallest wins.
type Score = (i64, i64, i64, i64, i64);

/// The candidate search of [`Pair::fit_directional`], over the shorter of the two ranges.
struct Search {
    pair: Pair,
    current: (i64, i64),
    proposed: (i64, i64),
    opposing: bool,
    /// The budget's floor less its tolerance.
    floor: i64,
}

impl Search {
    /// The best pair with its first role (prefill, or decode when `swapped`) in `outer` and
    /// the other in `inner`.
    fn best(&self, outer: (i64, i64), inner: (i64, i64), swapped: bool) -> Option<(i64, i64)> {
        let pair = self.pair;
        let (xg, og) = match swapped {
            false => (pair.prefill_gpus, pair.decode_gpus),
            true => (pair.decode_gpus, pair.prefill_gpus),
        };
        let order = |(a, b): (i64, i64)| if swapped { (b, a) } else { (a, b) };
        let (cx, co) = order(self.current);
        let (_, po) = order(self.proposed);
        let budget = pair.budget;
        let mut best: Option<(Score, (i64, i64))> = None;
        // One candidate per value of the shorter range: bounded by the range.
        for x in outer.0..=outer.1 {
            let (mut lo, mut hi) = inner;
            if budget.min_gpus >= 0 {
                lo = lo.max(ceil_div(self.floor - x * xg, og));
            }
            if budget.max_gpus >= 0 {
                hi = hi.min((budget.max_gpus - x * xg).div_euclid(og));
            }
            let other = if self.opposing {
                if x == cx {
                    (lo <= co && co <= hi).then_some(co)
                } else {
                    if po > co {
                        lo = lo.max(co + 1);
                    } else {
                        hi = hi.min(co - 1);
                    }
                    (lo <= hi).then(|| po.clamp(lo, hi))
                }
            } else {
                (lo <= hi).then(|| po.clamp(lo, hi))
            };
            let Some(o) = other else { continue };
            let (p, d) = order((x, o));
            if let Some(score) = self.score(p, d)
                && best.is_none_or(|(s, _)| score < s)
            {
                best = Some((score, (p, d)));
            }
        }
        best.map(|(_, candidate)| candidate)
    }

    /// How good `(p, d)` is (smaller is better), or `None` out of the budget.
    fn score(&self, p: i64, d: i64) -> Option<Score> {
        let pair = self.pair;
        if !pair.budget.holds(pair.total(p, d), pair.tolerance()) {
            return None;
        }
        let ((cp, cd), (pp, pd)) = (self.current, self.proposed);
        let (need_p, need_d) = ((pp - cp).abs(), (pd - cd).abs());
        let (moved_p, moved_d) = ((p - cp).abs(), (d - cd).abs());
        Some((
            (pp - p).abs() + (pd - d).abs(),
            (moved_p * need_d - moved_d * need_p).abs(),
            -(moved_p + moved_d),
            p,
            d,
        ))
    }
}

/// `a / b` rounded up (`b > 0`), as Python's `-((-a) // b)`.
fn ceil_div(a: i64, b: i64) -> i64 {
    -((-a).div_euclid(b))
}

#[cfg(test)]
mod tests {
    use super::{Budget, Pair};

    const EIGHT: Budget = Budget {
        min_gpus: -1,
        max_gpus: 8,
    };

    #[test]
    fn a_single_pool_stops_at_the_ceiling_and_scales_to_nothing_when_it_cannot_fit() {
        assert_eq!(EIGHT.clamp_single(5, 2, 1), 4);
        assert_eq!(EIGHT.clamp_single(3, 2, 1), 3);
        // 8 GPUs a worker over a budget of 4: infeasible, so none (as 1.6.1).
        assert_eq!(
            Budget {
                min_gpus: -1,
                max_gpus: 4
            }
            .clamp_single(1, 8, 1),
            0
        );
        let floor = Budget {
            min_gpus: 3,
            max_gpus: 8,
        };
        assert_eq!(floor.clamp_single(1, 1, 1), 3);
    }

    #[test]
    fn a_guarded_pool_holds_at_a_bound_and_reconciles_when_out_of_it() {
        // 2 workers of 2 GPUs with a budget of 4: up is held.
        let four = Budget {
            min_gpus: -1,
            max_gpus: 4,
        };
        assert_eq!(four.guard_single(2, 3, 2, 1), 2);
        // 5 workers of 2 GPUs with a budget of 4: brought back to 2.
        assert_eq!(four.guard_single(5, 5, 2, 1), 2);
        assert_eq!(EIGHT.guard_single(3, 4, 1, 1), 4);
        assert_eq!(
            Budget {
                min_gpus: -1,
                max_gpus: -1
            }
            .guard_single(8, 9, 1, 1),
            9
        );
    }

    #[test]
    fn a_pair_over_the_ceiling_shrinks_in_proportion() {
        let pair = Pair {
            budget: EIGHT,
            prefill_gpus: 1,
            decode_gpus: 1,
            min_prefill: 1,
            min_decode: 1,
        };
        assert_eq!(pair.proportional_clamp(6, 6), (4, 4));
        assert_eq!(pair.proportional_clamp(3, 4), (3, 4));
        // Up on both at the ceiling is held; a move within it passes.
        assert_eq!(pair.guard((4, 4), (5, 5)), (4, 4));
        assert_eq!(pair.guard((2, 3), (2, 4)), (2, 4));
        // Opposite moves at the ceiling: prefill down lets decode up.
        assert_eq!(pair.guard((5, 3), (4, 4)), (4, 4));
    }
}
