//! Deficit round robin across policy classes (PolicyQueue) with per-worker queue limits.
//!
//! [`PolicyQueue`] owns one [`PolicyClassQueue`] per configured class, each class's DRR
//! deficit, its resident totals (for queue limits) and the entries an admission policy holds
//! back (deferred). [`PolicyQueue::pop_next`] picks the next request to dispatch:
//!
//! 1. *Carry*: the class that dispatched last and still holds credit is offered first, and may
//!    only spend existing credit.
//! 2. *Ring scan*: from the round cursor, each class's best dispatchable candidate is paid from
//!    existing credit, or else the class earns one quantum and pays if it now can.
//! 3. *Bulk credit*: if nothing was affordable, every class with a candidate earns the same
//!    number of virtual rounds — the fewest any of them needs — so one call never loops once
//!    per round, whatever the cost-to-quantum ratio.
//! 4. *Final scan* from the cursor pays the first class that can now afford its candidate.
//!
//! Classes with no dispatchable candidate keep the credit they have but earn none; classes
//! with no ready entries lose it. One call costs `O(C + L log L)` for `C` classes and `L`
//! lane heads inspected, independent of request cost and quantum.

use crate::scheduling::class_queue::{Placement, PolicyClassQueue, QueueEntry};
use crate::scheduling::request::{PriorityKey, QueueSnapshot};
use crate::scheduling::types::{QueuePolicy, WorkerWithDpRank};
use std::collections::BTreeMap;
use std::fmt;

/// Queue settings of one policy class, as the validated policy profile gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassQueueConfig {
    /// Class name (used in rejections and reports).
    pub name: String,
    /// DRR credit earned per ring round, in uncached tokens; must be > 0.
    pub quantum_tokens: u64,
    /// Order inside the class.
    pub queue_policy: QueuePolicy,
    /// Max resident requests per discovered worker (`None` = unlimited, 0 = refuse all).
    pub request_limit_per_worker: Option<u64>,
    /// Max resident raw input tokens per discovered worker.
    pub raw_isl_token_limit_per_worker: Option<u64>,
    /// Max resident cached tokens per discovered worker.
    pub cached_token_limit_per_worker: Option<u64>,
}

/// Which per-worker queue limit refused a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// `request_limit_per_worker`.
    Requests,
    /// `raw_isl_token_limit_per_worker`.
    RawIslTokens,
    /// `cached_token_limit_per_worker`.
    CachedTokens,
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitKind::Requests => "requests",
            LimitKind::RawIslTokens => "raw_isl_tokens",
            LimitKind::CachedTokens => "cached_tokens",
        })
    }
}

/// A request refused because its class's queue is full (Dynamo answers HTTP 529).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRejection {
    /// Name of the full class.
    pub policy_class: String,
    /// The first limit (in the order requests, raw ISL tokens, cached tokens) that is full.
    pub limit_kind: LimitKind,
    /// The class's resident total of that kind before this request.
    pub current: u64,
    /// The effective limit: per-worker limit times discovered workers (saturating).
    pub limit: u64,
}

impl fmt::Display for QueueRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "queue limit reached for class \"{}\": {} {} >= limit {}",
            self.policy_class, self.limit_kind, self.current, self.limit
        )
    }
}

impl std::error::Error for QueueRejection {}

/// Resident totals of one class: ready plus deferred entries.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Number of resident entries.
    pub requests: u64,
    /// Sum of their `raw_isl_tokens`.
    pub raw_isl_tokens: u64,
    /// Sum of their `cached_tokens`.
    pub cached_tokens: u64,
}

impl ClassStats {
    fn add(&mut self, snapshot: &QueueSnapshot) {
        self.requests = self.requests.saturating_add(1);
        self.raw_isl_tokens = self.raw_isl_tokens.saturating_add(snapshot.raw_isl_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(snapshot.cached_tokens);
    }

    fn subtract(&mut self, snapshot: &QueueSnapshot) {
        self.requests = self.requests.saturating_sub(1);
        self.raw_isl_tokens = self.raw_isl_tokens.saturating_sub(snapshot.raw_isl_tokens);
        self.cached_tokens = self.cached_tokens.saturating_sub(snapshot.cached_tokens);
    }
}

/// Handle of an entry held back by an admission policy (see [`PolicyQueue::enqueue_deferred`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeferredId(pub u64);

/// Credit bookkeeping of one class, kept beside the deficit so the checker can prove that
/// the deficit moved only by quanta earned, costs charged and resets.
#[derive(Copy, Clone, Debug, Default)]
struct CreditLedger {
    earned_tokens: u128,
    charged_tokens: u128,
    forfeited_tokens: u128,
}

#[derive(Debug)]
struct ClassState<T> {
    config: ClassQueueConfig,
    ready: PolicyClassQueue<T>,
    deferred: BTreeMap<DeferredId, QueueEntry<T>>,
    stats: ClassStats,
    deficit_tokens: u64,
    ledger: CreditLedger,
}

impl<T> ClassState<T> {
    fn earn(&mut self, credit_tokens: u64) {
        let before = self.deficit_tokens;
        self.deficit_tokens = before.saturating_add(credit_tokens);
        self.ledger.earned_tokens += u128::from(self.deficit_tokens - before);
    }

    /// Forfeits all credit: a class with nothing ready keeps no deficit.
    fn reset_deficit(&mut self) {
        self.ledger.forfeited_tokens += u128::from(self.deficit_tokens);
        self.deficit_tokens = 0;
    }

    fn reset_deficit_if_idle(&mut self) {
        if self.ready.is_empty() {
            self.reset_deficit();
        }
    }

    fn queue_rejection(&self, worker_count: usize) -> Option<QueueRejection> {
        let workers = u64::try_from(worker_count).unwrap_or(u64::MAX);
        let limits = [
            (
                LimitKind::Requests,
                self.config.request_limit_per_worker,
                self.stats.requests,
            ),
            (
                LimitKind::RawIslTokens,
                self.config.raw_isl_token_limit_per_worker,
                self.stats.raw_isl_tokens,
            ),
            (
                LimitKind::CachedTokens,
                self.config.cached_token_limit_per_worker,
                self.stats.cached_tokens,
            ),
        ];
        limits
            .into_iter()
            .find_map(|(limit_kind, per_worker, current)| {
                let limit = per_worker?.saturating_mul(workers);
                (current >= limit).then(|| QueueRejection {
                    policy_class: self.config.name.clone(),
                    limit_kind,
                    current,
                    limit,
                })
            })
    }
}

/// A class's best dispatchable candidate found in one `pop_next` call: placement and cost.
type Candidate = Option<(Placement, u64)>;

/// Deficit-round-robin arbitration over all policy classes of one scheduler.
///
/// Generic over the payload `T` (the scheduler's queued request). Drive it with
/// [`enqueue`](Self::enqueue) on arrival, [`recheck_worker`](Self::recheck_worker) /
/// [`recheck_all_workers`](Self::recheck_all_workers) when capacity changes, then
/// [`pop_next`](Self::pop_next) until it returns `None`.
///
/// Class indices are positions in the config list given to [`new`](Self::new); every method
/// taking one panics if it is out of range (a programmer error, not an input error).
#[derive(Debug)]
pub struct PolicyQueue<T> {
    classes: Vec<ClassState<T>>,
    round_cursor: usize,
    carry_class: Option<usize>,
    next_enqueue_seq: u64,
    next_deferred_id: u64,
    pending_count: usize,
    /// Scratch: each class's candidate found during the current `pop_next` call.
    candidates: Vec<Candidate>,
}

impl<T> PolicyQueue<T> {
    /// A queue with one class per config, in ring order.
    ///
    /// # Panics
    /// If `classes` is empty or a quantum is 0: the policy loader rejects both, so reaching
    /// here with them is a programmer error.
    pub fn new(classes: Vec<ClassQueueConfig>) -> Self {
        assert!(
            !classes.is_empty(),
            "a PolicyQueue needs at least one class"
        );
        for config in &classes {
            assert!(
                config.quantum_tokens > 0,
                "class {:?} has quantum 0",
                config.name
            );
        }
        let candidates = vec![None; classes.len()];
        let classes = classes
            .into_iter()
            .map(|config| ClassState {
                config,
                ready: PolicyClassQueue::new(),
                deferred: BTreeMap::new(),
                stats: ClassStats::default(),
                deficit_tokens: 0,
                ledger: CreditLedger::default(),
            })
            .collect();
        PolicyQueue {
            classes,
            round_cursor: 0,
            carry_class: None,
            next_enqueue_seq: 0,
            next_deferred_id: 0,
            pending_count: 0,
            candidates,
        }
    }

    // ----- getters -------------------------------------------------------------------------

    /// All resident entries: ready and deferred, every class.
    pub fn pending_count(&self) -> usize {
        self.pending_count
    }

    /// True if `class` has ready entries (deferred entries do not count).
    pub fn has_backlog(&self, class: usize) -> bool {
        !self.classes[class].ready.is_empty()
    }

    /// `class`'s unspent DRR credit, in tokens.
    pub fn deficit(&self, class: usize) -> u64 {
        self.classes[class].deficit_tokens
    }

    /// `class`'s resident totals (ready plus deferred), as the queue limits see them.
    pub fn class_stats(&self, class: usize) -> ClassStats {
        self.classes[class].stats
    }

    /// Number of classes in the ring.
    pub fn num_classes(&self) -> usize {
        self.classes.len()
    }

    /// `class`'s configured name.
    pub fn class_name(&self, class: usize) -> &str {
        &self.classes[class].config.name
    }

    /// `class`'s configuration.
    pub fn class_config(&self, class: usize) -> &ClassQueueConfig {
        &self.classes[class].config
    }

    /// The class the next ring scan starts from.
    pub fn round_cursor(&self) -> usize {
        self.round_cursor
    }

    /// The class offered first on the next `pop_next` (it dispatched last and kept credit).
    pub fn carry_class(&self) -> Option<usize> {
        self.carry_class
    }

    /// `class`'s ready storage, for inspection.
    pub fn class_queue(&self, class: usize) -> &PolicyClassQueue<T> {
        &self.classes[class].ready
    }

    // ----- commands ------------------------------------------------------------------------

    /// Queues `payload` as ready in `class_index`, unless a queue limit refuses it.
    ///
    /// `worker_count` is the number of discovered workers (not ranks); each per-worker limit
    /// is multiplied by it (saturating). A limit refuses iff the class's current total is
    /// already `>=` it, so the request that crosses a limit is accepted and the next refused.
    /// On refusal nothing changes.
    ///
    /// # Panics
    /// If `class_index` is out of range (a programmer error: classes come from the profile).
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue(
        &mut self,
        class_index: usize,
        payload: T,
        snapshot: QueueSnapshot,
        placement: Placement,
        strict_priority: u32,
        priority_jump: f64,
        arrival_offset_secs: f64,
        worker_count: usize,
    ) -> Result<(), QueueRejection> {
        let entry = self.admit_entry(
            class_index,
            payload,
            snapshot,
            placement,
            (strict_priority, priority_jump, arrival_offset_secs),
            worker_count,
        )?;
        self.classes[class_index].ready.push(entry);
        Ok(())
    }

    /// Like [`enqueue`](Self::enqueue) but holds the entry back for an admission policy: it
    /// counts toward limits and `pending_count` but is not backlog and never dispatches until
    /// [`make_ready`](Self::make_ready). Its key (seq, arrival) is fixed now.
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue_deferred(
        &mut self,
        class_index: usize,
        payload: T,
        snapshot: QueueSnapshot,
        placement: Placement,
        strict_priority: u32,
        priority_jump: f64,
        arrival_offset_secs: f64,
        worker_count: usize,
    ) -> Result<DeferredId, QueueRejection> {
        let entry = self.admit_entry(
            class_index,
            payload,
            snapshot,
            placement,
            (strict_priority, priority_jump, arrival_offset_secs),
            worker_count,
        )?;
        let id = DeferredId(self.next_deferred_id);
        self.next_deferred_id = self.next_deferred_id.wrapping_add(1);
        self.classes[class_index].deferred.insert(id, entry);
        Ok(id)
    }

    /// Moves a deferred entry into its class's ready storage, at `placement` if given (else
    /// where it was queued). No limit is re-checked. Returns false if `id` is not deferred
    /// (already made ready or removed).
    pub fn make_ready(&mut self, id: DeferredId, placement: Option<Placement>) -> bool {
        let Some(class) = self
            .classes
            .iter_mut()
            .find(|c| c.deferred.contains_key(&id))
        else {
            return false;
        };
        let Some(mut entry) = class.deferred.remove(&id) else {
            return false;
        };
        if let Some(placement) = placement {
            entry.placement = placement;
        }
        class.ready.push(entry);
        true
    }

    /// Removes a deferred entry (e.g. its admission policy finished with it) and returns it;
    /// `None` if `id` is not deferred. A class left with nothing ready loses its credit.
    pub fn remove_deferred(&mut self, id: DeferredId) -> Option<QueueEntry<T>> {
        let class = self
            .classes
            .iter_mut()
            .find(|c| c.deferred.contains_key(&id))?;
        let entry = class.deferred.remove(&id)?;
        class.stats.subtract(&entry.snapshot);
        class.reset_deficit_if_idle();
        self.pending_count -= 1;
        Some(entry)
    }

    /// `worker`'s capacity changed: every class offers its lane for `worker` again.
    pub fn recheck_worker(&mut self, worker: WorkerWithDpRank) {
        for class in &mut self.classes {
            class.ready.recheck_worker(worker);
        }
    }

    /// Any worker's capacity may have changed: every blocked lane is offered again.
    pub fn recheck_all_workers(&mut self) {
        for class in &mut self.classes {
            class.ready.recheck_all_workers();
        }
    }

    /// Removes every resident entry (ready or deferred) whose payload matches `pred` — e.g.
    /// cancelled requests — and returns them, by class, each class in enqueue order. A class
    /// left with nothing ready loses its credit.
    pub fn take_if(&mut self, mut pred: impl FnMut(&T) -> bool) -> Vec<QueueEntry<T>> {
        let mut removed = Vec::new();
        for class in &mut self.classes {
            let mut taken = class.ready.take_if(&mut pred);
            let deferred_ids: Vec<DeferredId> = class
                .deferred
                .iter()
                .filter(|(_, entry)| pred(&entry.payload))
                .map(|(id, _)| *id)
                .collect();
            taken.extend(
                deferred_ids
                    .iter()
                    .filter_map(|id| class.deferred.remove(id)),
            );
            taken.sort_by_key(|entry| entry.key.seq);
            for entry in &taken {
                class.stats.subtract(&entry.snapshot);
            }
            class.reset_deficit_if_idle();
            removed.append(&mut taken);
        }
        self.pending_count -= removed.len();
        removed
    }

    /// Picks, removes and returns the next entry to dispatch by DRR, or `None` if no class
    /// has a dispatchable candidate (then no deficit grows).
    ///
    /// `is_dispatchable` says whether an entry's target can take it now (for a lane head:
    /// its worker; for a shared head: not all eligible workers busy). A lane head found not
    /// dispatchable is not asked again until its worker is rechecked.
    pub fn pop_next(
        &mut self,
        is_dispatchable: &mut dyn FnMut(&QueueEntry<T>) -> bool,
    ) -> Option<QueueEntry<T>> {
        if self.pending_count == 0 {
            self.carry_class = None;
            return None;
        }
        self.candidates.fill(None);
        let carried = self.carry_class.take();
        if let Some(class) = carried {
            let candidate = self.classes[class].ready.next_dispatchable(is_dispatchable);
            if let Some((placement, cost)) = candidate
                && cost <= self.classes[class].deficit_tokens
            {
                return self.pop_candidate(class, placement, cost);
            }
            self.candidates[class] = candidate;
            self.classes[class].reset_deficit_if_idle();
        }
        if let Some(popped) = self.ring_scan(carried, is_dispatchable) {
            return Some(popped);
        }
        let rounds = self.bulk_rounds_needed()?;
        self.grant_bulk_credit(rounds);
        self.final_scan()
    }

    /// One pass over the ring from the cursor: pay from existing credit, else earn one quantum
    /// and pay if affordable. Caches each class's candidate for the bulk step.
    fn ring_scan(
        &mut self,
        carried: Option<usize>,
        is_dispatchable: &mut dyn FnMut(&QueueEntry<T>) -> bool,
    ) -> Option<QueueEntry<T>> {
        let class_count = self.classes.len();
        for offset in 0..class_count {
            let index = (self.round_cursor + offset) % class_count;
            let candidate = if carried == Some(index) {
                self.candidates[index]
            } else {
                let found = self.classes[index].ready.next_dispatchable(is_dispatchable);
                self.candidates[index] = found;
                found
            };
            let class = &mut self.classes[index];
            let Some((placement, cost)) = candidate else {
                // Blocked classes keep their credit but earn none; idle ones lose it.
                class.reset_deficit_if_idle();
                continue;
            };
            if cost <= class.deficit_tokens {
                return self.pop_candidate(index, placement, cost);
            }
            let quantum_tokens = class.config.quantum_tokens;
            class.earn(quantum_tokens);
            if cost <= class.deficit_tokens {
                return self.pop_candidate(index, placement, cost);
            }
        }
        None
    }

    /// Fewest whole rounds after which some class with a candidate can pay for it; `None` if
    /// no class has a candidate.
    fn bulk_rounds_needed(&self) -> Option<u64> {
        self.classes
            .iter()
            .zip(&self.candidates)
            .filter_map(|(class, candidate)| {
                let (_, cost) = (*candidate)?;
                let missing_tokens = cost.saturating_sub(class.deficit_tokens);
                Some(missing_tokens.div_ceil(class.config.quantum_tokens))
            })
            .min()
    }

    /// Every class with a candidate earns `rounds` quanta; blocked classes earn nothing.
    fn grant_bulk_credit(&mut self, rounds: u64) {
        for (class, candidate) in self.classes.iter_mut().zip(&self.candidates) {
            if candidate.is_some() {
                let credit_tokens = class.config.quantum_tokens.saturating_mul(rounds);
                class.earn(credit_tokens);
            }
        }
    }

    /// After bulk credit: pay the first class from the cursor that can afford its candidate.
    fn final_scan(&mut self) -> Option<QueueEntry<T>> {
        let class_count = self.classes.len();
        for offset in 0..class_count {
            let index = (self.round_cursor + offset) % class_count;
            if let Some((placement, cost)) = self.candidates[index]
                && cost <= self.classes[index].deficit_tokens
            {
                return self.pop_candidate(index, placement, cost);
            }
        }
        debug_assert!(false, "bulk credit left every candidate unaffordable");
        None
    }

    /// Dispatches `class`'s candidate: the cursor moves past the class, the class pays the
    /// cost, and it is carried (offered first next time) iff it still has credit and entries.
    fn pop_candidate(
        &mut self,
        index: usize,
        placement: Placement,
        cost: u64,
    ) -> Option<QueueEntry<T>> {
        self.round_cursor = (index + 1) % self.classes.len();
        let class = &mut self.classes[index];
        let Some(entry) = class.ready.pop(placement) else {
            debug_assert!(false, "candidate {placement:?} of class {index} vanished");
            return None;
        };
        debug_assert_eq!(cost, entry.snapshot.cost_tokens);
        class.deficit_tokens = class.deficit_tokens.saturating_sub(cost);
        class.ledger.charged_tokens += u128::from(entry.snapshot.cost_tokens);
        class.stats.subtract(&entry.snapshot);
        self.pending_count -= 1;
        if class.ready.is_empty() {
            class.reset_deficit();
        } else if class.deficit_tokens > 0 {
            self.carry_class = Some(index);
        }
        Some(entry)
    }

    /// Builds the entry (key, seq) after the class's limits accept it and books its totals.
    fn admit_entry(
        &mut self,
        class_index: usize,
        payload: T,
        snapshot: QueueSnapshot,
        placement: Placement,
        (strict_priority, priority_jump, arrival_offset_secs): (u32, f64, f64),
        worker_count: usize,
    ) -> Result<QueueEntry<T>, QueueRejection> {
        assert!(
            class_index < self.classes.len(),
            "class index {class_index} out of range"
        );
        let class = &mut self.classes[class_index];
        if let Some(rejection) = class.queue_rejection(worker_count) {
            return Err(rejection);
        }
        let seq = self.next_enqueue_seq;
        self.next_enqueue_seq = seq.wrapping_add(1);
        let key = PriorityKey::new(
            class.config.queue_policy,
            strict_priority,
            priority_jump,
            arrival_offset_secs,
            snapshot.cost_tokens,
            seq,
        );
        class.stats.add(&snapshot);
        self.pending_count += 1;
        Ok(QueueEntry {
            payload,
            class_index,
            key,
            snapshot,
            placement,
        })
    }

    // ----- checker -------------------------------------------------------------------------

    /// Checks the queue invariants (spec §8 items 1-3 and 5): `pending_count` and every
    /// class's totals equal the resident entries; a class with nothing ready has no credit;
    /// lane storage is consistent; every deficit equals credit earned minus costs charged
    /// minus credit forfeited. Meant to run after every step in tests and debug runs.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut resident_total = 0usize;
        for (index, class) in self.classes.iter().enumerate() {
            let name = &class.config.name;
            class
                .ready
                .check_invariants()
                .map_err(|e| format!("class {name}: {e}"))?;
            resident_total += class.ready.len() + class.deferred.len();
            check_class_entries(index, class)?;
            if class.ready.is_empty() && class.deficit_tokens != 0 {
                return Err(format!(
                    "class {name} has nothing ready but deficit {}",
                    class.deficit_tokens
                ));
            }
            let ledger = class.ledger;
            let balance = ledger.earned_tokens as i128
                - ledger.charged_tokens as i128
                - ledger.forfeited_tokens as i128;
            if balance != i128::from(class.deficit_tokens) {
                return Err(format!(
                    "class {name}: deficit {} != earned {} - charged {} - forfeited {}",
                    class.deficit_tokens,
                    ledger.earned_tokens,
                    ledger.charged_tokens,
                    ledger.forfeited_tokens
                ));
            }
        }
        if resident_total != self.pending_count {
            return Err(format!(
                "pending_count {} != resident entries {resident_total}",
                self.pending_count
            ));
        }
        if self.round_cursor >= self.classes.len() {
            return Err(format!("round cursor {} out of range", self.round_cursor));
        }
        Ok(())
    }
}

/// The class's stats equal the sums of its resident snapshots, and every entry names it.
fn check_class_entries<T>(index: usize, class: &ClassState<T>) -> Result<(), String> {
    let mut sums = ClassStats::default();
    let resident = class.ready.entries().chain(class.deferred.values());
    for entry in resident {
        if entry.class_index != index {
            return Err(format!(
                "entry of class {} stored in class {index}",
                entry.class_index
            ));
        }
        sums.add(&entry.snapshot);
    }
    if sums != class.stats {
        return Err(format!(
            "class {}: stats {:?} != resident sums {sums:?}",
            class.config.name, class.stats
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, quantum_tokens: u64) -> ClassQueueConfig {
        ClassQueueConfig {
            name: name.to_string(),
            quantum_tokens,
            queue_policy: QueuePolicy::Fcfs,
            request_limit_per_worker: None,
            raw_isl_token_limit_per_worker: None,
            cached_token_limit_per_worker: None,
        }
    }

    fn queue(classes: &[(&str, u64)]) -> PolicyQueue<u64> {
        PolicyQueue::new(classes.iter().map(|(n, q)| config(n, *q)).collect())
    }

    fn worker(id: u64) -> WorkerWithDpRank {
        WorkerWithDpRank::new(id, 0)
    }

    /// Queues request `id` of uncached cost `cost` at `placement`, with one worker.
    fn push_at(queue: &mut PolicyQueue<u64>, class: usize, id: u64, cost: u64, at: Placement) {
        let snapshot = QueueSnapshot::new(cost, 0);
        queue
            .enqueue(class, id, snapshot, at, 0, 0.0, 0.0, 1)
            .unwrap();
        queue.check_invariants().unwrap();
    }

    fn push(queue: &mut PolicyQueue<u64>, class: usize, id: u64, cost: u64) {
        push_at(queue, class, id, cost, Placement::Any);
    }

    fn pop(
        queue: &mut PolicyQueue<u64>,
        pred: &mut dyn FnMut(&QueueEntry<u64>) -> bool,
    ) -> Option<QueueEntry<u64>> {
        let popped = queue.pop_next(pred);
        queue.check_invariants().unwrap();
        popped
    }

    fn pop_any(queue: &mut PolicyQueue<u64>) -> Option<QueueEntry<u64>> {
        pop(queue, &mut |_| true)
    }

    #[test]
    fn quantum_is_granted_per_round_not_per_request() {
        let mut q = queue(&[("a", 10), ("b", 10)]);
        for id in 0..4 {
            push(&mut q, 0, id, 3);
        }
        push(&mut q, 1, 100, 3);
        push(&mut q, 1, 101, 3);
        let mut deficits = Vec::new();
        for expected_id in 0..3 {
            assert_eq!(pop_any(&mut q).unwrap().payload, expected_id);
            deficits.push(q.deficit(0));
            assert_eq!(q.carry_class(), Some(0), "a keeps spending its burst");
        }
        assert_eq!(
            deficits,
            vec![7, 4, 1],
            "one quantum of 10 spent 3 at a time"
        );
        assert_eq!(q.round_cursor(), 1);
        // Cost 3 > 1 left: the cursor advances to b, which earns its own quantum.
        assert_eq!(pop_any(&mut q).unwrap().payload, 100);
        assert_eq!(
            q.deficit(0),
            1,
            "a earns nothing until the ring revisits it"
        );
        assert_eq!(q.deficit(1), 7);
        assert_eq!(q.round_cursor(), 0);
    }

    #[test]
    fn bulk_credit_fast_forwards_the_fewest_rounds_any_class_needs() {
        let mut q = queue(&[("standard", 1000), ("latency", 2000)]);
        push(&mut q, 0, 1, 7000);
        push(&mut q, 1, 2, 9000);
        push(&mut q, 1, 3, 9000);
        let popped = pop_any(&mut q).unwrap();
        assert_eq!((popped.payload, popped.class_index), (2, 1));
        // standard: 1000 + 4 x 1000; latency: 2000 + 4 x 2000 - 9000.
        assert_eq!(q.deficit(0), 5000);
        assert_eq!(q.deficit(1), 1000);
    }

    #[test]
    fn bulk_credit_also_gives_classes_after_the_winner_every_round() {
        // The table above with the ring order swapped: latency wins the final scan first, and
        // standard, scanned after it, still gets all 4 virtual rounds (not 3).
        let mut q = queue(&[("latency", 2000), ("standard", 1000)]);
        push(&mut q, 0, 2, 9000);
        push(&mut q, 0, 3, 9000);
        push(&mut q, 1, 1, 7000);
        assert_eq!(pop_any(&mut q).unwrap().payload, 2);
        assert_eq!((q.deficit(0), q.deficit(1)), (1000, 5000));
    }

    /// Long-run consequence of the rule above (see the fairness property tests): quanta
    /// 591:886 ideally share 40.0% / 60.0%, but with these oversized heads Dynamo's bulk
    /// credit serves 36.69% / 63.31% (round-by-round DRR would serve 40.0% / 60.0%). The
    /// expected share comes from an independent simulation of the same algorithm.
    #[test]
    fn bulk_credit_skews_long_run_shares_like_dynamo() {
        let mut q = queue(&[("a", 591), ("b", 886)]);
        let costs = [vec![2442u64, 308], vec![819, 3431, 496]];
        let mut next = [0usize; 2];
        let mut refill = |q: &mut PolicyQueue<u64>, class: usize| {
            let cost = costs[class][next[class] % costs[class].len()];
            next[class] += 1;
            push(q, class, 0, cost);
        };
        for class in [0, 1, 0, 1] {
            refill(&mut q, class);
        }
        let mut served = [0u64; 2];
        for _ in 0..3000 {
            let entry = pop_any(&mut q).unwrap();
            served[entry.class_index] += entry.snapshot.cost_tokens;
            refill(&mut q, entry.class_index);
        }
        let share_a = served[0] as f64 / (served[0] + served[1]) as f64;
        assert!((share_a - 0.3669).abs() < 0.0005, "share of a = {share_a}");
    }

    #[test]
    fn remove_deferred_releases_its_accounting() {
        let mut q = queue(&[("held", 1)]);
        let snapshot = QueueSnapshot::new(7, 2);
        let id = q
            .enqueue_deferred(0, 5, snapshot, Placement::Any, 0, 0.0, 0.0, 1)
            .unwrap();
        assert_eq!(q.remove_deferred(id).map(|e| e.payload), Some(5));
        q.check_invariants().unwrap();
        assert_eq!(q.pending_count(), 0);
        assert_eq!(q.class_stats(0), ClassStats::default());
        assert!(q.remove_deferred(id).is_none());
    }

    #[test]
    fn quanta_one_to_three_with_unit_costs_repeat_one_three_three_three() {
        let mut q = queue(&[("one", 1), ("three", 3)]);
        for id in 0..40 {
            push(&mut q, 0, id, 1);
            push(&mut q, 1, 1000 + id, 1);
        }
        let classes: Vec<usize> = (0..40)
            .map(|_| pop_any(&mut q).unwrap().class_index)
            .collect();
        for (round, chunk) in classes.chunks(4).enumerate() {
            assert_eq!(chunk, &[0, 1, 1, 1], "round {round}");
        }
    }

    #[test]
    fn all_heads_blocked_returns_none_without_credit() {
        let mut q = queue(&[("first", 7), ("second", 11)]);
        push(&mut q, 0, 1, 50);
        push(&mut q, 1, 2, 50);
        let mut none = |_: &QueueEntry<u64>| false;
        for _ in 0..10_000 {
            assert!(q.pop_next(&mut none).is_none());
        }
        q.check_invariants().unwrap();
        assert_eq!((q.deficit(0), q.deficit(1)), (0, 0));
        assert_eq!(q.pending_count(), 2);
    }

    #[test]
    fn oversized_head_dispatches_in_one_call_when_other_class_blocked() {
        let mut q = queue(&[("large", 4), ("other", 5)]);
        push(&mut q, 0, 1, 101);
        push(&mut q, 0, 2, 101);
        push(&mut q, 1, 3, 1);
        let mut only_large = |e: &QueueEntry<u64>| e.class_index == 0;
        let popped = pop(&mut q, &mut only_large).unwrap();
        assert_eq!(popped.payload, 1);
        // 4 from the ring visit + 25 bulk rounds x 4 = 104, minus 101.
        assert_eq!(q.deficit(0), 3);
        assert_eq!(q.deficit(1), 0, "the blocked class earned no bulk credit");
    }

    #[test]
    fn carry_offers_the_next_dispatchable_lane_and_spends_only_existing_credit() {
        let mut q = queue(&[("agents", 10), ("batch", 1)]);
        push_at(&mut q, 0, 70, 3, Placement::Exact(worker(7)));
        push(&mut q, 0, 1, 5);
        push_at(&mut q, 0, 90, 10, Placement::Exact(worker(9)));
        push(&mut q, 1, 2, 1);
        push(&mut q, 1, 3, 1);
        let mut worker_7_full = |e: &QueueEntry<u64>| e.placement != Placement::Exact(worker(7));
        assert_eq!(pop(&mut q, &mut worker_7_full).unwrap().payload, 1);
        assert_eq!(q.deficit(0), 5);
        assert_eq!(q.carry_class(), Some(0));
        // Lane 9's head costs 10 > 5: no new quantum for agents, the scan moves on to batch.
        assert_eq!(pop(&mut q, &mut worker_7_full).unwrap().payload, 2);
        assert_eq!(q.deficit(0), 5);
    }

    #[test]
    fn heavier_quantum_gets_at_least_its_share_and_blocked_credit_is_kept() {
        let mut q = queue(&[("slow", 1), ("fast", 3)]);
        for id in 0..10 {
            push(&mut q, 0, id, 1);
            push(&mut q, 1, 100 + id, 1);
        }
        let fast = (0..6)
            .filter(|_| pop_any(&mut q).unwrap().class_index == 1)
            .count();
        assert!(fast >= 3, "fast served {fast} of the first 6");

        let mut q = queue(&[("slow", 5), ("fast", 3)]);
        push(&mut q, 0, 1, 3);
        push(&mut q, 0, 2, 3);
        push(&mut q, 1, 3, 1);
        push(&mut q, 1, 4, 1);
        assert_eq!(pop_any(&mut q).unwrap().payload, 1);
        assert_eq!(q.deficit(0), 2);
        let mut slow_blocked = |e: &QueueEntry<u64>| e.class_index != 0;
        assert_eq!(pop(&mut q, &mut slow_blocked).unwrap().payload, 3);
        assert_eq!(pop(&mut q, &mut slow_blocked).unwrap().payload, 4);
        assert_eq!(
            q.deficit(0),
            2,
            "blocked slow neither lost nor earned credit"
        );
    }

    #[test]
    fn full_worker_blocks_only_its_lane_across_the_policy_queue() {
        let mut q = queue(&[("only", 1)]);
        push_at(&mut q, 0, 7, 1, Placement::Exact(worker(7)));
        push_at(&mut q, 0, 9, 1, Placement::Exact(worker(9)));
        push(&mut q, 0, 1, 1);
        let mut worker_7_full = |e: &QueueEntry<u64>| e.placement != Placement::Exact(worker(7));
        assert_eq!(pop(&mut q, &mut worker_7_full).unwrap().payload, 9);
        assert_eq!(pop(&mut q, &mut worker_7_full).unwrap().payload, 1);
        assert!(pop(&mut q, &mut worker_7_full).is_none());
        q.recheck_worker(worker(7));
        assert_eq!(pop_any(&mut q).unwrap().payload, 7);
    }

    #[test]
    fn ten_thousand_lanes_half_blocked_cost_ten_thousand_checks() {
        let lanes = 10_000u64;
        let mut q = queue(&[("only", 1)]);
        for id in 0..lanes {
            let snapshot = QueueSnapshot::new(1, 0);
            let at = Placement::Exact(worker(id));
            q.enqueue(0, id, snapshot, at, 0, 0.0, 0.0, 1).unwrap();
        }
        let mut calls = 0u64;
        let mut odd_workers_free = |e: &QueueEntry<u64>| {
            calls += 1;
            e.payload % 2 == 1
        };
        let mut drained = 0;
        while q.pop_next(&mut odd_workers_free).is_some() {
            drained += 1;
        }
        assert_eq!(drained, lanes / 2);
        assert_eq!(calls, lanes);
        q.check_invariants().unwrap();
    }

    fn limited(
        requests: Option<u64>,
        raw_isl_tokens: Option<u64>,
        cached_tokens: Option<u64>,
    ) -> PolicyQueue<u64> {
        PolicyQueue::new(vec![ClassQueueConfig {
            request_limit_per_worker: requests,
            raw_isl_token_limit_per_worker: raw_isl_tokens,
            cached_token_limit_per_worker: cached_tokens,
            ..config("regular", 1)
        }])
    }

    fn try_enqueue(
        q: &mut PolicyQueue<u64>,
        raw: u64,
        cached: u64,
        workers: usize,
    ) -> Result<(), QueueRejection> {
        let snapshot = QueueSnapshot::new(raw, cached);
        q.enqueue(0, 0, snapshot, Placement::Any, 0, 0.0, 0.0, workers)
    }

    #[test]
    fn request_limit_accepts_up_to_the_cap_then_rejects() {
        let mut q = limited(Some(2), None, None);
        for _ in 0..6 {
            try_enqueue(&mut q, 10, 0, 3).unwrap();
        }
        let rejection = try_enqueue(&mut q, 10, 0, 3).unwrap_err();
        assert_eq!(rejection.limit_kind, LimitKind::Requests);
        assert_eq!((rejection.current, rejection.limit), (6, 6));
        assert_eq!(
            rejection.to_string(),
            "queue limit reached for class \"regular\": requests 6 >= limit 6"
        );
    }

    #[test]
    fn token_limits_accept_the_crossing_request_and_reject_the_next() {
        let mut q = limited(None, Some(1000), None);
        try_enqueue(&mut q, 900, 0, 1).unwrap();
        try_enqueue(&mut q, 900, 0, 1).unwrap();
        let rejection = try_enqueue(&mut q, 1, 0, 1).unwrap_err();
        assert_eq!(rejection.limit_kind, LimitKind::RawIslTokens);
        assert_eq!((rejection.current, rejection.limit), (1800, 1000));

        let mut q = limited(None, None, Some(100));
        try_enqueue(&mut q, 500, 80, 1).unwrap();
        try_enqueue(&mut q, 500, 80, 1).unwrap();
        let rejection = try_enqueue(&mut q, 500, 0, 1).unwrap_err();
        assert_eq!(rejection.limit_kind, LimitKind::CachedTokens);
        assert_eq!((rejection.current, rejection.limit), (160, 100));
    }

    #[test]
    fn limits_are_checked_in_order_requests_raw_cached() {
        let mut q = limited(Some(1), Some(1), Some(1));
        try_enqueue(&mut q, 10, 10, 1).unwrap();
        let rejection = try_enqueue(&mut q, 10, 10, 1).unwrap_err();
        assert_eq!(rejection.limit_kind, LimitKind::Requests);
        let mut q = limited(Some(5), Some(1), Some(1));
        try_enqueue(&mut q, 10, 10, 1).unwrap();
        assert_eq!(
            try_enqueue(&mut q, 10, 10, 1).unwrap_err().limit_kind,
            LimitKind::RawIslTokens
        );
    }

    #[test]
    fn zero_limit_or_zero_workers_rejects_everything() {
        let mut q = limited(Some(0), None, None);
        assert!(try_enqueue(&mut q, 1, 0, 8).is_err());
        let mut q = limited(Some(5), None, None);
        let rejection = try_enqueue(&mut q, 1, 0, 0).unwrap_err();
        assert_eq!((rejection.current, rejection.limit), (0, 0));
        let mut unlimited = limited(None, None, None);
        assert!(
            try_enqueue(&mut unlimited, 1, 0, 0).is_ok(),
            "no limit, no rejection"
        );
    }

    #[test]
    fn rejection_changes_nothing() {
        let mut q = limited(Some(1), None, None);
        try_enqueue(&mut q, 10, 4, 1).unwrap();
        let stats_before = q.class_stats(0);
        assert!(try_enqueue(&mut q, 99, 9, 1).is_err());
        q.check_invariants().unwrap();
        assert_eq!(q.class_stats(0), stats_before);
        assert_eq!(q.pending_count(), 1);
        assert_eq!(
            stats_before,
            ClassStats {
                requests: 1,
                raw_isl_tokens: 10,
                cached_tokens: 4
            }
        );
        // The rejected request consumed no enqueue seq.
        q.take_if(|_| true);
        try_enqueue(&mut q, 10, 0, 1).unwrap();
        assert_eq!(pop_any(&mut q).unwrap().key.seq, 1);
    }

    fn enqueue_keyed(q: &mut PolicyQueue<u64>, id: u64, cost: u64, strict: u32, jump: f64) {
        let offset_secs = id as f64;
        let snapshot = QueueSnapshot::new(cost, 0);
        q.enqueue(
            0,
            id,
            snapshot,
            Placement::Any,
            strict,
            jump,
            offset_secs,
            1,
        )
        .unwrap();
    }

    fn drain_ids(q: &mut PolicyQueue<u64>) -> Vec<u64> {
        std::iter::from_fn(|| pop_any(q).map(|e| e.payload)).collect()
    }

    fn single_class(policy: QueuePolicy) -> PolicyQueue<u64> {
        PolicyQueue::new(vec![ClassQueueConfig {
            queue_policy: policy,
            ..config("only", 1_000_000)
        }])
    }

    #[test]
    fn fcfs_orders_by_arrival_with_jump_and_strict_tiers() {
        let mut q = single_class(QueuePolicy::Fcfs);
        enqueue_keyed(&mut q, 1, 10, 0, 0.0);
        enqueue_keyed(&mut q, 2, 10, 0, 0.0);
        enqueue_keyed(&mut q, 5, 10, 0, 4.5); // score -0.5: ahead of 1 and 2
        enqueue_keyed(&mut q, 6, 10, 1, 0.0); // higher tier: first
        enqueue_keyed(&mut q, 3, 10, 0, 0.0);
        assert_eq!(drain_ids(&mut q), vec![6, 5, 1, 2, 3]);
    }

    #[test]
    fn wspt_orders_by_weight_over_cost_then_seq() {
        let mut q = single_class(QueuePolicy::Wspt);
        enqueue_keyed(&mut q, 1, 100, 0, 0.0);
        enqueue_keyed(&mut q, 2, 10, 0, 0.0);
        enqueue_keyed(&mut q, 3, 50, 0, 0.0);
        enqueue_keyed(&mut q, 4, 200, 0, 1.0); // 2/200 ties with 1/100: seq decides
        enqueue_keyed(&mut q, 5, 1000, 1, 0.0);
        assert_eq!(drain_ids(&mut q), vec![5, 2, 3, 1, 4]);
    }

    #[test]
    fn take_if_removes_ready_and_deferred_and_resets_idle_credit() {
        let mut q = queue(&[("a", 10), ("b", 10)]);
        push(&mut q, 0, 1, 3);
        push(&mut q, 0, 2, 3);
        push(&mut q, 1, 3, 3);
        let snapshot = QueueSnapshot::new(4, 1);
        let deferred = q
            .enqueue_deferred(1, 4, snapshot, Placement::Any, 0, 0.0, 0.0, 1)
            .unwrap();
        assert_eq!(pop_any(&mut q).unwrap().payload, 1);
        assert_eq!(q.deficit(0), 7);
        let removed: Vec<u64> = q.take_if(|id| *id != 3).iter().map(|e| e.payload).collect();
        q.check_invariants().unwrap();
        assert_eq!(removed, vec![2, 4]);
        assert_eq!(
            q.deficit(0),
            0,
            "class a has nothing ready: credit forfeited"
        );
        assert_eq!(q.pending_count(), 1);
        assert_eq!(q.class_stats(1).requests, 1);
        assert!(
            !q.make_ready(deferred, None),
            "removed deferred entry is gone"
        );
    }

    #[test]
    fn deferred_entries_count_toward_limits_but_not_backlog() {
        let mut q = PolicyQueue::new(vec![ClassQueueConfig {
            request_limit_per_worker: Some(2),
            ..config("held", 1)
        }]);
        let snapshot = QueueSnapshot::new(5, 0);
        let first = q
            .enqueue_deferred(0, 1, snapshot, Placement::Any, 0, 0.0, 0.0, 1)
            .unwrap();
        q.enqueue_deferred(0, 2, snapshot, Placement::Any, 0, 0.0, 0.0, 1)
            .unwrap();
        q.check_invariants().unwrap();
        assert_eq!(q.pending_count(), 2);
        assert!(!q.has_backlog(0));
        assert!(pop_any(&mut q).is_none(), "deferred entries never dispatch");
        assert!(
            q.enqueue(0, 3, snapshot, Placement::Any, 0, 0.0, 0.0, 1)
                .is_err()
        );
        let pinned = Placement::Exact(worker(4));
        assert!(
            q.make_ready(first, Some(pinned)),
            "no limit re-check on make_ready"
        );
        q.check_invariants().unwrap();
        assert!(q.has_backlog(0));
        let popped = pop_any(&mut q).unwrap();
        assert_eq!((popped.payload, popped.placement), (1, pinned));
        assert!(!q.make_ready(first, None));
    }

    #[test]
    fn drained_queue_has_zero_counters_and_credit() {
        let mut q = queue(&[("a", 3), ("b", 7)]);
        for id in 0..20 {
            push(&mut q, (id % 2) as usize, id, 1 + id * 13 % 17);
        }
        while pop_any(&mut q).is_some() {}
        assert_eq!(q.pending_count(), 0);
        for class in 0..2 {
            assert_eq!(q.deficit(class), 0);
            assert_eq!(q.class_stats(class), ClassStats::default());
        }
        assert_eq!(q.carry_class(), None);
    }
}

/// Randomised checks: the real queue against a plain reference model, and DRR fairness.
#[cfg(test)]
mod model_tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::Index;

    const WORKERS: u64 = 4;

    fn worker(id: u64) -> WorkerWithDpRank {
        WorkerWithDpRank::new(id, 0)
    }

    #[derive(Clone, Debug)]
    enum Op {
        Enqueue {
            class: Index,
            raw_isl_tokens: u64,
            cached_tokens: u64,
            pinned_worker: Option<u64>,
            strict_priority: u32,
            priority_jump: f64,
            deferred: bool,
        },
        MakeReady {
            which: Index,
            repin: Option<Option<u64>>,
        },
        RemoveDeferred {
            which: Index,
        },
        /// Worker becomes busy or free; the queue is not told (as when load changes between
        /// capacity updates).
        SetBusy {
            worker: u64,
            busy: bool,
        },
        Recheck {
            worker: u64,
        },
        RecheckAll,
        Pop,
        Cancel {
            modulus: u64,
            remainder: u64,
        },
        Drain,
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        let enqueue = (
            any::<Index>(),
            0..80u64,
            0..30u64,
            prop::option::of(0..WORKERS),
            0..2u32,
            0.0..3.0f64,
            prop::bool::weighted(0.15),
        )
            .prop_map(
                |(class, raw, cached, pin, strict, jump, deferred)| Op::Enqueue {
                    class,
                    raw_isl_tokens: raw,
                    cached_tokens: cached,
                    pinned_worker: pin,
                    strict_priority: strict,
                    priority_jump: jump,
                    deferred,
                },
            );
        prop_oneof![
            5 => enqueue,
            1 => (any::<Index>(), prop::option::of(prop::option::of(0..WORKERS)))
                .prop_map(|(which, repin)| Op::MakeReady { which, repin }),
            1 => any::<Index>().prop_map(|which| Op::RemoveDeferred { which }),
            2 => (0..WORKERS, any::<bool>()).prop_map(|(worker, busy)| Op::SetBusy { worker, busy }),
            1 => (0..WORKERS).prop_map(|worker| Op::Recheck { worker }),
            1 => Just(Op::RecheckAll),
            5 => Just(Op::Pop),
            1 => (2..6u64, 0..6u64).prop_map(|(modulus, remainder)| Op::Cancel { modulus, remainder }),
            1 => Just(Op::Drain),
        ]
    }

    fn class_strategy() -> impl Strategy<Value = ClassQueueConfig> {
        (
            1..25u64,
            prop_oneof![Just(QueuePolicy::Fcfs), Just(QueuePolicy::Wspt)],
            prop::option::of(0..6u64),
            prop::option::of(0..150u64),
            prop::option::of(0..40u64),
        )
            .prop_map(
                |(quantum, policy, requests, raw, cached)| ClassQueueConfig {
                    name: format!("q{quantum}"),
                    quantum_tokens: quantum,
                    queue_policy: policy,
                    request_limit_per_worker: requests,
                    raw_isl_token_limit_per_worker: raw,
                    cached_token_limit_per_worker: cached,
                },
            )
    }

    // ----- the reference model: plain Vecs, linear scans, no indices ----------------------

    #[derive(Clone, Debug)]
    struct ModelEntry {
        id: u64,
        key: PriorityKey,
        snapshot: QueueSnapshot,
        placement: Placement,
    }

    #[derive(Debug)]
    struct ModelClass {
        config: ClassQueueConfig,
        ready: Vec<ModelEntry>,
        deferred: Vec<(DeferredId, ModelEntry)>,
        /// Workers whose lane was found blocked and not rechecked since.
        blocked: Vec<u64>,
        deficit: u64,
    }

    impl ModelClass {
        fn resident(&self) -> impl Iterator<Item = &ModelEntry> {
            self.ready
                .iter()
                .chain(self.deferred.iter().map(|(_, e)| e))
        }

        fn rejects(&self, worker_count: u64) -> bool {
            let requests = self.resident().count() as u64;
            let raw: u64 = self.resident().map(|e| e.snapshot.raw_isl_tokens).sum();
            let cached: u64 = self.resident().map(|e| e.snapshot.cached_tokens).sum();
            let config = &self.config;
            let limits = [
                (config.request_limit_per_worker, requests),
                (config.raw_isl_token_limit_per_worker, raw),
                (config.cached_token_limit_per_worker, cached),
            ];
            limits.iter().any(|(per_worker, current)| {
                per_worker.is_some_and(|l| *current >= l * worker_count)
            })
        }

        /// Index in `ready` of the best entry at `placement`.
        fn head_at(&self, placement: Placement) -> Option<usize> {
            (0..self.ready.len())
                .filter(|&i| self.ready[i].placement == placement)
                .max_by_key(|&i| self.ready[i].key)
        }

        fn next_dispatchable(
            &mut self,
            busy: &[bool],
            calls: &mut u64,
        ) -> Option<(Placement, u64)> {
            let shared = self
                .head_at(Placement::Any)
                .filter(|&i| model_dispatchable(&self.ready[i], busy, calls));
            loop {
                let mut best_lane: Option<(PriorityKey, u64, usize)> = None;
                for w in 0..WORKERS {
                    if self.blocked.contains(&w) {
                        continue;
                    }
                    if let Some(i) = self.head_at(Placement::Exact(worker(w))) {
                        let better = best_lane.is_none_or(|(key, bw, _)| {
                            (self.ready[i].key, worker(w)) > (key, worker(bw))
                        });
                        if better {
                            best_lane = Some((self.ready[i].key, w, i));
                        }
                    }
                }
                let Some((lane_key, w, i)) = best_lane else {
                    return shared.map(|s| (Placement::Any, self.ready[s].snapshot.cost_tokens));
                };
                if !model_dispatchable(&self.ready[i], busy, calls) {
                    self.blocked.push(w);
                    continue;
                }
                return match shared {
                    Some(s) if self.ready[s].key > lane_key => {
                        Some((Placement::Any, self.ready[s].snapshot.cost_tokens))
                    }
                    _ => Some((
                        Placement::Exact(worker(w)),
                        self.ready[i].snapshot.cost_tokens,
                    )),
                };
            }
        }

        fn remove_ready_at(&mut self, index: usize) -> ModelEntry {
            let entry = self.ready.remove(index);
            self.forget_empty_lanes();
            entry
        }

        fn forget_empty_lanes(&mut self) {
            let ready = &self.ready;
            self.blocked.retain(|w| {
                ready
                    .iter()
                    .any(|e| e.placement == Placement::Exact(worker(*w)))
            });
        }
    }

    fn model_dispatchable(entry: &ModelEntry, busy: &[bool], calls: &mut u64) -> bool {
        *calls += 1;
        placement_free(entry.placement, busy)
    }

    /// A pinned entry needs its worker free; a shared one needs any worker free.
    fn placement_free(placement: Placement, busy: &[bool]) -> bool {
        match placement {
            Placement::Exact(w) => !busy[w.worker_id as usize],
            Placement::Any => busy.iter().any(|b| !b),
        }
    }

    #[derive(Debug)]
    struct Model {
        classes: Vec<ModelClass>,
        cursor: usize,
        carry: Option<usize>,
        seq: u64,
        next_deferred: u64,
    }

    impl Model {
        fn new(configs: &[ClassQueueConfig]) -> Self {
            let classes = configs
                .iter()
                .map(|config| ModelClass {
                    config: config.clone(),
                    ready: Vec::new(),
                    deferred: Vec::new(),
                    blocked: Vec::new(),
                    deficit: 0,
                })
                .collect();
            Model {
                classes,
                cursor: 0,
                carry: None,
                seq: 0,
                next_deferred: 0,
            }
        }

        fn pending(&self) -> usize {
            self.classes.iter().map(|c| c.resident().count()).sum()
        }

        fn enqueue(
            &mut self,
            class: usize,
            entry_of: impl FnOnce(u64) -> ModelEntry,
            deferred: bool,
        ) -> Option<Option<DeferredId>> {
            if self.classes[class].rejects(WORKERS) {
                return None;
            }
            let entry = entry_of(self.seq);
            self.seq += 1;
            if deferred {
                let id = DeferredId(self.next_deferred);
                self.next_deferred += 1;
                self.classes[class].deferred.push((id, entry));
                Some(Some(id))
            } else {
                self.classes[class].ready.push(entry);
                Some(None)
            }
        }

        fn make_ready(&mut self, id: DeferredId, repin: Option<Placement>) -> bool {
            for class in &mut self.classes {
                if let Some(pos) = class.deferred.iter().position(|(d, _)| *d == id) {
                    let (_, mut entry) = class.deferred.remove(pos);
                    if let Some(p) = repin {
                        entry.placement = p;
                    }
                    class.ready.push(entry);
                    return true;
                }
            }
            false
        }

        fn remove_deferred(&mut self, id: DeferredId) -> Option<u64> {
            for class in &mut self.classes {
                if let Some(pos) = class.deferred.iter().position(|(d, _)| *d == id) {
                    let (_, entry) = class.deferred.remove(pos);
                    if class.ready.is_empty() {
                        class.deficit = 0;
                    }
                    return Some(entry.id);
                }
            }
            None
        }

        fn take_if(&mut self, pred: impl Fn(u64) -> bool) -> Vec<u64> {
            let mut removed = Vec::new();
            for class in &mut self.classes {
                let mut taken: Vec<ModelEntry> = Vec::new();
                let (gone, kept): (Vec<_>, Vec<_>) =
                    class.ready.drain(..).partition(|e| pred(e.id));
                class.ready = kept;
                taken.extend(gone);
                let (gone, kept): (Vec<_>, Vec<_>) =
                    class.deferred.drain(..).partition(|(_, e)| pred(e.id));
                class.deferred = kept;
                taken.extend(gone.into_iter().map(|(_, e)| e));
                taken.sort_by_key(|e| e.key.seq);
                removed.extend(taken.iter().map(|e| e.id));
                class.forget_empty_lanes();
                if class.ready.is_empty() {
                    class.deficit = 0;
                }
            }
            removed
        }

        // The model indexes classes plainly on purpose: it should read like the spec.
        #[allow(clippy::needless_range_loop)]
        fn pop_next(&mut self, busy: &[bool], calls: &mut u64) -> Option<u64> {
            if self.pending() == 0 {
                self.carry = None;
                return None;
            }
            let n = self.classes.len();
            let mut candidates: Vec<Option<(Placement, u64)>> = vec![None; n];
            let carried = self.carry.take();
            if let Some(c) = carried {
                let cand = self.classes[c].next_dispatchable(busy, calls);
                if let Some((p, cost)) = cand
                    && cost <= self.classes[c].deficit
                {
                    return Some(self.pop_candidate(c, p, cost));
                }
                candidates[c] = cand;
                if self.classes[c].ready.is_empty() {
                    self.classes[c].deficit = 0;
                }
            }
            for offset in 0..n {
                let i = (self.cursor + offset) % n;
                if carried != Some(i) {
                    candidates[i] = self.classes[i].next_dispatchable(busy, calls);
                }
                let Some((p, cost)) = candidates[i] else {
                    if self.classes[i].ready.is_empty() {
                        self.classes[i].deficit = 0;
                    }
                    continue;
                };
                if cost <= self.classes[i].deficit {
                    return Some(self.pop_candidate(i, p, cost));
                }
                self.classes[i].deficit += self.classes[i].config.quantum_tokens;
                if cost <= self.classes[i].deficit {
                    return Some(self.pop_candidate(i, p, cost));
                }
            }
            let mut rounds: Option<u64> = None;
            for i in 0..n {
                if let Some((_, cost)) = candidates[i] {
                    let q = self.classes[i].config.quantum_tokens;
                    let need = (cost - self.classes[i].deficit).div_ceil(q);
                    rounds = Some(rounds.map_or(need, |r| r.min(need)));
                }
            }
            let rounds = rounds?;
            for i in 0..n {
                if candidates[i].is_some() {
                    self.classes[i].deficit += self.classes[i].config.quantum_tokens * rounds;
                }
            }
            for offset in 0..n {
                let i = (self.cursor + offset) % n;
                if let Some((p, cost)) = candidates[i]
                    && cost <= self.classes[i].deficit
                {
                    return Some(self.pop_candidate(i, p, cost));
                }
            }
            panic!("model: bulk credit made nothing affordable");
        }

        fn pop_candidate(&mut self, i: usize, placement: Placement, cost: u64) -> u64 {
            self.cursor = (i + 1) % self.classes.len();
            let class = &mut self.classes[i];
            let at = class.head_at(placement).expect("model candidate exists");
            let entry = class.remove_ready_at(at);
            assert_eq!(entry.snapshot.cost_tokens, cost);
            class.deficit -= cost;
            if class.ready.is_empty() {
                class.deficit = 0;
            } else if class.deficit > 0 {
                self.carry = Some(i);
            }
            entry.id
        }
    }

    // ----- the harness ---------------------------------------------------------------------

    struct Harness {
        real: PolicyQueue<u64>,
        model: Model,
        busy: Vec<bool>,
        next_id: u64,
        step: u64,
        live_deferred: Vec<DeferredId>,
    }

    impl Harness {
        fn new(configs: &[ClassQueueConfig]) -> Self {
            Harness {
                real: PolicyQueue::new(configs.to_vec()),
                model: Model::new(configs),
                busy: vec![false; WORKERS as usize],
                next_id: 0,
                step: 0,
                live_deferred: Vec::new(),
            }
        }

        fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
            self.step += 1;
            match op {
                Op::Enqueue { .. } => self.enqueue(op)?,
                Op::MakeReady { which, repin } => {
                    if !self.live_deferred.is_empty() {
                        let id = self
                            .live_deferred
                            .remove(which.index(self.live_deferred.len()));
                        let repin = repin
                            .map(|p| p.map_or(Placement::Any, |w| Placement::Exact(worker(w))));
                        let real = self.real.make_ready(id, repin);
                        prop_assert_eq!(real, self.model.make_ready(id, repin));
                    }
                }
                Op::RemoveDeferred { which } => {
                    if !self.live_deferred.is_empty() {
                        let id = self
                            .live_deferred
                            .remove(which.index(self.live_deferred.len()));
                        let real = self.real.remove_deferred(id).map(|e| e.payload);
                        prop_assert_eq!(real, self.model.remove_deferred(id));
                    }
                }
                Op::SetBusy { worker, busy } => self.busy[*worker as usize] = *busy,
                Op::Recheck { worker: w } => {
                    self.real.recheck_worker(worker(*w));
                    for class in &mut self.model.classes {
                        class.blocked.retain(|b| b != w);
                    }
                }
                Op::RecheckAll => {
                    self.real.recheck_all_workers();
                    for class in &mut self.model.classes {
                        class.blocked.clear();
                    }
                }
                Op::Pop => {
                    self.pop()?;
                }
                Op::Cancel { modulus, remainder } => {
                    let matches = |id: u64| id % modulus == *remainder;
                    let real: Vec<u64> = self
                        .real
                        .take_if(|id| matches(*id))
                        .iter()
                        .map(|e| e.payload)
                        .collect();
                    prop_assert_eq!(&real, &self.model.take_if(matches));
                    self.live_deferred.retain(|d| {
                        self.model
                            .classes
                            .iter()
                            .any(|c| c.deferred.iter().any(|(x, _)| x == d))
                    });
                }
                Op::Drain => {
                    let bound = self.real.pending_count() + 1;
                    for _ in 0..bound {
                        if self.pop()? {
                            break;
                        }
                    }
                }
            }
            self.compare()
        }

        fn enqueue(&mut self, op: &Op) -> Result<(), TestCaseError> {
            let Op::Enqueue {
                class,
                raw_isl_tokens,
                cached_tokens,
                pinned_worker,
                strict_priority,
                priority_jump,
                deferred,
            } = op
            else {
                unreachable!()
            };
            let class = class.index(self.real.num_classes());
            let id = self.next_id;
            self.next_id += 1;
            let snapshot = QueueSnapshot::new(*raw_isl_tokens, *cached_tokens);
            let placement = pinned_worker.map_or(Placement::Any, |w| Placement::Exact(worker(w)));
            let offset_secs = self.step as f64 * 0.5;
            let policy = self.real.class_config(class).queue_policy;
            let (strict, jump) = (*strict_priority, *priority_jump);
            let real = if *deferred {
                self.real
                    .enqueue_deferred(
                        class,
                        id,
                        snapshot,
                        placement,
                        strict,
                        jump,
                        offset_secs,
                        WORKERS as usize,
                    )
                    .map(Some)
            } else {
                self.real
                    .enqueue(
                        class,
                        id,
                        snapshot,
                        placement,
                        strict,
                        jump,
                        offset_secs,
                        WORKERS as usize,
                    )
                    .map(|()| None)
            };
            let model = self.model.enqueue(
                class,
                |seq| ModelEntry {
                    id,
                    key: PriorityKey::new(
                        policy,
                        strict,
                        jump,
                        offset_secs,
                        snapshot.cost_tokens,
                        seq,
                    ),
                    snapshot,
                    placement,
                },
                *deferred,
            );
            prop_assert_eq!(real.as_ref().ok().copied(), model);
            if let Ok(Some(deferred_id)) = real {
                self.live_deferred.push(deferred_id);
            }
            Ok(())
        }

        /// One pop on both sides; true if it returned None.
        fn pop(&mut self) -> Result<bool, TestCaseError> {
            let deficits_before: Vec<u64> = (0..self.real.num_classes())
                .map(|c| self.real.deficit(c))
                .collect();
            let busy = self.busy.clone();
            let mut real_calls = 0u64;
            let real = self
                .real
                .pop_next(&mut |e| {
                    real_calls += 1;
                    placement_free(e.placement, &busy)
                })
                .map(|e| e.payload);
            let mut model_calls = 0u64;
            let model = self.model.pop_next(&self.busy, &mut model_calls);
            prop_assert_eq!(real, model, "popped ids differ");
            prop_assert_eq!(real_calls, model_calls, "predicate call counts differ");
            if real.is_none() {
                for (class, before) in deficits_before.iter().enumerate() {
                    prop_assert!(self.real.deficit(class) <= *before, "None grew a deficit");
                }
            }
            Ok(real.is_none())
        }

        fn compare(&self) -> Result<(), TestCaseError> {
            if let Err(broken) = self.real.check_invariants() {
                return Err(TestCaseError::fail(broken));
            }
            prop_assert_eq!(self.real.pending_count(), self.model.pending());
            prop_assert_eq!(self.real.round_cursor(), self.model.cursor);
            prop_assert_eq!(self.real.carry_class(), self.model.carry);
            for (index, class) in self.model.classes.iter().enumerate() {
                prop_assert_eq!(
                    self.real.deficit(index),
                    class.deficit,
                    "deficit of class {}",
                    index
                );
                prop_assert_eq!(self.real.has_backlog(index), !class.ready.is_empty());
                let real_blocked = self.real.class_queue(index).blocked_lane_count();
                prop_assert_eq!(real_blocked, class.blocked.len());
            }
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        #[test]
        fn queue_matches_reference_model(
            configs in prop::collection::vec(class_strategy(), 1..5),
            ops in prop::collection::vec(op_strategy(), 1..150),
        ) {
            let mut harness = Harness::new(&configs);
            for op in &ops {
                harness.apply(op)?;
            }
            // Drain everything: afterwards every counter and deficit is zero.
            harness.apply(&Op::RecheckAll)?;
            harness.busy = vec![false; WORKERS as usize];
            let ids: Vec<DeferredId> = harness.live_deferred.clone();
            for id in ids {
                prop_assert!(harness.real.make_ready(id, None));
                prop_assert!(harness.model.make_ready(id, None));
            }
            harness.live_deferred.clear();
            harness.apply(&Op::Drain)?;
            prop_assert_eq!(harness.real.pending_count(), 0);
            for class in 0..harness.real.num_classes() {
                prop_assert_eq!(harness.real.deficit(class), 0);
                prop_assert_eq!(harness.real.class_stats(class), ClassStats::default());
            }
        }
    }

    /// One fairness run: every class always backlogged and dispatchable.
    #[derive(Clone, Debug)]
    struct FairnessCase {
        quanta: Vec<u64>,
        /// Each class's request costs, cycled.
        costs: Vec<Vec<u64>>,
    }

    fn fairness_case() -> impl Strategy<Value = FairnessCase> {
        prop::collection::vec(
            (1..=1000u64, prop::collection::vec(1..=5000u64, 1..20)),
            2..6,
        )
        .prop_map(|classes| {
            let (quanta, costs) = classes.into_iter().unzip();
            FairnessCase { quanta, costs }
        })
    }

    /// Over a run of `pops` dispatches: the largest `|served_i - total * q_i / Q|` (tokens)
    /// at any point, and the largest `|served_i / total - q_i / Q|` at the end.
    fn service_gaps(case: &FairnessCase, pops: usize) -> (f64, f64) {
        let configs = case.quanta.iter().enumerate();
        let configs = configs.map(|(i, q)| ClassQueueConfig {
            name: format!("c{i}"),
            quantum_tokens: *q,
            queue_policy: QueuePolicy::Fcfs,
            request_limit_per_worker: None,
            raw_isl_token_limit_per_worker: None,
            cached_token_limit_per_worker: None,
        });
        let mut queue: PolicyQueue<u64> = PolicyQueue::new(configs.collect());
        let mut next_cost_index = vec![0usize; case.quanta.len()];
        let mut push_next = |queue: &mut PolicyQueue<u64>, class: usize| {
            let costs = &case.costs[class];
            let cost = costs[next_cost_index[class] % costs.len()];
            next_cost_index[class] += 1;
            let snapshot = QueueSnapshot::new(cost, 0);
            queue
                .enqueue(class, 0, snapshot, Placement::Any, 0, 0.0, 0.0, 1)
                .unwrap();
        };
        for class in 0..case.quanta.len() {
            push_next(&mut queue, class);
            push_next(&mut queue, class);
        }
        let quantum_sum: u64 = case.quanta.iter().sum();
        let mut served = vec![0u64; case.quanta.len()];
        let mut worst_gap = 0.0f64;
        for _ in 0..pops {
            let entry = queue.pop_next(&mut |_| true).expect("always backlogged");
            served[entry.class_index] += entry.snapshot.cost_tokens;
            push_next(&mut queue, entry.class_index);
            let total: u64 = served.iter().sum();
            for (served_tokens, quantum) in served.iter().zip(&case.quanta) {
                let ideal = total as f64 * *quantum as f64 / quantum_sum as f64;
                worst_gap = worst_gap.max((*served_tokens as f64 - ideal).abs());
            }
        }
        let total: u64 = served.iter().sum();
        let share_error = served
            .iter()
            .zip(&case.quanta)
            .map(|(s, q)| (*s as f64 / total as f64 - *q as f64 / quantum_sum as f64).abs())
            .fold(0.0, f64::max);
        (worst_gap, share_error)
    }

    /// Runs `check` on random fairness cases from `cases`, printing `label` and the worst
    /// gap (in units of `max_cost + max_quantum`) and share error seen.
    fn run_fairness<S: Strategy<Value = FairnessCase>>(
        label: &str,
        cases: S,
        check: impl Fn(&FairnessCase, f64, f64, f64) -> Result<(), TestCaseError>,
    ) {
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        // A fixed seed: the drift bound below is empirical, so the cases must not change.
        let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut runner = TestRunner::new_with_rng(Config::with_cases(FAIRNESS_CASES), rng);
        let worst_ratio = std::cell::Cell::new(0.0f64);
        let worst_share = std::cell::RefCell::new((0.0f64, None));
        let outcome = runner.run(&cases, |case| {
            let max_cost = case.costs.iter().flatten().copied().max().unwrap_or(1);
            let max_quantum = case.quanta.iter().copied().max().unwrap_or(1);
            let scale = (max_cost + max_quantum) as f64;
            let (gap, share_error) = service_gaps(&case, 3000);
            worst_ratio.set(worst_ratio.get().max(gap / scale));
            if share_error > worst_share.borrow().0 {
                *worst_share.borrow_mut() = (share_error, Some(case.clone()));
            }
            check(&case, gap, scale, share_error)
        });
        let (share_error, share_case) = worst_share.into_inner();
        eprintln!(
            "DRR fairness ({label}): worst gap {:.3} x (max_cost + max_quantum); \
             worst final share error {share_error:.5} in {share_case:?}",
            worst_ratio.get()
        );
        if let Err(failure) = outcome {
            panic!("{failure}");
        }
    }

    const FAIRNESS_CASES: u32 = 48;

    /// Cases whose every cost fits in the smallest quantum, so no call needs bulk credit.
    fn small_cost_case() -> impl Strategy<Value = FairnessCase> {
        fairness_case().prop_map(|mut case| {
            let smallest_quantum = case.quanta.iter().copied().min().unwrap_or(1);
            for cost in case.costs.iter_mut().flatten() {
                *cost = 1 + *cost % smallest_quantum;
            }
            case
        })
    }

    /// DRR fairness without bulk credit: every class backlogged, costs at most a quantum.
    /// Each class's served cost stays within `max_cost + max_quantum` of its
    /// quantum-proportional share however long the run: a class holds less than
    /// `max_cost + quantum` of credit and the classes are at most one ring round apart.
    #[test]
    fn service_stays_within_a_constant_of_the_share_when_heads_fit_a_quantum() {
        run_fairness("costs <= quantum", small_cost_case(), |_, gap, scale, _| {
            prop_assert!(gap <= scale, "gap {gap} tokens exceeds {scale}");
            Ok(())
        });
    }

    /// DRR fairness with oversized heads (quanta 1..1000, costs 1..5000). Faithful to Dynamo,
    /// bulk credit gives every class with a candidate the same number of virtual rounds, also
    /// the classes the final scan reaches after the winner; a plain round-by-round DRR would
    /// have credited those one round less. That extra round is kept, so the gap to the ideal
    /// share grows slowly with run length (about 0.1-1% of service) instead of staying within
    /// a constant. This test pins the size of that drift: the final share error stays below
    /// 0.10 (3000 random cases showed up to 0.075; round-by-round DRR stays below 0.001).
    #[test]
    fn service_share_stays_close_to_quanta_with_oversized_heads() {
        run_fairness(
            "costs up to 5000",
            fairness_case(),
            |_, _, _, share_error| {
                prop_assert!(share_error <= 0.10, "final share error {share_error}");
                Ok(())
            },
        );
    }
}
