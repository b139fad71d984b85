//! Tests of the sweep as a whole on the premium scenario: runs, rows, charts and tune.

use super::plots::{self, SweepChart};
use super::*;
use crate::pipeline::RunError;
use crate::report::render::chart::PlotFormat;
use crate::scenario::Scenario;
use std::path::{Path, PathBuf};

fn premium_scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/premium-vs-regular-weighted.yaml")
}

fn args(sets: &[&str], seeds: u32) -> SweepOptions {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    SweepOptions {
        scenario: premium_scenario(),
        grid: Grid::parse(&sets).unwrap(),
        seeds,
        jobs: Some(1),
        shard: None,
        arrival_jitter_ns: 0,
        prefix_n: None,
        seed: None,
    }
}

fn rows_of(options: &SweepOptions) -> (Manifest, Vec<Row>) {
    let plan = SweepPlan::new(options).unwrap();
    let run = plan.run(false).unwrap();
    assert!(run.stopped.is_empty(), "{:?}", run.stop_warning());
    (plan.manifest, run.rows)
}

fn share(row: &Row) -> f64 {
    row.classes[0].share_first_n.unwrap()
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
    let err = SweepPlan::new(&args(&["router.policy_classes.gold.quantum=1,2"], 1)).unwrap_err();
    assert!(matches!(err, RunError::Input(_)), "{err}");
    assert!(
        err.to_string().contains("router.policy_classes.gold"),
        "{err}"
    );
    let err =
        SweepPlan::new(&args(&["router.policy_classes.regular.quantum=64,abc"], 1)).unwrap_err();
    assert!(matches!(err, RunError::Input(_)), "{err}");
    assert!(
        err.to_string()
            .contains("router.policy_classes.regular.quantum"),
        "{err}"
    );
    let err = SweepPlan::new(&args(&[], 0)).unwrap_err();
    assert!(matches!(err, RunError::Input(_)), "{err}");
}

#[test]
fn the_share_charts_have_bands_and_the_token_ideal_is_the_smooth_quantum_curve() {
    let (manifest, rows) = rows_of(&args(&["router.policy_classes.regular.quantum=128,512"], 1));
    let summaries = table::summarize(&manifest, &rows);
    let chart = plots::line_chart(
        &manifest,
        &summaries,
        0,
        ClassMetric::BackloggedTokenShare,
        &[],
    );
    assert_eq!(chart.name, "backlogged_token_share_vs_regular.quantum");
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
    assert_eq!(premium_ideal.label, "premium ideal token share");
    let (x, ideal) = premium_ideal.points[premium_ideal.points.len() / 2];
    assert_eq!(x, 320.0);
    assert!((ideal - 512.0 / 832.0).abs() < 1e-9, "{ideal}");
    let regular_share = regular_ideal.points[regular_ideal.points.len() / 2].1;
    assert!((regular_share - 320.0 / 832.0).abs() < 1e-9);
    // The first-N share's ideal depends on each run's request sizes: the points' are joined.
    let first_n = plots::line_chart(&manifest, &summaries, 0, ClassMetric::ShareFirstN, &[]);
    let joined: Vec<f64> = first_n.series[1].points.iter().map(|p| p.0).collect();
    assert_eq!(joined, vec![128.0, 512.0]);
}

fn gold_bronze_scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shares/gold-bronze.yaml")
}

/// Gold's 2,000-token prompts against bronze's 400-token ones, backlogged together at one
/// worker: DRR at 400:123 gives gold 0.765 of the tokens but only 0.394 of the requests.
#[test]
fn the_sweep_compares_the_first_n_share_with_the_request_ideal_not_the_token_ideal() {
    let mut options = args(&["router.policy_classes.gold.quantum=200,400"], 1);
    options.scenario = gold_bronze_scenario();
    let (manifest, rows) = rows_of(&options);
    let summaries = table::summarize(&manifest, &rows);
    let first_n = ClassMetric::ShareFirstN;
    let at_400 = &summaries[1];
    let share = at_400.get(0, first_n).unwrap().mean;
    let request_ideal = at_400.ideal(0, first_n).unwrap();
    let token_ideal = at_400.ideal(0, ClassMetric::BackloggedTokenShare).unwrap();
    assert_eq!(rows[1].classes[0].ideal_share_first_n, Some(request_ideal));
    assert!((token_ideal - 400.0 / 523.0).abs() < 1e-12, "{token_ideal}");
    assert!((request_ideal - 0.394).abs() < 0.001, "{request_ideal}");
    assert!(
        (share - request_ideal).abs() < 0.02 && (share - token_ideal).abs() > 0.3,
        "gold's first-N share {share}: request ideal {request_ideal}, token ideal {token_ideal}"
    );
    let text = summary_table(&manifest, &summaries);
    let line = text.lines().nth(2).unwrap();
    assert!(
        text.lines().next().unwrap().contains("gold ideal"),
        "{text}"
    );
    assert!(line.contains(&format!(" {request_ideal:.3} ")), "{text}");
    assert!(!line.contains(&format!("{token_ideal:.3}")), "{text}");
    let csv = String::from_utf8(table::summary_csv(&manifest, &summaries)).unwrap();
    let at_400_csv = csv.lines().nth(2).unwrap();
    let wanted = format!(
        ",{request_ideal:.6},{:.6}",
        at_400.ideal(1, first_n).unwrap()
    );
    // The first-N ideals, then the fleet's ten cells.
    assert!(at_400_csv.contains(&format!("{wanted},")), "{csv}");
    let chart = plots::line_chart(&manifest, &summaries, 0, first_n, &[]);
    assert!(
        chart.title.ends_with("dashed: ideal request share)"),
        "{}",
        chart.title
    );
    let gold_ideal = &chart.series[1];
    assert!(gold_ideal.dashed && gold_ideal.label == "gold ideal request share");
    let request_ideals: Vec<(f64, f64)> = [(200.0, &summaries[0]), (400.0, at_400)]
        .map(|(x, s)| (x, s.ideal(0, first_n).unwrap()))
        .to_vec();
    assert_eq!(gold_ideal.points, request_ideals);
    let tokens = plots::line_chart(
        &manifest,
        &summaries,
        0,
        ClassMetric::BackloggedTokenShare,
        &[],
    );
    let token_end = tokens.series[1].points.last().unwrap();
    assert_eq!(token_end.0, 400.0);
    assert!((token_end.1 - token_ideal).abs() < 1e-12);
}

#[test]
fn latency_charts_are_log_scaled_with_the_scenarios_bounds() {
    use crate::report::render::chart::{Direction, Scale};
    use crate::report::verdict::expect::{LatencyFigure, RawExpectation};
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
        .map(|raw| crate::report::verdict::expect::Expectation::parse(&raw, &classes).unwrap());
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

/// The sweep's `--arrival-jitter-ns`, when set, replaces the scenario's: one draw per request
/// from one stream, never two stacked.
#[test]
fn the_sweeps_arrival_jitter_replaces_the_scenarios() {
    let with = |scenario_jitter: &str, sweep_jitter: u64| {
        let mut options = args(&[scenario_jitter], 4);
        options.arrival_jitter_ns = sweep_jitter;
        let plan = SweepPlan::new(&options).unwrap();
        let jitter = plan.points[0].spec.arrival_jitter_ns;
        let shares: Vec<f64> = plan.run(false).unwrap().rows.iter().map(share).collect();
        (jitter, shares)
    };
    let sweep_only = with("delays.arrival_jitter_ns=0", 1_000);
    let scenario_only = with("delays.arrival_jitter_ns=1000", 0);
    let both = with("delays.arrival_jitter_ns=1000", 1_000);
    let sweep_wins = with("delays.arrival_jitter_ns=7", 1_000);
    assert_eq!(sweep_only.0, 1_000);
    assert_eq!(
        sweep_wins.0, 1_000,
        "the sweep's value replaces the scenario's"
    );
    assert_eq!(
        scenario_only, sweep_only,
        "the scenario's jitter when the sweep sets none"
    );
    assert_eq!(both, sweep_only, "not stacked");
    assert!(
        sweep_only.1.iter().any(|&s| s != sweep_only.1[0]),
        "jitter spreads"
    );
}

#[test]
fn a_run_stopped_by_a_limit_is_counted_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(premium_scenario()).unwrap();
    // Without its expectations, which name a companion file in the scenarios directory.
    let (text, _) = text.split_once("expect:").unwrap();
    let text = format!("{text}limits: {{max_events: 10000000, max_time_ms: 3600000}}\n");
    let path = tmp.path().join("limited.yaml");
    std::fs::write(&path, text).unwrap();
    let mut options = args(&["limits.max_events=100,10000000"], 2);
    options.scenario = path;
    let run = SweepPlan::new(&options).unwrap().run(false).unwrap();
    assert_eq!(run.rows.len(), 4);
    assert_eq!(
        run.stopped.iter().map(|s| s.point).collect::<Vec<_>>(),
        vec![0, 0],
        "the 100-event point stops, the other runs to its end"
    );
    let warning = run.stop_warning().unwrap();
    assert!(
        warning.starts_with("2 of 4 runs stopped early: event limit reached"),
        "{warning}"
    );
}

#[test]
fn the_terminal_summary_shows_each_points_share_and_interval() {
    let mut options = args(&["router.policy_classes.regular.quantum=128,512"], 3);
    options.arrival_jitter_ns = 1_000;
    let (manifest, rows) = rows_of(&options);
    let summaries = table::summarize(&manifest, &rows);
    let text = summary_table(&manifest, &summaries);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].starts_with("regular.quantum") && lines[0].contains("premium share [95% CI]"));
    let premium = summaries[0].get(0, ClassMetric::ShareFirstN).unwrap();
    let cell = format!(
        "{:.3} [{:.3}, {:.3}]",
        premium.mean, premium.ci95_low, premium.ci95_high
    );
    assert!(
        lines[1].trim_start().starts_with("128") && lines[1].contains(&cell),
        "{text}"
    );
    assert!(
        premium.ci95_low < premium.ci95_high,
        "three jittered seeds spread"
    );
}

/// `tune`'s options for the premium scenario with `overrides`, parsed as the CLI parses them.
fn tune_options(
    targets: &[&str],
    vary: &[&str],
    seeds: u32,
    overrides: &[(&str, &str)],
) -> Result<TuneOptions, RunError> {
    let overrides: Vec<(String, String)> = overrides
        .iter()
        .map(|(p, v)| (p.to_string(), v.to_string()))
        .collect();
    let scenario = Scenario::load_with_overrides(&premium_scenario(), &overrides)?;
    let names = scenario.class_names().to_vec();
    let vary = match vary.is_empty() {
        true => (0..names.len()).collect(),
        false => vary
            .iter()
            .map(|p| tune::quantum_class(p, &names))
            .collect::<Result<_, _>>()?,
    };
    Ok(TuneOptions {
        targets: targets
            .iter()
            .map(|t| tune::parse_target(t, &names))
            .collect::<Result<_, _>>()?,
        scenario,
        vary,
        tolerance: 0.02,
        share: ShareKind::FirstN,
        prefix_n: None,
        seeds,
        jobs: Some(1),
    })
}

fn tune_premium(targets: &[&str], vary: &[&str]) -> Result<TuneOutcome, RunError> {
    tune::tune(&tune_options(targets, vary, 1, &[])?)
}

#[test]
fn tune_finds_512_to_128_for_a_premium_share_of_0_8() {
    let outcome = tune_premium(&["premium=0.8"], &[]).unwrap();
    assert!(outcome.met, "{}", outcome.describe());
    assert_eq!(outcome.quanta, vec![512, 128]);
    assert!((outcome.achieved[0].mean - 0.8).abs() <= 0.02);
    let text = outcome.describe();
    assert!(
        text.contains("router.policy_classes.regular.quantum=128"),
        "{text}"
    );
    assert!(text.contains("sensitivity"));
    assert!(
        text.contains("  regular quantum 128 -> 64: premium 0.8844"),
        "{text}"
    );
    // Sensitivity: a larger regular quantum lowers premium's share.
    let regular: Vec<&tune::Neighbour> = outcome
        .neighbours
        .iter()
        .filter(|n| n.class == "regular")
        .collect();
    assert_eq!(
        regular.iter().map(|n| n.quantum).collect::<Vec<_>>(),
        vec![64, 96, 160, 256]
    );
    let premium_share = |n: &tune::Neighbour| n.achieved[0].unwrap().mean;
    assert!(
        regular
            .windows(2)
            .all(|w| premium_share(w[0]) > premium_share(w[1]))
    );
}

#[test]
fn tune_says_why_a_quantum_raised_past_the_solution_moves_no_share() {
    let text = tune_premium(&["premium=0.8"], &[]).unwrap().describe();
    // Premium's 640 and 1024 rows give the same 0.7969 as 512; regular's rows all move.
    assert!(
        text.contains("  note: raising premium's quantum past 512 moves no share: "),
        "{text}"
    );
    assert!(!text.contains("raising regular's"), "{text}");
}

#[test]
fn tune_with_one_varied_quantum_keeps_the_others() {
    let outcome =
        tune_premium(&["regular=0.5"], &["router.policy_classes.regular.quantum"]).unwrap();
    assert!(outcome.met, "{}", outcome.describe());
    assert_eq!(outcome.quanta, vec![512]);
    assert_eq!(outcome.varied, vec!["regular"]);
}

#[test]
fn tune_reports_bad_targets_and_paths_as_input_errors() {
    for (targets, vary) in [
        (vec!["premium=0.7", "regular=0.7"], vec![]),
        (vec!["gold=0.5"], vec![]),
        (vec!["premium=0.5"], vec!["workers.count"]),
    ] {
        let err = tune_premium(&targets, &vary).unwrap_err();
        assert!(matches!(err, RunError::Input(_)), "{err}");
    }
    let mut no_seeds = tune_options(&["premium=0.8"], &[], 1, &[]).unwrap();
    no_seeds.seeds = 0;
    assert!(matches!(tune::tune(&no_seeds), Err(RunError::Input(_))));
}

/// `tune --seeds N` runs the seeds `sweep --seeds N` runs: a trial at the scenario's quanta
/// measures exactly the sweep's shares at that point.
#[test]
fn tune_and_sweep_run_the_same_replication_seeds() {
    let jitter = [("delays.arrival_jitter_ns", "1000")];
    let outcome = tune::tune(&tune_options(&["premium=0.8"], &[], 3, &jitter).unwrap()).unwrap();
    let mut options = args(&["router.policy_classes.regular.quantum=128"], 3);
    options.arrival_jitter_ns = 1_000;
    let plan = SweepPlan::new(&options).unwrap();
    assert_eq!(outcome.seeds, plan.points[0].seeds);
    assert_eq!(outcome.seeds.len(), 3);
    assert_eq!(outcome.seeds[0], 0, "replication 0 is the scenario's seed");
    let first = &outcome.trials[0];
    assert_eq!(
        first.quanta,
        vec![512, 128],
        "the fluid start is the scenario's quanta"
    );
    let shares: Vec<f64> = plan.run(false).unwrap().rows.iter().map(share).collect();
    let achieved = first.achieved[0];
    assert!(shares.iter().any(|&s| s != shares[0]), "the seeds differ");
    assert_eq!(achieved.mean, shares.iter().sum::<f64>() / 3.0);
    assert_eq!(achieved.min, shares.iter().copied().fold(1.0, f64::min));
    assert_eq!(achieved.max, shares.iter().copied().fold(0.0, f64::max));
    let text = outcome.describe();
    assert!(
        text.contains("mean over 3 seeds") && text.contains("(seeds: min"),
        "{text}"
    );
}

#[test]
fn runs_too_large_to_fit_the_memory_budget_together_run_fewer_at_once_with_the_same_rows() {
    let mut options = args(&["router.policy_classes.regular.quantum=128,512"], 2);
    options.jobs = Some(4);
    let mut plan = SweepPlan::new(&options).unwrap();
    let small = plan.run(false).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(
        small.concurrent_runs,
        4.min(4 * cores),
        "small runs: all of --jobs"
    );
    // Runs estimated at 900 MB each: two fit the 2 GB budget at once.
    for point in &mut plan.points {
        point.memory_estimate_bytes = 900_000_000;
    }
    let large = plan.run(false).unwrap();
    assert_eq!(large.concurrent_runs, 2);
    assert_eq!(format!("{:?}", large.rows), format!("{:?}", small.rows));
}
