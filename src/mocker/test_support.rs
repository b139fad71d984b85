//! Test support: a minimal driver that runs arrivals through one rank the way the simulator
//! does, and mooncake-row request builders.

use super::config::EngineArgs;
use super::protocol::{MockRequest, PassOutput};
use super::vllm::MockWorker;
use crate::scheduling::hashing;
use crate::scheduling::types::{RequestId, Token, WorkerWithDpRank};
use crate::time::SimTime;
use std::collections::BTreeMap;

/// What the driver saw of one request, in ns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) admit_ns: Option<u64>,
    pub(crate) first_ns: Option<u64>,
    pub(crate) done_ns: Option<u64>,
    pub(crate) rejected_ns: Option<u64>,
    pub(crate) tokens: u64,
    pub(crate) reused: u64,
}

/// A mooncake trace row: each hash id stands for 512 copies of itself.
pub(crate) fn row(id: u64, input: u64, output: u64, hash_ids: &[u32], bs: u64) -> MockRequest {
    let tokens: Vec<Token> = hash_ids
        .iter()
        .flat_map(|&h| std::iter::repeat_n(h, 512))
        .take(input as usize)
        .collect();
    assert_eq!(tokens.len() as u64, input, "trace row too short");
    MockRequest {
        id: RequestId(id),
        prompt_tokens: input,
        prompt_hashes: hashing::sequence_hashes(&tokens, bs as usize).into(),
        max_output_tokens: output,
        unshared_from: u64::MAX,
    }
}

pub(crate) fn ms(x: f64) -> u64 {
    (x * 1e6).round() as u64
}

/// Runs arrivals (ns, request) through one rank the way the simulator does: a pass starts
/// when a request reaches an idle rank and again at every pass end while work remains.
pub(crate) fn drive(args: EngineArgs, arrivals: Vec<(u64, MockRequest)>) -> BTreeMap<u64, Seen> {
    drive_checked(args, arrivals, true)
}

/// `drive`, optionally without the O(pool) invariant check after every pass (for timing).
pub(crate) fn drive_checked(
    args: EngineArgs,
    arrivals: Vec<(u64, MockRequest)>,
    check: bool,
) -> BTreeMap<u64, Seen> {
    let mut w = MockWorker::new(args, WorkerWithDpRank::new(0, 0));
    let mut seen: BTreeMap<u64, Seen> = BTreeMap::new();
    let mut out = PassOutput::default();
    let mut next = 0;
    let mut now = arrivals.first().map_or(0, |a| a.0);
    let debug = std::env::var_os("MOCKER_DEBUG").is_some();
    for _ in 0..1_000_000 {
        while next < arrivals.len() && arrivals[next].0 <= now {
            w.add_request(SimTime::from_ns(arrivals[next].0), arrivals[next].1.clone())
                .unwrap();
            next += 1;
        }
        if !w.has_work() {
            match arrivals.get(next) {
                Some(a) => {
                    now = a.0;
                    continue;
                }
                None => return seen,
            }
        }
        let end = w.execute_pass(SimTime::from_ns(now), &mut out).as_ns();
        if check {
            w.check_invariants().unwrap();
        }
        if debug {
            eprintln!(
                "pass {now}..{end} T={} A={} adm={:?} pre={:?} rej={:?} done={:?} active={} inactive={} ev={:?}",
                out.prefill_tokens,
                out.decode_kv_tokens,
                out.admitted
                    .iter()
                    .map(|a| (a.id.0, a.reused_tokens))
                    .collect::<Vec<_>>(),
                out.preempted.iter().map(|r| r.0).collect::<Vec<_>>(),
                out.rejected
                    .iter()
                    .map(|r| (r.id.0, r.reason.label()))
                    .collect::<Vec<_>>(),
                out.tokens
                    .iter()
                    .filter(|t| t.completed)
                    .map(|t| t.id.0)
                    .collect::<Vec<_>>(),
                w.active_blocks(),
                w.inactive_blocks(),
                out.kv_events
                    .iter()
                    .map(|e| match &e.data {
                        crate::scheduling::types::KvEventData::Stored { blocks, .. } =>
                            blocks.len() as i64,
                        crate::scheduling::types::KvEventData::Removed { blocks } =>
                            -(blocks.len() as i64),
                        _ => 0,
                    })
                    .collect::<Vec<_>>(),
            );
        }
        record(&mut seen, &out, now, end);
        now = end;
    }
    panic!("driver did not finish");
}

fn record(seen: &mut BTreeMap<u64, Seen>, out: &PassOutput, now: u64, end: u64) {
    for a in &out.admitted {
        let s = seen.entry(a.id.0).or_default();
        s.admit_ns.get_or_insert(now);
        s.reused = a.reported_reused_tokens;
    }
    for t in &out.tokens {
        let s = seen.entry(t.id.0).or_default();
        s.tokens += 1;
        if t.first {
            s.first_ns = Some(end);
        }
        if t.completed {
            s.done_ns = Some(end);
        }
    }
    for id in &out.finished_empty {
        seen.entry(id.0).or_default().done_ns = Some(end);
    }
    for r in &out.rejected {
        seen.entry(r.id.0).or_default().rejected_ns = Some(end);
    }
}
