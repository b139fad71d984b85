//! Pipeline tests: the replication seeds every command shares, the request cache, and trace
//! replays read once.

use super::*;
use crate::mocker::EngineArgs;
use crate::scheduling::router_config::RouterConfig;
use crate::scheduling::scheduler::DEFAULT_TICK_INTERVAL;
use crate::sim::{RouterMode, RunDescription, WorkerPool};
use crate::workload::RequestSpec;
use crate::workload::read_ahead::tests::{same_length_rows, sorted_trace};
use crate::workload::trace::{self, TraceReader};

#[test]
fn replication_zero_is_the_base_seed_and_the_rest_are_reproducible() {
    let seeds = replication_seeds(7, 4);
    assert_eq!(seeds[0], 7);
    assert_eq!(seeds, replication_seeds(7, 4));
    assert_eq!(replication_seeds(7, 2), seeds[..2]);
    assert_ne!(seeds[1], seeds[2]);
    assert_ne!(replication_seeds(8, 2)[1], seeds[1]);
}

#[test]
fn the_replication_seeds_are_drawn_from_the_sweep_replication_stream() {
    // Pinned: sweeps written before the pipeline existed name these seeds in sweep.csv.
    let mut stream = rng::stream(7, "sweep/replication");
    let expected = [7, stream.next_u64(), stream.next_u64()];
    assert_eq!(replication_seeds(7, 3), expected);
    assert!(replication_seeds(7, 0).is_empty());
}

/// `config` changed as `change` says, and resolved again.
fn changed(config: &SimConfig, change: impl FnOnce(&mut RunDescription)) -> SimConfig {
    let mut description = config.to_description();
    change(&mut description);
    crate::sim::resolve(description).expect("a valid run")
}

fn bundled(name: &str) -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name);
    Scenario::load(&path).unwrap()
}

#[test]
fn runs_sharing_a_request_cache_draw_once_and_match_uncached_runs() {
    let scenario = bundled("poisson-multi-worker.yaml");
    let cache = Arc::new(RequestCache::default());
    for workers in [2, 4] {
        let mut plain = RunSpec::from_scenario(&scenario, 3);
        plain.config = changed(&plain.config, |d| d.pools[0].count = workers);
        let mut cached = plain.clone();
        cached.request_cache = Some(cache.clone());
        let (a, b) = (execute(&plain).unwrap(), execute(&cached).unwrap());
        assert_eq!(a.result.records, b.result.records, "{workers} workers");
    }
    assert_eq!(cache.len(), 1, "one draw served both worker counts");
    let other_seed = RunSpec {
        request_cache: Some(cache.clone()),
        ..RunSpec::from_scenario(&scenario, 4)
    };
    execute(&other_seed).unwrap();
    assert_eq!(cache.len(), 2, "another seed is another draw");
}

#[test]
fn a_scenario_run_starts_from_the_scenarios_config_with_the_runs_seed() {
    let scenario = bundled("poisson-multi-worker.yaml");
    let spec = RunSpec::from_scenario(&scenario, scenario.seed() + 1);
    assert_eq!(spec.seed(), scenario.seed() + 1);
    let template = scenario.config();
    assert_eq!(spec.config.pools(), template.pools());
    assert_eq!(spec.config.limits(), template.limits());
    assert_eq!(spec.config.delays(), template.delays());
    assert_eq!(spec.config.router_mode(), template.router_mode());
    assert_eq!(spec.class_names(), scenario.class_names());
}

#[test]
fn a_replay_runs_the_default_config_but_for_its_own_router_workers_mode_and_seed() {
    let (_dir, spec) = replay_spec(UNSORTED);
    let defaults = SimConfig::default();
    assert_eq!(
        spec.config.pools(),
        vec![WorkerPool::unnamed(1, EngineArgs::default())]
    );
    assert_eq!(spec.config.limits(), defaults.limits());
    assert_eq!(spec.config.delays(), defaults.delays());
    assert_eq!(
        spec.config.scheduler_config().tick_interval,
        DEFAULT_TICK_INTERVAL
    );
    assert_eq!(spec.config.closed_loop(), None);
    assert!(spec.config.faults().is_empty() && spec.config.migration_limit() == 0);
}

/// A one-worker replay of `trace_text` (default engine, no policy), in a temporary file.
fn replay_spec(trace_text: &str) -> (tempfile::TempDir, RunSpec) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, trace_text).unwrap();
    let setup = ReplaySetup {
        trace: path,
        trace_block_size: trace::DEFAULT_TRACE_BLOCK_SIZE,
        policy: None,
        policy_file: None,
        router: RouterConfig::default(),
        engine: EngineArgs::default(),
        workers: 1,
        router_mode: RouterMode::KvRouter,
        seed: 0,
        kv_event_lag: crate::time::SimDuration::ZERO,
        disaggregated: None,
    };
    (dir, RunSpec::from_replay(&setup).expect("a valid replay"))
}

/// Rows out of time order: a closed loop must still issue them in file order.
const UNSORTED: &str = concat!(
    r#"{"timestamp": 50, "input_length": 512, "output_length": 3, "hash_ids": [1]}"#,
    "\n",
    r#"{"timestamp": 10, "input_length": 1024, "output_length": 2, "hash_ids": [2, 3]}"#,
    "\n",
    r#"{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [4]}"#,
    "\n",
);

/// (row, arrival ns, completion ns) in row order.
fn timeline(output: &RunOutput) -> Vec<(u64, u64, u64)> {
    let mut rows: Vec<_> = output
        .result
        .records
        .iter()
        .map(|r| (r.row, r.arrival.as_ns(), r.completion.unwrap().as_ns()))
        .collect();
    rows.sort();
    rows
}

#[test]
fn a_closed_loop_over_a_trace_issues_rows_in_file_order_as_others_end() {
    let (_dir, spec) = replay_spec(UNSORTED);
    let closed = execute(&spec.clone().with_replay_modes(Some(1), 1.0)).unwrap();
    let rows = timeline(&closed);
    // Row 0 (the latest timestamp) first, at 0; each next row at the previous one's end.
    assert_eq!(rows[0].1, 0);
    assert_eq!(rows[1].1, rows[0].2);
    assert_eq!(rows[2].1, rows[1].2);
    // Two in flight: rows 0 and 1 at 0, row 2 when the first of them ends.
    let two = timeline(&execute(&spec.clone().with_replay_modes(Some(2), 1.0)).unwrap());
    assert_eq!((two[0].1, two[1].1), (0, 0));
    assert_eq!(two[2].1, two[0].2.min(two[1].2));
    // A closed loop ignores the speed-up ratio, as Dynamo does.
    let sped = execute(&spec.with_replay_modes(Some(2), 4.0)).unwrap();
    assert_eq!(timeline(&sped), two);
}

#[test]
fn an_open_loop_speedup_divides_the_trace_arrivals() {
    let (_dir, spec) = replay_spec(UNSORTED);
    let arrivals = |ratio: f64| -> Vec<u64> {
        let output = execute(&spec.clone().with_replay_modes(None, ratio)).unwrap();
        timeline(&output).iter().map(|r| r.1).collect()
    };
    assert_eq!(arrivals(1.0), vec![50_000_000, 10_000_000, 0]);
    assert_eq!(arrivals(4.0), vec![12_500_000, 2_500_000, 0]);
    assert_eq!(arrivals(0.5), vec![100_000_000, 20_000_000, 0]);
}

/// `spec`'s run as it was made before a replay read its trace once: a scan, then a second
/// read (streamed in file order for a closed loop, in time order for an open one).
fn two_pass(spec: &RunSpec) -> RunOutput {
    let RequestSource::Trace {
        path,
        block_size,
        arrival_speedup_ratio,
    } = &spec.source
    else {
        panic!("a trace replay");
    };
    let requests: Box<dyn Iterator<Item = RequestSpec>> = match spec.config.closed_loop() {
        Some(_) => {
            read_ahead::scan_trace(path, *block_size, 1.0).unwrap();
            let file = read_ahead::open_trace(path).unwrap();
            Box::new(TraceReader::new(file, "t", *block_size).map(Result::unwrap))
        }
        None => read_ahead::time_ordered(path, *block_size, *arrival_speedup_ratio).unwrap(),
    };
    measure(
        spec,
        sim::run(sim::Options::new(spec.config.clone()), requests).unwrap(),
    )
}

/// What a replay writes of `output` (requests.csv, the summary), and how its run ended.
fn written(output: &RunOutput) -> (Vec<u8>, Vec<u8>, u64, SimTime) {
    let result = &output.result;
    assert_eq!(result.stop_reason, crate::engine::StopReason::Drained);
    (
        crate::report::render::requests_csv::requests_csv(result),
        crate::report::render::data_files::summary_json(&output.metrics, &serde_json::json!({})),
        result.events,
        result.end_time,
    )
}

#[test]
fn rows_told_which_blocks_are_theirs_alone_replay_as_rows_told_nothing() {
    // Some rows share one or two leading ids, one in three is all shared; the rest of each
    // row is its own. The pool is small enough to evict and preempt, and two workers make
    // the router's overlap count.
    let rows: Vec<String> = (0..480u64)
        .map(|i| {
            let ids = match i % 3 {
                0 => format!("1, 2, {}", 1000 + i),
                1 => format!("1, 3, {}, {}", 2000 + i, 3000 + i),
                _ => "5, 6".to_string(),
            };
            let input = 512 * (ids.matches(',').count() as u64 + 1) - 7 * (i % 5);
            format!(
                r#"{{"timestamp": {}, "input_length": {input}, "output_length": {}, "hash_ids": [{ids}]}}"#,
                4 * i,
                20 + 7 * (i % 11)
            )
        })
        .collect();
    let (_dir, mut spec) = replay_spec(&(rows.join("\n") + "\n"));
    spec.config = changed(&spec.config, |d| {
        d.pools[0].count = 2;
        d.pools[0].engine.common.capacity.num_gpu_blocks = 96;
    });
    let told = execute(&spec).unwrap();
    assert!(told.result.preemptions > 0, "the pool must preempt");
    assert_eq!(written(&told), written(&two_pass(&spec)));
}

/// `execute(spec)` and how many times it opened the trace.
fn execute_counting_opens(spec: &RunSpec) -> (Result<RunOutput, RunError>, u32) {
    let before = read_ahead::trace_opens();
    let output = execute(spec);
    (output, read_ahead::trace_opens() - before)
}

/// The replay modes the one-pass tests run: open loops as recorded and three times faster,
/// and a closed loop of 4.
fn modes(spec: &RunSpec) -> Vec<RunSpec> {
    vec![
        spec.clone(),
        spec.clone().with_replay_modes(None, 3.0),
        spec.clone().with_replay_modes(Some(4), 1.0),
    ]
}

#[test]
fn a_sorted_trace_is_read_once_and_replays_as_the_scan_then_read_did() {
    let (_dir, mut spec) = replay_spec(&(sorted_trace(300).join("\n") + "\n"));
    spec.config = changed(&spec.config, |d| d.pools[0].count = 2);
    for spec in modes(&spec) {
        let (output, opens) = execute_counting_opens(&spec);
        let output = output.unwrap();
        assert_eq!(opens, 1, "{:?}", spec.config.closed_loop());
        assert_eq!(output.result.records.len(), 300);
        assert_eq!(written(&output), written(&two_pass(&spec)));
    }
}

#[test]
fn an_unsorted_trace_replays_sorted_as_before() {
    // Out of order from the start, and only at the very end (after 299 rows streamed).
    let mut late = sorted_trace(299);
    late.push(
        r#"{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#.to_string(),
    );
    for text in [UNSORTED.to_string(), late.join("\n")] {
        let (_dir, mut spec) = replay_spec(&text);
        spec.config = changed(&spec.config, |d| d.pools[0].count = 2);
        for spec in modes(&spec) {
            let output = execute(&spec).unwrap();
            assert_eq!(written(&output), written(&two_pass(&spec)));
        }
    }
    let (_dir, spec) = replay_spec(&late.join("\n"));
    let output = execute(&spec).unwrap();
    let first = output.result.records.iter().min_by_key(|r| r.arrival);
    assert_eq!(
        first.map(|r| r.row),
        Some(299),
        "the row stamped 1 ms comes first"
    );
}

/// A replay reads its trace once: an invalid row that the run reaches only at the
/// end is still refused with the words the scan used before anything ran.
#[test]
fn an_invalid_last_row_is_still_an_error_naming_its_line() {
    let mut rows = sorted_trace(300);
    rows.push(r#"{"timestamp": 9000, "input_length": 5, "hash_ids": [1]}"#.to_string());
    let (_dir, spec) = replay_spec(&rows.join("\n"));
    let RequestSource::Trace { path, .. } = &spec.source else {
        panic!("a trace replay");
    };
    let expected = format!("{}:301: field `output_length`: missing", path.display());
    for spec in modes(&spec) {
        assert_eq!(
            execute(&spec).unwrap_err(),
            RunError::Input(expected.clone())
        );
    }
    // Also when the run stops before it reads that far (a time limit).
    let mut limited = spec.clone();
    limited.config = changed(&limited.config, |d| {
        d.limits.max_time = SimTime::from_ns(100_000_000)
    });
    assert_eq!(execute(&limited).unwrap_err(), RunError::Input(expected));
}

#[test]
fn a_sorted_trace_past_the_time_bound_or_the_run_gets_the_scans_error() {
    // Far more rows than the reader thread reads ahead of the run, so a run stopped early
    // leaves the pass undecided.
    let (_dir, spec) = replay_spec(&with_a_far_last_row(sorted_trace(4000)).join("\n"));
    let RequestSource::Trace {
        path, block_size, ..
    } = &spec.source
    else {
        panic!("a trace replay");
    };
    let scanned = RunError::Input(read_ahead::scan_trace(path, *block_size, 1e-3).unwrap_err());
    assert!(
        scanned.to_string().contains(":4001: field `timestamp`"),
        "{scanned}"
    );
    let slowed = spec.clone().with_replay_modes(None, 1e-3);
    assert_eq!(execute(&slowed).unwrap_err(), scanned);
    // A time limit stops the run long before the last row: the run stands as it was.
    let mut limited = spec.clone();
    limited.config = changed(&limited.config, |d| {
        d.limits.max_time = SimTime::from_ns(1_000_000_000)
    });
    let (output, opens) = execute_counting_opens(&limited);
    let output = output.unwrap();
    assert_eq!(
        opens, 2,
        "the pass, then a scan for the rows the run did not read"
    );
    let reference = two_pass(&limited);
    assert_eq!(
        crate::report::render::requests_csv::requests_csv(&output.result),
        crate::report::render::requests_csv::requests_csv(&reference.result)
    );
}

#[test]
fn a_run_stopped_early_needs_no_scan_when_the_reader_read_the_whole_trace() {
    // 51 rows: fewer than the reader thread reads ahead, so it reaches the end (and so
    // validates every row) although the run stops at 1 s; the result is the two-pass one.
    let rows = with_a_far_last_row(sorted_trace(50));
    let (_dir, mut limited) = replay_spec(&rows.join("\n"));
    limited.config = changed(&limited.config, |d| {
        d.limits.max_time = SimTime::from_ns(1_000_000_000)
    });
    let (output, opens) = execute_counting_opens(&limited);
    let output = output.unwrap();
    assert_eq!(opens, 1, "the pass read every row: no scan");
    let reference = two_pass(&limited);
    assert!(
        output.result.records.len() < rows.len(),
        "the run stopped early"
    );
    assert_eq!(
        crate::report::render::requests_csv::requests_csv(&output.result),
        crate::report::render::requests_csv::requests_csv(&reference.result)
    );
}

/// `rows` and a last row 1.5e12 ms after the first: within the time bound as recorded, not
/// slowed down a thousandfold.
fn with_a_far_last_row(mut rows: Vec<String>) -> Vec<String> {
    rows.push(
        r#"{"timestamp": 1.5e12, "input_length": 5, "output_length": 1, "hash_ids": [1]}"#
            .to_string(),
    );
    rows
}

#[test]
fn a_replay_reserves_its_records_once() {
    // Grown by doubling, the table of 1,000 records would hold 1,024.
    let (_dir, spec) = replay_spec(&same_length_rows(1_000));
    let output = execute(&spec).unwrap();
    assert_eq!(output.result.records.len(), 1_000);
    assert_eq!(output.result.records.capacity(), 1_000);
}
