//! Property tests: random engines and request streams never panic, keep every invariant after
//! every pass, publish consistent KV events, and finish every request in a bounded number of
//! passes with exactly the tokens it asked for.

use super::config::{EngineArgs, PreemptionMode};
use super::worker::{MockRequest, MockWorker, PassOutput};
use crate::scheduling::hashing;
use crate::scheduling::types::{KvEventData, RequestId, SeqHash, Token, WorkerWithDpRank};
use crate::time::SimTime;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn engine() -> impl Strategy<Value = EngineArgs> {
    (
        (2u64..=64, 4u64..=160, 1u64..=8, 1u64..=2048),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(16u64..3000),
        ),
        (0u8..3, 0u8..3),
    )
        .prop_map(
            |((bs, blocks, seqs, budget), (chunk, cache, fifo, mml), (s, d))| {
                let ratio = [1.0, 0.0, 2.5];
                EngineArgs {
                    block_size: bs,
                    num_gpu_blocks: blocks,
                    max_num_seqs: seqs,
                    max_num_batched_tokens: budget,
                    enable_chunked_prefill: chunk,
                    enable_prefix_caching: cache,
                    preemption_mode: if fifo {
                        PreemptionMode::Fifo
                    } else {
                        PreemptionMode::Lifo
                    },
                    max_model_len: mml,
                    speedup_ratio: ratio[s as usize],
                    decode_speedup_ratio: ratio[d as usize],
                    dp_size: 1,
                    timing: Default::default(),
                }
            },
        )
}

/// (arrival gap ns, prompt segments (token id, repeat), output tokens): segments drawn from a
/// small alphabet so prompts share prefixes.
type Spec = (u64, Vec<(u32, u16)>, u64);

fn requests() -> impl Strategy<Value = Vec<Spec>> {
    let segment = (0u32..4, 1u16..300);
    proptest::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..50_000_000],
            proptest::collection::vec(segment, 1..6),
            0u64..80,
        ),
        1..30,
    )
}

fn build(id: u64, segments: &[(u32, u16)], output: u64, bs: u64) -> MockRequest {
    let tokens: Vec<Token> = segments
        .iter()
        .flat_map(|&(t, n)| std::iter::repeat_n(t, usize::from(n)))
        .collect();
    MockRequest {
        id: RequestId(id),
        prompt_tokens: tokens.len() as u64,
        prompt_hashes: hashing::sequence_hashes(&tokens, bs as usize).into(),
        max_output_tokens: output,
    }
}

/// Stored blocks must be new to the rank's published index, Removed ones present in it.
fn check_events(out: &PassOutput, index: &mut BTreeSet<SeqHash>, next_id: &mut u64) {
    for e in &out.kv_events {
        assert_eq!(e.event_id, *next_id, "event ids are consecutive from 0");
        *next_id += 1;
        match &e.data {
            KvEventData::Stored { parent, blocks } => {
                if let Some(p) = parent {
                    assert!(index.contains(p), "Stored under an unknown parent");
                }
                for b in blocks {
                    assert!(index.insert(*b), "block {b} stored twice");
                }
            }
            KvEventData::Removed { blocks } => {
                for b in blocks {
                    assert!(index.remove(b), "block {b} removed but never stored");
                }
            }
            KvEventData::Cleared => index.clear(),
        }
    }
}

#[derive(Default)]
struct Tally {
    tokens: u64,
    firsts: u64,
    done: bool,
}

fn run(args: EngineArgs, specs: Vec<Spec>) {
    let bs = args.block_size;
    let caching = args.enable_prefix_caching;
    let mml = args.max_model_len;
    let mut w = MockWorker::new(args, WorkerWithDpRank::new(3, 1));
    let mut arrivals = Vec::new();
    let mut t = 0u64;
    for (i, (gap, segs, out)) in specs.iter().enumerate() {
        t += gap;
        arrivals.push((t, build(i as u64, segs, *out, bs)));
    }
    let mut tally: BTreeMap<u64, Tally> = BTreeMap::new();
    let (mut index, mut next_event) = (BTreeSet::new(), 0u64);
    let mut out = PassOutput::default();
    let (mut next, mut now) = (0usize, 0u64);
    let budget_passes: u64 = 10_000
        + arrivals
            .iter()
            .map(|(_, r)| 4 * (r.prompt_tokens + r.max_output_tokens))
            .sum::<u64>();
    for _ in 0..budget_passes {
        while next < arrivals.len() && arrivals[next].0 <= now {
            w.add_request(SimTime::from_ns(now), arrivals[next].1.clone())
                .unwrap();
            next += 1;
        }
        if !w.has_work() {
            match arrivals.get(next) {
                Some(a) => {
                    now = a.0;
                    continue;
                }
                None => break,
            }
        }
        let end = w.execute_pass(SimTime::from_ns(now), &mut out).as_ns();
        w.check_invariants()
            .unwrap_or_else(|e| panic!("after pass at {now}: {e}"));
        assert!(end >= now);
        if !caching {
            assert!(
                out.kv_events.is_empty(),
                "no KV events without prefix caching"
            );
        }
        check_events(&out, &mut index, &mut next_event);
        for tok in &out.tokens {
            let t = tally.entry(tok.id.0).or_default();
            assert!(!t.done, "token after completion");
            t.tokens += 1;
            t.firsts += u64::from(tok.first);
            t.done = tok.completed;
        }
        let rejected = out.rejected.iter().map(|r| &r.id);
        for id in out.finished_empty.iter().chain(rejected) {
            let t = tally.entry(id.0).or_default();
            assert!(!t.done, "request {id} finished twice");
            t.done = true;
        }
        now = end;
    }
    assert!(!w.has_work(), "work left after the pass budget");
    assert_eq!(w.stalls_broken(), 0, "the stall safety net fired");
    for (_, req) in &arrivals {
        let t = tally
            .get(&req.id.0)
            .unwrap_or_else(|| panic!("request {} vanished", req.id));
        assert!(t.done, "request {} never finished", req.id);
        let cap = mml.map_or(u64::MAX, |m| m.saturating_sub(req.prompt_tokens));
        assert!(t.tokens <= req.max_output_tokens.min(cap));
        assert!(
            t.firsts == u64::from(t.tokens > 0),
            "first flag exactly once"
        );
    }
}

proptest! {
    // Failures print their minimal input; nothing is persisted outside src/mocker.
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_streams_keep_invariants_and_finish(args in engine(), specs in requests()) {
        run(args, specs);
    }
}

#[test]
fn completed_requests_get_every_token_they_asked_for() {
    // Deterministic companion: roomy engine, so nothing is rejected and counts are exact.
    let args = EngineArgs {
        num_gpu_blocks: 64,
        block_size: 16,
        ..EngineArgs::default()
    };
    let mut w = MockWorker::new(args, WorkerWithDpRank::new(0, 0));
    for i in 0..5u64 {
        let tokens: Vec<Token> = vec![i as u32; 40 + 10 * i as usize];
        let req = MockRequest {
            id: RequestId(i),
            prompt_tokens: tokens.len() as u64,
            prompt_hashes: hashing::sequence_hashes(&tokens, 16).into(),
            max_output_tokens: 3 + i,
        };
        w.add_request(SimTime::ZERO, req).unwrap();
    }
    let (mut out, mut now, mut counts) = (PassOutput::default(), SimTime::ZERO, [0u64; 5]);
    for _ in 0..100 {
        if !w.has_work() {
            break;
        }
        now = w.execute_pass(now, &mut out);
        for t in &out.tokens {
            counts[t.id.0 as usize] += 1;
        }
    }
    assert_eq!(counts, [3, 4, 5, 6, 7]);
}
