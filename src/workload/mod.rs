//! Request sources: mooncake traces (`trace`) and synthetic workloads (`synth`), as one request
//! stream.

pub mod rate_shape;
pub mod read_ahead;
pub mod session;
pub mod session_trace;
pub mod synth;
pub mod trace;
pub mod unshared;

use crate::rng;
use crate::scheduling::hashing;
use crate::scheduling::types::{SeqHash, Token, WorkerWithDpRank};
use crate::time::{SimDuration, SimTime};
use rand::RngExt;
use std::sync::Arc;

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

/// A request on its way into a run, with its prompt's block hashes if they were computed
/// ahead (by a reader thread, off the simulation's critical path). Hashes computed for
/// another block size than the run's are computed again.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub spec: RequestSpec,
    pub hashes: Option<PromptHashes>,
    /// The request's session, when it is a session's turn (with the turns still to come).
    pub session: Option<Box<session::SessionTurn>>,
}

/// [`RequestSpec::block_hashes`] of a prompt, for `block_size`.
#[derive(Clone, Debug)]
pub struct PromptHashes {
    pub block_size: u64,
    pub hashes: Arc<[SeqHash]>,
    /// The first block whose hash no other request of the run holds, as far as the reader
    /// knows (`u64::MAX`: none known), whatever the run's faults (the run decides).
    pub unshared_from: u64,
}

impl From<RequestSpec> for Arrival {
    fn from(spec: RequestSpec) -> Arrival {
        Arrival {
            spec,
            hashes: None,
            session: None,
        }
    }
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
    /// How many hash ids (blocks) describe the prompt.
    pub fn block_count(&self) -> u64 {
        match self {
            PromptSpec::HashIds { hash_ids, .. } => hash_ids.len() as u64,
        }
    }
}

impl RequestSpec {
    /// Sequence hashes of the prompt's full engine blocks (the router's and the workers' view
    /// of the prompt), computed one block at a time without materialising the prompt.
    pub fn block_hashes(&self, block_size: u64) -> Vec<SeqHash> {
        self.block_hashes_with(block_size, &mut UniformBlockHashes::default())
    }

    /// [`Self::block_hashes`], looking up the local hash of a block of one repeated token
    /// in `known` (and remembering new ones): prompts that share hash ids share those.
    pub fn block_hashes_with(
        &self,
        block_size: u64,
        known: &mut UniformBlockHashes,
    ) -> Vec<SeqHash> {
        assert!(block_size > 0, "block size must be positive");
        known.reset_for(block_size);
        let PromptSpec::HashIds {
            hash_ids,
            tokens_per_hash,
        } = &self.prompt;
        let tokens_per_hash = *tokens_per_hash;
        let full_blocks = self.input_tokens / block_size;
        let mut out = Vec::with_capacity(full_blocks as usize);
        let mut parent = None;
        let mut bytes: Vec<u8> = Vec::new();
        // Each iteration emits at least one block: bounded by `full_blocks`.
        while (out.len() as u64) < full_blocks {
            let first = out.len() as u64 * block_size;
            let first_id = first / tokens_per_hash;
            // Blocks lying wholly within hash id `first_id` are one token repeated: one
            // local hash for the whole run (mooncake blocks are mostly such runs).
            let id_end = (first_id + 1).saturating_mul(tokens_per_hash);
            let run = ((id_end - first) / block_size).min(full_blocks - out.len() as u64);
            if run > 0 {
                let token = hash_ids[first_id as usize] as Token;
                let local = known.uniform(token, block_size, &mut bytes);
                for _ in 0..run {
                    let h = hashing::chain(parent, local);
                    out.push(h);
                    parent = Some(h);
                }
                continue;
            }
            // A block straddling hash ids: its tokens run by run, one run per hash id.
            let last = first + block_size - 1;
            bytes.clear();
            // One run per iteration, up to the block's last hash id: bounded.
            for id in first_id..=last / tokens_per_hash {
                let from = first.max(id * tokens_per_hash);
                let to = last.min((id + 1) * tokens_per_hash - 1);
                push_repeated(&mut bytes, hash_ids[id as usize] as Token, to - from + 1);
            }
            let h = hashing::chain(parent, hashing::bytes_hash(&bytes));
            out.push(h);
            parent = Some(h);
        }
        out
    }
}

/// Appends `count` copies of `token`'s little-endian bytes.
fn push_repeated(bytes: &mut Vec<u8>, token: Token, count: u64) {
    let token_bytes = token.to_le_bytes();
    let start = bytes.len();
    bytes.resize(start + 4 * count as usize, 0);
    for chunk in bytes[start..].chunks_exact_mut(4) {
        chunk.copy_from_slice(&token_bytes);
    }
}

/// Local hashes of blocks made of one repeated token, by token, for one block size: a
/// mooncake prompt's blocks are such blocks, and prompts share hash ids. Bounded: it starts
/// over when full.
#[derive(Debug, Default)]
pub struct UniformBlockHashes {
    block_size: u64,
    hashes: rustc_hash::FxHashMap<Token, u64>,
}

/// Tokens [`UniformBlockHashes`] remembers before it starts over (1 MiB: small enough to
/// stay in cache, and to cost little on traces whose hash ids never repeat).
const MAX_UNIFORM_BLOCK_HASHES: usize = 1 << 16;

impl UniformBlockHashes {
    fn reset_for(&mut self, block_size: u64) {
        if self.block_size != block_size {
            self.hashes.clear();
            self.block_size = block_size;
        }
    }

    /// The local hash of a block of `block_size` copies of `token`, hashed (in `scratch`)
    /// and remembered the first time it is asked for.
    fn uniform(&mut self, token: Token, block_size: u64, scratch: &mut Vec<u8>) -> u64 {
        if let Some(&hash) = self.hashes.get(&token) {
            return hash;
        }
        scratch.clear();
        push_repeated(scratch, token, block_size);
        let hash = hashing::bytes_hash(scratch);
        if self.hashes.len() >= MAX_UNIFORM_BLOCK_HASHES {
            self.hashes.clear();
        }
        self.hashes.insert(token, hash);
        hash
    }
}

/// Delays each request by a uniform draw from `0..=jitter_ns` ns (stream
/// `sweep/arrival-jitter` of `seed`, one draw per request in the given order), then sorts by
/// (arrival, row). Requests a burst releases a few ns apart thereby arrive in a seed-dependent
/// order; with `jitter_ns` 0 the requests are returned unchanged. Only a session's first turn
/// moves: a later turn arrives a think time after the turn before it ends, whenever that is
/// (its rows follow its first's, so sessions starting together keep their order).
pub fn jitter_arrivals(mut arrivals: Vec<Arrival>, seed: u64, jitter_ns: u64) -> Vec<Arrival> {
    if jitter_ns == 0 {
        return arrivals;
    }
    delay_each(
        arrivals.iter_mut().map(|a| &mut a.spec.arrival),
        seed,
        jitter_ns,
    );
    arrivals.sort_by_key(|a| (a.spec.arrival, a.spec.row));
    arrivals
}

/// Adds a draw from `0..=jitter_ns` ns to each arrival, in order.
fn delay_each<'a>(arrivals: impl Iterator<Item = &'a mut SimTime>, seed: u64, jitter_ns: u64) {
    let mut stream = rng::stream(seed, "sweep/arrival-jitter");
    for arrival in arrivals {
        let delay_ns = stream.random_range(0..=jitter_ns);
        *arrival = arrival.saturating_add(SimDuration::from_ns(delay_ns));
    }
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
    fn blocks_spanning_several_hash_ids_hash_their_materialised_tokens() {
        // 100 tokens per hash id under 64-token blocks: most blocks straddle two ids, one
        // of them repeats (7, 7) and one id is shorter than a block.
        // One memo of one-token blocks across all cases: what it remembers for one block
        // size must never leak into another.
        let mut known = UniformBlockHashes::default();
        for (block_size, tokens_per_hash) in [(64, 100), (64, 30), (16, 16), (7, 512), (64, 512)] {
            let ids = vec![7, 7, 3, 9, 2, 5, 1];
            let input = 6 * tokens_per_hash + 11;
            let s = RequestSpec {
                prompt: PromptSpec::HashIds {
                    hash_ids: ids.clone(),
                    tokens_per_hash,
                },
                ..spec(ids.clone(), input)
            };
            let tokens: Vec<Token> = (0..input)
                .map(|p| ids[(p / tokens_per_hash) as usize] as Token)
                .collect();
            let expected = hashing::sequence_hashes(&tokens, block_size as usize);
            let case = format!("block {block_size}, {tokens_per_hash} tokens per hash id");
            assert_eq!(s.block_hashes(block_size), expected, "{case}");
            for _ in 0..2 {
                assert_eq!(
                    s.block_hashes_with(block_size, &mut known),
                    expected,
                    "{case}"
                );
            }
        }
    }

    proptest::proptest! {
        /// Run by run hashing equals hashing the materialised prompt block by block, for any
        /// block size and hash-id width (blocks inside one id, straddling several, ids
        /// shorter than a block), with one memo shared across block sizes and prompts.
        #[test]
        fn block_hashes_equal_the_materialised_prompts(
            prompts in proptest::collection::vec(
                (proptest::collection::vec(0u64..6, 1..12), 1u64..200, 1u64..100, 0u64..200),
                1..6,
            ),
        ) {
            let mut known = UniformBlockHashes::default();
            for (ids, tokens_per_hash, block_size, short_by) in prompts {
                let input = (ids.len() as u64 * tokens_per_hash).saturating_sub(short_by).max(1);
                let s = RequestSpec {
                    prompt: PromptSpec::HashIds { hash_ids: ids.clone(), tokens_per_hash },
                    ..spec(ids.clone(), input)
                };
                let tokens: Vec<Token> = (0..input)
                    .map(|p| ids[(p / tokens_per_hash) as usize] as Token)
                    .collect();
                let expected = hashing::sequence_hashes(&tokens, block_size as usize);
                proptest::prop_assert_eq!(s.block_hashes_with(block_size, &mut known), expected);
            }
        }
    }

    #[test]
    fn equal_hash_ids_share_block_hashes() {
        let a = spec(vec![1, 2, 3], 1536).block_hashes(64);
        let b = spec(vec![1, 2, 4], 1536).block_hashes(64);
        assert_eq!(a[..16], b[..16]);
        assert_ne!(a[16], b[16]);
    }

    /// `count` requests released 1 ns apart, in row order.
    fn burst(count: u64) -> Vec<Arrival> {
        (0..count)
            .map(|row| {
                Arrival::from(RequestSpec {
                    row,
                    arrival: SimTime::from_ns(row),
                    ..spec(vec![row], 8)
                })
            })
            .collect()
    }

    fn jittered(count: u64, seed: u64, jitter_ns: u64) -> Vec<RequestSpec> {
        let arrivals = jitter_arrivals(burst(count), seed, jitter_ns);
        arrivals.into_iter().map(|a| a.spec).collect()
    }

    fn rows(requests: &[RequestSpec]) -> Vec<u64> {
        requests.iter().map(|r| r.row).collect()
    }

    #[test]
    fn no_jitter_changes_nothing() {
        let unmoved: Vec<RequestSpec> = burst(50).into_iter().map(|a| a.spec).collect();
        assert_eq!(jittered(50, 3, 0), unmoved);
    }

    #[test]
    fn jitter_reorders_a_burst_by_seed_within_its_bound() {
        let a = jittered(50, 1, 1_000);
        let b = jittered(50, 2, 1_000);
        assert_eq!(a, jittered(50, 1, 1_000), "reproducible");
        assert_ne!(rows(&a), rows(&b), "seed-dependent order");
        assert_ne!(rows(&a), (0..50).collect::<Vec<_>>(), "reordered");
        for r in &a {
            let delay = r.arrival.as_ns() - r.row;
            assert!(delay <= 1_000, "row {} delayed {delay} ns", r.row);
        }
        assert!(a.windows(2).all(|w| w[0].arrival <= w[1].arrival));
    }
}
