//! The checks a scenario file and `replay`'s flags share, against the bounds in
//! [`crate::bounds`]: one check and one message, whichever input gave the value. Each returns
//! the value as a run holds it, or the message to put after the field or flag that gave it.

use crate::bounds::{MAX_BLOCK_TOKENS, MAX_RANKS, MAX_REQUESTS};

/// A count of workers or of a worker's data-parallel ranks (`workers.count`, a pool's
/// `count`, `dp_size`, `--workers`): from 1 to [`MAX_RANKS`].
pub fn rank_count(n: u64) -> Result<u32, String> {
    match n {
        0 => Err("must be positive".into()),
        n if n > MAX_RANKS => Err(format!(
            "{n} is more than a run may have: at most {MAX_RANKS} worker ranks"
        )),
        n => Ok(u32::try_from(n).expect("at most MAX_RANKS")),
    }
}

/// `count` workers of `dp_size` ranks each (`workers.count` and `workers.dp_size`, or
/// `--workers` and the `--engine`'s `dp_size`): at most [`MAX_RANKS`] ranks in all.
pub fn worker_ranks(count: u32, dp_size: u32) -> Result<(), String> {
    match u64::from(count) * u64::from(dp_size) > MAX_RANKS {
        true => Err(format!(
            "{count} workers x dp_size {dp_size} is more than the {MAX_RANKS} worker ranks a run may have"
        )),
        false => Ok(()),
    }
}

/// Tokens per hash id of a trace (`workload.trace_block_size`, `--trace-block-size`): from 1
/// to [`MAX_BLOCK_TOKENS`].
pub fn trace_block_size(n: u64) -> Result<u64, String> {
    match (1..=MAX_BLOCK_TOKENS).contains(&n) {
        true => Ok(n),
        false => Err(format!("must be from 1 to {MAX_BLOCK_TOKENS}, got {n}")),
    }
}

/// The requests a closed loop keeps in flight (`workload.concurrency`,
/// `--replay-concurrency`): from 1 to [`MAX_REQUESTS`] (a run has at most that many).
pub fn concurrency(n: u64) -> Result<u32, String> {
    match (1..=MAX_REQUESTS).contains(&n) {
        true => Ok(u32::try_from(n).expect("at most MAX_REQUESTS")),
        false => Err(format!("must be from 1 to {MAX_REQUESTS}, got {n}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_is_inclusive_and_its_message_names_it_and_the_value() {
        assert_eq!(rank_count(1), Ok(1));
        assert_eq!(rank_count(MAX_RANKS), Ok(4096));
        assert_eq!(rank_count(0), Err("must be positive".into()));
        assert_eq!(
            rank_count(4097),
            Err("4097 is more than a run may have: at most 4096 worker ranks".into())
        );
        assert_eq!(worker_ranks(64, 64), Ok(()));
        assert_eq!(
            worker_ranks(100, 100),
            Err(
                "100 workers x dp_size 100 is more than the 4096 worker ranks a run may have"
                    .into()
            )
        );
        assert_eq!(trace_block_size(MAX_BLOCK_TOKENS), Ok(65_536));
        assert_eq!(
            trace_block_size(0),
            Err("must be from 1 to 65536, got 0".into())
        );
        assert_eq!(concurrency(MAX_REQUESTS), Ok(1_000_000));
        assert_eq!(
            concurrency(1_000_001),
            Err("must be from 1 to 1000000, got 1000001".into())
        );
    }
}
