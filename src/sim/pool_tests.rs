//! Worker pools in the simulator: ids pool by pool, each worker running its own pool's engine,
//! the router judging busy against each worker's own budget, and pass time per pool.

use super::*;
use crate::engine::Limits;
use crate::mocker::EngineArgs;
use crate::scheduling::policy::PolicyConfig;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::select_profile;
use crate::workload::{PromptSpec, RequestSpec};
use fleet::WorkerFleet;

fn pool(name: &str, count: u32, engine: impl FnOnce(&mut EngineArgs)) -> WorkerPool {
    let mut args = EngineArgs::default();
    engine(&mut args);
    WorkerPool {
        name: name.into(),
        count,
        engine: args,
    }
}

fn config(pools: Vec<WorkerPool>, mode: RouterMode, policy: Option<&str>) -> SimConfig {
    let router = RouterConfig::default();
    let policy = policy.map(|text| PolicyConfig::from_yaml_str(text, None).unwrap());
    resolve(RunDescription {
        profile: select_profile(&router, policy.as_ref(), None),
        router,
        pools,
        router_mode: mode,
        delays: TransportDelays::default(),
        limits: Limits::default(),
        check_every_event: true,
        seed: 1,
        closed_loop: None,
        faults: Vec::new(),
        migration_limit: 0,
    })
    .expect("a valid run")
}

/// Request `row` of `input` distinct prompt tokens (64-token blocks) and `output` tokens.
fn request(row: u64, arrival_ms: u64, input: u64, output: u64) -> RequestSpec {
    let blocks = input.div_ceil(64);
    RequestSpec {
        row,
        arrival: SimTime::from_ns(arrival_ms * 1_000_000),
        policy_class: Some("regular".into()),
        input_tokens: input,
        output_tokens: output,
        priority: 0.0,
        strict_priority: 0,
        prompt: PromptSpec::HashIds {
            hash_ids: (0..blocks).map(|b| row * 1000 + b).collect(),
            tokens_per_hash: 64,
        },
        pinned_worker: None,
    }
}

fn ttft(record: &RequestRecord) -> SimDuration {
    record.first_token.unwrap().saturating_since(record.arrival)
}

#[test]
fn worker_ids_go_pool_by_pool_each_with_its_pools_ranks_and_budget() {
    let pools = vec![
        pool("a", 2, |_| {}),
        pool("b", 1, |e| {
            e.common.dp_size = 2;
            e.common.capacity.max_num_batched_tokens = 512;
        }),
    ];
    let set = fleet::worker_set_of(&pools, |_| true);
    let workers: Vec<(u64, u32, Option<u64>)> = set
        .iter()
        .map(|(id, w)| (id, w.dp_size, w.max_num_batched_tokens))
        .collect();
    assert_eq!(
        workers,
        vec![(0, 1, Some(8192)), (1, 1, Some(8192)), (2, 2, Some(512))]
    );
    let ranks = WorkerFleet::new(pools, false).rank_budgets();
    assert_eq!(
        ranks,
        vec![
            (WorkerWithDpRank::new(0, 0), 0, 8192),
            (WorkerWithDpRank::new(1, 0), 0, 8192),
            (WorkerWithDpRank::new(2, 0), 1, 512),
            (WorkerWithDpRank::new(2, 1), 1, 512),
        ]
    );
    assert_eq!(
        set.ranks().collect::<Vec<_>>(),
        ranks.iter().map(|r| r.0).collect::<Vec<_>>()
    );
}

/// The TTFT of one request alone on one worker running `engine`.
fn ttft_alone(engine: impl FnOnce(&mut EngineArgs)) -> SimDuration {
    let config = config(vec![pool("x", 1, engine)], RouterMode::RoundRobin, None);
    let result = run(Options::new(config), [request(0, 0, 512, 1)]).unwrap();
    ttft(&result.records[0])
}

#[test]
fn round_robin_over_two_pools_shows_each_pools_own_ttft() {
    let fast = |e: &mut EngineArgs| e.common.speedup_ratio = 10.0;
    let slow = |e: &mut EngineArgs| e.common.speedup_ratio = 1.0;
    let (fast_ttft, slow_ttft) = (ttft_alone(fast), ttft_alone(slow));
    assert!(slow_ttft > fast_ttft, "{slow_ttft:?} vs {fast_ttft:?}");
    let pools = vec![pool("fast", 1, fast), pool("slow", 1, slow)];
    // A second apart: every request runs alone on its worker.
    let requests = (0..10).map(|row| request(row, row * 1000, 512, 1));
    let result = run(
        Options::new(config(pools, RouterMode::RoundRobin, None)),
        requests,
    )
    .unwrap();
    for r in &result.records {
        let pool = result.pool_of(r.rank().unwrap().worker_id).unwrap();
        assert_eq!(pool as u64, r.row % 2, "round robin alternates the pools");
        let expected = [fast_ttft, slow_ttft][pool];
        assert_eq!(ttft(r), expected, "row {}", r.row);
    }
    let busy: Vec<u128> = result.pools.iter().map(|p| p.busy_ns).collect();
    let five = |d: SimDuration| 5 * u128::from(d.as_ns());
    assert_eq!(busy, vec![five(fast_ttft), five(slow_ttft)]);
    let names: Vec<(&str, u64)> = result
        .pools
        .iter()
        .map(|p| (p.name.as_str(), p.first_worker))
        .collect();
    assert_eq!(names, vec![("fast", 0), ("slow", 1)]);
}

const BUSY_AT_HALF_BUDGET: &str = "
default_policy_family: regular
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: regular, policy_family: regular, cache_bucket: all, quantum: 128,
     prefill_busy_threshold_frac: 0.5}
";

#[test]
fn busy_fractions_multiply_each_workers_own_budget() {
    // Half of 8192 is 4096 tokens; half of 1024 is 512. Two 600-token prompts pinned to one
    // worker: the second finds 600 active prefill tokens there.
    let pools = vec![
        pool("big", 1, |_| {}),
        pool("small", 1, |e| {
            e.common.capacity.max_num_batched_tokens = 1024
        }),
    ];
    let paths = |worker: u64| {
        let pinned = (0..2).map(|row| RequestSpec {
            pinned_worker: Some(WorkerWithDpRank::new(worker, 0)),
            ..request(row, 0, 600, 4)
        });
        let config = config(
            pools.clone(),
            RouterMode::KvRouter,
            Some(BUSY_AT_HALF_BUDGET),
        );
        let result = run(Options::new(config), pinned).unwrap();
        assert_eq!(result.count(EndStatus::Completed), 2);
        result
            .records
            .iter()
            .map(|r| r.path.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        paths(0),
        vec![DispatchPath::Immediate, DispatchPath::Immediate]
    );
    assert_eq!(
        paths(1),
        vec![DispatchPath::Immediate, DispatchPath::Queued]
    );
}

#[test]
fn a_run_a_limit_stops_counts_pass_time_only_within_the_makespan() {
    let engine = || vec![pool("only", 1, |_| {})];
    let long = || [request(0, 0, 512, 400)].into_iter();
    let whole = run(
        Options::new(config(engine(), RouterMode::RoundRobin, None)),
        long(),
    )
    .unwrap();
    let first_token = whole.records[0].first_token.unwrap();
    // Stop well inside the decode: passes keep running after the last state change (the
    // first token), which is the makespan.
    let mut limited = config(engine(), RouterMode::RoundRobin, None);
    limited.limits.max_time = first_token.saturating_add(SimDuration::from_ms(100));
    let result = run(Options::new(limited), long()).unwrap();
    assert_eq!(result.stop_reason, StopReason::TimeLimit);
    assert_eq!(result.end_time, first_token);
    assert_eq!(result.pools[0].busy_ns, u128::from(first_token.as_ns()));
    // The whole run: one rank busy from 0 to its completion.
    let completion = whole.records[0].completion.unwrap();
    assert_eq!(whole.pools[0].busy_ns, u128::from(completion.as_ns()));
}

/// A worker kind other than vLLM runs in the simulator unchanged: the scratch fixed-latency
/// kind (every pass 10 ms, one token per running request, at most 2 running) serves three
/// 3-token requests on one worker as its own rules say, the third after the first two end.
#[test]
fn a_scratch_worker_kind_runs_in_the_simulator_by_its_own_rules() {
    use crate::mocker::Backend;
    use crate::mocker::kind::fixed_latency::FixedLatencyArgs;
    let fixed = pool("fixed", 1, |e| {
        e.backend = Backend::FixedLatency(FixedLatencyArgs {
            pass_time: SimDuration::from_ms(10),
        });
        e.common.capacity.max_num_seqs = 2;
    });
    let requests = (0..3).map(|row| request(row, 0, 128, 3));
    let result = run(
        Options::new(config(vec![fixed], RouterMode::KvRouter, None)),
        requests,
    )
    .unwrap_or_else(|v| panic!("{v}"));
    let ms = |t: Option<SimTime>| t.map(|t| t.as_ns() / 1_000_000);
    let ends: Vec<(Option<u64>, Option<u64>)> = (result.records.iter())
        .map(|r| (ms(r.first_token), ms(r.completion)))
        .collect();
    assert_eq!(
        ends,
        [
            (Some(10), Some(30)),
            (Some(10), Some(30)),
            (Some(40), Some(60))
        ]
    );
    assert_eq!(result.count(EndStatus::Completed), 3);
}
