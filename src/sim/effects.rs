//! What a part of the system may do: the events the loop schedules, the collaborators every
//! part shares, and the effects a part asks the event loop for.
//!
//! A part (a serving mode, say) owns its own state and decides; the event loop
//! (`event_loop.rs`) owns the queue and applies what the part asks for. An effect is applied
//! at once, when asked, so a part's effects keep the order they had when the part was code
//! of the loop itself: that order is Dynamo 1.6.1's, and the run's records depend on it.

use super::fleet::WorkerFleet;
use super::ledger::{Ledger, TokenEdge};
use super::routers::Routers;
use super::status::Status;
use crate::scheduling::types::{KvEvent, RequestId};
use crate::time::SimTime;

/// Something that happens at an instant of a run; the event loop schedules and handles it.
pub(super) enum Event {
    /// A dispatched request reaches its worker (only with a router-to-worker delay);
    /// `attempt` is its migration count when sent.
    Deliver {
        rank: usize,
        request: RequestId,
        attempt: u32,
    },
    /// A worker's pass (or run of quiet passes) ends: its tokens and KV events leave the
    /// worker. Stale unless `epoch` is the rank's current one: the rank went down since (the
    /// pass is lost) or its quiet run was cut (its new end is scheduled).
    PassEnd { rank: usize, epoch: u64 },
    /// Tokens reach the router (only with a worker-to-router delay).
    Tokens {
        request: RequestId,
        attempt: u32,
        edge: TokenEdge,
    },
    /// A worker stops (fault).
    WorkerDown { worker: u64 },
    /// The router hears that a worker is gone.
    RouterLearnsDown { worker: u64 },
    /// A down worker returns with an empty cache (fault).
    WorkerBack { worker: u64 },
    /// A worker of pool `pool` is added (fault): it starts, ready after its pool's startup
    /// delay.
    WorkerJoin { pool: usize },
    /// A starting worker is ready (unless its start was cancelled since).
    WorkerReady { worker: u64 },
    /// A worker is scaled down (fault): it drains.
    WorkerDrain { worker: u64 },
    /// The router hears that a worker drains.
    RouterLearnsDraining { worker: u64 },
    /// The router hears of a worker that came up.
    RouterLearnsUp { worker: u64 },
    /// A client gives up on a request.
    Cancel { request: RequestId },
    /// A cancellation reaches the worker rank holding the request.
    Drop { rank: usize, request: RequestId },
    /// KV events reach the router's indexer (only with a lag).
    Kv(Vec<KvEvent>),
    /// The router's periodic recheck.
    Tick,
    /// A request's KV transfer to its decode worker lands (disaggregated serving), unless
    /// it was migrated since (a later `attempt`).
    TransferDone { request: RequestId, attempt: u32 },
}

/// The collaborators every part shares, borrowed together so that a part can hand one to
/// another (the fleet takes the ledger, for one).
pub(super) struct Shared<'a> {
    pub fleet: &'a mut WorkerFleet,
    pub ledger: &'a mut Ledger,
    pub routers: &'a mut Routers,
}

/// What a part asks the event loop for. Each call is applied before it returns.
pub(super) trait Effects {
    /// The fleet, the ledger and the routers.
    fn shared(&mut self) -> Shared<'_>;
    /// Act on every decision the entry router has made (dispatch or refuse).
    fn drain_router(&mut self, now: SimTime);
    /// Request `id` ends at `now` with `status`.
    fn end(&mut self, now: SimTime, id: RequestId, status: Status);
    /// The run has broken one of its invariants at `now` (a bug): it stops with `message`.
    fn fail(&mut self, now: SimTime, message: String);
    /// `event` happens at `at`.
    fn schedule(&mut self, at: SimTime, event: Event);
    /// Rank `rank` hears of something between its passes at `now`: a quiet run it is in ends
    /// after the pass in progress (or, over by now, is applied).
    fn settle_rank(&mut self, now: SimTime, rank: usize);
    /// Request `id` (in its current attempt) is lost on worker `worker`: it is migrated or
    /// aborted when the router hears the worker is down.
    fn lost_on(&mut self, worker: u64, id: RequestId);
}
