//! The figure of a set of jobs: three panels (IOPS or bandwidth bars per
//! job and direction, the clat percentile curves, the latency histogram
//! re-binned from the log-linear buckets), and the one-line-per-job
//! summary printed beside it. Between the reports read (`input`) and the
//! drawing (`chart`).

use crate::chart::{self, Axis, BarChart, Bars, Figure, LineChart, Panel, Scale, Series, Unit};
use crate::input::{Direction, Job};

/// The bar panel's figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// I/Os per second.
    Iops,
    /// Bytes per second.
    Bw,
}

/// Latency histogram bins per decade (re-binned from the log-linear
/// buckets, so that each bin has the same width on the log axis).
const BINS_PER_DECADE: f64 = 20.0;

/// The jobs' figures, one line per job and direction.
pub fn summary(jobs: &[Job]) -> String {
    let mut s = String::new();
    for j in jobs {
        for d in j.directions() {
            let p99 = d
                .percentiles
                .iter()
                .find(|(p, _)| (*p - 99.0).abs() < 1e-9)
                .map_or("-".to_string(), |(_, v)| {
                    chart::format_value(*v, Unit::Nanos)
                });
            s.push_str(&format!(
                "{:<32} {:<5} IOPS={:<8} BW={:<12} p99={}\n",
                j.label,
                d.name,
                chart::format_value(d.iops, Unit::Count),
                format!("{}/s", chart::format_value(d.bw_bytes, Unit::Bytes)),
                p99
            ));
        }
    }
    s
}

/// The three panels for these jobs; a panel with nothing to show (no
/// percentiles, no buckets) is left out.
pub fn figure(jobs: &[Job], metric: Metric) -> Figure {
    let mut panels = Vec::new();
    let categories: Vec<String> = jobs.iter().map(|j| j.label.clone()).collect();
    let value = |d: &Direction| match metric {
        Metric::Iops => d.iops,
        Metric::Bw => d.bw_bytes,
    };
    let mut series = Vec::new();
    for name in ["read", "write"] {
        let values: Vec<f64> = jobs
            .iter()
            .map(|j| {
                j.directions()
                    .find(|d| d.name == name)
                    .map_or(f64::NAN, value)
            })
            .collect();
        if values.iter().any(|v| v.is_finite()) {
            series.push(Bars::new(name, values));
        }
    }
    let (title, y) = match metric {
        Metric::Iops => (
            "IOPS per job",
            Axis::new("I/Os per second", Scale::Linear, Unit::Count),
        ),
        Metric::Bw => (
            "Bandwidth per job",
            Axis::new("bandwidth (bytes/s)", Scale::Linear, Unit::Bytes),
        ),
    };
    panels.push(Panel::Bars(BarChart {
        title: title.into(),
        y,
        categories,
        series,
    }));

    let curves: Vec<Series> = jobs
        .iter()
        .flat_map(|j| {
            j.directions()
                .filter(|d| !d.percentiles.is_empty())
                .map(|d| Series {
                    points: d.percentiles.clone(),
                    ..Series::new(format!("{} {}", j.label, d.name))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if !curves.is_empty() {
        panels.push(Panel::Lines(LineChart {
            title: "Completion latency percentiles".into(),
            x: Axis::new("percentile (%)", Scale::Nines, Unit::Percent),
            y: Axis::new("completion latency", Scale::Log10, Unit::Nanos),
            series: curves,
        }));
    }

    let hists: Vec<Series> = jobs
        .iter()
        .flat_map(|j| {
            j.directions()
                .filter(|d| !d.bins.is_empty())
                .map(|d| Series {
                    points: rebin(&d.bins),
                    ..Series::new(format!("{} {}", j.label, d.name))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    if !hists.is_empty() {
        panels.push(Panel::Lines(LineChart {
            title: "Completion latency histogram (log-linear buckets)".into(),
            x: Axis::new("completion latency", Scale::Log10, Unit::Nanos),
            y: Axis::new("I/Os in bin (%)", Scale::Linear, Unit::Percent),
            series: hists,
        }));
    }
    Figure {
        panels,
        caption: Vec::new(),
    }
}

/// Log-linear buckets (value ns, count) into bins of equal width on a log
/// axis: (bin centre ns, percent of I/Os), every bin from the first to the
/// last non-empty one, so the curve drops to 0 between peaks.
pub fn rebin(bins: &[(f64, u64)]) -> Vec<(f64, f64)> {
    let total: u64 = bins.iter().map(|b| b.1).sum();
    if total == 0 {
        return Vec::new();
    }
    let index = |v: f64| (v.max(1.0).log10() * BINS_PER_DECADE).floor() as i64;
    let lo = bins.iter().map(|b| index(b.0)).min().unwrap_or(0);
    let hi = bins.iter().map(|b| index(b.0)).max().unwrap_or(0);
    let mut counts = vec![0u64; (hi - lo + 1) as usize];
    for &(v, c) in bins {
        counts[(index(v) - lo) as usize] += c;
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let centre = 10f64.powf((lo as f64 + i as f64 + 0.5) / BINS_PER_DECADE);
            (centre, c as f64 * 100.0 / total as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebinning_keeps_every_io() {
        let bins = [(100.0, 10), (101.0, 10), (1000.0, 80)];
        let r = rebin(&bins);
        let sum: f64 = r.iter().map(|p| p.1).sum();
        assert!((sum - 100.0).abs() < 1e-9);
        assert_eq!(r.len(), 21, "two decades apart, 20 bins per decade");
        assert!(r.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
