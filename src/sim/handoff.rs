//! Disaggregated serving: the handoff of a request from its prefill worker to its decode
//! worker, in Dynamo 1.6.1's vLLM order (source first): the prefill pass ends and the source
//! holds the KV; the decode router picks a decode worker; that worker reserves room for it
//! (the transfer starts); the transfer lands and the destination is activated; the source
//! lets go of its blocks. docs/disaggregated.md gives the rules and the experiments behind
//! them.
//!
//! Timing: a decode worker reserves and activates only between its passes, so a handoff that
//! becomes possible while it runs a pass waits for that pass's end; it takes one pending
//! reservation per step, in the order the prompts were held (see
//! [`Disaggregated::reservation_steps`]); a prefill worker releases a source only between its
//! passes too. A transfer takes the prefill engine's [`KvTransfer`] delay; concurrent
//! transfers do not share bandwidth.
//!
//! Losing a worker: a lost **prefill** worker loses the requests it was prefilling and every
//! handoff whose transfer had not landed (the KV's source is gone, so the decode worker's
//! reservation, or its place in the queue for one, is dropped); a handoff that had landed
//! keeps going, only its source's release is moot. A lost **decode** worker loses what it ran
//! or queued and the handoffs reserved on it or waiting for it, and each of those handoffs'
//! source is released at once. Every lost request is then migrated or aborted when the
//! router of its worker's role hears of the loss, as in aggregated serving.

use super::driver::{RouterDecision, RouterDriver};
use super::effects::{Effects, Event};
use super::serving::Serving;
use super::{Rejection, SimConfig, Status, fleet};
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
use std::collections::{BTreeSet, VecDeque};

/// Where a request in its handoff is.
struct Flight {
    /// The prefill rank (fleet index) holding its KV until released.
    prefill_rank: usize,
    /// The decode rank (fleet index) the decode router chose.
    decode_rank: usize,
}

/// Disaggregated serving's state: every request between its prefill's end and its source's
/// release.
pub(super) struct Disaggregated {
    /// The prefill engine's transfer settings (the decode engine's are never read).
    transfer: KvTransfer,
    block_size: u64,
    flights: rustc_hash::FxHashMap<RequestId, Flight>,
    /// Per decode rank: requests waiting for a reservation there, in held order.
    pending: Vec<VecDeque<RequestId>>,
    /// Per decode rank: transfers that landed while it ran a pass.
    landed: Vec<Vec<RequestId>>,
    /// Per prefill rank: sources to release when its pass ends.
    releases: Vec<Vec<RequestId>>,
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

impl Serving for Disaggregated {
    fn allows_quiet_run(&self, rank: usize) -> bool {
        self.pending[rank].is_empty() && self.landed[rank].is_empty()
    }

    /// Sources released while the pass ran let go now, then every prompt the pass completed
    /// is held and handed off, in running order.
    fn prefill_pass_ended(
        &mut self,
        fx: &mut dyn Effects,
        now: SimTime,
        rank: usize,
        held: &[RequestId],
    ) {
        for id in std::mem::take(&mut self.releases[rank]) {
            self.release_source(fx, now, id, rank);
        }
        for &id in held {
            self.hand_off(fx, now, rank, id);
        }
    }

    /// The rank takes a step for its pass end, then the transfers that landed meanwhile
    /// activate, each followed by a step of its own, as 1.6.1 orders them (its pass end
    /// retries the reservations before the activations it deferred run). So the pass end's
    /// reservation finds none of their blocks cached. A step that waits ends the rank's steps
    /// at this instant: 1.6.1 retries a waiting handoff only once capacity is freed, which an
    /// activation does not do.
    fn decode_pass_ended(&mut self, fx: &mut dyn Effects, now: SimTime, rank: usize) {
        let landed = std::mem::take(&mut self.landed[rank]);
        let mut waits = self.reservation_steps(fx, now, rank, 1);
        for &id in &landed {
            self.activate(fx, now, id);
            if !waits {
                waits = self.reservation_steps(fx, now, rank, 1);
            }
        }
    }

    /// The transfer activates and its rank takes a step, or it waits for its decode rank's
    /// pass end.
    fn transfer_done(&mut self, fx: &mut dyn Effects, now: SimTime, id: RequestId) {
        let Some(rank) = self.flights.get(&id).map(|f| f.decode_rank) else {
            return;
        };
        fx.settle_rank(now, rank);
        if fx.shared().fleet.in_pass(rank) {
            self.landed[rank].push(id);
        } else {
            self.activate(fx, now, id);
            self.reservation_steps(fx, now, rank, 1);
        }
    }

    /// See the module docs: what losing a prefill or a decode worker does to its handoffs.
    fn lost_with(
        &mut self,
        fx: &mut dyn Effects,
        now: SimTime,
        worker: u64,
        held: Vec<RequestId>,
    ) -> Vec<RequestId> {
        let fleet = fx.shared().fleet;
        let ranks = fleet.ranks_of(worker);
        let Some(first) = ranks.clone().next() else {
            return held;
        };
        if fleet.role(first) == WorkerRole::Prefill {
            return (held.into_iter())
                .filter(|&id| self.source_lost(fx, now, id))
                .collect();
        }
        let mut lost: BTreeSet<RequestId> = held.into_iter().collect();
        for rank in ranks {
            lost.extend(self.pending[rank].drain(..));
            self.landed[rank].clear();
            fx.shared().fleet.set_handoffs_pending(rank, false);
        }
        for &id in &lost {
            self.destination_lost(fx, now, id);
        }
        lost.into_iter().collect()
    }

    fn for_each_waiting_handoff(&self, rank: usize, f: &mut dyn FnMut(RequestId)) {
        self.pending[rank].iter().copied().for_each(f);
    }

    fn fleet_grew(&mut self, ranks: usize) {
        self.pending.resize_with(ranks, VecDeque::new);
        self.landed.resize_with(ranks, Vec::new);
        self.releases.resize_with(ranks, Vec::new);
    }

    fn is_releasing(&self, id: RequestId) -> bool {
        self.flights.contains_key(&id)
    }

    fn check_drained(&self) -> Result<(), String> {
        match self.flights.len() {
            0 => Ok(()),
            n => Err(format!("{n} handoffs never ended")),
        }
    }
}

impl Disaggregated {
    /// The handoffs of a run of `config` (disaggregated) over a fleet of `ranks` ranks.
    pub fn new(config: &SimConfig, ranks: usize) -> Disaggregated {
        let prefill = config
            .pools
            .iter()
            .find(|p| p.engine.common.role == WorkerRole::Prefill);
        let transfer = prefill
            .map(|p| p.engine.common.kv_transfer)
            .unwrap_or_default();
        Disaggregated {
            transfer,
            block_size: config.block_size(),
            flights: Default::default(),
            pending: vec![VecDeque::new(); ranks],
            landed: vec![Vec::new(); ranks],
            releases: vec![Vec::new(); ranks],
        }
    }

    /// Request `id`'s prompt is computed and held on prefill rank `rank`: the prefill router
    /// hears its prefill is done, and the decode router picks its decode worker.
    fn hand_off(&mut self, fx: &mut dyn Effects, now: SimTime, rank: usize, id: RequestId) {
        let shared = fx.shared();
        shared.ledger.prefill_held(now, id);
        shared.routers.entry().first_token(now, id);
        fx.drain_router(now);
        let shared = fx.shared();
        let Some(f) = shared.ledger.in_flight(id) else {
            return;
        };
        let decode_router = shared.routers.decode().expect("a disaggregated run");
        decode_router.route(now, id, f);
        // The decode router never queues: one route, one decision.
        while let Some(decision) = (fx.shared().routers.decode()).and_then(|r| r.poll_decision()) {
            match decision {
                RouterDecision::Dispatch { id, rank: to, .. } => {
                    let shared = fx.shared();
                    let decode_rank = (shared.fleet.rank_index(to))
                        .expect("the router only dispatches to known ranks");
                    shared.ledger.decode_routed(id, to);
                    (shared.routers.for_role(WorkerRole::Decode)).dispatched(now, id);
                    let flight = Flight {
                        prefill_rank: rank,
                        decode_rank,
                    };
                    self.flights.insert(id, flight);
                    if shared.fleet.is_down(decode_rank) {
                        self.handed_to_down_rank(fx, now, id, decode_rank);
                        continue;
                    }
                    self.pending[decode_rank].push_back(id);
                    self.reservation_steps(fx, now, decode_rank, 1);
                }
                RouterDecision::Reject { id, error, .. } => {
                    fx.shared().fleet.release_held(rank, id);
                    fx.end(now, id, Status::Rejected(Rejection::router(error)));
                    fx.shared()
                        .routers
                        .entry()
                        .finished(now, id, Outcome::Aborted);
                    fx.drain_router(now);
                }
            }
        }
    }

    /// Decode rank `rank`, between passes, takes `steps` steps: each reserves room for its
    /// first pending handoff if that fits (in held order, never past one that does not). A
    /// rank takes a step at each pass end and each time it hears of a handoff between passes
    /// (one chosen for it, or a transfer landing; one that landed during a pass counts at the
    /// pass end), so a busy rank takes about one reservation per pass, as 1.6.1's does. A
    /// transfer of no time lands at once, which is another step. True if a handoff was left
    /// waiting for room (or the rank is in a pass).
    fn reservation_steps(
        &mut self,
        fx: &mut dyn Effects,
        now: SimTime,
        rank: usize,
        steps: usize,
    ) -> bool {
        fx.settle_rank(now, rank);
        let waits = fx.shared().fleet.in_pass(rank) || self.take_reservations(fx, now, rank, steps);
        // The rank's next pass starts after this (never in it): it knows what still waits.
        let pending = !self.pending[rank].is_empty();
        fx.shared().fleet.set_handoffs_pending(rank, pending);
        waits
    }

    /// The reservations of [`Disaggregated::reservation_steps`] on a rank between passes;
    /// true if the first pending handoff must wait for room.
    fn take_reservations(
        &mut self,
        fx: &mut dyn Effects,
        now: SimTime,
        rank: usize,
        mut steps: usize,
    ) -> bool {
        // Each iteration removes a pending handoff or stops: bounded by the pending handoffs.
        while steps > 0
            && let Some(&id) = self.pending[rank].front()
        {
            let shared = fx.shared();
            let Some(f) = shared.ledger.in_flight(id) else {
                // It ended meanwhile: it takes no step.
                self.pending[rank].pop_front();
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
            let cached = match shared.fleet.reserve_handoff(rank, request) {
                Ok(Reservation::Reserved { cached_blocks }) => cached_blocks,
                Ok(Reservation::Wait) => return true,
                Ok(Reservation::Never(reason)) => {
                    // Refused for good: the step passes to the next one.
                    self.pending[rank].pop_front();
                    self.fail_handoff(fx, now, id, reason);
                    continue;
                }
                Err(message) => {
                    fx.fail(now, message);
                    return true;
                }
            };
            steps -= 1;
            self.pending[rank].pop_front();
            let tokens = (self.transfer).tokens_moved(prompt_tokens, self.block_size, cached);
            let delay = self.transfer.delay(tokens);
            shared.ledger.transfer_started(now, id);
            if delay == SimDuration::ZERO {
                self.activate(fx, now, id);
                steps += 1;
            } else {
                let attempt = shared.ledger.attempt(id);
                let landing = Event::TransferDone {
                    request: id,
                    attempt,
                };
                fx.schedule(now.saturating_add(delay), landing);
            }
        }
        false
    }

    /// Request `id` becomes a waiting request of its decode rank with its prompt computed;
    /// its source lets go now, or at its prefill rank's pass end.
    fn activate(&mut self, fx: &mut dyn Effects, now: SimTime, id: RequestId) {
        let Some(flight) = self.flights.get(&id) else {
            return;
        };
        let (prefill_rank, decode_rank) = (flight.prefill_rank, flight.decode_rank);
        let shared = fx.shared();
        if !shared.fleet.activate_handoff(decode_rank, id) {
            let message = format!("request {id} landed where nothing was reserved");
            return fx.fail(now, message);
        }
        shared.ledger.transfer_ended(now, id);
        if shared.fleet.in_pass(prefill_rank) {
            self.releases[prefill_rank].push(id);
        } else {
            self.release_source(fx, now, id, prefill_rank);
        }
    }

    /// Request `id` can never be served on the decode rank chosen for it: it ends rejected
    /// at `now` for `reason`, and its source lets go at once (it is between its passes'
    /// effects at most: a held request is in no pass).
    fn fail_handoff(
        &mut self,
        fx: &mut dyn Effects,
        now: SimTime,
        id: RequestId,
        reason: RejectReason,
    ) {
        let Some(prefill_rank) = self.flights.get(&id).map(|f| f.prefill_rank) else {
            return;
        };
        fx.end(now, id, Status::Rejected(Rejection::Worker(reason)));
        let decode_router = fx.shared().routers.for_role(WorkerRole::Decode);
        decode_router.finished(now, id, Outcome::Aborted);
        self.release_source(fx, now, id, prefill_rank);
    }

    /// Prefill rank `rank` lets go of request `id`'s blocks at `now`; the prefill router
    /// frees it.
    fn release_source(&mut self, fx: &mut dyn Effects, now: SimTime, id: RequestId, rank: usize) {
        self.flights.remove(&id);
        let shared = fx.shared();
        if !shared.fleet.release_held(rank, id) {
            let message = format!("request {id} was not held on its prefill rank");
            return fx.fail(now, message);
        }
        shared.ledger.source_released(now, id);
        shared.routers.entry().finished(now, id, Outcome::Completed);
        fx.drain_router(now);
    }

    /// Request `id` was on a prefill worker that stopped at `now`: lost (true) unless its
    /// transfer had landed, in which case its source counts as released now. A lost
    /// handoff's destination lets go of it (its reservation, or its place in the queue).
    fn source_lost(&mut self, fx: &mut dyn Effects, now: SimTime, id: RequestId) -> bool {
        let Some(flight) = self.flights.remove(&id) else {
            return true; // still prefilling or queued there
        };
        let (prefill_rank, decode_rank) = (flight.prefill_rank, flight.decode_rank);
        self.releases[prefill_rank].retain(|&r| r != id);
        let shared = fx.shared();
        let landed = (shared.ledger.record(id).handoff()).is_some_and(|h| h.transfer_end.is_some());
        if landed {
            shared.ledger.source_released(now, id);
            shared.routers.entry().finished(now, id, Outcome::Completed);
            fx.drain_router(now);
            return false;
        }
        self.pending[decode_rank].retain(|&r| r != id);
        self.landed[decode_rank].retain(|&r| r != id);
        let decode_router = shared.routers.for_role(WorkerRole::Decode);
        decode_router.finished(now, id, Outcome::Aborted);
        shared.fleet.drop_request(decode_rank, id);
        let pending = !self.pending[decode_rank].is_empty();
        shared.fleet.set_handoffs_pending(decode_rank, pending);
        true
    }

    /// Request `id` lost its decode worker at `now`: if its source still holds its KV, that
    /// is released now and the prefill router frees it (a lost prefill worker's flights
    /// ended with it, so the source is up).
    fn destination_lost(&mut self, fx: &mut dyn Effects, now: SimTime, id: RequestId) {
        let Some(prefill_rank) = self.flights.get(&id).map(|f| f.prefill_rank) else {
            return; // its source was released already
        };
        self.releases[prefill_rank].retain(|&r| r != id);
        self.release_source(fx, now, id, prefill_rank);
    }

    /// The decode router chose for request `id` decode rank `decode_rank`, which is down and
    /// which it has not heard of yet: the handoff is lost with that worker, and its source
    /// lets go.
    fn handed_to_down_rank(
        &mut self,
        fx: &mut dyn Effects,
        now: SimTime,
        id: RequestId,
        decode_rank: usize,
    ) {
        self.destination_lost(fx, now, id);
        let worker = fx.shared().fleet.rank_id(decode_rank).worker_id;
        fx.lost_on(worker, id);
    }
}
