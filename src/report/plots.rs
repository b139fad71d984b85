//! Plots of a run, as PNG and SVG bytes rendered in memory with an embedded font (DejaVu Sans).
//!
//! Each plot is first built as a [`Chart`] (pure data: title, axes, series), then rendered by
//! [`render`]. Class colours come from one palette indexed by class, so a class has the same
//! colour in every plot; ideal lines are dashed in their class's colour.

use super::metrics::RunMetrics;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// Image size in pixels of every plot.
pub const PLOT_SIZE_PX: (u32, u32) = (960, 600);

/// The most points a series is drawn with (longer series are thinned evenly, keeping the
/// first and last point), so plots of huge runs stay small.
pub const MAX_POINTS_PER_SERIES: usize = 2000;

/// Class colours (a colour-blind-friendly palette), by class index modulo its length.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
    RGBColor(240, 228, 66),
];

/// The output image format.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PlotFormat {
    Png,
    Svg,
}

impl PlotFormat {
    /// The file extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            PlotFormat::Png => "png",
            PlotFormat::Svg => "svg",
        }
    }
}

/// A plot could not be drawn (a bug in the chart or the backend, never bad user input).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlotError(pub String);

impl std::fmt::Display for PlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "plot: {}", self.0)
    }
}

impl std::error::Error for PlotError {}

fn plot_error(e: impl std::fmt::Display) -> PlotError {
    PlotError(e.to_string())
}

/// One line of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend text.
    pub label: String,
    /// The class index, which picks the colour.
    pub class: usize,
    /// Dashed (ideal lines) or solid (measurements).
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

/// Where the legend goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LegendCorner {
    UpperLeft,
    UpperRight,
    LowerRight,
}

/// A line chart, ready to render.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// The file stem, e.g. `completions_by_index`.
    pub name: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_range: (f64, f64),
    pub y_range: (f64, f64),
    pub series: Vec<Series>,
    pub legend: LegendCorner,
    /// Decimals of the tick labels on each axis (0 for counts and ms, 1 for shares).
    pub x_decimals: usize,
    pub y_decimals: usize,
}

/// Every plot of a run, in both formats: (file name, bytes), e.g.
/// `("completions_by_index.png", ...)`.
pub fn render_all(metrics: &RunMetrics) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    let mut files = Vec::new();
    for chart in all_charts(metrics) {
        for format in [PlotFormat::Png, PlotFormat::Svg] {
            let name = format!("{}.{}", chart.name, format.extension());
            files.push((name, render(&chart, format)?));
        }
    }
    Ok(files)
}

/// The charts of a run: cumulative completions against completion index and against time
/// (with ideal DRR lines), token-service share over time, TTFT and end-to-end CDFs.
pub fn all_charts(metrics: &RunMetrics) -> Vec<Chart> {
    vec![
        completions_by_index(metrics),
        completions_by_time(metrics),
        token_share_over_time(metrics),
        latency_cdf(metrics, CdfKind::Ttft),
        latency_cdf(metrics, CdfKind::E2e),
    ]
}

/// Classes that had requests, by index.
fn active_classes(metrics: &RunMetrics) -> Vec<usize> {
    (0..metrics.classes.len())
        .filter(|&c| metrics.classes[c].requests > 0)
        .collect()
}

/// The ideal DRR (fluid) completion curve: `curve[c][k]` is class `c`'s ideal cumulative
/// completions after `k` completions in all. Each completion is split among the classes that
/// still have completions left, in proportion to their quanta; a class leaves once its ideal
/// count reaches its actual completed count, and its part goes to the others. It assumes every
/// class with completions left is backlogged, so it is the reference for bursts; under open
/// arrivals a lightly loaded class falls short of it without being treated unfairly (the
/// token-share metrics use the measured backlogged windows instead).
pub fn ideal_completion_curve(metrics: &RunMetrics) -> Vec<Vec<f64>> {
    let totals: Vec<f64> = metrics.classes.iter().map(|c| c.completed as f64).collect();
    let quanta: Vec<f64> = metrics
        .classes
        .iter()
        .map(|c| c.quantum_tokens as f64)
        .collect();
    let mut current = vec![0.0; totals.len()];
    let mut curve: Vec<Vec<f64>> = vec![vec![0.0]; totals.len()];
    for _ in &metrics.completions {
        let mut left = 1.0;
        // Each round either hands out everything or retires at least one class.
        for _ in 0..=totals.len() {
            let active: Vec<usize> = (0..totals.len())
                .filter(|&c| totals[c] - current[c] > 1e-9)
                .collect();
            let quanta_sum: f64 = active.iter().map(|&c| quanta[c]).sum();
            if active.is_empty() || left <= 1e-12 {
                break;
            }
            let mut given = 0.0;
            for &c in &active {
                let part = (left * quanta[c] / quanta_sum).min(totals[c] - current[c]);
                current[c] += part;
                given += part;
            }
            left -= given;
        }
        for (c, v) in current.iter().enumerate() {
            curve[c].push(*v);
        }
    }
    curve
}

/// Keeps at most [`MAX_POINTS_PER_SERIES`] points, evenly spaced, always the last.
fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS_PER_SERIES {
        return points;
    }
    let step = points.len().div_ceil(MAX_POINTS_PER_SERIES);
    let last = *points.last().expect("non-empty");
    let mut kept: Vec<(f64, f64)> = points.into_iter().step_by(step).collect();
    if kept.last() != Some(&last) {
        kept.push(last);
    }
    kept
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

/// Cumulative completions per class against completion index, with each class's ideal DRR
/// line (see [`ideal_completion_curve`]).
pub fn completions_by_index(metrics: &RunMetrics) -> Chart {
    let ideal = ideal_completion_curve(metrics);
    let mut series = Vec::new();
    for c in active_classes(metrics) {
        let name = &metrics.classes[c].name;
        series.push(Series {
            label: name.clone(),
            class: c,
            dashed: false,
            points: thin(cumulative_by_index(metrics, c)),
        });
        let ideal_points = ideal[c]
            .iter()
            .enumerate()
            .map(|(k, &v)| (k as f64, v))
            .collect();
        series.push(Series {
            label: format!("{name} ideal DRR, if backlogged"),
            class: c,
            dashed: true,
            points: thin(ideal_points),
        });
    }
    Chart {
        name: "completions_by_index".into(),
        title: "Cumulative completions per class vs completion order".into(),
        x_label: "completion index (all classes)".into(),
        y_label: "completions of the class".into(),
        x_range: (0.0, (metrics.completions.len() as f64).max(1.0)),
        y_range: (0.0, max_completed(metrics).max(1.0) * 1.05),
        series,
        legend: LegendCorner::UpperLeft,
        x_decimals: 0,
        y_decimals: 0,
    }
}

/// Cumulative completions per class against simulated time, with the ideal DRR line placed at
/// the time of each completion.
pub fn completions_by_time(metrics: &RunMetrics) -> Chart {
    let ideal = ideal_completion_curve(metrics);
    let times: Vec<f64> = std::iter::once(0.0)
        .chain(metrics.completions.iter().map(|c| c.time.as_ms_f64()))
        .collect();
    let mut series = Vec::new();
    for c in active_classes(metrics) {
        let name = &metrics.classes[c].name;
        let measured = cumulative_by_index(metrics, c)
            .into_iter()
            .map(|(k, v)| (times[k as usize], v))
            .collect();
        series.push(Series {
            label: name.clone(),
            class: c,
            dashed: false,
            points: thin(measured),
        });
        let ideal_points = ideal[c].iter().zip(&times).map(|(&v, &t)| (t, v)).collect();
        series.push(Series {
            label: format!("{name} ideal DRR, if backlogged"),
            class: c,
            dashed: true,
            points: thin(ideal_points),
        });
    }
    Chart {
        name: "completions_by_time".into(),
        title: "Cumulative completions per class vs simulated time".into(),
        x_label: "simulated time (ms)".into(),
        y_label: "completions of the class".into(),
        x_range: (0.0, times.last().copied().unwrap_or(0.0).max(1e-3)),
        y_range: (0.0, max_completed(metrics).max(1.0) * 1.05),
        series,
        legend: LegendCorner::UpperLeft,
        x_decimals: 0,
        y_decimals: 0,
    }
}

/// Each class's share of the uncached-token service dispatched so far, against simulated
/// time, with its ideal DRR share dashed.
pub fn token_share_over_time(metrics: &RunMetrics) -> Chart {
    let classes = metrics.classes.len();
    let mut cumulative = vec![0u64; classes];
    let mut points: Vec<Vec<(f64, f64)>> = vec![Vec::new(); classes];
    for d in &metrics.dispatches {
        cumulative[d.class] += d.uncached_tokens;
        let total: u64 = cumulative.iter().sum();
        if total == 0 {
            continue;
        }
        let t = d.time.as_ms_f64();
        for (c, p) in points.iter_mut().enumerate() {
            p.push((t, cumulative[c] as f64 / total as f64));
        }
    }
    let end_ms = metrics
        .dispatches
        .last()
        .map_or(0.0, |d| d.time.as_ms_f64())
        .max(1e-3);
    let mut series = Vec::new();
    for c in active_classes(metrics) {
        let class = &metrics.classes[c];
        series.push(Series {
            label: class.name.clone(),
            class: c,
            dashed: false,
            points: thin(std::mem::take(&mut points[c])),
        });
        series.push(Series {
            label: format!("{} ideal DRR share", class.name),
            class: c,
            dashed: true,
            points: vec![(0.0, class.ideal_share), (end_ms, class.ideal_share)],
        });
    }
    Chart {
        name: "token_share".into(),
        title: "Share of uncached-token service dispatched so far".into(),
        x_label: "simulated time (ms)".into(),
        y_label: "share of service".into(),
        x_range: (0.0, end_ms),
        y_range: (0.0, 1.0),
        series,
        legend: LegendCorner::UpperRight,
        x_decimals: 0,
        y_decimals: 1,
    }
}

/// Which latency a CDF shows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CdfKind {
    Ttft,
    E2e,
}

/// The empirical CDF of a latency per class.
pub fn latency_cdf(metrics: &RunMetrics, kind: CdfKind) -> Chart {
    let (name, title) = match kind {
        CdfKind::Ttft => ("ttft_cdf", "Time to first token: CDF per class"),
        CdfKind::E2e => ("e2e_cdf", "End-to-end latency: CDF per class"),
    };
    let mut series = Vec::new();
    let mut max_ms: f64 = 0.0;
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
        max_ms = max_ms.max(points.last().map_or(0.0, |p| p.0));
        series.push(Series {
            label: class.name.clone(),
            class: c,
            dashed: false,
            points: thin(points),
        });
    }
    Chart {
        name: name.into(),
        title: title.into(),
        x_label: "latency (ms)".into(),
        y_label: "fraction of completed requests".into(),
        x_range: (0.0, (max_ms * 1.02).max(1e-3)),
        y_range: (0.0, 1.0),
        series,
        legend: LegendCorner::LowerRight,
        x_decimals: 0,
        y_decimals: 1,
    }
}

/// Renders `chart` to image bytes.
pub fn render(chart: &Chart, format: PlotFormat) -> Result<Vec<u8>, PlotError> {
    register_embedded_font()?;
    let (width, height) = PLOT_SIZE_PX;
    match format {
        PlotFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, PLOT_SIZE_PX).into_drawing_area();
                draw(&root, chart)?;
                root.present().map_err(plot_error)?;
            }
            Ok(svg.into_bytes())
        }
        PlotFormat::Png => {
            let mut rgb = vec![0u8; width as usize * height as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, PLOT_SIZE_PX).into_drawing_area();
                draw(&root, chart)?;
                root.present().map_err(plot_error)?;
            }
            encode_png(&rgb, width, height)
        }
    }
}

/// Registers DejaVu Sans as plotters' `sans-serif` (idempotent): no system font is used.
pub fn register_embedded_font() -> Result<(), PlotError> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| PlotError("the embedded DejaVu Sans font did not load".into()))?;
    plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold())
        .map_err(|_| PlotError("the embedded DejaVu Sans Bold font did not load".into()))
}

/// Encodes an RGB buffer as PNG bytes (deterministic: fixed compression and filtering).
pub fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, PlotError> {
    let mut bytes = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut bytes, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Best);
        encoder.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
        let mut writer = encoder.write_header().map_err(plot_error)?;
        writer.write_image_data(rgb).map_err(plot_error)?;
    }
    Ok(bytes)
}

/// A class's colour, the same in every plot.
pub fn class_colour(class: usize) -> RGBColor {
    PALETTE[class % PALETTE.len()]
}

/// The class colour darkened, for its ideal line.
pub fn ideal_colour(class: usize) -> RGBColor {
    let RGBColor(r, g, b) = class_colour(class);
    let darken = |v: u8| (u16::from(v) * 3 / 5) as u8;
    RGBColor(darken(r), darken(g), darken(b))
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(plot_error)?;
    let (x0, x1) = chart.x_range;
    let (y0, y1) = chart.y_range;
    let mut ctx = ChartBuilder::on(root)
        .caption(
            &chart.title,
            ("sans-serif", 24).into_font().style(FontStyle::Bold),
        )
        .margin(16)
        .x_label_area_size(52)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(plot_error)?;
    let x_format = |v: &f64| format!("{v:.*}", chart.x_decimals);
    let y_format = |v: &f64| format!("{v:.*}", chart.y_decimals);
    ctx.configure_mesh()
        .x_label_formatter(&x_format)
        .y_label_formatter(&y_format)
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(plot_error)?;
    // Measurements first, ideal lines on top so they stay visible where the two agree.
    let solid = chart.series.iter().filter(|s| !s.dashed);
    for s in solid.chain(chart.series.iter().filter(|s| s.dashed)) {
        let style = if s.dashed {
            ideal_colour(s.class).stroke_width(2)
        } else {
            class_colour(s.class).stroke_width(3)
        };
        let drawn = if s.dashed {
            ctx.draw_series(DashedLineSeries::new(
                s.points.iter().copied(),
                10,
                6,
                style,
            ))
            .map_err(plot_error)?
        } else {
            ctx.draw_series(LineSeries::new(s.points.iter().copied(), style))
                .map_err(plot_error)?
        };
        let dashed = s.dashed;
        drawn.label(s.label.as_str()).legend(move |(x, y)| {
            // A dashed line shows as two dashes, a solid one as one stroke.
            let second_start = if dashed { 14 } else { 8 };
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (8, 0)], style)
                + PathElement::new(vec![(second_start, 0), (22, 0)], style)
        });
    }
    let position = match chart.legend {
        LegendCorner::UpperLeft => SeriesLabelPosition::UpperLeft,
        LegendCorner::UpperRight => SeriesLabelPosition::UpperRight,
        LegendCorner::LowerRight => SeriesLabelPosition::LowerRight,
    };
    ctx.configure_series_labels()
        .position(position)
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()
        .map_err(plot_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::weighted_metrics as weighted;

    #[test]
    fn every_plot_renders_to_png_and_svg() {
        let m = weighted();
        let files = render_all(&m).unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.len(), 10);
        assert!(names.contains(&"completions_by_index.png"));
        assert!(names.contains(&"e2e_cdf.svg"));
        for (name, bytes) in &files {
            if name.ends_with(".png") {
                assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name}");
                assert!(bytes.len() > 10_000, "{name} has content");
            } else {
                let text = std::str::from_utf8(bytes).unwrap();
                assert!(text.starts_with("<svg"), "{name}");
                assert!(
                    text.contains("premium") && text.contains("regular"),
                    "{name}"
                );
            }
        }
        // To look at them: ROUTERSIM_PLOT_DIR=/tmp/plots cargo test --lib report::plots
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
    fn plots_are_deterministic() {
        let (a, b) = (weighted(), weighted());
        let chart = completions_by_index(&a);
        assert_eq!(chart, completions_by_index(&b));
        assert_eq!(
            render(&chart, PlotFormat::Png).unwrap(),
            render(&completions_by_index(&b), PlotFormat::Png).unwrap()
        );
        assert_eq!(
            render(&chart, PlotFormat::Svg).unwrap(),
            render(&completions_by_index(&b), PlotFormat::Svg).unwrap()
        );
    }

    #[test]
    fn ideal_curve_splits_by_quanta_then_hands_over() {
        let m = weighted();
        let ideal = ideal_completion_curve(&m);
        // 4:1 while both have completions left: 256 premium of the first 320.
        assert!((ideal[0][320] - 256.0).abs() < 1e-6, "{}", ideal[0][320]);
        assert!((ideal[1][320] - 64.0).abs() < 1e-6);
        // Premium runs out at completion 400; regular takes every later one.
        assert!((ideal[0][400] - 320.0).abs() < 1e-6);
        assert!((ideal[1][640] - 320.0).abs() < 1e-6);
    }

    #[test]
    fn thinning_keeps_the_ends() {
        let points: Vec<(f64, f64)> = (0..10_001).map(|i| (i as f64, 0.0)).collect();
        let thinned = thin(points);
        assert!(thinned.len() <= MAX_POINTS_PER_SERIES + 1);
        assert_eq!(thinned[0], (0.0, 0.0));
        assert_eq!(*thinned.last().unwrap(), (10_000.0, 0.0));
    }
}
