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
    /// Adds credit, saturating at `u64::MAX` as Dynamo's `usize` deficit does. Within the
    /// input bounds it never saturates, whatever the quantum (any `u64` from 1): a class
    /// earns only while `deficit < cost <= 2^24` tokens (the token bound), and its deficit
    /// starts from 0 after every reset. So the first quantum after a reset adds to 0, and
    /// a later one comes only once the class has been charged all but 2^24 of what it earned:
    /// for a quantum above 2^45 that is more than 2^21 dispatches of 2^24 tokens, twice the
    /// request bound; for a smaller one `deficit + quantum < 2^46`. (Were it ever to
    /// saturate, the class would hold `u64::MAX` as Dynamo's would, and pay.) The bulk step
    /// has its own bound ([`PolicyQueue::grant_bulk_credit`]). The property test against the
    /// exact (128-bit) reference model checks this over the whole quantum range.
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
    ///
    /// This never saturates for costs up to 2^63 tokens (the token bound keeps them at most
    /// 2^24): each class here earned a quantum in the ring scan and still could not pay, so
    /// `quantum <= deficit < cost`, and `rounds` is at most its own need
    /// `ceil((cost - deficit) / quantum)`, so `deficit + quantum × rounds < cost + quantum <
    /// 2 × cost`. The assertion checks that bound.
    fn grant_bulk_credit(&mut self, rounds: u64) {
        for (class, candidate) in self.classes.iter_mut().zip(&self.candidates) {
            if let Some((_, cost)) = *candidate {
                let quantum_tokens = class.config.quantum_tokens;
                let exact_tokens = u128::from(class.deficit_tokens)
                    + u128::from(quantum_tokens) * u128::from(rounds);
                assert!(
                    cost > 1 << 63 || exact_tokens < 2 * u128::from(cost),
                    "bulk credit of class {:?} overran its bound: deficit {} + {rounds} x {quantum_tokens} for cost {cost}",
                    class.config.name,
                    class.deficit_tokens
                );
                class.earn(quantum_tokens.saturating_mul(rounds));
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

    /// Checks the queue invariants (docs/scheduling.md#queue-invariants): `pending_count` and
    /// every class's totals equal the resident entries; a class with nothing ready has no credit;
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
mod tests;

#[cfg(test)]
mod model_tests;
