//! Property tests: random engines and request streams never panic, keep every invariant after
//! every pass, publish consistent KV events, and finish every request in a bounded number of
//! passes with exactly the tokens it asked for; reusing the waiting head's prefix probe, and
//! leaving the blocks only their own request holds out of the index and the events, change
//! nothing else.

use super::config::{Backend, CapacityArgs, CommonArgs, EngineArgs, PreemptionMode, VllmArgs};
use super::protocol::{MockRequest, PassOutput};
use super::vllm::MockWorker;
use crate::scheduling::hashing;
use crate::scheduling::types::{KvEventData, RequestId, SeqHash, Token, WorkerWithDpRank};
use crate::time::SimTime;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
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
                    common: CommonArgs {
                        block_size: bs,
                        dp_size: 1,
                        tensor_parallel_size: 1,
                        role: Default::default(),
                        kv_transfer: Default::default(),
                        capacity: CapacityArgs {
                            num_gpu_blocks: blocks,
                            max_num_seqs: seqs,
                            max_num_batched_tokens: budget,
                            max_model_len: mml,
                        },
                        enable_prefix_caching: cache,
                        timing: Default::default(),
                        speedup_ratio: ratio[s as usize],
                        decode_speedup_ratio: ratio[d as usize],
                        startup_delay: Default::default(),
                    },
                    backend: Backend::Vllm(VllmArgs {
                        enable_chunked_prefill: chunk,
                        preemption_mode: if fifo {
                            PreemptionMode::Fifo
                        } else {
                            PreemptionMode::Lifo
                        },
                    }),
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
        unshared_from: u64::MAX,
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
    let bs = args.common.block_size;
    let caching = args.common.enable_prefix_caching;
    let mml = args.common.capacity.max_model_len;
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

/// What a differential run met, summed, so a test can tell that it exercised what it checks.
#[derive(Debug, Default)]
struct Met {
    probe_reuses: u64,
    reused_admissions: u64,
    preemptions: u64,
    removed_blocks: u64,
    quiet_passes: u64,
    cancellations: u64,
    /// Blocks the fast rank's events left out (only its own request held them).
    withheld_blocks: u64,
}

/// Two ranks fed the same inputs: `fast` keeps the waiting head's prefix probe and hands
/// the blocks it found on to allocation, and warms its pool's probes in batches (as a rank
/// of a large fleet does), and with `shared` set is told which blocks only their own request
/// holds; `plain` looks every block up afresh, one probe at a time, and is told nothing.
struct Twins {
    fast: MockWorker,
    plain: MockWorker,
    outs: [PassOutput; 2],
    ends: [Vec<SimTime>; 2],
    met: Met,
    /// The hashes some other request holds too, when the fast rank is told of the others.
    shared: Option<BTreeSet<SeqHash>>,
}

impl Twins {
    fn new(args: EngineArgs, publish_generated: bool) -> Twins {
        let mut fast = MockWorker::new(args.clone(), WorkerWithDpRank::new(0, 0));
        let mut plain = MockWorker::new(args, WorkerWithDpRank::new(0, 0));
        plain.set_plain_lookups();
        fast.set_warm_probes(true);
        for w in [&mut fast, &mut plain] {
            w.set_publish_generated_blocks(publish_generated);
        }
        let (outs, ends) = (Default::default(), Default::default());
        let met = Met::default();
        Twins {
            fast,
            plain,
            outs,
            ends,
            met,
            shared: None,
        }
    }

    /// Adds `req`, telling the fast rank where its unshared blocks start (with `shared`).
    fn add(&mut self, now: u64, req: &MockRequest) {
        let now = SimTime::from_ns(now);
        self.plain.add_request(now, req.clone()).unwrap();
        let mut fast = req.clone();
        if let Some(shared) = &self.shared {
            let hashes = req.prompt_hashes.iter();
            let first = hashes.take_while(|h| shared.contains(h)).count();
            fast.unshared_from = first as u64;
        }
        self.fast.add_request(now, fast).unwrap();
    }

    /// Cancels the waiting head (even `mv`) or the newest running request (odd).
    fn cancel(&mut self, mv: u8) {
        let victim = match mv % 2 {
            0 => self.fast.waiting_ids().next(),
            _ => self.fast.running_ids().last(),
        };
        if let Some(id) = victim {
            let plain = self.plain.remove_request(id);
            assert_eq!(self.fast.remove_request(id), plain);
            self.met.cancellations += 1;
        }
    }

    /// Plans a quiet run on both and applies part of it, or runs a formed pass, as `mv`
    /// picks; returns when the step ends.
    fn step(&mut self, now: u64, mv: u8) -> u64 {
        let start = SimTime::from_ns(now);
        let max_passes = 1 + usize::from(mv / 2 % 8);
        let [fast_ends, plain_ends] = &mut self.ends;
        self.fast.plan_quiet_passes(start, max_passes, fast_ends);
        self.plain.plan_quiet_passes(start, max_passes, plain_ends);
        assert_eq!(fast_ends, plain_ends, "quiet runs differ");
        if !fast_ends.is_empty() && !mv.is_multiple_of(3) {
            let count = 1 + usize::from(mv) % fast_ends.len();
            let end = fast_ends[count - 1];
            self.fast.apply_quiet_passes(count as u64, end);
            self.plain.apply_quiet_passes(count as u64, end);
            self.met.quiet_passes += count as u64;
            return end.as_ns();
        }
        let [fast_out, plain_out] = &mut self.outs;
        let end = self.fast.execute_pass(start, fast_out);
        assert_eq!(end, self.plain.execute_pass(start, plain_out));
        if let Some(shared) = &self.shared {
            let before = event_blocks(plain_out);
            for event in &mut plain_out.kv_events {
                if let KvEventData::Stored { blocks, .. } | KvEventData::Removed { blocks } =
                    &mut event.data
                {
                    blocks.retain(|h| shared.contains(h));
                }
            }
            self.met.withheld_blocks += before - event_blocks(plain_out);
        }
        assert_eq!(fast_out, plain_out, "passes at {now} differ");
        let reused = fast_out.admitted.iter().filter(|a| a.reused_tokens > 0);
        self.met.reused_admissions += reused.count() as u64;
        self.met.preemptions += fast_out.preempted.len() as u64;
        for e in &fast_out.kv_events {
            if let KvEventData::Removed { blocks } = &e.data {
                self.met.removed_blocks += blocks.len() as u64;
            }
        }
        end.as_ns()
    }
}

/// How many blocks a pass's events name.
fn event_blocks(out: &PassOutput) -> u64 {
    let blocks = out.kv_events.iter().map(|e| match &e.data {
        KvEventData::Stored { blocks, .. } | KvEventData::Removed { blocks } => blocks.len(),
        KvEventData::Cleared => 0,
    });
    blocks.sum::<usize>() as u64
}

/// The prompt hashes held by two requests or more of `arrivals`.
fn shared_hashes(arrivals: &[(u64, MockRequest)]) -> BTreeSet<SeqHash> {
    let mut holders: BTreeMap<SeqHash, u32> = BTreeMap::new();
    for (_, req) in arrivals {
        for &hash in req.prompt_hashes.iter() {
            *holders.entry(hash).or_default() += 1;
        }
    }
    holders
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(h, _)| h)
        .collect()
}

/// Runs one stream through [`Twins`]. `moves` picks each step: a formed pass or a planned
/// quiet run (part of it applied), after cancelling the waiting head or the newest running
/// request first on some. After every step both ranks must have produced the same output
/// (admissions, reused tokens, events, preemptions, quiet-run ends) and hold the same state
/// (requests, blocks, pool index, LRU order). Told of `unshared` blocks, the fast rank's
/// events must be the plain one's without them, and its own invariants hold.
fn run_both(
    args: EngineArgs,
    specs: &[Spec],
    moves: &[u8],
    (publish_generated, unshared): (bool, bool),
) -> Met {
    let bs = args.common.block_size;
    let mut twins = Twins::new(args, publish_generated);
    let mut arrivals = Vec::new();
    let mut t = 0u64;
    for (i, (gap, segs, out)) in specs.iter().enumerate() {
        t += gap;
        arrivals.push((t, build(i as u64, segs, *out, bs)));
    }
    twins.shared = unshared.then(|| shared_hashes(&arrivals));
    let (mut next, mut now) = (0usize, 0u64);
    let work: u64 = arrivals
        .iter()
        .map(|(_, r)| 4 * (r.prompt_tokens + r.max_output_tokens))
        .sum();
    for step in 0..10_000 + work {
        while next < arrivals.len() && arrivals[next].0 <= now {
            twins.add(now, &arrivals[next].1);
            next += 1;
        }
        let mv = moves[step as usize % moves.len()];
        if mv.is_multiple_of(11) {
            twins.cancel(mv);
        }
        if !twins.fast.has_work() {
            match arrivals.get(next) {
                Some(a) => now = a.0,
                None => break,
            }
            continue;
        }
        now = twins.step(now, mv);
        let fast = &twins.fast;
        fast.check_invariants()
            .unwrap_or_else(|e| panic!("after step {step} at {now}: {e}"));
        match unshared {
            false => fast.assert_same_state(&twins.plain),
            true => twins.plain.check_invariants().unwrap(),
        }
    }
    assert!(!twins.fast.has_work(), "work left after the step budget");
    assert_eq!(
        twins.plain.probe_reuses(),
        0,
        "the plain rank keeps no probe"
    );
    twins.met.probe_reuses = twins.fast.probe_reuses();
    twins.met
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

    #[test]
    fn reusing_prefix_probes_changes_nothing(
        args in engine(),
        specs in requests(),
        moves in proptest::collection::vec(any::<u8>(), 1..64),
        publish_generated in any::<bool>(),
    ) {
        run_both(args, &specs, &moves, (publish_generated, false));
    }

    #[test]
    fn leaving_unshared_blocks_out_of_index_and_events_changes_nothing_else(
        args in engine(),
        specs in requests(),
        moves in proptest::collection::vec(any::<u8>(), 1..64),
        publish_generated in any::<bool>(),
    ) {
        run_both(args, &specs, &moves, (publish_generated, true));
    }
}

#[test]
fn the_probe_differential_meets_reuse_preemption_and_eviction() {
    // The property above is only as good as what its streams reach: a fixed sample of them,
    // on a pool small enough to preempt and evict, must reuse kept probes, admit with cached
    // prefixes, preempt, evict published blocks, skip quiet passes and cancel.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (
        requests(),
        proptest::collection::vec(any::<u8>(), 1..64),
        any::<bool>(),
    );
    let mut total = Met::default();
    for _ in 0..64 {
        let (specs, moves, publish) = strategy.new_tree(&mut runner).unwrap().current();
        let unshared = moves[0] % 2 == 1;
        let mut args = EngineArgs::default();
        args.common.block_size = 16;
        args.common.capacity = CapacityArgs {
            num_gpu_blocks: 48,
            max_num_seqs: 4,
            max_num_batched_tokens: 256,
            ..CapacityArgs::default()
        };
        let met = run_both(args, &specs, &moves, (publish, unshared));
        total.probe_reuses += met.probe_reuses;
        total.reused_admissions += met.reused_admissions;
        total.preemptions += met.preemptions;
        total.removed_blocks += met.removed_blocks;
        total.quiet_passes += met.quiet_passes;
        total.cancellations += met.cancellations;
        total.withheld_blocks += met.withheld_blocks;
    }
    let counts = [
        total.withheld_blocks,
        total.probe_reuses,
        total.reused_admissions,
        total.preemptions,
        total.removed_blocks,
        total.quiet_passes,
        total.cancellations,
    ];
    assert!(counts.iter().all(|&n| n > 0), "{total:?}");
}

#[test]
fn completed_requests_get_every_token_they_asked_for() {
    // Deterministic companion: roomy engine, so nothing is rejected and counts are exact.
    let mut args = EngineArgs::default();
    args.common.capacity.num_gpu_blocks = 64;
    args.common.block_size = 16;
    let mut w = MockWorker::new(args, WorkerWithDpRank::new(0, 0));
    for i in 0..5u64 {
        let tokens: Vec<Token> = vec![i as u32; 40 + 10 * i as usize];
        let req = MockRequest {
            id: RequestId(i),
            prompt_tokens: tokens.len() as u64,
            prompt_hashes: hashing::sequence_hashes(&tokens, 16).into(),
            max_output_tokens: 3 + i,
            unshared_from: u64::MAX,
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
