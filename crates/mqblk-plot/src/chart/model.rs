//! What a chart shows, as `mqblk repro` and `mqblk plot` describe it:
//! scales, units, series, axes, line and bar charts and their panels.

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
    pub(super) fn to_axis(self, v: f64) -> f64 {
        match self {
            Scale::Linear => v,
            Scale::Log2 => v.log2(),
            Scale::Log10 => v.log10(),
            Scale::Nines => -(1.0 - v / 100.0).log10(),
        }
    }

    pub(super) fn value_at(self, a: f64) -> f64 {
        match self {
            Scale::Linear => a,
            Scale::Log2 => a.exp2(),
            Scale::Log10 => 10f64.powf(a),
            Scale::Nines => 100.0 * (1.0 - 10f64.powf(-a)),
        }
    }

    /// Whether a value can be drawn on this scale.
    pub(super) fn takes(self, v: f64) -> bool {
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
    pub(super) fn trim(x: f64) -> String {
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
    /// Description: `I/O per second`, `completion latency` (a time axis's
    /// ticks carry their unit).
    pub label: String,
    /// Scale.
    pub scale: Scale,
    /// Tick label unit.
    pub unit: Unit,
}

impl Axis {
    /// An axis. A time axis's label names no unit: its ticks carry
    /// theirs (850 ns, 12 µs), and a `(ns)` beside µs ticks misleads.
    pub fn new(label: impl Into<String>, scale: Scale, unit: Unit) -> Axis {
        let label = label.into();
        debug_assert!(
            unit != Unit::Nanos || !label.contains("(ns)"),
            "axis `{label}`: its ticks carry the unit"
        );
        Axis { label, scale, unit }
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
