//! Request sources: mooncake traces and (later) synthetic workloads, as one request stream.

pub mod synth;
pub mod trace;

use crate::rng;
use crate::scheduling::hashing;
use crate::scheduling::types::{SeqHash, Token, WorkerWithDpRank};
use crate::time::{SimDuration, SimTime};
use rand::RngExt;

/// One request as a client releases it, ready for the router and the workers.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSpec {
    /// Trace row or generated index: the request's identity in every output.
    pub row: u64,
    pub arrival: SimTime,
    /// The class name the request asks for (a header in Dynamo), if any.
    pub policy_class: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Soft priority: seconds earlier for FCFS, a weight for WSPT.
    pub priority: f64,
    /// Strict priority tier: higher tiers always run first within a class.
    pub strict_priority: u32,
    /// How the prompt's tokens are made (they are never stored whole).
    pub prompt: PromptSpec,
    /// The worker rank the request must run on (an exact-worker lane), if any.
    pub pinned_worker: Option<WorkerWithDpRank>,
}

/// The prompt's token content, described compactly.
#[derive(Clone, Debug, PartialEq)]
pub enum PromptSpec {
    /// Mooncake: token `h as u32` repeated `tokens_per_hash` times for each hash id `h`.
    HashIds {
        hash_ids: Vec<u64>,
        tokens_per_hash: u64,
    },
}

impl PromptSpec {
    /// Whether positions `first..=last` all hold the same token because they come from one
    /// hash id (a cheap sufficient test, not a content comparison).
    fn is_uniform(&self, first: u64, last: u64) -> bool {
        match self {
            PromptSpec::HashIds {
                tokens_per_hash, ..
            } => first / tokens_per_hash == last / tokens_per_hash,
        }
    }

    /// How many hash ids (blocks) describe the prompt.
    pub fn block_count(&self) -> u64 {
        match self {
            PromptSpec::HashIds { hash_ids, .. } => hash_ids.len() as u64,
        }
    }

    /// The token at `position` of the prompt.
    fn token_at(&self, position: u64) -> Token {
        match self {
            PromptSpec::HashIds {
                hash_ids,
                tokens_per_hash,
            } => hash_ids[(position / tokens_per_hash) as usize] as Token,
        }
    }
}

impl RequestSpec {
    /// Sequence hashes of the prompt's full engine blocks (the router's and the workers' view
    /// of the prompt), computed one block at a time without materialising the prompt.
    pub fn block_hashes(&self, block_size: u64) -> Vec<SeqHash> {
        assert!(block_size > 0, "block size must be positive");
        let full_blocks = self.input_tokens / block_size;
        let mut out = Vec::with_capacity(full_blocks as usize);
        let mut block: Vec<Token> = Vec::with_capacity(block_size as usize);
        let mut parent = None;
        // Mooncake blocks are mostly one token repeated: hash each such content once.
        let mut last_uniform: Option<(Token, u64)> = None;
        for b in 0..full_blocks {
            let (first, last) = (b * block_size, (b + 1) * block_size - 1);
            let token = self.prompt.token_at(first);
            let local = match last_uniform {
                Some((t, h)) if t == token && self.prompt.is_uniform(first, last) => h,
                _ => {
                    block.clear();
                    block.extend((first..=last).map(|p| self.prompt.token_at(p)));
                    let h = hashing::block_hash(&block);
                    if self.prompt.is_uniform(first, last) {
                        last_uniform = Some((token, h));
                    }
                    h
                }
            };
            let h = hashing::chain(parent, local);
            out.push(h);
            parent = Some(h);
        }
        out
    }
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

    fn spec(hash_ids: Vec<u64>, input_tokens: u64) -> RequestSpec {
        RequestSpec {
            row: 0,
            arrival: SimTime::ZERO,
            policy_class: None,
            input_tokens,
            output_tokens: 1,
            priority: 0.0,
            strict_priority: 0,
            prompt: PromptSpec::HashIds {
                hash_ids,
                tokens_per_hash: 512,
            },
            pinned_worker: None,
        }
    }

    #[test]
    fn block_hashes_match_the_materialised_prompt() {
        let s = spec(vec![7, 9], 1000);
        let tokens: Vec<Token> = [vec![7; 512], vec![9; 488]].concat();
        assert_eq!(s.block_hashes(64), hashing::sequence_hashes(&tokens, 64));
        assert_eq!(s.block_hashes(64).len(), 15);
    }

    #[test]
    fn equal_hash_ids_share_block_hashes() {
        let a = spec(vec![1, 2, 3], 1536).block_hashes(64);
        let b = spec(vec![1, 2, 4], 1536).block_hashes(64);
        assert_eq!(a[..16], b[..16]);
        assert_ne!(a[16], b[16]);
    }

    /// `count` requests released 1 ns apart, in row order.
    fn burst(count: u64) -> Vec<RequestSpec> {
        (0..count)
            .map(|row| RequestSpec {
                row,
                arrival: SimTime::from_ns(row),
                ..spec(vec![row], 8)
            })
            .collect()
    }

    fn rows(requests: &[RequestSpec]) -> Vec<u64> {
        requests.iter().map(|r| r.row).collect()
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
