//! Sweep plots, PNG and SVG rendered in memory with the embedded DejaVu font, in the style
//! of `report::plots`: with one varied axis, each metric against it (one line per class with
//! its 95% confidence band over seeds, and the ideal DRR share dashed for shares); with two,
//! a heatmap of each class's mean first-N share. More varied axes get no plots (fix all but
//! one or two with single-valued `--set`).
//!
//! Each plot is built as a [`SweepChart`] (pure data), then drawn by [`render`].

use super::SweepError;
use super::run::ClassMetric;
use super::shard::Manifest;
use super::table::PointSummary;
use crate::report::plots::{class_colour, encode_png, ideal_colour, register_embedded_font};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Image size in pixels (as the run plots).
pub const PLOT_SIZE_PX: (u32, u32) = (960, 600);

/// The metrics plotted against one varied axis.
pub const LINE_METRICS: [ClassMetric; 4] = [
    ClassMetric::ShareFirstN,
    ClassMetric::BackloggedTokenShare,
    ClassMetric::TtftMsP99,
    ClassMetric::E2eMsP99,
];

/// One point of a class's line: the mean over seeds and its confidence interval.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct BandPoint {
    /// The axis value (or its index on a non-numeric axis).
    pub x: f64,
    /// Mean over seeds.
    pub mean: f64,
    /// Lower end of the 95% confidence interval.
    pub low: f64,
    /// Upper end of the 95% confidence interval.
    pub high: f64,
}

/// One class in a line chart.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassLine {
    /// Class index (picks the colour).
    pub class: usize,
    /// The legend text.
    pub label: String,
    /// Means with bands, by x.
    pub points: Vec<BandPoint>,
    /// The ideal DRR share at each x (empty for non-share metrics).
    pub ideal: Vec<(f64, f64)>,
}

/// A metric against one varied axis.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    /// The file stem.
    pub name: String,
    /// The caption.
    pub title: String,
    /// The x axis description.
    pub x_label: String,
    /// The y axis description.
    pub y_label: String,
    /// Tick labels of a non-numeric axis (x is then the value's index).
    pub x_labels: Option<Vec<String>>,
    /// Shown x range.
    pub x_range: (f64, f64),
    /// Shown y range.
    pub y_range: (f64, f64),
    /// One per class.
    pub lines: Vec<ClassLine>,
}

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
    Lines(LineChart),
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

/// Every plot of a sweep as (file name, bytes), PNG and SVG of each.
pub fn render_all(
    manifest: &Manifest,
    summaries: &[PointSummary],
) -> Result<Vec<(String, Vec<u8>)>, SweepError> {
    let mut files = Vec::new();
    for chart in all_charts(manifest, summaries) {
        for (ext, png) in [("png", true), ("svg", false)] {
            files.push((format!("{}.{ext}", chart.name()), render(&chart, png)?));
        }
    }
    Ok(files)
}

/// The charts of a sweep (see the module docs).
pub fn all_charts(manifest: &Manifest, summaries: &[PointSummary]) -> Vec<SweepChart> {
    match manifest.grid.varied_axes().as_slice() {
        [axis] => LINE_METRICS
            .iter()
            .map(|&m| SweepChart::Lines(line_chart(manifest, summaries, *axis, m)))
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

/// `metric` against axis `axis` (the only varied one, so points map one-to-one to its values).
pub fn line_chart(
    manifest: &Manifest,
    summaries: &[PointSummary],
    axis: usize,
    metric: ClassMetric,
) -> LineChart {
    let grid = &manifest.grid;
    let a = &grid.axes[axis];
    let numeric = a.is_numeric();
    let x_of = |s: &PointSummary| {
        let digit = grid.digits(s.point)[axis];
        match numeric {
            true => a.values[digit].parse::<f64>().unwrap_or(digit as f64),
            false => digit as f64,
        }
    };
    let mut lines = Vec::new();
    for (class, name) in manifest.class_names.iter().enumerate() {
        let mut points: Vec<BandPoint> = summaries
            .iter()
            .filter_map(|s| {
                let st = s.get(class, metric)?;
                Some(BandPoint {
                    x: x_of(s),
                    mean: st.mean,
                    low: st.ci95_low,
                    high: st.ci95_high,
                })
            })
            .collect();
        points.sort_by(|p, q| p.x.total_cmp(&q.x));
        let ideal = match metric.is_share() {
            true => ideal_curve(manifest, summaries, axis, class, &x_of),
            false => Vec::new(),
        };
        lines.push(ClassLine {
            class,
            label: name.clone(),
            points,
            ideal,
        });
    }
    let xs: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.x))
        .collect();
    let (x_min, x_max) = min_max(&xs).unwrap_or((0.0, 1.0));
    let pad = ((x_max - x_min) * 0.04).max(0.5);
    let y_range = match metric.is_share() {
        true => (0.0, 1.0),
        false => {
            let top = lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| p.high))
                .fold(0.0, f64::max);
            (0.0, (top * 1.1).max(1e-3))
        }
    };
    let y_label = match metric {
        ClassMetric::ShareFirstN => "share of the first N completions".to_string(),
        ClassMetric::BackloggedTokenShare => "share of backlogged token service".to_string(),
        m => m.name().replace('_', " "),
    };
    LineChart {
        name: format!("{}_vs_{}", metric.name(), short(&a.path)),
        title: format!(
            "{} vs {} (mean, 95% CI{})",
            metric.name(),
            short(&a.path),
            if metric.is_share() {
                "; dashed: ideal"
            } else {
                ""
            }
        ),
        x_label: a.path.clone(),
        y_label,
        x_labels: (!numeric).then(|| a.values.clone()),
        x_range: (x_min - pad, x_max + pad),
        y_range,
        lines,
    }
}

/// Samples of the dashed ideal line between measured points.
const IDEAL_SAMPLES: usize = 200;

/// Class `class`'s ideal DRR share against the axis. When the axis is a class's quantum
/// (`router.policy_classes.<name>.quantum`), the fluid share q_i / sum q is drawn as the
/// smooth curve it is (the other quanta recovered from a measured point's ideal shares);
/// otherwise the ideal shares of the points are joined.
fn ideal_curve(
    manifest: &Manifest,
    summaries: &[PointSummary],
    axis: usize,
    class: usize,
    x_of: &dyn Fn(&PointSummary) -> f64,
) -> Vec<(f64, f64)> {
    let mut at_points: Vec<(f64, f64)> = summaries
        .iter()
        .map(|s| (x_of(s), s.ideal_share[class]))
        .collect();
    at_points.sort_by(|p, q| p.0.total_cmp(&q.0));
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
        name: format!("heatmap_{name}_share_first_n"),
        title: format!("{name}: mean share of the first N completions"),
        x_label: grid.axes[x].path.clone(),
        y_label: grid.axes[y].path.clone(),
        x_values: grid.axes[x].values.clone(),
        y_values: grid.axes[y].values.clone(),
        cells,
    }
}

/// Draws `chart` as PNG (`png`) or SVG bytes.
pub fn render(chart: &SweepChart, png: bool) -> Result<Vec<u8>, SweepError> {
    register_embedded_font().map_err(plot_error)?;
    let (width, height) = PLOT_SIZE_PX;
    if !png {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, PLOT_SIZE_PX).into_drawing_area();
            draw(&root, chart)?;
            root.present().map_err(plot_error)?;
        }
        return Ok(svg.into_bytes());
    }
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, PLOT_SIZE_PX).into_drawing_area();
        draw(&root, chart)?;
        root.present().map_err(plot_error)?;
    }
    encode_png(&rgb, width, height).map_err(plot_error)
}

/// A drawing that could not be made: always a bug, never bad input.
fn plot_error(e: impl std::fmt::Display) -> SweepError {
    SweepError::Internal(format!("plot: {e}"))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &SweepChart,
) -> Result<(), SweepError>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(plot_error)?;
    match chart {
        SweepChart::Lines(c) => draw_lines(root, c),
        SweepChart::Heatmap(h) => draw_heatmap(root, h),
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

fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &LineChart,
) -> Result<(), SweepError>
where
    DB::ErrorType: 'static,
{
    let mut ctx = ChartBuilder::on(root)
        .caption(
            &c.title,
            ("sans-serif", 22).into_font().style(FontStyle::Bold),
        )
        .margin(16)
        .x_label_area_size(52)
        .y_label_area_size(72)
        .build_cartesian_2d(c.x_range.0..c.x_range.1, c.y_range.0..c.y_range.1)
        .map_err(plot_error)?;
    let x_format = |v: &f64| match &c.x_labels {
        Some(labels) => category_label(labels, *v),
        None => format!("{v:.0}"),
    };
    let y_decimals = if c.y_range.1 <= 1.0 { 1 } else { 0 };
    let y_format = |v: &f64| format!("{v:.*}", y_decimals);
    ctx.configure_mesh()
        .x_label_formatter(&x_format)
        .y_label_formatter(&y_format)
        .x_desc(c.x_label.as_str())
        .y_desc(c.y_label.as_str())
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(plot_error)?;
    for line in &c.lines {
        let band: Vec<(f64, f64)> = line
            .points
            .iter()
            .map(|p| (p.x, p.high))
            .chain(line.points.iter().rev().map(|p| (p.x, p.low)))
            .collect();
        ctx.draw_series(std::iter::once(Polygon::new(
            band,
            class_colour(line.class).mix(0.2).filled(),
        )))
        .map_err(plot_error)?;
    }
    for line in &c.lines {
        let style = class_colour(line.class).stroke_width(3);
        ctx.draw_series(LineSeries::new(
            line.points.iter().map(|p| (p.x, p.mean)),
            style,
        ))
        .map_err(plot_error)?
        .label(format!("{} (mean, 95% CI)", line.label))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], style));
        ctx.draw_series(
            line.points
                .iter()
                .map(|p| Circle::new((p.x, p.mean), 4, class_colour(line.class).filled())),
        )
        .map_err(plot_error)?;
    }
    for line in c.lines.iter().filter(|l| !l.ideal.is_empty()) {
        let style = ideal_colour(line.class).stroke_width(2);
        ctx.draw_series(DashedLineSeries::new(
            line.ideal.iter().copied(),
            10,
            6,
            style,
        ))
        .map_err(plot_error)?
        .label(format!("{} ideal DRR share", line.label))
        .legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (8, 0)], style)
                + PathElement::new(vec![(14, 0), (22, 0)], style)
        });
    }
    ctx.configure_series_labels()
        // Shares cross mid-height; latencies grow upward, leaving the lower right free.
        .position(match c.y_range.1 <= 1.0 {
            true => SeriesLabelPosition::UpperRight,
            false => SeriesLabelPosition::LowerRight,
        })
        .label_font(("sans-serif", 15))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(160, 160, 160))
        .draw()
        .map_err(plot_error)
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
) -> Result<(), SweepError>
where
    DB::ErrorType: 'static,
{
    let (nx, ny) = (h.x_values.len(), h.y_values.len());
    let mut ctx = ChartBuilder::on(root)
        .caption(
            &h.title,
            ("sans-serif", 22).into_font().style(FontStyle::Bold),
        )
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
