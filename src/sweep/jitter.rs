//! Seeded variation between replications: the seeds of a point's replications, and the
//! arrival jitter that reorders requests released together, as clients racing each other do.

use crate::rng;
use crate::time::SimDuration;
use crate::workload::RequestSpec;
use rand::{Rng, RngExt};

/// The seeds of `replications` replications: the first is `base` itself (so a one-seed sweep
/// reproduces a plain run), the others are drawn from the stream `sweep/replication` of
/// `base`. Equal inputs give equal seeds.
pub fn replication_seeds(base: u64, replications: u32) -> Vec<u64> {
    let mut stream = rng::stream(base, "sweep/replication");
    (0..replications)
        .map(|r| if r == 0 { base } else { stream.next_u64() })
        .collect()
}

/// Delays each request by a uniform draw from `0..=jitter_ns` ns (stream
/// `sweep/arrival-jitter` of `seed`, one draw per request in the given order), then sorts by
/// (arrival, row). Requests a burst releases a few ns apart thereby arrive in a seed-dependent
/// order; with `jitter_ns` 0 the requests are returned unchanged.
pub fn jitter_arrivals(
    mut requests: Vec<RequestSpec>,
    seed: u64,
    jitter_ns: u64,
) -> Vec<RequestSpec> {
    if jitter_ns == 0 {
        return requests;
    }
    let mut stream = rng::stream(seed, "sweep/arrival-jitter");
    for request in &mut requests {
        let delay_ns = stream.random_range(0..=jitter_ns);
        request.arrival = request
            .arrival
            .saturating_add(SimDuration::from_ns(delay_ns));
    }
    requests.sort_by_key(|r| (r.arrival, r.row));
    requests
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::SimTime;
    use crate::workload::PromptSpec;

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
