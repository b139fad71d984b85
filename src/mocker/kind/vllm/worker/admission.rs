//! Admission from a rank's waiting queue: in vLLM's order, what can never run rejected,
//! what must wait for blocks holding up everything behind it, and a decode rank's landed
//! handoffs admitted with their prompt computed.

#[cfg(test)]
use super::checks::check_probe;
use super::{
    Decision, MockWorker, Outcome, PassState, Req, Slot, ensure_hashes, known_hashes, r_prompt_left,
};
use crate::mocker::config::WorkerRole;
use crate::mocker::protocol::{PassOutput, RejectReason, Rejection, RequestPhase};
use crate::mocker::vllm::kv_pool::PrefixMatch;

impl MockWorker {
    /// Admits waiting requests in order while the batch has room (on a decode rank, its
    /// preempted requests and landed handoffs in the order of its `queue`). While handoffs
    /// wait for room on a decode rank, only landed ones are admitted, in the order they
    /// reached it, and the preempted requests wait (1.6.1's materialized queue).
    pub(super) fn admit_waiting(&mut self, pass: &mut PassState, out: &mut PassOutput) {
        if !self.handoffs_pending {
            return self.admit_queued(pass, out);
        }
        // Each iteration admits a landed handoff: bounded.
        while (self.running.len() as u64) < self.common.capacity.max_num_seqs
            && let Some(&slot) = self.landed.front()
        {
            self.admit_transferred(slot, out);
            // It takes no token; a spent budget still ends the admissions (as in 1.6.1).
            if pass.budget == 0 {
                break;
            }
        }
    }

    /// Admits waiting requests in order until one is left (it waits for blocks or the
    /// pass's budget, or the batch is full), which holds up everything behind it.
    fn admit_queued(&mut self, pass: &mut PassState, out: &mut PassOutput) {
        // Each iteration removes the head (admitted or rejected) or stops: bounded.
        while (self.running.len() as u64) < self.common.capacity.max_num_seqs {
            let head = match self.common.role {
                WorkerRole::Decode => self.queue.front(),
                _ => self.waiting.front(),
            };
            let Some(&slot) = head else {
                break;
            };
            if self.req(slot).phase == RequestPhase::Waiting && self.req(slot).transferred {
                self.admit_transferred(slot, out);
                if pass.budget == 0 {
                    break;
                }
                continue;
            }
            let cached_tokens = match self.decide_admission(slot) {
                Decision::Admit { cached_tokens } => cached_tokens,
                Decision::Wait => break,
                Decision::Reject(reason) => {
                    super::unqueue(&mut self.waiting, slot);
                    super::unqueue(&mut self.queue, slot);
                    let id = self.req(slot).id;
                    self.forget(slot);
                    out.rejected.push(Rejection { id, reason });
                    continue;
                }
            };
            match self.schedule(slot, Some(cached_tokens), pass, out) {
                Outcome::Scheduled { tokens } => {
                    if tokens == 0 && pass.budget == 0 {
                        break;
                    }
                }
                Outcome::Blocked | Outcome::CurrentPreempted => break,
            }
        }
    }

    /// vLLM admission of the waiting head: reject what can never run, wait while the blocks
    /// its known tokens need (less those already active in the cache) exceed the blocks not
    /// held by running requests (cached inactive blocks count as free).
    pub(super) fn decide_admission(&mut self, slot: Slot) -> Decision {
        let bs = self.common.block_size;
        let capacity = self.common.capacity.num_gpu_blocks;
        if let Some(reason) = self.never_fits(self.req(slot)) {
            return Decision::Reject(reason);
        }
        let known_blocks = self.req(slot).seq_len().div_ceil(bs);
        let hit = self.prefix_hit(slot);
        let prompt_left = r_prompt_left(self.req(slot), hit.blocks * bs);
        // Without chunking, a prompt larger than a whole pass's budget can never be scheduled
        // (1.6.1 aborts the replay there); refusing it keeps the rank live.
        if !self.vllm.enable_chunked_prefill
            && prompt_left > self.common.capacity.max_num_batched_tokens
        {
            return Decision::Reject(RejectReason::PromptOverTokenBudget);
        }
        let needed = known_blocks - hit.active_blocks;
        let available = capacity - self.pool.active_blocks();
        if needed > available {
            return Decision::Wait;
        }
        Decision::Admit {
            cached_tokens: hit.blocks * bs,
        }
    }

    /// Why a request can never be served on this rank, whatever else runs, if it cannot:
    /// its prompt reaches `max_model_len` or needs more blocks than the pool (1.6.1's two
    /// rejections), or its whole sequence would (1.6.1 serves it until it has outgrown the
    /// pool and then aborts its replay; refusing it up front spares the requests it would
    /// preempt on the way).
    pub(super) fn never_fits(&self, r: &Req) -> Option<RejectReason> {
        let bs = self.common.block_size;
        let capacity = self.common.capacity.num_gpu_blocks;
        if self
            .common
            .capacity
            .max_model_len
            .is_some_and(|m| r.prompt_tokens >= m)
        {
            return Some(RejectReason::PromptOverMaxModelLen);
        }
        if r.prompt_tokens.div_ceil(bs) > capacity {
            return Some(RejectReason::PromptOverPool);
        }
        if self.peak_tokens(r).div_ceil(bs) > capacity {
            return Some(RejectReason::SequenceOverPool);
        }
        None
    }

    /// The most tokens a request ever holds KV for: its prompt, then every generated token
    /// but the last (the last is emitted, never computed), up to `max_model_len - 1`.
    fn peak_tokens(&self, r: &Req) -> u64 {
        if r.max_output_tokens == 0 {
            return r.prompt_tokens;
        }
        let end = r.prompt_tokens.saturating_add(r.max_output_tokens);
        let end = self
            .common
            .capacity
            .max_model_len
            .map_or(end, |m| end.min(m));
        (end - 1).max(r.prompt_tokens)
    }

    /// The reusable cached prefix of a request's known tokens. At least the last token is
    /// recomputed when a token is still to be generated from it, so a fully cached
    /// block-aligned sequence reuses all but its last block (1.6.1: 960 of 1024 tokens); a
    /// request with nothing to generate (`max_output_tokens` 0) reuses every cached full
    /// block (1.6.1: all 192 tokens of a cached 3-block prompt, and no prefill).
    ///
    /// The answer and the blocks found are kept in `head_probe` and reused while the pool
    /// reports no change that could alter them (a waiting request's sequence is fixed).
    pub(super) fn prefix_hit(&mut self, slot: Slot) -> PrefixMatch {
        if !self.common.enable_prefix_caching {
            return PrefixMatch::default();
        }
        let bs = self.common.block_size;
        let finished = self.finished(self.req(slot));
        let r = &mut self.reqs[slot as usize];
        let limit = match finished {
            true => r.seq_len() / bs,
            false => (r.seq_len() - 1) / bs,
        };
        if !self.reuse_probes {
            ensure_hashes(r, limit as usize);
            return self.pool.match_prefix(known_hashes(r), limit);
        }
        if let Some(hit) = self.head_probe.answer(slot, limit, &self.pool) {
            self.probe_reuses += 1;
            #[cfg(test)]
            check_probe(&self.pool, r, &self.head_probe);
            return hit;
        }
        ensure_hashes(r, limit as usize);
        self.head_probe
            .probe(slot, limit, known_hashes(r), &mut self.pool)
    }
}
