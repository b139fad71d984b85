//! The worker set as the router discovers it: workers joining and leaving, a worker draining
//! (scaled down: nothing new placed on it, its bookings kept until it finishes) and then
//! forgotten, and requests refused when no worker could ever serve them.

use super::{AdmissionStatus, Queued, Scheduler, SchedulerError};
use crate::scheduling::select::WorkerSet;
use crate::scheduling::types::{RequestId, WorkerWithDpRank};
use crate::time::SimTime;
use std::collections::BTreeSet;

impl Scheduler {
    /// The set of workers changed (discovery): new ranks appear, departed ones leave, and the
    /// queues are re-examined.
    ///
    /// Requests booked on a departed rank are over: their bookings are released and their
    /// policies hear `Aborted` (a later `handle_finished` for them is ignored). Requests
    /// waiting in the lane of a departed rank are refused with
    /// [`SchedulerError::PinnedWorkerGone`]. A draining worker is not in the set, and is
    /// not departed: it leaves by [`handle_worker_drained`](Self::handle_worker_drained).
    pub fn handle_workers(&mut self, now: SimTime, workers: WorkerSet) {
        let before: BTreeSet<_> = self.workers.ranks().collect();
        let after: BTreeSet<_> = workers.ranks().collect();
        self.workers = workers;
        self.kept.forget_workers();
        // A draining worker is out of the set but keeps its bookings until it leaves.
        let draining = &self.draining;
        let departed =
            |rank: &WorkerWithDpRank| !after.contains(rank) && !draining.contains(&rank.worker_id);
        let mut stranded: Vec<RequestId> = (self.active.iter())
            .filter(|(_, a)| departed(&a.rank))
            .map(|(id, _)| *id)
            .collect();
        stranded.sort_unstable();
        for id in stranded {
            self.release_active(now, id, AdmissionStatus::Aborted);
        }
        self.refuse_pinned_to_departed(now, &after);
        for gone in before.difference(&after) {
            if !after.iter().any(|r| r.worker_id == gone.worker_id) {
                self.forget_worker(gone.worker_id);
            }
        }
        for new in after.difference(&before) {
            self.load.add_rank(*new);
        }
        self.update(now, None);
        self.after_input(now);
    }

    /// Worker `worker` drains (it is being scaled down): nothing new is placed on it from
    /// now, and requests waiting in the lane of one of its ranks are refused with
    /// [`SchedulerError::PinnedWorkerGone`]. What is booked on it stays booked, its load and
    /// cached blocks still counted, until it finishes and
    /// [`handle_worker_drained`](Self::handle_worker_drained) says it left. Unknown or
    /// already draining workers are ignored.
    pub fn handle_worker_draining(&mut self, now: SimTime, worker: u64) {
        if self.workers.remove(worker).is_none() {
            return;
        }
        self.draining.insert(worker);
        self.kept.forget_workers();
        let open: BTreeSet<_> = self.workers.ranks().collect();
        self.refuse_pinned_to_departed(now, &open);
        self.update(now, None);
        self.after_input(now);
    }

    /// Draining worker `worker` left: whatever is still booked on it is over (its policies
    /// hear `Aborted`), and its load rows and cached blocks are forgotten. Workers not
    /// draining are ignored.
    pub fn handle_worker_drained(&mut self, now: SimTime, worker: u64) {
        if !self.draining.remove(&worker) {
            return;
        }
        let mut stranded: Vec<RequestId> = (self.active.iter())
            .filter(|(_, a)| a.rank.worker_id == worker)
            .map(|(id, _)| *id)
            .collect();
        stranded.sort_unstable();
        for id in stranded {
            self.release_active(now, id, AdmissionStatus::Aborted);
        }
        self.forget_worker(worker);
        self.kept.forget_workers();
        self.update(now, None);
        self.after_input(now);
    }

    /// Whether worker `worker` is draining and nothing is booked on it any more.
    pub fn is_drained(&self, worker: u64) -> bool {
        self.draining.contains(&worker) && !self.active.values().any(|a| a.rank.worker_id == worker)
    }

    /// Forgets a worker that left: its load rows and its blocks in the index.
    fn forget_worker(&mut self, worker: u64) {
        self.load.remove_worker(worker);
        self.indexer.remove_worker(worker);
    }

    /// No worker will join any more (the caller has nothing else to happen): requests
    /// waiting on an empty worker set could never be served, and are refused with
    /// [`SchedulerError::NoEndpoints`], in queue order. Returns whether any was; nothing
    /// happens while the set has a worker.
    pub fn handle_no_more_workers(&mut self, now: SimTime) -> bool {
        if self.workers.worker_count() > 0 || self.queue.pending_count() == 0 {
            return false;
        }
        for entry in self.queue.take_if(|_| true) {
            self.refuse_taken(now, entry, SchedulerError::NoEndpoints);
        }
        self.after_input(now);
        true
    }

    /// Refuses every queue entry pinned to a rank that is not in `ranks` (its worker left):
    /// it could never be served.
    fn refuse_pinned_to_departed(&mut self, now: SimTime, ranks: &BTreeSet<WorkerWithDpRank>) {
        let gone = |q: &Queued| {
            q.request
                .constraints
                .pinned
                .is_some_and(|pin| !ranks.contains(&pin))
        };
        for entry in self.queue.take_if(gone) {
            let pin = entry.payload.request.constraints.pinned;
            let rank = pin.expect("taken because it is pinned");
            self.refuse_taken(now, entry, SchedulerError::PinnedWorkerGone(rank));
        }
    }
}
