//! The native planner under random load shapes and settings (VOPR-style): every request ends
//! exactly once, no drained worker outlives its drain's end or takes a request after it, no
//! target goes past the GPU budget, every run ends, and a rerun is identical.

use super::NativePlanner;
use super::config::PlannerConfig;
use crate::engine::StopReason;
use crate::mocker::EngineArgs;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::select_profile;
use crate::sim::{
    Options, RouterMode, RunDescription, SimConfig, SimResult, Status, WorkerPool, resolve,
    run_scaled,
};
use crate::time::{SimDuration, SimTime};
use crate::workload::{PromptSpec, RequestSpec};
use proptest::prelude::*;

/// `count` vLLM workers of `tp` GPUs and a small KV pool (so that load shows), each added
/// one ready `startup_ms` after it is asked for.
fn config(count: u32, tp: u32, startup_ms: u64) -> SimConfig {
    let mut engine = EngineArgs::default();
    engine.common.capacity.num_gpu_blocks = 256;
    engine.common.capacity.max_num_seqs = 8;
    engine.common.tensor_parallel_size = tp;
    engine.common.startup_delay = SimDuration::from_ms(startup_ms);
    let router = RouterConfig::default();
    resolve(RunDescription {
        profile: select_profile(&router, None, None),
        router,
        pools: vec![WorkerPool::unnamed(count, engine)],
        router_mode: RouterMode::RoundRobin,
        check_every_event: true,
        seed: 1,
        ..RunDescription::default()
    })
    .expect("a valid run")
}

/// Requests arriving `gaps_ms` apart, each with its prompt and output length.
fn requests(shape: &[(u64, u64, u64)]) -> Vec<RequestSpec> {
    let mut at_ms = 0;
    (shape.iter().zip(0u64..))
        .map(|(&(gap_ms, input, output), row)| {
            at_ms += gap_ms;
            RequestSpec {
                row,
                arrival: SimTime::from_ns(at_ms * 1_000_000),
                policy_class: None,
                input_tokens: input,
                output_tokens: output,
                priority: 0.0,
                strict_priority: 0,
                prompt: PromptSpec::HashIds {
                    hash_ids: (0..input.div_ceil(512)).map(|k| row * 100 + k).collect(),
                    tokens_per_hash: 512,
                },
                pinned_worker: None,
            }
        })
        .collect()
}

fn planner_yaml(target: u8, up: f64, budget: i64, min_endpoint: i64, interval_s: u64) -> String {
    let target = match target {
        0 => "throughput".to_string(),
        1 => "latency".to_string(),
        _ => format!(
            "load\ndecode_scale_up_kv_rate: {up}\ndecode_scale_down_kv_rate: {}",
            up / 4.0
        ),
    };
    format!(
        "optimization_target: {target}\nmax_gpu_budget: {budget}\nmin_endpoint: {min_endpoint}\n\
         load_adjustment_interval_seconds: {interval_s}\n"
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn random_load_and_planner_settings_keep_every_request_and_the_budget(
        // A busy spell then a quiet one: gaps of 5-60 ms, then 200-1,500 ms.
        busy in prop::collection::vec((5u64..60, 100u64..3000, 1u64..200), 1..150),
        quiet in prop::collection::vec((200u64..1500, 100u64..3000, 1u64..200), 0..20),
        workers in 1u32..3,
        tp in 1u32..3,
        startup_ms in prop::sample::select(vec![0u64, 300, 2500]),
        target in 0u8..3,
        up in 1.0f64..60.0,
        budget in prop::sample::select(vec![-1i64, 2, 4, 8]),
        min_endpoint in 1i64..3,
        interval_s in 1u64..4,
    ) {
        let shape: Vec<_> = busy.into_iter().chain(quiet).collect();
        let config = config(workers, tp, startup_ms);
        let yaml = planner_yaml(target, up, budget, min_endpoint, interval_s);
        let planner_config = PlannerConfig::parse(&yaml).unwrap();
        // A budget below the floor's GPUs is refused before the run.
        let floor_gpus = min_endpoint * i64::from(tp);
        let started = NativePlanner::new(planner_config.clone(), config.pools());
        prop_assert_eq!(started.is_err(), budget >= 0 && budget < floor_gpus);
        prop_assume!(started.is_ok());
        let run_once = || -> SimResult {
            let mut planner = NativePlanner::new(planner_config.clone(), config.pools()).unwrap();
            run_scaled(Options::new(config.clone()), requests(&shape), &mut planner).unwrap()
        };
        let result = run_once();
        prop_assert_eq!(result.stop_reason, StopReason::Drained);
        prop_assert_eq!(result.records.len(), shape.len());
        prop_assert!(result.records.iter().all(|r| r.status == Status::Completed));
        // No target past the budget, or below the floor.
        let gpus = i64::from(tp);
        for event in result.scaling_events.iter().flatten() {
            let to = event.to as i64;
            prop_assert!(budget < 0 || to * gpus <= budget, "{event:?} past {budget} GPUs");
            prop_assert!(to >= min_endpoint, "{event:?} below the floor");
        }
        // A drained worker serves no request dispatched after its drain began, and leaves
        // only once every request it served has ended.
        for (worker, life) in (0u64..).zip(&result.worker_lives) {
            let Some(drain) = life.draining else { continue };
            let served = (result.records.iter())
                .filter(|r| r.rank().is_some_and(|k| k.worker_id == worker));
            for r in served {
                prop_assert!(r.dispatched.is_some_and(|at| at <= drain), "{r:?} after {drain}");
                if let (Some(gone), Some(end)) = (life.gone, r.completion) {
                    prop_assert!(end <= gone, "worker {worker} left at {gone} before {r:?}");
                }
            }
        }
        prop_assert_eq!(run_once().records, result.records);
    }
}
