//! KV transfer between a prefill and a decode worker, as Dynamo 1.6.1 times it: the engine's
//! transfer settings, validated, and the delay of one transfer (docs/fidelity.md says how it is
//! rounded to integer nanoseconds).
//!
//! The delay is `tokens × bytes_per_token / (bandwidth_gb_per_s × 1e9)` seconds, where
//! `tokens` is the whole prompt (`full_prompt`) or only the blocks the destination lacks
//! (`destination_missing`). Without both settings, or with a bandwidth of 0, a transfer takes
//! no time. Concurrent transfers do not share bandwidth. Only the prefill engine's settings
//! count.

use crate::time::{NS_PER_MS, SimDuration};

/// Which tokens a transfer moves.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum TransferTimingMode {
    /// The whole prompt (1.6.1's default).
    #[default]
    FullPrompt,
    /// Only the prompt's blocks the destination's cache lacks, in whole blocks.
    DestinationMissing,
}

/// A prefill engine's transfer settings.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct KvTransfer {
    /// Bytes of KV per token (`kv_transfer_bytes_per_token`).
    pub bytes_per_token: Option<u64>,
    /// Decimal GB/s (`kv_transfer_bandwidth`).
    pub bandwidth_gb_per_s: Option<f64>,
    /// `kv_transfer_timing_mode`.
    pub mode: TransferTimingMode,
}

impl KvTransfer {
    /// The settings as an engine config gives them, checked as 1.6.1 checks them: the message
    /// of the first bad one, with the field it belongs to.
    pub fn from_settings(
        bytes_per_token: Option<u64>,
        bandwidth_gb_per_s: Option<f64>,
        mode: Option<&str>,
    ) -> Result<KvTransfer, (&'static str, String)> {
        if bytes_per_token == Some(0) {
            let message = "kv_transfer_bytes_per_token must be positive".to_string();
            return Err(("kv_transfer_bytes_per_token", message));
        }
        if let Some(w) = bandwidth_gb_per_s
            && !(w.is_finite() && w >= 0.0)
        {
            let message = format!("kv_transfer_bandwidth must be finite and non-negative, got {w}");
            return Err(("kv_transfer_bandwidth", message));
        }
        let mode = match mode {
            None | Some("full_prompt") => TransferTimingMode::FullPrompt,
            Some("destination_missing") => TransferTimingMode::DestinationMissing,
            Some(other) => {
                let message = format!(
                    "unknown variant `{other}`, expected `full_prompt` or `destination_missing`"
                );
                return Err(("kv_transfer_timing_mode", message));
            }
        };
        Ok(KvTransfer {
            bytes_per_token,
            bandwidth_gb_per_s,
            mode,
        })
    }

    /// How long moving `tokens` tokens takes, rounded to the nearest nanosecond (1.6.1 keeps
    /// the f64 value: the rounding moves the transfer's end by at most 0.5 ns). Zero without
    /// both settings or with a bandwidth of 0.
    pub fn delay(&self, tokens: u64) -> SimDuration {
        let (Some(bytes), Some(gb_per_s)) = (self.bytes_per_token, self.bandwidth_gb_per_s) else {
            return SimDuration::ZERO;
        };
        if gb_per_s == 0.0 {
            return SimDuration::ZERO;
        }
        // In ms, as 1.6.1 computes it, then to ns.
        let ms = tokens as f64 * bytes as f64 / (gb_per_s * 1e9) * 1000.0;
        SimDuration::from_ns((ms * NS_PER_MS as f64).round() as u64)
    }

    /// The tokens a transfer of a `prompt_tokens`-token prompt moves when the destination
    /// already holds its first `cached_blocks` full blocks: the whole prompt, or (in
    /// `destination_missing` mode) the missing blocks, each counted whole (a partial last
    /// block is a full block, so this may exceed the prompt).
    pub fn tokens_moved(&self, prompt_tokens: u64, block_size: u64, cached_blocks: u64) -> u64 {
        match self.mode {
            TransferTimingMode::FullPrompt => prompt_tokens,
            TransferTimingMode::DestinationMissing => {
                let blocks = prompt_tokens.div_ceil(block_size);
                blocks.saturating_sub(cached_blocks) * block_size
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transfer(bytes: u64, gb_per_s: f64, mode: &str) -> KvTransfer {
        KvTransfer::from_settings(Some(bytes), Some(gb_per_s), Some(mode)).unwrap()
    }

    #[test]
    fn the_delay_is_prompt_bytes_over_decimal_bandwidth() {
        // 1.6.1's measured cases: 5.36870912 ms, 536.870912 ms and 1 ms.
        let full = transfer(131_072, 25.0, "full_prompt");
        assert_eq!(full.delay(1024).as_ns(), 5_368_709);
        assert_eq!(
            transfer(131_072, 1.0, "full_prompt").delay(4096).as_ns(),
            536_870_912
        );
        assert_eq!(
            transfer(1000, 1.0, "full_prompt").delay(1000).as_ns(),
            1_000_000
        );
        // The per-token cost of the worked example: 0.00524288 ms, 128 tokens = 0.67108864.
        assert_eq!(full.delay(128).as_ns(), 671_089);
    }

    #[test]
    fn a_transfer_without_both_settings_or_with_zero_bandwidth_takes_no_time() {
        let cases = [
            (Some(131_072), None),
            (None, Some(25.0)),
            (Some(131_072), Some(0.0)),
        ];
        for (bytes, gb_per_s) in cases {
            let t = KvTransfer::from_settings(bytes, gb_per_s, None).unwrap();
            assert_eq!(t.delay(4096), SimDuration::ZERO, "{t:?}");
        }
        assert_eq!(KvTransfer::default().delay(1 << 20), SimDuration::ZERO);
    }

    #[test]
    fn destination_missing_moves_whole_missing_blocks() {
        let t = transfer(1000, 1.0, "destination_missing");
        // 1.6.1's table (block size 64): no cache, a partial tail, partial and full hits.
        assert_eq!(t.tokens_moved(1024, 64, 0), 1024);
        assert_eq!(
            t.tokens_moved(1000, 64, 0),
            1024,
            "a partial last block counts whole"
        );
        assert_eq!(t.tokens_moved(1536, 64, 16), 512);
        assert_eq!(t.tokens_moved(1000, 64, 15), 64);
        assert_eq!(
            t.tokens_moved(1030, 64, 16),
            64,
            "not clamped to the prompt's tail"
        );
        assert_eq!(t.tokens_moved(1024, 64, 16), 0, "a full hit moves nothing");
        let full = transfer(1000, 1.0, "full_prompt");
        assert_eq!(full.tokens_moved(1000, 64, 15), 1000);
    }

    #[test]
    fn bad_settings_are_refused_with_dynamos_messages() {
        let cases = [
            (
                Some(0),
                None,
                None,
                "kv_transfer_bytes_per_token",
                "must be positive",
            ),
            (
                None,
                Some(-1.0),
                None,
                "kv_transfer_bandwidth",
                "finite and non-negative",
            ),
            (
                None,
                Some(f64::NAN),
                None,
                "kv_transfer_bandwidth",
                "finite and non-negative",
            ),
            (
                None,
                None,
                Some("eager"),
                "kv_transfer_timing_mode",
                "expected `full_prompt` or `destination_missing`",
            ),
        ];
        for (bytes, gb_per_s, mode, field, message) in cases {
            let (f, m) = KvTransfer::from_settings(bytes, gb_per_s, mode).unwrap_err();
            assert_eq!(f, field);
            assert!(m.contains(message), "{m}");
        }
    }
}
