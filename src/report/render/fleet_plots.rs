//! The charts of a run whose fleet a scaling policy sized: its workers per role over time,
//! and beside it each class's latency by arrival time, on the same time axis, so that a
//! latency rise can be read against the workers there were.

use super::chart::{Axis, Chart, LegendCorner, Series, step_points};
use crate::report::measure::fleet::role_curves;
use crate::report::measure::metrics::RunMetrics;
use crate::sim::SimResult;
use crate::time::SimTime;

/// The file stems of the charts, in the order the page shows them side by side.
pub const FLEET_CHARTS: [&str; 2] = ["workers_over_time", "latency_over_time"];

/// The fleet charts of `result` (`metrics` are its): none for a run without a scaling
/// policy, whose fleet changes only by its faults (drawn on the completions charts).
pub fn fleet_charts(result: &SimResult, metrics: &RunMetrics) -> Vec<Chart> {
    if result.scaling_events.is_none() {
        return Vec::new();
    }
    let end_ms = metrics.makespan.as_ms_f64().max(1e-3);
    vec![
        workers_over_time(result, end_ms),
        latency_over_time(metrics, end_ms),
    ]
}

/// Per role, the workers serving (solid) and billed (dashed: starting, serving and
/// draining), as steps over simulated time up to `end_ms`.
pub fn workers_over_time(result: &SimResult, end_ms: f64) -> Chart {
    let curves = role_curves(&result.worker_lives, result.end_time);
    let peak = (curves.iter().flat_map(|c| &c.billed))
        .map(|p| p.1)
        .max()
        .unwrap_or(0);
    let x = Axis::time_ms("simulated time", (0.0, end_ms));
    let y = Axis::whole("workers", (0.0, (peak as f64 + 0.5).max(1.0)));
    let title = "Workers per role over time: serving, and billed (starting and draining too)";
    let mut chart = Chart::new(FLEET_CHARTS[0], title, x, y, LegendCorner::UpperLeft);
    for (colour, curve) in curves.iter().enumerate() {
        let role = curve.role.label();
        let to_end = |curve: &[(SimTime, u64)]| {
            let mut points = step_points(curve);
            let level = points.last().map_or(0.0, |p| p.1);
            points.push((end_ms, level));
            points
        };
        let serving = Series::measured(format!("{role} serving"), colour, to_end(&curve.serving));
        let billed = Series::ideal(format!("{role} billed"), colour, to_end(&curve.billed));
        chart.series.extend([serving, billed]);
    }
    chart
}

/// Per class, its mean TTFT (solid) and end-to-end latency (dashed) by arrival time, over the
/// same time axis as [`workers_over_time`].
pub fn latency_over_time(metrics: &RunMetrics, end_ms: f64) -> Chart {
    let curves = &metrics.latency_by_arrival;
    let peak = (curves.iter().flat_map(|c| &c.buckets))
        .map(|b| b.mean_ms[1])
        .fold(0.0, f64::max);
    let x = Axis::time_ms("arrival time", (0.0, end_ms));
    let y = Axis::linear("mean latency (ms)", (0.0, (peak * 1.05).max(1e-3)));
    let title = "Mean latency per class by arrival time: TTFT, and end to end (dashed)";
    let mut chart = Chart::new(FLEET_CHARTS[1], title, x, y, LegendCorner::UpperLeft);
    for curve in curves {
        let name = &metrics.classes[curve.class].name;
        let line = |k: usize| (curve.buckets.iter()).map(move |b| (b.mid_ms(), b.mean_ms[k]));
        let ttft = Series::measured(format!("{name} TTFT"), curve.class, line(0).collect());
        let e2e = Series::ideal(format!("{name} end to end"), curve.class, line(1).collect());
        chart.series.extend([ttft, e2e]);
    }
    chart
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mocker::WorkerRole;
    use crate::report::test_support::{done, ms, result_of};
    use crate::scheduling::scheduler::DispatchPath;
    use crate::sim::{ScalingEvent, WorkerLife};

    /// Two requests of two classes over 10 s; one worker all run, a second serving from 4 s
    /// (asked at 2 s) and draining from 8 s; scaled by a policy when `scaled`.
    fn run(scaled: bool) -> (SimResult, RunMetrics) {
        let records = vec![
            done(0, 0, DispatchPath::Immediate, [0, 0, 3_000]),
            done(1, 1, DispatchPath::Immediate, [5_000, 5_000, 10_000]),
        ];
        let mut result = result_of(&["premium", "regular"], records);
        let life = |asked, ready, draining: Option<u64>| WorkerLife {
            pool: 0,
            role: WorkerRole::Aggregated,
            gpus: 1,
            asked: ms(asked),
            ready: Some(ms(ready)),
            draining: draining.map(ms),
            gone: None,
        };
        result.worker_lives = vec![life(0, 0, None), life(2_000, 4_000, Some(8_000))];
        let event = ScalingEvent {
            at: ms(2_000),
            role: WorkerRole::Aggregated,
            from: 1,
            to: 2,
            reason: "scale_up".into(),
        };
        result.scaling_events = scaled.then(|| vec![event]);
        let metrics = RunMetrics::compute(&result, &[1, 1]);
        (result, metrics)
    }

    #[test]
    fn only_a_scaled_run_gets_the_fleet_charts() {
        let (result, metrics) = run(false);
        assert!(fleet_charts(&result, &metrics).is_empty());
        let (result, metrics) = run(true);
        let names: Vec<String> = (fleet_charts(&result, &metrics).into_iter())
            .map(|c| c.name)
            .collect();
        assert_eq!(names, FLEET_CHARTS);
    }

    #[test]
    fn workers_are_steps_per_role_that_reach_the_end_of_the_run() {
        let (result, _) = run(true);
        let chart = workers_over_time(&result, 10_000.0);
        let labels: Vec<&str> = chart.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["aggregated serving", "aggregated billed"]);
        let serving = &chart.series[0].points;
        assert!(serving.contains(&(4_000.0, 1.0)) && serving.contains(&(4_000.0, 2.0)));
        assert_eq!(serving.last(), Some(&(10_000.0, 1.0)), "drained from 8 s");
        let billed = &chart.series[1].points;
        assert!(
            billed.contains(&(2_000.0, 2.0)),
            "billed from when asked for"
        );
        assert_eq!(
            billed.last(),
            Some(&(10_000.0, 2.0)),
            "still draining at the end"
        );
    }

    #[test]
    fn latency_is_drawn_per_class_as_ttft_and_end_to_end() {
        let (_, metrics) = run(true);
        let chart = latency_over_time(&metrics, 10_000.0);
        let labels: Vec<&str> = chart.series.iter().map(|s| s.label.as_str()).collect();
        let expected = [
            "premium TTFT",
            "premium end to end",
            "regular TTFT",
            "regular end to end",
        ];
        assert_eq!(labels, expected);
        assert_eq!(chart.series[3].points[0].1, 5_000.0);
        assert!(chart.series[1].dashed && !chart.series[0].dashed);
    }
}
