//! One policy class's queue: the shared heap, exact-worker lanes and the blocked-lane index.
//!
//! A [`PolicyClassQueue`] holds the *ready* entries of one class (deferred entries and the DRR
//! deficit live in the outer `PolicyQueue`). Requests that may run on any worker wait in one
//! shared max-heap; requests pinned to one worker rank wait in that rank's own lane (also a
//! max-heap). Head-of-line blocking is lane-local: a blocked shared head never hides a lane,
//! and a blocked lane never hides another lane or the shared head.
//!
//! Lane heads that may dispatch are indexed in an ordered set, so the best lane is found in
//! `O(log L)`. A lane whose head was found not dispatchable leaves that index and is remembered
//! as blocked; it is not asked again until the caller reports that its worker's state changed
//! ([`PolicyClassQueue::recheck_worker`] / [`PolicyClassQueue::recheck_all_workers`]). So each
//! blocked lane costs one predicate call per capacity update, not one per arbitration.

use crate::scheduling::request::{PriorityKey, QueueSnapshot};
use crate::scheduling::types::WorkerWithDpRank;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// Where a queued request may run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    /// Any eligible worker: the request waits in the class's shared heap.
    Any,
    /// Only this worker rank (a pinned request): the request waits in that rank's lane.
    Exact(WorkerWithDpRank),
}

/// One queued request: the caller's payload plus everything the queue decides with.
#[derive(Clone, Debug)]
pub struct QueueEntry<T> {
    /// The caller's request (opaque to the queue).
    pub payload: T,
    /// Index of the policy class the entry belongs to (never changes while queued).
    pub class_index: usize,
    /// In-class ordering key (strict tier, score, enqueue seq).
    pub key: PriorityKey,
    /// Token accounting fixed at enqueue time.
    pub snapshot: QueueSnapshot,
    /// Shared heap or one worker's lane.
    pub placement: Placement,
}

/// Heap item ordered by the entry's key alone (the payload takes no part in ordering).
#[derive(Debug)]
struct Ranked<T>(QueueEntry<T>);

impl<T> Ord for Ranked<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.key.cmp(&other.0.key)
    }
}

impl<T> PartialOrd for Ranked<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> PartialEq for Ranked<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T> Eq for Ranked<T> {}

type Heap<T> = BinaryHeap<Ranked<T>>;

/// The ready entries of one policy class, with lane-local head-of-line blocking.
///
/// Typical use (by the DRR arbiter): [`next_dispatchable`](Self::next_dispatchable) names the
/// class's best runnable candidate, then [`pop`](Self::pop) removes it by its placement.
#[derive(Debug)]
pub struct PolicyClassQueue<T> {
    shared: Heap<T>,
    /// Lanes are keyed in a BTreeMap so that every walk over them is deterministic.
    lanes: BTreeMap<WorkerWithDpRank, Heap<T>>,
    /// Lanes whose head was found not dispatchable and that were not rechecked since.
    blocked_workers: BTreeSet<WorkerWithDpRank>,
    /// One `(head key, worker)` per non-empty unblocked lane; the last element is the best.
    candidate_heads: BTreeSet<(PriorityKey, WorkerWithDpRank)>,
    ready_len: usize,
}

impl<T> Default for PolicyClassQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PolicyClassQueue<T> {
    /// An empty class queue.
    pub fn new() -> Self {
        PolicyClassQueue {
            shared: BinaryHeap::new(),
            lanes: BTreeMap::new(),
            blocked_workers: BTreeSet::new(),
            candidate_heads: BTreeSet::new(),
            ready_len: 0,
        }
    }

    /// Number of ready entries (shared heap plus every lane).
    pub fn len(&self) -> usize {
        self.ready_len
    }

    /// True when no entry is ready (the shared heap is empty and no lane exists).
    pub fn is_empty(&self) -> bool {
        self.ready_len == 0
    }

    /// Number of non-empty exact-worker lanes.
    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }

    /// Number of lanes currently remembered as blocked.
    pub fn blocked_lane_count(&self) -> usize {
        self.blocked_workers.len()
    }

    /// True if `worker`'s lane is remembered as blocked (found not dispatchable, not rechecked).
    pub fn is_blocked(&self, worker: WorkerWithDpRank) -> bool {
        self.blocked_workers.contains(&worker)
    }

    /// Every ready entry, shared heap first, then lanes by worker; order within a heap is
    /// unspecified. For accounting and inspection, not for dispatch order.
    pub fn entries(&self) -> impl Iterator<Item = &QueueEntry<T>> {
        let lane_entries = self.lanes.values().flat_map(|lane| lane.iter());
        self.shared
            .iter()
            .chain(lane_entries)
            .map(|ranked| &ranked.0)
    }

    /// Adds a ready entry to the shared heap or to its worker's lane (created if absent).
    ///
    /// A blocked lane stays blocked: a new arrival does not make the worker any freer.
    pub fn push(&mut self, entry: QueueEntry<T>) {
        self.ready_len += 1;
        let worker = match entry.placement {
            Placement::Any => {
                self.shared.push(Ranked(entry));
                return;
            }
            Placement::Exact(worker) => worker,
        };
        let lane = self.lanes.entry(worker).or_default();
        let old_head = lane.peek().map(|top| top.0.key);
        lane.push(Ranked(entry));
        if self.blocked_workers.contains(&worker) {
            return;
        }
        let new_head = lane.peek().map(|top| top.0.key);
        if new_head != old_head {
            if let Some(old_key) = old_head {
                self.candidate_heads.remove(&(old_key, worker));
            }
            if let Some(new_key) = new_head {
                self.candidate_heads.insert((new_key, worker));
            }
        }
    }

    /// The class's best dispatchable candidate: its placement and `cost_tokens`.
    ///
    /// Asks `is_dispatchable` about the shared head once, then about lane heads from the
    /// highest down: a lane whose head is not dispatchable is marked blocked and skipped until
    /// rechecked. Returns the shared head if it is dispatchable and ranks above the best
    /// dispatchable lane head, else that lane head; `None` if nothing can dispatch.
    pub fn next_dispatchable(
        &mut self,
        is_dispatchable: &mut dyn FnMut(&QueueEntry<T>) -> bool,
    ) -> Option<(Placement, u64)> {
        let shared_candidate = match self.shared.peek() {
            Some(top) if is_dispatchable(&top.0) => Some((top.0.key, top.0.snapshot.cost_tokens)),
            _ => None,
        };
        // Bounded: every pass either returns or removes one candidate head.
        while let Some(&(lane_key, worker)) = self.candidate_heads.last() {
            let lane_top = self.lanes.get(&worker).and_then(|lane| lane.peek());
            let Some(lane_top) = lane_top else {
                debug_assert!(false, "candidate head for missing lane {worker}");
                self.candidate_heads.pop_last();
                continue;
            };
            let lane_cost = lane_top.0.snapshot.cost_tokens;
            if !is_dispatchable(&lane_top.0) {
                self.candidate_heads.pop_last();
                self.blocked_workers.insert(worker);
                continue;
            }
            return match shared_candidate {
                Some((shared_key, shared_cost)) if shared_key > lane_key => {
                    Some((Placement::Any, shared_cost))
                }
                _ => Some((Placement::Exact(worker), lane_cost)),
            };
        }
        shared_candidate.map(|(_, cost)| (Placement::Any, cost))
    }

    /// Removes and returns the head of the shared heap or of `worker`'s lane; `None` if that
    /// heap is empty. An emptied lane is deleted (and forgotten as blocked).
    pub fn pop(&mut self, placement: Placement) -> Option<QueueEntry<T>> {
        let popped = match placement {
            Placement::Any => self.shared.pop()?.0,
            Placement::Exact(worker) => self.pop_lane(worker)?,
        };
        self.ready_len -= 1;
        Some(popped)
    }

    fn pop_lane(&mut self, worker: WorkerWithDpRank) -> Option<QueueEntry<T>> {
        let lane = self.lanes.get_mut(&worker)?;
        let popped = lane.pop()?.0;
        self.candidate_heads.remove(&(popped.key, worker));
        match lane.peek() {
            Some(next) if !self.blocked_workers.contains(&worker) => {
                self.candidate_heads.insert((next.0.key, worker));
            }
            Some(_) => {}
            None => {
                self.lanes.remove(&worker);
                self.blocked_workers.remove(&worker);
            }
        }
        Some(popped)
    }

    /// `worker`'s state changed: if its lane was blocked, offer its head again.
    pub fn recheck_worker(&mut self, worker: WorkerWithDpRank) {
        if !self.blocked_workers.remove(&worker) {
            return;
        }
        if let Some(top) = self.lanes.get(&worker).and_then(|lane| lane.peek()) {
            self.candidate_heads.insert((top.0.key, worker));
        }
    }

    /// Every worker's state may have changed: offer every blocked lane's head again.
    pub fn recheck_all_workers(&mut self) {
        let blocked = std::mem::take(&mut self.blocked_workers);
        for worker in blocked {
            if let Some(top) = self.lanes.get(&worker).and_then(|lane| lane.peek()) {
                self.candidate_heads.insert((top.0.key, worker));
            }
        }
    }

    /// Removes every ready entry whose payload matches `pred` and returns them in enqueue
    /// order (ascending `key.seq`). Lanes that empty are deleted; lanes that were blocked and
    /// keep entries stay blocked until rechecked.
    pub fn take_if(&mut self, pred: &mut dyn FnMut(&T) -> bool) -> Vec<QueueEntry<T>> {
        let mut removed = Vec::new();
        self.shared = split_heap(std::mem::take(&mut self.shared), pred, &mut removed);
        let lanes = std::mem::take(&mut self.lanes);
        for (worker, lane) in lanes {
            let kept = split_heap(lane, pred, &mut removed);
            if !kept.is_empty() {
                self.lanes.insert(worker, kept);
            }
        }
        let lanes = &self.lanes;
        self.blocked_workers
            .retain(|worker| lanes.contains_key(worker));
        self.rebuild_candidate_heads();
        self.ready_len -= removed.len();
        removed.sort_by_key(|entry| entry.key.seq);
        removed
    }

    fn rebuild_candidate_heads(&mut self) {
        self.candidate_heads.clear();
        for (worker, lane) in &self.lanes {
            if self.blocked_workers.contains(worker) {
                continue;
            }
            if let Some(top) = lane.peek() {
                self.candidate_heads.insert((top.0.key, *worker));
            }
        }
    }

    /// Checks the storage invariants: the ready count matches the heaps, no lane is empty,
    /// every entry sits where its placement says, blocked lanes exist, and every unblocked lane
    /// (and no blocked one) has exactly one candidate head equal to its top.
    pub fn check_invariants(&self) -> Result<(), String> {
        let lane_total: usize = self.lanes.values().map(BinaryHeap::len).sum();
        if self.ready_len != self.shared.len() + lane_total {
            return Err(format!(
                "ready_len {} != shared {} + lanes {lane_total}",
                self.ready_len,
                self.shared.len()
            ));
        }
        if let Some(misplaced) = self.shared.iter().find(|r| r.0.placement != Placement::Any) {
            return Err(format!("shared heap holds {:?}", misplaced.0.placement));
        }
        for worker in &self.blocked_workers {
            if !self.lanes.contains_key(worker) {
                return Err(format!("blocked {worker} has no lane"));
            }
        }
        let mut heads_per_worker: BTreeMap<WorkerWithDpRank, usize> = BTreeMap::new();
        for (_, worker) in &self.candidate_heads {
            *heads_per_worker.entry(*worker).or_default() += 1;
        }
        for (worker, lane) in &self.lanes {
            let heads = heads_per_worker.get(worker).copied().unwrap_or(0);
            self.check_lane(*worker, lane, heads)?;
        }
        let unblocked = self.lanes.len() - self.blocked_workers.len();
        if self.candidate_heads.len() != unblocked {
            return Err(format!(
                "{} candidate heads for {unblocked} unblocked lanes",
                self.candidate_heads.len()
            ));
        }
        Ok(())
    }

    fn check_lane(
        &self,
        worker: WorkerWithDpRank,
        lane: &Heap<T>,
        heads_of_lane: usize,
    ) -> Result<(), String> {
        let Some(top) = lane.peek() else {
            return Err(format!("empty lane stored for {worker}"));
        };
        if let Some(misplaced) = lane
            .iter()
            .find(|r| r.0.placement != Placement::Exact(worker))
        {
            return Err(format!("lane {worker} holds {:?}", misplaced.0.placement));
        }
        let blocked = self.blocked_workers.contains(&worker);
        let expected = usize::from(!blocked);
        if heads_of_lane != expected {
            return Err(format!(
                "lane {worker} (blocked: {blocked}) has {heads_of_lane} candidate heads"
            ));
        }
        if !blocked && !self.candidate_heads.contains(&(top.0.key, worker)) {
            return Err(format!("lane {worker} candidate head is not its top"));
        }
        Ok(())
    }
}

/// Splits `heap` into the entries `pred` keeps (returned as a heap) and those it matches
/// (appended to `removed`).
fn split_heap<T>(
    heap: Heap<T>,
    pred: &mut dyn FnMut(&T) -> bool,
    removed: &mut Vec<QueueEntry<T>>,
) -> Heap<T> {
    let mut kept = Vec::with_capacity(heap.len());
    for ranked in heap.into_vec() {
        if pred(&ranked.0.payload) {
            removed.push(ranked.0);
        } else {
            kept.push(ranked);
        }
    }
    BinaryHeap::from(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(id: u64) -> WorkerWithDpRank {
        WorkerWithDpRank::new(id, 0)
    }

    /// FCFS-like entry: payload = seq, everything at offset 0 so seq decides.
    fn entry(seq: u64, cost: u64, placement: Placement) -> QueueEntry<u64> {
        QueueEntry {
            payload: seq,
            class_index: 0,
            key: PriorityKey {
                strict_priority: 0,
                score: 0.0,
                seq,
            },
            snapshot: QueueSnapshot::new(cost, 0),
            placement,
        }
    }

    fn exact(id: u64) -> Placement {
        Placement::Exact(worker(id))
    }

    /// Predicate: an entry is dispatchable unless it is pinned to a worker in `full`.
    fn unless_pinned_to<'a>(full: &'a [u64]) -> impl FnMut(&QueueEntry<u64>) -> bool + 'a {
        move |e| match e.placement {
            Placement::Exact(w) => !full.contains(&w.worker_id),
            Placement::Any => true,
        }
    }

    fn pop_best(
        queue: &mut PolicyClassQueue<u64>,
        pred: &mut dyn FnMut(&QueueEntry<u64>) -> bool,
    ) -> Option<u64> {
        let (placement, _) = queue.next_dispatchable(pred)?;
        let popped = queue.pop(placement).map(|e| e.payload);
        queue.check_invariants().unwrap();
        popped
    }

    #[test]
    fn shared_head_and_lane_heads_compete_by_key() {
        let mut queue = PolicyClassQueue::new();
        queue.push(entry(2, 5, Placement::Any));
        queue.push(entry(1, 6, exact(9)));
        queue.push(entry(3, 7, exact(9)));
        queue.push(entry(0, 8, exact(7)));
        queue.check_invariants().unwrap();
        let mut all = |_: &QueueEntry<u64>| true;
        assert_eq!(queue.next_dispatchable(&mut all), Some((exact(7), 8)));
        let order: Vec<u64> = std::iter::from_fn(|| pop_best(&mut queue, &mut all)).collect();
        assert_eq!(order, vec![0, 1, 2, 3]);
        assert!(queue.is_empty());
        assert_eq!(queue.lane_count(), 0, "emptied lanes are deleted");
    }

    #[test]
    fn full_worker_blocks_only_its_own_lane() {
        let mut queue = PolicyClassQueue::new();
        queue.push(entry(0, 1, exact(7)));
        queue.push(entry(1, 1, exact(7)));
        queue.push(entry(2, 1, exact(9)));
        queue.push(entry(3, 1, Placement::Any));
        let full = [7];
        let mut pred = unless_pinned_to(&full);
        assert_eq!(
            pop_best(&mut queue, &mut pred),
            Some(2),
            "worker 9's lane still runs"
        );
        assert!(queue.is_blocked(worker(7)));
        assert_eq!(
            pop_best(&mut queue, &mut pred),
            Some(3),
            "the shared head still runs"
        );
        assert_eq!(pop_best(&mut queue, &mut pred), None);
        assert_eq!(queue.len(), 2);
    }

    #[test]
    fn blocked_shared_head_does_not_hide_lanes_nor_bypass_its_own_order() {
        let mut queue = PolicyClassQueue::new();
        queue.push(entry(0, 1, Placement::Any));
        queue.push(entry(1, 1, Placement::Any));
        queue.push(entry(2, 1, exact(9)));
        let mut shared_full = |e: &QueueEntry<u64>| e.placement != Placement::Any;
        assert_eq!(pop_best(&mut queue, &mut shared_full), Some(2));
        // The second shared entry never jumps the blocked first one.
        assert_eq!(pop_best(&mut queue, &mut shared_full), None);
    }

    #[test]
    fn blocked_lane_is_not_asked_again_until_rechecked() {
        let mut queue = PolicyClassQueue::new();
        queue.push(entry(0, 1, exact(7)));
        let mut calls = 0;
        let mut never = |_: &QueueEntry<u64>| {
            calls += 1;
            false
        };
        assert_eq!(queue.next_dispatchable(&mut never), None);
        assert_eq!(queue.next_dispatchable(&mut never), None);
        assert_eq!(calls, 1);
        // A new arrival in a blocked lane leaves it blocked.
        queue.push(entry(1, 1, exact(7)));
        queue.check_invariants().unwrap();
        let mut all = |_: &QueueEntry<u64>| true;
        assert_eq!(queue.next_dispatchable(&mut all), None);
        queue.recheck_worker(worker(9));
        assert_eq!(
            queue.next_dispatchable(&mut all),
            None,
            "only worker 7 unblocks 7"
        );
        queue.recheck_worker(worker(7));
        queue.check_invariants().unwrap();
        assert_eq!(queue.next_dispatchable(&mut all), Some((exact(7), 1)));
    }

    #[test]
    fn recheck_all_workers_unblocks_every_lane() {
        let mut queue = PolicyClassQueue::new();
        for id in 0..4 {
            queue.push(entry(id, 1, exact(id)));
        }
        let mut never = |_: &QueueEntry<u64>| false;
        assert_eq!(queue.next_dispatchable(&mut never), None);
        assert_eq!(queue.blocked_lane_count(), 4);
        queue.recheck_all_workers();
        queue.check_invariants().unwrap();
        assert_eq!(queue.blocked_lane_count(), 0);
        let mut all = |_: &QueueEntry<u64>| true;
        assert_eq!(queue.next_dispatchable(&mut all), Some((exact(0), 1)));
    }

    #[test]
    fn each_blocked_lane_is_checked_once_while_draining() {
        let lanes = 10_000u64;
        let mut queue = PolicyClassQueue::new();
        for id in 0..lanes {
            queue.push(entry(id, 1, exact(id)));
        }
        let mut calls = 0u64;
        let mut even_workers_full = |e: &QueueEntry<u64>| {
            calls += 1;
            matches!(e.placement, Placement::Exact(w) if w.worker_id % 2 == 1)
        };
        let mut drained = 0;
        while let Some((placement, _)) = queue.next_dispatchable(&mut even_workers_full) {
            queue.pop(placement).unwrap();
            drained += 1;
        }
        assert_eq!(drained, lanes / 2);
        assert_eq!(calls, lanes, "one predicate call per lane");
        queue.check_invariants().unwrap();
    }

    #[test]
    fn take_if_removes_everywhere_keeps_blocked_lanes_blocked() {
        let mut queue = PolicyClassQueue::new();
        queue.push(entry(0, 1, exact(7)));
        queue.push(entry(1, 1, exact(7)));
        queue.push(entry(2, 1, exact(9)));
        queue.push(entry(3, 1, Placement::Any));
        queue.push(entry(4, 1, exact(5)));
        let mut never = |_: &QueueEntry<u64>| false;
        queue.next_dispatchable(&mut never);
        assert_eq!(queue.blocked_lane_count(), 3);
        let removed: Vec<u64> = queue
            .take_if(&mut |p| [0, 2, 3].contains(p))
            .into_iter()
            .map(|e| e.payload)
            .collect();
        assert_eq!(removed, vec![0, 2, 3], "returned in enqueue order");
        queue.check_invariants().unwrap();
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.lane_count(), 2, "worker 9's emptied lane is gone");
        assert!(
            queue.is_blocked(worker(7)),
            "lane 7 keeps entries and stays blocked"
        );
        let mut all = |_: &QueueEntry<u64>| true;
        assert_eq!(queue.next_dispatchable(&mut all), None);
        queue.recheck_worker(worker(7));
        assert_eq!(pop_best(&mut queue, &mut all), Some(1));
    }

    #[test]
    fn higher_priority_arrival_replaces_lane_head() {
        let mut queue = PolicyClassQueue::new();
        queue.push(entry(5, 1, exact(7)));
        queue.push(entry(6, 1, exact(8)));
        queue.push(entry(1, 1, exact(8)));
        queue.check_invariants().unwrap();
        let mut all = |_: &QueueEntry<u64>| true;
        assert_eq!(pop_best(&mut queue, &mut all), Some(1));
        assert_eq!(pop_best(&mut queue, &mut all), Some(5));
        assert_eq!(pop_best(&mut queue, &mut all), Some(6));
    }

    #[test]
    fn pop_of_empty_placement_is_none() {
        let mut queue: PolicyClassQueue<u64> = PolicyClassQueue::new();
        assert!(queue.pop(Placement::Any).is_none());
        assert!(queue.pop(exact(3)).is_none());
        queue.check_invariants().unwrap();
    }
}
