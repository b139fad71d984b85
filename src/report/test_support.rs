//! Test helpers: hand-built records and runs of the fidelity fixtures, for the report tests.
//! The fixtures run through the one run pipeline (a test-only use of the layer above).

use crate::engine::StopReason;
use crate::mocker::EngineArgs;
use crate::pipeline::{self, ReplaySetup, RunOutput, RunSpec};
use crate::scheduling::policy::PolicyConfig;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::{DispatchPath, SchedulerError};
use crate::sim::{Rejection, RequestRecord, RouterMode, SimResult, Status};
use crate::time::SimTime;
use crate::workload::trace;
use std::path::PathBuf;

/// Milliseconds as a `SimTime`.
pub fn ms(v: u64) -> SimTime {
    SimTime::from_ns(v * 1_000_000)
}

/// The status of a request the router refused (no worker to send it to).
pub fn rejected() -> Status {
    Status::Rejected(Rejection::router(SchedulerError::NoEndpoints))
}

/// A completed request of `class` with one output token: arrival, dispatch, first token and
/// completion in ms (first token = completion), 100 uncached input tokens.
pub fn done(row: u64, class: usize, path: DispatchPath, times_ms: [u64; 3]) -> RequestRecord {
    let [arrival, dispatched, completion] = times_ms;
    RequestRecord {
        row,
        policy_class: None,
        class_index: RequestRecord::class_slot(Some(class)),
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
        rare: None,
    }
}

/// Turn `turn` of the `turns`-turn session `index`: [`done`] with the session's tag.
pub fn turn(mut record: RequestRecord, index: u32, turn: u32, turns: u32) -> RequestRecord {
    record.rare_mut().session = Some(crate::workload::session::SessionTag {
        index,
        id: format!("s{index}").into(),
        turn,
        turns,
        chained: true,
        named: true,
    });
    record
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
        preemptions: 0,
        class_names: names.iter().map(|n| n.to_string()).collect(),
        class_quanta_tokens: vec![1; names.len()],
        pools: Vec::new(),
        fault_marks: Vec::new(),
        worker_lives: Vec::new(),
        scaling_events: None,
        timeline: None,
    }
}

/// The metrics of the premium burst's weighted arm (fixture `premium-weighted`).
pub fn weighted_metrics() -> crate::report::measure::metrics::RunMetrics {
    weighted_run().metrics
}

/// The run [`weighted_metrics`] measures: its records and its metrics.
pub fn weighted_run() -> RunOutput {
    replay_fixture("premium-weighted")
}

/// Runs fidelity fixture `name` (its Dynamo trace, policy and engine, one worker) and returns
/// the run with the class quanta.
pub fn run_fixture(name: &str) -> (SimResult, Vec<u64>) {
    let result = replay_fixture(name).result;
    let quanta = result.class_quanta_tokens.clone();
    (result, quanta)
}

/// Replays fidelity fixture `name` through the one run pipeline, as `routersim replay` does.
fn replay_fixture(name: &str) -> RunOutput {
    let spec = RunSpec::from_replay(&fixture_setup(name)).expect("a valid replay");
    pipeline::execute(&spec).unwrap()
}

/// Replays disaggregated fidelity fixture `name` (`disagg-prefix-missing`, say) on one
/// prefill worker of its `prefill.json` and one decode worker of its `engine.json`, as
/// `routersim replay --prefill-workers 1 --decode-workers 1 --prefill-engine prefill.json`.
pub fn disaggregated_run(name: &str) -> RunOutput {
    use crate::mocker::WorkerRole;
    let mut setup = fixture_setup(name);
    let dir = setup.trace.parent().unwrap().to_path_buf();
    let prefill_text = std::fs::read_to_string(dir.join("prefill.json")).unwrap();
    let mut prefill_engine = EngineArgs::from_json_str(&prefill_text).unwrap();
    prefill_engine.common.role = WorkerRole::Prefill;
    let mut decode_engine = setup.engine.clone();
    decode_engine.common.role = WorkerRole::Decode;
    setup.disaggregated = Some(pipeline::DisaggregatedSetup {
        prefill_workers: 1,
        prefill_engine,
        decode_workers: 1,
        decode_engine,
    });
    let spec = RunSpec::from_replay(&setup).expect("a valid replay");
    pipeline::execute(&spec).unwrap()
}

/// The replay of fidelity fixture `name`: its Dynamo trace, policy (if any) and engine, on
/// one aggregated worker.
fn fixture_setup(name: &str) -> ReplaySetup {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fidelity")
        .join(name);
    let engine_text = std::fs::read_to_string(dir.join("engine.json")).unwrap();
    let policy_text = std::fs::read_to_string(dir.join("policy.yaml")).ok();
    ReplaySetup {
        trace: dir.join("dynamo.trace.jsonl"),
        trace_block_size: trace::DEFAULT_TRACE_BLOCK_SIZE,
        policy: policy_text.map(|text| PolicyConfig::from_yaml_str(&text, None).unwrap()),
        policy_file: None,
        router: RouterConfig::default(),
        engine: EngineArgs::from_json_str(&engine_text).unwrap(),
        workers: 1,
        router_mode: RouterMode::KvRouter,
        seed: 0,
        kv_event_lag: crate::time::SimDuration::ZERO,
        disaggregated: None,
    }
}
