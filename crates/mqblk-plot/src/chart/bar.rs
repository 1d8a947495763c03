//! Drawing a grouped bar chart.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::axis::*;
use super::mark::*;
use super::model::*;
use super::theme::*;

pub(super) fn draw_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    c: &BarChart,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
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
