//! Faults in a run: workers that go down and return, workers that join, clients that give
//! up; and what the system does about each (abort or migrate, roll back, drop).
//!
//! Timing: a worker stops at its fault's instant, before anything else scheduled for that
//! instant runs there (a pass ending then is lost); the router hears of a loss or a new
//! worker after `worker_to_router`; a cancellation ends the request for the client at once,
//! the router rolls it back at once (the client and router share the frontend) and the
//! worker drops it after `router_to_worker`.

use super::fleet::worker_config;
use super::timeline;
use super::{AbortReason, CancelReason, Event, Fault, Status, System};
use crate::engine::EventQueue;
use crate::scheduling::types::RequestId;
use crate::time::{SimDuration, SimTime};
use rand::RngExt;
use std::sync::Arc;

/// A worker fault as it happened in a run (for plots: the completions-by-time chart marks
/// them).
#[derive(Clone, Debug, PartialEq)]
pub enum FaultMark {
    /// Worker `worker` stopped at `from` and returned at `until` (`None`: not while the run
    /// lasted).
    WorkerDown {
        worker: u64,
        /// How people call it: `worker 3`, or in disaggregated serving `decode worker 1`
        /// (numbered within its role).
        name: String,
        from: SimTime,
        until: Option<SimTime>,
    },
    /// Worker `worker` (called `name`) joined pool `pool` at `at`.
    WorkerUp {
        worker: u64,
        name: String,
        pool: String,
        at: SimTime,
    },
}

impl System {
    /// Schedules every worker fault's events (cancellations are drawn at arrival).
    pub(super) fn schedule_faults(&mut self, queue: &mut EventQueue<Event>) {
        for fault in &self.config.faults {
            match *fault {
                Fault::WorkerDown { worker, at, until } => {
                    queue.schedule(at, Event::WorkerDown { worker });
                    if let Some(until) = until {
                        queue.schedule(until, Event::WorkerBack { worker });
                    }
                }
                Fault::WorkerUp { pool, at } => queue.schedule(at, Event::WorkerJoin { pool }),
                Fault::Cancel { .. } => {}
            }
        }
    }

    /// Draws, for each cancel fault of the request's class, whether its client gives up, and
    /// schedules that. One draw per matching request and fault, in arrival order.
    pub(super) fn draw_cancel(
        &mut self,
        now: SimTime,
        id: RequestId,
        class: Option<&str>,
        queue: &mut EventQueue<Event>,
    ) {
        for (k, fault) in self.config.faults.iter().enumerate() {
            let Fault::Cancel {
                class: target,
                fraction,
                after,
            } = fault
            else {
                continue;
            };
            if class != Some(target.as_str()) {
                continue;
            }
            let draw: f64 = self.faults.cancel_rngs[k].random();
            if draw < *fraction {
                queue.schedule(now.saturating_add(*after), Event::Cancel { request: id });
            }
        }
    }

    /// Worker `worker` stops: the fleet loses what it held, which waits for the router to
    /// hear.
    pub(super) fn worker_down(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        let mut lost = self.fleet.worker_down(now, worker);
        if self.handoff.is_some() {
            lost = self.handoffs_lost_with(now, worker, lost, queue);
        }
        for id in lost {
            self.lost_on(worker, id);
        }
        let delay = self.config.delays.worker_to_router;
        if delay == SimDuration::ZERO {
            self.router_learns_down(now, worker, queue);
        } else {
            queue.schedule(
                now.saturating_add(delay),
                Event::RouterLearnsDown { worker },
            );
        }
    }

    /// A request reached a rank that is down: it is lost there. If the router already knows,
    /// its send fails now; otherwise it is resolved when the router hears.
    pub(super) fn deliver_to_down(
        &mut self,
        now: SimTime,
        rank: usize,
        id: RequestId,
        queue: &mut EventQueue<Event>,
    ) {
        let worker = self.fleet.rank_id(rank).worker_id;
        if self.faults.router_knows_down.contains(&worker) {
            self.routers.entry().delivery_failed(now, id);
            self.lose(now, id, worker, queue);
        } else {
            self.lost_on(worker, id);
        }
    }

    /// Request `id` (in its current attempt) is lost on `worker`: resolved when the router
    /// hears the worker is down.
    pub(super) fn lost_on(&mut self, worker: u64, id: RequestId) {
        let attempt = self.ledger.attempt(id);
        self.faults
            .lost
            .entry(worker)
            .or_default()
            .push((id, attempt));
    }

    /// The router hears worker `worker` is gone: the worker set shrinks (its bookings are
    /// released, queue entries pinned to it refused), and what it held is migrated or aborted.
    pub(super) fn router_learns_down(
        &mut self,
        now: SimTime,
        worker: u64,
        queue: &mut EventQueue<Event>,
    ) {
        self.faults.router_knows_down.insert(worker);
        self.router_of_worker(worker).worker_gone(now, worker);
        self.drain_router(now, queue);
        let lost = self.faults.lost.remove(&worker).unwrap_or_default();
        for (id, attempt) in lost {
            if self.ledger.attempt(id) == attempt {
                self.lose(now, id, worker, queue);
            }
        }
        self.schedule_tick(queue);
    }

    /// Request `id` lost its worker `worker`: re-routed if its migrations allow (keeping the
    /// tokens its client received: they join its prompt), aborted otherwise.
    fn lose(&mut self, now: SimTime, id: RequestId, worker: u64, queue: &mut EventQueue<Event>) {
        if !self.ledger.is_pending(id) {
            return;
        }
        let migrated = self.ledger.attempt(id) < self.config.migration_limit;
        if let Some(recorder) = self.timeline.as_mut() {
            let row = self.ledger.record(id).row;
            let mark = timeline::MigrationMark {
                at: now,
                worker,
                row,
                migrated,
            };
            recorder.migration(mark);
        }
        if !migrated {
            self.end(now, id, Status::Aborted(AbortReason::WorkerDown));
            return;
        }
        let block_size = self.config.block_size();
        self.ledger.migrate(id, |hashes, prompt_tokens| {
            migrated_hashes(hashes, id, prompt_tokens / block_size)
        });
        self.last_delivery.remove(&id);
        self.route(now, id, queue);
    }

    /// A down worker returns with empty ranks; the router hears after the delay.
    pub(super) fn worker_back(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        self.fleet.worker_back(now, worker);
        self.announce(now, worker, queue);
    }

    /// A new worker of pool `pool` joins with the next free id.
    pub(super) fn worker_join(&mut self, now: SimTime, pool: usize, queue: &mut EventQueue<Event>) {
        let worker = self.fleet.join(now, pool);
        let ranks = self.fleet.rank_count();
        if let Some(handoff) = &mut self.handoff {
            handoff.grow(ranks);
        }
        self.announce(now, worker, queue);
    }

    fn announce(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        let delay = self.config.delays.worker_to_router;
        if delay == SimDuration::ZERO {
            self.router_learns_up(now, worker, queue);
        } else {
            queue.schedule(now.saturating_add(delay), Event::RouterLearnsUp { worker });
        }
    }

    /// The router discovers worker `worker`: its queues drain onto it.
    pub(super) fn router_learns_up(
        &mut self,
        now: SimTime,
        worker: u64,
        queue: &mut EventQueue<Event>,
    ) {
        self.faults.router_knows_down.remove(&worker);
        let Some(pool) = self.fleet.pool_of(worker) else {
            return;
        };
        let config = worker_config(pool);
        self.router_of_worker(worker)
            .worker_joined(now, worker, config);
        self.drain_router(now, queue);
    }

    /// The client gives up on request `id` (if it has not ended): it ends now, the router
    /// rolls it back, and the worker holding it drops it after the transport delay.
    pub(super) fn cancel(&mut self, now: SimTime, id: RequestId, queue: &mut EventQueue<Event>) {
        let record = self.ledger.record(id);
        if record.status != Status::Pending {
            return;
        }
        let rank = record.rank().filter(|_| record.dispatched.is_some());
        self.end(now, id, Status::Cancelled(CancelReason::ClientCancel));
        self.routers.entry().cancel(now, id);
        self.drain_router(now, queue);
        let Some(rank) = rank.and_then(|r| self.fleet.rank_index(r)) else {
            return;
        };
        let delay = self.config.delays.router_to_worker;
        if delay == SimDuration::ZERO {
            self.drop_request(rank, id);
        } else {
            let event = Event::Drop { rank, request: id };
            queue.schedule(now.saturating_add(delay), event);
        }
    }

    /// A cancellation reaches a rank: it frees what the request holds there, if anything.
    pub(super) fn drop_request(&mut self, rank: usize, id: RequestId) {
        self.fleet.drop_request(rank, id);
    }
}

/// The prompt hashes of a migrated request whose prompt now has `blocks` full blocks: its
/// original prompt's, then hashes unique to the request for the blocks its generated tokens
/// fill (Dynamo's generated tokens are random, so nobody shares them).
fn migrated_hashes(hashes: &[u64], id: RequestId, blocks: u64) -> Arc<[u64]> {
    let kept = hashes.len().min(blocks as usize);
    let mut out: Vec<u64> = hashes[..kept].to_vec();
    let mut parent = out.last().copied();
    for index in kept as u64..blocks {
        let local = crate::scheduling::hashing::chain(Some(id.0 ^ 0x6d69_6772_0000_0000), index);
        let next = crate::scheduling::hashing::chain(parent, local);
        out.push(next);
        parent = Some(next);
    }
    out.into()
}
