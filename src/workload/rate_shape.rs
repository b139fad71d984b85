//! A rate that changes over time (`workload.rate_shape`): the workload's `rate_per_s` times a
//! scale that is constant over each piece, e.g. a day's traffic as quiet night, morning rise,
//! busy afternoon and evening fall.
//!
//! Arrivals are drawn as before, at the base rate, in "load time" (how much traffic has
//! been offered, in seconds at the base rate), and each is then placed at the real instant
//! that much load time has passed: a piece at scale 2 passes load time twice as fast, so its
//! arrivals come twice as often; a piece at scale 0 has none. Poisson arrivals stay Poisson
//! (at each piece's rate), gamma gaps keep their shape in load time, and uniform arrivals are
//! evenly spaced within each piece.

use crate::time::{MAX_INPUT_NS, SimTime};

/// Pieces of constant scale, in time order; past the last piece its scale holds.
#[derive(Clone, Debug, PartialEq)]
pub struct RateShape {
    /// `(until, scale)`: the scale from the previous piece's end (or 0) to `until`.
    pieces: Vec<(SimTime, f64)>,
}

impl RateShape {
    /// A shape of `pieces` as `(until, scale)`; errors say which piece is wrong (by index)
    /// and why: ends must rise, scales be finite and not negative, and some scale positive.
    pub fn new(pieces: Vec<(SimTime, f64)>) -> Result<RateShape, (usize, String)> {
        if pieces.is_empty() {
            return Err((0, "needs at least one piece".into()));
        }
        let mut previous = SimTime::ZERO;
        for (index, &(until, scale)) in pieces.iter().enumerate() {
            if until <= previous || until.as_ns() > MAX_INPUT_NS {
                let why = "`until_s` must be positive, after the piece before, and within 2^62 ns";
                return Err((index, why.into()));
            }
            if !(scale.is_finite() && scale >= 0.0) {
                return Err((index, format!("`scale` must be 0 or more, got {scale:?}")));
            }
            previous = until;
        }
        if pieces.iter().all(|p| p.1 == 0.0) {
            return Err((0, "every `scale` is 0: nothing would arrive".into()));
        }
        Ok(RateShape { pieces })
    }

    /// Load time offered by `at` (ns at the base rate): the scale integrated from 0 to `at`.
    pub fn load_ns(&self, at: SimTime) -> f64 {
        let mut from = 0.0;
        let mut load = 0.0;
        for &(until, scale) in &self.pieces {
            let until = until.as_ns() as f64;
            load += scale * (until.min(at.as_ns() as f64) - from).max(0.0);
            from = until;
        }
        let tail = self.pieces.last().map_or(0.0, |p| p.1);
        load + tail * (at.as_ns() as f64 - from).max(0.0)
    }

    /// The real instant (ns) at which `load_ns` of load time has been offered; infinite when
    /// it never is (the last piece's scale is 0). Within a piece of scale 0 no load passes,
    /// so no arrival is placed inside one.
    pub fn real_ns(&self, load_ns: f64) -> f64 {
        let mut from = 0.0;
        let mut passed = 0.0;
        for &(until, scale) in &self.pieces {
            let until = until.as_ns() as f64;
            let piece = scale * (until - from);
            if scale > 0.0 && passed + piece >= load_ns {
                return from + (load_ns - passed) / scale;
            }
            passed += piece;
            from = until;
        }
        match self.pieces.last().map_or(0.0, |p| p.1) {
            tail if tail > 0.0 => from + (load_ns - passed) / tail,
            _ => f64::INFINITY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(seconds: u64) -> SimTime {
        SimTime::from_ns(seconds * 1_000_000_000)
    }

    fn day() -> RateShape {
        // Quiet to 10 s, four times as busy to 20 s, closed to 30 s, then half.
        RateShape::new(vec![(s(10), 0.5), (s(20), 2.0), (s(30), 0.0), (s(40), 0.5)]).unwrap()
    }

    #[test]
    fn load_time_passes_at_each_pieces_scale_and_the_last_holds() {
        let shape = day();
        assert_eq!(shape.load_ns(s(10)), 5e9);
        assert_eq!(shape.load_ns(s(20)), 25e9);
        assert_eq!(shape.load_ns(s(30)), 25e9);
        assert_eq!(
            shape.load_ns(s(50)),
            35e9,
            "past the last piece, its scale holds"
        );
    }

    #[test]
    fn real_time_inverts_load_time_and_skips_a_closed_piece() {
        let shape = day();
        for at in [0, 3, 10, 15, 20, 35, 60] {
            let load = shape.load_ns(s(at));
            let back = shape.real_ns(load);
            // At the end of the busy piece the closed piece follows: the first instant wins.
            assert_eq!(back, (at as f64 * 1e9), "{at} s");
        }
        assert_eq!(
            shape.real_ns(25e9 + 1.0),
            30e9 + 2.0,
            "past the closed piece"
        );
    }

    #[test]
    fn a_shape_closed_at_its_end_never_reaches_more_load() {
        let shape = RateShape::new(vec![(s(10), 1.0), (s(20), 0.0)]).unwrap();
        assert_eq!(shape.real_ns(10e9), 10e9);
        assert_eq!(shape.real_ns(10e9 + 1.0), f64::INFINITY);
    }

    #[test]
    fn bad_pieces_are_named_by_index() {
        let bad = |pieces| RateShape::new(pieces).unwrap_err();
        assert_eq!(bad(vec![]).0, 0);
        assert_eq!(bad(vec![(s(10), 1.0), (s(10), 1.0)]).0, 1);
        assert_eq!(bad(vec![(s(10), 1.0), (s(20), -1.0)]).0, 1);
        assert_eq!(bad(vec![(s(10), 1.0), (s(20), f64::NAN)]).0, 1);
        assert!(bad(vec![(s(10), 0.0)]).1.contains("nothing would arrive"));
    }
}
