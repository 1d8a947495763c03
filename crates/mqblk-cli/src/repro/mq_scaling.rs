//! `repro mq-scaling` (seed 004, the blk-mq design): IOPS against the
//! number of submitting threads on one null device, from 1 to the number
//! of cores and past it, in the three queue modes, with latency
//! percentiles. Each thread has its own context; the device has one
//! hardware queue per thread.

use std::time::Duration;

use anyhow::Result;

use super::iorl::MODES;
use super::outcome::Outcome;
use super::point::{cell, job, Runner};
use super::table::{SeedRow, Table};
use crate::bench::job::RwMode;
use crate::plot::chart::{format_value, Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const POINT_RUNTIME: Duration = Duration::from_millis(1000);

/// Thread counts: every count up to the cores (or powers of two past 8),
/// then one and a half and twice the cores.
pub fn thread_counts(cores: usize) -> Vec<u32> {
    let cores = cores.max(1) as u32;
    let mut v: Vec<u32> = if cores <= 8 {
        (1..=cores).collect()
    } else {
        let mut p: Vec<u32> = (0..)
            .map(|i| 1u32 << i)
            .take_while(|&n| n < cores)
            .collect();
        p.push(cores);
        p
    };
    v.push(cores + cores.div_ceil(2));
    v.push(cores * 2);
    v.sort_unstable();
    v.dedup();
    v
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let threads = thread_counts(r.cores());
    let mut t = Table::new(&[
        "queue_mode",
        "threads",
        "iops",
        "iops_min",
        "iops_max",
        "rounds",
        "iops_per_thread",
        "ns_per_io_cpu",
        "clat_p50_ns",
        "clat_p99_ns",
        "clat_p99_9_ns",
    ]);
    let mut plan = Vec::new();
    for mode in MODES {
        for &n in &threads {
            let mut j = job("mq", RwMode::RandRead, 4096, 32, r.runtime(POINT_RUNTIME));
            j.devices = vec!["null".into()];
            j.numjobs = n;
            j.queue_mode = Some(mode.into());
            j.hw_queues = Some(n as u16);
            plan.push((mode, n, format!("{mode}-{n}thr"), vec![j]));
        }
    }
    let labelled: Vec<_> = plan.iter().map(|p| (p.2.clone(), p.3.clone())).collect();
    let results = r.rounds(&labelled)?;
    let series = |suffix: &str| -> Vec<Series> {
        MODES
            .iter()
            .map(|m| Series {
                name: format!("{m}{suffix}"),
                points: Vec::new(),
            })
            .collect()
    };
    let mut iops_lines = series("");
    let mut p99_lines = series(" p99");
    let mut at: Vec<(&str, u32, f64)> = Vec::new();
    for ((mode, n, _, _), res) in plan.iter().zip(&results) {
        let f = &res.median;
        t.push(vec![
            mode.to_string(),
            n.to_string(),
            cell(f.iops, 0),
            cell(res.iops_min, 0),
            cell(res.iops_max, 0),
            res.rounds.to_string(),
            cell(f.iops / f64::from(*n), 0),
            cell(f.ns_per_io_cpu, 0),
            f.clat_ns[0].to_string(),
            f.clat_ns[1].to_string(),
            f.clat_ns[2].to_string(),
        ]);
        let m = MODES.iter().position(|x| x == mode).unwrap_or(0);
        iops_lines[m].points.push((f64::from(*n), f.iops));
        p99_lines[m]
            .points
            .push((f64::from(*n), f.clat_ns[1] as f64));
        at.push((mode, *n, f.iops));
    }
    let most = threads.last().copied().unwrap_or(1);
    let cores = r.cores() as u32;
    let iops = |mode: &str, n: u32| {
        at.iter()
            .find(|p| p.0 == mode && p.1 == n)
            .map_or(f64::NAN, |p| p.2)
    };
    let mut seed = vec![SeedRow::new(
        "blk-mq ÷ single queue, IOPS on the null driver",
        "3.5 to 10 (the blk-mq paper, DESIGN.md)",
        format!(
            "{} at {cores} threads, {} at {most} (mq ÷ device-lock)",
            cell(iops("mq", cores) / iops("device-lock", cores), 2),
            cell(iops("mq", most) / iops("device-lock", most), 2)
        ),
    )];
    seed.push(SeedRow::new(
        "IOPS on the null driver, many cores",
        "tens of millions (the blk-mq paper, DESIGN.md)",
        format!(
            "{} with mq at {cores} threads on {cores} cores",
            format_value(iops("mq", cores), Unit::Count)
        ),
    ));
    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "mq-scaling: IOPS against submitting threads (one null device)".into(),
                x: Axis::new("submitting threads", Scale::Linear, Unit::Count),
                y: Axis::new("I/Os per second, all threads", Scale::Linear, Unit::Count),
                series: iops_lines,
            }),
            Panel::Lines(LineChart {
                title: "mq-scaling: p99 completion latency against submitting threads".into(),
                x: Axis::new("submitting threads", Scale::Linear, Unit::Count),
                y: Axis::new("p99 completion latency (ns)", Scale::Log10, Unit::Nanos),
                series: p99_lines,
            }),
        ],
    };
    Ok(Outcome {
        points: t,
        seed,
        figure,
        notes: vec![
            format!(
                "Workload: rw=randread, bs=4k, iodepth=32 per thread, one null device with \
                 hw_queues = threads, {} ms per point, {} cores. Each point ran {} times, \
                 every point once per round; the table gives the median round (its IOPS \
                 and latencies) and the range of IOPS.",
                r.runtime(POINT_RUNTIME).as_millis(),
                r.cores(),
                super::point::ROUNDS
            ),
            "Run the same command on a machine with more cores to extend the curve.".into(),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_go_past_the_cores() {
        assert_eq!(thread_counts(1), vec![1, 2]);
        assert_eq!(thread_counts(2), vec![1, 2, 3, 4]);
        assert_eq!(thread_counts(16), vec![1, 2, 4, 8, 16, 24, 32]);
    }
}
