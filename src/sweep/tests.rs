//! Tests of the sweep as a whole on the premium scenario: runs, rows, charts and tune.

use super::plots::{self, SweepChart};
use super::run::ClassMetric;
use super::*;
use crate::report::chart::PlotFormat;
use std::path::Path;

fn premium_scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/premium-vs-regular-weighted.yaml")
}

fn args(sets: &[&str], seeds: u32) -> SweepArgs {
    SweepArgs {
        scenario: premium_scenario(),
        sets: sets.iter().map(|s| s.to_string()).collect(),
        seeds,
        jobs: Some(1),
        out: PathBuf::from("unused"),
        force: false,
        quiet: true,
        shard: None,
        arrival_jitter_ns: 0,
        prefix_n: None,
    }
}

fn rows_of(args: &SweepArgs) -> (Manifest, Vec<Row>) {
    let plan = SweepPlan::from_args(args).unwrap();
    let rows = plan.run(args.jobs, false).unwrap();
    (plan.manifest, rows)
}

#[test]
fn weighted_quanta_give_premium_its_fluid_share_of_the_first_320() {
    let (manifest, rows) = rows_of(&args(&["router.policy_classes.regular.quantum=128,512"], 1));
    assert_eq!(manifest.class_names, vec!["premium", "regular"]);
    assert_eq!(rows.len(), 2);
    let premium = |r: &Row| r.classes[0].share_first_n.unwrap() * r.prefix_n as f64;
    // Dynamo's four live runs: 254-257 premium of the first 320 at 512:128; ~160 at 512:512.
    assert!(
        (250.0..=258.0).contains(&premium(&rows[0])),
        "{}",
        premium(&rows[0])
    );
    assert!(
        (155.0..=165.0).contains(&premium(&rows[1])),
        "{}",
        premium(&rows[1])
    );
    assert_eq!(rows[0].prefix_n, 320);
    assert!((rows[0].classes[0].ideal_share - 0.8).abs() < 1e-12);
    assert_eq!(rows[0].classes[1].completed, 320);
    assert!(
        rows[0].classes[1].ttft_ms_p99 > rows[0].classes[0].ttft_ms_p99,
        "regular waits longer"
    );
}

#[test]
fn replications_without_jitter_repeat_and_with_jitter_spread() {
    let mut a = args(&[], 4);
    let (_, plain) = rows_of(&a);
    let share = |r: &Row| r.classes[0].share_first_n.unwrap();
    assert!(
        plain.iter().all(|r| share(r) == share(&plain[0])),
        "deterministic scenario"
    );
    a.arrival_jitter_ns = 1_000;
    let (_, jittered) = rows_of(&a);
    assert!(
        jittered.iter().any(|r| share(r) != share(&jittered[0])),
        "jitter spreads"
    );
    assert!(jittered.iter().all(|r| (0.78..=0.82).contains(&share(r))));
    assert_eq!(jittered, rows_of(&a).1, "reproducible");
}

#[test]
fn the_prefix_n_option_sets_the_share_window() {
    let mut a = args(&[], 1);
    a.prefix_n = Some(40);
    let (manifest, rows) = rows_of(&a);
    assert_eq!(manifest.prefix_n, Some(40));
    assert_eq!(rows[0].prefix_n, 40);
    let premium_of_40 = rows[0].classes[0].share_first_n.unwrap() * 40.0;
    assert_eq!(premium_of_40.fract(), 0.0);
}

#[test]
fn a_bad_path_or_value_is_an_input_error_naming_the_path() {
    let err =
        SweepPlan::from_args(&args(&["router.policy_classes.gold.quantum=1,2"], 1)).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(
        err.to_string().contains("router.policy_classes.gold"),
        "{err}"
    );
    let err = SweepPlan::from_args(&args(&["router.policy_classes.regular.quantum=64,abc"], 1))
        .unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(
        err.to_string()
            .contains("router.policy_classes.regular.quantum"),
        "{err}"
    );
    let err = SweepPlan::from_args(&args(&[], 0)).unwrap_err();
    assert_eq!(err.exit_code(), 2);
}

#[test]
fn the_share_chart_has_bands_and_the_smooth_ideal_curve() {
    let (manifest, rows) = rows_of(&args(&["router.policy_classes.regular.quantum=128,512"], 1));
    let summaries = table::summarize(&manifest, &rows);
    let chart = plots::line_chart(&manifest, &summaries, 0, ClassMetric::ShareFirstN, &[]);
    assert_eq!(chart.name, "share_first_n_vs_regular.quantum");
    let [premium, premium_ideal, regular, regular_ideal] = &chart.series[..] else {
        panic!("a measured and an ideal line per class: {:?}", chart.series)
    };
    assert_eq!(
        premium.points.iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![128.0, 512.0]
    );
    let band = premium.band.as_ref().unwrap();
    assert!(
        band.iter()
            .zip(&premium.points)
            .all(|(&(_, low, high), &(_, mean))| low <= mean && mean <= high)
    );
    // The ideal premium share at regular quantum x is 512 / (512 + x), not a straight line.
    assert!(premium_ideal.dashed && !regular.dashed);
    let (x, ideal) = premium_ideal.points[premium_ideal.points.len() / 2];
    assert_eq!(x, 320.0);
    assert!((ideal - 512.0 / 832.0).abs() < 1e-9, "{ideal}");
    let regular_share = regular_ideal.points[regular_ideal.points.len() / 2].1;
    assert!((regular_share - 320.0 / 832.0).abs() < 1e-9);
}

#[test]
fn latency_charts_are_log_scaled_with_the_scenarios_bounds() {
    use crate::report::chart::{Direction, Scale};
    use crate::report::expect::{LatencyFigure, RawExpectation};
    let (manifest, rows) = rows_of(&args(&["router.policy_classes.regular.quantum=128,512"], 1));
    let summaries = table::summarize(&manifest, &rows);
    let bound = |metric: &str| RawExpectation {
        latency: Some(LatencyFigure {
            class: "regular".into(),
            metric: metric.into(),
        }),
        at_most: Some(6000.0),
        ..RawExpectation::default()
    };
    let classes = ["premium".to_string(), "regular".to_string()];
    let expectations = [bound("ttft_ms_p99"), bound("ttft_ms_p50")]
        .map(|raw| crate::report::expect::Expectation::parse(&raw, &classes).unwrap());
    let latency = plots::line_chart(
        &manifest,
        &summaries,
        0,
        ClassMetric::TtftMsP99,
        &expectations,
    );
    assert!(latency.series.iter().all(|s| !s.dashed), "no ideal latency");
    assert_eq!(latency.y.scale, Scale::Log);
    assert!(latency.y.range.0 > 0.0 && latency.y.range.1 >= 6000.0);
    let [line] = &latency.references[..] else {
        panic!("only the p99 bound: {:?}", latency.references)
    };
    assert_eq!(
        (line.direction, line.label.as_str(), line.class),
        (Direction::Horizontal, "regular ttft p99 ≤ 6000 ms", Some(1))
    );
    let svg = plots::render(&SweepChart::Lines(latency), PlotFormat::Svg).unwrap();
    assert!(
        String::from_utf8(svg)
            .unwrap()
            .contains("regular ttft p99 ≤ 6000 ms")
    );
    let share = plots::line_chart(
        &manifest,
        &summaries,
        0,
        ClassMetric::ShareFirstN,
        &expectations,
    );
    assert!(share.references.is_empty());
}

#[test]
fn plots_render_to_png_and_svg_and_two_axes_give_heatmaps() {
    let (manifest, rows) = rows_of(&args(
        &[
            "router.policy_classes.regular.quantum=128,512",
            "router.policy_classes.premium.quantum=256,512",
        ],
        1,
    ));
    let summaries = table::summarize(&manifest, &rows);
    let charts = plots::all_charts(&manifest, &summaries, &[]);
    let names: Vec<&str> = charts.iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        vec![
            "heatmap_premium_share_first_n",
            "heatmap_regular_share_first_n"
        ]
    );
    let SweepChart::Heatmap(h) = &charts[0] else {
        panic!("a heatmap")
    };
    // Cell (regular 512, premium 256): premium's fluid share 256/768.
    let cell = h.cells[h.y_values.len()].unwrap();
    assert!((cell - 1.0 / 3.0).abs() < 0.02, "{cell}");
    let png = plots::render(&charts[0], PlotFormat::Png).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 5_000);
    let svg = String::from_utf8(plots::render(&charts[0], PlotFormat::Svg).unwrap()).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains(&format!("{cell:.3}")));
}

#[test]
fn three_varied_axes_are_not_plotted() {
    let (manifest, rows) = rows_of(&args(
        &[
            "router.policy_classes.regular.quantum=128,512",
            "router.policy_classes.premium.quantum=256,512",
            "workers.engine.max_num_seqs=4,8",
        ],
        1,
    ));
    assert_eq!(rows.len(), 8);
    let summaries = table::summarize(&manifest, &rows);
    assert!(plots::all_charts(&manifest, &summaries, &[]).is_empty());
}

fn tune_args(targets: &[&str], vary: &[&str]) -> TuneArgs {
    TuneArgs {
        scenario: premium_scenario(),
        targets: targets.iter().map(|s| s.to_string()).collect(),
        vary: vary.iter().map(|s| s.to_string()).collect(),
        tolerance: 0.02,
        share: tune::ShareKind::FirstN,
        prefix_n: None,
        jobs: Some(1),
    }
}

#[test]
fn tune_finds_512_to_128_for_a_premium_share_of_0_8() {
    let outcome = tune::tune(&tune_args(&["premium=0.8"], &[])).unwrap();
    assert!(outcome.met, "{}", outcome.describe());
    assert_eq!(outcome.quanta, vec![512, 128]);
    assert!((outcome.achieved[0] - 0.8).abs() <= 0.02);
    let text = outcome.describe();
    assert!(
        text.contains("router.policy_classes.regular.quantum=128"),
        "{text}"
    );
    assert!(text.contains("sensitivity"));
    // Sensitivity: a larger regular quantum lowers premium's share.
    let regular: Vec<&tune::Neighbour> = outcome
        .neighbours
        .iter()
        .filter(|n| n.path.contains("regular"))
        .collect();
    assert_eq!(
        regular.iter().map(|n| n.quantum).collect::<Vec<_>>(),
        vec![64, 96, 160, 256]
    );
    assert!(
        regular
            .windows(2)
            .all(|w| w[0].achieved[0] > w[1].achieved[0])
    );
}

#[test]
fn tune_with_one_varied_quantum_keeps_the_others() {
    let outcome = tune::tune(&tune_args(
        &["regular=0.5"],
        &["router.policy_classes.regular.quantum"],
    ))
    .unwrap();
    assert!(outcome.met, "{}", outcome.describe());
    assert_eq!(outcome.quanta, vec![512]);
}

#[test]
fn tune_reports_bad_targets_and_paths_as_input_errors() {
    for (targets, vary) in [
        (vec!["premium=0.7", "regular=0.7"], vec![]),
        (vec!["gold=0.5"], vec![]),
        (vec!["premium=0.5"], vec!["workers.count"]),
    ] {
        let err = tune::tune(&tune_args(&targets, &vary)).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{err}");
    }
}

#[test]
fn exit_codes_follow_the_cli_convention() {
    assert_eq!(SweepError::Input(String::new()).exit_code(), 2);
    assert_eq!(SweepError::TargetMissed(String::new()).exit_code(), 1);
    assert_eq!(SweepError::Internal(String::new()).exit_code(), 3);
}
