//! Workloads sized by rate and time (`share`, `rate_per_s`, `duration_s`, `arrival`), the
//! closed loop (`concurrency`) and the warmup: their validation errors and what they resolve to.

use super::test_support::load;
use super::*;
use crate::time::SimTime;
use crate::workload::synth::{Arrival, Process};

const SHARED: &str = "\
name: shared
router:
  default_policy_family: regular
  uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
  policy_classes:
    - {name: premium, policy_family: premium, cache_bucket: all, quantum: 2048}
    - {name: regular, policy_family: regular, cache_bucket: all, quantum: 512}
workload:
  rate_per_s: 40
  duration_s: 100
  groups:
    - {name: premium, class: premium, share: 0.3, input_tokens: 64, output_tokens: 1}
    - {name: regular, class: regular, share: 0.7, input_tokens: 64, output_tokens: 1}
";

/// (line, field path) of the error `text` gives, and its message.
fn error_at(text: &str) -> (Option<usize>, String, String) {
    let e = load(text, &[]).unwrap_err();
    assert_eq!(e.file, "s.yaml");
    (e.line, e.field_path, e.message)
}

/// Requests per class name, in row order.
fn per_class(scenario: &Scenario, seed: u64) -> (usize, usize) {
    let requests = scenario.requests(seed).unwrap();
    let premium = requests
        .iter()
        .filter(|r| r.policy_class.as_deref() == Some("premium"))
        .count();
    (premium, requests.len() - premium)
}

#[test]
fn shares_split_the_rate_and_the_counts_follow_from_the_draws() {
    let scenario = load(SHARED, &[]).unwrap();
    let Workload::Synthetic(synth) = scenario.workload() else {
        panic!("synthetic")
    };
    let expected_arrival = |rate_per_s| Arrival::Timed {
        process: Process::Poisson,
        rate_per_s,
        until: SimTime::from_ns(100_000_000_000),
        shape: None,
    };
    assert_eq!(synth.groups[0].arrival, expected_arrival(40.0 * 0.3));
    assert_eq!(synth.groups[1].arrival, expected_arrival(40.0 * 0.7));
    assert_eq!((synth.groups[0].count, synth.groups[1].count), (1200, 2800));
    let (premium, regular) = per_class(&scenario, 0);
    // Poisson counts: 1200 ± 35 and 2800 ± 53 (one standard deviation).
    assert!((1060..=1340).contains(&premium), "{premium}");
    assert!((2590..=3010).contains(&regular), "{regular}");
    assert_ne!(
        per_class(&scenario, 1),
        (premium, regular),
        "drawn per seed"
    );
}

#[test]
fn set_rate_per_s_scales_every_shared_group_together() {
    let slow = load(SHARED, &[("workload.rate_per_s", "10")]).unwrap();
    let fast = load(SHARED, &[("workload.rate_per_s", "80")]).unwrap();
    let (slow_p, slow_r) = per_class(&slow, 0);
    let (fast_p, fast_r) = per_class(&fast, 0);
    assert!((250..=350).contains(&slow_p) && (600..=800).contains(&slow_r));
    assert!((2200..=2600).contains(&fast_p) && (5200..=6000).contains(&fast_r));
    let uniform = load(
        SHARED,
        &[
            ("workload.rate_per_s", "20"),
            ("workload.arrival", "uniform"),
        ],
    )
    .unwrap();
    assert_eq!(per_class(&uniform, 0), (600, 1400), "20/s x 100 s, exactly");
}

#[test]
fn a_group_has_share_or_count_never_both_nor_neither() {
    let both = SHARED.replace("share: 0.3,", "share: 0.3, count: 5,");
    let (line, field, message) = error_at(&both);
    assert_eq!(
        (line, field.as_str()),
        (Some(12), "workload.groups.premium.share")
    );
    assert!(
        message.contains("`share` or `count`, not both"),
        "{message}"
    );
    let neither = SHARED.replace("share: 0.3,", "");
    let (line, field, _) = error_at(&neither);
    assert_eq!(
        (line, field.as_str()),
        (Some(12), "workload.groups.premium.count")
    );
    let own_arrival = SHARED.replace("share: 0.3,", "share: 0.3, arrival: burst,");
    let (line, field, _) = error_at(&own_arrival);
    assert_eq!(
        (line, field.as_str()),
        (Some(12), "workload.groups.premium.arrival")
    );
    let (_, field, _) = error_at(&SHARED.replace("share: 0.3,", "share: -0.3,"));
    assert_eq!(field, "workload.groups.premium.share");
}

#[test]
fn shares_must_add_up_to_one() {
    let (line, field, message) = error_at(&SHARED.replace("share: 0.7", "share: 0.6"));
    assert_eq!(
        (line, field.as_str()),
        (Some(12), "workload.groups.premium.share")
    );
    assert!(
        message.contains("add up to 0.9") && message.contains("premium 0.3 + regular 0.6"),
        "{message}"
    );
    // Decimal fractions that miss 1 only by rounding are accepted.
    let thirds = SHARED
        .replace("share: 0.7", "share: 0.35")
        .replace(
            "    - {name: regular, class:",
            "    - {name: third, class: regular, share: 0.35, input_tokens: 64, output_tokens: 1}\n    - {name: regular, class:",
        );
    assert_ne!(0.3 + 0.35 + 0.35, 1.0, "the sum in group order is inexact");
    load(&thirds, &[]).unwrap();
}

#[test]
fn rate_duration_and_process_are_checked_by_field() {
    let cases = [
        ("  rate_per_s: 40\n", "", "workload.rate_per_s", "required"),
        (
            "  rate_per_s: 40\n",
            "  rate_per_s: 0\n",
            "workload.rate_per_s",
            "positive",
        ),
        ("  duration_s: 100\n", "", "workload.duration_s", "required"),
        (
            "  duration_s: 100\n",
            "  duration_s: .nan\n",
            "workload.duration_s",
            "positive",
        ),
        (
            "  duration_s: 100\n",
            "  duration_s: 1e300\n",
            "workload.duration_s",
            "",
        ),
        (
            "  rate_per_s: 40\n",
            "  rate_per_s: 40000\n",
            "workload.rate_per_s",
            "at most 1000000",
        ),
        (
            "  duration_s: 100\n",
            "  duration_s: 100\n  arrival: {gamma: {cv: 0}}\n",
            "workload.arrival.gamma.cv",
            "positive",
        ),
    ];
    for (from, to, path, words) in cases {
        let (line, field, message) = error_at(&SHARED.replace(from, to));
        assert_eq!(field, path, "{to}: {message}");
        assert!(line.is_some(), "{to}: {message}");
        assert!(message.contains(words), "{to}: {message}");
    }
    let gamma = SHARED.replace(
        "  duration_s: 100\n",
        "  duration_s: 100\n  arrival: {gamma: {cv: 2.5}}\n",
    );
    let Workload::Synthetic(synth) = load(&gamma, &[]).unwrap().workload().clone() else {
        panic!("synthetic")
    };
    assert!(matches!(
        synth.groups[0].arrival,
        Arrival::Timed { process: Process::Gamma { cv }, .. } if cv == 2.5
    ));
}

#[test]
fn workload_rate_fields_without_shared_groups_are_errors() {
    let counted = "name: c\nworkload:\n  rate_per_s: 5\n  groups:\n    - {name: a, count: 3, input_tokens: 64, output_tokens: 1}\n";
    let (line, field, _) = error_at(counted);
    assert_eq!((line, field.as_str()), (Some(3), "workload.rate_per_s"));
    let (_, field, _) = error_at(&counted.replace("rate_per_s: 5", "arrival: uniform"));
    assert_eq!(field, "workload.arrival");
    let (_, field, _) = error_at(&counted.replace("rate_per_s: 5", "duration_s: 5"));
    assert_eq!(field, "workload.duration_s");
    // With a closed loop, `duration_s` bounds the issuing instead.
    let closed = counted.replace("rate_per_s: 5", "duration_s: 5\n  concurrency: 2");
    let closed_loop = load(&closed, &[]).unwrap().config().closed_loop();
    assert_eq!(
        closed_loop,
        Some(ClosedLoop {
            concurrency: 2,
            issue_until: Some(SimTime::from_ns(5_000_000_000))
        })
    );
}

#[test]
fn counted_and_shared_groups_mix_in_one_file() {
    let mixed = SHARED.replace(
        "    - {name: premium, class:",
        "    - {name: probe, count: 7, input_tokens: 64, output_tokens: 1, arrival: {interval: {every_ms: 1000, start_ms: 500}}}\n    - {name: premium, class:",
    );
    let scenario = load(&mixed, &[]).unwrap();
    let requests = scenario.requests(0).unwrap();
    let probes: Vec<SimTime> = requests
        .iter()
        .filter(|r| r.policy_class.is_none())
        .map(|r| r.arrival)
        .collect();
    let expected: Vec<SimTime> = (0..7)
        .map(|k| SimTime::from_ns(500_000_000 + k * 1_000_000_000))
        .collect();
    assert_eq!(probes, expected, "a counted group keeps its own arrival");
    // The shared groups draw exactly what they draw without the probe group.
    let shared_only = |s: &Scenario| -> Vec<(Option<String>, SimTime)> {
        s.requests(0)
            .unwrap()
            .into_iter()
            .filter(|r| r.policy_class.is_some())
            .map(|r| (r.policy_class, r.arrival))
            .collect()
    };
    assert_eq!(
        shared_only(&scenario),
        shared_only(&load(SHARED, &[]).unwrap())
    );
    assert!(requests.windows(2).all(|w| w[0].arrival <= w[1].arrival));
}

#[test]
fn concurrency_and_warmup_are_validated_and_reach_the_run() {
    let closed = SHARED.replace(
        "  duration_s: 100\n",
        "  duration_s: 100\n  concurrency: 8\n  warmup_s: 10\n",
    );
    let scenario = load(&closed, &[]).unwrap();
    assert_eq!(scenario.warmup(), SimDuration::from_ms(10_000));
    let closed_loop = scenario.config().closed_loop().unwrap();
    assert_eq!(closed_loop.concurrency, 8);
    assert_eq!(
        closed_loop.issue_until,
        Some(SimTime::from_ns(100_000_000_000))
    );
    assert_eq!(load(SHARED, &[]).unwrap().config().closed_loop(), None);
    let (_, field, _) = error_at(&closed.replace("concurrency: 8", "concurrency: 0"));
    assert_eq!(field, "workload.concurrency");
    let (_, field, message) = error_at(&closed.replace("warmup_s: 10", "warmup_s: 100"));
    assert_eq!(field, "workload.warmup_s");
    assert!(message.contains("shorter than duration_s"), "{message}");
    let (_, field, _) = error_at(&closed.replace("warmup_s: 10", "warmup_s: -1"));
    assert_eq!(field, "workload.warmup_s");
}

/// The shared scenario with `shape` as its `workload.rate_shape` (YAML flow list) and
/// `arrival`.
fn shaped(shape: &str, arrival: &str) -> String {
    SHARED.replace(
        "  duration_s: 100\n",
        &format!("  duration_s: 100\n  arrival: {arrival}\n  rate_shape: {shape}\n"),
    )
}

#[test]
fn a_rate_shape_scales_each_pieces_arrivals_and_a_closed_piece_has_none() {
    // 40/s at a quarter to 20 s, full to 50 s, closed to 60 s, a half past it.
    let shape = "[{until_s: 20, scale: 0.25}, {until_s: 50, scale: 1}, {until_s: 60, scale: 0}, \
                 {until_s: 70, scale: 0.5}]";
    let scenario = load(&shaped(shape, "uniform"), &[]).unwrap();
    let requests = scenario.requests(0).unwrap();
    let in_window = |from_s: u64, to_s: u64| {
        let (from, to) = (
            SimTime::from_ns(from_s * 1_000_000_000),
            SimTime::from_ns(to_s * 1_000_000_000),
        );
        requests
            .iter()
            .filter(|r| from <= r.arrival && r.arrival < to)
            .count()
    };
    // Uniform arrivals: exactly rate x share x scale x length per piece and group (12 and 28
    // per second at full scale), up to one at each piece's edge.
    let near = |count: usize, expected: f64| (count as f64 - expected).abs() <= 2.0;
    assert!(
        near(in_window(0, 20), 40.0 * 0.25 * 20.0),
        "{}",
        in_window(0, 20)
    );
    assert!(
        near(in_window(20, 50), 40.0 * 30.0),
        "{}",
        in_window(20, 50)
    );
    // An arrival due just as the busy piece ends is placed at its end, 50 s.
    let closed = requests
        .iter()
        .filter(|r| r.arrival.as_ns() > 50_000_000_000 && r.arrival.as_ns() < 60_000_000_000);
    assert_eq!(closed.count(), 0, "nothing arrives while the scale is 0");
    assert!(
        near(in_window(60, 100), 40.0 * 0.5 * 40.0),
        "the last scale holds to the end"
    );
    // The expected counts follow the shape's load, not the window's length.
    let Workload::Synthetic(synth) = scenario.workload() else {
        panic!("synthetic")
    };
    let load_s = 0.25 * 20.0 + 30.0 + 0.5 * 40.0;
    assert_eq!(synth.groups[0].count, (40.0 * 0.3 * load_s) as u64);
    // Poisson arrivals follow the same shape, drawn.
    let poisson = load(&shaped(shape, "poisson"), &[])
        .unwrap()
        .requests(0)
        .unwrap();
    let busy = poisson
        .iter()
        .filter(|r| r.arrival.as_ns() >= 20_000_000_000 && r.arrival.as_ns() < 50_000_000_000)
        .count();
    let quiet = poisson
        .iter()
        .filter(|r| r.arrival.as_ns() < 20_000_000_000)
        .count();
    assert!(
        (1_100..=1_300).contains(&busy) && (150..=250).contains(&quiet),
        "{busy} {quiet}"
    );
}

#[test]
fn a_workload_without_a_rate_shape_arrives_as_before() {
    let flat = load(&shaped("[{until_s: 100, scale: 1}]", "poisson"), &[]).unwrap();
    let plain = load(
        &SHARED.replace(
            "  duration_s: 100\n",
            "  duration_s: 100\n  arrival: poisson\n",
        ),
        &[],
    )
    .unwrap();
    let arrivals = |s: &Scenario| {
        s.requests(3)
            .unwrap()
            .iter()
            .map(|r| r.arrival)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        arrivals(&flat),
        arrivals(&plain),
        "a flat shape changes nothing"
    );
}

#[test]
fn bad_rate_shapes_name_the_piece_and_field() {
    let cases = [
        (
            "[{until_s: 20, scale: 1}, {until_s: 10, scale: 1}]",
            "workload.rate_shape.1.until_s",
        ),
        ("[{until_s: 20, scale: -1}]", "workload.rate_shape.0.scale"),
        ("[{until_s: 20, scale: 0}]", "workload.rate_shape.0.scale"),
        (
            "[{until_s: .nan, scale: 1}]",
            "workload.rate_shape.0.until_s",
        ),
        ("[]", "workload.rate_shape.0.until_s"),
        ("[{until_s: 20, rate: 1}]", "workload.rate_shape"),
    ];
    for (shape, path) in cases {
        let (line, field, message) = error_at(&shaped(shape, "poisson"));
        assert!(field.starts_with(path), "{shape}: {field}: {message}");
        assert!(line.is_some(), "{shape}: {message}");
    }
    let counted = SHARED
        .replace("share: 0.3", "count: 3")
        .replace("share: 0.7", "count: 7");
    let counted = counted.replace(
        "  rate_per_s: 40\n  duration_s: 100\n",
        "  rate_shape: [{until_s: 1, scale: 1}]\n",
    );
    let (_, field, _) = error_at(&counted);
    assert_eq!(field, "workload.rate_shape");
}
