//! Drawing: line charts and grouped bar charts, written as SVG and PNG with
//! `plotters`. `mqblk repro` and `mqblk plot` describe a [`Figure`] (one
//! or more panels stacked vertically) and call [`Figure::render`].
//!
//! Axes are linear in the chart's own coordinates; a log axis is drawn by
//! plotting the logarithm and labelling the ticks with the value, so one
//! code path draws every scale.
//!
//! A point may carry its spread (the lowest and highest of the runs it is
//! the median of), drawn as an error bar. A line may be a seed's figure,
//! drawn black and dashed with crosses, so that ours and the seed's are
//! told apart at a glance. A line that lies on an earlier one (every point
//! within 1% of the plot's width and height) is drawn dashed with hollow
//! markers of another shape, and its legend entry says which line it
//! covers, so no series is hidden. A figure may end with caption lines
//! (where the seed's figures come from).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context as _, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::{DashedPathElement, Drawable, PointCollection};
use plotters::prelude::*;
use plotters_backend::{BackendCoord, DrawingErrorKind};

/// Fonts tried in order for every label; `MQBLK_FONT=PATH` is tried first.
/// Debian's `fonts-dejavu-core` provides the first.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Line and bar colours (Okabe–Ito, readable by colour-blind readers).
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
    RGBColor(0, 0, 0),
];

/// A figure's width and each panel's height, in pixels.
const WIDTH_PX: u32 = 720;
const PANEL_HEIGHT_PX: u32 = 400;
/// Each panel's height when panels are stacked.
const STACKED_PANEL_HEIGHT_PX: u32 = 340;

/// Bar charts with at most this many bars have each value written above
/// its bar.
const BAR_LABELS_MAX: usize = 12;

/// A line with more points than this is drawn without markers.
const MARKERS_MAX: usize = 32;

/// Height of one caption line, in pixels.
const CAPTION_LINE_PX: u32 = 18;

/// Characters of a caption line at most: what fits the figure's width at
/// the caption's size.
const CAPTION_CHARS_MAX: usize = 96;

/// A line lies on an earlier one when every point is within this share of
/// the plot's width and height of the earlier line's point.
const COINCIDE_SHARE: f64 = 0.01;

/// Height of one line of a line chart's legend, drawn under its plot.
const LEGEND_ROW_PX: u32 = 18;

/// Half the width of an error bar's caps, in pixels.
const CAP_PX: i32 = 4;

/// The seed's lines' colour.
const SEED_COLOUR: RGBColor = RGBColor(0, 0, 0);

/// Register a system font as plotters' `sans-serif`, once per process.
fn ensure_font() -> Result<()> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let from_env = std::env::var_os("MQBLK_FONT").map(PathBuf::from);
        let candidates = from_env
            .into_iter()
            .chain(FONT_CANDIDATES.iter().map(PathBuf::from));
        for path in candidates {
            let Ok(bytes) = mqblk::input::read_capped(&path, "font", mqblk::input::FONT_BYTES_MAX)
            else {
                continue;
            };
            // The font table keeps a 'static reference for the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Ok(());
            }
        }
        Err(format!(
            "no font for the plot labels: install a TrueType font (Debian: apt-get install \
             fonts-dejavu-core) or name one with MQBLK_FONT=PATH; tried {}",
            FONT_CANDIDATES.join(", ")
        ))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// How an axis maps values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// Values as they are, starting at 0 for positive data.
    Linear,
    /// Powers of two are equally spaced (thread counts, segment counts).
    Log2,
    /// Powers of ten are equally spaced (latencies).
    Log10,
    /// Percentiles by their nines: 0, 90, 99, 99.9 and 99.99 are equally
    /// spaced, so the tail is as wide as the body.
    Nines,
}

impl Scale {
    fn to_axis(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log2 => v.log2(),
            Scale::Log10 => v.log10(),
            Scale::Nines => -(1.0 - v / 100.0).log10(),
        }
    }

    fn value_at(self, a: f64) -> f64 {
        match self {
            Scale::Linear => a,
            Scale::Log2 => a.exp2(),
            Scale::Log10 => 10f64.powf(a),
            Scale::Nines => 100.0 * (1.0 - 10f64.powf(-a)),
        }
    }

    /// Whether a value can be drawn on this scale.
    fn takes(self, v: f64) -> bool {
        match self {
            Scale::Linear => v.is_finite(),
            Scale::Log2 | Scale::Log10 => v.is_finite() && v > 0.0,
            Scale::Nines => (0.0..100.0).contains(&v),
        }
    }
}

/// What the numbers on an axis are, for their tick labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Plain counts: 1.2k, 3.4M.
    Count,
    /// Nanoseconds: 850 ns, 12 µs, 3.1 ms.
    Nanos,
    /// Bytes: 512 B, 64 KiB.
    Bytes,
    /// Percent: 99.9.
    Percent,
}

/// A tick label for `v` in `unit`.
pub fn format_value(v: f64, unit: Unit) -> String {
    fn trim(x: f64) -> String {
        let s = if x.abs() >= 100.0 || x == x.trunc() {
            format!("{x:.0}")
        } else if x.abs() >= 10.0 {
            format!("{x:.1}")
        } else {
            format!("{x:.2}")
        };
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
    let a = v.abs();
    match unit {
        Unit::Count => {
            if a >= 1e9 {
                format!("{}G", trim(v / 1e9))
            } else if a >= 1e6 {
                format!("{}M", trim(v / 1e6))
            } else if a >= 1e4 {
                format!("{}k", trim(v / 1e3))
            } else {
                trim(v)
            }
        }
        Unit::Nanos => {
            if a >= 1e9 {
                format!("{} s", trim(v / 1e9))
            } else if a >= 1e6 {
                format!("{} ms", trim(v / 1e6))
            } else if a >= 1e3 {
                format!("{} µs", trim(v / 1e3))
            } else {
                format!("{} ns", trim(v))
            }
        }
        Unit::Bytes => {
            if a >= (1u64 << 30) as f64 {
                format!("{} GiB", trim(v / (1u64 << 30) as f64))
            } else if a >= (1u64 << 20) as f64 {
                format!("{} MiB", trim(v / (1u64 << 20) as f64))
            } else if a >= 1024.0 {
                format!("{} KiB", trim(v / 1024.0))
            } else {
                format!("{} B", trim(v))
            }
        }
        Unit::Percent => {
            let s = format!("{v:.4}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    }
}

/// How a line is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Style {
    /// A measured line: a colour of its own, solid, with markers.
    #[default]
    Ours,
    /// A seed's figure: black, dashed, with crosses.
    Seed,
}

/// One named line of (x, y) points.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// The legend's name.
    pub name: String,
    /// Points; a NaN y is a gap.
    pub points: Vec<(f64, f64)>,
    /// The (lowest, highest) y of each point's runs, drawn as error bars;
    /// empty when the points have no spread.
    pub spread: Vec<(f64, f64)>,
    /// How it is drawn.
    pub style: Style,
}

impl Series {
    /// An empty measured line.
    pub fn new(name: impl Into<String>) -> Series {
        Series {
            name: name.into(),
            ..Series::default()
        }
    }

    /// A seed's figure as a line (or lone points).
    pub fn seed(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            style: Style::Seed,
            ..Series::default()
        }
    }

    /// Add a point, the median `y` of runs that ranged over `low..=high`.
    pub fn push_spread(&mut self, x: f64, y: f64, low: f64, high: f64) {
        debug_assert_eq!(self.spread.len(), self.points.len());
        self.points.push((x, y));
        self.spread.push((low, high));
    }
}

/// An axis: its description (with the unit), scale and tick unit.
#[derive(Clone, Debug)]
pub struct Axis {
    /// Description, with the unit: `I/O per second`, `latency (ns)`.
    pub label: String,
    /// Scale.
    pub scale: Scale,
    /// Tick label unit.
    pub unit: Unit,
}

impl Axis {
    /// An axis.
    pub fn new(label: impl Into<String>, scale: Scale, unit: Unit) -> Axis {
        Axis {
            label: label.into(),
            scale,
            unit,
        }
    }
}

/// Lines against a common x axis.
#[derive(Clone, Debug)]
pub struct LineChart {
    /// Title, above the plot.
    pub title: String,
    /// The x axis.
    pub x: Axis,
    /// The y axis.
    pub y: Axis,
    /// The lines.
    pub series: Vec<Series>,
}

/// One set of bars, a value per category.
#[derive(Clone, Debug, Default)]
pub struct Bars {
    /// The legend's name.
    pub name: String,
    /// One value per category; NaN: no bar.
    pub values: Vec<f64>,
    /// The (lowest, highest) of each value's runs, drawn as error bars;
    /// empty when the values have no spread.
    pub spread: Vec<(f64, f64)>,
}

impl Bars {
    /// Bars with no spread.
    pub fn new(name: impl Into<String>, values: Vec<f64>) -> Bars {
        Bars {
            name: name.into(),
            values,
            spread: Vec::new(),
        }
    }
}

/// Bars per category, one bar per series in each category.
#[derive(Clone, Debug)]
pub struct BarChart {
    /// Title, above the plot.
    pub title: String,
    /// The value axis (linear or log).
    pub y: Axis,
    /// Category names along the x axis.
    pub categories: Vec<String>,
    /// The bars, one set per legend entry.
    pub series: Vec<Bars>,
}

/// One panel of a figure.
#[derive(Clone, Debug)]
pub enum Panel {
    /// A line chart.
    Lines(LineChart),
    /// A bar chart.
    Bars(BarChart),
}

impl Panel {
    /// The panel's title.
    pub fn title(&self) -> &str {
        match self {
            Panel::Lines(c) => &c.title,
            Panel::Bars(c) => &c.title,
        }
    }
}

/// Panels stacked vertically, rendered to SVG and PNG.
#[derive(Clone, Debug, Default)]
pub struct Figure {
    /// Panels, top to bottom.
    pub panels: Vec<Panel>,
    /// Lines written under the panels: where the seed's figures come from.
    pub caption: Vec<String>,
}

impl Figure {
    /// Write `stem.svg` and `stem.png`; returns both paths.
    pub fn render(&self, stem: &Path) -> Result<(PathBuf, PathBuf)> {
        if self.panels.is_empty() {
            bail!("nothing to plot");
        }
        ensure_font()?;
        let panel_px = if self.panels.len() == 1 {
            PANEL_HEIGHT_PX
        } else {
            STACKED_PANEL_HEIGHT_PX
        };
        let height = self.heights(panel_px).iter().sum::<u32>() + self.caption_px();
        let svg = stem.with_extension("svg");
        let png = stem.with_extension("png");
        {
            let root = SVGBackend::new(&svg, (WIDTH_PX, height)).into_drawing_area();
            self.draw(&root, panel_px)?;
            root.present()
                .map_err(|e| anyhow!("writing {}: {e}", svg.display()))?;
        }
        {
            let root = BitMapBackend::new(&png, (WIDTH_PX, height)).into_drawing_area();
            self.draw(&root, panel_px)?;
            root.present()
                .map_err(|e| anyhow!("writing {}: {e}", png.display()))?;
        }
        Ok((svg, png))
    }

    /// The caption's lines, wrapped to the figure's width.
    fn caption_lines(&self) -> Vec<String> {
        self.caption
            .iter()
            .flat_map(|l| wrap(l, CAPTION_CHARS_MAX))
            .collect()
    }

    /// Height of the caption under the panels.
    fn caption_px(&self) -> u32 {
        let n = self.caption_lines().len() as u32;
        if n == 0 {
            0
        } else {
            CAPTION_LINE_PX * n + CAPTION_LINE_PX / 2
        }
    }

    /// Each panel's height: the plot, and a line chart's legend under it.
    fn heights(&self, panel_px: u32) -> Vec<u32> {
        self.panels
            .iter()
            .map(|p| match p {
                Panel::Lines(c) => panel_px + legend_px(c),
                Panel::Bars(_) => panel_px,
            })
            .collect()
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, panel_px: u32) -> Result<()> {
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let (_, height) = root.dim_in_pixel();
        let (plots, caption) = root.split_vertically(height - self.caption_px());
        for (i, line) in self.caption_lines().iter().enumerate() {
            caption
                .draw_text(
                    line,
                    &("sans-serif", 13).into_font().color(&BLACK),
                    (12, CAPTION_LINE_PX as i32 * i as i32 + 2),
                )
                .map_err(|e| anyhow!("{e}"))?;
        }
        let mut rest = plots;
        for (panel, h) in self.panels.iter().zip(self.heights(panel_px)) {
            let (area, below) = rest.split_vertically(h);
            match panel {
                Panel::Lines(c) => draw_lines(&area, c),
                Panel::Bars(c) => draw_bars(&area, c),
            }
            .with_context(|| format!("drawing {:?}", panel.title()))?;
            rest = below;
        }
        Ok(())
    }
}

/// `text` cut into lines of at most `max` characters, at spaces (a word
/// longer than `max` gets a line of its own).
fn wrap(text: &str, max: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The axis range covering `values` on `scale`, with a margin; linear
/// ranges of positive data start at 0.
fn axis_range(values: impl Iterator<Item = f64>, scale: Scale) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in values.filter(|&v| scale.takes(v)) {
        let a = scale.to_axis(v);
        lo = lo.min(a);
        hi = hi.max(a);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    match scale {
        Scale::Linear => {
            let lo = lo.min(0.0);
            let hi = if hi <= lo { lo + 1.0 } else { hi };
            (lo, hi + (hi - lo) * 0.08)
        }
        Scale::Log2 | Scale::Log10 | Scale::Nines => {
            let (lo, hi) = (lo.floor(), hi.ceil());
            if hi <= lo {
                (lo - 0.5, hi + 0.5)
            } else {
                (lo - 0.15, hi + 0.15)
            }
        }
    }
}

/// The corner of the plot with the fewest data points near it, for the
/// legend; `points` are in 0..1 of each axis (y up).
fn emptiest_corner(points: impl Iterator<Item = (f64, f64)>) -> SeriesLabelPosition {
    let corners = [
        (SeriesLabelPosition::UpperLeft, false, true),
        (SeriesLabelPosition::UpperRight, true, true),
        (SeriesLabelPosition::LowerRight, true, false),
        (SeriesLabelPosition::LowerLeft, false, false),
    ];
    let mut near = [0usize; 4];
    for (x, y) in points {
        for (i, &(_, right, upper)) in corners.iter().enumerate() {
            // About where a legend of a few lines sits.
            let in_x = if right { x > 0.6 } else { x < 0.4 };
            let in_y = if upper { y > 0.7 } else { y < 0.3 };
            if in_x && in_y {
                near[i] += 1;
            }
        }
    }
    let best = (0..4).min_by_key(|&i| near[i]).unwrap_or(0);
    corners[best].0.clone()
}

/// Tick label at axis coordinate `a`: every label on a linear axis, and
/// only whole powers on a log axis.
fn tick_label(a: f64, axis: &Axis) -> String {
    match axis.scale {
        Scale::Linear => format_value(a, axis.unit),
        Scale::Log2 | Scale::Log10 | Scale::Nines => {
            if (a - a.round()).abs() < 1e-6 {
                format_value(axis.scale.value_at(a.round()), axis.unit)
            } else {
                String::new()
            }
        }
    }
}

/// How many ticks a log axis spanning `lo..hi` gets: one per whole power,
/// so that plotters picks the integers.
fn tick_count(axis: &Axis, lo: f64, hi: f64) -> usize {
    match axis.scale {
        Scale::Linear => 8,
        Scale::Log2 | Scale::Log10 | Scale::Nines => ((hi - lo).round() as usize + 1).clamp(2, 16),
    }
}

/// Marker shapes, one per measured line in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Marker {
    Circle,
    Square,
    Triangle,
    Cross,
}

const MARKERS: [Marker; 4] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Cross,
];

/// Marker shapes of the seed's lines, in turn.
const SEED_MARKERS: [Marker; 4] = [
    Marker::Cross,
    Marker::Triangle,
    Marker::Square,
    Marker::Circle,
];

/// A marker of some shape at a point (data or pixel coordinates), `r`
/// pixels wide each way: one element type for every shape.
struct Mark<C> {
    at: C,
    shape: Marker,
    r: i32,
    style: ShapeStyle,
}

impl<'a, C> PointCollection<'a, C> for &'a Mark<C> {
    type Point = &'a C;
    type IntoIter = std::iter::Once<&'a C>;
    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.at)
    }
}

impl<C, DB: DrawingBackend> Drawable<DB> for Mark<C> {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        mut pos: I,
        backend: &mut DB,
        _: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let Some((x, y)) = pos.next() else {
            return Ok(());
        };
        let (r, st, fill) = (self.r, &self.style, self.style.filled);
        match self.shape {
            Marker::Circle => backend.draw_circle((x, y), r as u32, st, fill),
            Marker::Square => backend.draw_rect((x - r, y - r), (x + r, y + r), st, fill),
            Marker::Triangle => {
                let corners = [(x, y - r - 1), (x - r - 1, y + r), (x + r + 1, y + r)];
                if fill {
                    backend.fill_polygon(corners, st)
                } else {
                    backend.draw_path(corners.into_iter().chain([corners[0]]), st)
                }
            }
            Marker::Cross => {
                backend.draw_line((x - r, y - r), (x + r, y + r), st)?;
                backend.draw_line((x - r, y + r), (x + r, y - r), st)
            }
        }
    }
}

/// The index of the first line before `i` that line `i` lies on, in
/// plot coordinates `pts` (each in 0..1 of the axes).
fn covered_by(pts: &[Vec<(f64, f64)>], i: usize) -> Option<usize> {
    let mine = &pts[i];
    if mine.is_empty() {
        return None;
    }
    (0..i).find(|&j| {
        pts[j].len() == mine.len()
            && pts[j].iter().zip(mine).all(|(a, b)| {
                (a.0 - b.0).abs() <= COINCIDE_SHARE && (a.1 - b.1).abs() <= COINCIDE_SHARE
            })
    })
}

/// Height of a line chart's legend: a row per line, none for one
/// unnamed line.
fn legend_px(c: &LineChart) -> u32 {
    if c.series.len() > 1 || c.series.first().is_some_and(|s| !s.name.is_empty()) {
        LEGEND_ROW_PX * c.series.len() as u32 + LEGEND_ROW_PX / 2
    } else {
        0
    }
}

/// Error bars at (x, low, high) in axis coordinates: a vertical line with
/// a cap at each end.
fn draw_error_bars<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    ranges: &[(f64, f64, f64)],
    style: ShapeStyle,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart.draw_series(
        ranges
            .iter()
            .map(|&(x, lo, hi)| PathElement::new(vec![(x, lo), (x, hi)], style)),
    )?;
    chart.draw_series(ranges.iter().flat_map(|&(x, lo, hi)| {
        [lo, hi].map(|y| {
            EmptyElement::at((x, y)) + PathElement::new(vec![(-CAP_PX, 0), (CAP_PX, 0)], style)
        })
    }))?;
    Ok(())
}

fn draw_lines<DB: DrawingBackend>(panel: &DrawingArea<DB, Shift>, c: &LineChart) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e}");
    // The legend goes under the plot, a row per line, so that it never
    // hides a line however long the names are.
    let (_, panel_h) = panel.dim_in_pixel();
    let (area, legend) = panel.split_vertically(panel_h - legend_px(c));
    let area = &area;
    let (x0, x1) = axis_range(
        c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)),
        c.x.scale,
    );
    let (y0, y1) = axis_range(
        c.series.iter().flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.1)
                .chain(s.spread.iter().flat_map(|r| [r.0, r.1]))
        }),
        c.y.scale,
    );
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(err)?;
    let xf = |a: &f64| tick_label(*a, &c.x);
    let yf = |a: &f64| tick_label(*a, &c.y);
    chart
        .configure_mesh()
        .x_desc(c.x.label.as_str())
        .y_desc(c.y.label.as_str())
        .x_labels(tick_count(&c.x, x0, x1))
        .y_labels(tick_count(&c.y, y0, y1))
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;
    let drawable = |s: &Series| -> Vec<(usize, (f64, f64))> {
        s.points
            .iter()
            .enumerate()
            .filter(|(_, (x, y))| c.x.scale.takes(*x) && c.y.scale.takes(*y))
            .map(|(k, &(x, y))| (k, (c.x.scale.to_axis(x), c.y.scale.to_axis(y))))
            .collect()
    };
    let share: Vec<Vec<(f64, f64)>> = c
        .series
        .iter()
        .map(|s| {
            drawable(s)
                .iter()
                .map(|&(_, (x, y))| ((x - x0) / (x1 - x0), (y - y0) / (y1 - y0)))
                .collect()
        })
        .collect();
    let (mut ours, mut seeds) = (0usize, 0usize);
    for (i, s) in c.series.iter().enumerate() {
        let seed = s.style == Style::Seed;
        let (colour, shape) = if seed {
            seeds += 1;
            (SEED_COLOUR, SEED_MARKERS[(seeds - 1) % SEED_MARKERS.len()])
        } else {
            ours += 1;
            (
                COLOURS[(ours - 1) % COLOURS.len()],
                MARKERS[(ours - 1) % MARKERS.len()],
            )
        };
        let covers = covered_by(&share, i);
        let dashed = seed || covers.is_some();
        let name = match covers {
            // A seed's line is dashed with its own marker already.
            Some(j) if !seed => format!("{}: on the line of {}", s.name, c.series[j].name),
            _ => s.name.clone(),
        };
        let indexed = drawable(s);
        let pts: Vec<(f64, f64)> = indexed.iter().map(|p| p.1).collect();
        let line = colour.stroke_width(2);
        // A line on another's has hollow, larger markers of its own shape.
        let (r, marker_style) = if covers.is_some() {
            (5, colour.stroke_width(2))
        } else if seed {
            (5, colour.filled())
        } else {
            (3, colour.filled())
        };
        if dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 9, 6, line))
                .map_err(err)?;
        } else {
            chart
                .draw_series(LineSeries::new(pts.clone(), line))
                .map_err(err)?;
        }
        // The legend row: the line, its marker and its name.
        if legend_px(c) > 0 {
            let y = (LEGEND_ROW_PX * i as u32 + LEGEND_ROW_PX / 2) as i32 + 4;
            let x = 84;
            if dashed {
                legend
                    .draw(&DashedPathElement::new(
                        vec![(x, y), (x + 26, y)],
                        6,
                        4,
                        colour.stroke_width(2),
                    ))
                    .map_err(err)?;
            } else {
                legend
                    .draw(&PathElement::new(
                        vec![(x, y), (x + 26, y)],
                        colour.stroke_width(2),
                    ))
                    .map_err(err)?;
            }
            legend
                .draw(&Mark {
                    at: (x + 13, y),
                    shape,
                    r,
                    style: marker_style,
                })
                .map_err(err)?;
            legend
                .draw_text(
                    &name,
                    &("sans-serif", 13).into_font().color(&BLACK),
                    (x + 34, y - 7),
                )
                .map_err(err)?;
        }
        // Error bars: the range of each point's runs.
        if !s.spread.is_empty() {
            debug_assert_eq!(s.spread.len(), s.points.len());
            let ranges: Vec<(f64, f64, f64)> = indexed
                .iter()
                .filter_map(|&(k, (x, _))| {
                    let (lo, hi) = *s.spread.get(k)?;
                    (c.y.scale.takes(lo) && c.y.scale.takes(hi))
                        .then(|| (x, c.y.scale.to_axis(lo), c.y.scale.to_axis(hi)))
                })
                .collect();
            draw_error_bars(&mut chart, &ranges, colour.stroke_width(1)).map_err(err)?;
        }
        // Markers only where the points are few enough to tell apart.
        if pts.len() <= MARKERS_MAX {
            chart
                .draw_series(pts.iter().map(|&p| Mark {
                    at: p,
                    shape,
                    r,
                    style: marker_style,
                }))
                .map_err(err)?;
        }
    }
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, c: &BarChart) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e}");
    let n = c.categories.len().max(1);
    let (y0, y1) = axis_range(
        c.series.iter().flat_map(|s| {
            s.values
                .iter()
                .copied()
                .chain(s.spread.iter().flat_map(|r| [r.0, r.1]))
        }),
        c.y.scale,
    );
    // Category i is centred on x = i, so the integer ticks label them.
    let mut chart = ChartBuilder::on(area)
        .caption(&c.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), y0..y1)
        .map_err(err)?;
    let xf = |a: &f64| {
        let i = a.round();
        if (a - i).abs() < 1e-6 && i >= 0.0 {
            c.categories.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let yf = |a: &f64| tick_label(*a, &c.y);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(c.y.label.as_str())
        .x_labels(n + 1)
        .y_labels(tick_count(&c.y, y0, y1))
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;
    let groups = c.series.len().max(1) as f64;
    let width = 0.8 / groups;
    for (si, bars_of) in c.series.iter().enumerate() {
        let (name, values) = (&bars_of.name, &bars_of.values);
        let colour = COLOURS[si % COLOURS.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = values
            .iter()
            .enumerate()
            .filter(|(_, v)| c.y.scale.takes(**v))
            .map(|(ci, &v)| {
                let left = ci as f64 - 0.4 + si as f64 * width;
                let base = match c.y.scale {
                    Scale::Linear => 0.0,
                    _ => y0,
                };
                Rectangle::new(
                    [(left, base), (left + width * 0.92, c.y.scale.to_axis(v))],
                    colour.filled(),
                )
            })
            .collect();
        // Each bar's value above it, when the bars are few enough to read.
        if c.categories.len() * c.series.len() <= BAR_LABELS_MAX {
            let unit = c.y.unit;
            let labels = values
                .iter()
                .enumerate()
                .filter(|(_, v)| c.y.scale.takes(**v))
                .map(|(ci, &v)| {
                    let centre = ci as f64 - 0.4 + (si as f64 + 0.46) * width;
                    EmptyElement::at((centre, c.y.scale.to_axis(v)))
                        + Text::new(
                            format_value(v, unit),
                            (-14, -16),
                            ("sans-serif", 12).into_font(),
                        )
                });
            chart.draw_series(labels).map_err(err)?;
        }
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
        // Error bars in black over the bar: the range of its runs.
        if !bars_of.spread.is_empty() {
            debug_assert_eq!(bars_of.spread.len(), values.len());
            let ranges: Vec<(f64, f64, f64)> = bars_of
                .spread
                .iter()
                .enumerate()
                .filter(|(_, r)| c.y.scale.takes(r.0) && c.y.scale.takes(r.1))
                .map(|(ci, &(lo, hi))| {
                    (
                        ci as f64 - 0.4 + (si as f64 + 0.46) * width,
                        c.y.scale.to_axis(lo),
                        c.y.scale.to_axis(hi),
                    )
                })
                .collect();
            draw_error_bars(&mut chart, &ranges, BLACK.stroke_width(1)).map_err(err)?;
        }
    }
    if c.series.len() > 1 {
        // A bar covers everything below its top.
        let tops = c.series.iter().enumerate().flat_map(|(si, b)| {
            b.values.iter().enumerate().flat_map(move |(ci, &v)| {
                let x = (ci as f64 - 0.4 + (si as f64 + 0.5) * width + 0.5) / n as f64;
                let top = if c.y.scale.takes(v) {
                    (c.y.scale.to_axis(v) - y0) / (y1 - y0)
                } else {
                    0.0
                };
                (0..=10).map(move |k| (x, top * f64::from(k) / 10.0))
            })
        });
        chart
            .configure_series_labels()
            .position(emptiest_corner(tops))
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_with_their_units() {
        assert_eq!(format_value(1_500_000.0, Unit::Count), "1.5M");
        assert_eq!(format_value(850.0, Unit::Nanos), "850 ns");
        assert_eq!(format_value(12_000.0, Unit::Nanos), "12 µs");
        assert_eq!(format_value(65536.0, Unit::Bytes), "64 KiB");
        assert_eq!(format_value(8792.0, Unit::Bytes), "8.59 KiB");
        assert_eq!(format_value(0.0, Unit::Count), "0");
    }

    #[test]
    fn captions_wrap_at_spaces() {
        assert_eq!(wrap("ab cd ef", 5), vec!["ab cd", "ef"]);
        assert_eq!(wrap("abcdefg hi", 5), vec!["abcdefg", "hi"]);
        assert!(wrap("", 5).is_empty());
    }

    #[test]
    fn a_line_on_another_is_found() {
        let a = vec![(0.0, 0.0), (0.5, 0.5)];
        let on_a = vec![(0.0, 0.005), (0.5, 0.505)];
        let apart = vec![(0.0, 0.2), (0.5, 0.5)];
        let lines = [a, on_a, apart, Vec::new()];
        assert_eq!(covered_by(&lines, 0), None);
        assert_eq!(covered_by(&lines, 1), Some(0));
        assert_eq!(covered_by(&lines, 2), None);
        assert_eq!(covered_by(&lines, 3), None, "an empty line covers nothing");
    }

    #[test]
    fn log_ticks_are_whole_powers() {
        let a = Axis::new("threads", Scale::Log2, Unit::Count);
        assert_eq!(tick_label(3.0, &a), "8");
        assert_eq!(tick_label(2.5, &a), "");
        let (lo, hi) = axis_range([1.0, 64.0].into_iter(), Scale::Log2);
        assert!(lo < 0.0 && hi > 6.0);
        let (lo, _) = axis_range([5.0, 7.0].into_iter(), Scale::Linear);
        assert_eq!(lo, 0.0);
    }
}
