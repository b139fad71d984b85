//! Pipeline tests: the replication seeds every command shares.

use super::*;

#[test]
fn replication_zero_is_the_base_seed_and_the_rest_are_reproducible() {
    let seeds = replication_seeds(7, 4);
    assert_eq!(seeds[0], 7);
    assert_eq!(seeds, replication_seeds(7, 4));
    assert_eq!(replication_seeds(7, 2), seeds[..2]);
    assert_ne!(seeds[1], seeds[2]);
    assert_ne!(replication_seeds(8, 2)[1], seeds[1]);
}

#[test]
fn the_replication_seeds_are_drawn_from_the_sweep_replication_stream() {
    // Pinned: sweeps written before the pipeline existed name these seeds in sweep.csv.
    let mut stream = rng::stream(7, "sweep/replication");
    let expected = [7, stream.next_u64(), stream.next_u64()];
    assert_eq!(replication_seeds(7, 3), expected);
    assert!(replication_seeds(7, 0).is_empty());
}
