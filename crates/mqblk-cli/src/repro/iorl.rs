//! `repro iorl` (seed 000 §5): Linux 2.4's `io_request_lock`, one lock over
//! every device's queue. Many null devices (1 to 32), one job on each, in
//! `global-lock` (the 2.4 lock), `device-lock` (one lock per device) and
//! `mq` (no shared lock): total IOPS against the number of devices and
//! jobs.

use std::time::Duration;

use anyhow::Result;

use super::point::{cell, job};
use super::table::{SeedRow, Table, NOT_RECORDED};
use super::{Outcome, Runner};
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
        "iops_per_job",
        "ns_per_io_cpu",
        "clat_p99_ns",
    ]);
    let mut lines = Vec::new();
    let mut at: Vec<(&str, u32, f64)> = Vec::new();
    for mode in MODES {
        let mut line = Series {
            name: mode.into(),
            points: Vec::new(),
        };
        for n in DEVICES {
            let mut j = job("iorl", RwMode::RandRead, 4096, 8, r.runtime(POINT_RUNTIME));
            j.devices = vec!["null".to_string(); n as usize];
            j.numjobs = n;
            j.queue_mode = Some(mode.into());
            let f = r.point(&format!("{mode}-{n}dev"), &[j])?;
            t.push(vec![
                mode.into(),
                n.to_string(),
                n.to_string(),
                cell(f.iops, 0),
                cell(f.iops / f64::from(n), 0),
                cell(f.ns_per_io_cpu, 0),
                f.clat_ns[1].to_string(),
            ]);
            line.points.push((f64::from(n), f.iops));
            at.push((mode, n, f.iops));
        }
        lines.push(line);
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
                 point, on {} cores: past that many jobs, threads share the cores.",
                r.runtime(POINT_RUNTIME).as_millis(),
                r.cores()
            ),
            "Seed 000 §5's own figures are not recorded in this repository.".into(),
        ],
    })
}
