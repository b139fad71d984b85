//! How a pass is timed: the [`TimingModel`] a worker kind asks for the milliseconds of a pass's
//! prefill and decode parts, the batches it is asked about, Dynamo 1.6.1's default polynomial
//! and its `fixed` model (the profile-interpolated one is `profile.rs`'s; the engine config
//! picks one through `timing_source.rs`), speedup scaling, and the conversion of modelled
//! milliseconds to integer nanoseconds exactly as 1.6.1 rounds them.

use crate::time::SimDuration;
use std::time::Duration;

/// What a pass's steps take, in raw (unscaled) milliseconds: the one question a worker kind
/// asks of its timing. `CommonArgs::prefill_duration` and `decode_duration` scale the answers by the
/// engine's speedup ratios and round them to whole ns as 1.6.1 does, so a new timing source
/// (say, a hardware performance model) implements only this and joins `TimingSource`
/// (which is `Clone`, `Debug` and `PartialEq`, as the engine arguments must be).
///
/// An answer depends on its batch (and the rank's capacity) alone: a pool's [`StepMemo`]
/// keeps decode durations by batch.
///
/// [`StepMemo`]: super::step_memo::StepMemo
pub trait TimingModel {
    /// Prefill time of a pass whose prefill batch is `batch`, in ms; 0 for a batch the model
    /// charges nothing (at least every empty one).
    fn prefill_batch_ms(&self, batch: &PrefillBatch) -> f64;

    /// Decode time of a pass whose decode batch is `batch` (never empty), on a rank holding
    /// `kv_capacity_tokens` tokens of KV, in ms.
    fn decode_batch_ms(&self, batch: &DecodeBatch, kv_capacity_tokens: u64) -> f64;
}

/// Dynamo's default polynomials: prefill over the pass's new tokens ([`prefill_ms`]), decode
/// over the pool's fill fraction ([`decode_ms`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DynamoPolynomial;

impl TimingModel for DynamoPolynomial {
    fn prefill_batch_ms(&self, batch: &PrefillBatch) -> f64 {
        prefill_ms(batch.new_tokens())
    }

    fn decode_batch_ms(&self, batch: &DecodeBatch, kv_capacity_tokens: u64) -> f64 {
        decode_ms(batch.active_kv_tokens, kv_capacity_tokens)
    }
}

/// Constant step times (1.6.1's `{type: fixed}`): `prefill_ms` for every pass with a prefill
/// batch, `decode_ms` for every pass with a decode batch, whatever their size.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct FixedTiming {
    /// Prefill time of a pass that computes prompt tokens, in ms.
    pub prefill_ms: f64,
    /// Decode time of a pass in which a request that had already produced a token emits
    /// one, in ms.
    pub decode_ms: f64,
}

impl TimingModel for FixedTiming {
    fn prefill_batch_ms(&self, batch: &PrefillBatch) -> f64 {
        match batch.count {
            0 => 0.0,
            _ => self.prefill_ms,
        }
    }

    /// Not floored at 1 ms, unlike the polynomial and the profile (as in 1.6.1).
    fn decode_batch_ms(&self, _batch: &DecodeBatch, _kv_capacity_tokens: u64) -> f64 {
        self.decode_ms
    }
}

/// The prefill batch of a pass, as 1.6.1 summarises it: the requests that computed prompt
/// tokens, their prompt positions after the pass and before it (cached or computed earlier).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefillBatch {
    /// Requests that computed prompt tokens in the pass.
    pub count: u64,
    /// Sum of their prompt positions reached by the pass's end.
    pub total_isl: u64,
    /// Sum of their prompt positions already computed or cached before the pass.
    pub total_prefix: u64,
}

impl PrefillBatch {
    /// The new-token count the models see (see [`batch_new_tokens`]).
    pub fn new_tokens(&self) -> u64 {
        batch_new_tokens(self.count, self.total_isl, self.total_prefix)
    }
}

/// The decode batch of a pass: the requests that emit a token having already produced one.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodeBatch {
    /// How many requests.
    pub count: u64,
    /// Sum of their sequence lengths (prompt + generated so far).
    pub active_kv_tokens: u64,
}

impl DecodeBatch {
    /// Their mean sequence length, floored (0 for an empty batch).
    pub fn mean_context_length(&self) -> u64 {
        self.active_kv_tokens.checked_div(self.count).unwrap_or(0)
    }
}

/// Prefill time in ms of a pass whose batch computes `new_tokens` uncached prompt tokens in
/// total (0 for an empty batch). Dynamo's polynomial over the whole batch.
pub fn prefill_ms(new_tokens: u64) -> f64 {
    if new_tokens == 0 {
        return 0.0;
    }
    let t = new_tokens as f64;
    // Same operation order as Dynamo so that results agree to the last bit.
    4.209989e-07 * t.powi(2) + 1.518344e-02 * t + 1.650142e+01
}

/// Decode time in ms of a pass whose decoding requests hold `active_kv_tokens` tokens of
/// context in total, on a rank with `total_kv_tokens` of KV capacity. Depends on the fill
/// fraction only (clamped to 1), never below 1 ms.
pub fn decode_ms(active_kv_tokens: u64, total_kv_tokens: u64) -> f64 {
    let fill = if total_kv_tokens > 0 {
        (active_kv_tokens as f64 / total_kv_tokens as f64).min(1.0)
    } else {
        1.0
    };
    (-25.74 * fill.powi(2) + 54.01 * fill + 5.74).max(1.0)
}

/// A model's raw milliseconds scaled by `ratio` and converted to whole nanoseconds the way
/// 1.6.1 does it: round the raw value to a `Duration` (nearest ns), divide that duration's
/// seconds by the ratio and round again (a ratio of 0 leaves it unscaled), then go through
/// milliseconds once more. The double rounding is observable (1 ns) in mixed passes.
/// Durations too long to represent saturate.
///
/// Every quiet pass computes one of these, so the steps that cannot change the result are
/// skipped: below [`ROUND_TRIP_EXACT_NS`], turning a duration into f64 seconds (or ms) and
/// back gives the same ns, so a ratio of 1 and the final pass through milliseconds are
/// no-ops there.
pub fn scaled_duration(raw_ms: f64, ratio: f64) -> SimDuration {
    if !(raw_ms.is_finite() && raw_ms > 0.0) {
        return SimDuration::ZERO;
    }
    let Ok(unscaled) = Duration::try_from_secs_f64(raw_ms / 1000.0) else {
        return SimDuration::from_ns(u64::MAX);
    };
    let identity_ratio = ratio == 1.0 && round_trips_exactly(unscaled);
    let modeled = if ratio > 0.0 && unscaled > Duration::ZERO && !identity_ratio {
        match Duration::try_from_secs_f64(unscaled.as_secs_f64() / ratio) {
            Ok(d) => d,
            Err(_) => return SimDuration::from_ns(u64::MAX),
        }
    } else {
        unscaled
    };
    if round_trips_exactly(modeled) {
        return SimDuration::from_ns(modeled.as_nanos() as u64);
    }
    ms_to_duration(modeled.as_secs_f64() * 1000.0)
}

/// Durations shorter than this (10^6 s) survive 1.6.1's conversions to f64 seconds or ms and
/// back unchanged: each conversion errs by a few parts in 2^53, under half a ns for fewer
/// than 10^15 ns, so rounding to the nearest ns restores the value.
pub const ROUND_TRIP_EXACT_NS: u128 = 1_000_000_000_000_000;

fn round_trips_exactly(d: Duration) -> bool {
    d.as_nanos() < ROUND_TRIP_EXACT_NS
}

/// Milliseconds to whole nanoseconds as Dynamo converts them (`Duration::from_secs_f64(ms /
/// 1000)`, nearest ns). Non-positive or NaN gives zero; too long saturates.
pub fn ms_to_duration(ms: f64) -> SimDuration {
    if !(ms.is_finite() && ms > 0.0) {
        return SimDuration::ZERO;
    }
    match Duration::try_from_secs_f64(ms / 1000.0) {
        Ok(d) => SimDuration::from_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        Err(_) => SimDuration::from_ns(u64::MAX),
    }
}

/// The prefill batch size Dynamo feeds its polynomial: `count` requests, mean total and mean
/// cached prompt lengths taken as integer (floor) means, `T = count * (mean_isl - mean_prefix)`.
pub fn batch_new_tokens(count: u64, total_isl: u64, total_prefix: u64) -> u64 {
    if count == 0 {
        return 0;
    }
    let mean_isl = total_isl / count;
    let mean_prefix = total_prefix / count;
    count.saturating_mul(mean_isl.saturating_sub(mean_prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mocker::CommonArgs;
    use proptest::prelude::*;

    /// `scaled_duration` step by step as 1.6.1 converts, with nothing skipped.
    fn scaled_duration_every_step(raw_ms: f64, ratio: f64) -> SimDuration {
        if !(raw_ms.is_finite() && raw_ms > 0.0) {
            return SimDuration::ZERO;
        }
        let Ok(unscaled) = Duration::try_from_secs_f64(raw_ms / 1000.0) else {
            return SimDuration::from_ns(u64::MAX);
        };
        let modeled = if ratio > 0.0 && unscaled > Duration::ZERO {
            match Duration::try_from_secs_f64(unscaled.as_secs_f64() / ratio) {
                Ok(d) => d,
                Err(_) => return SimDuration::from_ns(u64::MAX),
            }
        } else {
            unscaled
        };
        ms_to_duration(modeled.as_secs_f64() * 1000.0)
    }

    proptest! {
        /// The skipped steps never change a result: raw times from a ps to years, at ratio
        /// 1, 0 and anything else.
        #[test]
        fn scaled_duration_equals_every_step_of_1_6_1(
            log_ms in -9.0..13.0f64,
            mantissa_bits in any::<u64>(),
            ratio_pick in 0..4u8,
            log_ratio in -3.0..3.0f64,
        ) {
            // Random low mantissa bits make values that sit near half-ns boundaries likely.
            let raw_ms = f64::from_bits(10f64.powf(log_ms).to_bits() ^ (mantissa_bits & 0xFFFF));
            let ratio = match ratio_pick {
                0 => 1.0,
                1 => 0.0,
                _ => 10f64.powf(log_ratio),
            };
            prop_assert_eq!(
                scaled_duration(raw_ms, ratio),
                scaled_duration_every_step(raw_ms, ratio),
                "raw_ms {:e}, ratio {}", raw_ms, ratio
            );
        }
    }

    #[test]
    fn scaled_duration_keeps_ties_and_limits_as_every_step_does() {
        // 2^-10 s is 976,562.5 ns: a tie, rounded to even.
        let tie_ms = 1000.0 / 1024.0;
        let edge_ms = ROUND_TRIP_EXACT_NS as f64 / 1e6;
        for raw_ms in [
            tie_ms,
            3.0 * tie_ms,
            1e-6,
            5e-7,
            1.5e-6,
            edge_ms,
            edge_ms * 1.0001,
            1e18,
        ] {
            for ratio in [1.0, 0.0, 2.0, 0.5, 3.5] {
                assert_eq!(
                    scaled_duration(raw_ms, ratio),
                    scaled_duration_every_step(raw_ms, ratio),
                    "raw_ms {raw_ms:e}, ratio {ratio}"
                );
            }
        }
        assert_eq!(scaled_duration(tie_ms, 1.0).as_ns(), 976_562);
    }

    fn ns(d: SimDuration) -> u64 {
        d.as_ns()
    }

    /// A lone request's prefill of `tokens` uncached tokens.
    fn prefill_duration(tokens: u64, args: &CommonArgs) -> SimDuration {
        let batch = PrefillBatch {
            count: u64::from(tokens > 0),
            total_isl: tokens,
            total_prefix: 0,
        };
        args.prefill_duration(&batch)
    }

    /// A lone decoding request with `active_kv_tokens` of context.
    fn decode_duration(active_kv_tokens: u64, args: &CommonArgs) -> SimDuration {
        let batch = DecodeBatch {
            count: 1,
            active_kv_tokens,
        };
        args.decode_duration(&batch)
    }

    #[test]
    fn prefill_matches_dynamo_printed_times() {
        let args = CommonArgs::default();
        // Observed in 1.6.1: a lone 512 prompt, four of them, 1024 tokens, a 64-token tail.
        assert_eq!(ns(prefill_duration(512, &args)), 24_385_704);
        assert_eq!(ns(prefill_duration(2048, &args)), 49_362_902);
        assert_eq!(ns(prefill_duration(1024, &args)), 32_490_712);
        assert_eq!(ns(prefill_duration(64, &args)), 17_474_885);
        assert_eq!(prefill_duration(0, &args), SimDuration::ZERO);
    }

    #[test]
    fn decode_depends_on_fill_fraction_with_floor_and_clamp() {
        let args = CommonArgs::default();
        // 1.6.1: the steps after a 1024-token prompt's first token.
        assert_eq!(ns(decode_duration(1025, &args)), 5_792_771);
        assert_eq!(ns(decode_duration(1028, &args)), 5_792_925);
        let total = args.total_kv_tokens();
        assert_eq!(decode_ms(2 * total, total), decode_ms(total, total));
        assert!((decode_ms(0, total) - 5.74).abs() < 1e-12);
        assert!(decode_ms(0, 0) >= 1.0);
    }

    #[test]
    fn speedup_ratios_divide_and_zero_means_unscaled() {
        let base = CommonArgs::default();
        let fast = CommonArgs {
            speedup_ratio: 2.0,
            ..base.clone()
        };
        assert_eq!(ns(prefill_duration(1024, &fast)), 16_245_356);
        let dec3 = CommonArgs {
            decode_speedup_ratio: 3.0,
            ..base.clone()
        };
        assert_eq!(prefill_duration(1024, &dec3), prefill_duration(1024, &base));
        let zero = CommonArgs {
            speedup_ratio: 0.0,
            ..base.clone()
        };
        assert_eq!(prefill_duration(1024, &zero), prefill_duration(1024, &base));
        // 1.6.1: speedup 0.5 with decode ratio 0 gives a product of 0, so decode is unscaled.
        let half = CommonArgs {
            speedup_ratio: 0.5,
            decode_speedup_ratio: 0.0,
            ..base.clone()
        };
        assert_eq!(decode_duration(1025, &half), decode_duration(1025, &base));
        assert_eq!(ns(prefill_duration(1024, &half)), 64_981_424);
    }

    #[test]
    fn scaling_rounds_twice_like_dynamo() {
        // 1.6.1 printed 43.756168 for a pass of prefill(T=4140)/3.5 plus a decode step; a
        // single rounding of the scaled value would give 1 ns more for the prefill part.
        assert_eq!(ns(scaled_duration(prefill_ms(4140), 3.5)), 24_736_175);
        assert_eq!(ns(scaled_duration(prefill_ms(4140), 0.0)), 86_576_614);
        assert_eq!(scaled_duration(f64::MAX, 1.0).as_ns(), u64::MAX);
        assert_eq!(scaled_duration(1.0, 1e-300).as_ns(), u64::MAX);
    }

    #[test]
    fn integer_means_shape_the_batch() {
        // 20000-token prompt's last chunk (3616 of it, 16384 cached) with a fresh 600 prompt.
        assert_eq!(batch_new_tokens(2, 20_600, 16_384), 4216);
        // Floors: means 916 and 490 over three requests.
        assert_eq!(batch_new_tokens(3, 2748, 1472), 1278);
        assert_eq!(batch_new_tokens(0, 10, 0), 0);
    }

    #[test]
    fn huge_durations_saturate_instead_of_panicking() {
        assert_eq!(ms_to_duration(f64::MAX).as_ns(), u64::MAX);
        assert_eq!(ms_to_duration(f64::NAN), SimDuration::ZERO);
        assert_eq!(ms_to_duration(-1.0), SimDuration::ZERO);
    }
}
