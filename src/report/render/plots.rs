//! Plots of a run, built as [`Chart`]s (see [`super::chart`], which also renders them).
//!
//! Completions against completion index and time, each class's share of the token service
//! while classes are backlogged together, and TTFT and end-to-end CDFs on log axes with the
//! scenario's latency expectations as labelled lines. Ideal DRR lines are drawn only for runs
//! in which classes were backlogged together ([`RunMetrics::classes_backlogged_together`]):
//! elsewhere a class gets what it asks for and the fluid split says nothing.

use super::chart::{
    Axis, Chart, Direction, LegendCorner, PlotError, ReferenceLine, Series, Shading, render_files,
    step_points,
};
use super::fleet_plots::fleet_charts;
use crate::report::measure::metrics::{Completion, LatencyKind, LatencyMetric, RunMetrics};
use crate::report::measure::phases::{PHASE_NAMES, PhaseCurve};
use crate::report::measure::stability::in_system_curve;
use crate::report::verdict::expect::{Bound, Expectation, Figure};
use crate::report::verdict::queries::Queries;
use crate::sim::{FaultMark, SimResult};
use crate::time::SimTime;
use std::collections::BTreeMap;

/// Every plot of a run, in both formats: (file name, bytes), e.g.
/// `("completions_by_index.png", ...)`. `expectations` are the scenario's (none for a
/// replay); its latency bounds are drawn on the matching CDF.
pub fn render_all(
    result: &SimResult,
    metrics: &RunMetrics,
    expectations: &[Expectation],
) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    let mut files = Vec::new();
    for chart in all_charts(result, metrics, expectations) {
        files.extend(render_files(&chart.name, &chart)?);
    }
    Ok(files)
}

/// The charts of a run: cumulative completions against completion index and against time
/// (with ideal DRR lines where they apply), token-service share while backlogged, TTFT and
/// end-to-end CDFs; a scaled run's workers and latency over time ([`fleet_charts`]).
/// `metrics` are `result`'s.
pub fn all_charts(
    result: &SimResult,
    metrics: &RunMetrics,
    expectations: &[Expectation],
) -> Vec<Chart> {
    let mut charts = vec![
        completions_by_index(metrics),
        completions_by_time(metrics),
        token_share_over_time(metrics),
        latency_cdf(metrics, CdfKind::Ttft, expectations),
        latency_cdf(metrics, CdfKind::E2e, expectations),
        in_system_over_time(metrics, &in_system_curve(&result.records)),
    ];
    charts.extend(
        metrics
            .phases
            .iter()
            .map(|curve| latency_phases(metrics, curve)),
    );
    charts.extend(fleet_charts(result, metrics));
    charts
}

/// A disaggregated class's latency split into queue wait, prefill, transfer and decode over
/// arrival time: each phase's mean is a band stacked on the ones before, so the top edge is
/// the mean end-to-end latency. One chart per class, `latency_phases_<class>` (the
/// class name through [`file_name_part`]).
pub fn latency_phases(metrics: &RunMetrics, curve: &PhaseCurve) -> Chart {
    let class = &metrics.classes[curve.class].name;
    let mids: Vec<f64> = curve
        .buckets
        .iter()
        .map(|b| (b.start_ms + b.end_ms) / 2.0)
        .collect();
    let tops = curve.buckets.iter().map(|b| b.mean_ms.iter().sum::<f64>());
    let peak = tops.fold(0.0, f64::max);
    let end_ms = curve.buckets.last().map_or(1.0, |b| b.end_ms);
    let x = Axis::time_ms("arrival time", (0.0, end_ms.max(1e-3)));
    let y = Axis::linear("mean latency (ms)", (0.0, (peak * 1.05).max(1e-3)));
    let title = format!("Where {class}'s time went: mean per phase by arrival time");
    let name = format!("latency_phases_{}", file_name_part(class));
    let mut chart = Chart::new(&name, &title, x, y, LegendCorner::UpperLeft);
    let mut below = vec![0.0; curve.buckets.len()];
    for (phase, label) in PHASE_NAMES.iter().enumerate() {
        let above: Vec<f64> = curve
            .buckets
            .iter()
            .zip(&below)
            .map(|(b, low)| low + b.mean_ms[phase])
            .collect();
        let points = mids.iter().copied().zip(above.iter().copied()).collect();
        let mut series = Series::measured(label.to_string(), phase, points);
        series.band = Some(
            mids.iter()
                .zip(below.iter().zip(&above))
                .map(|(&x, (&low, &high))| (x, low, high))
                .collect(),
        );
        chart.series.push(series);
        below = above;
    }
    chart
}

/// Requests in the system over time (`in_system`), the second half of the arrival window
/// shaded, each half's mean as a dashed line, and the stability verdict in the title: the
/// picture behind the overload test (docs/planning.md). `curve` is the run's
/// [`in_system_curve`].
pub fn in_system_over_time(metrics: &RunMetrics, curve: &[(SimTime, u64)]) -> Chart {
    let s = &metrics.stability;
    let end_ms = metrics.makespan.as_ms_f64().max(1e-3);
    let peak = curve.iter().map(|p| p.1).max().unwrap_or(0) as f64;
    let x = Axis::time_ms("simulated time", (0.0, end_ms));
    let y = Axis::linear("requests in the system", (0.0, (peak * 1.05).max(1.0)));
    let title = format!(
        "Requests in the system: {} (means {:.1} then {:.1}; served {:.1} of {:.1} req/s)",
        s.verdict(),
        s.in_system_first_half,
        s.in_system_second_half,
        s.served_rps,
        s.offered_rps
    );
    let mut chart = Chart::new("in_system", &title, x, y, LegendCorner::UpperLeft);
    let (start, mid, end) = (s.window_start, s.window_mid(), s.window_end);
    chart.shadings.push(Shading {
        label: "second half of the arrival window".into(),
        windows: vec![(mid.as_ms_f64(), end.as_ms_f64())],
    });
    let steps = step_points(curve);
    chart
        .series
        .push(Series::measured("in system".into(), 0, steps));
    let (first, second) = (s.in_system_first_half, s.in_system_second_half);
    // A NaN breaks the line, so both halves' means share one legend entry.
    let means = vec![
        (start.as_ms_f64(), first),
        (mid.as_ms_f64(), first),
        (mid.as_ms_f64(), f64::NAN),
        (mid.as_ms_f64(), second),
        (end.as_ms_f64(), second),
    ];
    chart
        .series
        .push(Series::ideal("mean of each half".into(), 1, means));
    chart
}

/// Classes that had requests, by index.
fn active_classes(metrics: &RunMetrics) -> Vec<usize> {
    (0..metrics.classes.len())
        .filter(|&c| metrics.classes[c].requests > 0)
        .collect()
}

/// Per class, its ideal DRR completion line over each window in which two or more classes
/// were backlogged together, as (completion index, count) points with a NaN between windows.
/// A line starts from the class's measured count when its window opens, and each completion
/// inside the window (by completion time) is split among the classes backlogged at that
/// moment as DRR splits requests: in proportion to their quanta over their mean request
/// costs ([`Queries::ideal_request_split`]), so a class of large requests completes
/// fewer. Outside those windows every class gets what it asks for, so no ideal applies there
/// and none is drawn; a class never backlogged in a window gets no line over it.
pub fn windowed_ideal_lines(metrics: &RunMetrics) -> Vec<Line> {
    let classes = metrics.classes.len();
    let mut lines: Vec<Line> = vec![Vec::new(); classes];
    if !metrics.classes_backlogged_together() {
        return lines;
    }
    let completions = &metrics.completions;
    let mut measured = vec![0.0; classes];
    let mut next = 0;
    for w in &metrics.windows {
        while next < completions.len() && completions[next].time < w.start {
            count_completion(&mut measured, &completions[next]);
            next += 1;
        }
        let inside = completions[next..]
            .iter()
            .take_while(|c| c.time <= w.end)
            .count();
        if inside == 0 || w.credits.is_empty() {
            continue;
        }
        let in_window: Vec<usize> = (0..classes).filter(|&c| w.ideal_tokens[c] > 0.0).collect();
        let mut ideal = measured.clone();
        for &c in &in_window {
            if !lines[c].is_empty() {
                lines[c].push((next as f64, f64::NAN));
            }
            lines[c].push((next as f64, ideal[c]));
        }
        let mut credit = 0;
        for done in &completions[next..next + inside] {
            while credit + 1 < w.credits.len() && w.credits[credit + 1].time <= done.time {
                credit += 1;
            }
            let split = metrics.ideal_request_split(&w.credits[credit]);
            count_completion(&mut measured, done);
            for &c in &in_window {
                ideal[c] += split.get(c).copied().unwrap_or(0.0);
                lines[c].push((done.index as f64, ideal[c]));
            }
        }
        next += inside;
    }
    lines
}

fn count_completion(measured: &mut [f64], done: &Completion) {
    if let Some(c) = done.class {
        measured[c] += 1.0;
    }
}

/// Cumulative completions of each class, as (completion position, count) from (0, 0).
fn cumulative_by_index(metrics: &RunMetrics, class: usize) -> Vec<(f64, f64)> {
    let mut count = 0.0;
    let mut points = vec![(0.0, 0.0)];
    for c in &metrics.completions {
        if c.class == Some(class) {
            count += 1.0;
            points.push((c.index as f64, count));
        }
    }
    points.push((metrics.completions.len() as f64, count));
    points
}

fn max_completed(metrics: &RunMetrics) -> f64 {
    metrics
        .classes
        .iter()
        .map(|c| c.completed)
        .max()
        .unwrap_or(0) as f64
}

fn ideal_label(name: &str) -> String {
    format!("{name} ideal DRR while backlogged")
}

/// Cumulative completions per class against completion index, with each class's ideal DRR
/// line over the windows where classes were backlogged together ([`windowed_ideal_lines`]).
pub fn completions_by_index(metrics: &RunMetrics) -> Chart {
    let x = Axis::linear(
        "completion index (all classes)",
        (0.0, (metrics.completions.len() as f64).max(1.0)),
    );
    let y = Axis::linear(
        "completions of the class",
        (0.0, max_completed(metrics).max(1.0) * 1.05),
    );
    let title = "Cumulative completions per class vs completion order";
    let mut chart = Chart::new("completions_by_index", title, x, y, LegendCorner::UpperLeft);
    let mut ideal = windowed_ideal_lines(metrics);
    for c in active_classes(metrics) {
        let name = &metrics.classes[c].name;
        let measured = cumulative_by_index(metrics, c);
        chart
            .series
            .push(Series::measured(name.clone(), c, measured));
        let line = std::mem::take(&mut ideal[c]);
        if !line.is_empty() {
            chart.series.push(Series::ideal(ideal_label(name), c, line));
        }
    }
    chart
}

/// Cumulative completions per class against simulated time, with the ideal DRR lines of
/// [`windowed_ideal_lines`] placed at the time of each completion.
pub fn completions_by_time(metrics: &RunMetrics) -> Chart {
    let times: Vec<f64> = std::iter::once(0.0)
        .chain(metrics.completions.iter().map(|c| c.time.as_ms_f64()))
        .collect();
    let end_ms = times.last().copied().unwrap_or(0.0).max(1e-3);
    let x = Axis::time_ms("simulated time", (0.0, end_ms));
    let y = Axis::linear(
        "completions of the class",
        (0.0, max_completed(metrics).max(1.0) * 1.05),
    );
    let title = "Cumulative completions per class vs simulated time";
    let mut chart = Chart::new("completions_by_time", title, x, y, LegendCorner::UpperLeft);
    let at_time = |(k, v): (f64, f64)| (times[k as usize], v);
    let ideal = windowed_ideal_lines(metrics);
    for c in active_classes(metrics) {
        let name = &metrics.classes[c].name;
        let measured = cumulative_by_index(metrics, c).into_iter().map(at_time);
        chart
            .series
            .push(Series::measured(name.clone(), c, measured.collect()));
        if !ideal[c].is_empty() {
            let line = ideal[c].iter().copied().map(at_time).collect();
            chart.series.push(Series::ideal(ideal_label(name), c, line));
        }
    }
    mark_faults(&mut chart, &metrics.fault_marks, end_ms);
    chart
}

/// Spans of x, `(start, end)`.
type Windows = Vec<(f64, f64)>;

/// Shades each lost worker's down windows and each scaled-down worker's draining window (one
/// legend entry per worker and kind, e.g. "worker 0 down", "worker 2 draining"; a window
/// still open at the run's end reaches the axis end) and draws a labelled line at each worker
/// that joined, all clipped to the x axis `[0, end_ms]`.
fn mark_faults(chart: &mut Chart, marks: &[FaultMark], end_ms: f64) {
    // Per worker id: its name and its down windows in ms; then its draining windows.
    let mut down: BTreeMap<u64, (&str, Windows)> = BTreeMap::new();
    let mut draining: BTreeMap<u64, (&str, Windows)> = BTreeMap::new();
    for mark in marks {
        let (windows, worker, name, from, until) = match mark {
            FaultMark::WorkerDown {
                worker,
                name,
                from,
                until,
            } => (&mut down, worker, name, from, until),
            FaultMark::WorkerDrain {
                worker,
                name,
                from,
                until,
            } => (&mut draining, worker, name, from, until),
            FaultMark::WorkerUp { name, pool, at, .. } => {
                if at.as_ms_f64() <= end_ms {
                    chart.references.push(ReferenceLine {
                        direction: Direction::Vertical,
                        at: at.as_ms_f64(),
                        label: format!("{name} up ({pool})"),
                        class: None,
                    });
                }
                continue;
            }
        };
        let from_ms = from.as_ms_f64();
        let until_ms = until.map_or(end_ms, |t| t.as_ms_f64().min(end_ms));
        if from_ms < end_ms {
            let entry = windows.entry(*worker).or_insert((name, Vec::new()));
            entry.1.push((from_ms, until_ms));
        }
    }
    for (name, windows) in down.into_values() {
        let label = format!("{name} down");
        chart.shadings.push(Shading { label, windows });
    }
    for (name, windows) in draining.into_values() {
        let label = format!("{name} draining");
        chart.shadings.push(Shading { label, windows });
    }
}

/// Points of a line.
type Line = Vec<(f64, f64)>;

/// Per class, its share of all the service dispatched in backlogged windows so far and its
/// ideal share of it, at each counted dispatch: one continuous line across the windows, held
/// flat from one window's last dispatch to the next window's start (nothing is counted
/// between windows), so its last point is the run's backlogged share.
fn backlogged_share_curves(metrics: &RunMetrics) -> Vec<(Line, Line)> {
    let classes = metrics.classes.len();
    let mut service = vec![0u64; classes];
    let mut ideal = vec![0.0; classes];
    let mut curves: Vec<(Line, Line)> = vec![(Vec::new(), Vec::new()); classes];
    for w in &metrics.windows {
        let start = w.start.as_ms_f64();
        for (measured, ideal) in &mut curves {
            if let (Some(&(_, m)), Some(&(_, i))) = (measured.last(), ideal.last()) {
                measured.push((start, m));
                ideal.push((start, i));
            }
        }
        for credit in &w.credits {
            service[credit.class] += credit.tokens;
            ideal
                .iter_mut()
                .zip(&credit.ideal_tokens)
                .for_each(|(a, b)| *a += b);
            let total: u64 = service.iter().sum();
            if total == 0 {
                continue;
            }
            let t = credit.time.as_ms_f64();
            for (c, (m, d)) in curves.iter_mut().enumerate() {
                m.push((t, service[c] as f64 / total as f64));
                d.push((t, ideal[c] / total as f64));
            }
        }
    }
    curves
}

/// Each class's share of all the uncached-token service dispatched so far while two or more
/// classes were backlogged (those windows are shaded), against its ideal DRR share of it
/// (dashed; it follows which classes were backlogged). One line, cumulative across the
/// windows and flat between them, however short they are (Poisson load gives many brief
/// ones); its last value is the `backlogged_share` of `classes.csv`.
pub fn token_share_over_time(metrics: &RunMetrics) -> Chart {
    let end_ms = metrics.makespan.as_ms_f64().max(1e-3);
    let x = Axis::time_ms("simulated time", (0.0, end_ms));
    let y = Axis::linear("share of backlogged service so far", (0.0, 1.0));
    let title = match metrics.classes_backlogged_together() {
        true => "Cumulative share of uncached-token service while classes are backlogged",
        false => "Token-service share: classes were never backlogged together",
    };
    let mut chart = Chart::new("token_share", title, x, y, LegendCorner::UpperRight);
    chart.shadings.push(Shading {
        label: "two or more classes backlogged".into(),
        windows: metrics
            .windows
            .iter()
            .map(|w| (w.start.as_ms_f64(), w.end.as_ms_f64()))
            .collect(),
    });
    let mut curves = backlogged_share_curves(metrics);
    for c in active_classes(metrics) {
        let name = &metrics.classes[c].name;
        let (measured, ideal) = std::mem::take(&mut curves[c]);
        if measured.is_empty() {
            continue;
        }
        chart
            .series
            .push(Series::measured(name.clone(), c, measured));
        let label = format!("{name} ideal DRR share");
        chart.series.push(Series::ideal(label, c, ideal));
    }
    chart
}

/// Which latency a CDF shows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CdfKind {
    Ttft,
    E2e,
}

impl CdfKind {
    /// The latency it shows.
    pub fn latency(self) -> LatencyKind {
        match self {
            CdfKind::Ttft => LatencyKind::Ttft,
            CdfKind::E2e => LatencyKind::E2e,
        }
    }
}

/// A number as short as it can be written: `2500`, `0.25`.
fn number_label(value: f64) -> String {
    match value.fract() == 0.0 && value.abs() < 1e15 {
        true => format!("{value:.0}"),
        false => value.to_string(),
    }
}

/// The scenario's latency bounds on metrics that `wanted` accepts, as labelled lines running
/// in `direction` (vertical on a CDF's latency x axis, horizontal on a sweep's latency y axis),
/// e.g. "gold ttft p99 ≤ 2500 ms". A `within` bound gives two lines; a difference with a
/// companion scenario (`minus:`) is no latency of this run and gives none.
pub fn latency_references(
    expectations: &[Expectation],
    class_names: &[String],
    wanted: impl Fn(LatencyMetric) -> bool,
    direction: Direction,
) -> Vec<ReferenceLine> {
    let mut lines = Vec::new();
    for e in expectations.iter().filter(|e| e.companion().is_none()) {
        let Figure::Latency {
            class: class_name,
            metric,
        } = e.figure()
        else {
            continue;
        };
        let metric = *metric;
        if !wanted(metric) {
            continue;
        }
        let bounds = match e.bound() {
            Bound::AtLeast(v) => vec![('≥', v)],
            Bound::AtMost(v) => vec![('≤', v)],
            Bound::Within { lo, hi } => vec![('≥', lo), ('≤', hi)],
            Bound::Tolerance(_) => vec![],
        };
        for (sign, at) in bounds {
            let label = format!(
                "{} {} {} {sign} {} ms",
                class_name,
                metric.kind.name(),
                metric.stat.name(),
                number_label(at)
            );
            let class = class_names.iter().position(|c| c == class_name);
            lines.push(ReferenceLine {
                direction,
                at,
                label,
                class,
            });
        }
    }
    lines
}

/// The empirical CDF of a latency per class, on a log latency axis (so a long tail leaves
/// room for the fast classes), with the scenario's bounds on that latency as vertical lines.
pub fn latency_cdf(metrics: &RunMetrics, kind: CdfKind, expectations: &[Expectation]) -> Chart {
    let (name, title) = match kind {
        CdfKind::Ttft => ("ttft_cdf", "Time to first token: CDF per class"),
        CdfKind::E2e => ("e2e_cdf", "End-to-end latency: CDF per class"),
    };
    let names: Vec<String> = metrics.classes.iter().map(|c| c.name.clone()).collect();
    let references = latency_references(
        expectations,
        &names,
        |m| m.kind == kind.latency(),
        Direction::Vertical,
    );
    let mut series = Vec::new();
    let mut shown_ms: Vec<f64> = references.iter().map(|r| r.at).collect();
    for c in active_classes(metrics) {
        let class = &metrics.classes[c];
        let samples = match kind {
            CdfKind::Ttft => &class.ttft_samples_ns,
            CdfKind::E2e => &class.e2e_samples_ns,
        };
        let n = samples.len() as f64;
        let points: Vec<(f64, f64)> = samples
            .iter()
            .enumerate()
            .map(|(i, &ns)| (ns as f64 / 1e6, (i + 1) as f64 / n))
            .collect();
        shown_ms.extend(points.first().map(|p| p.0));
        shown_ms.extend(points.last().map(|p| p.0));
        series.push(Series::measured(class.name.clone(), c, points));
    }
    let x = Axis::log_over("latency (ms, log scale)", shown_ms);
    let y = Axis::linear("fraction of completed requests", (0.0, 1.0));
    let mut chart = Chart::new(name, title, x, y, LegendCorner::LowerRight);
    chart.series = series;
    chart.references = references;
    chart
}

/// User text (a class name, a swept path) as part of a file name, encoded so that distinct
/// texts always give distinct parts: ASCII letters, digits, `_`, `.` and `-` are kept, and
/// every other byte becomes `~` and its two upper-case hex digits (`a/b` -> `a~2Fb`, `~` ->
/// `~7E`). Every class name a policy admits is kept as it is, and the result needs no
/// escaping in a link. It may be `.` or `..`, so it is always used after a fixed prefix.
pub fn file_name_part(text: &str) -> String {
    let mut part = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-') {
            true => part.push(char::from(byte)),
            false => part.push_str(&format!("~{byte:02X}")),
        }
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::render::chart::{PlotFormat, Scale, render};
    use crate::report::test_support::{
        done, result_of, weighted_metrics as weighted, weighted_run,
    };
    use crate::report::verdict::expect::RawExpectation;
    use crate::scheduling::scheduler::DispatchPath;

    #[test]
    fn in_system_chart_shades_the_second_half_and_names_the_verdict() {
        use crate::report::test_support::{done, result_of};
        use crate::scheduling::scheduler::DispatchPath;
        // 100 arrivals 10 ms apart into one 15 ms server: the backlog grows.
        let records = (0..100)
            .map(|i| done(i, 0, DispatchPath::Queued, [10 * i, 10 * i, 15 * (i + 1)]))
            .collect();
        let result = result_of(&["a"], records);
        let m = RunMetrics::compute(&result, &[1]);
        let chart = in_system_over_time(&m, &in_system_curve(&result.records));
        assert!(
            chart
                .title
                .starts_with("Requests in the system: overloaded"),
            "{}",
            chart.title
        );
        assert_eq!(chart.shadings[0].windows, [(495.0, 990.0)]);
        let steps = &chart.series[0].points;
        assert_eq!(
            steps[..4],
            [(0.0, 0.0), (0.0, 1.0), (10.0, 1.0), (10.0, 2.0)]
        );
        assert_eq!(
            chart.series[1].points[1],
            (495.0, m.stability.in_system_first_half)
        );
    }

    #[test]
    fn completions_by_time_marks_fault_windows_and_joins() {
        use crate::report::render::chart::tests::svg_has_text;
        use crate::report::test_support::ms;
        // Completions at 1..=100 ms; the x axis ends at 100 ms.
        let records = (0..100)
            .map(|i| done(i, 0, DispatchPath::Queued, [0, 0, i + 1]))
            .collect();
        let mut result = result_of(&["a"], records);
        let quiet = RunMetrics::compute(&result, &[1]);
        let plain = completions_by_time(&quiet);
        assert!(plain.shadings.is_empty() && plain.references.is_empty());
        let down = |worker, from, until: Option<u64>| FaultMark::WorkerDown {
            worker,
            name: format!("worker {worker}"),
            from: ms(from),
            until: until.map(ms),
        };
        result.fault_marks = vec![
            down(0, 20, Some(40)),
            down(1, 30, None),
            FaultMark::WorkerUp {
                worker: 2,
                name: "worker 2".into(),
                pool: "h100".into(),
                asked: ms(45),
                at: ms(50),
            },
            FaultMark::WorkerDrain {
                worker: 1,
                name: "worker 1".into(),
                from: ms(10),
                until: Some(ms(25)),
            },
            down(0, 60, Some(70)),
            down(3, 150, None),
            FaultMark::WorkerUp {
                worker: 4,
                name: "worker 4".into(),
                pool: "h100".into(),
                asked: ms(120),
                at: ms(120),
            },
        ];
        let chart = completions_by_time(&RunMetrics::compute(&result, &[1]));
        let shaded: Vec<(&str, &[(f64, f64)])> = chart
            .shadings
            .iter()
            .map(|s| (s.label.as_str(), s.windows.as_slice()))
            .collect();
        // Worker 0's two windows share its legend entry; worker 1's open window reaches the
        // axis end; what lies past the axis (worker 3, worker 4's join) is not drawn.
        assert_eq!(
            shaded,
            [
                ("worker 0 down", &[(20.0, 40.0), (60.0, 70.0)][..]),
                ("worker 1 down", &[(30.0, 100.0)][..]),
                ("worker 1 draining", &[(10.0, 25.0)][..]),
            ]
        );
        assert_eq!(
            chart.references,
            [ReferenceLine {
                direction: Direction::Vertical,
                at: 50.0,
                label: "worker 2 up (h100)".into(),
                class: None,
            }]
        );
        let svg = String::from_utf8(render(&chart, PlotFormat::Svg).unwrap()).unwrap();
        for label in [
            "worker 0 down",
            "worker 1 down",
            "worker 1 draining",
            "worker 2 up (h100)",
        ] {
            assert!(svg_has_text(&svg, label), "{label}");
        }
    }

    #[test]
    fn every_plot_renders_to_png_and_svg() {
        let run = weighted_run();
        let files = render_all(&run.result, &run.metrics, &[]).unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 12);
        assert!(names.contains(&"completions_by_index.png"));
        assert!(names.contains(&"in_system.svg"));
        assert!(names.contains(&"e2e_cdf.svg"));
        for (name, bytes) in &files {
            if name.ends_with(".png") {
                assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name}");
                assert!(bytes.len() > 10_000, "{name} has content");
            } else {
                let text = std::str::from_utf8(bytes).unwrap();
                assert!(text.starts_with("<svg"), "{name}");
                // The in-system chart counts requests of every class together.
                let classes = text.contains("premium") && text.contains("regular");
                assert!(classes || name == "in_system.svg", "{name}");
            }
        }
        // To look at them: ROUTERSIM_PLOT_DIR=/tmp/plots cargo test --lib report::render::plots
        if let Some(dir) = std::env::var_os("ROUTERSIM_PLOT_DIR") {
            crate::report::output::write_dir(
                std::path::Path::new(&dir),
                crate::report::output::OutputKind::Run,
                &files,
            )
            .unwrap();
        }
    }

    #[test]
    fn latency_phases_stack_each_phase_on_the_ones_before_up_to_end_to_end() {
        use crate::report::measure::phases::PhaseBucket;
        let run = weighted_run();
        let mut m = run.metrics;
        let bucket = |start_ms: f64, mean_ms: [f64; 4]| PhaseBucket {
            start_ms,
            end_ms: start_ms + 100.0,
            requests: 3,
            mean_ms,
        };
        let curve = PhaseCurve {
            class: 0,
            buckets: vec![
                bucket(0.0, [1.0, 30.0, 5.0, 200.0]),
                bucket(200.0, [40.0, 30.0, 90.0, 210.0]),
            ],
        };
        m.phases = vec![curve.clone()];
        let chart = latency_phases(&m, &curve);
        assert_eq!(chart.name, "latency_phases_premium");
        let labels: Vec<&str> = chart.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, PHASE_NAMES);
        let bands: Vec<&Vec<(f64, f64, f64)>> = chart
            .series
            .iter()
            .map(|s| s.band.as_ref().unwrap())
            .collect();
        assert_eq!(bands[0][1], (250.0, 0.0, 40.0), "queue starts at zero");
        for pair in bands.windows(2) {
            let lows = pair[1].iter().map(|p| p.1);
            assert!(
                lows.eq(pair[0].iter().map(|p| p.2)),
                "each band sits on the last"
            );
        }
        let tops: Vec<f64> = bands[3].iter().map(|p| p.2).collect();
        assert_eq!(
            tops,
            vec![236.0, 370.0],
            "the top edge is the mean end-to-end"
        );
        let files = render_all(&run.result, &m, &[]).unwrap();
        assert!(files.iter().any(|(n, _)| n == "latency_phases_premium.png"));
        assert_eq!(files.len(), 14, "one chart more, in both formats");
    }

    #[test]
    fn plots_are_deterministic() {
        let (a, b) = (weighted(), weighted());
        let chart = completions_by_index(&a);
        assert_eq!(chart, completions_by_index(&b));
        for format in PlotFormat::ALL {
            assert_eq!(
                render(&chart, format).unwrap(),
                render(&completions_by_index(&b), format).unwrap()
            );
        }
    }

    #[test]
    fn ideal_line_splits_by_quanta_and_ends_with_its_window() {
        let m = weighted();
        let window_end = m.windows[0].end;
        let inside = m.completions.iter().filter(|c| c.time <= window_end);
        let last_inside = inside.count();
        let ideal = windowed_ideal_lines(&m);
        // 4:1 while both are backlogged: 256 premium of the first 320.
        let at = |c: usize, k: usize| ideal[c][k].1;
        assert!((at(0, 320) - 256.0).abs() < 1e-6, "{}", at(0, 320));
        assert!((at(1, 320) - 64.0).abs() < 1e-6);
        // Premium's queue empties at the window's end; no ideal is drawn past it.
        assert!(last_inside < m.completions.len());
        assert_eq!(ideal[0].last().unwrap().0, last_inside as f64);
        let by_time = completions_by_time(&m);
        for s in by_time.series.iter().filter(|s| s.dashed) {
            let drawn = s.points.iter().filter(|p| p.1.is_finite());
            assert!(drawn.clone().all(|p| p.0 <= window_end.as_ms_f64()));
        }
    }

    /// The weighted run with its one backlogged window cut in two, a gap of completions
    /// between them: the run, the first window's end and the second's start.
    fn weighted_in_two_windows() -> (RunMetrics, SimTime, SimTime) {
        let mut m = weighted();
        let whole = m.windows.remove(0);
        let (early, late) = (m.completions[99].time, m.completions[200].time);
        let mut first = whole.clone();
        first.end = early;
        first.credits.retain(|c| c.time <= early);
        let mut second = whole;
        second.start = late;
        second.credits.retain(|c| c.time >= late);
        m.windows = vec![first, second];
        (m, early, late)
    }

    #[test]
    fn each_backlogged_window_starts_its_ideal_line_from_the_measured_count() {
        let (m, early, late) = weighted_in_two_windows();
        let ideal = windowed_ideal_lines(&m);
        for (c, line) in ideal.iter().enumerate() {
            let gap = line
                .iter()
                .position(|p| p.1.is_nan())
                .expect("a gap between windows");
            let (k, start) = line[gap + 1];
            let measured_before = m.completions[..k as usize]
                .iter()
                .filter(|d| d.class == Some(c))
                .count();
            assert_eq!(
                start, measured_before as f64,
                "class {c} restarts at its count"
            );
            let before = |t| m.completions.iter().filter(|d| d.time < t).count();
            let by = |t| m.completions.iter().filter(|d| d.time <= t).count();
            assert_eq!(
                k as usize,
                before(late),
                "the second line opens with its window"
            );
            assert_eq!(
                line[gap - 1].0 as usize,
                by(early),
                "and the first closes with its"
            );
        }
    }

    #[test]
    fn long_runs_label_time_axes_in_seconds() {
        let short = Axis::time_ms("simulated time", (0.0, 7_913.9));
        assert_eq!(short.label, "simulated time (ms)");
        let long = Axis::time_ms("simulated time", (0.0, 180_000.0));
        assert_eq!(long.label, "simulated time (s)");
        let labels: Vec<String> = long.ticks().into_iter().map(|t| t.label).collect();
        assert_eq!(
            labels,
            [
                "0", "20", "40", "60", "80", "100", "120", "140", "160", "180"
            ]
        );
        assert_eq!(long.ticks()[3].value, 60_000.0, "ticks stay in data units");
        let day = Axis::time_ms("simulated time", (0.0, 86_400_000.0));
        assert_eq!(day.label, "simulated time (min)");
    }

    /// Two classes served on arrival, never queued: never backlogged together.
    fn unsaturated() -> RunMetrics {
        unsaturated_run().1
    }

    fn unsaturated_run() -> (SimResult, RunMetrics) {
        let records = (0..6)
            .map(|row| {
                done(
                    row,
                    row as usize % 2,
                    DispatchPath::Immediate,
                    [row, row, row + 3],
                )
            })
            .collect();
        let result = result_of(&["gold", "standard"], records);
        let metrics = RunMetrics::compute(&result, &[4, 1]);
        (result, metrics)
    }

    fn dashed_labels(chart: &Chart) -> Vec<&str> {
        let dashed = chart.series.iter().filter(|s| s.dashed);
        dashed.map(|s| s.label.as_str()).collect()
    }

    #[test]
    fn ideal_lines_only_where_classes_were_backlogged_together() {
        let burst = weighted();
        assert!(burst.classes_backlogged_together());
        for chart in [completions_by_index(&burst), completions_by_time(&burst)] {
            assert_eq!(
                dashed_labels(&chart),
                [
                    "premium ideal DRR while backlogged",
                    "regular ideal DRR while backlogged"
                ]
            );
        }
        let (result, open) = unsaturated_run();
        assert!(!open.classes_backlogged_together());
        // The in-system chart's dashed means are measurements, not ideal DRR lines.
        let charts = all_charts(&result, &open, &[]).into_iter();
        for chart in charts.filter(|c| c.name != "in_system") {
            assert!(dashed_labels(&chart).is_empty(), "{}", chart.name);
            assert_eq!(chart.series.len() % 2, 0, "{}", chart.name);
        }
        let svg = render(&completions_by_index(&open), PlotFormat::Svg).unwrap();
        assert!(!String::from_utf8(svg).unwrap().contains("ideal"));
    }

    #[test]
    fn token_share_is_one_line_held_flat_between_backlogged_windows() {
        let (m, early, late) = weighted_in_two_windows();
        let chart = token_share_over_time(&m);
        for s in &chart.series {
            assert!(s.points.iter().all(|p| p.1.is_finite()), "{}", s.label);
            let (before, after): (Vec<&(f64, f64)>, Vec<_>) =
                s.points.iter().partition(|p| p.0 <= early.as_ms_f64());
            // Nothing is counted between the windows: the share the first one ended with
            // holds until the second opens.
            let held = (late.as_ms_f64(), before.last().unwrap().1);
            assert_eq!(*after[0], held, "{}", s.label);
        }
    }

    #[test]
    fn token_share_is_drawn_inside_backlogged_windows_and_ends_at_the_backlogged_share() {
        let m = weighted();
        let chart = token_share_over_time(&m);
        let windows = &chart.shadings[0].windows;
        assert_eq!(windows.len(), m.windows.len());
        let inside = |x: f64| windows.iter().any(|&(a, b)| a <= x && x <= b);
        for s in &chart.series {
            assert!(s.points.iter().all(|p| inside(p.0)), "{}", s.label);
        }
        // Its end is the backlogged share that classes.csv reports, not the drift to 0.5 of
        // a share over the whole run.
        let premium = chart.series.iter().find(|s| s.label == "premium").unwrap();
        let (share, ideal) = m.backlogged_shares(0).unwrap();
        assert!((premium.points.last().unwrap().1 - share).abs() < 1e-12);
        let premium_ideal = &chart.series[1];
        assert!((premium_ideal.points.last().unwrap().1 - ideal).abs() < 1e-12);
        assert!(token_share_over_time(&unsaturated()).series.is_empty());
    }

    fn raw_latency_bound(class: &str, metric: &str, at_most: f64) -> RawExpectation {
        RawExpectation {
            latency: Some(crate::report::verdict::expect::LatencyFigure {
                class: class.into(),
                metric: metric.into(),
            }),
            at_most: Some(at_most),
            ..RawExpectation::default()
        }
    }

    fn typed(raw: &RawExpectation) -> Expectation {
        let classes = ["premium".to_string(), "regular".to_string()];
        Expectation::parse(raw, &classes).unwrap()
    }

    fn latency_bound(class: &str, metric: &str, at_most: f64) -> Expectation {
        typed(&raw_latency_bound(class, metric, at_most))
    }

    #[test]
    fn latency_cdfs_are_log_scaled_with_their_bounds_as_labelled_lines() {
        let m = weighted();
        let mut companion = raw_latency_bound("premium", "ttft_ms_p99", 1.0);
        companion.minus = Some("other.yaml".into());
        let companion = typed(&companion);
        let expectations = [
            latency_bound("premium", "ttft_ms_p99", 2500.0),
            latency_bound("regular", "e2e_ms_p50", 9000.5),
            latency_bound("regular", "queue_wait_ms_p99", 100.0),
            companion,
        ];
        let ttft = latency_cdf(&m, CdfKind::Ttft, &expectations);
        assert_eq!(ttft.x.scale, Scale::Log);
        let labels: Vec<&str> = ttft.references.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["premium ttft p99 ≤ 2500 ms"]);
        assert_eq!(ttft.references[0].class, Some(0));
        let e2e = latency_cdf(&m, CdfKind::E2e, &expectations);
        assert_eq!(e2e.references[0].label, "regular e2e p50 ≤ 9000.5 ms");
        assert!(e2e.x.range.1 >= 9000.5, "the bound is on the chart");
        let svg = String::from_utf8(render(&ttft, PlotFormat::Svg).unwrap()).unwrap();
        assert!(svg.contains(">\npremium ttft p99 ≤ 2500 ms\n<"));
        let has = |text| crate::report::render::chart::tests::svg_has_text(&svg, text);
        assert!(has("1000") && has("10000"), "decade ticks");
    }
}
