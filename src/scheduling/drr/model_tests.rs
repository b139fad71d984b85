//! Randomised checks: the real queue against a plain reference model (exact 128-bit credit),
//! and DRR fairness.

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

fn op_strategy(raw_isl_tokens: BoxedStrategy<u64>) -> impl Strategy<Value = Op> {
    let enqueue = (
        any::<Index>(),
        raw_isl_tokens,
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

fn class_strategy(quantum_tokens: BoxedStrategy<u64>) -> impl Strategy<Value = ClassQueueConfig> {
    (
        quantum_tokens,
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
    /// Exact: the real queue saturates at `u64::MAX` (as Dynamo does), the model never does.
    deficit: u128,
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
        limits
            .iter()
            .any(|(per_worker, current)| per_worker.is_some_and(|l| *current >= l * worker_count))
    }

    /// Index in `ready` of the best entry at `placement`.
    fn head_at(&self, placement: Placement) -> Option<usize> {
        (0..self.ready.len())
            .filter(|&i| self.ready[i].placement == placement)
            .max_by_key(|&i| self.ready[i].key)
    }

    fn next_dispatchable(&mut self, busy: &[bool], calls: &mut u64) -> Option<(Placement, u64)> {
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
            let (gone, kept): (Vec<_>, Vec<_>) = class.ready.drain(..).partition(|e| pred(e.id));
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
                && u128::from(cost) <= self.classes[c].deficit
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
            if u128::from(cost) <= self.classes[i].deficit {
                return Some(self.pop_candidate(i, p, cost));
            }
            self.classes[i].deficit += u128::from(self.classes[i].config.quantum_tokens);
            if u128::from(cost) <= self.classes[i].deficit {
                return Some(self.pop_candidate(i, p, cost));
            }
        }
        let mut rounds: Option<u128> = None;
        for i in 0..n {
            if let Some((_, cost)) = candidates[i] {
                let q = u128::from(self.classes[i].config.quantum_tokens);
                let need = (u128::from(cost) - self.classes[i].deficit).div_ceil(q);
                rounds = Some(rounds.map_or(need, |r| r.min(need)));
            }
        }
        let rounds = rounds?;
        for i in 0..n {
            if candidates[i].is_some() {
                self.classes[i].deficit +=
                    u128::from(self.classes[i].config.quantum_tokens) * rounds;
            }
        }
        for offset in 0..n {
            let i = (self.cursor + offset) % n;
            if let Some((p, cost)) = candidates[i]
                && u128::from(cost) <= self.classes[i].deficit
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
        class.deficit -= u128::from(cost);
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
                    let repin =
                        repin.map(|p| p.map_or(Placement::Any, |w| Placement::Exact(worker(w))));
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
                key: PriorityKey::new(policy, strict, jump, offset_secs, snapshot.cost_tokens, seq),
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
            // Equal to the exact deficit: the queue's u64 credit never saturated.
            prop_assert_eq!(
                u128::from(self.real.deficit(index)),
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
        configs in prop::collection::vec(class_strategy((1..25u64).boxed()), 1..5),
        ops in prop::collection::vec(op_strategy((0..80u64).boxed()), 1..150),
    ) {
        run_against_model(&configs, &ops)?;
    }

    /// Quanta anywhere in what validation accepts (up to 2^64 - 1, as Dynamo's `usize`) and
    /// costs up to the token bound: the queue's u64 credit never saturates, so it keeps the
    /// exact (128-bit) model's deficits and makes every one of its decisions.
    #[test]
    fn credit_matches_exact_arithmetic_for_every_accepted_quantum(
        configs in prop::collection::vec(class_strategy(accepted_quantum()), 1..5),
        ops in prop::collection::vec(op_strategy(accepted_cost()), 1..150),
    ) {
        run_against_model(&configs, &ops)?;
    }
}

/// A quantum validation accepts (1 to 2^64 - 1), weighted to the ends where a deficit plus
/// a quantum passes `u64::MAX` and where bulk credit multiplies a small quantum.
fn accepted_quantum() -> BoxedStrategy<u64> {
    prop_oneof![
        1..=u64::MAX,
        (0..1u64 << 25).prop_map(|d| u64::MAX - d),
        (0..64u64).prop_map(|d| (1 << 63) + d),
        1..25u64,
    ]
    .boxed()
}

/// A request size up to the token bound (costs are at most it).
fn accepted_cost() -> BoxedStrategy<u64> {
    prop_oneof![0..80u64, 0..=crate::bounds::MAX_TOKENS].boxed()
}

/// Applies `ops` to the queue and the model, then drains both: afterwards every counter and
/// deficit is zero.
fn run_against_model(configs: &[ClassQueueConfig], ops: &[Op]) -> Result<(), TestCaseError> {
    let mut harness = Harness::new(configs);
    for op in ops {
        harness.apply(op)?;
    }
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
    Ok(())
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
