//! What losing a worker does to the handoffs through it in disaggregated serving.
//!
//! A lost **prefill** worker loses the requests it was prefilling and every handoff whose
//! transfer had not landed: the KV's source is gone, so the decode worker's reservation (or
//! its place in the queue for one) is dropped. A handoff that had landed keeps going: its
//! decode worker holds the whole prompt, only its source's release is moot.
//!
//! A lost **decode** worker loses what it ran or queued, the handoffs reserved on it or
//! waiting for it, and each of those handoffs' source is released at once (nothing will read
//! it). Every lost request is then migrated or aborted when the router of its worker's role
//! hears of the loss, as in aggregated serving: migrated, it starts over at the prefill router
//! with the tokens its client received joining its prompt.

use super::driver::RouterDriver;
use super::{Event, System};
use crate::engine::EventQueue;
use crate::mocker::WorkerRole;
use crate::scheduling::scheduler::Outcome;
use crate::scheduling::types::RequestId;
use crate::time::SimTime;
use std::collections::BTreeSet;

impl System {
    /// Worker `worker` of a disaggregated run stopped at `now`; `held` is what its ranks
    /// held (see [`Fleet::worker_down`](fleet::Fleet::worker_down)). Returns the requests lost
    /// with it, in id order.
    pub(super) fn handoffs_lost_with(
        &mut self,
        now: SimTime,
        worker: u64,
        held: Vec<RequestId>,
        queue: &mut EventQueue<Event>,
    ) -> Vec<RequestId> {
        let ranks = self.fleet.ranks_of(worker);
        let Some(first) = ranks.clone().next() else {
            return held;
        };
        match self.fleet.role(first) {
            WorkerRole::Prefill => held
                .into_iter()
                .filter(|&id| self.source_lost(now, id, queue))
                .collect(),
            _ => {
                let mut lost: BTreeSet<RequestId> = held.into_iter().collect();
                for rank in ranks {
                    let handoff = self.handoff();
                    lost.extend(handoff.pending[rank].drain(..));
                    handoff.landed[rank].clear();
                    self.fleet.set_handoffs_pending(rank, false);
                }
                for &id in &lost {
                    self.destination_lost(now, id, queue);
                }
                lost.into_iter().collect()
            }
        }
    }

    /// Request `id` was on a prefill worker that stopped at `now`: lost (true) unless its
    /// transfer had landed, in which case its source counts as released now. A lost
    /// handoff's destination lets go of it (its reservation, or its place in the queue).
    fn source_lost(&mut self, now: SimTime, id: RequestId, queue: &mut EventQueue<Event>) -> bool {
        let Some(flight) = self.handoff().flights.remove(&id) else {
            return true; // still prefilling or queued there
        };
        let (prefill_rank, decode_rank) = (flight.prefill_rank, flight.decode_rank);
        self.handoff().releases[prefill_rank].retain(|&r| r != id);
        let landed = self
            .ledger
            .record(id)
            .handoff()
            .is_some_and(|h| h.transfer_end.is_some());
        if landed {
            self.ledger.source_released(now, id);
            self.routers.entry().finished(now, id, Outcome::Completed);
            self.drain_router(now, queue);
            return false;
        }
        let handoff = self.handoff();
        handoff.pending[decode_rank].retain(|&r| r != id);
        handoff.landed[decode_rank].retain(|&r| r != id);
        self.routers
            .for_role(WorkerRole::Decode)
            .finished(now, id, Outcome::Aborted);
        self.fleet.drop_request(decode_rank, id);
        let pending = !self.handoff().pending[decode_rank].is_empty();
        self.fleet.set_handoffs_pending(decode_rank, pending);
        true
    }

    /// Request `id` lost its decode worker at `now`: if its source still holds its KV, that
    /// is released now and the prefill router frees it (a lost prefill worker's flights
    /// ended with it, so the source is up).
    fn destination_lost(&mut self, now: SimTime, id: RequestId, queue: &mut EventQueue<Event>) {
        let Some(prefill_rank) = self.handoff().flights.get(&id).map(|f| f.prefill_rank) else {
            return; // its source was released already
        };
        self.handoff().releases[prefill_rank].retain(|&r| r != id);
        self.release_source(now, id, prefill_rank, queue);
    }

    /// The decode router chose for request `id` decode rank `decode_rank`, which is down and
    /// which it has not heard of yet: the handoff is lost with that worker, and its source
    /// lets go.
    pub(super) fn handed_to_down_rank(
        &mut self,
        now: SimTime,
        id: RequestId,
        decode_rank: usize,
        queue: &mut EventQueue<Event>,
    ) {
        self.destination_lost(now, id, queue);
        let worker = self.fleet.rank_id(decode_rank).worker_id;
        self.lost_on(worker, id);
    }

    /// The router that hears of worker `worker`: the decode router for a decode worker, else
    /// the one requests arrive at.
    pub(super) fn router_of_worker(&mut self, worker: u64) -> &mut RouterDriver {
        let role =
            (self.fleet.pool_of(worker)).map_or(WorkerRole::Aggregated, |p| p.engine.common.role);
        self.routers.for_role(role)
    }
}
