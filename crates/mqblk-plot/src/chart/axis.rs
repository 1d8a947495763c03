//! Axes: the range that covers the data, the ticks and their labels, and
//! the corner the legend goes in.

use plotters::prelude::*;

use super::model::*;

/// The axis range covering `values` on `scale`, with a margin; linear
/// ranges of positive data start at 0.
pub(super) fn axis_range(values: impl Iterator<Item = f64>, scale: Scale) -> (f64, f64) {
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
pub(super) fn emptiest_corner(points: impl Iterator<Item = (f64, f64)>) -> SeriesLabelPosition {
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
pub(super) fn tick_label(a: f64, axis: &Axis) -> String {
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
pub(super) fn tick_count(axis: &Axis, lo: f64, hi: f64) -> usize {
    match axis.scale {
        Scale::Linear => 8,
        Scale::Log2 | Scale::Log10 | Scale::Nines => ((hi - lo).round() as usize + 1).clamp(2, 16),
    }
}
