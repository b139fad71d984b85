//! Faults in a run: workers that go down and return, workers that join or drain, clients
//! that give up. Here: the events that carry them out, the draws that decide cancellations, and what
//! the faults leave (which workers the router knows are down, what was lost on them); the
//! event loop applies each (abort or migrate, roll back, drop).
//!
//! Timing: a worker stops at its fault's instant, before anything else scheduled for that
//! instant runs there (a pass ending then is lost); the router hears of a loss or a new
//! worker after `worker_to_router`; a cancellation ends the request for the client at once,
//! the router rolls it back at once (the client and router share the frontend) and the
//! worker drops it after `router_to_worker`.

use super::effects::Event;
use super::{Fault, SimConfig};
use crate::rng::{self, SimRng};
use crate::scheduling::types::RequestId;
use crate::time::{SimDuration, SimTime};
use rand::RngExt;
use std::collections::{BTreeMap, BTreeSet};
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
    /// Worker `worker` (called `name`) of pool `pool`, asked for at `asked`, was ready at
    /// `at` (later by the pool's startup delay).
    WorkerUp {
        worker: u64,
        name: String,
        pool: String,
        asked: SimTime,
        at: SimTime,
    },
    /// Worker `worker` (called `name`) drained from `from`: it took no new request and left
    /// at `until`, having finished what it held (`None`: not while the run lasted).
    WorkerDrain {
        worker: u64,
        name: String,
        from: SimTime,
        until: Option<SimTime>,
    },
}

/// What the faults of a run have done so far: which workers the router knows are down, what
/// was lost on them, and the cancel faults' draw streams.
pub(super) struct Faults {
    /// Workers the router has heard are gone (and not back).
    router_knows_down: BTreeSet<u64>,
    /// Requests (with their attempt) lost on a worker before the router heard of it.
    lost: BTreeMap<u64, Vec<(RequestId, u32)>>,
    /// One draw stream per cancel fault, in fault order.
    cancel_rngs: Vec<SimRng>,
}

impl Faults {
    /// The fault state at the start of a run of `config`.
    pub fn new(config: &SimConfig) -> Faults {
        Faults {
            router_knows_down: BTreeSet::new(),
            lost: BTreeMap::new(),
            cancel_rngs: (0..config.faults.len())
                .map(|k| rng::stream(config.seed, &format!("faults/cancel/{k}")))
                .collect(),
        }
    }

    /// Draws, for each cancel fault of class `class`, whether a request arriving now is given
    /// up on, and calls `cancel_after` with the delay of each that is. One draw per matching
    /// request and fault, in arrival order.
    pub fn draw_cancels(
        &mut self,
        faults: &[Fault],
        class: Option<&str>,
        mut cancel_after: impl FnMut(SimDuration),
    ) {
        for (k, fault) in faults.iter().enumerate() {
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
            let draw: f64 = self.cancel_rngs[k].random();
            if draw < *fraction {
                cancel_after(*after);
            }
        }
    }

    /// Whether the router has heard that worker `worker` is gone.
    pub fn router_knows_down(&self, worker: u64) -> bool {
        self.router_knows_down.contains(&worker)
    }

    /// Request `id`, in attempt `attempt`, is lost on worker `worker`, which the router has
    /// not heard of yet.
    pub fn lost_on(&mut self, worker: u64, id: RequestId, attempt: u32) {
        self.lost.entry(worker).or_default().push((id, attempt));
    }

    /// The router hears worker `worker` is gone.
    pub fn router_learns_down(&mut self, worker: u64) {
        self.router_knows_down.insert(worker);
    }

    /// What was lost on worker `worker` (with the attempts it was lost in), now that the
    /// router has heard.
    pub fn take_lost(&mut self, worker: u64) -> Vec<(RequestId, u32)> {
        self.lost.remove(&worker).unwrap_or_default()
    }

    /// The router hears of worker `worker`, up (again).
    pub fn router_learns_up(&mut self, worker: u64) {
        self.router_knows_down.remove(&worker);
    }
}

/// The events that carry out the worker faults of `faults` (cancellations are drawn at
/// arrival), in fault order.
pub(super) fn worker_fault_events(faults: &[Fault]) -> impl Iterator<Item = (SimTime, Event)> {
    faults.iter().flat_map(|fault| {
        let (first, second) = match *fault {
            Fault::WorkerDown { worker, at, until } => (
                Some((at, Event::WorkerDown { worker })),
                until.map(|until| (until, Event::WorkerBack { worker })),
            ),
            Fault::WorkerUp { pool, at } => (Some((at, Event::WorkerJoin { pool })), None),
            Fault::WorkerDrain { worker, at } => (Some((at, Event::WorkerDrain { worker })), None),
            Fault::Cancel { .. } => (None, None),
        };
        first.into_iter().chain(second)
    })
}

/// The prompt hashes of a migrated request whose prompt now has `blocks` full blocks: its
/// original prompt's, then hashes unique to the request for the blocks its generated tokens
/// fill (Dynamo's generated tokens are random, so nobody shares them).
pub(super) fn migrated_hashes(hashes: &[u64], id: RequestId, blocks: u64) -> Arc<[u64]> {
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
