//! One chart model for every line plot, run and sweep alike, and its one renderer.
//!
//! A [`Chart`] is pure data: axes (linear, log or categorical, each with the ticks it will
//! show), series (solid measurements or dashed ideals, each with an optional confidence band),
//! labelled reference lines and shaded x-windows. [`render`] draws anything [`Drawable`] to PNG
//! or SVG bytes in memory with an embedded font (DejaVu Sans), so plots look the same on every
//! machine and reruns are byte-identical. Class colours come from one palette indexed by class,
//! so a class has the same colour in every plot; ideal lines are dashed in a darker shade.

use crate::time::SimTime;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

/// Image size in pixels of every plot.
pub const PLOT_SIZE_PX: (u32, u32) = (960, 600);

/// The most points a series is drawn with (longer series are thinned evenly, keeping the
/// first and last point and every line break), so plots of huge runs stay small.
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
    /// Both formats, in the order their files are listed.
    pub const ALL: [PlotFormat; 2] = [PlotFormat::Png, PlotFormat::Svg];

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

/// Wraps a backend error.
pub fn plot_error(e: impl std::fmt::Display) -> PlotError {
    PlotError(e.to_string())
}

/// How an axis maps values to positions.
#[derive(Clone, Debug, PartialEq)]
pub enum Scale {
    Linear,
    /// Base-10 logarithmic: equal ratios get equal lengths (the range must be positive).
    Log,
    /// Named values at positions 0, 1, 2, ...
    Categories(Vec<String>),
    /// Linear in milliseconds, labelled in `unit`: a 180 s run reads "180", not "180000".
    Time(TimeUnit),
}

/// The unit a time axis is labelled in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    Ms,
    S,
    Min,
}

impl TimeUnit {
    /// The unit that labels a span of `span_ms` with short numbers: milliseconds up to 10 s,
    /// seconds up to 20 minutes, minutes beyond.
    pub fn for_span_ms(span_ms: f64) -> TimeUnit {
        match span_ms {
            s if s <= 10_000.0 => TimeUnit::Ms,
            s if s <= 1_200_000.0 => TimeUnit::S,
            _ => TimeUnit::Min,
        }
    }

    /// Milliseconds in one unit.
    pub fn ms(self) -> f64 {
        match self {
            TimeUnit::Ms => 1.0,
            TimeUnit::S => 1_000.0,
            TimeUnit::Min => 60_000.0,
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            TimeUnit::Ms => "ms",
            TimeUnit::S => "s",
            TimeUnit::Min => "min",
        }
    }
}

/// A tick mark: where it is (in data units) and its label.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    pub value: f64,
    pub label: String,
}

/// One axis of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    /// The axis description.
    pub label: String,
    /// The shown range, in data units.
    pub range: (f64, f64),
    pub scale: Scale,
}

/// How many ticks a linear axis aims for.
const LINEAR_TICKS: f64 = 8.0;

impl Axis {
    /// A linear axis over `range` (widened when empty, so it can be drawn).
    pub fn linear(label: &str, range: (f64, f64)) -> Axis {
        let (lo, hi) = range;
        let hi = if hi > lo { hi } else { lo + 1.0 };
        Axis {
            label: label.to_string(),
            range: (lo, hi),
            scale: Scale::Linear,
        }
    }

    /// A linear axis of whole numbers (counts of workers) over `range`, widened to at least
    /// [`LINEAR_TICKS`] wide so that its tick step is at least 1: every labelled tick is a
    /// whole number.
    pub fn whole(label: &str, range: (f64, f64)) -> Axis {
        let (lo, hi) = range;
        Axis::linear(label, (lo, hi.max(lo + LINEAR_TICKS)))
    }

    /// A time axis over `range_ms` (data stays in milliseconds), labelled "`what` (unit)" in
    /// the unit [`TimeUnit::for_span_ms`] picks for its span.
    pub fn time_ms(what: &str, range_ms: (f64, f64)) -> Axis {
        let mut axis = Axis::linear(what, range_ms);
        let unit = TimeUnit::for_span_ms(axis.range.1 - axis.range.0);
        axis.label = format!("{what} ({})", unit.symbol());
        axis.scale = Scale::Time(unit);
        axis
    }

    /// A log axis spanning whole decades around the positive `values` (non-positive values
    /// are ignored; with none the axis spans 1 to 10).
    pub fn log_over(label: &str, values: impl IntoIterator<Item = f64>) -> Axis {
        let positive: Vec<f64> = values
            .into_iter()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let lo = positive.iter().copied().reduce(f64::min).unwrap_or(1.0);
        let hi = positive.iter().copied().reduce(f64::max).unwrap_or(10.0);
        let lo_decade = lo.log10().floor() as i32;
        let hi_decade = (hi.log10().ceil() as i32).max(lo_decade + 1);
        Axis {
            label: label.to_string(),
            range: (10f64.powi(lo_decade), 10f64.powi(hi_decade)),
            scale: Scale::Log,
        }
    }

    /// A categorical axis: `values[i]` at position `i`, with half a slot of margin.
    pub fn categories(label: &str, values: &[String]) -> Axis {
        Axis {
            label: label.to_string(),
            range: (-0.5, values.len() as f64 - 0.5),
            scale: Scale::Categories(values.to_vec()),
        }
    }

    /// Where `value` lies on the drawn (possibly log-transformed) axis. A log axis clamps
    /// non-positive values to its lower end, so they stay on the chart.
    pub fn position(&self, value: f64) -> f64 {
        match self.scale {
            Scale::Log => value.max(self.range.0).log10(),
            _ => value,
        }
    }

    /// The drawn range (see [`Axis::position`]).
    fn positions(&self) -> (f64, f64) {
        (self.position(self.range.0), self.position(self.range.1))
    }

    /// The labelled ticks inside the range, ascending.
    pub fn ticks(&self) -> Vec<Tick> {
        match &self.scale {
            Scale::Linear => linear_ticks(self.range),
            Scale::Time(unit) => {
                let per = unit.ms();
                let mut ticks = linear_ticks((self.range.0 / per, self.range.1 / per));
                ticks.iter_mut().for_each(|t| t.value *= per);
                ticks
            }
            Scale::Log => log_ticks(self.range),
            Scale::Categories(names) => names
                .iter()
                .enumerate()
                .map(|(i, name)| Tick {
                    value: i as f64,
                    label: name.clone(),
                })
                .collect(),
        }
    }

    /// Unlabelled grid positions between the ticks.
    fn minor_ticks(&self) -> Vec<f64> {
        match &self.scale {
            Scale::Linear => {
                let step = nice_step(self.range) / 5.0;
                steps_within(self.range, step)
            }
            Scale::Time(unit) => {
                let per = unit.ms();
                let range = (self.range.0 / per, self.range.1 / per);
                let step = nice_step(range) / 5.0;
                steps_within(range, step)
                    .into_iter()
                    .map(|v| v * per)
                    .collect()
            }
            Scale::Log => decade_multiples(self.range, &[2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
                .into_iter()
                .map(|(v, _)| v)
                .collect(),
            Scale::Categories(_) => Vec::new(),
        }
    }

    /// The label of the tick drawn at position `position` (empty between ticks).
    fn label_at(&self, ticks: &[Tick], position: f64) -> String {
        ticks
            .iter()
            .find(|t| (self.position(t.value) - position).abs() < 1e-9)
            .map(|t| t.label.clone())
            .unwrap_or_default()
    }
}

/// A step of 1, 2 or 5 times a power of ten giving about [`LINEAR_TICKS`] ticks.
fn nice_step((lo, hi): (f64, f64)) -> f64 {
    let raw = (hi - lo) / LINEAR_TICKS;
    let magnitude = 10f64.powf(raw.log10().floor());
    let nice = match raw / magnitude {
        n if n < 1.5 => 1.0,
        n if n < 3.0 => 2.0,
        n if n < 7.0 => 5.0,
        _ => 10.0,
    };
    nice * magnitude
}

/// Multiples of `step` inside `range` (computed from integers, so they don't drift).
fn steps_within((lo, hi): (f64, f64), step: f64) -> Vec<f64> {
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

fn linear_ticks(range: (f64, f64)) -> Vec<Tick> {
    let step = nice_step(range);
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    steps_within(range, step)
        .into_iter()
        .map(|value| {
            let label = format!("{value:.decimals$}");
            // -0.0 prints as "-0".
            let label = if label.trim_start_matches(['-', '0', '.']).is_empty() {
                label.trim_start_matches('-').to_string()
            } else {
                label
            };
            Tick { value, label }
        })
        .collect()
}

/// `m * 10^k` for each multiplier `m` and every decade `k`, inside `range`, with its label.
fn decade_multiples((lo, hi): (f64, f64), multipliers: &[f64]) -> Vec<(f64, String)> {
    let first = lo.log10().floor() as i32;
    let last = hi.log10().ceil() as i32;
    let mut values = Vec::new();
    for k in first..=last {
        for &m in multipliers {
            let value = m * 10f64.powi(k);
            if value >= lo * (1.0 - 1e-9) && value <= hi * (1.0 + 1e-9) {
                let decimals = (-k).max(0) as usize;
                values.push((value, format!("{value:.decimals$}")));
            }
        }
    }
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    values
}

/// Powers of ten, with 2x and 5x between them when the range spans fewer than three.
fn log_ticks(range: (f64, f64)) -> Vec<Tick> {
    let decades = decade_multiples(range, &[1.0]);
    let chosen = match decades.len() {
        0..3 => decade_multiples(range, &[1.0, 2.0, 5.0]),
        _ => decades,
    };
    chosen
        .into_iter()
        .map(|(value, label)| Tick { value, label })
        .collect()
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
    /// The line; a point with a non-finite y breaks it (nothing is drawn across the gap).
    pub points: Vec<(f64, f64)>,
    /// A shaded band around the line as (x, low, high), e.g. a confidence interval.
    pub band: Option<Vec<(f64, f64, f64)>>,
    /// Marks each point with a dot (for few, separately measured points).
    pub markers: bool,
}

impl Series {
    /// A solid line of measurements.
    pub fn measured(label: String, class: usize, points: Vec<(f64, f64)>) -> Series {
        Series {
            label,
            class,
            dashed: false,
            points: thin(points),
            band: None,
            markers: false,
        }
    }

    /// A dashed ideal line.
    pub fn ideal(label: String, class: usize, points: Vec<(f64, f64)>) -> Series {
        Series {
            dashed: true,
            ..Series::measured(label, class, points)
        }
    }
}

/// Which way a reference line runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Direction {
    /// A line at one x value, across the whole y range.
    Vertical,
    /// A line at one y value, across the whole x range.
    Horizontal,
}

/// A labelled reference line, e.g. a latency objective.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceLine {
    pub direction: Direction,
    /// Where the line is, in data units of its axis.
    pub at: f64,
    /// The text drawn beside the line.
    pub label: String,
    /// The class it concerns, which picks the colour (grey for none).
    pub class: Option<usize>,
}

/// Where the legend goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LegendCorner {
    UpperLeft,
    UpperRight,
    LowerRight,
}

/// The fills of a chart's shadings, by shading index: the first is the neutral grey every
/// single-shading chart uses; the others tell several shadings apart (e.g. one per lost
/// worker).
const SHADE_COLOURS: [RGBColor; 4] = [
    RGBColor(150, 150, 150),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(0, 158, 115),
];

/// Shaded spans of x, with one legend entry for all of them.
#[derive(Clone, Debug, PartialEq)]
pub struct Shading {
    pub label: String,
    /// `(start, end)` in x data units.
    pub windows: Vec<(f64, f64)>,
}

/// A line chart, ready to render.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// The file stem, e.g. `completions_by_index`.
    pub name: String,
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub references: Vec<ReferenceLine>,
    /// Drawn in order, each in its own fill ([`SHADE_COLOURS`] by index).
    pub shadings: Vec<Shading>,
    pub legend: LegendCorner,
}

impl Chart {
    /// A chart with no series, reference lines or shading yet.
    pub fn new(name: &str, title: &str, x: Axis, y: Axis, legend: LegendCorner) -> Chart {
        Chart {
            name: name.to_string(),
            title: title.to_string(),
            x,
            y,
            series: Vec::new(),
            references: Vec::new(),
            shadings: Vec::new(),
            legend,
        }
    }
}

/// Keeps at most about [`MAX_POINTS_PER_SERIES`] points, evenly spaced, always the last one
/// and every line break with its neighbours.
pub fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS_PER_SERIES {
        return points;
    }
    let step = points.len().div_ceil(MAX_POINTS_PER_SERIES);
    let is_break = |i: usize| points.get(i).is_some_and(|p| !p.1.is_finite());
    let last = points.len() - 1;
    (0..points.len())
        .filter(|&i| {
            i % step == 0
                || i == last
                || is_break(i)
                || is_break(i + 1)
                || is_break(i.wrapping_sub(1))
        })
        .map(|i| points[i])
        .collect()
}

/// A step curve's corners: each change is drawn as a vertical jump from the previous level.
pub fn step_points(curve: &[(SimTime, u64)]) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(curve.len() * 2);
    let mut level = 0.0;
    for &(t, count) in curve {
        points.push((t.as_ms_f64(), level));
        level = count as f64;
        points.push((t.as_ms_f64(), level));
    }
    points
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

/// Something that draws itself on a drawing area of any backend.
pub trait Drawable {
    /// Draws on `root`, which is [`PLOT_SIZE_PX`] large and not yet filled.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static;
}

/// Renders `drawing` to image bytes.
pub fn render(drawing: &impl Drawable, format: PlotFormat) -> Result<Vec<u8>, PlotError> {
    register_embedded_font()?;
    let (width, height) = PLOT_SIZE_PX;
    match format {
        PlotFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, PLOT_SIZE_PX).into_drawing_area();
                drawing.draw(&root)?;
                root.present().map_err(plot_error)?;
            }
            Ok(svg.into_bytes())
        }
        PlotFormat::Png => {
            let mut rgb = vec![0u8; width as usize * height as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, PLOT_SIZE_PX).into_drawing_area();
                drawing.draw(&root)?;
                root.present().map_err(plot_error)?;
            }
            encode_png(&rgb, width, height)
        }
    }
}

/// `drawing` in both formats as (file name, bytes), named `<stem>.png` and `<stem>.svg`.
pub fn render_files(
    stem: &str,
    drawing: &impl Drawable,
) -> Result<Vec<(String, Vec<u8>)>, PlotError> {
    PlotFormat::ALL
        .iter()
        .map(|&f| Ok((format!("{stem}.{}", f.extension()), render(drawing, f)?)))
        .collect()
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

/// The caption font of every chart.
pub fn caption_font() -> FontDesc<'static> {
    ("sans-serif", 22).into_font().style(FontStyle::Bold)
}

/// Splits a line at its non-finite points into the pieces to draw.
fn segments(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    points
        .split(|p| !p.1.is_finite())
        .filter(|s| !s.is_empty())
        .map(<[_]>::to_vec)
        .collect()
}

/// One drawn axis: a linear span of positions (log10 of the values on a log axis) whose grid
/// lines and labels sit exactly at the model's ticks, not where plotters would put them.
struct TickedAxis {
    span: (f64, f64),
    ticks: Vec<f64>,
    minor: Vec<f64>,
}

impl TickedAxis {
    fn of(axis: &Axis, ticks: &[Tick]) -> TickedAxis {
        TickedAxis {
            span: axis.positions(),
            ticks: ticks.iter().map(|t| axis.position(t.value)).collect(),
            minor: axis
                .minor_ticks()
                .into_iter()
                .map(|v| axis.position(v))
                .collect(),
        }
    }
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, (from_px, to_px): (i32, i32)) -> i32 {
        let (lo, hi) = self.span;
        let fraction = (value - lo) / (hi - lo);
        let length_px = f64::from(to_px - from_px);
        // Rounded as plotters rounds its own linear axes, so lines land on the same pixels.
        let offset = match length_px >= 0.0 {
            true => (length_px * fraction + 1e-3).floor(),
            false => (length_px * fraction - 1e-3).ceil(),
        };
        from_px + offset.clamp(-1e6, 1e6) as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match hint.weight().allow_light_points() {
            true => self.minor.clone(),
            false => self.ticks.clone(),
        }
    }

    fn range(&self) -> Range<f64> {
        self.span.0..self.span.1
    }
}

/// The chart's coordinate system.
type Coords = Cartesian2d<TickedAxis, TickedAxis>;

impl Drawable for Chart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(plot_error)?;
        let (x_ticks, y_ticks) = (self.x.ticks(), self.y.ticks());
        let mut ctx = ChartBuilder::on(root)
            .caption(&self.title, caption_font())
            .margin(16)
            // Room for the last x tick's label, which is centred on the axis end.
            .margin_right(36)
            .x_label_area_size(52)
            .y_label_area_size(72)
            .build_cartesian_2d(
                TickedAxis::of(&self.x, &x_ticks),
                TickedAxis::of(&self.y, &y_ticks),
            )
            .map_err(plot_error)?;
        let x_format = |v: &f64| self.x.label_at(&x_ticks, *v);
        let y_format = |v: &f64| self.y.label_at(&y_ticks, *v);
        ctx.configure_mesh()
            .x_label_formatter(&x_format)
            .y_label_formatter(&y_format)
            .x_desc(self.x.label.as_str())
            .y_desc(self.y.label.as_str())
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .light_line_style(RGBColor(238, 238, 238))
            .bold_line_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(plot_error)?;
        self.draw_shading(&mut ctx)?;
        self.draw_bands(&mut ctx)?;
        // Measurements first, ideal lines on top so they stay visible where the two agree.
        let solid = self.series.iter().filter(|s| !s.dashed);
        for s in solid.chain(self.series.iter().filter(|s| s.dashed)) {
            self.draw_series(&mut ctx, s)?;
        }
        self.draw_references(&mut ctx)?;
        let position = match self.legend {
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
            .map_err(plot_error)
    }
}

impl Chart {
    /// A data point's position on the drawn axes.
    fn at(&self, (x, y): (f64, f64)) -> (f64, f64) {
        (self.x.position(x), self.y.position(y))
    }

    fn draw_shading<'a, DB: DrawingBackend + 'a>(
        &self,
        ctx: &mut ChartContext<'a, DB, Coords>,
    ) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        let (y0, y1) = self.y.positions();
        let x = |v: f64| self.x.position(v);
        for (i, shading) in self.shadings.iter().enumerate() {
            if shading.windows.is_empty() {
                continue;
            }
            let fill = SHADE_COLOURS[i % SHADE_COLOURS.len()].mix(0.18).filled();
            ctx.draw_series(
                shading
                    .windows
                    .iter()
                    .map(|&(a, b)| Rectangle::new([(x(a), y0), (x(b), y1)], fill)),
            )
            .map_err(plot_error)?
            .label(shading.label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 22, y + 6)], fill));
        }
        Ok(())
    }

    fn draw_bands<'a, DB: DrawingBackend + 'a>(
        &self,
        ctx: &mut ChartContext<'a, DB, Coords>,
    ) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        for s in &self.series {
            let Some(band) = &s.band else { continue };
            let outline: Vec<(f64, f64)> = band
                .iter()
                .map(|&(x, _, high)| self.at((x, high)))
                .chain(band.iter().rev().map(|&(x, low, _)| self.at((x, low))))
                .collect();
            let fill = class_colour(s.class).mix(0.2).filled();
            ctx.draw_series(std::iter::once(Polygon::new(outline, fill)))
                .map_err(plot_error)?;
        }
        Ok(())
    }

    fn draw_series<'a, DB: DrawingBackend + 'a>(
        &self,
        ctx: &mut ChartContext<'a, DB, Coords>,
        s: &Series,
    ) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        let style = if s.dashed {
            ideal_colour(s.class).stroke_width(2)
        } else {
            class_colour(s.class).stroke_width(3)
        };
        let points: Vec<(f64, f64)> = s.points.iter().map(|&p| self.at(p)).collect();
        for (i, piece) in segments(&points).into_iter().enumerate() {
            let drawn = if s.dashed {
                ctx.draw_series(DashedLineSeries::new(piece, 10, 6, style))
            } else {
                ctx.draw_series(LineSeries::new(piece, style))
            }
            .map_err(plot_error)?;
            // One legend entry per series, however many pieces it has.
            if i > 0 {
                continue;
            }
            let second_start = if s.dashed { 14 } else { 8 };
            drawn.label(s.label.as_str()).legend(move |(x, y)| {
                // A dashed line shows as two dashes, a solid one as one stroke.
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (8, 0)], style)
                    + PathElement::new(vec![(second_start, 0), (22, 0)], style)
            });
        }
        if s.markers {
            let fill = class_colour(s.class).filled();
            let dots = points.into_iter().filter(|p| p.1.is_finite());
            ctx.draw_series(dots.map(|p| Circle::new(p, 4, fill)))
                .map_err(plot_error)?;
        }
        Ok(())
    }

    fn draw_references<'a, DB: DrawingBackend + 'a>(
        &self,
        ctx: &mut ChartContext<'a, DB, Coords>,
    ) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        let (x0, x1) = self.x.positions();
        let (y0, y1) = self.y.positions();
        for (i, line) in self.references.iter().enumerate() {
            let colour = line.class.map_or(RGBColor(90, 90, 90), ideal_colour);
            let style = colour.stroke_width(2);
            // Labels of neighbouring lines are staggered so they don't overprint.
            let stagger = 8 + 20 * i as i32;
            let (ends, anchor, offset) = match line.direction {
                Direction::Vertical => {
                    let x = self.x.position(line.at);
                    // Near the right edge the text goes on the line's left.
                    let right = (x - x0) / (x1 - x0) > 0.6;
                    let (h, dx) = if right {
                        (HPos::Right, -6)
                    } else {
                        (HPos::Left, 6)
                    };
                    (
                        [(x, y0), (x, y1)],
                        (x, y1),
                        (Pos::new(h, VPos::Top), (dx, stagger)),
                    )
                }
                Direction::Horizontal => {
                    let y = self.y.position(line.at);
                    let top = (y - y0) / (y1 - y0) > 0.85;
                    let (v, dy) = if top {
                        (VPos::Top, 4)
                    } else {
                        (VPos::Bottom, -4)
                    };
                    let left = Pos::new(HPos::Left, v);
                    ([(x0, y), (x1, y)], (x0, y), (left, (6 + 12 * i as i32, dy)))
                }
            };
            ctx.draw_series(DashedLineSeries::new(ends, 4, 4, style))
                .map_err(plot_error)?;
            let font = ("sans-serif", 14).into_font().color(&colour).pos(offset.0);
            let text = EmptyElement::at(anchor) + Text::new(line.label.clone(), offset.1, font);
            ctx.draw_series(std::iter::once(text)).map_err(plot_error)?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Whether an SVG of plotters' draws `text` as one text element.
    pub(crate) fn svg_has_text(svg: &str, text: &str) -> bool {
        svg.contains(&format!(">\n{text}\n</text>"))
    }

    fn labels(axis: &Axis) -> Vec<String> {
        axis.ticks().into_iter().map(|t| t.label).collect()
    }

    #[test]
    fn log_axis_spans_whole_decades_with_decade_ticks() {
        let axis = Axis::log_over("ms", [30.0, 1200.0, 61_000.0, 0.0]);
        assert_eq!(axis.range, (10.0, 100_000.0), "zero is ignored");
        assert_eq!(labels(&axis), ["10", "100", "1000", "10000", "100000"]);
        assert_eq!(axis.position(1000.0), 3.0);
        assert_eq!(axis.position(-5.0), 1.0, "clamped to the lower end");
    }

    #[test]
    fn a_narrow_log_axis_adds_two_and_five_times() {
        let axis = Axis::log_over("ms", [120.0, 900.0]);
        assert_eq!(axis.range, (100.0, 1000.0));
        assert_eq!(labels(&axis), ["100", "200", "500", "1000"]);
        let small = Axis::log_over("ms", [0.02, 0.09]);
        assert_eq!(labels(&small), ["0.01", "0.02", "0.05", "0.1"]);
        let three_decades = Axis::log_over("ms", [0.02, 0.3]);
        assert_eq!(labels(&three_decades), ["0.01", "0.1", "1"]);
        assert_eq!(Axis::log_over("ms", []).range, (1.0, 10.0));
    }

    #[test]
    fn linear_ticks_are_round_steps() {
        assert_eq!(
            labels(&Axis::linear("share", (0.0, 1.0))),
            [
                "0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1.0"
            ]
        );
        assert_eq!(
            labels(&Axis::linear("n", (0.0, 672.0))),
            ["0", "100", "200", "300", "400", "500", "600"]
        );
        let around_zero = labels(&Axis::linear("x", (-1.0, 1.0)));
        assert_eq!(around_zero.len(), 11);
        assert_eq!(around_zero[5], "0.0", "never -0.0");
    }

    #[test]
    fn thinning_keeps_the_ends_and_breaks() {
        let mut points: Vec<(f64, f64)> = (0..10_001).map(|i| (i as f64, 0.0)).collect();
        points[5_001].1 = f64::NAN;
        let thinned = thin(points);
        assert!(thinned.len() <= MAX_POINTS_PER_SERIES + 4);
        assert_eq!(thinned[0], (0.0, 0.0));
        assert_eq!(*thinned.last().unwrap(), (10_000.0, 0.0));
        let at = thinned.iter().position(|p| p.1.is_nan()).unwrap();
        assert_eq!((thinned[at - 1].0, thinned[at + 1].0), (5_000.0, 5_002.0));
    }

    fn chart_with_reference() -> Chart {
        let mut chart = Chart::new(
            "t",
            "test",
            Axis::log_over("latency (ms)", [5.0, 60_000.0]),
            Axis::linear("fraction", (0.0, 1.0)),
            LegendCorner::LowerRight,
        );
        chart.series.push(Series::measured(
            "gold".into(),
            0,
            vec![(5.0, 0.0), (100.0, f64::NAN), (200.0, 0.5), (60_000.0, 1.0)],
        ));
        chart.references.push(ReferenceLine {
            direction: Direction::Vertical,
            at: 2500.0,
            label: "gold ttft p99 ≤ 2500 ms".into(),
            class: Some(0),
        });
        chart
    }

    #[test]
    fn svg_shows_log_ticks_and_labelled_reference_lines() {
        let chart = chart_with_reference();
        let svg = String::from_utf8(render(&chart, PlotFormat::Svg).unwrap()).unwrap();
        let has = |text| svg_has_text(&svg, text);
        assert!(has("gold ttft p99 ≤ 2500 ms"), "the label is drawn");
        for tick in ["1", "10", "100", "1000", "10000", "100000"] {
            assert!(has(tick), "tick {tick}");
        }
        assert!(!has("2500"), "only decades are labelled");
        let without = Chart {
            references: Vec::new(),
            ..chart
        };
        let svg = String::from_utf8(render(&without, PlotFormat::Svg).unwrap()).unwrap();
        assert!(!svg.contains("2500 ms"));
    }

    #[test]
    fn rendering_is_deterministic() {
        let chart = chart_with_reference();
        for format in PlotFormat::ALL {
            assert_eq!(
                render(&chart, format).unwrap(),
                render(&chart, format).unwrap()
            );
        }
    }
}
