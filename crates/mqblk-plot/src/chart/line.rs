//! Drawing a line chart: series, error bars, and lines that lie on
//! others.

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use super::axis::*;
use super::mark::*;
use super::model::*;
use super::theme::*;

/// The index of the first line before `i` that line `i` lies on, in
/// plot coordinates `pts` (each in 0..1 of the axes).
pub(super) fn covered_by(pts: &[Vec<(f64, f64)>], i: usize) -> Option<usize> {
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
pub(super) fn legend_px(c: &LineChart) -> u32 {
    if c.series.len() > 1 || c.series.first().is_some_and(|s| !s.name.is_empty()) {
        LEGEND_ROW_PX * c.series.len() as u32 + LEGEND_ROW_PX / 2
    } else {
        0
    }
}

pub(super) fn draw_lines<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    c: &LineChart,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
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
