//! Seeded variation between replications: the seeds of a point's replications, and the
//! arrival jitter that reorders requests released together, as clients racing each other do.

use crate::rng;
use rand::Rng;

/// The seeds of `replications` replications: the first is `base` itself (so a one-seed sweep
/// reproduces a plain run), the others are drawn from the stream `sweep/replication` of
/// `base`. Equal inputs give equal seeds.
pub fn replication_seeds(base: u64, replications: u32) -> Vec<u64> {
    let mut stream = rng::stream(base, "sweep/replication");
    (0..replications)
        .map(|r| if r == 0 { base } else { stream.next_u64() })
        .collect()
}

pub use crate::workload::jitter_arrivals;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::SimTime;
    use crate::workload::{PromptSpec, RequestSpec};

    fn burst(count: u64) -> Vec<RequestSpec> {
        (0..count)
            .map(|row| RequestSpec {
                row,
                arrival: SimTime::from_ns(row),
                policy_class: None,
                input_tokens: 8,
                output_tokens: 1,
                priority: 0.0,
                strict_priority: 0,
                prompt: PromptSpec::HashIds {
                    hash_ids: vec![row],
                    tokens_per_hash: 8,
                },
                pinned_worker: None,
            })
            .collect()
    }

    fn rows(requests: &[RequestSpec]) -> Vec<u64> {
        requests.iter().map(|r| r.row).collect()
    }

    #[test]
    fn replication_zero_is_the_scenario_seed_and_the_rest_are_reproducible() {
        let seeds = replication_seeds(7, 4);
        assert_eq!(seeds[0], 7);
        assert_eq!(seeds, replication_seeds(7, 4));
        assert_eq!(replication_seeds(7, 2), seeds[..2]);
        assert_ne!(seeds[1], seeds[2]);
        assert_ne!(replication_seeds(8, 2)[1], seeds[1]);
    }

    #[test]
    fn no_jitter_changes_nothing() {
        assert_eq!(jitter_arrivals(burst(50), 3, 0), burst(50));
    }

    #[test]
    fn jitter_reorders_a_burst_by_seed_within_its_bound() {
        let a = jitter_arrivals(burst(50), 1, 1_000);
        let b = jitter_arrivals(burst(50), 2, 1_000);
        assert_eq!(a, jitter_arrivals(burst(50), 1, 1_000), "reproducible");
        assert_ne!(rows(&a), rows(&b), "seed-dependent order");
        assert_ne!(rows(&a), (0..50).collect::<Vec<_>>(), "reordered");
        for r in &a {
            let delay = r.arrival.as_ns() - r.row;
            assert!(delay <= 1_000, "row {} delayed {delay} ns", r.row);
        }
        assert!(a.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    }
}
