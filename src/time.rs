//! Virtual time: integer nanoseconds, checked arithmetic, and ms conversions for output.

use std::fmt;
use std::num::NonZeroU64;

/// An instant in virtual time, in nanoseconds since the start of a run.
///
/// Held as `ns + 1`, so that an `Option<SimTime>` takes 8 bytes, not 16 (a request's record
/// holds four, a million records a million times): the one instant it cannot hold is
/// `u64::MAX` ns, which [`SimTime::from_ns`] makes [`SimTime::MAX`], one ns earlier.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(NonZeroU64);

impl Default for SimTime {
    fn default() -> Self {
        SimTime::ZERO
    }
}

/// A span of virtual time in nanoseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimDuration(u64);

pub const NS_PER_MS: u64 = 1_000_000;
pub const NS_PER_SEC: u64 = 1_000_000_000;
/// The latest instant an input may put anything at: 2^62 ns, about 146 years, so that
/// transport delays and model durations added to it still fit a `u64` (docs/scenarios.md,
/// "Limits and bounds").
pub const MAX_INPUT_NS: u64 = 1 << 62;

impl SimTime {
    pub const ZERO: SimTime = SimTime::from_ns(0);
    /// The latest instant, `u64::MAX - 1` ns: later than anything an input may name (2^62 ns).
    pub const MAX: SimTime = SimTime::from_ns(u64::MAX);

    /// The instant `ns` ns from the start (`u64::MAX` is [`SimTime::MAX`]).
    pub const fn from_ns(ns: u64) -> Self {
        SimTime(NonZeroU64::MIN.saturating_add(ns))
    }

    pub const fn as_ns(self) -> u64 {
        self.0.get() - 1
    }

    /// Milliseconds as a float, for reports only (never for event ordering).
    pub fn as_ms_f64(self) -> f64 {
        self.as_ns() as f64 / NS_PER_MS as f64
    }

    /// Seconds as a float, for scores that Dynamo computes in seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.as_ns() as f64 / NS_PER_SEC as f64
    }

    /// Adds a duration; saturates at `SimTime::MAX` so a runaway model cannot wrap time.
    pub fn saturating_add(self, d: SimDuration) -> SimTime {
        SimTime::from_ns(self.as_ns().saturating_add(d.0))
    }

    /// Adds a duration, or `None` past [`SimTime::MAX`].
    pub fn checked_add(self, d: SimDuration) -> Option<SimTime> {
        let ns = self.as_ns().checked_add(d.0)?;
        (ns < u64::MAX).then_some(SimTime::from_ns(ns))
    }

    /// The span since `earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.as_ns().saturating_sub(earlier.as_ns()))
    }
}

impl SimDuration {
    pub const ZERO: SimDuration = SimDuration(0);

    pub const fn from_ns(ns: u64) -> Self {
        SimDuration(ns)
    }

    pub const fn from_ms(ms: u64) -> Self {
        SimDuration(ms * NS_PER_MS)
    }

    pub const fn as_ns(self) -> u64 {
        self.0
    }

    pub fn as_ms_f64(self) -> f64 {
        self.0 as f64 / NS_PER_MS as f64
    }

    pub fn saturating_add(self, other: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(other.0))
    }

    /// An input's duration in milliseconds, rounded to the nearest ns: an error unless it is
    /// finite, non-negative and at most [`MAX_INPUT_NS`] (so that sums of a few
    /// such values cannot overflow). For validation; the message suits `field: message`.
    pub fn try_from_ms_f64(ms: f64) -> Result<SimDuration, String> {
        if !(ms.is_finite() && ms >= 0.0) {
            return Err(format!("must be a finite number >= 0, got {ms:?}"));
        }
        let ns = (ms * NS_PER_MS as f64).round();
        match ns <= MAX_INPUT_NS as f64 {
            true => Ok(SimDuration(ns as u64)),
            false => Err(format!(
                "{ms:?} ms is beyond the latest time routersim simulates ({} ms, about 146 years)",
                MAX_INPUT_NS / NS_PER_MS
            )),
        }
    }

    /// Converts a model's duration in milliseconds to nanoseconds, rounding to nearest.
    /// Negative or non-finite inputs become zero: models clamp durations at zero.
    pub fn from_ms_f64(ms: f64) -> SimDuration {
        if !(ms.is_finite() && ms > 0.0) {
            return SimDuration::ZERO;
        }
        let ns = (ms * NS_PER_MS as f64).round();
        SimDuration(if ns >= u64::MAX as f64 {
            u64::MAX
        } else {
            ns as u64
        })
    }
}

/// Formats nanoseconds as milliseconds with all six fractional digits (ns precision), e.g.
/// `24.385700`. Exact (integer arithmetic), so outputs are byte-stable.
pub fn format_ms(ns: u64) -> String {
    let mut out = Vec::with_capacity(24);
    write_ms(&mut out, ns);
    String::from_utf8(out).expect("ASCII digits and a point")
}

/// Appends [`format_ms`]'s text to `out` (no allocation beyond `out`'s growth: result files
/// print millions of times).
pub fn write_ms(out: &mut Vec<u8>, ns: u64) {
    write_u64(out, ns / NS_PER_MS);
    out.push(b'.');
    let frac = ns % NS_PER_MS;
    // Three pairs of digits; leading zeros kept.
    for pair in [frac / 10_000, frac / 100 % 100, frac % 100] {
        out.extend_from_slice(digit_pair(pair));
    }
}

/// The two digits of `n` (below 100), a leading zero kept.
fn digit_pair(n: u64) -> &'static [u8] {
    let at = 2 * n as usize;
    &DIGIT_PAIRS[at..at + 2]
}

/// `00`, `01`, ..., `99`: numbers are written two digits at a time.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends `n` in decimal to `out`, as `n.to_string()` writes it.
pub fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    // Two digits per iteration, at most 10: bounded.
    while n >= 100 {
        start -= 2;
        digits[start..start + 2].copy_from_slice(digit_pair(n % 100));
        n /= 100;
    }
    match n < 10 {
        true => {
            start -= 1;
            digits[start] = b'0' + n as u8;
        }
        false => {
            start -= 2;
            digits[start..start + 2].copy_from_slice(digit_pair(n));
        }
    }
    out.extend_from_slice(&digits[start..]);
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", format_ms(self.as_ns()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_optional_instant_takes_no_more_room_than_an_instant() {
        assert_eq!(std::mem::size_of::<Option<SimTime>>(), 8);
    }

    #[test]
    fn instants_keep_their_nanoseconds_and_order_up_to_the_last() {
        for ns in [0, 1, 999, MAX_INPUT_NS, u64::MAX - 2, u64::MAX - 1] {
            assert_eq!(SimTime::from_ns(ns).as_ns(), ns);
        }
        assert_eq!(SimTime::from_ns(u64::MAX), SimTime::MAX);
        assert_eq!(SimTime::MAX.as_ns(), u64::MAX - 1);
        assert!(SimTime::ZERO < SimTime::from_ns(1));
        assert!(SimTime::from_ns(MAX_INPUT_NS) < SimTime::MAX);
        assert_eq!(SimTime::default(), SimTime::ZERO);
        let late = SimTime::from_ns(u64::MAX - 3);
        assert_eq!(late.saturating_add(SimDuration::from_ns(10)), SimTime::MAX);
        assert_eq!(
            late.checked_add(SimDuration::from_ns(2)),
            Some(SimTime::MAX)
        );
        assert_eq!(late.checked_add(SimDuration::from_ns(3)), None);
    }

    #[test]
    fn ms_formatting_is_exact() {
        assert_eq!(format_ms(24_385_700), "24.385700");
        assert_eq!(format_ms(1), "0.000001");
        assert_eq!(format_ms(0), "0.000000");
        assert_eq!(format_ms(u64::MAX), "18446744073709.551615");
        for ns in [9, 999_999, 1_000_000, 10_203_004_005, 7_000_000_000_001] {
            assert_eq!(
                format_ms(ns),
                format!("{}.{:06}", ns / 1_000_000, ns % 1_000_000)
            );
        }
    }

    #[test]
    fn integers_are_written_as_to_string_writes_them() {
        let powers = (0..20).map(|e| 10u64.pow(e));
        // Saturating: 2 × 10^19 and 5 × 10^19 + 7 pass u64::MAX, which is checked anyway.
        let edges = powers.flat_map(|p| {
            [
                p - 1,
                p,
                p + 1,
                p.saturating_mul(2),
                p.saturating_mul(5).saturating_add(7),
            ]
        });
        for n in edges.chain([12_345, 99_999_999, u64::MAX - 1, u64::MAX]) {
            let mut out = b"x".to_vec();
            write_u64(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes());
        }
    }

    proptest::proptest! {
        /// Any integer and any instant, as the standard formatting writes them.
        #[test]
        fn numbers_are_written_as_the_standard_formatting_writes_them(n in proptest::prelude::any::<u64>()) {
            let mut out = Vec::new();
            write_u64(&mut out, n);
            proptest::prop_assert_eq!(out, n.to_string().into_bytes());
            let ms = format!("{}.{:06}", n / 1_000_000, n % 1_000_000);
            proptest::prop_assert_eq!(format_ms(n), ms);
        }
    }

    #[test]
    fn ms_float_conversion_rounds_and_clamps() {
        assert_eq!(SimDuration::from_ms_f64(24.3857004).as_ns(), 24_385_700);
        assert_eq!(SimDuration::from_ms_f64(-3.0), SimDuration::ZERO);
        assert_eq!(SimDuration::from_ms_f64(f64::NAN), SimDuration::ZERO);
    }

    #[test]
    fn input_durations_are_checked() {
        assert_eq!(
            SimDuration::try_from_ms_f64(1.5).unwrap().as_ns(),
            1_500_000
        );
        assert!(SimDuration::try_from_ms_f64(-1.0).is_err());
        assert!(SimDuration::try_from_ms_f64(f64::INFINITY).is_err());
        let error = SimDuration::try_from_ms_f64(1e18).unwrap_err();
        assert!(error.contains("beyond the latest time"), "{error}");
        let last_ms = (MAX_INPUT_NS / NS_PER_MS) as f64;
        assert!(SimDuration::try_from_ms_f64(last_ms).is_ok());
    }

    #[test]
    fn time_arithmetic_saturates() {
        let t = SimTime::MAX.saturating_add(SimDuration::from_ns(5));
        assert_eq!(t, SimTime::MAX);
        assert_eq!(
            SimTime::ZERO.saturating_since(SimTime::from_ns(9)),
            SimDuration::ZERO
        );
    }
}
