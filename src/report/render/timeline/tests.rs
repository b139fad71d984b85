//! Unit tests of the timeline exporter: number formatting, phases that tile a request's
//! life, step counters, and the file's shape on a small run.

use super::*;

#[test]
fn microseconds_have_exactly_three_decimals() {
    let mut buf = Vec::new();
    for ns in [0, 1, 999, 1000, 1_234_567, u64::MAX] {
        push_us(&mut buf, ns);
        buf.push(b' ');
    }
    let text = String::from_utf8(buf).unwrap();
    assert_eq!(
        text,
        "0.000 0.001 0.999 1.000 1234.567 18446744073709551.615 "
    );
}

use crate::report::test_support::{done, ms, rejected, result_of};
use crate::scheduling::scheduler::DispatchPath;
use crate::scheduling::types::WorkerWithDpRank;
use crate::sim::HandoffRecord;

fn names(p: &RequestPhases) -> Vec<(&'static str, u64, u64)> {
    let ms_of = |t: SimTime| t.as_ns() / 1_000_000;
    p.phases
        .iter()
        .map(|&(n, a, b)| (n, ms_of(a), ms_of(b)))
        .collect()
}

#[test]
fn a_completed_requests_phases_are_queued_prefill_and_decode_and_tile_its_life() {
    let mut r = done(0, 0, DispatchPath::Queued, [10, 30, 90]);
    r.first_token = Some(ms(50));
    let p = request_phases(&r, 0, ms(1000), None);
    let expected = vec![("queued", 10, 30), ("prefill", 30, 50), ("decode", 50, 90)];
    assert_eq!(names(&p), expected);
    assert_eq!(p.end, ms(90));
}

#[test]
fn a_request_refused_at_arrival_has_no_phase_and_one_still_pending_lasts_to_the_run_end() {
    let mut refused = done(1, 0, DispatchPath::Queued, [5, 5, 5]);
    refused.dispatched = None;
    refused.first_token = None;
    refused.status = rejected();
    assert!(request_phases(&refused, 0, ms(100), None).phases.is_empty());
    let mut pending = done(2, 0, DispatchPath::Queued, [5, 8, 5]);
    (pending.first_token, pending.completion) = (None, None);
    pending.status = crate::sim::Status::Pending;
    let p = request_phases(&pending, 0, ms(100), None);
    assert_eq!(names(&p), vec![("queued", 5, 8), ("prefill", 8, 100)]);
}

#[test]
fn a_disaggregated_request_has_a_kv_transfer_phase_and_a_migrated_one_a_moved_phase() {
    let mut r = done(3, 0, DispatchPath::Queued, [0, 10, 100]);
    r.rare_mut().handoff = Some(HandoffRecord {
        prefill_rank: WorkerWithDpRank::new(0, 0),
        prefill_end: Some(ms(40)),
        transfer_start: Some(ms(40)),
        transfer_end: Some(ms(45)),
        prefill_release: Some(ms(46)),
        decode_admit: Some(ms(45)),
        decode_reused_input_tokens: 0,
    });
    let p = request_phases(&r, 0, ms(100), None);
    let expected = vec![
        ("queued", 0, 10),
        ("prefill", 10, 40),
        ("kv_transfer", 40, 45),
        ("decode", 45, 100),
    ];
    assert_eq!(names(&p), expected);
    let mut moved = done(4, 0, DispatchPath::Queued, [0, 70, 100]);
    moved.first_token = Some(ms(20)); // before the move: its tokens were kept
    let p = request_phases(&moved, 0, ms(100), Some(ms(60)));
    let expected = vec![("moved", 0, 60), ("queued", 60, 70), ("decode", 70, 100)];
    assert_eq!(names(&p), expected);
}

#[test]
fn a_step_counter_shows_each_tracks_value_at_the_end_of_each_instant_it_changed() {
    let changes = [
        (ms(1), 0, 1),
        (ms(1), 0, 1),
        (ms(2), 0, -1),
        (ms(2), 0, 1), // in and out at one instant: no sample
        (ms(3), 1, 1),
        (ms(4), 0, -2),
    ];
    let samples = step_counter(changes.into_iter());
    let got: Vec<(u64, u32, u64)> = samples
        .iter()
        .map(|s| (s.at.as_ns() / 1_000_000, s.track, s.value))
        .collect();
    assert_eq!(got, vec![(1, 0, 2), (3, 1, 1), (4, 0, 0)]);
}

#[test]
fn a_run_without_a_recorded_timeline_has_no_timeline_file() {
    let result = result_of(&["a"], vec![done(0, 0, DispatchPath::Queued, [0, 1, 2])]);
    assert!(timeline_exporter(&result, &serde_json::Value::Null, 10).is_none());
}

#[test]
fn strings_are_escaped_as_json() {
    let mut buf = Vec::new();
    push_json_str(&mut buf, "a\"b\\c\nd");
    assert_eq!(String::from_utf8(buf).unwrap(), r#""a\"b\\c\u000ad""#);
}

#[test]
fn a_recorded_run_exports_valid_json_with_one_slice_per_request_and_pass() {
    use crate::sim::{RunDescription, WorkerPool};
    let engine = crate::mocker::EngineArgs::default();
    let config = crate::sim::resolve(RunDescription {
        pools: vec![WorkerPool::unnamed(2, engine)],
        ..RunDescription::default()
    })
    .expect("a valid run");
    let requests = (0..20u64).map(|row| crate::workload::RequestSpec {
        row,
        arrival: ms(row),
        policy_class: None,
        input_tokens: 64,
        output_tokens: 40,
        priority: 0.0,
        strict_priority: 0,
        prompt: crate::workload::PromptSpec::HashIds {
            hash_ids: vec![row],
            tokens_per_hash: 64,
        },
        pinned_worker: None,
    });
    let options = crate::sim::Options::new(config).with_timeline(true);
    let result = crate::sim::run(options, requests).unwrap();
    let timeline = result.timeline.as_deref().unwrap();
    assert!(
        timeline.passes.iter().any(|p| p.passes > 1),
        "quiet runs are one slice"
    );
    let bytes = timeline_json(&result, &serde_json::json!({"command": "test"}), 5);
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let events = value["traceEvents"].as_array().unwrap();
    let count = |ph: &str| events.iter().filter(|e| e["ph"] == ph).count();
    assert_eq!(count("X"), timeline.passes.len());
    let parents = events
        .iter()
        .filter(|e| e["ph"] == "b" && e["name"].as_str().unwrap().starts_with("request"))
        .count();
    assert_eq!(parents, 5);
    assert_eq!(value["otherData"]["requests_omitted"], 15);
    assert_eq!(
        bytes,
        timeline_json(&result, &serde_json::json!({"command": "test"}), 5)
    );
}
