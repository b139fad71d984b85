//! Disaggregated serving's handoff of a request from its prefill worker to its decode worker,
//! in Dynamo 1.6.1's vLLM order (source first): the prefill pass ends and the source holds
//! the KV; the decode router picks a decode worker; that worker reserves room for it (the
//! transfer starts); the transfer lands and the destination is activated; the source lets go
//! of its blocks. docs/disaggregated.md gives the rules and the experiments behind them.
//!
//! Timing: a decode worker reserves and activates only between its passes, so a handoff that
//! becomes possible while it runs a pass waits for that pass's end; it takes one pending
//! reservation per step, in the order the prompts were held (see
//! [`System::reservation_steps`]); a prefill worker releases a source only between its passes
//! too. A transfer takes the prefill engine's
//! [`KvTransfer`] delay; concurrent transfers do not share bandwidth.

use super::driver::{RouterDecision, RouterDriver};
use super::{Event, Rejection, SimConfig, Status, System, fleet, schedule_pass_end};
use crate::engine::EventQueue;
use crate::mocker::MockRequest;
use crate::mocker::transfer::KvTransfer;
use crate::mocker::{RejectReason, Reservation, WorkerRole};
use crate::rng;
use crate::scheduling::policy::PolicyProfile;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::Outcome;
use crate::scheduling::types::QueuePolicy;
use crate::scheduling::types::RequestId;
use crate::time::{SimDuration, SimTime};
use rand::RngExt;
use std::collections::VecDeque;

/// Where a request in its handoff is.
pub(super) struct Flight {
    /// The prefill rank (fleet index) holding its KV until released.
    pub prefill_rank: usize,
    /// The decode rank (fleet index) the decode router chose.
    pub decode_rank: usize,
}

/// The handoff state of a disaggregated run: every request between its prefill's end and
/// its source's release.
pub(super) struct Handoff {
    /// The prefill engine's transfer settings (the decode engine's are never read).
    transfer: KvTransfer,
    block_size: u64,
    pub(super) flights: rustc_hash::FxHashMap<RequestId, Flight>,
    /// Per decode rank: requests waiting for a reservation there, in held order.
    pub(super) pending: Vec<VecDeque<RequestId>>,
    /// Per decode rank: transfers that landed while it ran a pass.
    pub(super) landed: Vec<Vec<RequestId>>,
    /// Per prefill rank: sources to release when its pass ends.
    pub(super) releases: Vec<Vec<RequestId>>,
}

impl Handoff {
    /// The handoff of a run of `config` (disaggregated) over a fleet of `ranks` ranks.
    pub fn new(config: &SimConfig, ranks: usize) -> Handoff {
        let prefill = config
            .pools
            .iter()
            .find(|p| p.engine.common.role == WorkerRole::Prefill);
        let transfer = prefill
            .map(|p| p.engine.common.kv_transfer)
            .unwrap_or_default();
        Handoff {
            transfer,
            block_size: config.block_size(),
            flights: Default::default(),
            pending: vec![VecDeque::new(); ranks],
            landed: vec![Vec::new(); ranks],
            releases: vec![Vec::new(); ranks],
        }
    }

    /// Whether decode rank `rank` has a handoff waiting for a reservation, or a landed one
    /// waiting for its pass end.
    pub fn has_pending(&self, rank: usize) -> bool {
        !self.pending[rank].is_empty() || !self.landed[rank].is_empty()
    }

    /// Whether request `id`'s source has yet to let go of it.
    pub fn is_releasing(&self, id: RequestId) -> bool {
        self.flights.contains_key(&id)
    }

    /// The fleet has `ranks` ranks now (workers joined): each gets empty queues.
    pub fn grow(&mut self, ranks: usize) {
        self.pending.resize_with(ranks, VecDeque::new);
        self.landed.resize_with(ranks, Vec::new);
        self.releases.resize_with(ranks, Vec::new);
    }

    /// At the end of a drained run: Err unless no handoff is left.
    pub fn check_drained(&self) -> Result<(), String> {
        match self.flights.len() {
            0 => Ok(()),
            n => Err(format!("{n} handoffs never ended")),
        }
    }
}

/// The decode pool's router of a disaggregated run of `config` (asked once per request,
/// when its prefill ends).
pub(super) fn decode_router(config: &SimConfig) -> RouterDriver {
    let mut scheduler = config.scheduler_config();
    scheduler.router = decode_router_config(&config.router);
    // The decode router never queues: it books no prefill, so no class of it is ever
    // busy, and with no decode worker left it refuses at once (no_endpoints).
    scheduler.profile = PolicyProfile::synthetic(QueuePolicy::Fcfs, None);
    scheduler.seed = rng::stream(config.seed, "sim/decode-router").random();
    RouterDriver::new(
        config.router_mode,
        scheduler,
        fleet::worker_set_of(&config.pools, |role| role == WorkerRole::Decode),
        0,
        false,
    )
}

/// The prefill router's knobs: the user's, without active-block tracking (a prefill worker's
/// load is its prefill tokens).
pub(super) fn prefill_router_config(router: &RouterConfig) -> RouterConfig {
    RouterConfig {
        router_track_active_blocks: false,
        ..router.clone()
    }
}

/// The decode router's knobs: the user's, with no overlap credit, no assumed KV reuse and no
/// prefill-token load (a decode worker's load is its active blocks).
fn decode_router_config(router: &RouterConfig) -> RouterConfig {
    RouterConfig {
        overlap_score_credit: 0.0,
        overlap_score_weight: router.overlap_score_weight.map(|_| 0.0),
        router_assume_kv_reuse: false,
        router_track_prefill_tokens: false,
        router_prefill_load_model: "none".to_string(),
        ..router.clone()
    }
}

impl System {
    /// The handoff of a disaggregated run (only called in one).
    pub(super) fn handoff(&mut self) -> &mut Handoff {
        self.handoff
            .as_mut()
            .expect("only a disaggregated run hands off")
    }

    /// A prefill rank's pass ended at `now`: sources released while it ran let go now, then
    /// every prompt the pass completed is held and handed off, in running order.
    pub(super) fn prefill_pass_ended(
        &mut self,
        now: SimTime,
        rank: usize,
        held: &[RequestId],
        queue: &mut EventQueue<Event>,
    ) {
        for id in std::mem::take(&mut self.handoff().releases[rank]) {
            self.release_source(now, id, rank, queue);
        }
        for &id in held {
            self.hand_off(now, rank, id, queue);
        }
    }

    /// Request `id`'s prompt is computed and held on prefill rank `rank`: the prefill router
    /// hears its prefill is done, and the decode router picks its decode worker.
    fn hand_off(
        &mut self,
        now: SimTime,
        rank: usize,
        id: RequestId,
        queue: &mut EventQueue<Event>,
    ) {
        self.ledger.prefill_held(now, id);
        self.routers.entry().first_token(now, id);
        self.drain_router(now, queue);
        let Some(f) = self.ledger.in_flight(id) else {
            return;
        };
        let decode_router = self.routers.decode().expect("a disaggregated run");
        decode_router.route(now, id, f);
        while let Some(decision) = (self.routers.decode()).and_then(|r| r.poll_decision()) {
            match decision {
                RouterDecision::Dispatch { id, rank: to, .. } => {
                    let decode_rank = self.rank_index(to);
                    self.ledger.decode_routed(id, to);
                    self.routers
                        .for_role(WorkerRole::Decode)
                        .dispatched(now, id);
                    let flight = Flight {
                        prefill_rank: rank,
                        decode_rank,
                    };
                    self.handoff().flights.insert(id, flight);
                    if self.fleet.is_down(decode_rank) {
                        self.handed_to_down_rank(now, id, decode_rank, queue);
                        continue;
                    }
                    self.handoff().pending[decode_rank].push_back(id);
                    self.reservation_step(now, decode_rank, queue);
                }
                RouterDecision::Reject { id, error, .. } => {
                    self.fleet.release_held(rank, id);
                    self.end(now, id, Status::Rejected(Rejection::router(error)));
                    self.routers.entry().finished(now, id, Outcome::Aborted);
                    self.drain_router(now, queue);
                }
            }
        }
    }

    /// A decode rank's pass ended at `now` (its tokens delivered): transfers that landed
    /// meanwhile activate, and the rank takes a step for its pass end and one for each of
    /// them.
    pub(super) fn decode_pass_ended(
        &mut self,
        now: SimTime,
        rank: usize,
        queue: &mut EventQueue<Event>,
    ) {
        let landed = std::mem::take(&mut self.handoff().landed[rank]);
        for &id in &landed {
            self.activate(now, id, queue);
        }
        self.reservation_steps(now, rank, 1 + landed.len(), queue);
    }

    /// Decode rank `rank` takes a step, if it is between passes (see
    /// [`System::reservation_steps`]).
    fn reservation_step(&mut self, now: SimTime, rank: usize, queue: &mut EventQueue<Event>) {
        self.reservation_steps(now, rank, 1, queue);
    }

    /// Decode rank `rank`, between passes, takes `steps` steps: each reserves room for its
    /// first pending handoff if that fits (in held order, never past one that does not). A
    /// rank takes a step at each pass end and each time it hears of a handoff between passes
    /// (one chosen for it, or a transfer landing; one that landed during a pass counts at the
    /// pass end), so a busy rank takes about one reservation per pass, as 1.6.1's does. A
    /// transfer of no time lands at once, which is another step.
    fn reservation_steps(
        &mut self,
        now: SimTime,
        rank: usize,
        steps: usize,
        queue: &mut EventQueue<Event>,
    ) {
        self.settle_decode_rank(now, rank, queue);
        if !self.fleet.in_pass(rank) {
            self.take_reservations(now, rank, steps, queue);
        }
        // The rank's next pass starts after this (never in it): it knows what still waits.
        let pending = !self.handoff().pending[rank].is_empty();
        self.fleet.set_handoffs_pending(rank, pending);
    }

    /// The reservations of [`System::reservation_steps`] on a rank between passes.
    fn take_reservations(
        &mut self,
        now: SimTime,
        rank: usize,
        mut steps: usize,
        queue: &mut EventQueue<Event>,
    ) {
        // Each iteration removes a pending handoff or stops: bounded by the pending handoffs.
        while steps > 0
            && let Some(&id) = self.handoff().pending[rank].front()
        {
            let Some(f) = self.ledger.in_flight(id) else {
                // It ended meanwhile: it takes no step.
                self.handoff().pending[rank].pop_front();
                continue;
            };
            let prompt_tokens = f.prompt_tokens;
            let request = MockRequest {
                id,
                prompt_tokens,
                prompt_hashes: f.hashes.clone(),
                max_output_tokens: f.output_tokens,
                unshared_from: f.unshared_from,
            };
            let cached = match self.fleet.reserve_handoff(rank, request) {
                Ok(Reservation::Reserved { cached_blocks }) => cached_blocks,
                Ok(Reservation::Wait) => break,
                Ok(Reservation::Never(reason)) => {
                    // Refused for good: the step passes to the next one.
                    self.handoff().pending[rank].pop_front();
                    self.fail_handoff(now, id, reason, queue);
                    continue;
                }
                Err(message) => return self.fail(now, message),
            };
            steps -= 1;
            let handoff = self.handoff();
            handoff.pending[rank].pop_front();
            let tokens = handoff
                .transfer
                .tokens_moved(prompt_tokens, handoff.block_size, cached);
            let delay = handoff.transfer.delay(tokens);
            self.ledger.transfer_started(now, id);
            if delay == SimDuration::ZERO {
                self.activate(now, id, queue);
                steps += 1;
            } else {
                let attempt = self.ledger.attempt(id);
                queue.schedule(
                    now.saturating_add(delay),
                    Event::TransferDone {
                        request: id,
                        attempt,
                    },
                );
            }
        }
    }

    /// Request `id`'s transfer lands at `now`: it activates and its rank takes a step, or it
    /// waits for its decode rank's pass end.
    pub(super) fn transfer_done(
        &mut self,
        now: SimTime,
        id: RequestId,
        queue: &mut EventQueue<Event>,
    ) {
        let Some(rank) = self.handoff().flights.get(&id).map(|f| f.decode_rank) else {
            return;
        };
        self.settle_decode_rank(now, rank, queue);
        if self.fleet.in_pass(rank) {
            self.handoff().landed[rank].push(id);
        } else {
            self.activate(now, id, queue);
            self.reservation_step(now, rank, queue);
        }
    }

    /// A handoff reaches decode rank `rank` at `now`: a quiet run it is in ends after the pass
    /// in progress (or, over by now, is applied), so the handoff meets the rank's next pass
    /// end as it would pass by pass.
    fn settle_decode_rank(&mut self, now: SimTime, rank: usize, queue: &mut EventQueue<Event>) {
        let end = self.fleet.settle(now, rank, &mut self.ledger);
        schedule_pass_end(queue, end);
    }

    /// Request `id` becomes a waiting request of its decode rank with its prompt computed;
    /// its source lets go now, or at its prefill rank's pass end.
    fn activate(&mut self, now: SimTime, id: RequestId, queue: &mut EventQueue<Event>) {
        let Some(flight) = self.handoff().flights.get(&id) else {
            return;
        };
        let (prefill_rank, decode_rank) = (flight.prefill_rank, flight.decode_rank);
        if !self.fleet.activate_handoff(decode_rank, id) {
            self.fail(
                now,
                format!("request {id} landed where nothing was reserved"),
            );
            return;
        }
        self.ledger.transfer_ended(now, id);
        if self.fleet.in_pass(prefill_rank) {
            self.handoff().releases[prefill_rank].push(id);
        } else {
            self.release_source(now, id, prefill_rank, queue);
        }
    }

    /// Request `id` can never be served on the decode rank chosen for it: it ends rejected
    /// at `now` for `reason`, and its source lets go at once (it is between its passes'
    /// effects at most: a held request is in no pass).
    fn fail_handoff(
        &mut self,
        now: SimTime,
        id: RequestId,
        reason: RejectReason,
        queue: &mut EventQueue<Event>,
    ) {
        let Some(prefill_rank) = self.handoff().flights.get(&id).map(|f| f.prefill_rank) else {
            return;
        };
        self.end(now, id, Status::Rejected(Rejection::Worker(reason)));
        (self.routers.for_role(WorkerRole::Decode)).finished(now, id, Outcome::Aborted);
        self.release_source(now, id, prefill_rank, queue);
    }

    /// Prefill rank `rank` lets go of request `id`'s blocks at `now`; the prefill router
    /// frees it.
    pub(super) fn release_source(
        &mut self,
        now: SimTime,
        id: RequestId,
        rank: usize,
        queue: &mut EventQueue<Event>,
    ) {
        self.handoff().flights.remove(&id);
        if !self.fleet.release_held(rank, id) {
            self.fail(
                now,
                format!("request {id} was not held on its prefill rank"),
            );
            return;
        }
        self.ledger.source_released(now, id);
        self.routers.entry().finished(now, id, Outcome::Completed);
        self.drain_router(now, queue);
    }
}
