//! Sweep plots: with one varied axis, each metric against it (one line per class with its 95%
//! confidence band over seeds; shares with their ideal dashed where classes were backlogged
//! together, latencies on a log axis with the scenario's bounds on that metric as labelled
//! lines); with two, a heatmap of each class's mean first-N share. More varied axes get no
//! plots (fix all but one or two with single-valued `--set`).
//!
//! The two shares have different ideals. DRR splits tokens by quanta, so the backlogged token
//! share's ideal is the quantum share; the share of the first N completions counts requests,
//! and its ideal is the request split DRR implies for the classes' request sizes (the run
//! table's `ideal`, [`PointSummary::ideal`]): a class of 2,000-token prompts gets far fewer
//! requests than its quantum share.
//!
//! Line charts are [`crate::report::render::chart::Chart`]s, the model and renderer the run plots use;
//! only the heatmap draws itself here.

use super::run::ClassMetric;
use super::shard::Manifest;
use super::table::PointSummary;
use crate::report::render::chart::{
    self, Axis, Chart, Direction, Drawable, LegendCorner, PlotError, PlotFormat, Series,
    caption_font, class_colour, plot_error,
};
use crate::report::render::plots::file_name_part;
use crate::report::render::plots::latency_references;
use crate::report::verdict::expect::Expectation;
use plotters::coord::Shift;
use plotters::prelude::*;

/// The metrics plotted against one varied axis.
pub const LINE_METRICS: [ClassMetric; 4] = [
    ClassMetric::ShareFirstN,
    ClassMetric::BackloggedTokenShare,
    ClassMetric::TtftMsP99,
    ClassMetric::E2eMsP99,
];

/// A class's mean share over two varied axes.
#[derive(Clone, Debug, PartialEq)]
pub struct Heatmap {
    /// The file stem.
    pub name: String,
    /// The caption.
    pub title: String,
    /// The x axis path.
    pub x_label: String,
    /// The y axis path.
    pub y_label: String,
    /// The x axis values (columns).
    pub x_values: Vec<String>,
    /// The y axis values (rows).
    pub y_values: Vec<String>,
    /// `cells[x * y_values.len() + y]`, in [0, 1]; `None` when unmeasured.
    pub cells: Vec<Option<f64>>,
}

/// A sweep plot, ready to render.
#[derive(Clone, Debug, PartialEq)]
pub enum SweepChart {
    /// A metric against one axis.
    Lines(Chart),
    /// A share over two axes.
    Heatmap(Heatmap),
}

impl SweepChart {
    /// The file stem.
    pub fn name(&self) -> &str {
        match self {
            SweepChart::Lines(c) => &c.name,
            SweepChart::Heatmap(h) => &h.name,
        }
    }
}

impl Drawable for SweepChart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        match self {
            SweepChart::Lines(c) => c.draw(root),
            SweepChart::Heatmap(h) => h.draw(root),
        }
    }
}

/// Every plot of a sweep as (file name, bytes), PNG and SVG of each. `expectations` are the
/// scenario's; its latency bounds are drawn on the matching latency charts.
pub fn render_all(
    manifest: &Manifest,
    summaries: &[PointSummary],
    expectations: &[Expectation],
) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    let mut files = Vec::new();
    for chart in all_charts(manifest, summaries, expectations) {
        files.extend(chart::render_files(chart.name(), &chart)?);
    }
    Ok(files)
}

/// Draws `chart` as image bytes.
pub fn render(chart: &SweepChart, format: PlotFormat) -> Result<Vec<u8>, PlotError> {
    chart::render(chart, format)
}

/// The charts of a sweep (see the module docs).
pub fn all_charts(
    manifest: &Manifest,
    summaries: &[PointSummary],
    expectations: &[Expectation],
) -> Vec<SweepChart> {
    match manifest.grid.varied_axes().as_slice() {
        [axis] => LINE_METRICS
            .iter()
            .map(|&m| SweepChart::Lines(line_chart(manifest, summaries, *axis, m, expectations)))
            .collect(),
        [x, y] => (0..manifest.class_names.len())
            .map(|c| SweepChart::Heatmap(heatmap(manifest, summaries, (*x, *y), c)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The last two path components, e.g. `regular.quantum`.
fn short(path: &str) -> String {
    let parts: Vec<&str> = path.split('.').collect();
    parts[parts.len().saturating_sub(2)..].join(".")
}

/// Whether classes were backlogged together in any run of the sweep (a backlogged token share
/// was measured): only then is the ideal DRR share a reference for the measured shares.
pub fn backlogged_together(summaries: &[PointSummary], class_count: usize) -> bool {
    summaries
        .iter()
        .any(|s| (0..class_count).any(|c| s.get(c, ClassMetric::BackloggedTokenShare).is_some()))
}

/// One class's means with their confidence band, by x.
fn class_series(
    summaries: &[PointSummary],
    class: usize,
    name: &str,
    metric: ClassMetric,
    x_of: &dyn Fn(&PointSummary) -> f64,
) -> Series {
    let mut points: Vec<(f64, f64, f64, f64)> = summaries
        .iter()
        .filter_map(|s| {
            let st = s.get(class, metric)?;
            Some((x_of(s), st.mean, st.ci95_low, st.ci95_high))
        })
        .collect();
    points.sort_by(|p, q| p.0.total_cmp(&q.0));
    Series {
        band: Some(points.iter().map(|&(x, _, lo, hi)| (x, lo, hi)).collect()),
        markers: true,
        ..Series::measured(
            format!("{name} (mean, 95% CI)"),
            class,
            points.iter().map(|&(x, mean, ..)| (x, mean)).collect(),
        )
    }
}

/// The x axis: the varied values, numeric with a margin, or named categories.
fn x_axis(manifest: &Manifest, axis: usize, series: &[Series]) -> Axis {
    let a = &manifest.grid.axes[axis];
    if !a.is_numeric() {
        return Axis::categories(&a.path, &a.values);
    }
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    let (x_min, x_max) = min_max(&xs).unwrap_or((0.0, 1.0));
    let pad = ((x_max - x_min) * 0.04).max(0.5);
    Axis::linear(&a.path, (x_min - pad, x_max + pad))
}

/// The y axis: shares on [0, 1], latencies on a log axis over the bands and `references`.
fn y_axis(metric: ClassMetric, series: &[Series], references: &[f64]) -> Axis {
    match metric {
        ClassMetric::ShareFirstN => Axis::linear("share of the first N completions", (0.0, 1.0)),
        ClassMetric::BackloggedTokenShare => {
            Axis::linear("share of backlogged token service", (0.0, 1.0))
        }
        m => {
            let bands = series.iter().flat_map(|s| s.band.iter().flatten());
            let values = bands.flat_map(|&(_, lo, hi)| [lo, hi]);
            let means = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
            let label = format!("{} (log scale)", m.name().replace('_', " "));
            Axis::log_over(
                &label,
                values.chain(means).chain(references.iter().copied()),
            )
        }
    }
}

/// `metric` against axis `axis` (the only varied one, so points map one-to-one to its values).
pub fn line_chart(
    manifest: &Manifest,
    summaries: &[PointSummary],
    axis: usize,
    metric: ClassMetric,
    expectations: &[Expectation],
) -> Chart {
    let grid = &manifest.grid;
    let a = &grid.axes[axis];
    let x_of = |s: &PointSummary| {
        let digit = grid.digits(s.point)[axis];
        match a.is_numeric() {
            true => a.values[digit].parse::<f64>().unwrap_or(digit as f64),
            false => digit as f64,
        }
    };
    let names = &manifest.class_names;
    let ideal = metric.is_share() && backlogged_together(summaries, names.len());
    let mut series = Vec::new();
    for (class, name) in names.iter().enumerate() {
        series.push(class_series(summaries, class, name, metric, &x_of));
        if ideal {
            let points = ideal_curve(manifest, summaries, (axis, metric), class, &x_of);
            series.push(Series::ideal(
                format!("{name} {}", ideal_label(metric)),
                class,
                points,
            ));
        }
    }
    let references = latency_references(
        expectations,
        names,
        |m| format!("{}_ms_{}", m.kind.name(), m.stat.name()) == metric.name(),
        Direction::Horizontal,
    );
    let at: Vec<f64> = references.iter().map(|r| r.at).collect();
    let title = format!(
        "{} vs {} (mean, 95% CI{})",
        metric.name(),
        short(&a.path),
        match ideal {
            true => format!("; dashed: {}", ideal_label(metric)),
            false => String::new(),
        }
    );
    // Shares cross mid-height; latencies grow upward, leaving the lower right free.
    let legend = match metric.is_share() {
        true => LegendCorner::UpperRight,
        false => LegendCorner::LowerRight,
    };
    let name = format!("{}_vs_{}", metric.name(), file_name_part(&short(&a.path)));
    let x = x_axis(manifest, axis, &series);
    let mut chart = Chart::new(&name, &title, x, y_axis(metric, &series, &at), legend);
    chart.series = series;
    chart.references = references;
    chart
}

/// What the dashed line of share `metric` is, for legends and titles.
fn ideal_label(metric: ClassMetric) -> &'static str {
    match metric {
        ClassMetric::ShareFirstN => "ideal request share",
        _ => "ideal token share",
    }
}

/// Samples of the dashed ideal line between measured points.
const IDEAL_SAMPLES: usize = 200;

/// Class `class`'s ideal of share `metric` ([`PointSummary::ideal`]) against the axis. The
/// points' ideals are joined, but when the axis is a class's quantum
/// (`router.policy_classes.<name>.quantum`) the token ideal, the fluid share q_i / sum q, is
/// drawn as the smooth curve it is (the other quanta recovered from a measured point's ideal
/// shares). The first-N request ideal has no such form: it depends on each run's sizes.
fn ideal_curve(
    manifest: &Manifest,
    summaries: &[PointSummary],
    (axis, metric): (usize, ClassMetric),
    class: usize,
    x_of: &dyn Fn(&PointSummary) -> f64,
) -> Vec<(f64, f64)> {
    let mut at_points: Vec<(f64, f64)> = summaries
        .iter()
        .filter_map(|s| Some((x_of(s), s.ideal(class, metric)?)))
        .collect();
    at_points.sort_by(|p, q| p.0.total_cmp(&q.0));
    if metric != ClassMetric::BackloggedTokenShare {
        return at_points;
    }
    let path = &manifest.grid.axes[axis].path;
    let varied_class = path
        .strip_prefix("router.policy_classes.")
        .and_then(|rest| rest.strip_suffix(".quantum"))
        .and_then(|name| manifest.class_names.iter().position(|c| c == name));
    let (Some(k), Some(first)) = (varied_class, summaries.first()) else {
        return at_points;
    };
    let (x0, share_k) = (x_of(first), first.ideal_share[k]);
    let xs: Vec<f64> = at_points.iter().map(|p| p.0).collect();
    let (Some((lo, hi)), true) = (min_max(&xs), share_k > 0.0) else {
        return at_points;
    };
    // At the first point, quantum k is x0 and its share x0 / total, so the others sum to
    // total - x0 and class i's quantum is share_i * total.
    let total = x0 / share_k;
    let others = total - x0;
    let own = if class == k {
        0.0
    } else {
        first.ideal_share[class] * total
    };
    (0..=IDEAL_SAMPLES)
        .map(|i| {
            let x = lo + (hi - lo) * i as f64 / IDEAL_SAMPLES as f64;
            let numerator = if class == k { x } else { own };
            (x, numerator / (others + x))
        })
        .collect()
}

fn min_max(values: &[f64]) -> Option<(f64, f64)> {
    let min = values.iter().copied().reduce(f64::min)?;
    let max = values.iter().copied().reduce(f64::max)?;
    Some((min, max))
}

/// Class `class`'s mean first-N share over axes `(x, y)`.
pub fn heatmap(
    manifest: &Manifest,
    summaries: &[PointSummary],
    (x, y): (usize, usize),
    class: usize,
) -> Heatmap {
    let grid = &manifest.grid;
    let (nx, ny) = (grid.axes[x].values.len(), grid.axes[y].values.len());
    let mut cells = vec![None; nx * ny];
    for s in summaries {
        let digits = grid.digits(s.point);
        cells[digits[x] * ny + digits[y]] =
            s.get(class, ClassMetric::ShareFirstN).map(|st| st.mean);
    }
    let name = &manifest.class_names[class];
    Heatmap {
        name: format!("heatmap_{}_share_first_n", file_name_part(name)),
        title: format!("{name}: mean share of the first N completions"),
        x_label: grid.axes[x].path.clone(),
        y_label: grid.axes[y].path.clone(),
        x_values: grid.axes[x].values.clone(),
        y_values: grid.axes[y].values.clone(),
        cells,
    }
}

impl Drawable for Heatmap {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(plot_error)?;
        draw_heatmap(root, self)
    }
}

/// The label of tick `v` on a categorical axis: the value at the nearest integer index.
fn category_label(labels: &[String], v: f64) -> String {
    let index = v.round();
    if (v - index).abs() > 1e-6 || index < 0.0 {
        return String::new();
    }
    labels.get(index as usize).cloned().unwrap_or_default()
}

/// White (0) to the first palette blue (1).
fn heat_colour(value: f64) -> RGBColor {
    let v = value.clamp(0.0, 1.0);
    let mix = |hi: u8| (255.0 - (255.0 - f64::from(hi)) * v).round() as u8;
    let RGBColor(r, g, b) = class_colour(0);
    RGBColor(mix(r), mix(g), mix(b))
}

fn draw_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    h: &Heatmap,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    let (nx, ny) = (h.x_values.len(), h.y_values.len());
    let mut ctx = ChartBuilder::on(root)
        .caption(&h.title, caption_font())
        .margin(16)
        .x_label_area_size(52)
        .y_label_area_size(90)
        .build_cartesian_2d(-0.5..nx as f64 - 0.5, -0.5..ny as f64 - 0.5)
        .map_err(plot_error)?;
    let x_format = |v: &f64| category_label(&h.x_values, *v);
    let y_format = |v: &f64| category_label(&h.y_values, *v);
    ctx.configure_mesh()
        .disable_mesh()
        .x_labels(nx + 1)
        .y_labels(ny + 1)
        .x_label_formatter(&x_format)
        .y_label_formatter(&y_format)
        .x_desc(h.x_label.as_str())
        .y_desc(h.y_label.as_str())
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .draw()
        .map_err(plot_error)?;
    for xi in 0..nx {
        for yi in 0..ny {
            let (x, y) = (xi as f64, yi as f64);
            let cell = h.cells[xi * ny + yi];
            let fill = cell.map_or(RGBColor(220, 220, 220), heat_colour);
            ctx.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.5, y - 0.5), (x + 0.5, y + 0.5)],
                fill.filled(),
            )))
            .map_err(plot_error)?;
            let text = cell.map_or("n/a".to_string(), |v| format!("{v:.3}"));
            let colour = if cell.unwrap_or(0.0) > 0.55 {
                WHITE
            } else {
                BLACK
            };
            let style = ("sans-serif", 15).into_font().color(&colour).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Center,
                ),
            );
            ctx.draw_series(std::iter::once(Text::new(text, (x, y), style)))
                .map_err(plot_error)?;
        }
    }
    Ok(())
}
