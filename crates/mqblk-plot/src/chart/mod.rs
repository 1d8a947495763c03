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
//!
//! By call order: [`Figure::render`] lays out the panels, [`line`] and
//! [`bar`] draw them with their [`axis`] and [`mark`]s, from the [`model`]
//! the caller built, in the look of [`theme`].

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

mod axis;
mod bar;
mod line;
mod mark;
mod model;
mod theme;

use bar::draw_bars;
use line::{draw_lines, legend_px};
pub use model::*;
use theme::*;

/// Fonts tried in order for every label; `MQBLK_FONT=PATH` is tried first.
/// Debian's `fonts-dejavu-core` provides the first.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// The largest font file loaded (at most one byte past it is read).
const FONT_BYTES_MAX: u64 = 64 << 20;

/// Register a system font as plotters' `sans-serif`, once per process.
fn ensure_font() -> Result<()> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let from_env = std::env::var_os("MQBLK_FONT").map(PathBuf::from);
        let candidates = from_env
            .into_iter()
            .chain(FONT_CANDIDATES.iter().map(PathBuf::from));
        for path in candidates {
            let Ok(bytes) = mqblk_core::input::read_capped(&path, "font", FONT_BYTES_MAX) else {
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
    .map_err(Error::Font)
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
            return Err(Error::NothingToPlot);
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
            root.present().map_err(|e| Error::Write {
                path: svg.clone(),
                reason: e.to_string(),
            })?;
        }
        {
            let root = BitMapBackend::new(&png, (WIDTH_PX, height)).into_drawing_area();
            self.draw(&root, panel_px)?;
            root.present().map_err(|e| Error::Write {
                path: png.clone(),
                reason: e.to_string(),
            })?;
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
        let draw_err = |what: &str, reason: String| Error::Draw {
            what: what.to_string(),
            reason,
        };
        root.fill(&WHITE)
            .map_err(|e| draw_err("the background", e.to_string()))?;
        let (_, height) = root.dim_in_pixel();
        let (plots, caption) = root.split_vertically(height - self.caption_px());
        for (i, line) in self.caption_lines().iter().enumerate() {
            caption
                .draw_text(
                    line,
                    &("sans-serif", 13).into_font().color(&BLACK),
                    (12, CAPTION_LINE_PX as i32 * i as i32 + 2),
                )
                .map_err(|e| draw_err("the caption", e.to_string()))?;
        }
        let mut rest = plots;
        for (panel, h) in self.panels.iter().zip(self.heights(panel_px)) {
            let (area, below) = rest.split_vertically(h);
            match panel {
                Panel::Lines(c) => draw_lines(&area, c),
                Panel::Bars(c) => draw_bars(&area, c),
            }
            .map_err(|reason| draw_err(&format!("{:?}", panel.title()), reason))?;
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

#[cfg(test)]
mod tests {
    use super::axis::{axis_range, tick_label};
    use super::line::covered_by;
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

    #[test]
    #[should_panic(expected = "its ticks carry the unit")]
    #[cfg(debug_assertions)]
    fn a_time_axis_label_with_a_unit_is_refused() {
        let _ = Axis::new("p99 latency (ns)", Scale::Log10, Unit::Nanos);
    }
}
