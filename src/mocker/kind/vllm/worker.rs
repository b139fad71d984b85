//! One data-parallel rank of a mock aggregated worker: Dynamo 1.6.1's vLLM-style scheduler core
//! (waiting and running queues, continuous-batching passes, chunked prefill, block admission,
//! preemption with recompute, token emission) over a [`KvPool`], in virtual time.
//!
//! Contract with the caller (the simulator): add requests with [`MockWorker::add_request`];
//! when the rank is idle and a request arrives, call [`MockWorker::execute_pass`] at that
//! instant; then call it again at every pass end while [`MockWorker::has_work`]. Everything in
//! a [`PassOutput`] (tokens, completions, rejections, KV events) is delivered at the pass end
//! the call returns. Requests that arrive while a pass runs join at the next pass.
//!
//! Pass formation, step by step (see `execute_pass`):
//! 1. Running requests in running order, while budget remains: each schedules its remaining
//!    known tokens (a prefill chunk, or the one dangling decode token) up to the budget. Blocks
//!    are allocated up to the new computed length; if the pool is full, a victim is preempted
//!    (LIFO or FIFO), its work this pass undone, and the allocation retried.
//! 2. If nothing was preempted, waiting requests in FIFO order while fewer than `max_num_seqs`
//!    run: admit (or reject, or stop at the first that must wait), then schedule as above.
//! 3. Prefill time from the batch's integer-mean statistics; decode time from the total
//!    context of requests that had already produced a token (1.6.1 charges a request's first
//!    token no decode time); every request whose known tokens are all computed gets a token.
//!
//! Where Dynamo 1.6.1 differs from its other revisions, this follows 1.6.1 (each point was
//! measured with `tools/dynamo-replay` and is pinned by a test here or a parity fixture; see
//! docs/mock-worker.md#where-161-differs-from-other-revisions):
//! - A request whose prefill completes in a pass gets its first token at that pass end with no
//!   decode time of its own. The decode term covers only ready requests that had already
//!   generated a token (including a readmitted request whose recompute ends in the pass), with
//!   `A` = the sum of their current sequence lengths (prompt + generated so far).
//! - Prefill batch statistics count prompt positions only: recomputing a preempted request's
//!   generated tokens costs no prefill time.
//! - Reused prefix = `min(matched blocks, floor((seq_len - 1) / block_size))` blocks: at least
//!   one token is recomputed (1024 cached tokens reuse 960), except for a request with nothing
//!   to generate, which reuses every matched full block. A readmitted request also matches
//!   the blocks of its own generated tokens.
//! - A block becomes reusable as soon as the scheduling step that computes it runs, so later
//!   requests of the same pass already hit it.
//! - KV blocks are allocated while scheduling, up to the newly computed length, all or
//!   nothing; pool exhaustion therefore preempts during scheduling, never during emission.
//! - Two requests that compute the same block each keep their own copy (a duplicate holds
//!   capacity; the hash is Removed only with its last copy), instead of merging.
//! - Durations (under every timing model): raw ms rounded to a whole-ns `Duration`, divided
//!   by the speedup ratio and rounded again (ratio 0 = unscaled; decode uses the product of
//!   both ratios), prefill and decode rounded separately.
//! - FIFO preemption of a request ahead of the running-loop cursor skips the request after the
//!   current one for that pass (1.6.1 does not adjust its index).
//! - A request's reported `reused_input_tokens` is the maximum over its admissions
//!   ([`Admitted::reported_reused_tokens`]).
//! - `max_model_len`: a prompt at least that long is rejected (delivered at the pass end) and
//!   generation stops when the sequence reaches it. `max_output_tokens` 0 completes at the
//!   prefill's pass end without a token.
//!
//! Where 1.6.1 aborts the whole replay ("effect-free zero-duration pass"), this rank instead
//! rejects, when it reaches the head of the waiting queue, the request that could never run
//! ([`RejectReason`]): one whose prompt plus output would outgrow the whole pool even running
//! alone (1.6.1 serves it until it does, preempting others on the way, then aborts), or an
//! unchunked prompt larger than `max_num_batched_tokens`. Runs 1.6.1 completes never meet
//! either case, so their timings are unchanged.

use super::kv_pool::{BlockId, KvPool, Reuse};
use super::memo::HeadProbe;
use crate::mocker::config::{
    CommonArgs, ConfigError, EngineArgs, PreemptionMode, VllmArgs, WorkerRole,
};
use crate::mocker::protocol::{
    AddRequestError, Admitted, MockRequest, PassOutput, RejectReason, Rejection, RequestPhase,
    RequestView,
};
use crate::mocker::step_memo::{STEP_MEMO_FIRST_SLOTS, StepMemo};
use crate::mocker::timing;
use crate::scheduling::hashing;
use crate::scheduling::types::{KvEvent, KvEventData, RequestId, SeqHash, WorkerWithDpRank};
use crate::time::{SimDuration, SimTime};
#[cfg(test)]
use checks::check_found;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::Arc;

#[derive(Debug)]
struct Req {
    id: RequestId,
    prompt_tokens: u64,
    max_output_tokens: u64,
    prompt_hashes: Arc<[SeqHash]>,
    /// Hashes of full blocks past the prompt's full blocks (they hold generated tokens),
    /// derived on demand, unique to the request as Dynamo's random output tokens are.
    gen_hashes: Vec<SeqHash>,
    generated: u64,
    computed: u64,
    blocks: Vec<BlockId>,
    /// Leading blocks of `blocks` that are registered in the pool under their hash.
    registered: usize,
    /// Blocks from this index on hold hashes no other request has ([`MockRequest`]).
    unshared_from: usize,
    /// Whether its unshared blocks are indexed: once preempted, it looks them up again.
    unshared_indexed: bool,
    phase: RequestPhase,
    preemptions: u32,
    /// Largest prefix reuse over the request's admissions.
    max_reused: u64,
    /// False once the request has left the rank (its slot is free).
    live: bool,
    /// Its prompt's KV came from a prefill worker (a decode rank's handoff): it is admitted
    /// with the prompt computed, and nothing is prefilled for it.
    transferred: bool,
    /// A decode rank's handoff: the order it reached the rank in (its reservation's), which
    /// places it in the rank's `queue` when its transfer lands.
    handoff_order: u64,
    /// The formed pass ([`MockWorker::pass_seq`]) that last decoded its token in place: that
    /// step leaves no [`Scheduled`] entry, only this stamp, for a preemption to undo.
    decoded_in_pass: u64,
    /// Middle tokens counted and not yet handed on (see [`Worker::count_middle_tokens`](crate::mocker::Worker::count_middle_tokens)).
    middle_unlisted: u32,
    /// The formed pass that counted its latest middle token.
    middle_counted_in_pass: u64,
}

impl Req {
    fn seq_len(&self) -> u64 {
        self.prompt_tokens + self.generated
    }
}

/// Where a live request sits in the rank's slab of requests. The queues hold slots, so the
/// per-token paths index a `Vec` instead of probing a map; ids are mapped to slots only when
/// a request arrives or leaves.
type Slot = u32;

/// Work a request got in the current pass, kept so a preemption can undo it.
#[derive(Copy, Clone, Debug)]
struct Scheduled {
    slot: Slot,
    tokens: u64,
    prompt_tokens: u64,
    prefix_tokens: u64,
}

/// Prefill batch statistics of the current pass.
type Batch = timing::PrefillBatch;

enum Outcome {
    Scheduled { tokens: u64 },
    Blocked,
    CurrentPreempted,
}

enum Decision {
    Admit { cached_tokens: u64 },
    Wait,
    Reject(RejectReason),
}

/// Mutable state of one pass being formed.
struct PassState {
    budget: u64,
    batch: Batch,
    preempted_any: bool,
}

/// One rank's scheduler core and KV pool. See the module docs for the calling contract.
#[derive(Debug)]
pub struct MockWorker {
    /// The settings of the rank's engine that every kind shares.
    common: CommonArgs,
    /// Its vLLM-only settings (a vLLM rank is built from a vLLM engine only).
    vllm: VllmArgs,
    rank: WorkerWithDpRank,
    pool: KvPool,
    /// Requests by slot; a slot not in `slot_of` is free (listed in `free_slots`) and keeps
    /// its vectors' capacity for the next request.
    reqs: Vec<Req>,
    slot_of: FxHashMap<RequestId, Slot>,
    free_slots: Vec<Slot>,
    waiting: VecDeque<Slot>,
    /// A decode rank's handoffs whose transfer landed, waiting for a running slot, in the
    /// order they reached the rank (not the order they landed in): the ones admitted while
    /// `handoffs_pending`.
    landed: VecDeque<Slot>,
    /// A decode rank's one waiting queue, as 1.6.1 keeps it: its `waiting` (preempted)
    /// requests and its `landed` handoffs together, the order it admits in. A preempted
    /// request goes to the front; a landed handoff goes before the first request that reached
    /// the rank after it (see [`MockWorker::activate_handoff`]). Empty on other ranks.
    queue: VecDeque<Slot>,
    /// The order the next handoff reserved on a decode rank gets ([`Req::handoff_order`]).
    next_handoff_order: u64,
    /// Counts the times the rank freed capacity: a request completed, was preempted, or
    /// left holding blocks or a running slot (1.6.1's capacity generation).
    capacity_generation: u64,
    /// The handoff whose reservation last had to wait, and the capacity generation then: it
    /// is not tried again until the rank frees capacity (see [`MockWorker::reserve_handoff`]).
    reservation_wait: Option<(RequestId, u64)>,
    /// A decode rank has handoffs waiting for room (set by its simulator): until they have it,
    /// only landed handoffs are admitted, and requests preempted there wait, as in 1.6.1.
    handoffs_pending: bool,
    running: Vec<Slot>,
    next_event_id: u64,
    preemptions_total: u64,
    stalls_broken: u64,
    last_pass_end: SimTime,
    /// Publish Stored and Removed events for blocks that hold generated tokens (see
    /// [`MockWorker::set_publish_generated_blocks`]).
    publish_generated_blocks: bool,
    /// What the current pass scheduled, but for tokens decoded in place (the commonest step,
    /// stamped on its request instead: see [`Req::decoded_in_pass`]).
    scheduled: Vec<Scheduled>,
    /// Counts formed passes, from 1.
    pass_seq: u64,
    /// The last formed pass whose output was handed back: delivered.
    delivered_seq: u64,
    /// Middle tokens are counted on their request, not listed (see
    /// [`Worker::count_middle_tokens`](crate::mocker::Worker::count_middle_tokens)).
    count_middle: bool,
    /// Each pass's output carries its metrics (see [`MockWorker::record_pass_metrics`]).
    record_metrics: bool,
    ready: Vec<Slot>,
    event_scratch: Vec<KvEventData>,
    /// Block boundaries of a quiet run: (pass, step) pairs.
    growth_scratch: Vec<(u64, u64)>,
    /// Per pass of a planned quiet run, the requests growing into a fresh block then.
    growth_counts: Vec<u64>,
    /// Decode durations of recent batches, for passes run without one lent (see
    /// [`MockWorker::execute_pass`]); made on first use.
    own_memo: Option<Box<StepMemo>>,
    head_probe: HeadProbe,
    /// Keep and hand on prefix probes (`head_probe`); off only to check that it changes
    /// nothing.
    reuse_probes: bool,
    /// Admission decisions answered from the kept probe.
    probe_reuses: u64,
    /// Requests a prefill rank holds after their prefill (they keep their blocks, not a
    /// running slot) until [`MockWorker::release_held`], or a decode rank has reserved blocks
    /// for until [`MockWorker::activate_handoff`]: in no queue, not work for a pass.
    held: usize,
}

/// Slots of a rank's own table of decode durations (a rank outside a simulator's pools:
/// it never grows).
const OWN_DECODE_MEMO_SLOTS: usize = STEP_MEMO_FIRST_SLOTS;

impl MockWorker {
    /// A rank with an empty pool, or the validation error of `args`.
    pub fn try_new(args: EngineArgs, rank: WorkerWithDpRank) -> Result<MockWorker, ConfigError> {
        args.validate()?;
        Ok(MockWorker::new(args, rank))
    }

    /// A rank with an empty pool. `args` must be valid ([`EngineArgs::validate`]); use
    /// [`MockWorker::try_new`] for unchecked input.
    pub fn new(args: EngineArgs, rank: WorkerWithDpRank) -> MockWorker {
        assert!(
            args.validate().is_ok(),
            "MockWorker::new needs validated EngineArgs"
        );
        let pool = KvPool::new(
            args.common.capacity.num_gpu_blocks,
            args.common.builds_kv_events(),
        );
        let vllm = *(args.backend.vllm()).expect("a vLLM rank runs vLLM engine arguments");
        MockWorker {
            common: args.common,
            vllm,
            rank,
            pool,
            reqs: Vec::new(),
            slot_of: FxHashMap::default(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            landed: VecDeque::new(),
            queue: VecDeque::new(),
            next_handoff_order: 0,
            capacity_generation: 0,
            reservation_wait: None,
            handoffs_pending: false,
            running: Vec::new(),
            next_event_id: 0,
            preemptions_total: 0,
            stalls_broken: 0,
            last_pass_end: SimTime::ZERO,
            publish_generated_blocks: true,
            scheduled: Vec::new(),
            pass_seq: 0,
            delivered_seq: 0,
            count_middle: false,
            record_metrics: false,
            ready: Vec::new(),
            event_scratch: Vec::new(),
            growth_scratch: Vec::new(),
            growth_counts: Vec::new(),
            own_memo: None,
            head_probe: HeadProbe::default(),
            reuse_probes: true,
            probe_reuses: 0,
            held: 0,
        }
    }

    /// Whether KV events cover blocks that hold generated tokens (default: yes, as Dynamo
    /// publishes every block). Such a block's hash is derived from its request alone, so no
    /// other request's prompt can ever match it: a router's overlap answers are the same
    /// without these events. Turning them off lets decode passes publish nothing, which the
    /// simulator's quiet-pass skipping relies on.
    pub fn set_publish_generated_blocks(&mut self, publish: bool) {
        self.publish_generated_blocks = publish;
    }

    /// Has the pool warm its probes in batches (see [`KvPool::set_warm_probes`]): for a rank
    /// of a fleet whose pools together outgrow the caches.
    pub fn set_warm_probes(&mut self, warm: bool) {
        self.pool.set_warm_probes(warm);
    }

    /// Looks every cached block up afresh instead of reusing the waiting head's last probe
    /// and the blocks it found: the plain path the reuse must match exactly.
    #[cfg(test)]
    pub(crate) fn set_plain_lookups(&mut self) {
        self.reuse_probes = false;
        self.head_probe.clear();
    }

    /// A hint: make room for `blocks` cached blocks up front (see [`KvPool::reserve`]).
    pub fn reserve_blocks(&mut self, blocks: u64) {
        self.pool.reserve(blocks);
    }

    // ----- getters -----

    /// The engine settings every kind shares (the vLLM-only ones stay inside the rank).
    pub fn common_args(&self) -> &CommonArgs {
        &self.common
    }

    /// Which worker and rank this is (stamped on KV events).
    pub fn rank(&self) -> WorkerWithDpRank {
        self.rank
    }

    /// True while any request is waiting or running: the caller must run another pass.
    /// (Held requests are not work: they wait for their decode worker, not for a pass.)
    pub fn has_work(&self) -> bool {
        self.slot_of.len() > self.held
    }

    /// What the rank does (its engine's `worker_type`).
    pub fn role(&self) -> WorkerRole {
        self.common.role
    }

    /// Requests held after their prefill (a prefill rank's), waiting for release.
    pub fn held_len(&self) -> usize {
        self.held
    }

    /// Requests queued (including preempted ones and landed handoffs).
    pub fn waiting_len(&self) -> usize {
        self.waiting.len() + self.landed.len()
    }

    /// Requests in the running batch.
    pub fn running_len(&self) -> usize {
        self.running.len()
    }

    /// KV blocks held by requests.
    pub fn active_blocks(&self) -> u64 {
        self.pool.active_blocks()
    }

    /// Cached KV blocks held by nobody.
    pub fn inactive_blocks(&self) -> u64 {
        self.pool.inactive_blocks()
    }

    /// Admission decisions answered from the waiting head's kept prefix probe instead of a
    /// fresh walk of its prefix.
    pub fn probe_reuses(&self) -> u64 {
        self.probe_reuses
    }

    /// Preemptions since the rank started.
    pub fn preemptions_total(&self) -> u64 {
        self.preemptions_total
    }

    /// Waiting heads rejected by the stall safety net (expected to stay 0; see
    /// `execute_pass`).
    pub fn stalls_broken(&self) -> u64 {
        self.stalls_broken
    }

    /// A snapshot of a live request, or None if the rank does not hold it.
    pub fn request(&self, id: RequestId) -> Option<RequestView> {
        self.slot_of.get(&id).map(|&s| {
            let r = self.req(s);
            RequestView {
                id: r.id,
                phase: r.phase,
                prompt_tokens: r.prompt_tokens,
                max_output_tokens: r.max_output_tokens,
                generated_tokens: r.generated,
                computed_tokens: r.computed,
                held_blocks: r.blocks.len() as u64,
                preemptions: r.preemptions,
            }
        })
    }

    /// Ids of waiting requests, head first.
    pub fn waiting_ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.waiting.iter().map(|&s| self.req(s).id)
    }

    /// Ids of running requests, in running order.
    pub fn running_ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.running.iter().map(|&s| self.req(s).id)
    }

    fn req(&self, slot: Slot) -> &Req {
        &self.reqs[slot as usize]
    }

    fn req_mut(&mut self, slot: Slot) -> &mut Req {
        &mut self.reqs[slot as usize]
    }

    // ----- inputs -----

    /// Queues a request at the back of the waiting queue. `now` is its arrival time (kept
    /// for symmetry with the rest of the API; arrival order is queue order).
    pub fn add_request(&mut self, now: SimTime, req: MockRequest) -> Result<(), AddRequestError> {
        let _ = now;
        if self.slot_of.contains_key(&req.id) {
            return Err(AddRequestError::DuplicateId(req.id));
        }
        if req.prompt_tokens == 0 {
            return Err(AddRequestError::EmptyPrompt(req.id));
        }
        let expected = req.prompt_tokens / self.common.block_size;
        if req.prompt_hashes.len() as u64 != expected {
            let got = req.prompt_hashes.len() as u64;
            return Err(AddRequestError::HashCountMismatch {
                id: req.id,
                expected,
                got,
            });
        }
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.reqs.push(Req {
                    id: req.id,
                    prompt_tokens: 0,
                    max_output_tokens: 0,
                    prompt_hashes: Arc::clone(&req.prompt_hashes),
                    gen_hashes: Vec::new(),
                    generated: 0,
                    computed: 0,
                    blocks: Vec::new(),
                    registered: 0,
                    unshared_from: usize::MAX,
                    unshared_indexed: false,
                    phase: RequestPhase::Waiting,
                    preemptions: 0,
                    max_reused: 0,
                    live: false,
                    transferred: false,
                    handoff_order: 0,
                    decoded_in_pass: 0,
                    middle_unlisted: 0,
                    middle_counted_in_pass: 0,
                });
                (self.reqs.len() - 1) as Slot
            }
        };
        let r = self.req_mut(slot);
        debug_assert!(r.blocks.is_empty(), "a free slot holds no blocks");
        r.id = req.id;
        r.prompt_tokens = req.prompt_tokens;
        r.max_output_tokens = req.max_output_tokens;
        r.prompt_hashes = req.prompt_hashes;
        r.decoded_in_pass = 0;
        r.middle_unlisted = 0;
        r.middle_counted_in_pass = 0;
        r.gen_hashes.clear();
        r.generated = 0;
        r.computed = 0;
        r.registered = 0;
        r.unshared_from = usize::try_from(req.unshared_from).unwrap_or(usize::MAX);
        r.unshared_indexed = false;
        r.phase = RequestPhase::Waiting;
        r.preemptions = 0;
        r.max_reused = 0;
        r.live = true;
        r.transferred = false;
        self.slot_of.insert(req.id, slot);
        self.waiting.push_back(slot);
        if self.common.role == WorkerRole::Decode {
            self.queue.push_back(slot);
        }
        Ok(())
    }

    /// Takes request `id` off the rank at once, wherever it is (waiting, preempted or
    /// running): its KV blocks are released (cached blocks stay reusable) and its running
    /// slot is freed. Returns what it was, or `None` if the rank does not hold it. A pass in
    /// flight keeps the output it already formed; the caller ignores that output's tokens
    /// for a removed request. Used for client cancellation; a rank that goes down is replaced
    /// whole instead.
    pub fn remove_request(&mut self, id: RequestId) -> Option<RequestView> {
        // A handoff that waited for room here and is dropped comes back, if ever, as new.
        if self.reservation_wait.map(|(waiting, _)| waiting) == Some(id) {
            self.reservation_wait = None;
        }
        let view = self.request(id)?;
        let slot = *self.slot_of.get(&id)?;
        if let Some(pos) = self.waiting.iter().position(|&s| s == slot) {
            self.waiting.remove(pos);
        }
        if let Some(pos) = self.running.iter().position(|&s| s == slot) {
            self.running.remove(pos);
        }
        if let Some(pos) = self.landed.iter().position(|&s| s == slot) {
            self.landed.remove(pos);
        }
        unqueue(&mut self.queue, slot);
        if matches!(view.phase, RequestPhase::Held | RequestPhase::Reserved) {
            self.held -= 1;
        }
        if !self.req(slot).blocks.is_empty() || view.phase == RequestPhase::Running {
            self.capacity_generation += 1;
        }
        self.release_blocks(slot);
        self.forget(slot);
        Some(view)
    }

    /// Frees the slot of a request that left the rank (it holds no blocks any more).
    fn forget(&mut self, slot: Slot) {
        self.head_probe.forget(slot);
        let r = self.req_mut(slot);
        debug_assert_eq!(
            r.middle_unlisted, 0,
            "counted tokens leave with the last one"
        );
        r.live = false;
        let id = r.id;
        self.slot_of.remove(&id);
        self.free_slots.push(slot);
    }

    /// Forms and runs one pass starting at `now`, fills `out` (cleared first) and returns the
    /// pass end, when everything in `out` is delivered. With no work it returns `now`.
    /// Decode durations come from the rank's own table (see [`Self::execute_pass_with`]).
    pub fn execute_pass(&mut self, now: SimTime, out: &mut PassOutput) -> SimTime {
        self.with_own_memo(|w, memo| w.execute_pass_with(now, memo, out))
    }

    /// Runs `f` with the rank's own table of decode durations.
    fn with_own_memo<R>(&mut self, f: impl FnOnce(&mut Self, &mut StepMemo) -> R) -> R {
        let mut memo = match self.own_memo.take() {
            Some(memo) => memo,
            None => Box::new(StepMemo::new(OWN_DECODE_MEMO_SLOTS)),
        };
        let result = f(self, &mut memo);
        self.own_memo = Some(memo);
        result
    }

    /// [`Self::execute_pass`] with decode durations from `memo`, a table for this rank's
    /// engine (one a pool's ranks share).
    pub fn execute_pass_with(
        &mut self,
        now: SimTime,
        memo: &mut StepMemo,
        out: &mut PassOutput,
    ) -> SimTime {
        debug_assert!(
            now >= self.last_pass_end,
            "a pass started before the previous one ended"
        );
        self.take_back(out);
        self.scheduled.clear();
        self.pass_seq += 1;
        let mut pass = PassState {
            budget: self.common.capacity.max_num_batched_tokens,
            batch: Batch::default(),
            preempted_any: false,
        };
        self.schedule_running(&mut pass, out);
        if !pass.preempted_any {
            self.admit_waiting(&mut pass, out);
        }
        let idle = self.scheduled.is_empty() && self.running.is_empty();
        if idle && out.rejected.is_empty() && !pass.preempted_any {
            self.break_stall(out);
        }
        // Every scheduled token, an undone one given back, came out of the budget.
        out.scheduled_tokens = self.common.capacity.max_num_batched_tokens - pass.budget;
        out.prefill_tokens = pass.batch.new_tokens();
        // Taken before tokens are emitted (which completes requests); timed below.
        if self.record_metrics {
            out.metrics = Some(Box::new(self.pass_metrics(SimDuration::ZERO)));
        }
        let decode = self.emit_tokens(out);
        out.decode_kv_tokens = decode.active_kv_tokens;
        self.publish_events(out);
        let end = self.pass_end(now, self.prefill_time(&pass.batch), &decode, memo);
        if let Some(metrics) = &mut out.metrics {
            metrics.duration = end.saturating_since(now);
        }
        self.last_pass_end = end;
        end
    }

    /// Empties a pass's output once it has been applied, taking back its KV events' block
    /// lists for the next events to fill.
    pub fn take_back(&mut self, out: &mut PassOutput) {
        self.delivered_seq = self.pass_seq;
        self.pool
            .recycle_events(out.kv_events.drain(..).map(|event| event.data));
        out.clear();
    }

    /// The prefill part of a pass's duration: a decode rank prefills nothing (a recomputed
    /// preemption costs no time either).
    fn prefill_time(&self, prefill: &timing::PrefillBatch) -> SimDuration {
        match self.common.role {
            WorkerRole::Decode => SimDuration::ZERO,
            _ => self.common.prefill_duration(prefill),
        }
    }

    /// When a pass starting at `now` ends: its prefill part `prefill_time` (see
    /// [`Self::prefill_time`]), then the decode part for `decode`, as the engine's timing model
    /// has them. The one place pass durations are computed, for formed and for quiet passes
    /// alike, so every model (polynomial, fixed, profile) times a quiet run exactly as it times
    /// the passes one by one.
    fn pass_end(
        &self,
        now: SimTime,
        prefill_time: SimDuration,
        decode: &timing::DecodeBatch,
        memo: &mut StepMemo,
    ) -> SimTime {
        let decode_time = || self.common.decode_duration(decode);
        now.saturating_add(prefill_time).saturating_add(memo.get(
            decode.count,
            decode.active_kv_tokens,
            decode_time,
        ))
    }

    /// Safety net: a pass that schedules nothing with an empty batch would repeat forever at
    /// the same instant (1.6.1 aborts its replay with "effect-free zero-duration pass"). The
    /// admission rules above reject every request that could cause this; should one slip
    /// through anyway, the stuck waiting head is rejected so the simulation always ends.
    fn break_stall(&mut self, out: &mut PassOutput) {
        if let Some(slot) = self.waiting.pop_front() {
            unqueue(&mut self.queue, slot);
            let id = self.req(slot).id;
            self.forget(slot);
            let reason = RejectReason::Stalled;
            out.rejected.push(Rejection { id, reason });
            self.stalls_broken += 1;
        }
    }

    // ----- pass formation -----

    fn schedule_running(&mut self, pass: &mut PassState, out: &mut PassOutput) {
        let mut i = 0;
        // Each iteration schedules running[i] or removes a request from running: bounded.
        while i < self.running.len() && pass.budget > 0 {
            let slot = self.running[i];
            if self.decode_in_place(slot, pass) {
                i += 1;
                continue;
            }
            // A FIFO victim ahead of `i` shifts the queue left, so the request after this one
            // is skipped for this pass: 1.6.1 does exactly that (its index is not adjusted).
            match self.schedule(slot, None, pass, out) {
                Outcome::Scheduled { .. } => i += 1,
                Outcome::Blocked => break,
                Outcome::CurrentPreempted => {}
            }
        }
    }

    /// The most common step, done directly: a decoding request's one token when it fits the
    /// blocks the request holds and fills none (nothing to allocate, register or preempt).
    /// Leaves what `schedule` would, but for its [`Scheduled`] entry: the request's stamp
    /// ([`Req::decoded_in_pass`]) stands for it. False (nothing done) for any other step.
    fn decode_in_place(&mut self, slot: Slot, pass: &mut PassState) -> bool {
        let bs = self.common.block_size;
        let caching = self.common.enable_prefix_caching;
        let r = &mut self.reqs[slot as usize];
        let computed = r.computed;
        let simple = computed + 1 == r.seq_len()
            && computed >= r.prompt_tokens
            && computed < r.blocks.len() as u64 * bs
            && (!caching || computed + 1 < (r.registered as u64 + 1) * bs);
        if !simple {
            return false;
        }
        r.computed = computed + 1;
        r.decoded_in_pass = self.pass_seq;
        pass.budget -= 1;
        true
    }

    /// Schedules one request's next tokens. `cached_tokens` is Some for a request being
    /// admitted from the waiting queue.
    fn schedule(
        &mut self,
        slot: Slot,
        cached_tokens: Option<u64>,
        pass: &mut PassState,
        out: &mut PassOutput,
    ) -> Outcome {
        let r = self.req(slot);
        let cached = if r.computed == 0 {
            cached_tokens.unwrap_or(0)
        } else {
            0
        };
        let before = r.computed + cached;
        let prompt_before = before.min(r.prompt_tokens);
        let remaining = r.seq_len().saturating_sub(before);
        let prompt_remaining = r.prompt_tokens - prompt_before;
        if prompt_remaining > 0
            && !self.vllm.enable_chunked_prefill
            && prompt_remaining > pass.budget
        {
            return self.blocked(slot, cached_tokens.is_some());
        }
        let desired = remaining.min(pass.budget);
        if desired == 0 && remaining > 0 {
            return self.blocked(slot, cached_tokens.is_some());
        }
        let target = before + desired;
        let cached_blocks = cached / self.common.block_size;
        // Every retry preempts one running request first: bounded by the running count.
        while !self.allocate(slot, target, cached_blocks) {
            let Some(victim) = self.preempt_one(out) else {
                return self.blocked(slot, cached_tokens.is_some());
            };
            pass.preempted_any = true;
            self.undo_scheduled(victim, pass);
            if victim == slot {
                return Outcome::CurrentPreempted;
            }
        }
        self.register_computed(slot, target);
        let r = &mut self.reqs[slot as usize];
        r.computed = target;
        let prompt_tokens = target.min(r.prompt_tokens) - prompt_before;
        let tokens = target - before;
        self.scheduled.push(Scheduled {
            slot,
            tokens,
            prompt_tokens,
            prefix_tokens: prompt_before,
        });
        if prompt_tokens > 0 {
            pass.batch.count += 1;
            pass.batch.total_isl += prompt_before + prompt_tokens;
            pass.batch.total_prefix += prompt_before;
        }
        if cached_tokens.is_some() {
            // Admitted: its probe is spent (it now holds the blocks, which changes them).
            self.head_probe.clear();
            let readmission = r.phase == RequestPhase::Preempted;
            r.phase = RequestPhase::Running;
            r.max_reused = r.max_reused.max(cached);
            let reported_reused_tokens = r.max_reused;
            let id = r.id;
            // Usually the head; preemptions in this call may have queued victims before it.
            unqueue(&mut self.waiting, slot);
            unqueue(&mut self.queue, slot);
            self.running.push(slot);
            out.admitted.push(Admitted {
                id,
                reused_tokens: cached,
                reported_reused_tokens,
                readmission,
            });
        }
        pass.budget -= tokens;
        Outcome::Scheduled { tokens }
    }

    /// A request that got no tokens. One coming from the waiting queue stays there holding
    /// no blocks (waiting requests never hold KV).
    fn blocked(&mut self, slot: Slot, from_waiting: bool) -> Outcome {
        if from_waiting {
            self.release_blocks(slot);
        }
        Outcome::Blocked
    }

    /// Grows the request's blocks to cover `target_tokens`: first references to its first
    /// `cached_blocks` cached blocks, then fresh ones. All or nothing, as 1.6.1 reserves: if
    /// free plus evictable blocks cannot cover the fresh ones, nothing is taken or evicted and
    /// it returns false.
    fn allocate(&mut self, slot: Slot, target_tokens: u64, cached_blocks: u64) -> bool {
        let bs = self.common.block_size;
        let r = &mut self.reqs[slot as usize];
        let want = target_tokens.div_ceil(bs) as usize;
        let have = r.blocks.len();
        if want <= have {
            // The common decode step: the last block still has room.
            return true;
        }
        debug_assert!(
            want as u64 <= self.common.capacity.num_gpu_blocks,
            "request {} outgrew the pool: admission should have rejected it",
            r.id
        );
        let reuse_end = want.min(cached_blocks as usize);
        ensure_hashes(r, reuse_end);
        // The blocks the admission probe found, if they are still what lookups would find.
        let found = self.head_probe.found(slot, reuse_end, &self.pool);
        #[cfg(test)]
        check_found(&self.pool, r, found);
        let mut inactive_hits = 0;
        for index in have..reuse_end {
            inactive_hits += u64::from(match found.get(index) {
                Some(&id) => self.pool.refcount(id) == 0,
                None => self.pool.is_inactive(block_hash(r, index)),
            });
        }
        let fresh = (want - have.max(reuse_end).min(want)) as u64;
        if fresh > self.pool.free_blocks() + self.pool.inactive_blocks() - inactive_hits {
            return false;
        }
        // One allocation for a prefill chunk's blocks, not one per doubling; the chunk's
        // registrations and evictions are about as many.
        r.blocks.reserve(want - have);
        self.pool.expect(want - have, fresh as usize);
        let evictions = fresh.saturating_sub(self.pool.free_blocks());
        self.pool.warm_evictions(evictions as usize);
        // Every cached block is taken before any fresh one (which may evict), so the found ids
        // stay valid through this loop. One block per iteration, up to `reuse_end`: bounded.
        for index in have..reuse_end {
            let reused = match found.get(index) {
                Some(&id) => {
                    self.pool.acquire_id(id);
                    Some(id)
                }
                None => self.pool.acquire(block_hash(r, index)),
            };
            match reused {
                Some(block) => {
                    debug_assert_eq!(r.registered, index);
                    r.blocks.push(block);
                    r.registered = index + 1;
                }
                None => match self.pool.allocate() {
                    Some(block) => r.blocks.push(block),
                    None => return false,
                },
            }
        }
        let fresh = want - r.blocks.len();
        self.pool.allocate_into(fresh, &mut r.blocks)
    }

    /// Registers the request's blocks that `computed_tokens` completes, so later requests
    /// (even in this pass) can reuse them. A no-op without prefix caching.
    fn register_computed(&mut self, slot: Slot, computed_tokens: u64) {
        if !self.common.enable_prefix_caching {
            return;
        }
        let bs = self.common.block_size;
        let r = &mut self.reqs[slot as usize];
        let full = (computed_tokens / bs) as usize;
        if r.registered >= full {
            return;
        }
        ensure_hashes(r, full);
        let prompt_blocks = r.prompt_hashes.len();
        let indexed_end = if r.unshared_indexed {
            full
        } else {
            r.unshared_from.min(full)
        };
        let (prompt, generated) = hashes_between(r, r.registered.min(indexed_end), indexed_end);
        self.pool.warm_lookups(prompt);
        self.pool.warm_lookups(generated);
        // One block, or one run of unindexed blocks, per iteration, up to `full`: bounded.
        while r.registered < full {
            let index = r.registered;
            let parent = index.checked_sub(1).map(|p| block_hash(r, p));
            let publish = index < prompt_blocks || self.publish_generated_blocks;
            let reuse = match (index < r.unshared_from, r.unshared_indexed) {
                (true, _) => Reuse::Shared,
                (false, true) => Reuse::OwnerAgain,
                (false, false) => Reuse::Never,
            };
            if reuse == Reuse::Never {
                // The rest of the prompt's blocks, or of the generated ones, all alike.
                let end = if index < prompt_blocks {
                    full.min(prompt_blocks)
                } else {
                    full
                };
                let (prompt, generated) = hashes_between(r, index, end);
                let hashes = if prompt.is_empty() { generated } else { prompt };
                self.pool
                    .register_unindexed_run(&r.blocks[index..end], hashes, parent, publish);
                r.registered = end;
                continue;
            }
            let hash = block_hash(r, index);
            let block = self
                .pool
                .register(r.blocks[index], hash, parent, publish, reuse);
            r.blocks[index] = block;
            r.registered += 1;
        }
    }

    /// Preempts the newest (LIFO) or oldest (FIFO) running request: it releases its KV and
    /// goes back to the head of the waiting queue to be recomputed.
    fn preempt_one(&mut self, out: &mut PassOutput) -> Option<Slot> {
        if self.running.is_empty() {
            return None;
        }
        let index = match self.vllm.preemption_mode {
            PreemptionMode::Lifo => self.running.len() - 1,
            PreemptionMode::Fifo => 0,
        };
        let victim = self.running.remove(index);
        self.capacity_generation += 1;
        self.index_unshared(victim);
        self.release_blocks(victim);
        let r = self.req_mut(victim);
        r.phase = RequestPhase::Preempted;
        r.preemptions += 1;
        let id = r.id;
        self.preemptions_total += 1;
        self.waiting.push_front(victim);
        if self.common.role == WorkerRole::Decode {
            self.queue.push_front(victim);
        }
        out.preempted.push(id);
        Some(victim)
    }

    /// A preempted request recomputes and looks its own blocks up again: from now on its
    /// unshared blocks are indexed (they stay out of the events).
    fn index_unshared(&mut self, slot: Slot) {
        let r = &mut self.reqs[slot as usize];
        if r.unshared_indexed {
            return;
        }
        r.unshared_indexed = true;
        let from = r.unshared_from.min(r.registered);
        for &block in &r.blocks[from..r.registered] {
            self.pool.index_unindexed(block);
        }
    }

    /// Gives back a victim's work in this pass: its tokens return to the budget and its
    /// prompt tokens leave the prefill batch.
    fn undo_scheduled(&mut self, victim: Slot, pass: &mut PassState) {
        let Some(pos) = self.scheduled.iter().position(|s| s.slot == victim) else {
            let r = &mut self.reqs[victim as usize];
            if r.decoded_in_pass == self.pass_seq {
                // Its one token decoded in place: no prompt tokens left the batch.
                r.decoded_in_pass = 0;
                pass.budget += 1;
            }
            return;
        };
        let s = self.scheduled.swap_remove(pos);
        pass.budget += s.tokens;
        if s.prompt_tokens > 0 {
            pass.batch.count -= 1;
            pass.batch.total_isl -= s.prefix_tokens + s.prompt_tokens;
            pass.batch.total_prefix -= s.prefix_tokens;
        }
    }

    /// Releases every block of a request, last block first (so a prompt's tail is evicted
    /// before its shared head), and resets its computed tokens.
    fn release_blocks(&mut self, slot: Slot) {
        let r = &mut self.reqs[slot as usize];
        // One block per iteration: bounded by the request's blocks.
        while let Some(block) = r.blocks.pop() {
            self.pool.release(block);
        }
        r.registered = 0;
        r.computed = 0;
    }

    fn finished(&self, r: &Req) -> bool {
        r.generated >= r.max_output_tokens
            || self
                .common
                .capacity
                .max_model_len
                .is_some_and(|m| r.seq_len() >= m)
    }

    fn publish_events(&mut self, out: &mut PassOutput) {
        self.pool.drain_events_into(&mut self.event_scratch);
        for data in self.event_scratch.drain(..) {
            out.kv_events.push(KvEvent {
                worker: self.rank,
                event_id: self.next_event_id,
                data,
            });
            self.next_event_id += 1;
        }
    }
}

/// The request's full-block hashes derived so far, prompt blocks first (see
/// [`ensure_hashes`]).
/// Takes `slot` out of `queue` if it is there (usually at its front).
fn unqueue(queue: &mut VecDeque<Slot>, slot: Slot) {
    if let Some(pos) = queue.iter().position(|&s| s == slot) {
        queue.remove(pos);
    }
}

fn known_hashes(r: &Req) -> impl Iterator<Item = SeqHash> + '_ {
    r.prompt_hashes.iter().chain(r.gen_hashes.iter()).copied()
}

/// Makes sure the first `count` full-block hashes of a request exist, deriving hashes of
/// blocks that hold generated tokens (unique to the request: Dynamo's output tokens are
/// random, so nobody else can match them).
fn ensure_hashes(r: &mut Req, count: usize) {
    let prompt_blocks = r.prompt_hashes.len();
    // One hash per iteration, up to `count`: bounded.
    while prompt_blocks + r.gen_hashes.len() < count {
        let index = prompt_blocks + r.gen_hashes.len();
        let parent = index.checked_sub(1).map(|p| block_hash(r, p));
        let mut bytes = [0u8; 24];
        bytes[..8].copy_from_slice(&r.id.0.to_le_bytes());
        bytes[8..16].copy_from_slice(&(index as u64).to_le_bytes());
        bytes[16..].copy_from_slice(b"gen-blk\0");
        let local = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, hashing::XXH3_SEED);
        r.gen_hashes.push(hashing::chain(parent, local));
    }
}

/// Prompt tokens still to compute if the first `cached_tokens` are reused.
fn r_prompt_left(r: &Req, cached_tokens: u64) -> u64 {
    r.prompt_tokens - cached_tokens.min(r.prompt_tokens)
}

/// The hashes of blocks `from..to` (hashed already), as their prompt part and their
/// generated part.
fn hashes_between(r: &Req, from: usize, to: usize) -> (&[SeqHash], &[SeqHash]) {
    let prompt_blocks = r.prompt_hashes.len();
    let prompt = &r.prompt_hashes[from.min(prompt_blocks)..to.min(prompt_blocks)];
    let generated = &r.gen_hashes
        [from.max(prompt_blocks) - prompt_blocks..to.max(prompt_blocks) - prompt_blocks];
    (prompt, generated)
}

fn block_hash(r: &Req, index: usize) -> SeqHash {
    let prompt_blocks = r.prompt_hashes.len();
    if index < prompt_blocks {
        r.prompt_hashes[index]
    } else {
        r.gen_hashes[index - prompt_blocks]
    }
}

mod admission;
mod as_worker;
mod checks;
mod emission;
mod handoff;
mod metrics;
mod quiet;

#[cfg(test)]
mod tests {
    //! Expected times are Dynamo 1.6.1's own (offline replay of the same trace, one worker,
    //! printed ms converted to ns), so each test pins one observed behaviour.

    use super::*;
    use crate::mocker::Backend;
    use crate::mocker::protocol::TokenOut;
    use crate::mocker::test_support::{Seen, drive, ms, row};

    fn args_with(f: impl FnOnce(&mut EngineArgs)) -> EngineArgs {
        let mut a = EngineArgs::default();
        f(&mut a);
        a
    }

    fn times(s: &Seen) -> (Option<u64>, Option<u64>, Option<u64>) {
        (s.admit_ns, s.first_ns, s.done_ns)
    }

    #[test]
    fn first_token_costs_prefill_only_then_decode_steps() {
        let seen = drive(
            EngineArgs::default(),
            vec![(0, row(0, 1024, 5, &[1, 2], 64))],
        );
        let s = &seen[&0];
        assert_eq!(times(s), (Some(0), Some(32_490_712), Some(55_662_105)));
        assert_eq!(s.tokens, 5);
    }

    #[test]
    fn mixed_pass_charges_decode_of_running_requests_only() {
        let seen = drive(
            EngineArgs::default(),
            vec![
                (0, row(0, 512, 6, &[1], 64)),
                (ms(30.0), row(1, 512, 3, &[2], 64)),
            ],
        );
        assert_eq!(
            times(&seen[&0]),
            (Some(0), Some(24_385_704), Some(77_656_870))
        );
        assert_eq!(
            times(&seen[&1]),
            (Some(30_152_121), Some(60_304_294), Some(71_890_247))
        );
    }

    #[test]
    fn simultaneous_prompts_share_one_prefill_pass_up_to_max_num_seqs() {
        let args = args_with(|a| {
            a.common.capacity.max_num_seqs = 4;
            a.common.enable_prefix_caching = false;
        });
        let arrivals = (0..6)
            .map(|i| (0, row(i, 512, 1, &[i as u32 + 1], 64)))
            .collect();
        let seen = drive(args, arrivals);
        for i in 0..4 {
            assert_eq!(
                times(&seen[&i]),
                (Some(0), Some(49_362_902), Some(49_362_902))
            );
        }
        for i in 4..6 {
            assert_eq!(
                times(&seen[&i]),
                (Some(49_362_902), Some(81_853_614), Some(81_853_614))
            );
        }
    }

    #[test]
    fn prefix_hits_reuse_whole_blocks_but_recompute_the_last_token() {
        let arrivals = vec![
            (0, row(0, 1024, 1, &[1, 2], 64)),
            (ms(100.0), row(1, 1024, 1, &[1, 2], 64)),
            (ms(200.0), row(2, 1000, 1, &[1, 2], 64)),
            (ms(300.0), row(3, 1100, 1, &[1, 2, 3], 64)),
            (ms(400.0), row(4, 512, 2, &[1], 64)),
        ];
        let seen = drive(EngineArgs::default(), arrivals);
        let got: Vec<(u64, Option<u64>)> = seen.values().map(|s| (s.reused, s.done_ns)).collect();
        assert_eq!(
            got,
            vec![
                (0, Some(32_490_712)),
                (960, Some(117_474_885)),
                (960, Some(217_109_431)),
                (1024, Some(317_657_793)),
                (448, Some(423_241_302)),
            ]
        );
        assert_eq!(seen[&4].first_ns, Some(417_474_885));
    }

    #[test]
    fn blocks_computed_earlier_in_the_same_pass_are_prefix_hits() {
        let arrivals = vec![
            (0, row(0, 1024, 2, &[1, 2], 64)),
            (0, row(1, 1024, 2, &[1, 2], 64)),
            (0, row(2, 700, 2, &[1, 3], 64)),
        ];
        let seen = drive(EngineArgs::default(), arrivals);
        let reused: Vec<u64> = seen.values().map(|s| s.reused).collect();
        assert_eq!(reused, vec![0, 960, 512]);
        for s in seen.values() {
            assert_eq!(
                (s.first_ns, s.done_ns),
                (Some(36_593_467), Some(42_474_988))
            );
        }
    }

    #[test]
    fn long_prompt_is_chunked_by_the_token_budget() {
        let ids: Vec<u32> = (100..140).collect();
        let arrivals = vec![
            (0, row(0, 20_000, 3, &ids, 64)),
            (ms(1.0), row(1, 600, 4, &[7, 8], 64)),
        ];
        let seen = drive(EngineArgs::default(), arrivals);
        // Chunks of 8192, 8192, then 3616 batched with the second prompt.
        assert_eq!(
            times(&seen[&0]),
            (Some(0), Some(426_271_750), Some(439_854_312))
        );
        assert_eq!(
            times(&seen[&1]),
            (Some(338_273_836), Some(426_271_750), Some(445_625_363))
        );
    }

    #[test]
    fn lifo_preemption_recomputes_the_victim_later() {
        let args = args_with(|a| a.common.capacity.num_gpu_blocks = 20);
        let arrivals = vec![
            (0, row(0, 600, 100, &[1, 2], 64)),
            (ms(1.0), row(1, 600, 100, &[3, 4], 64)),
        ];
        let seen = drive(args, arrivals);
        assert_eq!(
            times(&seen[&0]),
            (Some(0), Some(25_763_044), Some(2_989_371_204))
        );
        assert_eq!(
            times(&seen[&1]),
            (Some(25_763_044), Some(76_950_841), Some(4_622_826_348))
        );
        // Its generated block was not yet computed at preemption: 9 prompt blocks survive and
        // are reused at readmission (the reported value is the max over admissions).
        assert_eq!(seen[&1].reused, 576);
        assert_eq!(seen[&1].tokens, 100);
    }

    /// A token decoded in place leaves only a stamp on its request; preempting that request
    /// later in the pass gives the token back to the budget, as undoing a scheduled step does.
    #[test]
    fn preempting_a_request_decoded_in_place_gives_its_token_back() {
        let args = args_with(|a| {
            a.common.block_size = 16;
            a.common.capacity.num_gpu_blocks = 8;
            a.backend = Backend::Vllm(VllmArgs {
                preemption_mode: PreemptionMode::Fifo,
                ..VllmArgs::default()
            });
        });
        let mut w = MockWorker::new(args, WorkerWithDpRank::new(0, 0));
        // 62 and 64 prompt tokens: four blocks each, the whole pool.
        w.add_request(SimTime::ZERO, tokens_req(0, &[(5, 62)], 10))
            .unwrap();
        w.add_request(SimTime::ZERO, tokens_req(1, &[(6, 64)], 10))
            .unwrap();
        let mut out = PassOutput::default();
        let end = w.execute_pass(SimTime::ZERO, &mut out);
        assert_eq!(out.scheduled_tokens, 126);
        // Request 0 decodes in place; request 1 needs a fifth block, and the oldest request
        // (0, FIFO) is preempted for it: only request 1's token is scheduled.
        w.execute_pass(end, &mut out);
        assert_eq!(out.preempted, vec![RequestId(0)]);
        assert_eq!(out.scheduled_tokens, 1);
        assert_eq!(w.running_len(), 1);
        w.check_invariants().unwrap();
    }

    #[test]
    fn preempted_request_reuses_its_own_generated_blocks() {
        let args = args_with(|a| a.common.capacity.num_gpu_blocks = 21);
        let arrivals = vec![
            (0, row(0, 600, 100, &[1, 2], 64)),
            (ms(1.0), row(1, 600, 100, &[3, 4], 64)),
        ];
        let seen = drive(args, arrivals);
        assert_eq!(seen[&0].done_ns, Some(2_946_672_988));
        assert_eq!(
            times(&seen[&1]),
            (Some(25_763_044), Some(76_270_824), Some(4_496_233_774))
        );
        assert_eq!(seen[&1].reused, 640);
    }

    #[test]
    fn admission_waits_for_blocks_and_rejects_what_cannot_fit() {
        let args = args_with(|a| a.common.capacity.num_gpu_blocks = 20);
        let arrivals = vec![
            (0, row(0, 600, 30, &[1, 2], 64)),
            (ms(1.0), row(1, 700, 3, &[3, 4], 64)),
            (ms(2.0), row(2, 1400, 3, &[5, 6, 7], 64)),
            (ms(3.0), row(3, 100, 3, &[8], 64)),
        ];
        let seen = drive(args, arrivals);
        assert_eq!(seen[&0].done_ns, Some(772_424_096));
        assert_eq!(
            times(&seen[&1]),
            (Some(772_424_096), Some(801_341_707), Some(860_326_870))
        );
        assert_eq!(seen[&2].rejected_ns, Some(801_341_707));
        assert_eq!(seen[&2].admit_ns, None);
        assert_eq!(
            times(&seen[&3]),
            (Some(772_424_096), Some(801_341_707), Some(860_326_870))
        );
    }

    #[test]
    fn max_model_len_rejects_long_prompts_and_caps_generation() {
        let args = args_with(|a| a.common.capacity.max_model_len = Some(1000));
        let arrivals = vec![
            (0, row(0, 1000, 5, &[1, 2], 64)),
            (ms(100.0), row(1, 999, 5, &[3, 4], 64)),
            (ms(200.0), row(2, 990, 20, &[5, 6], 64)),
        ];
        let seen = drive(args, arrivals);
        assert_eq!(seen[&0].rejected_ns, Some(0));
        assert_eq!((seen[&1].tokens, seen[&1].done_ns), (1, Some(132_089_834)));
        assert_eq!(seen[&2].tokens, 10);
        assert_eq!(
            (seen[&2].first_ns, seen[&2].done_ns),
            (Some(231_945_647), Some(284_066_692))
        );
    }

    #[test]
    fn zero_output_tokens_complete_at_prefill_end_without_a_token() {
        let seen = drive(
            EngineArgs::default(),
            vec![(0, row(0, 600, 0, &[1, 2], 64))],
        );
        assert_eq!((seen[&0].tokens, seen[&0].done_ns), (0, Some(25_763_044)));
    }

    #[test]
    fn a_request_with_nothing_to_generate_reuses_its_whole_cached_prompt() {
        // 1.6.1: a 192-token (3-block) prompt already cached, with output 0, reuses all 192
        // tokens and completes at its admission, with no prefill; one token to generate keeps
        // the last block for recompute (128 reused, a 64-token prefill).
        let arrivals = vec![
            (0, row(0, 654, 1, &[1, 2], 64)),
            (ms(100.0), row(1, 192, 0, &[1], 64)),
            (ms(200.0), row(2, 192, 1, &[1], 64)),
        ];
        let seen = drive(EngineArgs::default(), arrivals);
        assert_eq!((seen[&1].reused, seen[&1].tokens), (192, 0));
        assert_eq!(times(&seen[&1]), (Some(ms(100.0)), None, Some(ms(100.0))));
        assert_eq!(seen[&2].reused, 128);
        assert_eq!(seen[&2].done_ns, Some(ms(200.0) + 17_474_885));
    }

    fn fixed(prefill_ms: f64, decode_ms: f64) -> EngineArgs {
        args_with(|a| {
            a.common.timing = crate::mocker::TimingSource::Fixed(timing::FixedTiming {
                prefill_ms,
                decode_ms,
            })
        })
    }

    #[test]
    fn fixed_timing_charges_one_prefill_per_pass_and_one_decode_per_step() {
        // 1.6.1: a lone 1024-token prompt with 5 tokens under fixed 10/3 ms: first token at
        // 10 ms (no decode in the first token's pass), then four 3 ms steps.
        let seen = drive(fixed(10.0, 3.0), vec![(0, row(0, 1024, 5, &[1, 2], 64))]);
        assert_eq!(times(&seen[&0]), (Some(0), Some(ms(10.0)), Some(ms(22.0))));
        // Two prompts in one pass cost one prefill; their decode steps one decode each, and a
        // pass mixing a prefill with decodes costs both.
        let seen = drive(
            fixed(10.0, 3.0),
            vec![
                (0, row(0, 512, 3, &[1], 64)),
                (0, row(1, 700, 3, &[2, 3], 64)),
                (ms(11.0), row(2, 100, 1, &[4], 64)),
            ],
        );
        // Rows 0 and 1 arrive in the same instant and share the first pass; row 2 arrives
        // during the decode pass (10..13 ms) and joins the next one (13..26 ms).
        assert_eq!(seen[&0].first_ns, seen[&1].first_ns);
        assert_eq!(seen[&0].first_ns, Some(ms(10.0)));
        assert_eq!(seen[&2].first_ns, Some(ms(10.0 + 3.0 + 10.0 + 3.0)));
        assert_eq!(seen[&0].done_ns, Some(ms(10.0 + 3.0 + 13.0)));
    }

    #[test]
    fn fixed_timing_scales_like_the_polynomial_and_has_no_decode_floor() {
        // 1.6.1 (speedup 3, decode ratio 0.7, 10.123456789 / 3.3333333 ms): prefill
        // 3.374486 ms, decode 1.587301 ms (each rounded to the ns, then divided, rounded).
        let mut args = fixed(10.123456789, 3.3333333);
        args.common.speedup_ratio = 3.0;
        args.common.decode_speedup_ratio = 0.7;
        let seen = drive(args, vec![(0, row(0, 64, 3, &[1], 64))]);
        assert_eq!(seen[&0].first_ns, Some(3_374_486));
        assert_eq!(seen[&0].done_ns, Some(3_374_486 + 2 * 1_587_301));
        // Zero times are allowed (1.6.1 runs the steps at the same instant).
        let seen = drive(fixed(0.0, 0.0), vec![(ms(5.0), row(0, 64, 4, &[1], 64))]);
        assert_eq!(
            times(&seen[&0]),
            (Some(ms(5.0)), Some(ms(5.0)), Some(ms(5.0)))
        );
    }

    /// Runs passes back to back from `now` until the rank is idle, returning each pass's
    /// end (ns) and output.
    #[test]
    fn a_removed_request_frees_its_blocks_and_slot_and_the_rest_run() {
        let args = args_with(|a| a.common.capacity.max_num_seqs = 1);
        let mut w = MockWorker::new(args, WorkerWithDpRank::new(0, 0));
        for id in 0..2 {
            w.add_request(SimTime::ZERO, row(id, 100, 5, &[id as u32 + 1], 64))
                .unwrap();
        }
        let mut out = PassOutput::default();
        let end = w.execute_pass(SimTime::ZERO, &mut out);
        assert_eq!(w.running_ids().collect::<Vec<_>>(), vec![RequestId(0)]);
        assert!(w.active_blocks() > 0);
        let view = w.remove_request(RequestId(0)).expect("running");
        assert_eq!(view.phase, RequestPhase::Running);
        assert_eq!((w.running_len(), w.active_blocks()), (0, 0));
        assert_eq!(w.remove_request(RequestId(0)), None, "removed once");
        w.check_invariants().unwrap();
        // A waiting request leaves its queue too; the rank is then idle.
        let mut now = end;
        w.add_request(now, row(2, 100, 5, &[3], 64)).unwrap();
        assert_eq!(
            w.remove_request(RequestId(2)).map(|v| v.phase),
            Some(RequestPhase::Waiting)
        );
        // Bounded: request 1 needs 5 passes.
        for _ in 0..10 {
            if !w.has_work() {
                break;
            }
            now = w.execute_pass(now, &mut out);
            w.check_invariants().unwrap();
        }
        assert!(!w.has_work(), "request 1 ran to its end");
    }

    /// A request of `runs` (token, count) whose hashes use 16-token blocks.
    fn tokens_req(id: u64, runs: &[(u32, usize)], output: u64) -> MockRequest {
        let tokens: Vec<u32> = runs
            .iter()
            .flat_map(|&(t, n)| std::iter::repeat_n(t, n))
            .collect();
        MockRequest {
            id: RequestId(id),
            prompt_tokens: tokens.len() as u64,
            prompt_hashes: hashing::sequence_hashes(&tokens, 16).into(),
            max_output_tokens: output,
            unshared_from: u64::MAX,
        }
    }

    /// 16-token blocks, 8 of them: request 0 of [`tokens_req`] `(5, 48), (6, 60)` holds 7
    /// while it runs, leaving one.
    fn small_pool_args() -> EngineArgs {
        args_with(|a| {
            a.common.block_size = 16;
            a.common.capacity.num_gpu_blocks = 8;
        })
    }

    #[test]
    fn a_waiting_heads_probe_is_reused_until_its_blocks_change() {
        let mut fast = MockWorker::new(small_pool_args(), WorkerWithDpRank::new(0, 0));
        let mut plain = MockWorker::new(small_pool_args(), WorkerWithDpRank::new(0, 0));
        plain.set_plain_lookups();
        let (mut out, mut plain_out) = (PassOutput::default(), PassOutput::default());
        let mut now = SimTime::ZERO;
        let mut admitted = None;
        // Request 1 shares request 0's first 3 blocks but needs 3 more: it waits until
        // request 0 completes (releasing the blocks it found), then reuses those 48 tokens.
        // Bounded: request 0 needs 21 passes.
        for pass in 0..40 {
            let arrivals = match pass {
                0 => vec![tokens_req(0, &[(5, 48), (6, 60)], 20)],
                1 => vec![tokens_req(1, &[(5, 48), (8, 40)], 2)],
                _ => vec![],
            };
            for req in arrivals {
                fast.add_request(now, req.clone()).unwrap();
                plain.add_request(now, req).unwrap();
            }
            if !fast.has_work() {
                break;
            }
            let end = fast.execute_pass(now, &mut out);
            assert_eq!(end, plain.execute_pass(now, &mut plain_out));
            assert_eq!(out, plain_out, "pass {pass}");
            fast.assert_same_state(&plain);
            if let Some(a) = out.admitted.iter().find(|a| a.id == RequestId(1)) {
                admitted = Some((pass, a.reused_tokens, fast.probe_reuses()));
            }
            now = end;
        }
        assert!(!fast.has_work());
        // Request 0 completes in pass 19. Request 1 is asked about in every pass from 1 on:
        // its prefix is walked in pass 1, answered from the kept probe in passes 2 to 19
        // (request 0's decoding touches none of its blocks), and walked again in pass 20,
        // once the blocks it found went inactive.
        assert_eq!(admitted, Some((20, 48, 18)));
    }

    #[test]
    fn an_applied_pass_output_gives_its_event_lists_back_to_the_pool() {
        let mut w = MockWorker::new(small_pool_args(), WorkerWithDpRank::new(0, 0));
        w.add_request(SimTime::ZERO, tokens_req(0, &[(5, 48)], 4))
            .unwrap();
        let mut out = PassOutput::default();
        w.execute_pass(SimTime::ZERO, &mut out);
        assert!(!out.kv_events.is_empty(), "the prefill stores its blocks");
        assert_eq!(w.pool.spare_block_lists(), 0);
        w.take_back(&mut out);
        assert!(out.kv_events.is_empty() && out.tokens.is_empty());
        assert!(
            w.pool.spare_block_lists() > 0,
            "the lists are kept for the next events"
        );
    }

    #[test]
    fn a_full_pool_plans_its_quiet_run_up_to_the_growth_it_has_no_block_for() {
        // 16-token blocks, 8 of them: three decoding requests hold two each and two are free,
        // nothing is inactive. They grow into a fresh block at their 5th, 9th and 13th
        // decode steps from here (prompts of 28, 24 and 20 tokens), so the third growth
        // finds no block: that pass preempts, and the planned run must end just before it
        // (not earlier: the passes up to it are quiet).
        let rank = WorkerWithDpRank::new(0, 0);
        let (mut planner, mut stepper) = (
            MockWorker::new(small_pool_args(), rank),
            MockWorker::new(small_pool_args(), rank),
        );
        for w in [&mut planner, &mut stepper] {
            w.set_publish_generated_blocks(false);
            for (id, prompt) in [(0, 28), (1, 24), (2, 20)] {
                let req = tokens_req(id, &[(10 + id as u32, prompt)], 60);
                w.add_request(SimTime::ZERO, req).unwrap();
            }
        }
        let (mut out, mut stepper_out) = (PassOutput::default(), PassOutput::default());
        let mut now = SimTime::ZERO;
        let mut ends = Vec::new();
        // The prefill pass, then a run can be planned: bounded by 4 passes.
        for _ in 0..4 {
            planner.plan_quiet_passes(now, 64, &mut ends);
            if !ends.is_empty() {
                break;
            }
            let end = planner.execute_pass(now, &mut out);
            assert_eq!(end, stepper.execute_pass(now, &mut stepper_out));
            now = end;
        }
        assert_eq!(
            (
                planner.running_len(),
                planner.active_blocks(),
                planner.inactive_blocks()
            ),
            (3, 6, 0)
        );
        assert_eq!(ends.len(), 12, "the run ends before the third growth");
        for (pass, &end) in ends.iter().enumerate() {
            assert_eq!(stepper.execute_pass(now, &mut stepper_out), end);
            let quiet = stepper_out.preempted.is_empty() && stepper_out.kv_events.is_empty();
            assert!(quiet, "pass {pass} of the run is quiet");
            now = end;
        }
        stepper.execute_pass(now, &mut stepper_out);
        assert!(
            !stepper_out.preempted.is_empty(),
            "the pass after the run preempts"
        );
    }

    #[test]
    fn a_cancelled_heads_probe_is_not_reused_for_the_request_taking_its_slot() {
        let mut w = MockWorker::new(small_pool_args(), WorkerWithDpRank::new(0, 0));
        let mut out = PassOutput::default();
        w.add_request(SimTime::ZERO, tokens_req(0, &[(5, 48), (6, 60)], 20))
            .unwrap();
        let mut now = w.execute_pass(SimTime::ZERO, &mut out);
        // Request 1 shares nothing and needs 3 blocks of the 1 left: it waits, and its
        // probe (no block found) is kept.
        w.add_request(now, tokens_req(1, &[(7, 48)], 2)).unwrap();
        now = w.execute_pass(now, &mut out);
        assert!(out.admitted.is_empty());
        assert_eq!(
            w.remove_request(RequestId(1)).map(|v| v.phase),
            Some(RequestPhase::Waiting)
        );
        // Request 2 takes its slot with a sequence just as long, 2 of whose 3 blocks request 0
        // holds: it needs one more block, which is free. Nothing in the pool changed, so only
        // forgetting request 1's probe stops its answer (wait) being given to request 2.
        w.add_request(now, tokens_req(2, &[(5, 48)], 2)).unwrap();
        w.execute_pass(now, &mut out);
        let admitted: Vec<_> = out
            .admitted
            .iter()
            .map(|a| (a.id, a.reused_tokens))
            .collect();
        assert_eq!(admitted, vec![(RequestId(2), 32)]);
        w.check_invariants().unwrap();
    }

    fn run_all(w: &mut MockWorker, mut now: u64) -> Vec<(u64, PassOutput)> {
        let mut passes = Vec::new();
        for _ in 0..10_000 {
            if !w.has_work() {
                return passes;
            }
            let mut out = PassOutput::default();
            now = w.execute_pass(SimTime::from_ns(now), &mut out).as_ns();
            w.check_invariants().unwrap();
            passes.push((now, out));
        }
        panic!("rank never went idle");
    }

    #[test]
    fn chunked_prefill_pass_by_pass() {
        let ids: Vec<u32> = (100..140).collect();
        let mut w = MockWorker::new(EngineArgs::default(), WorkerWithDpRank::new(0, 0));
        w.add_request(SimTime::ZERO, row(0, 20_000, 1, &ids, 64))
            .unwrap();
        let passes = run_all(&mut w, 0);
        let ends: Vec<u64> = passes.iter().map(|p| p.0).collect();
        // 1.6.1: chunks 8192, 8192, 3616, each pass charged prefill(chunk) only.
        assert_eq!(ends, vec![169_136_918, 338_273_836, 415_183_328]);
        let t: Vec<u64> = passes.iter().map(|p| p.1.prefill_tokens).collect();
        assert_eq!(t, vec![8192, 8192, 3616]);
        assert!(
            passes[..2].iter().all(|p| p.1.tokens.is_empty()),
            "no token mid-prefill"
        );
        assert_eq!(
            passes[2].1.tokens,
            vec![TokenOut {
                middle_unlisted: 0,
                id: RequestId(0),
                first: true,
                completed: true
            }]
        );
    }

    #[test]
    fn kv_events_store_new_blocks_and_remove_lru_evictions() {
        let args = args_with(|a| a.common.capacity.num_gpu_blocks = 4);
        let rank = WorkerWithDpRank::new(7, 2);
        let mut w = MockWorker::new(args, rank);
        let a = row(0, 128, 1, &[1], 64);
        let a_hashes = a.prompt_hashes.clone();
        w.add_request(SimTime::ZERO, a).unwrap();
        let first = run_all(&mut w, 0);
        let stored = KvEventData::Stored {
            parent: None,
            blocks: a_hashes.to_vec(),
        };
        assert_eq!(
            first[0].1.kv_events,
            vec![KvEvent {
                worker: rank,
                event_id: 0,
                data: stored
            }]
        );
        assert_eq!(
            (w.active_blocks(), w.inactive_blocks()),
            (0, 2),
            "finished blocks stay cached"
        );
        // A different 256-token prompt needs all 4 blocks: the cached ones are evicted, the
        // chain's tail first (it was released first).
        let b = row(1, 256, 1, &[2], 64);
        let b_hashes = b.prompt_hashes.clone();
        w.add_request(SimTime::from_ns(first[0].0), b).unwrap();
        let second = run_all(&mut w, first[0].0);
        let data: Vec<(u64, KvEventData)> = second[0]
            .1
            .kv_events
            .iter()
            .map(|e| (e.event_id, e.data.clone()))
            .collect();
        assert_eq!(
            data,
            vec![
                (
                    1,
                    KvEventData::Removed {
                        blocks: vec![a_hashes[1], a_hashes[0]]
                    }
                ),
                (
                    2,
                    KvEventData::Stored {
                        parent: None,
                        blocks: b_hashes.to_vec()
                    }
                ),
            ]
        );
    }

    #[test]
    fn prefix_caching_off_publishes_nothing_and_reuses_nothing() {
        let args = args_with(|a| a.common.enable_prefix_caching = false);
        let mut w = MockWorker::new(args, WorkerWithDpRank::new(0, 0));
        w.add_request(SimTime::ZERO, row(0, 1024, 2, &[1, 2], 64))
            .unwrap();
        let mut passes = run_all(&mut w, 0);
        let end = passes.last().unwrap().0;
        w.add_request(SimTime::from_ns(end), row(1, 1024, 2, &[1, 2], 64))
            .unwrap();
        passes.extend(run_all(&mut w, end));
        assert!(passes.iter().all(|p| p.1.kv_events.is_empty()));
        let reused: Vec<u64> = passes
            .iter()
            .flat_map(|p| p.1.admitted.iter().map(|a| a.reused_tokens))
            .collect();
        assert_eq!(reused, vec![0, 0]);
        assert_eq!(w.inactive_blocks(), 0, "nothing is cached");
    }

    #[test]
    fn invalid_engine_args_are_an_error_not_a_panic() {
        let bad = args_with(|a| a.common.capacity.max_num_seqs = 0);
        let err = MockWorker::try_new(bad, WorkerWithDpRank::new(0, 0)).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                field: "max_num_seqs",
                ..
            }
        ));
    }

    #[test]
    fn bad_requests_are_refused_with_typed_errors() {
        let mut w = MockWorker::new(EngineArgs::default(), WorkerWithDpRank::new(0, 0));
        let ok = row(0, 128, 1, &[1], 64);
        w.add_request(SimTime::ZERO, ok.clone()).unwrap();
        assert_eq!(
            w.add_request(SimTime::ZERO, ok.clone()),
            Err(AddRequestError::DuplicateId(RequestId(0)))
        );
        let empty = MockRequest {
            id: RequestId(1),
            prompt_tokens: 0,
            ..ok.clone()
        };
        assert_eq!(
            w.add_request(SimTime::ZERO, empty),
            Err(AddRequestError::EmptyPrompt(RequestId(1)))
        );
        let short = MockRequest {
            id: RequestId(2),
            prompt_tokens: 300,
            ..ok
        };
        assert_eq!(
            w.add_request(SimTime::ZERO, short),
            Err(AddRequestError::HashCountMismatch {
                id: RequestId(2),
                expected: 4,
                got: 2
            })
        );
        assert_eq!((w.waiting_len(), w.running_len()), (1, 0));
    }

    /// Runs `arrivals` on `args` and returns each request's rejection reason (None if it was
    /// not rejected), checking invariants after every pass.
    fn reasons(args: EngineArgs, arrivals: Vec<MockRequest>) -> Vec<Option<&'static str>> {
        let n = arrivals.len();
        let mut w = MockWorker::new(args, WorkerWithDpRank::new(0, 0));
        for r in arrivals {
            w.add_request(SimTime::ZERO, r).unwrap();
        }
        let mut got = vec![None; n];
        for (_, out) in run_all(&mut w, 0) {
            for r in &out.rejected {
                got[r.id.0 as usize] = Some(r.reason.label());
            }
        }
        got
    }

    #[test]
    fn a_sequence_outgrowing_the_pool_is_rejected_before_it_preempts_anyone() {
        // 1.6.1 serves request 0 until its 21st block, preempting request 1 on the way, then
        // aborts the replay; we reject request 0 at admission and request 1 runs untouched.
        let args = args_with(|a| a.common.capacity.num_gpu_blocks = 20);
        let arrivals = vec![
            (0, row(0, 600, 1000, &[1, 2], 64)),
            (0, row(1, 600, 50, &[3, 4], 64)),
        ];
        let seen = drive(args, arrivals);
        // Both are decided in the first pass; the rejection is delivered at its end.
        assert_eq!(seen[&1].admit_ns, Some(0));
        assert_eq!(seen[&0].rejected_ns, seen[&1].first_ns);
        assert_eq!(seen[&0].tokens, 0);
        assert_eq!((seen[&1].tokens, seen[&1].rejected_ns), (50, None));
    }

    #[test]
    fn the_peak_sequence_decides_what_fits_exactly() {
        // 20 blocks of 64 = 1280 tokens; the last output token is never computed.
        let args = args_with(|a| a.common.capacity.num_gpu_blocks = 20);
        let fits = row(0, 600, 681, &[1, 2], 64); // peak 600 + 680 = 1280
        let over = row(1, 600, 682, &[3, 4], 64); // peak 1281
        let capped = args_with(|a| {
            a.common.capacity.num_gpu_blocks = 20;
            a.common.capacity.max_model_len = Some(1281);
        });
        assert_eq!(
            reasons(args.clone(), vec![fits, over.clone()]),
            vec![None, Some("sequence_exceeds_kv_pool")]
        );
        let under_cap = MockRequest {
            id: RequestId(0),
            ..over
        };
        assert_eq!(reasons(capped, vec![under_cap]), vec![None]);
    }

    #[test]
    fn each_unservable_request_gets_its_reason() {
        let args = args_with(|a| {
            a.common.capacity.num_gpu_blocks = 16;
            a.common.capacity.max_model_len = Some(2000);
        });
        let arrivals = vec![
            row(0, 1024, 1, &[1, 2], 64),
            row(1, 1025, 1, &[3, 4, 5], 64),
            row(2, 1000, 100, &[6, 7], 64),
            row(3, 2000, 1, &[8, 9, 10, 11], 64),
        ];
        assert_eq!(
            reasons(args, arrivals),
            vec![
                None,
                Some("prompt_exceeds_kv_pool"),
                Some("sequence_exceeds_kv_pool"),
                Some("prompt_exceeds_max_model_len"),
            ]
        );
    }

    #[test]
    fn unchunked_prompt_over_the_budget_is_rejected_instead_of_stalling() {
        let args = args_with(|a| {
            a.backend = Backend::Vllm(VllmArgs {
                enable_chunked_prefill: false,
                ..VllmArgs::default()
            });
            a.common.capacity.max_num_batched_tokens = 256;
        });
        let seen = drive(
            args,
            vec![
                (0, row(0, 600, 3, &[1, 2], 64)),
                (1, row(1, 100, 3, &[3], 64)),
            ],
        );
        assert_eq!(seen[&0].rejected_ns, Some(0));
        assert_eq!(seen[&1].tokens, 3);
        let one = vec![row(0, 600, 3, &[1, 2], 64)];
        let no_chunks = args_with(|a| {
            a.backend = Backend::Vllm(VllmArgs {
                enable_chunked_prefill: false,
                ..VllmArgs::default()
            });
            a.common.capacity.max_num_batched_tokens = 256;
        });
        assert_eq!(
            reasons(no_chunks, one),
            vec![Some("prompt_exceeds_token_budget")]
        );
    }
}
