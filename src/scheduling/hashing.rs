//! KV block hashing: XXH3-64 per full block, chained into sequence hashes, as Dynamo does it.
//!
//! The router (load tracking, overlap) and the mock workers (prefix cache) use this one
//! function, so "same prefix" means the same thing on both sides. A router that assumes no
//! KV reuse books identities unique to each request instead ([`unshared_identities`]).

use super::types::{RequestId, SeqHash, Token};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Dynamo's seed for block and sequence hashes.
pub const XXH3_SEED: u64 = 1337;

/// The local hash of one block's tokens (u32 little-endian).
pub fn block_hash(tokens: &[Token]) -> u64 {
    let mut bytes = Vec::with_capacity(tokens.len() * 4);
    for t in tokens {
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    bytes_hash(&bytes)
}

/// The local hash of a block given as its tokens' little-endian bytes ([`block_hash`]).
pub fn bytes_hash(bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, XXH3_SEED)
}

/// The sequence hash of a block given its parent's sequence hash (None for the first block).
pub fn chain(parent: Option<SeqHash>, block: u64) -> SeqHash {
    match parent {
        None => block,
        Some(p) => {
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&p.to_le_bytes());
            bytes[8..].copy_from_slice(&block.to_le_bytes());
            xxh3_64_with_seed(&bytes, XXH3_SEED)
        }
    }
}

/// Sequence hashes of every *full* block of `tokens` (a trailing partial block has none).
pub fn sequence_hashes(tokens: &[Token], block_size: usize) -> Vec<SeqHash> {
    assert!(block_size > 0, "block_size must be positive");
    let mut out = Vec::with_capacity(tokens.len() / block_size);
    let mut parent = None;
    for block in tokens.chunks_exact(block_size) {
        let h = chain(parent, block_hash(block));
        out.push(h);
        parent = Some(h);
    }
    out
}

/// `blocks` block identities that only request `id` holds: one hash of the id, then steps of
/// an odd constant from it. They are distinct within the request (an odd step never returns
/// within 2^64 steps), and another request's identities meet them only if its hash falls
/// within a prompt's length of steps of this one's (a chance of about one in 2^56 for two
/// prompts of 128 blocks). The load book compares identities only for equality, so any
/// identities unique to the request count the same; these cost an addition a block (a hash
/// a block was a sixth of a disaggregated run's routing).
pub fn unshared_identities(id: RequestId, blocks: usize) -> Vec<SeqHash> {
    const STEP: u64 = 0x9e37_79b9_7f4a_7c15;
    let first = chain(Some(id.0 ^ 0x5eed_0000_0000_0000), 0);
    (0..blocks as u64)
        .map(|i| first.wrapping_add(i.wrapping_mul(STEP)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unshared_identities_are_distinct_within_and_across_requests() {
        let a = unshared_identities(RequestId(1), 1000);
        let b = unshared_identities(RequestId(2), 1000);
        let distinct: std::collections::BTreeSet<SeqHash> = a.iter().chain(&b).copied().collect();
        assert_eq!(distinct.len(), 2000);
        assert_eq!(
            unshared_identities(RequestId(1), 3),
            a[..3],
            "a pure function"
        );
    }

    #[test]
    fn only_full_blocks_are_hashed() {
        let tokens: Vec<Token> = (0..130).collect();
        assert_eq!(sequence_hashes(&tokens, 64).len(), 2);
        assert!(sequence_hashes(&tokens[..63], 64).is_empty());
    }

    #[test]
    fn sequence_hashes_commit_to_the_prefix() {
        let a: Vec<Token> = [vec![1; 64], vec![2; 64]].concat();
        let b: Vec<Token> = [vec![3; 64], vec![2; 64]].concat();
        let (ha, hb) = (sequence_hashes(&a, 64), sequence_hashes(&b, 64));
        assert_ne!(
            ha[1], hb[1],
            "same block after a different prefix must differ"
        );
        let a2: Vec<Token> = [vec![1; 64], vec![2; 64], vec![9; 10]].concat();
        assert_eq!(
            sequence_hashes(&a2, 64),
            ha,
            "a shared prefix shares its hashes"
        );
    }
}
