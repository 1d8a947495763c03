//! How charts look: sizes, colours, and the limits on labels, markers and
//! captions.

use plotters::prelude::*;

/// Line and bar colours (Okabe–Ito, readable by colour-blind readers).
pub(super) const COLOURS: [RGBColor; 8] = [
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
pub(super) const WIDTH_PX: u32 = 720;
pub(super) const PANEL_HEIGHT_PX: u32 = 400;
/// Each panel's height when panels are stacked.
pub(super) const STACKED_PANEL_HEIGHT_PX: u32 = 340;

/// Bar charts with at most this many bars have each value written above
/// its bar.
pub(super) const BAR_LABELS_MAX: usize = 12;

/// A line with more points than this is drawn without markers.
pub(super) const MARKERS_MAX: usize = 32;

/// Height of one caption line, in pixels.
pub(super) const CAPTION_LINE_PX: u32 = 18;

/// Characters of a caption line at most: what fits the figure's width at
/// the caption's size.
pub(super) const CAPTION_CHARS_MAX: usize = 96;

/// A line lies on an earlier one when every point is within this share of
/// the plot's width and height of the earlier line's point.
pub(super) const COINCIDE_SHARE: f64 = 0.01;

/// Height of one line of a line chart's legend, drawn under its plot.
pub(super) const LEGEND_ROW_PX: u32 = 18;

/// Half the width of an error bar's caps, in pixels.
pub(super) const CAP_PX: i32 = 4;

/// The seed's lines' colour.
pub(super) const SEED_COLOUR: RGBColor = RGBColor(0, 0, 0);
