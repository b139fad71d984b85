//! A rank's part in disaggregated serving: a prefill rank holds each computed prompt's blocks
//! until its decode worker has them; a decode rank reserves blocks for a handoff, queues it
//! when its transfer lands, and admits it with the prompt computed.

use super::{MockWorker, Scheduled, Slot};
use crate::mocker::config::WorkerRole;
use crate::mocker::protocol::{
    AddRequestError, Admitted, MockRequest, PassOutput, RequestPhase, Reservation,
};
use crate::mocker::vllm::kv_pool::PrefixMatch;
use crate::scheduling::types::RequestId;
use crate::time::SimTime;
use std::collections::VecDeque;

impl MockWorker {
    /// A prefill rank lets go of held request `id` (its decode worker has the KV): its blocks
    /// are released (full ones stay cached). False if the rank holds no such held request.
    pub fn release_held(&mut self, id: RequestId) -> bool {
        let Some(slot) = self.slot_in(id, RequestPhase::Held) else {
            return false;
        };
        self.held -= 1;
        self.release_blocks(slot);
        self.forget(slot);
        self.capacity_generation += 1;
        true
    }

    /// A decode rank is asked to take the handoff of `req` (its prompt computed elsewhere):
    /// it reserves the prompt's blocks if fewer than `max_num_seqs` requests run (those
    /// waiting do not count) and the blocks not already active fit in the blocks no request
    /// holds (cached inactive blocks count as free). The reserved request holds its blocks
    /// (its cached leading blocks, then fresh ones) until [`MockWorker::activate_handoff`]
    /// queues it.
    ///
    /// A handoff that had to wait is not tried again until the rank has freed capacity since
    /// (a request completed, was preempted, or left holding blocks or a running slot): it
    /// waits at once, even if it would fit by now (1.6.1 marks the waiting handoff with its
    /// capacity generation). So its prefix becoming active in the cache (a landed handoff's,
    /// or a request admitted since) does not wake it.
    pub fn reserve_handoff(&mut self, req: MockRequest) -> Result<Reservation, AddRequestError> {
        debug_assert_eq!(self.common.role, WorkerRole::Decode, "only a decode rank");
        if self.reservation_wait == Some((req.id, self.capacity_generation)) {
            return Ok(Reservation::Wait);
        }
        let bs = self.common.block_size;
        let prompt = req.prompt_tokens;
        let id = req.id;
        self.add_request(SimTime::ZERO, req)?;
        let slot = self.slot_of[&id];
        // A reserved request is in no queue until its transfer lands.
        self.waiting.pop_back();
        self.queue.pop_back();
        if let Some(reason) = self.never_fits(self.req(slot)) {
            self.forget(slot);
            return Ok(Reservation::Never(reason));
        }
        // Probed as an admission's probe is, so that the blocks it finds are taken by id
        // rather than looked up twice more (the waiting head's kept probe is dropped: its
        // blocks must not be taken for this request).
        let hit = match (self.common.enable_prefix_caching, self.reuse_probes) {
            (false, _) => PrefixMatch::default(),
            (true, true) => {
                let hashes = self.reqs[slot as usize].prompt_hashes.iter().copied();
                self.head_probe
                    .probe(slot, prompt / bs, hashes, &mut self.pool)
            }
            (true, false) => {
                self.head_probe.clear();
                let hashes = self.reqs[slot as usize].prompt_hashes.iter().copied();
                self.pool.match_prefix(hashes, prompt / bs)
            }
        };
        let needed = prompt.div_ceil(bs) - hit.active_blocks;
        let full = self.running.len() as u64 >= self.common.capacity.max_num_seqs;
        if full || needed > self.common.capacity.num_gpu_blocks - self.pool.active_blocks() {
            self.forget(slot);
            self.reservation_wait = Some((id, self.capacity_generation));
            return Ok(Reservation::Wait);
        }
        let allocated = self.allocate(slot, prompt, hit.blocks);
        // Its blocks are taken: the probe's answer no longer describes a waiting request.
        self.head_probe.forget(slot);
        debug_assert!(allocated, "the blocks were counted free");
        let order = self.next_handoff_order;
        self.next_handoff_order += 1;
        let r = self.req_mut(slot);
        r.phase = RequestPhase::Reserved;
        r.transferred = true;
        r.handoff_order = order;
        self.held += 1;
        Ok(Reservation::Reserved {
            cached_blocks: hit.blocks,
        })
    }

    /// The transfer of reserved request `id` landed: it waits as any request does, and is
    /// admitted with its prompt computed, so its first pass is a decode step. False if the
    /// rank has no such reserved request.
    ///
    /// It queues by the order it reached the rank, not by when it landed (1.6.1 restores a
    /// handoff's arrival ordinal when it activates it): before the first waiting request
    /// that reached the rank after it, a preempted one included, else last. So a short
    /// prompt's transfer that lands first still waits behind a longer one reserved before
    /// it.
    pub fn activate_handoff(&mut self, id: RequestId) -> bool {
        let Some(slot) = self.slot_in(id, RequestPhase::Reserved) else {
            return false;
        };
        self.held -= 1;
        // Its blocks hold the prompt's KV from now on: a later handoff of the same prefix
        // finds them (and, as 1.6.1 counts, shares them), one still in transfer does not.
        let prompt = self.req(slot).prompt_tokens;
        self.register_computed(slot, prompt);
        self.req_mut(slot).phase = RequestPhase::Waiting;
        let order = self.req(slot).handoff_order;
        let reqs = &self.reqs;
        let after = |queue: &VecDeque<Slot>| {
            let later = queue
                .iter()
                .position(|&s| reqs[s as usize].handoff_order > order);
            later.unwrap_or(queue.len())
        };
        let (at_landed, at_queue) = (after(&self.landed), after(&self.queue));
        self.landed.insert(at_landed, slot);
        self.queue.insert(at_queue, slot);
        true
    }

    /// Tells a decode rank whether handoffs wait for room on it (see
    /// [`MockWorker::admit_waiting`]); its simulator keeps this current before each pass.
    pub fn set_handoffs_pending(&mut self, pending: bool) {
        self.handoffs_pending = pending;
    }

    /// The slot of live request `id` if it is in `phase`.
    fn slot_in(&self, id: RequestId, phase: RequestPhase) -> Option<Slot> {
        let slot = *self.slot_of.get(&id)?;
        (self.req(slot).phase == phase).then_some(slot)
    }

    /// Admits a landed handoff with its whole prompt computed on the blocks reserved for it
    /// (it takes no token budget).
    pub(super) fn admit_transferred(&mut self, slot: Slot, out: &mut PassOutput) {
        super::unqueue(&mut self.landed, slot);
        super::unqueue(&mut self.queue, slot);
        let prompt = self.req(slot).prompt_tokens;
        self.running.push(slot);
        // Its first token is a decode step of this pass (as 1.6.1 schedules it).
        self.scheduled.push(Scheduled {
            slot,
            tokens: 0,
            prompt_tokens: 0,
            prefix_tokens: prompt,
        });
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

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;
    use crate::mocker::test_support::row;

    fn role_args(role: WorkerRole, f: impl FnOnce(&mut EngineArgs)) -> EngineArgs {
        let mut args = EngineArgs::default();
        args.common.role = role;
        f(&mut args);
        args
    }

    fn rank(args: EngineArgs) -> MockWorker {
        MockWorker::new(args, WorkerWithDpRank::new(0, 0))
    }

    #[test]
    fn a_prefill_rank_holds_a_computed_prompt_without_a_token_or_a_running_slot() {
        let mut w = rank(role_args(WorkerRole::Prefill, |a| {
            a.common.capacity.max_num_seqs = 1
        }));
        w.add_request(SimTime::ZERO, row(1, 512, 1, &[1], 64))
            .unwrap();
        w.add_request(SimTime::ZERO, row(2, 512, 1, &[2], 64))
            .unwrap();
        let mut out = PassOutput::default();
        // P(512), with no decode term and no token: the prompt is held, its slot free.
        let end = w.execute_pass(SimTime::ZERO, &mut out);
        assert_eq!(end.as_ns(), 24_385_704);
        assert_eq!(out.held, vec![RequestId(1)]);
        assert!(out.tokens.is_empty());
        assert_eq!(
            (w.held_len(), w.running_len(), w.active_blocks()),
            (1, 0, 8)
        );
        // The next pass admits request 2 while request 1 still holds its blocks.
        w.execute_pass(end, &mut out);
        assert_eq!(out.admitted[0].id, RequestId(2));
        assert_eq!(w.active_blocks(), 16);
        assert!(w.release_held(RequestId(1)));
        assert!(!w.release_held(RequestId(1)), "released once");
        assert_eq!((w.active_blocks(), w.inactive_blocks()), (8, 8));
        w.check_invariants().unwrap();
        assert!(!w.has_work(), "held requests are no work for a pass");
    }

    #[test]
    fn a_decode_rank_reserves_lands_and_decodes_with_no_prefill_time() {
        let mut w = rank(role_args(WorkerRole::Decode, |_| {}));
        let reserved = w.reserve_handoff(row(1, 1024, 2, &[1, 2], 64)).unwrap();
        assert_eq!(reserved, Reservation::Reserved { cached_blocks: 0 });
        assert_eq!(
            w.active_blocks(),
            16,
            "the reservation holds the prompt's blocks"
        );
        assert!(!w.has_work(), "a transfer in flight is no work for a pass");
        assert!(w.activate_handoff(RequestId(1)));
        let mut out = PassOutput::default();
        // The first pass is one decode step over the whole prompt: D(1024 / 1048576).
        let end = w.execute_pass(SimTime::ZERO, &mut out);
        assert_eq!(end.as_ns(), 5_792_720);
        assert_eq!(out.admitted[0].reused_tokens, 0);
        assert!(out.tokens[0].first && !out.tokens[0].completed);
        let end = w.execute_pass(end, &mut out);
        assert_eq!(end.as_ns(), 5_792_720 + 5_792_771);
        assert!(out.tokens[0].completed);
        w.check_invariants().unwrap();
    }

    #[test]
    fn a_decode_rank_builds_no_kv_events_yet_its_published_blocks_evict_as_published() {
        let mut w = rank(role_args(WorkerRole::Decode, |_| {}));
        w.reserve_handoff(row(1, 1024, 1, &[1, 2], 64)).unwrap();
        assert!(w.activate_handoff(RequestId(1)));
        let mut out = PassOutput::default();
        // Run dry: the prompt's 16 registered blocks end inactive, first in line to go.
        let mut now = SimTime::ZERO;
        while w.has_work() {
            now = w.execute_pass(now, &mut out);
            assert!(out.kv_events.is_empty(), "no router hears a decode rank");
        }
        assert_eq!(w.inactive_blocks(), 16);
        // Their evictions would be published: a quiet run is planned as for any rank.
        assert_eq!(w.pool.silent_evictions(16), 0);
        // A prefill rank computing the same prompt publishes its blocks.
        let mut p = rank(role_args(WorkerRole::Prefill, |_| {}));
        p.add_request(SimTime::ZERO, row(1, 1024, 1, &[1, 2], 64))
            .unwrap();
        p.execute_pass(SimTime::ZERO, &mut out);
        assert!(!out.kv_events.is_empty());
    }

    #[test]
    fn a_decode_rank_reserves_below_max_num_seqs_and_within_its_free_blocks() {
        let mut w = rank(role_args(WorkerRole::Decode, |a| {
            a.common.capacity.num_gpu_blocks = 20;
            a.common.capacity.max_num_seqs = 1;
        }));
        let first = w.reserve_handoff(row(1, 512, 5, &[1], 64)).unwrap();
        assert!(matches!(first, Reservation::Reserved { .. }));
        // Waiting handoffs do not count against max_num_seqs, their blocks do.
        let second = w.reserve_handoff(row(2, 512, 5, &[2], 64)).unwrap();
        assert!(matches!(second, Reservation::Reserved { .. }));
        let third = w.reserve_handoff(row(3, 512, 5, &[3], 64)).unwrap();
        assert_eq!(third, Reservation::Wait, "16 of 20 blocks are reserved");
        w.activate_handoff(RequestId(1));
        let mut out = PassOutput::default();
        w.execute_pass(SimTime::ZERO, &mut out);
        assert_eq!(w.running_len(), 1);
        w.release_held(RequestId(2));
        let fourth = w.reserve_handoff(row(4, 64, 5, &[4], 64)).unwrap();
        assert_eq!(
            fourth,
            Reservation::Wait,
            "a full running batch takes no handoff"
        );
        let never = rank(role_args(WorkerRole::Decode, |a| {
            a.common.capacity.num_gpu_blocks = 4
        }))
        .reserve_handoff(row(5, 512, 5, &[5], 64))
        .unwrap();
        assert_eq!(never, Reservation::Never(RejectReason::PromptOverPool));
    }

    #[test]
    fn a_reservation_counts_the_prompts_blocks_the_decode_cache_holds() {
        let mut w = rank(role_args(WorkerRole::Decode, |_| {}));
        w.reserve_handoff(row(1, 1024, 1, &[1, 2], 64)).unwrap();
        w.activate_handoff(RequestId(1));
        let mut out = PassOutput::default();
        w.execute_pass(SimTime::ZERO, &mut out);
        assert!(!w.has_work());
        let reserved = w.reserve_handoff(row(2, 1536, 1, &[1, 2, 3], 64)).unwrap();
        assert_eq!(reserved, Reservation::Reserved { cached_blocks: 16 });
        let other = w.reserve_handoff(row(3, 1536, 1, &[9, 2, 3], 64)).unwrap();
        assert_eq!(other, Reservation::Reserved { cached_blocks: 0 });
        w.check_invariants().unwrap();
    }

    /// A reservation takes the cached blocks its probe found by id; a rank that looks every
    /// block up afresh reserves, waits and ends up exactly alike (test builds also check the
    /// ids against fresh lookups as they are taken).
    #[test]
    fn a_reservation_takes_what_its_probe_found_as_fresh_lookups_would() {
        let args = role_args(WorkerRole::Decode, |a| {
            a.common.capacity.num_gpu_blocks = 40
        });
        let (mut fast, mut plain) = (rank(args.clone()), rank(args));
        plain.set_plain_lookups();
        let mut outs = [PassOutput::default(), PassOutput::default()];
        let mut now = SimTime::ZERO;
        let steps: [(u64, u64, &[u32]); 5] = [
            (1, 1024, &[1, 2]),
            (2, 1536, &[1, 2, 3]),
            (3, 1024, &[1, 4]),
            (4, 2048, &[5, 6, 7, 8]),
            (5, 1536, &[1, 2, 9]),
        ];
        for (id, prompt, hash_ids) in steps {
            let request = row(id, prompt, 2, hash_ids, 64);
            let reserved = fast.reserve_handoff(request.clone()).unwrap();
            assert_eq!(
                reserved,
                plain.reserve_handoff(request).unwrap(),
                "request {id}"
            );
            if matches!(reserved, Reservation::Reserved { .. }) {
                assert!(fast.activate_handoff(RequestId(id)));
                assert!(plain.activate_handoff(RequestId(id)));
            }
            // Run both dry, so that later prompts find the earlier ones' blocks inactive.
            while fast.has_work() {
                let end = fast.execute_pass(now, &mut outs[0]);
                assert_eq!(end, plain.execute_pass(now, &mut outs[1]));
                assert_eq!(outs[0], outs[1], "passes of request {id} differ");
                now = end;
            }
            fast.check_invariants().unwrap();
            fast.assert_same_state(&plain);
        }
        assert!(
            fast.inactive_blocks() > 0,
            "cached blocks were there to find"
        );
    }

    /// 1.6.1 puts a landed handoff back by the order it reached the rank: the one reserved
    /// first is admitted first even when the other's transfer landed before it.
    #[test]
    fn landed_handoffs_are_admitted_in_the_order_they_were_reserved() {
        let mut w = rank(role_args(WorkerRole::Decode, |a| {
            a.common.capacity.max_num_seqs = 1
        }));
        w.reserve_handoff(row(1, 1024, 2, &[1, 2], 64)).unwrap();
        w.reserve_handoff(row(2, 512, 2, &[3], 64)).unwrap();
        assert!(
            w.activate_handoff(RequestId(2)),
            "the shorter transfer lands first"
        );
        assert!(w.activate_handoff(RequestId(1)));
        let mut out = PassOutput::default();
        let end = w.execute_pass(SimTime::ZERO, &mut out);
        assert_eq!(out.admitted[0].id, RequestId(1));
        assert_eq!(w.waiting_len(), 1);
        w.check_invariants().unwrap();
        // Request 1's two tokens, then request 2 takes the slot.
        let end = w.execute_pass(end, &mut out);
        w.execute_pass(end, &mut out);
        assert_eq!(out.admitted[0].id, RequestId(2));
        w.check_invariants().unwrap();
    }

    /// A handoff that had to wait is tried again only once the rank frees capacity: a landed
    /// handoff making its prefix active does not wake it, the first completion does.
    #[test]
    fn a_waiting_reservation_is_retried_only_once_capacity_is_freed() {
        let mut w = rank(role_args(WorkerRole::Decode, |a| {
            a.common.capacity.num_gpu_blocks = 26
        }));
        w.reserve_handoff(row(1, 1024, 2, &[1, 2], 64)).unwrap();
        // Its first 16 blocks are request 1's, still in transfer: 24 blocks do not fit in 10.
        let second = row(2, 1536, 2, &[1, 2, 3], 64);
        let waits = w.reserve_handoff(second.clone()).unwrap();
        assert_eq!(waits, Reservation::Wait);
        // Landed, request 1's blocks are active and 8 fresh ones would fit: not tried.
        assert!(w.activate_handoff(RequestId(1)));
        assert_eq!(
            w.reserve_handoff(second.clone()).unwrap(),
            Reservation::Wait
        );
        let mut out = PassOutput::default();
        let end = w.execute_pass(SimTime::ZERO, &mut out);
        assert_eq!(
            w.reserve_handoff(second.clone()).unwrap(),
            Reservation::Wait
        );
        // Request 1 completes: the rank freed capacity, so request 2 is tried and fits.
        w.execute_pass(end, &mut out);
        assert!(out.tokens[0].completed);
        let reserved = w.reserve_handoff(second).unwrap();
        assert_eq!(reserved, Reservation::Reserved { cached_blocks: 16 });
        w.check_invariants().unwrap();
    }
}
