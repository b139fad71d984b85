//! The rank's checker, beside the model: every request in exactly one queue, blocks held as
//! computed tokens need, refcounts as requests hold them, capacity and batch limits kept.

use super::{MockWorker, Req, Slot};
use crate::mocker::config::WorkerRole;
use crate::mocker::protocol::RequestPhase;
use crate::mocker::vllm::kv_pool::BlockId;
use rustc_hash::{FxHashMap, FxHashSet};
#[cfg(test)]
use {
    super::{block_hash, known_hashes},
    crate::mocker::vllm::kv_pool::KvPool,
    crate::mocker::vllm::memo::HeadProbe,
};
impl MockWorker {
    /// Verifies the rank's bookkeeping: every request in exactly one queue (or held) with a
    /// matching phase, waiting requests holding no KV, running requests holding exactly the blocks their
    /// computed tokens need, block refcounts equal to the references requests hold, active +
    /// inactive within capacity, running within `max_num_seqs`. O(requests + blocks).
    pub fn check_invariants(&self) -> Result<(), String> {
        self.pool.check_invariants()?;
        if self.running.len() as u64 > self.common.capacity.max_num_seqs {
            return Err(format!("{} running > max_num_seqs", self.running.len()));
        }
        let queued = self.waiting.len() + self.landed.len() + self.running.len();
        if queued + self.held != self.slot_of.len() {
            return Err("a live request is in no queue, or in two".to_string());
        }
        self.check_decode_queue()?;
        if self.slot_of.len() + self.free_slots.len() != self.reqs.len() {
            return Err("a request slot is neither live nor free".to_string());
        }
        let mut seen = FxHashSet::default();
        let mut refs: FxHashMap<BlockId, u32> = FxHashMap::default();
        let held = self.slot_of.values().copied().filter(|&s| {
            let r = self.req(s);
            matches!(r.phase, RequestPhase::Held | RequestPhase::Reserved)
        });
        let held: Vec<Slot> = held.collect();
        if held.len() != self.held {
            return Err(format!(
                "{} held requests, {} counted",
                held.len(),
                self.held
            ));
        }
        let queues = self.waiting.iter().chain(&self.landed).chain(&self.running);
        for &slot in queues.chain(&held) {
            let r = self
                .reqs
                .get(slot as usize)
                .ok_or(format!("queued slot {slot} unknown"))?;
            let id = r.id;
            if !seen.insert(id) {
                return Err(format!("request {id} queued twice"));
            }
            if !r.live || self.slot_of.get(&id) != Some(&slot) {
                return Err(format!("request {id} is not live in slot {slot}"));
            }
            self.check_request(r)?;
            for &b in &r.blocks {
                *refs.entry(b).or_default() += 1;
            }
        }
        for &slot in &self.running {
            let r = self.req(slot);
            if r.phase != RequestPhase::Running {
                return Err(format!("request {} in running but not Running", r.id));
            }
        }
        if refs.len() as u64 != self.pool.active_blocks() {
            return Err(format!(
                "requests hold {} distinct blocks, pool has {} active",
                refs.len(),
                self.pool.active_blocks()
            ));
        }
        match refs.iter().find(|&(&b, &n)| self.pool.refcount(b) != n) {
            Some((b, n)) => Err(format!(
                "block {b}: {n} holders, refcount {}",
                self.pool.refcount(*b)
            )),
            None => Ok(()),
        }
    }

    /// Asserts that `other` is in exactly the same state: queues, every live request's
    /// progress and blocks, and the pool (tests comparing two ways to reach a state).
    #[cfg(test)]
    pub(crate) fn assert_same_state(&self, other: &MockWorker) {
        self.pool.assert_same_state(&other.pool);
        assert_eq!(self.waiting, other.waiting, "waiting queues differ");
        assert_eq!(self.landed, other.landed, "landed handoffs differ");
        assert_eq!(self.queue, other.queue, "decode queues differ");
        assert_eq!(self.running, other.running, "running queues differ");
        assert_eq!(
            self.free_slots, other.free_slots,
            "free request slots differ"
        );
        let progress = |w: &MockWorker| {
            let live = w.reqs.iter().filter(|r| r.live);
            live.map(|r| {
                let counts = (r.generated, r.computed, r.registered, r.preemptions);
                (r.id, r.phase, counts, r.max_reused, r.blocks.clone())
            })
            .collect::<Vec<_>>()
        };
        assert_eq!(progress(self), progress(other), "requests differ");
        assert_eq!(self.next_event_id, other.next_event_id);
        assert_eq!(self.preemptions_total, other.preemptions_total);
    }

    /// A decode rank's `queue` holds its waiting and its landed requests, the waiting ones
    /// in their order; its landed handoffs are in the order they reached it. Other ranks
    /// keep no such queue.
    fn check_decode_queue(&self) -> Result<(), String> {
        if self.common.role != WorkerRole::Decode {
            return match self.queue.is_empty() && self.landed.is_empty() {
                true => Ok(()),
                false => Err("a rank that decodes no handoff queues one".to_string()),
            };
        }
        if self.queue.len() != self.waiting.len() + self.landed.len() {
            return Err("the decode queue is not its waiting and landed requests".to_string());
        }
        let preempted = self.queue.iter().filter(|&&s| !self.landed.contains(&s));
        if !preempted.copied().eq(self.waiting.iter().copied()) {
            return Err("the decode queue disorders its waiting requests".to_string());
        }
        let orders = self.landed.iter().map(|&s| self.req(s).handoff_order);
        if !orders.clone().zip(orders.skip(1)).all(|(a, b)| a < b) {
            return Err("landed handoffs are out of their arrival order".to_string());
        }
        Ok(())
    }

    fn check_request(&self, r: &Req) -> Result<(), String> {
        let id = r.id;
        if r.computed > r.seq_len() {
            return Err(format!("request {id} computed beyond its sequence"));
        }
        if r.registered > r.blocks.len() {
            return Err(format!("request {id} registered more blocks than it holds"));
        }
        match r.phase {
            RequestPhase::Running | RequestPhase::Held => {
                let want = r.computed.div_ceil(self.common.block_size);
                if r.blocks.len() as u64 != want {
                    return Err(format!(
                        "request {id} holds {} blocks, needs {want}",
                        r.blocks.len()
                    ));
                }
            }
            // A handoff's request holds its reserved prompt blocks until admitted.
            RequestPhase::Reserved | RequestPhase::Waiting if r.transferred => {
                let want = r.prompt_tokens.div_ceil(self.common.block_size);
                if r.blocks.len() as u64 != want || r.computed != 0 {
                    return Err(format!(
                        "handoff {id} holds {} blocks, reserved {want}",
                        r.blocks.len()
                    ));
                }
            }
            RequestPhase::Reserved | RequestPhase::Waiting | RequestPhase::Preempted => {
                if !r.blocks.is_empty() || r.computed != 0 {
                    return Err(format!("waiting request {id} holds KV"));
                }
            }
        }
        Ok(())
    }
}

/// Test builds check every reused probe against a fresh one.
#[cfg(test)]
pub(super) fn check_probe(pool: &KvPool, r: &Req, probe: &HeadProbe) {
    let (limit, hit, ids) = probe.kept();
    assert_eq!(
        pool.match_prefix(known_hashes(r), limit),
        hit,
        "a kept probe differs from a fresh one"
    );
    check_found(pool, r, ids);
}

/// Test builds check that handed-on block ids are what lookups find.
#[cfg(test)]
pub(super) fn check_found(pool: &KvPool, r: &Req, found: &[BlockId]) {
    for (index, &id) in found.iter().enumerate() {
        assert_eq!(
            pool.lookup(block_hash(r, index)),
            Some(id),
            "a handed-on block is not what a lookup finds"
        );
    }
}
