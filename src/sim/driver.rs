//! The router driver: everything that drives the scheduling core for a request (its arrival,
//! the selection, the notice that the worker accepted it, its first token, its finish, a
//! cancellation or a failed delivery, the periodic recheck, KV events, and the worker set
//! changing under it), and the one place outside the core that calls the core's inputs.
//!
//! It knows nothing of events, transport or workers: a caller hands it inputs at `now` and
//! then acts on every [`RouterDecision`] it polls, so a driver of another kind (a
//! disaggregated one with a second router, one in wall-clock time) reuses it as it is.

use super::RouterMode;
use super::ledger::InFlight;
use crate::scheduling::round_robin::RoundRobin;
use crate::scheduling::scheduler::{
    Decision, DispatchPath, Outcome, Scheduler, SchedulerConfig, SchedulerError, SchedulingRequest,
};
use crate::scheduling::select::{RequestConstraints, WorkerConfig, WorkerSet};
use crate::scheduling::types::{KvEvent, RequestId, WorkerWithDpRank};
use crate::time::SimTime;
use std::collections::VecDeque;

/// Every KV event the router applied, with when (kept only when asked: for tests).
pub(super) type KvLog = Vec<(SimTime, KvEvent)>;

/// What the router decided about a request: the caller acts on each, in order.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum RouterDecision {
    /// Send request `id` to `rank`, the way `path` says (`class_index`: its policy class,
    /// `None` under round robin, which has none).
    Dispatch {
        id: RequestId,
        rank: WorkerWithDpRank,
        path: DispatchPath,
        class_index: Option<usize>,
        /// The prompt blocks the router saw cached on `rank` (`None`: round robin, which
        /// looks at no cache).
        overlap_blocks: Option<u32>,
    },
    /// Request `id` is refused for good, for `error`.
    Reject {
        id: RequestId,
        class_index: Option<usize>,
        error: SchedulerError,
    },
}

/// A router: the scheduling core, or round robin over the workers the core knows of.
pub(super) struct RouterDriver {
    mode: RouterMode,
    core: Scheduler,
    round_robin: RoundRobin,
    /// Round robin's decisions, polled before the core's.
    decisions: VecDeque<RouterDecision>,
    /// A periodic recheck is scheduled and has not run yet (see [`RouterDriver::tick_due`]).
    tick_scheduled: bool,
    /// Every KV event the router applied, with when (kept only when asked: for tests).
    kv_log: Option<KvLog>,
}

impl RouterDriver {
    /// A router in `mode` over `workers`, whose caches hold up to `cached_blocks` blocks in
    /// all (room made up front).
    pub fn new(
        mode: RouterMode,
        config: SchedulerConfig,
        workers: WorkerSet,
        cached_blocks: usize,
        log_kv: bool,
    ) -> RouterDriver {
        let mut core = Scheduler::new(config, workers, SimTime::ZERO);
        core.reserve_cached_blocks(cached_blocks);
        RouterDriver {
            mode,
            core,
            round_robin: RoundRobin::default(),
            decisions: VecDeque::new(),
            tick_scheduled: false,
            kv_log: log_kv.then(Vec::new),
        }
    }

    /// The core (read only: its state, for checks and results).
    pub fn core(&self) -> &Scheduler {
        &self.core
    }

    /// Request `id` (in flight as `f`) reaches the router, first or again after a migration.
    pub fn route(&mut self, now: SimTime, id: RequestId, f: &InFlight) {
        match self.mode {
            RouterMode::KvRouter => {
                let request = SchedulingRequest {
                    id,
                    policy_class: f.policy_class.clone(),
                    isl_tokens: f.prompt_tokens,
                    block_hashes: f.hashes.clone(),
                    priority: f.priority,
                    strict_priority: f.strict_priority,
                    constraints: RequestConstraints {
                        pinned: f.pinned,
                        ..RequestConstraints::default()
                    },
                };
                self.core.handle_arrival(now, request);
            }
            RouterMode::RoundRobin => {
                let decision = match self.round_robin.select(self.core.workers()) {
                    Some(rank) => RouterDecision::Dispatch {
                        id,
                        rank,
                        path: DispatchPath::Immediate,
                        class_index: None,
                        overlap_blocks: None,
                    },
                    None => RouterDecision::Reject {
                        id,
                        class_index: None,
                        // Round robin with no worker known: the core's reason for the same.
                        error: SchedulerError::NoEndpoints,
                    },
                };
                self.decisions.push_back(decision);
            }
        }
    }

    /// The next decision to act on.
    pub fn poll_decision(&mut self) -> Option<RouterDecision> {
        if let Some(decision) = self.decisions.pop_front() {
            return Some(decision);
        }
        Some(match self.core.poll_decision()? {
            Decision::Dispatch(d) => RouterDecision::Dispatch {
                id: d.id,
                rank: d.rank,
                path: d.path,
                class_index: Some(d.class_index),
                overlap_blocks: Some(d.overlap_blocks),
            },
            Decision::Reject {
                id,
                class_index,
                error,
            } => RouterDecision::Reject {
                id,
                class_index,
                error,
            },
        })
    }

    /// The worker accepted request `id`: only now is it dispatched (Dynamo's RequestGuard
    /// reports it after the backend accepts).
    pub fn dispatched(&mut self, now: SimTime, id: RequestId) {
        if self.mode == RouterMode::KvRouter {
            self.core.handle_dispatched(now, id);
        }
    }

    /// Sending request `id` failed: its worker is gone.
    pub fn delivery_failed(&mut self, now: SimTime, id: RequestId) {
        if self.mode == RouterMode::KvRouter {
            self.core.handle_delivery_failed(now, id);
        }
    }

    /// Request `id`'s first token reached the router.
    pub fn first_token(&mut self, now: SimTime, id: RequestId) {
        self.core.handle_first_token(now, id);
    }

    /// Request `id`'s stream ended (`outcome`).
    pub fn finished(&mut self, now: SimTime, id: RequestId, outcome: Outcome) {
        self.core.handle_finished(now, id, outcome);
    }

    /// The client gave up on request `id`.
    pub fn cancel(&mut self, now: SimTime, id: RequestId) {
        if self.mode == RouterMode::KvRouter {
            self.core.handle_cancel(now, id);
        }
    }

    /// A worker's KV event reaches the router's index.
    pub fn kv_event(&mut self, now: SimTime, event: &KvEvent) {
        self.core.handle_kv_event(now, event);
        if let Some(log) = &mut self.kv_log {
            log.push((now, event.clone()));
        }
    }

    /// The router heard worker `worker` is gone.
    pub fn worker_gone(&mut self, now: SimTime, worker: u64) {
        let mut set = self.core.workers().clone();
        set.remove(worker);
        self.core.handle_workers(now, set);
    }

    /// The router heard worker `worker` drains: nothing new goes to it.
    pub fn worker_draining(&mut self, now: SimTime, worker: u64) {
        self.core.handle_worker_draining(now, worker);
    }

    /// Whether worker `worker` drains and nothing is booked on it any more.
    pub fn is_drained(&self, worker: u64) -> bool {
        self.core.is_drained(worker)
    }

    /// Drained worker `worker` left.
    pub fn worker_drained(&mut self, now: SimTime, worker: u64) {
        self.core.handle_worker_drained(now, worker);
    }

    /// The router discovered worker `worker`, configured as `config`.
    pub fn worker_joined(&mut self, now: SimTime, worker: u64, config: WorkerConfig) {
        let mut set = self.core.workers().clone();
        set.insert(worker, config);
        self.core.handle_workers(now, set);
    }

    /// Nothing else will happen in the run at `now`: requests waiting for a worker while
    /// there is none are refused. Returns whether any was.
    pub fn no_more_workers(&mut self, now: SimTime) -> bool {
        self.core.handle_no_more_workers(now)
    }

    /// The periodic recheck scheduled by [`RouterDriver::tick_due`] is due at `now`.
    pub fn tick(&mut self, now: SimTime) {
        self.tick_scheduled = false;
        self.core.handle_tick(now);
    }

    /// When the next periodic recheck must run, if one must be scheduled now: when the core
    /// needs one ([`Scheduler::poll_timeout`]) and none is scheduled. A scheduled recheck is
    /// never taken back: it runs even if the queues emptied meanwhile.
    pub fn tick_due(&mut self) -> Option<SimTime> {
        if self.tick_scheduled {
            return None;
        }
        let at = self.core.poll_timeout()?;
        self.tick_scheduled = true;
        Some(at)
    }

    /// What the router holds of request `id`, if anything (for the conservation checker).
    pub fn holds(&self, id: RequestId) -> Option<String> {
        self.core
            .request_state(id)
            .map(|state| format!("{state:?}"))
    }

    /// At the end of a drained run: Err unless the router holds nothing.
    pub fn check_drained(&self) -> Result<(), String> {
        let (active, pending) = (self.core.active_count(), self.core.pending_count());
        match active + pending {
            0 => Ok(()),
            _ => Err(format!(
                "the router still holds {active} bookings and {pending} queued requests"
            )),
        }
    }

    /// The KV events the router applied, if it was asked to keep them.
    pub fn take_kv_log(&mut self) -> KvLog {
        self.kv_log.take().unwrap_or_default()
    }
}
