//! The fleet scaling while a run goes on: a worker added with a startup delay takes requests
//! from the instant it is ready, and a drained worker finishes everything it holds (its own
//! queue included), takes nothing new, and leaves at its last end.

use super::*;
use crate::mocker::Backend;
use crate::mocker::EngineArgs;
use crate::mocker::kind::fixed_latency::FixedLatencyArgs;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::select_profile;
use crate::workload::{PromptSpec, RequestSpec};
use scaling::{ScalingDecision, ScalingPolicy, ScalingSnapshot};

fn ms(v: u64) -> SimTime {
    SimTime::from_ns(v * 1_000_000)
}

/// A run of `count` fixed-latency workers (10 ms a pass, one token each) running up to
/// `max_num_seqs` requests each, added ones ready `startup_ms` after they are asked for.
fn fleet_config(
    count: u32,
    max_num_seqs: u64,
    startup_ms: u64,
    mode: RouterMode,
    faults: Vec<Fault>,
) -> SimConfig {
    let mut engine = EngineArgs {
        backend: Backend::FixedLatency(FixedLatencyArgs {
            pass_time: SimDuration::from_ms(10),
        }),
        ..EngineArgs::default()
    };
    engine.common.capacity.max_num_seqs = max_num_seqs;
    engine.common.startup_delay = SimDuration::from_ms(startup_ms);
    let router = RouterConfig::default();
    resolve(RunDescription {
        profile: select_profile(&router, None, None),
        router,
        pools: vec![WorkerPool {
            name: "fixed".into(),
            count,
            engine,
        }],
        router_mode: mode,
        check_every_event: true,
        seed: 1,
        faults,
        ..RunDescription::default()
    })
    .expect("a valid run")
}

/// Requests of 128 prompt tokens (no prefix shared) and 3 output tokens, arriving at
/// `arrivals_ms`.
fn requests(arrivals_ms: &[u64]) -> Vec<RequestSpec> {
    (arrivals_ms.iter().zip(0u64..))
        .map(|(&at, row)| RequestSpec {
            row,
            arrival: ms(at),
            policy_class: None,
            input_tokens: 128,
            output_tokens: 3,
            priority: 0.0,
            strict_priority: 0,
            prompt: PromptSpec::HashIds {
                hash_ids: vec![row * 10, row * 10 + 1],
                tokens_per_hash: 64,
            },
            pinned_worker: None,
        })
        .collect()
}

fn run_fleet(
    count: u32,
    max_num_seqs: u64,
    startup_ms: u64,
    mode: RouterMode,
    faults: Vec<Fault>,
    arrivals_ms: &[u64],
) -> SimResult {
    let config = fleet_config(count, max_num_seqs, startup_ms, mode, faults);
    run(Options::new(config), requests(arrivals_ms)).unwrap_or_else(|v| panic!("{v}"))
}

fn worker_of(r: &RequestRecord) -> u64 {
    r.rank().expect("served").worker_id
}

#[test]
fn a_drained_worker_finishes_its_own_queue_takes_nothing_new_and_leaves_at_its_last_end() {
    // Round robin puts requests 0 and 2 on worker 0, 1 and 3 on worker 1, one at a time
    // each (30 ms a request): worker 1 still queues request 3 when it drains at 5 ms.
    let drain = Fault::WorkerDrain {
        worker: 1,
        at: ms(5),
    };
    let arrivals = [0, 0, 0, 0, 10, 10];
    let result = run_fleet(2, 1, 0, RouterMode::RoundRobin, vec![drain], &arrivals);
    assert_eq!(
        result.count(EndStatus::Completed),
        6,
        "nothing lost, nothing moved"
    );
    let workers: Vec<u64> = result.records.iter().map(worker_of).collect();
    assert_eq!(workers, [0, 1, 0, 1, 0, 0]);
    let ends: Vec<Option<SimTime>> = result.records.iter().map(|r| r.completion).collect();
    assert_eq!(
        ends[3],
        Some(ms(60)),
        "its queued request ran after the drain"
    );
    assert_eq!(
        result.fault_marks,
        [FaultMark::WorkerDrain {
            worker: 1,
            name: "worker 1".into(),
            from: ms(5),
            until: Some(ms(60)),
        }]
    );
}

#[test]
fn an_added_worker_takes_requests_from_the_instant_it_is_ready() {
    let up = Fault::WorkerUp {
        pool: 0,
        at: ms(10),
    };
    let arrivals: Vec<u64> = (0..=10).map(|k| k * 5).collect();
    let result = run_fleet(1, 8, 20, RouterMode::KvRouter, vec![up], &arrivals);
    assert_eq!(result.count(EndStatus::Completed), arrivals.len());
    let on_new: Vec<SimTime> = (result.records.iter())
        .filter(|r| worker_of(r) == 1)
        .map(|r| r.arrival)
        .collect();
    // Ready at 30 ms, before the arrivals of that instant: the idle worker takes the first.
    assert_eq!(on_new.first(), Some(&ms(30)));
    assert_eq!(
        result.fault_marks,
        [FaultMark::WorkerUp {
            worker: 1,
            name: "worker 1".into(),
            pool: "fixed".into(),
            asked: ms(10),
            at: ms(30),
        }]
    );
}

#[test]
fn a_worker_ready_only_past_the_time_limit_never_serves() {
    let up = Fault::WorkerUp {
        pool: 0,
        at: ms(10),
    };
    let forty_days_ms = 40 * 24 * 3600 * 1000;
    let result = run_fleet(
        1,
        8,
        forty_days_ms,
        RouterMode::KvRouter,
        vec![up],
        &[0, 20],
    );
    assert_eq!(result.stop_reason, StopReason::Drained);
    assert!(result.records.iter().all(|r| worker_of(r) == 0));
    assert!(result.fault_marks.is_empty(), "it was never ready");
    assert!(result.end_time < ms(1_000), "the run does not wait for it");
}

/// A policy that ticks every `every_ms` from `first_ms`, asks for `targets` in turn (then
/// leaves the fleet as it is), and keeps every snapshot it was shown.
struct Scripted {
    first_ms: Option<f64>,
    every_ms: f64,
    targets: Vec<Option<u64>>,
    seen: Vec<ScalingSnapshot>,
}

impl ScalingPolicy for Scripted {
    fn initial_tick_ms(&mut self) -> Result<Option<f64>, String> {
        Ok(self.first_ms)
    }

    fn on_tick(&mut self, snapshot: &ScalingSnapshot) -> Result<ScalingDecision, String> {
        let target = self.targets.get(self.seen.len()).copied().flatten();
        self.seen.push(snapshot.clone());
        Ok(ScalingDecision {
            target_prefill: None,
            target_decode: target,
            next_tick_ms: Some(snapshot.now_ms + self.every_ms),
            reason: None,
        })
    }
}

fn run_policy(count: u32, policy: &mut Scripted, arrivals_ms: &[u64]) -> SimResult {
    let config = fleet_config(count, 1, 0, RouterMode::RoundRobin, Vec::new());
    run_scaled(Options::new(config), requests(arrivals_ms), policy)
        .unwrap_or_else(|e| panic!("{e:?}"))
}

#[test]
fn a_policy_ticks_at_its_times_sees_the_fleet_and_traffic_and_stops_when_the_work_is_done() {
    let mut policy = Scripted {
        first_ms: Some(20.0),
        every_ms: 20.0,
        targets: vec![Some(2), None, Some(1)],
        seen: Vec::new(),
    };
    // Four requests at 0 (30 ms each on one worker, one at a time), two at 45 ms.
    let result = run_policy(1, &mut policy, &[0, 0, 0, 0, 45, 45]);
    assert_eq!(result.count(EndStatus::Completed), 6);
    let ticks: Vec<(u64, f64)> = policy
        .seen
        .iter()
        .map(|s| (s.tick_ordinal, s.now_ms))
        .collect();
    let last_end_ms = result.end_time.as_ms_f64();
    assert!(
        ticks.iter().all(|&(_, at)| at <= last_end_ms),
        "no tick after the work is done"
    );
    assert_eq!(&ticks[..3], &[(0, 20.0), (1, 40.0), (2, 60.0)]);
    let first = &policy.seen[0];
    assert_eq!(first.active_decode_ids, [0]);
    assert_eq!((first.traffic.num_req, first.traffic.duration_s), (4, 0.02));
    // Ready at once at 20 ms: worker 1 is active at the next tick, and drains at 60 ms.
    assert_eq!(policy.seen[1].active_decode_ids, [0, 1]);
    assert_eq!(policy.seen[1].traffic.num_req, 0);
    assert_eq!(policy.seen[2].traffic.num_req, 2);
    let later = &policy.seen[3];
    assert!(later.active_decode_ids == [0] && later.draining_decode_ids.len() <= 1);
    let on_new = result.records.iter().filter(|r| worker_of(r) == 1).count();
    assert!(on_new > 0, "the added worker served");
}

#[test]
fn a_policy_without_a_first_tick_is_never_asked() {
    let mut policy = Scripted {
        first_ms: None,
        every_ms: 10.0,
        targets: vec![Some(5)],
        seen: Vec::new(),
    };
    let result = run_policy(1, &mut policy, &[0, 5]);
    assert!(policy.seen.is_empty());
    assert!(result.records.iter().all(|r| worker_of(r) == 0));
}

#[test]
fn a_policy_that_ticks_for_ever_over_work_that_never_ends_stops_at_the_event_budget() {
    // Target 0 at once, a tick every millisecond: the requests wait in the router's queue
    // for a worker that never comes, and the policy never stops ticking.
    let mut policy = Scripted {
        first_ms: Some(0.0),
        every_ms: 1.0,
        targets: vec![Some(0)],
        seen: Vec::new(),
    };
    let base = fleet_config(1, 1, 0, RouterMode::KvRouter, Vec::new());
    let limits = crate::engine::Limits {
        max_events: 500,
        ..crate::engine::Limits::default()
    };
    let mut description = base.to_description();
    description.router.router_queue_threshold = Some(0.5);
    description.profile = select_profile(&description.router, None, None);
    let config = resolve(RunDescription {
        limits,
        ..description
    })
    .expect("a valid run");
    let result = run_scaled(Options::new(config), requests(&[5, 5]), &mut policy).unwrap();
    assert_eq!(result.stop_reason, StopReason::EventLimit);
    assert!(policy.seen.len() <= 500, "{} ticks", policy.seen.len());
}
