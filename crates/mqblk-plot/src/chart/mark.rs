//! What is drawn at a point: the marker shapes ours and the seed's series
//! are drawn with, and the error bars of a point's spread.

use plotters::coord::types::RangedCoordf64;
use plotters::element::{Drawable, PointCollection};
use plotters::prelude::*;
use plotters_backend::{BackendCoord, DrawingErrorKind};

use super::theme::*;

/// Marker shapes, one per measured line in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Marker {
    Circle,
    Square,
    Triangle,
    Cross,
}

pub(super) const MARKERS: [Marker; 4] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Cross,
];

/// Marker shapes of the seed's lines, in turn.
pub(super) const SEED_MARKERS: [Marker; 4] = [
    Marker::Cross,
    Marker::Triangle,
    Marker::Square,
    Marker::Circle,
];

/// A marker of some shape at a point (data or pixel coordinates), `r`
/// pixels wide each way: one element type for every shape.
pub(super) struct Mark<C> {
    pub(super) at: C,
    pub(super) shape: Marker,
    pub(super) r: i32,
    pub(super) style: ShapeStyle,
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

/// Error bars at (x, low, high) in axis coordinates: a vertical line with
/// a cap at each end.
pub(super) fn draw_error_bars<DB: DrawingBackend>(
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
