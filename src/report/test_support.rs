//! Test helpers: hand-built records and runs of the fidelity fixtures, for the report tests.

use crate::engine::{Limits, StopReason};
use crate::mocker::EngineArgs;
use crate::scheduling::policy::PolicyConfig;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::{Path, SchedulerConfig};
use crate::sim::{self, RequestRecord, RouterMode, SimConfig, SimResult, Status, TransportDelays};
use crate::time::{SimDuration, SimTime};
use crate::workload::trace::{self, TraceReader};
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

/// Milliseconds as a `SimTime`.
pub fn ms(v: u64) -> SimTime {
    SimTime::from_ns(v * 1_000_000)
}

/// A completed request of `class` with one output token: arrival, dispatch, first token and
/// completion in ms (first token = completion), 100 uncached input tokens.
pub fn done(row: u64, class: usize, path: Path, times_ms: [u64; 3]) -> RequestRecord {
    let [arrival, dispatched, completion] = times_ms;
    RequestRecord {
        row,
        policy_class: None,
        class_index: Some(class),
        arrival: ms(arrival),
        dispatched: Some(ms(dispatched)),
        admit: Some(ms(dispatched)),
        first_token: Some(ms(completion)),
        completion: Some(ms(completion)),
        rank: None,
        path: Some(path),
        input_tokens: 100,
        output_tokens: 1,
        reused_input_tokens: 0,
        tokens_received: 1,
        status: Status::Completed,
    }
}

/// A run of `records` over classes `names`.
pub fn result_of(names: &[&str], records: Vec<RequestRecord>) -> SimResult {
    let end_time = records
        .iter()
        .filter_map(|r| r.completion)
        .max()
        .unwrap_or(SimTime::ZERO);
    SimResult {
        records,
        stop_reason: StopReason::Drained,
        events: 42,
        end_time,
        class_names: names.iter().map(|n| n.to_string()).collect(),
        class_quanta_tokens: vec![1; names.len()],
    }
}

/// The metrics of the premium burst's weighted arm (fixture `premium-weighted`).
pub fn weighted_metrics() -> crate::report::metrics::RunMetrics {
    let (result, quanta) = run_fixture("premium-weighted");
    crate::report::metrics::RunMetrics::compute(&result, &quanta)
}

/// Runs fidelity fixture `name` (its Dynamo trace, policy and engine, one worker) and returns
/// the run with the class quanta.
pub fn run_fixture(name: &str) -> (SimResult, Vec<u64>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fidelity")
        .join(name);
    let engine_text = std::fs::read_to_string(dir.join("engine.json")).unwrap();
    let engine = EngineArgs::from_json_str(&engine_text).unwrap();
    let policy_text = std::fs::read_to_string(dir.join("policy.yaml")).unwrap();
    let policy = PolicyConfig::from_yaml_str(&policy_text, None).unwrap();
    let trace_path = dir.join("dynamo.trace.jsonl");
    let open = || BufReader::new(File::open(&trace_path).unwrap());
    let block = trace::DEFAULT_TRACE_BLOCK_SIZE;
    let summary = trace::scan(open(), name, block).unwrap();
    let mut requests: Vec<_> = TraceReader::new(open(), name, block)
        .with_origin_ms(summary.origin_ms)
        .map(|r| r.unwrap())
        .collect();
    requests.sort_by_key(|r| (r.arrival, r.row));
    let scheduler = SchedulerConfig::new(
        RouterConfig::default(),
        Some(&policy),
        None,
        engine.block_size,
        0,
    );
    let quanta = scheduler
        .profile
        .classes()
        .iter()
        .map(|c| c.quantum_tokens)
        .collect();
    let config = SimConfig {
        scheduler,
        engine,
        worker_count: 1,
        router_mode: RouterMode::KvRouter,
        delays: TransportDelays::default(),
        limits: Limits::default(),
        tick_interval: SimDuration::from_ms(60_000),
        check_every_event: false,
        seed: 0,
    };
    (sim::run(config, requests.into_iter()).unwrap(), quanta)
}
