//! A rank's part in disaggregated serving: a prefill rank holds each computed prompt's blocks
//! until its decode worker has them; a decode rank reserves blocks for a handoff, queues it
//! when its transfer lands, and admits it with the prompt computed.

use super::*;

impl MockWorker {
    /// A prefill rank lets go of held request `id` (its decode worker has the KV): its blocks
    /// are released (full ones stay cached). False if the rank holds no such held request.
    pub fn release_held(&mut self, id: RequestId) -> bool {
        let Some(&slot) = self.slot_of.get(&id) else {
            return false;
        };
        if self.req(slot).phase != RequestPhase::Held {
            return false;
        }
        self.held -= 1;
        self.release_blocks(slot);
        self.forget(slot);
        true
    }

    /// A decode rank is asked to take the handoff of `req` (its prompt computed elsewhere):
    /// it reserves the prompt's blocks if fewer than `max_num_seqs` requests run (those
    /// waiting do not count) and the blocks not already active fit in the blocks no request
    /// holds (cached inactive blocks count as free). The reserved request holds its blocks
    /// (its cached leading blocks, then fresh ones) until [`MockWorker::activate_handoff`]
    /// queues it.
    pub fn reserve_handoff(&mut self, req: MockRequest) -> Result<Reservation, AddRequestError> {
        let bs = self.args.block_size;
        let prompt = req.prompt_tokens;
        if self.running.len() as u64 >= self.args.max_num_seqs {
            return Ok(Reservation::Wait);
        }
        let hit = match self.args.enable_prefix_caching {
            true => (self.pool).match_prefix(req.prompt_hashes.iter().copied(), prompt / bs),
            false => PrefixMatch::default(),
        };
        let needed = prompt.div_ceil(bs) - hit.active_blocks;
        if needed > self.args.num_gpu_blocks - self.pool.active_blocks() {
            return Ok(Reservation::Wait);
        }
        let id = req.id;
        self.add_request(SimTime::ZERO, req)?;
        let slot = self.slot_of[&id];
        self.waiting.pop_back();
        if let Some(reason) = self.never_fits(self.req(slot)) {
            self.forget(slot);
            return Ok(Reservation::Never(reason));
        }
        // The kept probe is another request's: its blocks must not be taken for this one.
        self.head_probe.clear();
        let allocated = self.allocate(slot, prompt, hit.blocks);
        debug_assert!(allocated, "the blocks were counted free");
        let r = self.req_mut(slot);
        r.phase = RequestPhase::Reserved;
        r.transferred = true;
        self.held += 1;
        Ok(Reservation::Reserved {
            cached_blocks: hit.blocks,
        })
    }

    /// The transfer of reserved request `id` landed: it waits as any request does, and is
    /// admitted with its prompt computed, so its first pass is a decode step. False if the
    /// rank has no such reserved request.
    pub fn activate_handoff(&mut self, id: RequestId) -> bool {
        let Some(&slot) = self.slot_of.get(&id) else {
            return false;
        };
        if self.req(slot).phase != RequestPhase::Reserved {
            return false;
        }
        self.held -= 1;
        // Its blocks hold the prompt's KV from now on: a later handoff of the same prefix
        // finds them (and, as 1.6.1 counts, shares them), one still in transfer does not.
        let prompt = self.req(slot).prompt_tokens;
        self.register_computed(slot, prompt);
        self.req_mut(slot).phase = RequestPhase::Waiting;
        self.landed.push_back(slot);
        true
    }

    /// Admits a landed handoff with its whole prompt computed on the blocks reserved for it
    /// (it takes no token budget).
    pub(super) fn admit_transferred(&mut self, slot: Slot, out: &mut PassOutput) {
        let prompt = self.req(slot).prompt_tokens;
        self.running.push(slot);
        let r = &mut self.reqs[slot as usize];
        r.computed = prompt;
        r.phase = RequestPhase::Running;
        r.transferred = false;
        out.admitted.push(Admitted {
            id: r.id,
            reused_tokens: 0,
            reported_reused_tokens: r.max_reused,
            readmission: false,
        });
    }

    /// A prefill rank's requests whose prompt is computed leave the running batch (freeing
    /// their slot, not their blocks) and are held for their decode worker, in running order.
    /// No token is produced: the decode worker makes the first.
    pub(super) fn hold_prefilled(&mut self, out: &mut PassOutput) {
        let reqs = &mut self.reqs;
        let mut held = 0;
        self.running.retain(|&slot| {
            let r = &mut reqs[slot as usize];
            if r.computed < r.seq_len() {
                return true;
            }
            r.phase = RequestPhase::Held;
            out.held.push(r.id);
            held += 1;
            false
        });
        self.held += held;
    }
}
