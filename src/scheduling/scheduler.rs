//! The scheduler actor as a sans-IO state machine: `handle_*` inputs, `poll_*` decisions.
//!
//! One `Scheduler` owns admission for one router: the policy-class queues (DRR across classes),
//! the load tracker, the KV overlap indexer and the worker set. Callers feed it inputs with the
//! current virtual time and then drain `poll_decision()` until it returns `None` (the contract
//! after *every* input, as in quinn-proto), and call `handle_tick` when `poll_timeout()` says.
//! It never reads a clock or global state; its only randomness is the seeded stream used to
//! break worker-cost ties.
//!
//! Every admission goes through [`Scheduler::admit_one`] (project load, select, skip booking for
//! a cancelled request, book, respond), serialised because the state machine has one owner:
//! selection and booking can never interleave with another admission.
//!
//! A request's lifecycle here: waiting (queued, ready or deferred) → booked (a `Dispatch`
//! decision was made) → running (the caller reported it sent, [`Scheduler::handle_dispatched`])
//! → over (finished, cancelled, rolled back or refused). Whatever the state, ending it releases
//! everything it holds, and its admission policy hears exactly one terminal status.

use super::admission::{AdmissionDecision, AdmissionPolicy, AdmissionStatus, ArrivalInfo};
use super::class_queue::{Placement, QueueEntry};
use super::drr::{ClassQueueConfig, DeferredId, PolicyQueue, QueueRejection};
use super::indexer::OverlapIndexer;
use super::load::{LoadError, LoadTracker};
use super::policy::{PolicyConfig, PolicyProfile};
use super::request::QueueSnapshot;
use super::router_config::RouterConfig;
use super::select::{
    RequestConstraints, SelectError, WorkerSet, best_cached_tokens, eligible_ranks,
};
use super::types::{KvEvent, RequestId, SeqHash, WorkerWithDpRank};
use crate::rng::{self, SimRng};
use crate::time::{SimDuration, SimTime};
use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;

/// The periodic recheck's interval, as Dynamo's router (60 s).
pub const DEFAULT_TICK_INTERVAL: SimDuration = SimDuration::from_ms(60_000);

/// Everything the scheduler needs to know before the first request.
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    pub router: RouterConfig,
    /// The resolved policy profile (see [`SchedulerConfig::new`]).
    pub profile: PolicyProfile,
    /// KV block size in tokens, shared with the workers.
    pub block_size_tokens: u64,
    /// Seed of the tie-break stream.
    pub seed: u64,
    /// The periodic recheck's interval ([`Scheduler::poll_timeout`]); 0 counts as 1 ns.
    pub tick_interval: SimDuration,
}

impl SchedulerConfig {
    /// Picks the profile as Dynamo does: the model's profile, else the root profile, else the
    /// synthetic `default` class built from the router's queue knobs.
    pub fn new(
        router: RouterConfig,
        policy: Option<&PolicyConfig>,
        model: Option<&str>,
        block_size_tokens: u64,
        seed: u64,
    ) -> Self {
        let profile = select_profile(&router, policy, model);
        SchedulerConfig {
            router,
            profile,
            block_size_tokens,
            seed,
            tick_interval: DEFAULT_TICK_INTERVAL,
        }
    }
}

/// The profile Dynamo's router runs with: the model's profile, else the root profile, else
/// the synthetic `default` class built from the router's queue knobs. The one place that
/// chooses it.
pub fn select_profile(
    router: &RouterConfig,
    policy: Option<&PolicyConfig>,
    model: Option<&str>,
) -> PolicyProfile {
    policy
        .and_then(|p| p.profile_for(model))
        .cloned()
        .unwrap_or_else(|| {
            PolicyProfile::synthetic(router.router_queue_policy, router.router_queue_threshold)
        })
}

/// A request as the router receives it.
#[derive(Clone, Debug)]
pub struct SchedulingRequest {
    pub id: RequestId,
    /// The class (or family) the request asks for; `None` means the default family.
    pub policy_class: Option<String>,
    pub isl_tokens: u64,
    /// Sequence hashes of the prompt's full KV blocks.
    pub block_hashes: Arc<[SeqHash]>,
    /// Soft priority (`nvext.agent_hints.priority`).
    pub priority: f64,
    /// Strict priority tier (`nvext.agent_hints.strict_priority`).
    pub strict_priority: u32,
    pub constraints: RequestConstraints,
}

impl SchedulingRequest {
    /// Tokens of the prompt a rank holding `overlap_blocks` leading blocks already has: the
    /// single definition of "cached tokens" used by snapshots, hints and selection.
    pub fn effective_cached_tokens(&self, overlap_blocks: u32, block_size_tokens: u64) -> u64 {
        (u64::from(overlap_blocks) * block_size_tokens).min(self.isl_tokens)
    }

    /// The prefill tokens the router books on the chosen rank (`None` when nothing to book).
    pub fn prefill_tokens(&self, cached_tokens: u64) -> Option<u64> {
        let uncached = self.isl_tokens - cached_tokens.min(self.isl_tokens);
        (uncached > 0).then_some(uncached)
    }

    /// The queue snapshot for the given cached tokens.
    pub fn snapshot(&self, cached_tokens: u64) -> QueueSnapshot {
        QueueSnapshot::new(self.isl_tokens, cached_tokens)
    }

    /// The placement a pinned request must keep.
    pub fn placement(&self) -> Placement {
        match self.constraints.pinned {
            Some(rank) => Placement::Exact(rank),
            None => Placement::Any,
        }
    }
}

/// Which way a request reached a worker.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DispatchPath {
    Immediate,
    Queued,
}

impl fmt::Display for DispatchPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DispatchPath::Immediate => "immediate",
            DispatchPath::Queued => "queued",
        })
    }
}

/// How a request's stream ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Aborted,
}

/// Why the scheduler refused a request (Dynamo's error taxonomy).
#[derive(Clone, Debug, PartialEq)]
pub enum SchedulerError {
    NoEndpoints,
    QueueRejected(QueueRejection),
    PinnedWorkerNotAllowed(WorkerWithDpRank),
    /// The request waited in the lane of a rank whose worker left the set (discovery).
    PinnedWorkerGone(WorkerWithDpRank),
    BookingFailed(String),
    DuplicateRequest(RequestId),
}

impl fmt::Display for SchedulerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedulerError::NoEndpoints => f.write_str("no eligible endpoints"),
            SchedulerError::QueueRejected(r) => write!(f, "{r}"),
            SchedulerError::PinnedWorkerNotAllowed(w) => write!(f, "pinned {w} is not allowed"),
            SchedulerError::PinnedWorkerGone(w) => write!(f, "pinned {w} left the worker set"),
            SchedulerError::BookingFailed(m) => write!(f, "booking failed: {m}"),
            SchedulerError::DuplicateRequest(id) => write!(f, "request {id} is already active"),
        }
    }
}

impl std::error::Error for SchedulerError {}

impl SchedulerError {
    /// A short stable name for outputs (`status` columns, counters).
    pub fn kind(&self) -> &'static str {
        self.error_kind().label()
    }

    /// Which error it is, without its details.
    pub fn error_kind(&self) -> SchedulerErrorKind {
        match self {
            SchedulerError::NoEndpoints => SchedulerErrorKind::NoEndpoints,
            SchedulerError::QueueRejected(_) => SchedulerErrorKind::QueueRejected,
            SchedulerError::PinnedWorkerNotAllowed(_) => SchedulerErrorKind::PinnedWorkerNotAllowed,
            SchedulerError::PinnedWorkerGone(_) => SchedulerErrorKind::PinnedWorkerGone,
            SchedulerError::BookingFailed(_) => SchedulerErrorKind::BookingFailed,
            SchedulerError::DuplicateRequest(_) => SchedulerErrorKind::DuplicateRequest,
        }
    }
}

/// The kind of a [`SchedulerError`]: what a request's outcome keeps of it (a byte, where the
/// error with its message or rank takes 32).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SchedulerErrorKind {
    NoEndpoints,
    QueueRejected,
    PinnedWorkerNotAllowed,
    PinnedWorkerGone,
    BookingFailed,
    DuplicateRequest,
}

impl SchedulerErrorKind {
    /// A short stable name for outputs (`status` columns, counters).
    pub fn label(self) -> &'static str {
        match self {
            SchedulerErrorKind::NoEndpoints => "no_endpoints",
            SchedulerErrorKind::QueueRejected => "queue_rejected",
            SchedulerErrorKind::PinnedWorkerNotAllowed => "pinned_worker_not_allowed",
            SchedulerErrorKind::PinnedWorkerGone => "pinned_worker_gone",
            SchedulerErrorKind::BookingFailed => "booking_failed",
            SchedulerErrorKind::DuplicateRequest => "duplicate_request",
        }
    }
}

impl From<SelectError> for SchedulerError {
    fn from(e: SelectError) -> Self {
        match e {
            SelectError::NoEndpoints => SchedulerError::NoEndpoints,
            SelectError::PinnedWorkerNotAllowed(w) => SchedulerError::PinnedWorkerNotAllowed(w),
        }
    }
}

/// A worker was chosen and booked for a request.
#[derive(Clone, Debug, PartialEq)]
pub struct Dispatch {
    pub id: RequestId,
    pub rank: WorkerWithDpRank,
    pub class_index: usize,
    pub path: DispatchPath,
    /// The router's view of the prompt tokens the rank already holds.
    pub cached_tokens: u64,
    pub overlap_blocks: u32,
    /// When the request entered the queue (queued path only).
    pub queued_at: Option<SimTime>,
}

/// What the caller must act on.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    Dispatch(Dispatch),
    Reject {
        id: RequestId,
        class_index: Option<usize>,
        error: SchedulerError,
    },
}

impl Decision {
    /// The request this decision is about.
    pub fn id(&self) -> RequestId {
        match self {
            Decision::Dispatch(d) => d.id,
            Decision::Reject { id, .. } => *id,
        }
    }
}

/// A waiting request: the payload of the policy queue.
#[derive(Clone, Debug)]
struct Queued {
    request: SchedulingRequest,
    enqueued_at: SimTime,
    /// Admitted through the class's admission policy (it hears status updates).
    policy_tracked: bool,
    /// The cached blocks per rank the index held when the request arrived: 1.6.1 selects and
    /// books a released request with these, never measuring again.
    overlaps: Vec<(WorkerWithDpRank, u32)>,
}

/// Where a live request is in its lifecycle (see the module docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RequestState {
    /// In its class's queue, ready or deferred, holding no booking.
    Waiting { class_index: usize },
    /// Booked on `rank`; the caller has not yet reported it sent to the worker.
    Booked {
        rank: WorkerWithDpRank,
        class_index: usize,
    },
    /// Booked on `rank` and reported sent: running there.
    Running {
        rank: WorkerWithDpRank,
        class_index: usize,
    },
}

/// A request in the policy queue, by id.
#[derive(Copy, Clone, Debug)]
struct Waiting {
    class_index: usize,
    policy_tracked: bool,
}

/// A booked request, by id.
#[derive(Copy, Clone, Debug)]
struct Active {
    rank: WorkerWithDpRank,
    class_index: usize,
    policy_tracked: bool,
    /// The caller reported it sent to its worker: the policy heard `Dispatched`.
    dispatched: bool,
}

/// The scheduler state machine. See the module docs for the call contract.
pub struct Scheduler {
    config: SchedulerConfig,
    started_at: SimTime,
    queue: PolicyQueue<Queued>,
    load: LoadTracker,
    indexer: OverlapIndexer,
    workers: WorkerSet,
    rng: SimRng,
    policies: Vec<Option<Box<dyn AdmissionPolicy>>>,
    active: FxHashMap<RequestId, Active>,
    waiting: FxHashMap<RequestId, Waiting>,
    deferred: FxHashMap<RequestId, DeferredId>,
    decisions: VecDeque<Decision>,
    /// When the next periodic recheck is due: set while requests wait, `None` otherwise.
    next_tick: Option<SimTime>,
    /// The ranks' costs kept for requests that overlap no rank.
    kept: selection::KeptCosts,
    /// Workers draining: out of `workers` (nothing new is placed on them), their bookings,
    /// load rows and cached blocks kept until they leave.
    draining: BTreeSet<u64>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("pending", &self.queue.pending_count())
            .field("active", &self.active.len())
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler that starts at `now` (FCFS ages are measured from here) with `workers`.
    pub fn new(config: SchedulerConfig, workers: WorkerSet, now: SimTime) -> Self {
        let classes = config
            .profile
            .classes()
            .iter()
            .map(|c| ClassQueueConfig {
                name: c.name.clone(),
                quantum_tokens: c.quantum_tokens,
                queue_policy: c.queue_policy,
                request_limit_per_worker: c.request_queue_limit_per_worker,
                raw_isl_token_limit_per_worker: c.raw_isl_token_queue_limit_per_worker,
                cached_token_limit_per_worker: c.cached_token_queue_limit_per_worker,
            })
            .collect::<Vec<_>>();
        let policies = classes.iter().map(|_| None).collect();
        let mut load = LoadTracker::new();
        for rank in workers.ranks() {
            load.add_rank(rank);
        }
        Scheduler {
            rng: rng::stream(config.seed, "router/tie-break"),
            config,
            started_at: now,
            queue: PolicyQueue::new(classes),
            load,
            indexer: OverlapIndexer::new(),
            workers,
            policies,
            active: FxHashMap::default(),
            waiting: FxHashMap::default(),
            deferred: FxHashMap::default(),
            decisions: VecDeque::new(),
            next_tick: None,
            kept: selection::KeptCosts::default(),
            draining: BTreeSet::new(),
        }
    }

    // ---- getters -----------------------------------------------------------------------

    pub fn profile(&self) -> &PolicyProfile {
        &self.config.profile
    }

    /// Whether a class has requests ready to dispatch.
    pub fn has_backlog(&self, class_index: usize) -> bool {
        self.queue.has_backlog(class_index)
    }

    /// A class's unspent DRR credit.
    pub fn deficit(&self, class_index: usize) -> u64 {
        self.queue.deficit(class_index)
    }

    pub fn load(&self) -> &LoadTracker {
        &self.load
    }

    pub fn workers(&self) -> &WorkerSet {
        &self.workers
    }

    /// Requests waiting in the policy queues (ready or deferred).
    pub fn pending_count(&self) -> usize {
        self.queue.pending_count()
    }

    /// Requests booked on a worker and not yet finished.
    pub fn active_count(&self) -> usize {
        self.active.len()
    }

    /// Where request `id` is, or `None` once it is over (finished, cancelled, refused) or
    /// was never seen.
    pub fn request_state(&self, id: RequestId) -> Option<RequestState> {
        if let Some(a) = self.active.get(&id) {
            let (rank, class_index) = (a.rank, a.class_index);
            return Some(if a.dispatched {
                RequestState::Running { rank, class_index }
            } else {
                RequestState::Booked { rank, class_index }
            });
        }
        let w = self.waiting.get(&id)?;
        Some(RequestState::Waiting {
            class_index: w.class_index,
        })
    }

    /// Checks the queue's and the load tracker's invariants and the scheduler's own
    /// bookkeeping. For tests and debug runs: the checker beside the model.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.queue.check_invariants()?;
        self.load.check_invariants()?;
        if self.waiting.len() != self.queue.pending_count() {
            return Err(format!(
                "{} waiting ids but {} queued entries",
                self.waiting.len(),
                self.queue.pending_count()
            ));
        }
        let booked = self.load.request_count();
        if booked != self.active.len() {
            return Err(format!(
                "{booked} booked requests but {} active",
                self.active.len()
            ));
        }
        // A recheck is due exactly while requests wait for a worker set that has a worker.
        if self.next_tick.is_some() != self.needs_recheck() {
            return Err(format!(
                "next tick {:?} with {} requests waiting",
                self.next_tick,
                self.queue.pending_count()
            ));
        }
        self.check_lifecycle()
    }

    /// Each request is in one state, and each booked one holds exactly its own booking.
    fn check_lifecycle(&self) -> Result<(), String> {
        let mut active: Vec<_> = self.active.iter().collect();
        active.sort_unstable_by_key(|(id, _)| **id);
        for (id, a) in active {
            if self.waiting.contains_key(id) {
                return Err(format!("request {id} is both waiting and booked"));
            }
            if self.load.rank_of(*id) != Some(a.rank) {
                return Err(format!(
                    "request {id} is active on {} but not booked there",
                    a.rank
                ));
            }
        }
        let mut deferred: Vec<_> = self.deferred.keys().collect();
        deferred.sort_unstable();
        match deferred.iter().find(|id| !self.waiting.contains_key(id)) {
            Some(id) => Err(format!("deferred request {id} is not waiting")),
            None => Ok(()),
        }
    }

    // ---- commands ----------------------------------------------------------------------

    /// Installs an admission policy for one class (by class name). Only tests install one:
    /// routersim's scenarios run no admission policy (docs/scheduling.md#not-modelled).
    #[cfg(test)]
    pub fn set_admission_policy(
        &mut self,
        class_name: &str,
        policy: Box<dyn AdmissionPolicy>,
    ) -> Result<(), String> {
        let index = self
            .config
            .profile
            .classes()
            .iter()
            .position(|c| c.name == class_name)
            .ok_or_else(|| format!("no class named \"{class_name}\""))?;
        self.policies[index] = Some(policy);
        Ok(())
    }

    // ---- inputs ------------------------------------------------------------------------

    /// A request arrives: it is dispatched now, queued, or rejected.
    pub fn handle_arrival(&mut self, now: SimTime, request: SchedulingRequest) {
        let id = request.id;
        if self.active.contains_key(&id) || self.waiting.contains_key(&id) {
            self.reject(id, None, SchedulerError::DuplicateRequest(id));
            return;
        }
        if let Some(pin) = request.constraints.pinned
            && request
                .constraints
                .allowed_workers
                .as_ref()
                .is_some_and(|a| !a.contains(&pin.worker_id))
        {
            self.reject(id, None, SchedulerError::PinnedWorkerNotAllowed(pin));
            return;
        }
        let (class_index, snapshot) = self.classify(&request);
        let decision = self.admission_decision(now, class_index, &request);
        let (deferred, placement) = match decision {
            AdmissionDecision::Defer => (true, request.placement()),
            AdmissionDecision::Ready(Some(p)) => (false, p),
            AdmissionDecision::Ready(None) | AdmissionDecision::Bypass => {
                (false, request.placement())
            }
        };
        let policy_tracked = decision != AdmissionDecision::Bypass;
        let class = &self.config.profile.classes()[class_index];
        let should_queue = deferred
            || (class.queueing_enabled()
                && (self.queue.has_backlog(class_index)
                    || self.all_ranks_busy(class_index, &request.constraints, placement)));
        if !should_queue {
            self.admit_one(
                now,
                request,
                class_index,
                DispatchPath::Immediate,
                None,
                policy_tracked,
            );
            self.after_input(now);
            return;
        }
        let snapshot = snapshot.unwrap_or_else(|| self.sample_snapshot(&request));
        let queued = Queued {
            overlaps: self.overlaps(&request),
            request,
            enqueued_at: now,
            policy_tracked,
        };
        self.enqueue(now, class_index, queued, snapshot, placement, deferred);
        // Dynamo drains after every enqueue, so a request for an idle worker is not held
        // behind another worker's blocked lane (older entries still go first). Without pins
        // this dispatches nothing: after every drain each backlogged class is busy, and load
        // only grows until the next drain.
        if let Placement::Exact(rank) = placement {
            self.queue.recheck_worker(rank);
        }
        self.drain(now);
        self.after_input(now);
    }

    /// The first token reached the router: the request's prefill load is released.
    pub fn handle_first_token(&mut self, now: SimTime, id: RequestId) {
        if let Some(active) = self.active.get(&id) {
            let rank = active.rank;
            self.load.mark_prefill_completed(id);
            self.update(now, Some(rank));
        }
        self.after_input(now);
    }

    /// The caller sent a booked request to its worker (in Dynamo: the backend accepted it).
    /// Only now does the class's admission policy hear `Dispatched`. Ignored for a request that
    /// is not booked, or was already reported.
    pub fn handle_dispatched(&mut self, now: SimTime, id: RequestId) {
        if let Some(active) = self.active.get_mut(&id)
            && !active.dispatched
        {
            active.dispatched = true;
            let (class_index, tracked) = (active.class_index, active.policy_tracked);
            self.notify(now, class_index, tracked, id, AdmissionStatus::Dispatched);
        }
        self.after_input(now);
    }

    /// The stream ended: the request's booking is released and its policy told. For a
    /// request still waiting this withdraws it as [`handle_cancel`](Self::handle_cancel)
    /// does, its policy hearing `outcome` (Dynamo's `Finished` for a queued request).
    /// Ignored for a request that is already over.
    pub fn handle_finished(&mut self, now: SimTime, id: RequestId, outcome: Outcome) {
        let status = match outcome {
            Outcome::Completed => AdmissionStatus::Completed,
            Outcome::Aborted => AdmissionStatus::Aborted,
        };
        self.end(now, id, status);
        self.after_input(now);
    }

    /// Delivering a dispatch to the worker failed: roll the booking back.
    pub fn handle_delivery_failed(&mut self, now: SimTime, id: RequestId) {
        self.handle_finished(now, id, Outcome::Aborted);
    }

    /// The client went away. Whatever the request's state, what it holds is released and its
    /// policy hears `Aborted` once (`Dispatched` first only if it was dispatched):
    /// - waiting: it leaves its queue now, as 1.6.1's replay takes it out (its class's
    ///   counts and queue limit drop at once, and a class left empty loses its credit); the
    ///   queues are not drained for it;
    /// - booked, not yet dispatched: the booking is rolled back (a `Dispatch` decision not
    ///   yet polled is withdrawn);
    /// - running: the booking is freed;
    /// - refused, the `Reject` not yet polled: the `Reject` is withdrawn (the policy heard
    ///   `Aborted` when it was made, and hears nothing more);
    /// - over (finished, refused and polled, already cancelled) or unknown: nothing happens.
    pub fn handle_cancel(&mut self, now: SimTime, id: RequestId) {
        self.end(now, id, AdmissionStatus::Aborted);
        self.after_input(now);
    }

    /// A hint: the workers' caches hold up to `blocks` blocks in all, so the overlap index
    /// makes room for them at once instead of growing while they fill.
    pub fn reserve_cached_blocks(&mut self, blocks: usize) {
        self.indexer.reserve(blocks);
    }

    /// A KV event from a worker updates the overlap index.
    pub fn handle_kv_event(&mut self, now: SimTime, event: &KvEvent) {
        self.indexer.apply(event);
        self.after_input(now);
    }

    /// The periodic recheck, due at [`poll_timeout`](Self::poll_timeout): every lane is
    /// re-examined. A call at any other time rechecks all the same, and the next one is due
    /// an interval on.
    pub fn handle_tick(&mut self, now: SimTime) {
        self.next_tick = None;
        self.update(now, None);
        self.after_input(now);
    }

    /// Refuses a request taken out of its queue: its policy hears `Aborted`.
    fn refuse_taken(&mut self, now: SimTime, entry: QueueEntry<Queued>, error: SchedulerError) {
        let id = entry.payload.request.id;
        self.waiting.remove(&id);
        self.deferred.remove(&id);
        let (class_index, tracked) = (entry.class_index, entry.payload.policy_tracked);
        self.notify(now, class_index, tracked, id, AdmissionStatus::Aborted);
        self.reject(id, Some(class_index), error);
    }

    // ---- outputs -----------------------------------------------------------------------

    /// The next decision to act on, in the order they were made.
    pub fn poll_decision(&mut self) -> Option<Decision> {
        self.decisions.pop_front()
    }

    /// When the core next needs [`handle_tick`](Self::handle_tick), if it does: while
    /// requests wait, the first point after the input that made them wait (or after the last
    /// tick) on a grid every `tick_interval` from the scheduler's start
    /// (docs/scheduling.md#draining-the-queues). `None` while nothing waits.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        self.next_tick
    }

    // ---- internals ---------------------------------------------------------------------

    /// Resolves the class; samples the snapshot when classification needs cached tokens.
    fn classify(&self, request: &SchedulingRequest) -> (usize, Option<QueueSnapshot>) {
        let profile = &self.config.profile;
        let requested = request.policy_class.as_deref();
        if let Some(index) = profile.direct_class_index(requested) {
            return (index, None);
        }
        let snapshot = self.sample_snapshot(request);
        let index = profile.resolve_class_index(requested, snapshot.uncached_tokens);
        (index, Some(snapshot))
    }

    /// The request's snapshot from the best cached tokens among the ranks it may use
    /// (the pinned rank's when pinned).
    fn sample_snapshot(&self, request: &SchedulingRequest) -> QueueSnapshot {
        let overlaps = self.overlaps(request);
        let block_size = self.config.block_size_tokens;
        let cached = best_cached_tokens(&self.workers, &request.constraints, &overlaps, block_size);
        request.snapshot(cached.min(request.isl_tokens))
    }

    fn admission_decision(
        &mut self,
        now: SimTime,
        class_index: usize,
        request: &SchedulingRequest,
    ) -> AdmissionDecision {
        let info = ArrivalInfo {
            id: request.id,
            isl_tokens: request.isl_tokens,
            priority: request.priority,
            strict_priority: request.strict_priority,
        };
        match &mut self.policies[class_index] {
            Some(policy) => policy.on_arrival(now, &info),
            None => AdmissionDecision::Bypass,
        }
    }

    fn enqueue(
        &mut self,
        now: SimTime,
        class_index: usize,
        queued: Queued,
        snapshot: QueueSnapshot,
        placement: Placement,
        deferred: bool,
    ) {
        let id = queued.request.id;
        let (priority, strict) = (queued.request.priority, queued.request.strict_priority);
        let tracked = queued.policy_tracked;
        let offset_secs = now.saturating_since(self.started_at).as_ns() as f64 / 1e9;
        let worker_count = self.workers.worker_count();
        let result = if deferred {
            self.queue
                .enqueue_deferred(
                    class_index,
                    queued,
                    snapshot,
                    placement,
                    strict,
                    priority,
                    offset_secs,
                    worker_count,
                )
                .map(|d| {
                    self.deferred.insert(id, d);
                })
        } else {
            self.queue.enqueue(
                class_index,
                queued,
                snapshot,
                placement,
                strict,
                priority,
                offset_secs,
                worker_count,
            )
        };
        match result {
            Ok(()) => {
                let waiting = Waiting {
                    class_index,
                    policy_tracked: tracked,
                };
                self.waiting.insert(id, waiting);
            }
            Err(rejection) => {
                self.notify(now, class_index, tracked, id, AdmissionStatus::Aborted);
                self.reject(
                    id,
                    Some(class_index),
                    SchedulerError::QueueRejected(rejection),
                );
            }
        }
    }

    fn make_ready(&mut self, id: RequestId) {
        if let Some(d) = self.deferred.remove(&id) {
            self.queue.make_ready(d, None);
        }
    }

    /// Is every rank this request may use over its class's busy threshold?
    /// (docs/scheduling.md#busy-thresholds)
    fn all_ranks_busy(
        &self,
        class_index: usize,
        constraints: &RequestConstraints,
        placement: Placement,
    ) -> bool {
        all_ranks_busy(
            &self.config.profile,
            &self.workers,
            &self.load,
            class_index,
            constraints,
            placement,
        )
    }

    /// Re-examines the queues after capacity may have changed
    /// (docs/scheduling.md#draining-the-queues).
    fn update(&mut self, now: SimTime, rank: Option<WorkerWithDpRank>) {
        if self.queue.pending_count() == 0 || !self.config.profile.any_queueing_enabled() {
            return;
        }
        match rank {
            Some(r) => self.queue.recheck_worker(r),
            None => self.queue.recheck_all_workers(),
        }
        self.drain(now);
    }

    /// Dispatches queued requests while their targets can take them, in DRR order.
    fn drain(&mut self, now: SimTime) {
        // Each iteration removes one entry, so the loop ends within the queue's length.
        for _ in 0..self.queue.pending_count() {
            let (profile, workers, load) = (&self.config.profile, &self.workers, &self.load);
            let mut dispatchable = |e: &QueueEntry<Queued>| {
                !all_ranks_busy(
                    profile,
                    workers,
                    load,
                    e.class_index,
                    &e.payload.request.constraints,
                    e.placement,
                )
            };
            let Some(entry) = self.queue.pop_next(&mut dispatchable) else {
                break;
            };
            let id = entry.payload.request.id;
            self.waiting.remove(&id);
            let mut request = entry.payload.request;
            if let Placement::Exact(rank) = entry.placement {
                request.constraints.pinned = Some(rank);
            }
            let queued = Some((entry.payload.enqueued_at, entry.payload.overlaps));
            self.admit_one(
                now,
                request,
                entry.class_index,
                DispatchPath::Queued,
                queued,
                entry.payload.policy_tracked,
            );
        }
    }

    /// The one admission path (docs/scheduling.md#the-admission-path): project, select,
    /// book, respond.
    ///
    /// A queued request (`queued` = when it was queued and the cached blocks per rank then)
    /// is selected and booked with the cache it saw when it arrived: Dynamo 1.6.1 does not
    /// re-measure at release (docs/fidelity.md).
    fn admit_one(
        &mut self,
        now: SimTime,
        request: SchedulingRequest,
        class_index: usize,
        path: DispatchPath,
        queued: Option<(SimTime, Vec<(WorkerWithDpRank, u32)>)>,
        policy_tracked: bool,
    ) {
        let (queued_at, overlaps) = queued.unzip();
        let id = request.id;
        // Made once for both the projection and the booking.
        let tracked_hashes = self.tracked_hashes(&request);
        let selection = match self.select(now, &request, &tracked_hashes, overlaps) {
            Ok(s) => s,
            Err(error) => {
                self.notify(
                    now,
                    class_index,
                    policy_tracked,
                    id,
                    AdmissionStatus::Aborted,
                );
                self.reject(id, Some(class_index), error);
                return;
            }
        };
        let cached_tokens = request
            .effective_cached_tokens(selection.overlap_blocks, self.config.block_size_tokens);
        let hint = match self.config.router.router_track_prefill_tokens {
            true => request.prefill_tokens(cached_tokens),
            false => None,
        };
        if let Err(e) = self
            .load
            .add_request(now, id, selection.rank, &tracked_hashes, hint)
        {
            let message = match e {
                LoadError::DuplicateRequest(_) => {
                    format!("request {id} already has an active booking")
                }
                other => other.to_string(),
            };
            self.notify(
                now,
                class_index,
                policy_tracked,
                id,
                AdmissionStatus::Aborted,
            );
            self.reject(
                id,
                Some(class_index),
                SchedulerError::BookingFailed(message),
            );
            return;
        }
        // The policy hears `Dispatched` only when the caller reports the request sent
        // (`handle_dispatched`), so a booking rolled back before that is never "dispatched".
        self.active.insert(
            id,
            Active {
                rank: selection.rank,
                class_index,
                policy_tracked,
                dispatched: false,
            },
        );
        self.decisions.push_back(Decision::Dispatch(Dispatch {
            id,
            rank: selection.rank,
            class_index,
            path,
            cached_tokens,
            overlap_blocks: selection.overlap_blocks,
            queued_at,
        }));
    }

    /// Ends request `id` in whatever state it is in; a no-op once it is over, except that a
    /// `Reject` the caller has not polled yet is withdrawn: to the caller the request was still
    /// waiting, and no decision may follow its end.
    fn end(&mut self, now: SimTime, id: RequestId, status: AdmissionStatus) {
        self.withdraw_unpolled(id);
        if let Some(rank) = self.release_active(now, id, status) {
            self.update(now, Some(rank));
        } else if self.waiting.contains_key(&id) {
            self.withdraw_waiting(now, id, status);
        }
    }

    /// Releases a booked request: withdraws its unpolled `Dispatch` if any, frees its booking
    /// and tells its policy. Returns the rank it held, or `None` if it was not booked.
    fn release_active(
        &mut self,
        now: SimTime,
        id: RequestId,
        status: AdmissionStatus,
    ) -> Option<WorkerWithDpRank> {
        let active = self.active.remove(&id)?;
        self.withdraw_unpolled(id);
        self.load.free(id);
        self.notify(now, active.class_index, active.policy_tracked, id, status);
        Some(active.rank)
    }

    /// Drops every decision about `id` still in the outbox. The caller never acted on it, so it
    /// must never see it once the request is over (its policy already heard what it made).
    fn withdraw_unpolled(&mut self, id: RequestId) {
        self.decisions.retain(|d| d.id() != id);
    }

    /// Takes a waiting request out of its queue now (1.6.1's replay removes a cancelled
    /// entry at once; O(queued), as its removal is).
    fn withdraw_waiting(&mut self, now: SimTime, id: RequestId, status: AdmissionStatus) {
        let Some(&waiting) = self.waiting.get(&id) else {
            return;
        };
        let removed = match self.deferred.remove(&id) {
            Some(d) => self.queue.remove_deferred(d).into_iter().collect(),
            None => self.queue.take_if(|q| q.request.id == id),
        };
        debug_assert_eq!(removed.len(), 1, "a waiting request has one queue entry");
        self.waiting.remove(&id);
        let tracked = waiting.policy_tracked;
        self.notify(now, waiting.class_index, tracked, id, status);
    }

    fn notify(
        &mut self,
        now: SimTime,
        class_index: usize,
        tracked: bool,
        id: RequestId,
        status: AdmissionStatus,
    ) {
        if !tracked {
            return;
        }
        if let Some(policy) = &mut self.policies[class_index] {
            policy.on_status(now, id, status);
        }
    }

    fn reject(&mut self, id: RequestId, class_index: Option<usize>, error: SchedulerError) {
        self.decisions.push_back(Decision::Reject {
            id,
            class_index,
            error,
        });
    }

    /// Releases what admission policies asked to release, then drains once.
    fn after_input(&mut self, now: SimTime) {
        let mut released = false;
        for class_index in 0..self.policies.len() {
            // Bounded: each release removes one deferred request.
            for _ in 0..=self.deferred.len() {
                let Some(policy) = &mut self.policies[class_index] else {
                    break;
                };
                let Some(id) = policy.poll_make_ready() else {
                    break;
                };
                self.make_ready(id);
                released = true;
            }
        }
        if released {
            self.update(now, None);
        }
        self.arm_tick(now);
    }

    /// Whether requests wait that a recheck could release: with no worker at all, nothing
    /// can be released until one joins (which drains the queues itself).
    fn needs_recheck(&self) -> bool {
        self.queue.pending_count() > 0 && self.workers.worker_count() > 0
    }

    /// Keeps [`poll_timeout`](Self::poll_timeout) set exactly while requests wait for a
    /// worker set that has a worker: a queue that fills at `now` needs its recheck at the
    /// next grid point after `now`.
    fn arm_tick(&mut self, now: SimTime) {
        if !self.needs_recheck() {
            self.next_tick = None;
        } else if self.next_tick.is_none() {
            let interval = self.config.tick_interval.as_ns().max(1);
            let since_start = now.saturating_since(self.started_at).as_ns();
            let next = (since_start / interval + 1).saturating_mul(interval);
            self.next_tick = Some(SimTime::from_ns(
                self.started_at.as_ns().saturating_add(next),
            ));
        }
    }
}

/// The busy test (docs/scheduling.md#busy-thresholds) for one request of one class.
fn all_ranks_busy(
    profile: &PolicyProfile,
    workers: &WorkerSet,
    load: &LoadTracker,
    class_index: usize,
    constraints: &RequestConstraints,
    placement: Placement,
) -> bool {
    if workers.worker_count() == 0 {
        // 1.6.1's replay: an empty fleet is busy, and a request waits for a worker to join.
        return true;
    }
    let class = &profile.classes()[class_index];
    let busy = |rank: WorkerWithDpRank| {
        let max_batched = workers
            .get(rank.worker_id)
            .and_then(|w| w.max_num_batched_tokens);
        class.rank_is_busy(load.active_prefill_tokens(rank), max_batched)
    };
    if let Placement::Exact(rank) = placement {
        // An invalid pin is "not busy" so that selection reports the real error.
        let valid = eligible_ranks(
            workers,
            &RequestConstraints {
                pinned: Some(rank),
                ..constraints.clone()
            },
        )
        .is_ok();
        return valid && busy(rank);
    }
    let ranks = eligible_ranks(workers, constraints).unwrap_or_default();
    let busy_count = ranks.iter().filter(|r| busy(**r)).count();
    class.pool_is_busy(busy_count, ranks.len())
}

mod selection;

mod discovery;

#[cfg(test)]
mod drain_tests;
#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod release_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::admission::ConcurrencyCap;
    use crate::scheduling::select::WorkerConfig;

    impl Scheduler {
        /// How many blocks the overlap index holds without growing.
        pub(crate) fn index_room(&self) -> usize {
            self.indexer.room()
        }
    }

    pub(super) const TWO_CLASSES: &str = "
default_policy_family: regular
uncached_isl_buckets:
  - {min_tokens: 0, bucket: all}
policy_classes:
  - {name: premium, policy_family: premium, cache_bucket: all, quantum: 512,
     prefill_busy_threshold: 1536, request_queue_limit_per_worker: 2}
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 128,
     prefill_busy_threshold: 1536, request_queue_limit_per_worker: 2}
";

    pub(super) fn workers(n: u64) -> WorkerSet {
        let mut set = WorkerSet::new();
        for id in 0..n {
            set.insert(id, WorkerConfig::default());
        }
        set
    }

    pub(super) fn scheduler(policy: Option<&str>, worker_count: u64) -> Scheduler {
        let policy = policy.map(|p| PolicyConfig::from_yaml_str(p, None).expect("valid policy"));
        let config = SchedulerConfig::new(RouterConfig::default(), policy.as_ref(), None, 64, 7);
        Scheduler::new(config, workers(worker_count), SimTime::ZERO)
    }

    pub(super) fn request(id: u64, class: &str, isl_tokens: u64) -> SchedulingRequest {
        // Unique blocks per request, so no prefix is shared.
        let hashes: Vec<SeqHash> = (0..isl_tokens / 64).map(|b| id << 32 | b).collect();
        SchedulingRequest {
            id: RequestId(id),
            policy_class: Some(class.to_string()),
            isl_tokens,
            block_hashes: hashes.into(),
            priority: 0.0,
            strict_priority: 0,
            constraints: RequestConstraints::default(),
        }
    }

    pub(super) fn decisions(s: &mut Scheduler) -> Vec<Decision> {
        std::iter::from_fn(|| s.poll_decision()).collect()
    }

    pub(super) fn dispatched(d: &[Decision]) -> Vec<(u64, DispatchPath)> {
        d.iter()
            .filter_map(|d| match d {
                Decision::Dispatch(x) => Some((x.id.0, x.path)),
                Decision::Reject { .. } => None,
            })
            .collect()
    }

    pub(super) fn t(ms: u64) -> SimTime {
        SimTime::from_ns(ms * 1_000_000)
    }

    /// Two requests with the same prompt on one rank: a router that assumes KV reuse counts
    /// their blocks once, one that does not counts each request's blocks apart.
    #[test]
    fn only_a_router_assuming_kv_reuse_counts_a_shared_prompt_once() {
        for (assume_kv_reuse, blocks) in [(true, 8), (false, 16)] {
            let router = RouterConfig {
                router_assume_kv_reuse: assume_kv_reuse,
                ..RouterConfig::default()
            };
            let config = SchedulerConfig::new(router, None, None, 64, 7);
            let mut s = Scheduler::new(config, workers(1), SimTime::ZERO);
            for id in 0..2 {
                let mut shared = request(id, "regular", 8 * 64);
                shared.block_hashes = (1..=8).collect::<Vec<SeqHash>>().into();
                s.handle_arrival(t(0), shared);
            }
            assert_eq!(dispatched(&decisions(&mut s)).len(), 2);
            let rank = WorkerWithDpRank::new(0, 0);
            assert_eq!(
                s.load.active_blocks(rank),
                blocks,
                "assume {assume_kv_reuse}"
            );
            s.check_invariants().unwrap();
        }
    }

    #[test]
    fn busy_threshold_is_strict_fourth_512_request_admitted_fifth_queued() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        for id in 0..5 {
            s.handle_arrival(t(0), request(id, "premium", 512));
        }
        let d = decisions(&mut s);
        let immediate: Vec<u64> = dispatched(&d).iter().map(|x| x.0).collect();
        assert_eq!(
            immediate,
            vec![0, 1, 2, 3],
            "1536 active tokens is not busy; 2048 is"
        );
        assert_eq!(s.pending_count(), 1);
        assert_eq!(
            s.load().active_prefill_tokens(WorkerWithDpRank::new(0, 0)),
            2048
        );
        s.check_invariants().unwrap();
    }

    /// Four premium requests of 512 tokens on one worker make it busy: the fifth queues.
    fn one_busy_worker_and_one_queued(s: &mut Scheduler, at: SimTime) {
        for id in 0..5 {
            s.handle_arrival(at, request(id, "premium", 512));
        }
        decisions(s);
        assert_eq!(s.pending_count(), 1);
    }

    #[test]
    fn no_tick_is_needed_before_a_request_waits() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        assert_eq!(s.poll_timeout(), None);
        s.handle_arrival(t(3), request(0, "premium", 512));
        assert_eq!(
            dispatched(&decisions(&mut s)),
            vec![(0, DispatchPath::Immediate)]
        );
        assert_eq!(
            s.poll_timeout(),
            None,
            "a dispatched request waits for nothing"
        );
    }

    #[test]
    fn a_waiting_request_needs_a_tick_at_the_next_interval_point() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        one_busy_worker_and_one_queued(&mut s, t(5));
        assert_eq!(s.poll_timeout(), Some(t(60_000)));
        // Later inputs while it waits keep the same instant.
        s.handle_arrival(t(59_999), request(9, "regular", 512));
        decisions(&mut s);
        assert_eq!(s.poll_timeout(), Some(t(60_000)));
        s.check_invariants().unwrap();
    }

    #[test]
    fn a_tick_while_requests_wait_needs_the_next_one_an_interval_on() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        one_busy_worker_and_one_queued(&mut s, t(0));
        s.handle_tick(t(60_000));
        assert!(decisions(&mut s).is_empty(), "the worker is still busy");
        assert_eq!(s.poll_timeout(), Some(t(120_000)));
        // A late tick (here 30 s late) schedules the next one on the grid, not 60 s later.
        s.handle_tick(t(150_000));
        assert_eq!(s.poll_timeout(), Some(t(180_000)));
        s.check_invariants().unwrap();
    }

    #[test]
    fn no_tick_is_needed_once_the_queue_drains() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        one_busy_worker_and_one_queued(&mut s, t(0));
        s.handle_first_token(t(10), RequestId(0));
        assert_eq!(
            dispatched(&decisions(&mut s)),
            vec![(4, DispatchPath::Queued)]
        );
        assert_eq!(s.poll_timeout(), None);
        // Waiting again later: the next grid point after then, not the one first due.
        one_busy_worker_and_one_queued_again(&mut s, t(70_000));
        assert_eq!(s.poll_timeout(), Some(t(120_000)));
    }

    /// Fills the worker again after [`one_busy_worker_and_one_queued`] (ids 10 to 14).
    fn one_busy_worker_and_one_queued_again(s: &mut Scheduler, at: SimTime) {
        for id in 10..15 {
            s.handle_arrival(at, request(id, "premium", 512));
        }
        decisions(s);
        assert!(s.pending_count() >= 1);
    }

    #[test]
    fn the_tick_interval_is_the_configured_one() {
        let policy = PolicyConfig::from_yaml_str(TWO_CLASSES, None).unwrap();
        let mut config = SchedulerConfig::new(RouterConfig::default(), Some(&policy), None, 64, 7);
        config.tick_interval = SimDuration::from_ms(250);
        let mut s = Scheduler::new(config, workers(1), t(1_000));
        one_busy_worker_and_one_queued(&mut s, t(1_100));
        assert_eq!(s.poll_timeout(), Some(t(1_250)), "on a grid from the start");
        s.handle_tick(t(1_250));
        assert_eq!(s.poll_timeout(), Some(t(1_500)));
    }

    #[test]
    fn the_queued_path_waits_for_an_update_and_first_token_releases_it() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        for id in 0..5 {
            s.handle_arrival(t(0), request(id, "premium", 512));
        }
        decisions(&mut s);
        s.handle_first_token(t(10), RequestId(0));
        let d = decisions(&mut s);
        assert_eq!(dispatched(&d), vec![(4, DispatchPath::Queued)]);
        match &d[0] {
            Decision::Dispatch(x) => assert_eq!(x.queued_at, Some(t(0))),
            other => panic!("{other:?}"),
        }
        s.check_invariants().unwrap();
    }

    #[test]
    fn anti_bypass_a_new_arrival_goes_behind_its_class_backlog_even_with_capacity() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        for id in 0..5 {
            s.handle_arrival(t(0), request(id, "premium", 512));
        }
        decisions(&mut s);
        // Capacity frees (prefill done) but no update arrives before the next request: it
        // joins the backlog, and the drain after its enqueue takes request 4 first.
        for id in 0..4 {
            s.load.mark_prefill_completed(RequestId(id));
        }
        s.handle_arrival(t(1), request(5, "premium", 512));
        assert_eq!(
            dispatched(&decisions(&mut s)),
            vec![(4, DispatchPath::Queued), (5, DispatchPath::Queued)]
        );
        // Another class's backlog never holds a regular request back.
        s.handle_arrival(t(1), request(6, "regular", 512));
        assert_eq!(
            dispatched(&decisions(&mut s)),
            vec![(6, DispatchPath::Immediate)]
        );
    }

    #[test]
    fn queue_limit_rejects_the_request_after_the_one_that_reaches_it() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        for id in 0..7 {
            s.handle_arrival(t(0), request(id, "premium", 512));
        }
        let d = decisions(&mut s);
        assert_eq!(dispatched(&d).len(), 4);
        assert_eq!(s.pending_count(), 2, "limit 2 per worker x 1 worker");
        let rejected: Vec<_> = d
            .iter()
            .filter_map(|d| match d {
                Decision::Reject {
                    id,
                    error: SchedulerError::QueueRejected(r),
                    ..
                } => Some((id.0, r.current, r.limit)),
                _ => None,
            })
            .collect();
        assert_eq!(rejected, vec![(6, 2, 2)]);
    }

    #[test]
    fn failed_delivery_releases_the_booking() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        s.handle_arrival(t(0), request(0, "premium", 512));
        decisions(&mut s);
        assert_eq!(s.active_count(), 1);
        s.handle_delivery_failed(t(1), RequestId(0));
        let rank = WorkerWithDpRank::new(0, 0);
        assert_eq!(s.active_count(), 0);
        assert_eq!(s.load().active_prefill_tokens(rank), 0);
        assert_eq!(s.load().active_blocks(rank), 0);
        s.check_invariants().unwrap();
    }

    #[test]
    fn duplicate_ids_are_rejected_and_the_first_booking_kept() {
        let mut s = scheduler(None, 1);
        s.handle_arrival(t(0), request(9, "x", 512));
        s.handle_arrival(t(0), request(9, "x", 1024));
        let d = decisions(&mut s);
        assert_eq!(dispatched(&d), vec![(9, DispatchPath::Immediate)]);
        assert!(matches!(
            d[1],
            Decision::Reject {
                error: SchedulerError::DuplicateRequest(_),
                ..
            }
        ));
        assert_eq!(
            s.load().active_prefill_tokens(WorkerWithDpRank::new(0, 0)),
            512
        );
        // Once finished, the id may be used again.
        s.handle_finished(t(1), RequestId(9), Outcome::Completed);
        s.handle_arrival(t(2), request(9, "x", 64));
        assert_eq!(
            dispatched(&decisions(&mut s)),
            vec![(9, DispatchPath::Immediate)]
        );
    }

    #[test]
    fn no_endpoints_when_no_worker_is_eligible() {
        let mut s = scheduler(None, 2);
        let mut r = request(1, "x", 512);
        r.constraints.allowed_workers = Some([5].into_iter().collect());
        s.handle_arrival(t(0), r);
        let d = decisions(&mut s);
        assert!(
            matches!(
                d[..],
                [Decision::Reject {
                    error: SchedulerError::NoEndpoints,
                    ..
                }]
            ),
            "{d:?}"
        );
        let mut s = scheduler(None, 0);
        s.handle_arrival(t(0), request(2, "x", 512));
        assert!(matches!(
            decisions(&mut s)[..],
            [Decision::Reject {
                error: SchedulerError::NoEndpoints,
                ..
            }]
        ));
    }

    #[test]
    fn a_pin_outside_the_allow_list_is_refused_before_anything_else() {
        let mut s = scheduler(None, 2);
        let mut r = request(1, "x", 512);
        r.constraints.allowed_workers = Some([0].into_iter().collect());
        r.constraints.pinned = Some(WorkerWithDpRank::new(1, 0));
        s.handle_arrival(t(0), r);
        assert!(matches!(
            decisions(&mut s)[..],
            [Decision::Reject {
                error: SchedulerError::PinnedWorkerNotAllowed(_),
                ..
            }]
        ));
    }

    #[test]
    fn without_a_threshold_a_class_never_queues() {
        let mut s = scheduler(None, 1);
        for id in 0..50 {
            s.handle_arrival(t(0), request(id, "x", 8192));
        }
        assert_eq!(dispatched(&decisions(&mut s)).len(), 50);
        assert_eq!(s.pending_count(), 0);
    }

    #[test]
    fn a_cancelled_queued_request_is_dropped_without_booking() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        for id in 0..6 {
            s.handle_arrival(t(0), request(id, "premium", 512));
        }
        decisions(&mut s);
        s.handle_cancel(t(1), RequestId(4));
        assert_eq!(s.pending_count(), 1, "a queued request leaves at once");
        for id in 0..4 {
            s.handle_finished(t(2), RequestId(id), Outcome::Completed);
        }
        assert_eq!(
            dispatched(&decisions(&mut s)),
            vec![(5, DispatchPath::Queued)]
        );
        assert_eq!(s.pending_count(), 0);
        s.check_invariants().unwrap();
    }

    #[test]
    fn drr_shares_capacity_between_backlogged_classes() {
        let mut s = scheduler(
            Some(&TWO_CLASSES.replace(
                "request_queue_limit_per_worker: 2",
                "request_queue_limit_per_worker: 1000",
            )),
            1,
        );
        let mut next = 0;
        for _ in 0..100 {
            for class in ["premium", "regular"] {
                s.handle_arrival(t(0), request(next, class, 512));
                next += 1;
            }
        }
        decisions(&mut s);
        // Free one request at a time; count which class each release serves.
        let mut served = [0usize; 2];
        let mut active: VecDeque<u64> = (0..4).collect();
        for step in 0..80 {
            let id = active.pop_front().expect("something runs");
            s.handle_finished(t(step + 1), RequestId(id), Outcome::Completed);
            for d in decisions(&mut s) {
                if let Decision::Dispatch(x) = d {
                    served[x.class_index] += 1;
                    active.push_back(x.id.0);
                }
            }
        }
        // Quanta 512:128 with 512-token requests: four premium per regular.
        assert_eq!(served, [64, 16], "{served:?}");
        s.check_invariants().unwrap();
    }

    #[test]
    fn admission_policy_defers_and_releases_and_hears_every_status() {
        let mut s = scheduler(Some(TWO_CLASSES), 1);
        s.set_admission_policy("regular", Box::new(ConcurrencyCap::new(1)))
            .unwrap();
        s.handle_arrival(t(0), request(0, "regular", 64));
        s.handle_arrival(t(0), request(1, "regular", 64));
        assert_eq!(
            dispatched(&decisions(&mut s)),
            vec![(0, DispatchPath::Immediate)]
        );
        assert_eq!(s.pending_count(), 1, "the deferred request waits");
        assert!(!s.has_backlog(1), "deferred requests are not backlog");
        s.handle_finished(t(1), RequestId(0), Outcome::Completed);
        assert_eq!(
            dispatched(&decisions(&mut s)),
            vec![(1, DispatchPath::Queued)]
        );
        assert!(
            s.set_admission_policy("nope", Box::new(ConcurrencyCap::new(1)))
                .is_err()
        );
    }
}
