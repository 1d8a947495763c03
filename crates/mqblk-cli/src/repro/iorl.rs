//! `repro iorl` (seed 000 §5): Linux 2.4's `io_request_lock`, one lock over
//! every device's queue. Many null devices (1 to 32), one job on each, in
//! `global-lock` (the 2.4 lock), `device-lock` (one lock per device) and
//! `mq` (no shared lock): total IOPS against the number of devices and
//! jobs.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Runner};
use super::table::{SeedRow, Table, NOT_RECORDED};
use crate::bench::job::RwMode;
use crate::plot::chart::{Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const DEVICES: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// The queue modes, oldest design first.
pub const MODES: [&str; 3] = ["global-lock", "device-lock", "mq"];
const POINT_RUNTIME: Duration = Duration::from_millis(700);

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let mut t = Table::new(&[
        "queue_mode",
        "devices",
        "jobs",
        "iops",
        "iops_min",
        "iops_max",
        "rounds",
        "iops_per_job",
        "ns_per_io_cpu",
        "clat_p99_ns",
    ]);
    let mut plan = Vec::new();
    for mode in MODES {
        for n in DEVICES {
            let mut j = job("iorl", RwMode::RandRead, 4096, 8, r.runtime(POINT_RUNTIME));
            j.devices = vec!["null".to_string(); n as usize];
            j.numjobs = n;
            j.queue_mode = Some(mode.into());
            plan.push((mode, n, format!("{mode}-{n}dev"), vec![j]));
        }
    }
    let labelled: Vec<_> = plan.iter().map(|p| (p.2.clone(), p.3.clone())).collect();
    let results = r.rounds(&labelled)?;
    let mut lines: Vec<Series> = MODES
        .iter()
        .map(|m| Series {
            name: m.to_string(),
            points: Vec::new(),
        })
        .collect();
    let mut at: Vec<(&str, u32, f64)> = Vec::new();
    for ((mode, n, _, _), res) in plan.iter().zip(&results) {
        let f = &res.median;
        t.push(vec![
            mode.to_string(),
            n.to_string(),
            n.to_string(),
            cell(f.iops, 0),
            cell(res.iops_min, 0),
            cell(res.iops_max, 0),
            res.rounds.to_string(),
            cell(f.iops / f64::from(*n), 0),
            cell(f.ns_per_io_cpu, 0),
            f.clat_ns[1].to_string(),
        ]);
        if let Some(line) = lines.iter_mut().find(|l| l.name == *mode) {
            line.points.push((f64::from(*n), f.iops));
        }
        at.push((mode, *n, f.iops));
    }
    let iops = |mode: &str, n: u32| {
        at.iter()
            .find(|p| p.0 == mode && p.1 == n)
            .map_or(f64::NAN, |p| p.2)
    };
    let mut seed = Vec::new();
    for n in [1, 32] {
        for mode in MODES {
            seed.push(SeedRow::new(
                format!("{mode}, {n} device(s): IOPS"),
                NOT_RECORDED,
                crate::plot::chart::format_value(iops(mode, n), Unit::Count),
            ));
        }
    }
    seed.push(SeedRow::new(
        "mq ÷ global-lock at 32 devices",
        NOT_RECORDED,
        cell(iops("mq", 32) / iops("global-lock", 32), 2),
    ));
    let figure = Figure::one(Panel::Lines(LineChart {
        title: "iorl: total IOPS against devices (one job each)".into(),
        x: Axis::new("null devices = jobs", Scale::Log2, Unit::Count),
        y: Axis::new("I/Os per second, all jobs", Scale::Linear, Unit::Count),
        series: lines,
    }));
    Ok(Outcome {
        points: t,
        seed,
        figure,
        notes: vec![
            format!(
                "Workload: rw=randread, bs=4k, iodepth=8, one job per null device, {} ms per \
                 point, on {} cores: past that many jobs, threads share the cores. Each \
                 point ran {} times, every point once per round; the table gives the \
                 median round and the range.",
                r.runtime(POINT_RUNTIME).as_millis(),
                r.cores(),
                super::point::ROUNDS
            ),
            "Seed 000 §5's own figures are not recorded in this repository.".into(),
        ],
    })
}
