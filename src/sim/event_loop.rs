//! The event loop: the only place that schedules events and applies what the parts of the
//! system ask for. A run's instants go by in three phases (see the `sim` module docs); each
//! event is handled here, with the parts (the serving mode, the fleet, the routers, the
//! ledger, the transport, the faults' state) doing the deciding.
//!
//! The loop's state is split in two so that a part can be handed the rest: [`System`] holds
//! the serving mode and the [`Hub`], everything else; the serving mode acts through the hub
//! as [`Effects`], applied at once.

use super::driver::{KvLog, RouterDecision, RouterDriver};
use super::effects::{Effects, Event, Shared};
use super::faults::{self, Faults};
use super::feed::{self, Feed};
use super::fleet::{self, PassEndAt, PassEnded, WorkerFleet, cached_blocks_hint};
use super::handoff::{self, Disaggregated};
use super::ledger::{Ledger, TokenEdge};
use super::routers::Routers;
use super::scaling::{self, FleetChange, ScalingPolicy};
use super::serving::{Aggregated, Serving};
use super::timeline::{self, CounterRecorder, MigrationMark};
use super::transport::{self, Transport};
use super::watch::Watch;
use super::{AbortReason, CancelReason, InvariantViolation, Rejection, ScalingEvent};
use super::{Options, PolicyFailure, RunError, Status, Stepping, skips_quiet_passes};
use super::{SimConfig, SimResult};
use crate::bounds::MAX_RANKS;
use crate::engine::{Engine, EventQueue, Model, StopReason};
use crate::mocker::{MockRequest, PassOutput, WorkerRole};
use crate::scheduling::scheduler::Outcome;
use crate::scheduling::types::{KvEvent, RequestId, WorkerWithDpRank};
use crate::time::{SimDuration, SimTime};
use crate::workload::{Arrival, UniformBlockHashes};

/// The most request records a run reserves room for before its requests arrive (about
/// 220 MB); a run with more grows its table as they come.
const MAX_RESERVED_RECORDS: usize = 1 << 20;

/// The simulated system: the serving mode, and the hub it acts on.
pub(super) struct System {
    pub(super) hub: Hub,
    serving: Box<dyn Serving>,
}

/// Everything of the system but the serving mode: the parts every event touches, and the
/// effects the loop applies for them.
pub(super) struct Hub {
    config: SimConfig,
    /// Every router instance, and which one hears what.
    pub(super) routers: Routers,
    fleet: WorkerFleet,
    ledger: Ledger,
    faults: Faults,
    transport: Transport,
    /// Whether serving is disaggregated: the entry router's workers then only prefill.
    disaggregated: bool,
    violation: Option<InvariantViolation>,
    /// A router drained with per-event checks on: the checks run once the event is over.
    check_due: bool,
    /// Local hashes of the prompts' one-token blocks seen so far.
    uniform_hashes: UniformBlockHashes,
    /// The timeline's counters, when the run keeps a timeline (`None`: one branch an instant).
    timeline: Option<Box<CounterRecorder>>,
    /// What the scaling policy watches between its ticks (`None`: no policy asks).
    watch: Option<Box<Watch>>,
}

/// The hub and the event queue, as a part sees them.
struct HubEffects<'a> {
    hub: &'a mut Hub,
    queue: &'a mut EventQueue<Event>,
}

impl Effects for HubEffects<'_> {
    fn shared(&mut self) -> Shared<'_> {
        let hub = &mut *self.hub;
        Shared {
            fleet: &mut hub.fleet,
            ledger: &mut hub.ledger,
            routers: &mut hub.routers,
        }
    }

    fn drain_router(&mut self, now: SimTime) {
        self.hub.drain_router(now, self.queue);
    }

    fn end(&mut self, now: SimTime, id: RequestId, status: Status) {
        self.hub.end(now, id, status);
    }

    fn fail(&mut self, now: SimTime, message: String) {
        self.hub.fail(now, message);
    }

    fn schedule(&mut self, at: SimTime, event: Event) {
        self.queue.schedule(at, event);
    }

    fn settle_rank(&mut self, now: SimTime, rank: usize) {
        let end = self.hub.fleet.settle(now, rank, &mut self.hub.ledger);
        schedule_pass_end(self.queue, end);
    }

    fn lost_on(&mut self, worker: u64, id: RequestId) {
        self.hub.lost_on(worker, id);
    }
}

/// [`run`](super::run), keeping the router's KV events when `log_kv` says so, and asking
/// `policy`, if any, to scale the fleet at its ticks.
pub(super) fn simulate(
    options: Options,
    requests: impl Iterator<Item = Arrival>,
    log_kv: bool,
    mut policy: Option<&mut dyn ScalingPolicy>,
) -> Result<(SimResult, KvLog), RunError> {
    let expected_requests = options
        .expected_requests
        .unwrap_or_else(|| requests.size_hint().0);
    // A policy reads every pass's tokens: its runs step pass by pass.
    let stepping = match policy {
        Some(_) => Stepping::PassByPass,
        None => options.stepping,
    };
    let mut system = new_system(options.config, stepping, expected_requests, log_kv)?;
    if options.timeline {
        system.hub.fleet.record_passes();
        system.hub.timeline = Some(Box::new(CounterRecorder::new()));
    }
    let mut ticks = match policy.as_deref_mut() {
        Some(policy) => Ticks::start(policy, &mut system.hub)?,
        None => Ticks::default(),
    };
    let mut engine = Engine::new(system.hub.config.limits);
    for (at, event) in faults::worker_fault_events(&system.hub.config.faults) {
        engine.queue().schedule(at, event);
    }
    let mut requests = Feed::new(requests, system.hub.config.closed_loop);
    let mut last_instant = SimTime::ZERO;
    let stop_reason = loop {
        if let Some(v) = system.hub.violation.take() {
            return Err(RunError::Invariant(v));
        }
        let next_arrival = requests.next_time(&mut system.hub.ledger);
        // A tick is skipped once the workload is done, as in 1.6.1.
        let remains = next_arrival.is_some() || system.hub.ledger.open_count() > 0;
        let tick = ticks.next.filter(|_| remains);
        let next = min_time(next_arrival, engine.queue().peek_time());
        let Some(now) = min_time(next, tick) else {
            // Each refusal round ends requests for good: bounded by the request count.
            if system.refuse_stranded(last_instant, engine.queue()) {
                continue;
            }
            break StopReason::Drained;
        };
        if now > system.hub.config.limits.max_time {
            break StopReason::TimeLimit;
        }
        last_instant = now;
        if let Err(reason) = system.run_instant(now, &mut engine, &mut requests) {
            break reason;
        }
        if let (Some(policy), true) = (policy.as_deref_mut(), tick == Some(now)) {
            // Each tick counts against the event budget, so a policy that ticks for ever
            // over work that never ends (no worker left) still ends the run.
            if engine.events_processed().saturating_add(ticks.fired)
                >= system.hub.config.limits.max_events
            {
                break StopReason::EventLimit;
            }
            system.scaling_tick(now, &mut ticks, policy, engine.queue())?;
            system.finish_instant(now, engine.queue());
            let remains = requests.next_time(&mut system.hub.ledger).is_some()
                || system.hub.ledger.open_count() > 0;
            ticks.next = ticks.next.filter(|&at| at > now && remains);
        }
    };
    let scaling_events = policy.is_some().then_some(ticks.events);
    finish_run(system, &engine, stop_reason, scaling_events).map_err(RunError::Invariant)
}

/// Where a run's scaling policy is: its next tick, how many fired, and where the traffic
/// window began.
#[derive(Default)]
struct Ticks {
    next: Option<SimTime>,
    fired: u64,
    window_start: SimTime,
    /// What the policy changed so far.
    events: Vec<ScalingEvent>,
}

impl Ticks {
    /// Asks `policy` when its first tick is, and starts counting traffic on `hub`.
    fn start(policy: &mut dyn ScalingPolicy, hub: &mut Hub) -> Result<Ticks, RunError> {
        let first = policy
            .initial_tick_ms()
            .map_err(|message| PolicyFailure::new(None, SimTime::ZERO, message))?;
        let mut watch = Box::<Watch>::default();
        hub.fleet.record_pass_metrics();
        for role in [
            WorkerRole::Aggregated,
            WorkerRole::Prefill,
            WorkerRole::Decode,
        ] {
            for worker in hub.fleet.role_workers(role).active {
                watch.activated(SimTime::ZERO, &hub.fleet, worker);
            }
        }
        hub.watch = Some(watch);
        hub.ledger.keep_completed();
        Ok(Ticks {
            next: scaling::tick_time(first),
            ..Ticks::default()
        })
    }
}

/// The system at the start of a run of `config`, with room for `expected_requests` records.
pub(super) fn new_system(
    config: SimConfig,
    stepping: Stepping,
    expected_requests: usize,
    log_kv: bool,
) -> Result<System, InvariantViolation> {
    debug_assert!(
        config.holds(),
        "only `resolve` makes a SimConfig, and it checks the pools"
    );
    let skip_quiet = skips_quiet_passes(&config, stepping);
    let mut scheduler = config.scheduler_config();
    if config.is_disaggregated() {
        scheduler.router = handoff::prefill_router_config(&config.router);
    }
    let routed = |role| role != WorkerRole::Decode;
    let router = RouterDriver::new(
        config.router_mode,
        scheduler,
        fleet::worker_set_of(&config.pools, routed),
        cached_blocks_hint(&config.pools, routed),
        log_kv,
    );
    let mut fleet = WorkerFleet::new(config.pools.clone(), skip_quiet);
    // A run that skips quiet passes has no faults: a request leaves its rank by its last
    // token, which can carry the count of the middle ones.
    if skip_quiet && transport::delivers_tokens_directly(&config) {
        fleet.count_middle_tokens();
    }
    let serving: Box<dyn Serving> = match config.is_disaggregated() {
        true => Box::new(Disaggregated::new(&config, fleet.rank_count())),
        false => Box::new(Aggregated),
    };
    let decode_router = config
        .is_disaggregated()
        .then(|| handoff::decode_router(&config));
    let hub = Hub {
        faults: Faults::new(&config),
        routers: Routers::new(router, decode_router),
        fleet,
        ledger: Ledger::with_capacity(expected_requests.min(MAX_RESERVED_RECORDS)),
        transport: Transport::new(&config),
        disaggregated: config.is_disaggregated(),
        violation: None,
        check_due: false,
        uniform_hashes: UniformBlockHashes::default(),
        timeline: None,
        watch: None,
        config,
    };
    Ok(System { hub, serving })
}

/// The result of a run that stopped for `stop_reason` (its policy having made
/// `scaling_events`), after the end-of-run checks.
fn finish_run(
    mut system: System,
    engine: &Engine<Event>,
    stop_reason: StopReason,
    scaling_events: Option<Vec<ScalingEvent>>,
) -> Result<(SimResult, KvLog), InvariantViolation> {
    let hub = &mut system.hub;
    if stop_reason.is_limit() {
        // Passes over by the stop count, as they would pass by pass.
        let at = match stop_reason {
            StopReason::TimeLimit => hub.config.limits.max_time,
            _ => engine.now(),
        };
        hub.fleet.apply_quiet_until(at, &mut hub.ledger);
    }
    hub.fleet.credit_unlisted_tokens(&mut hub.ledger);
    let end_time = hub.ledger.makespan();
    system.finish(stop_reason, end_time)?;
    let hub = system.hub;
    let mut fleet = hub.fleet;
    let pools = fleet.pool_usage(end_time, hub.ledger.change_epoch());
    let mut routers = hub.routers;
    let kv_log = routers.entry().take_kv_log();
    let timeline = hub.timeline.map(|recorder| {
        let (ranks, passes) = fleet.take_passes();
        timeline::finish(*recorder, ranks, passes, &hub.config)
    });
    let classes = routers.entry_ref().core().profile().classes();
    let result = SimResult {
        timeline,
        pools,
        fault_marks: fleet.take_marks(),
        worker_lives: fleet.lives().to_vec(),
        scaling_events,
        class_names: classes.iter().map(|c| c.name.clone()).collect(),
        class_quanta_tokens: classes.iter().map(|c| c.quantum_tokens).collect(),
        records: hub.ledger.into_records(),
        stop_reason,
        events: engine.events_processed(),
        end_time,
        preemptions: fleet.preemptions(),
    };
    Ok((result, kv_log))
}

/// Schedules the end of a pass just started or cut, if any.
fn schedule_pass_end(queue: &mut EventQueue<Event>, end: Option<PassEndAt>) {
    if let Some(PassEndAt { at, rank, epoch }) = end {
        queue.schedule(at, Event::PassEnd { rank, epoch });
    }
}

fn min_time(a: Option<SimTime>, b: Option<SimTime>) -> Option<SimTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl System {
    /// Runs the three phases of one instant (see the module docs).
    fn run_instant(
        &mut self,
        now: SimTime,
        engine: &mut Engine<Event>,
        requests: &mut Feed<impl Iterator<Item = Arrival>>,
    ) -> Result<(), StopReason> {
        while engine.queue().peek_time() == Some(now) {
            engine.step(self)?;
        }
        while let Some(arrival) = requests.next_at(now, &mut self.hub.ledger) {
            self.hub.arrive(now, arrival, requests, engine.queue());
            self.check_if_due(now);
        }
        self.finish_instant(now, engine.queue());
        Ok(())
    }

    /// The end of instant `now`: passes start on every rank with work, drained workers
    /// leave, and the router's recheck is scheduled.
    fn finish_instant(&mut self, now: SimTime, queue: &mut EventQueue<Event>) {
        for rank in self.hub.fleet.take_starts_due() {
            self.start_pass(now, rank, queue);
        }
        let hub = &mut self.hub;
        if hub.fleet.any_draining() {
            hub.settle_drained(now, queue);
        }
        for end in hub.fleet.align_lockstep() {
            schedule_pass_end(queue, Some(end));
        }
        hub.schedule_tick(queue);
        if hub.timeline.is_some() {
            hub.sample_counters(now);
        }
    }

    /// The scaling policy's tick at `now` (the instant's last act): it sees the fleet and the
    /// traffic window, and its targets are applied at once; `ticks` moves on.
    fn scaling_tick(
        &mut self,
        now: SimTime,
        ticks: &mut Ticks,
        policy: &mut dyn ScalingPolicy,
        queue: &mut EventQueue<Event>,
    ) -> Result<(), RunError> {
        let hub = &mut self.hub;
        let watch = hub.watch.get_or_insert_with(Box::default);
        let snapshot = watch.snapshot(
            now,
            ticks.fired,
            ticks.window_start,
            &hub.fleet,
            &mut hub.ledger,
            hub.disaggregated,
        );
        let decision = policy
            .on_tick(&snapshot)
            .map_err(|message| PolicyFailure::new(Some(ticks.fired), now, message))?;
        let roles = match self.hub.disaggregated {
            true => [
                (WorkerRole::Prefill, decision.target_prefill),
                (WorkerRole::Decode, decision.target_decode),
            ],
            false => [
                (WorkerRole::Aggregated, decision.target_decode),
                (WorkerRole::Prefill, None),
            ],
        };
        for (role, target) in roles {
            let Some(target) = target else { continue };
            let workers = self.hub.fleet.role_workers(role);
            let from = (workers.active.len() + workers.starting.len()) as u64;
            if target != from {
                let reason = decision.reason.as_deref().unwrap_or("policy").to_string();
                let (at, to) = (now, target);
                let event = ScalingEvent {
                    at,
                    role,
                    from,
                    to,
                    reason,
                };
                ticks.events.push(event);
            }
            let changes = scaling::changes_toward(&workers, target)
                .filter(|changes| self.hub.fits(role, changes))
                .ok_or_else(|| {
                    let message = format!(
                        "target {target} for the {} workers would exceed {MAX_RANKS} worker ranks",
                        role.label()
                    );
                    PolicyFailure::new(Some(ticks.fired), now, message)
                })?;
            self.apply_changes(now, role, &changes, queue);
        }
        ticks.fired += 1;
        ticks.window_start = now;
        ticks.next = scaling::tick_time(decision.next_tick_ms);
        Ok(())
    }

    /// Carries out the steps toward a role's target, in order.
    fn apply_changes(
        &mut self,
        now: SimTime,
        role: WorkerRole,
        changes: &[FleetChange],
        queue: &mut EventQueue<Event>,
    ) {
        for change in changes {
            match *change {
                FleetChange::Start => {
                    let pool = self
                        .hub
                        .config
                        .pools
                        .iter()
                        .position(|p| p.engine.common.role == role);
                    let pool = pool.expect("a scaled role has a pool");
                    self.worker_join(now, pool, queue);
                }
                FleetChange::CancelStart(worker) => {
                    self.hub.fleet.cancel_start(now, worker);
                }
                FleetChange::Drain(worker) => self.worker_drain(now, worker, queue),
            }
        }
    }

    /// The run has nothing left to happen at `now`, the last instant: requests still waiting
    /// for a worker when none is left are refused (1.6.1's replay would wait for one that
    /// never comes). Returns whether any was.
    fn refuse_stranded(&mut self, now: SimTime, queue: &mut EventQueue<Event>) -> bool {
        let refused = self.hub.routers.entry().no_more_workers(now);
        if refused {
            self.hub.drain_router(now, queue);
            self.check_if_due(now);
        }
        refused
    }

    fn start_pass(&mut self, now: SimTime, rank: usize, queue: &mut EventQueue<Event>) {
        // A decode rank with a handoff waiting takes a step at every pass end: no quiet run.
        let allow_quiet = self.serving.allows_quiet_run(rank);
        let hub = &mut self.hub;
        match hub
            .fleet
            .start_pass(now, rank, allow_quiet, &mut hub.ledger)
        {
            Ok(end) => {
                if end.is_some() && hub.watch.is_some() {
                    self.count_waiting_handoffs(rank);
                }
                schedule_pass_end(queue, end);
            }
            Err(message) => hub.fail(now, message),
        }
    }

    /// A decode rank's pass just formed counts the handoffs waiting for room on it among
    /// the requests it has yet to decode (by prompt length), as 1.6.1's metrics do.
    fn count_waiting_handoffs(&mut self, rank: usize) {
        let hub = &mut self.hub;
        let Some(metrics) = hub.fleet.pass_metrics_mut(rank) else {
            return;
        };
        let ledger = &hub.ledger;
        self.serving.for_each_waiting_handoff(rank, &mut |id| {
            let prompt = u64::from(ledger.record(id).input_tokens);
            metrics.queued_decode.add(prompt);
        });
    }

    fn end_pass(&mut self, now: SimTime, rank: usize, epoch: u64, queue: &mut EventQueue<Event>) {
        let hub = &mut self.hub;
        let role = hub.fleet.role(rank);
        let output = match hub.fleet.end_pass(now, rank, epoch, &mut hub.ledger) {
            PassEnded::Formed(output) => output,
            PassEnded::Stale => return,
            PassEnded::Quiet => {
                if role == WorkerRole::Decode {
                    let fx = &mut HubEffects { hub, queue };
                    self.serving.decode_pass_ended(fx, now, rank);
                }
                return;
            }
        };
        if let (Some(watch), Some(metrics)) = (&mut hub.watch, &output.metrics) {
            watch.pass_ended(now, &hub.fleet, rank, metrics);
        }
        // Decode workers publish to no router.
        if role != WorkerRole::Decode {
            hub.publish_kv_events(now, &output.kv_events, queue);
        }
        hub.deliver_rejections(now, rank, &output.rejected, queue);
        if role == WorkerRole::Prefill {
            let fx = &mut HubEffects { hub, queue };
            self.serving.prefill_pass_ended(fx, now, rank, &output.held);
            self.hub.fleet.give_back(rank, output);
            self.end_idle_lockstep_peers(now, rank, queue);
            return;
        }
        hub.deliver_tokens(now, &output, queue);
        hub.fleet.give_back(rank, output);
        // A lock-step decode rank steps when its worker's pass has ended on every rank.
        if role == WorkerRole::Decode && !hub.fleet.in_pass(rank) {
            let fx = &mut HubEffects { hub, queue };
            self.serving.decode_pass_ended(fx, now, rank);
            self.end_idle_lockstep_peers(now, rank, queue);
        }
    }

    /// A lock-step worker's pass ended at `now` with rank `rank`'s, the last of its ranks to
    /// end: the worker steps all its ranks at once, so every other prefill rank lets go of the
    /// sources released while the pass ran, and every other decode rank takes its pass-end
    /// step (landed transfers activated, a reservation).
    fn end_idle_lockstep_peers(
        &mut self,
        now: SimTime,
        rank: usize,
        queue: &mut EventQueue<Event>,
    ) {
        for peer in self.hub.fleet.lockstep_peers(rank) {
            let role = self.hub.fleet.role(peer);
            let fx = &mut HubEffects {
                hub: &mut self.hub,
                queue,
            };
            match role {
                WorkerRole::Prefill => self.serving.prefill_pass_ended(fx, now, peer, &[]),
                WorkerRole::Decode => self.serving.decode_pass_ended(fx, now, peer),
                WorkerRole::Aggregated => {}
            }
        }
    }

    /// Worker `worker` stops: the fleet loses what it held, which waits for the router to
    /// hear.
    fn worker_down(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        let hub = &mut self.hub;
        let held = hub.fleet.worker_down(now, worker);
        let fx = &mut HubEffects { hub, queue };
        let lost = self.serving.lost_with(fx, now, worker, held);
        let hub = &mut self.hub;
        for id in lost {
            hub.lost_on(worker, id);
        }
        let delay = hub.config.delays.worker_to_router;
        if delay == SimDuration::ZERO {
            hub.router_learns_down(now, worker, queue);
        } else {
            let event = Event::RouterLearnsDown { worker };
            queue.schedule(now.saturating_add(delay), event);
        }
    }

    /// A new worker of pool `pool` is added with the next free id: ready now, or after the
    /// pool's startup delay (if that falls within the run's time limit).
    fn worker_join(&mut self, now: SimTime, pool: usize, queue: &mut EventQueue<Event>) {
        let hub = &mut self.hub;
        let delay = hub.config.pools[pool].engine.common.startup_delay;
        let worker = hub.fleet.start(now, pool);
        match now.checked_add(delay) {
            _ if delay == SimDuration::ZERO => self.worker_ready(now, worker, queue),
            Some(at) if at <= hub.config.limits.max_time => {
                queue.schedule(at, Event::WorkerReady { worker });
            }
            _ => {}
        }
    }

    /// Starting worker `worker` is ready: its ranks join and the router hears of it.
    fn worker_ready(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        if self.hub.fleet.ready(now, worker) {
            if let Some(watch) = &mut self.hub.watch {
                watch.activated(now, &self.hub.fleet, worker);
            }
            self.serving.fleet_grew(self.hub.fleet.rank_count());
            self.hub.announce(now, worker, queue);
        }
    }

    /// Worker `worker` drains; the router hears of it after the worker-to-router delay.
    fn worker_drain(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        let hub = &mut self.hub;
        if !hub.fleet.drain(now, worker) {
            return;
        }
        let delay = hub.config.delays.worker_to_router;
        if delay == SimDuration::ZERO {
            hub.router_learns_draining(now, worker, queue);
        } else {
            let event = Event::RouterLearnsDraining { worker };
            queue.schedule(now.saturating_add(delay), event);
        }
    }

    /// With per-event checks on, checks the run's invariants if a router drained since.
    fn check_if_due(&mut self, now: SimTime) {
        if std::mem::take(&mut self.hub.check_due) {
            self.check(now);
        }
    }

    fn check(&mut self, now: SimTime) {
        let (routers, serving) = (&self.hub.routers, &self.serving);
        // A request may end on its decode worker before its source lets go (at the end of
        // its prefill worker's pass): the prefill router holds it until then.
        let holds = |id| routers.holds(id, serving.is_releasing(id));
        let result = routers
            .check_invariants()
            .and_then(|()| self.hub.fleet.check())
            .and_then(|()| self.hub.ledger.check(holds));
        if let Err(message) = result {
            self.hub.fail(now, message);
        }
    }

    /// End-of-run checks: conservation, and the core's invariants.
    fn finish(&mut self, stop_reason: StopReason, now: SimTime) -> Result<(), InvariantViolation> {
        self.check(now);
        if stop_reason == StopReason::Drained {
            let hub = &self.hub;
            // Everything that ran has been freed: no booking, queue entry or worker state left.
            let drained = (hub.ledger.check_all_ended())
                .and_then(|()| hub.routers.check_drained())
                .and_then(|()| hub.fleet.check_drained())
                .and_then(|()| self.serving.check_drained());
            if let Err(message) = drained {
                self.hub.fail(now, message);
            }
        }
        match self.hub.violation.take() {
            Some(v) => Err(v),
            None => Ok(()),
        }
    }
}

impl Model for System {
    type Event = Event;

    fn handle(&mut self, now: SimTime, event: Event, queue: &mut EventQueue<Event>) {
        let hub = &mut self.hub;
        match event {
            Event::Deliver {
                rank,
                request,
                attempt,
            } => {
                if hub.ledger.attempt(request) == attempt {
                    hub.deliver(now, rank, request, queue);
                }
                hub.drain_router(now, queue);
            }
            Event::PassEnd { rank, epoch } => self.end_pass(now, rank, epoch, queue),
            Event::Tokens {
                request,
                attempt,
                edge,
            } => {
                hub.receive_tokens(now, request, attempt, edge);
                hub.drain_router(now, queue);
            }
            Event::WorkerDown { worker } => self.worker_down(now, worker, queue),
            Event::RouterLearnsDown { worker } => hub.router_learns_down(now, worker, queue),
            Event::WorkerBack { worker } => {
                hub.fleet.worker_back(now, worker);
                hub.announce(now, worker, queue);
            }
            Event::WorkerJoin { pool } => self.worker_join(now, pool, queue),
            Event::WorkerReady { worker } => self.worker_ready(now, worker, queue),
            Event::WorkerDrain { worker } => self.worker_drain(now, worker, queue),
            Event::RouterLearnsDraining { worker } => {
                hub.router_learns_draining(now, worker, queue)
            }
            Event::RouterLearnsUp { worker } => hub.router_learns_up(now, worker, queue),
            Event::Cancel { request } => hub.cancel(now, request, queue),
            Event::Drop { rank, request } => hub.fleet.drop_request(rank, request),
            Event::Kv(events) => {
                for event in &events {
                    hub.routers.entry().kv_event(now, event);
                }
                hub.drain_router(now, queue);
            }
            Event::Tick => {
                hub.touch_all_ranks();
                hub.routers.entry().tick(now);
                hub.drain_router(now, queue);
            }
            Event::TransferDone { request, attempt } => {
                if hub.ledger.attempt(request) == attempt {
                    let fx = &mut HubEffects { hub, queue };
                    self.serving.transfer_done(fx, now, request);
                }
            }
        }
        self.check_if_due(now);
    }
}

impl Hub {
    fn arrive(
        &mut self,
        now: SimTime,
        arrival: Arrival,
        feed: &mut Feed<impl Iterator<Item = Arrival>>,
        queue: &mut EventQueue<Event>,
    ) {
        let (spec, hashes) = (arrival.spec, arrival.hashes);
        let block_size = self.config.block_size();
        let (hashes, unshared_from) =
            feed::prompt_blocks(&spec, hashes, block_size, &mut self.uniform_hashes);
        // A migrated request's prompt takes in its generated tokens and goes where its old
        // blocks may still be: with faults, no block is known to be its alone.
        let unshared_from = match self.config.faults.is_empty() {
            true => unshared_from,
            false => u64::MAX,
        };
        let class = spec.policy_class.clone();
        if let Some(watch) = &mut self.watch {
            watch.traffic.arrival();
        }
        let id = self.ledger.open(now, spec, hashes, unshared_from);
        let session = arrival.session.map(|s| *s);
        self.ledger
            .set_session(id, session.as_ref().and_then(|s| s.tag.clone()));
        // Watched before it is routed: a router may reject it at once, ending it.
        feed.opened(id, session, &mut self.ledger);
        let cancels = &self.config.faults;
        self.faults
            .draw_cancels(cancels, class.as_deref(), |after| {
                queue.schedule(now.saturating_add(after), Event::Cancel { request: id });
            });
        self.route(now, id, queue);
        self.schedule_tick(queue);
    }

    /// Hands request `id` (in flight) to the router and acts on what it decides.
    fn route(&mut self, now: SimTime, id: RequestId, queue: &mut EventQueue<Event>) {
        let Some(f) = self.ledger.in_flight(id) else {
            return;
        };
        self.routers.entry().route(now, id, f);
        self.drain_router(now, queue);
    }

    /// Acts on every decision the entry router made.
    fn drain_router(&mut self, now: SimTime, queue: &mut EventQueue<Event>) {
        while let Some(decision) = self.routers.entry().poll_decision() {
            match decision {
                RouterDecision::Dispatch {
                    id,
                    rank,
                    path,
                    class_index,
                    overlap_blocks,
                } => {
                    if let (Some(watch), Some(cached)) = (&mut self.watch, overlap_blocks) {
                        let prompt = self.ledger.in_flight(id).map_or(0, |f| f.prompt_tokens);
                        let blocks = prompt.div_ceil(self.config.block_size());
                        watch.traffic.placed(u64::from(cached), blocks);
                    }
                    self.ledger.dispatched(now, id, rank, path, class_index);
                    self.touch_rank(Some(rank));
                    if self.disaggregated {
                        self.ledger.prefill_routed(id);
                    }
                    let rank = self.rank_index(rank);
                    self.send_to_worker(now, rank, id, queue);
                }
                RouterDecision::Reject {
                    id,
                    class_index,
                    error,
                } => {
                    self.ledger.set_class(id, class_index);
                    self.end(now, id, Status::Rejected(Rejection::router(error)));
                }
            }
        }
        self.check_due |= self.config.check_every_event;
    }

    fn rank_index(&self, rank: WorkerWithDpRank) -> usize {
        self.fleet
            .rank_index(rank)
            .expect("the router only dispatches to known ranks")
    }

    fn send_to_worker(
        &mut self,
        now: SimTime,
        rank: usize,
        id: RequestId,
        queue: &mut EventQueue<Event>,
    ) {
        let delay = (self.config.delays.router_to_worker).saturating_add(self.transport.jitter());
        if delay == SimDuration::ZERO {
            self.deliver(now, rank, id, queue);
        } else {
            let attempt = self.ledger.attempt(id);
            let request = id;
            let event = Event::Deliver {
                rank,
                request,
                attempt,
            };
            queue.schedule(now.saturating_add(delay), event);
        }
    }

    fn deliver(&mut self, now: SimTime, rank: usize, id: RequestId, queue: &mut EventQueue<Event>) {
        let Some(f) = self.ledger.in_flight(id) else {
            return;
        };
        // A prefill worker computes the prompt and one token nobody sees.
        let max_output_tokens = match self.disaggregated {
            true => 1,
            false => f.output_tokens,
        };
        let request = MockRequest {
            id,
            prompt_tokens: f.prompt_tokens,
            prompt_hashes: f.hashes.clone(),
            max_output_tokens,
            unshared_from: f.unshared_from,
        };
        if self.fleet.is_down(rank) {
            self.deliver_to_down(now, rank, id, queue);
            return;
        }
        match self.fleet.deliver(now, rank, request, &mut self.ledger) {
            Ok(end) => schedule_pass_end(queue, end),
            Err(message) => {
                self.fail(now, message);
                return;
            }
        }
        // The caller drains.
        self.routers.entry().dispatched(now, id);
    }

    /// Ends request `id` at `now` with `status`: every end passes here. The ledger records
    /// it (a second end is a bug); the request's transport ordering is forgotten.
    fn end(&mut self, now: SimTime, id: RequestId, status: Status) {
        if let Err(message) = self.ledger.finish(now, id, status) {
            self.fail(now, message);
            return;
        }
        self.transport.forget(id);
    }

    fn fail(&mut self, now: SimTime, message: String) {
        if self.violation.is_none() {
            self.violation = Some(InvariantViolation {
                seed: self.config.seed,
                time: now,
                message,
            });
        }
    }

    /// A pass's KV events reach the router's index, now or after the lag.
    fn publish_kv_events(
        &mut self,
        now: SimTime,
        events: &[KvEvent],
        queue: &mut EventQueue<Event>,
    ) {
        if events.is_empty() {
            return;
        }
        let lag = self.config.delays.kv_event_lag;
        if lag == SimDuration::ZERO {
            for event in events {
                self.routers.entry().kv_event(now, event);
            }
        } else {
            queue.schedule(now.saturating_add(lag), Event::Kv(events.to_vec()));
        }
    }

    /// Requests rank `rank` refused in its pass end at `now`.
    fn deliver_rejections(
        &mut self,
        now: SimTime,
        rank: usize,
        rejected: &[crate::mocker::Rejection],
        queue: &mut EventQueue<Event>,
    ) {
        for rejection in rejected {
            let id = rejection.id;
            if !self.ledger.is_pending(id) {
                continue; // cancelled while the pass ran
            }
            let status = Status::Rejected(Rejection::Worker(rejection.reason));
            self.touch_all_ranks();
            self.end(now, id, status);
            let router = self.routers.for_role(self.fleet.role(rank));
            router.finished(now, id, Outcome::Aborted);
            self.drain_router(now, queue);
        }
    }

    /// Schedules the router's periodic recheck when it needs one and none is scheduled.
    fn schedule_tick(&mut self, queue: &mut EventQueue<Event>) {
        if let Some(at) = self.routers.entry().tick_due() {
            queue.schedule(at, Event::Tick);
        }
    }

    /// Sends a formed pass's tokens (and the ends of requests finished without one) on to
    /// the router, received at once when nothing delays them.
    fn deliver_tokens(&mut self, now: SimTime, output: &PassOutput, queue: &mut EventQueue<Event>) {
        let finished_empty = output
            .finished_empty
            .iter()
            .map(|&id| (id, TokenEdge::Last, 0));
        let tokens = output
            .tokens
            .iter()
            .map(|t| (t.id, TokenEdge::of(t.first, t.completed), t.middle_unlisted));
        let direct = transport::delivers_tokens_directly(&self.config);
        for (id, edge, middle_unlisted) in tokens.chain(finished_empty) {
            if middle_unlisted > 0 {
                // Counted by the worker (only when delivery is direct): received with this one.
                self.ledger.credit(id, u64::from(middle_unlisted));
            }
            if direct && edge == TokenEdge::Middle {
                // A token in the middle of a stream only counts: the router hears nothing.
                self.ledger.credit(id, 1);
                continue;
            }
            let delay =
                (self.config.delays.worker_to_router).saturating_add(self.transport.jitter());
            let at = self.transport.landing(now, id, delay);
            let attempt = self.ledger.attempt(id);
            if at == now {
                self.receive_tokens(now, id, attempt, edge);
                self.drain_router(now, queue);
            } else {
                self.transport.sent(id, at, edge.is_last());
                let request = id;
                let event = Event::Tokens {
                    request,
                    attempt,
                    edge,
                };
                queue.schedule(at, event);
            }
        }
    }

    /// A token (or the end of a stream) reaches the router and the client.
    /// Tokens of an earlier attempt (before a migration) or of a request that already ended
    /// (cancelled) are dropped.
    fn receive_tokens(&mut self, now: SimTime, id: RequestId, attempt: u32, edge: TokenEdge) {
        if !self.ledger.receive(now, id, attempt, edge) {
            return;
        }
        let router = self.routers.for_tokens();
        // A request whose first token is its last ends without its prefill's end being
        // heard on its own: 1.6.1 frees the whole booking and drains once.
        if edge.is_first() && !edge.is_last() {
            router.first_token(now, id);
        }
        if edge.is_last() {
            self.transport.forget(id);
            router.finished(now, id, Outcome::Completed);
        }
        if self.timeline.is_some() {
            self.touch_rank(self.ledger.record(id).rank());
        }
    }

    /// A request reached a rank that is down: it is lost there. If the router already knows,
    /// its send fails now; otherwise it is resolved when the router hears.
    fn deliver_to_down(
        &mut self,
        now: SimTime,
        rank: usize,
        id: RequestId,
        queue: &mut EventQueue<Event>,
    ) {
        let worker = self.fleet.rank_id(rank).worker_id;
        if self.faults.router_knows_down(worker) {
            self.routers.entry().delivery_failed(now, id);
            self.lose(now, id, worker, queue);
        } else {
            self.lost_on(worker, id);
        }
    }

    /// Request `id` (in its current attempt) is lost on `worker`: resolved when the router
    /// hears the worker is down.
    fn lost_on(&mut self, worker: u64, id: RequestId) {
        let attempt = self.ledger.attempt(id);
        self.faults.lost_on(worker, id, attempt);
    }

    /// The router that hears of worker `worker`: the decode router for a decode worker, else
    /// the one requests arrive at.
    fn router_of_worker(&mut self, worker: u64) -> &mut RouterDriver {
        let role =
            (self.fleet.pool_of(worker)).map_or(WorkerRole::Aggregated, |p| p.engine.common.role);
        self.routers.for_role(role)
    }

    /// The router hears worker `worker` is gone: the worker set shrinks (its bookings are
    /// released, queue entries pinned to it refused), and what it held is migrated or aborted.
    fn router_learns_down(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        self.faults.router_learns_down(worker);
        self.router_of_worker(worker).worker_gone(now, worker);
        self.drain_router(now, queue);
        for (id, attempt) in self.faults.take_lost(worker) {
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
            let mark = MigrationMark {
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
            faults::migrated_hashes(hashes, id, prompt_tokens / block_size)
        });
        self.transport.forget(id);
        self.route(now, id, queue);
    }

    /// A worker came up (back, or new): the router hears after the delay.
    fn announce(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        let delay = self.config.delays.worker_to_router;
        if delay == SimDuration::ZERO {
            self.router_learns_up(now, worker, queue);
        } else {
            queue.schedule(now.saturating_add(delay), Event::RouterLearnsUp { worker });
        }
    }

    /// Whether `changes` to role `role` keep the run within its bound on ranks.
    fn fits(&self, role: WorkerRole, changes: &[FleetChange]) -> bool {
        let starts = changes.iter().filter(|c| **c == FleetChange::Start).count() as u64;
        let dp = self
            .config
            .pools
            .iter()
            .find(|p| p.engine.common.role == role);
        let dp = dp.map_or(1, |p| u64::from(p.engine.common.dp_size));
        let starting = self.fleet.starting_count() as u64 * dp;
        let ranks = self.fleet.rank_count() as u64 + starting + starts.saturating_mul(dp);
        ranks <= MAX_RANKS
    }

    /// The router hears worker `worker` drains: nothing new goes to it.
    fn router_learns_draining(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        self.router_of_worker(worker).worker_draining(now, worker);
        self.drain_router(now, queue);
    }

    /// Every draining worker that holds nothing, and that its router knows drains and has
    /// nothing booked on, leaves now (after the instant's passes started, so a worker with
    /// work left never does).
    fn settle_drained(&mut self, now: SimTime, queue: &mut EventQueue<Event>) {
        for worker in self.fleet.drained() {
            if self.router_of_worker(worker).is_drained(worker) {
                self.fleet.remove(now, worker);
                self.router_of_worker(worker).worker_drained(now, worker);
                self.drain_router(now, queue);
            }
        }
    }

    /// The router discovers worker `worker`: its queues drain onto it.
    fn router_learns_up(&mut self, now: SimTime, worker: u64, queue: &mut EventQueue<Event>) {
        self.faults.router_learns_up(worker);
        let Some(pool) = self.fleet.pool_of(worker) else {
            return;
        };
        let config = fleet::worker_config(pool);
        self.router_of_worker(worker)
            .worker_joined(now, worker, config);
        self.drain_router(now, queue);
    }

    /// The client gives up on request `id` (if it has not ended): it ends now, the router
    /// rolls it back, and the worker holding it drops it after the transport delay.
    fn cancel(&mut self, now: SimTime, id: RequestId, queue: &mut EventQueue<Event>) {
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
            self.fleet.drop_request(rank, id);
        } else {
            let event = Event::Drop { rank, request: id };
            queue.schedule(now.saturating_add(delay), event);
        }
    }

    /// Samples the timeline's counters at the end of instant `now`. Disaggregated serving
    /// and runs with faults change the router's loads at more places than the hooks mark, so
    /// they look at every rank each instant (both are pass by pass and small anyway).
    fn sample_counters(&mut self, now: SimTime) {
        let Some(recorder) = self.timeline.as_mut() else {
            return;
        };
        if self.disaggregated || !self.config.faults.is_empty() {
            recorder.touch_all();
        }
        let fleet = &self.fleet;
        let core = self.routers.entry_ref().core();
        recorder.sample(now, core, fleet.rank_count(), |i| fleet.rank_id(i));
    }

    /// Marks rank `rank`'s router load as perhaps changed (for the timeline).
    fn touch_rank(&mut self, rank: Option<WorkerWithDpRank>) {
        if let (Some(recorder), Some(rank)) = (self.timeline.as_mut(), rank) {
            recorder.touch(rank);
        }
    }

    /// Marks every rank's router load as perhaps changed (for the timeline).
    fn touch_all_ranks(&mut self) {
        if let Some(recorder) = self.timeline.as_mut() {
            recorder.touch_all();
        }
    }
}
