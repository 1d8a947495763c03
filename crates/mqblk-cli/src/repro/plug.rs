//! `repro plug` (seed 003): what plugging and the per-I/O clock reads cost
//! on a fast device. The null device, one job, random 4 KiB reads at
//! depth 32, with plugging on and off and accounting (the only clock
//! reads: `iostats=1`) on and off; CPU ns per I/O, the median of rounds
//! run in turn so that a noisy neighbour hits every setting alike.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Runner};
use super::table::{SeedRow, Table, NOT_RECORDED};
use crate::bench::job::RwMode;
use crate::plot::chart::{Axis, BarChart, Figure, Panel, Scale, Unit};

const POINT_RUNTIME: Duration = Duration::from_millis(1500);
const ROUNDS: usize = 3;
/// (plug, iostats).
const SETTINGS: [(bool, bool); 4] = [(true, true), (false, true), (true, false), (false, false)];

fn label(plug: bool, iostats: bool) -> String {
    format!(
        "plug={} clock={}",
        if plug { "on" } else { "off" },
        if iostats { "on" } else { "off" }
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); SETTINGS.len()];
    let mut iops: Vec<Vec<f64>> = vec![Vec::new(); SETTINGS.len()];
    let mut t = Table::new(&["plug", "clock_reads", "round", "iops", "ns_per_io_cpu"]);
    for round in 1..=ROUNDS {
        for (i, &(plug, iostats)) in SETTINGS.iter().enumerate() {
            let mut j = job("plug", RwMode::RandRead, 4096, 32, r.runtime(POINT_RUNTIME));
            j.devices = vec!["null".into()];
            j.plug = Some(plug);
            j.iostats = iostats;
            let f = r.point(
                &format!("{}-round{round}", label(plug, iostats).replace(' ', "-")),
                &[j],
            )?;
            t.push(vec![
                if plug { "on" } else { "off" }.into(),
                if iostats { "on" } else { "off" }.into(),
                round.to_string(),
                cell(f.iops, 0),
                cell(f.ns_per_io_cpu, 1),
            ]);
            ns[i].push(f.ns_per_io_cpu);
            iops[i].push(f.iops);
        }
    }
    let med: Vec<f64> = ns.iter_mut().map(|v| median(v)).collect();
    let med_iops: Vec<f64> = iops.iter_mut().map(|v| median(v)).collect();
    // SETTINGS order: 0 plug+clock, 1 clock only, 2 plug only, 3 neither.
    let clock_cost = ((med[0] - med[2]) + (med[1] - med[3])) / 2.0;
    let plug_cost = ((med[0] - med[1]) + (med[2] - med[3])) / 2.0;
    let mut seed = vec![
        SeedRow::new(
            "clock reads (iostats=1 − iostats=0), CPU ns per I/O",
            NOT_RECORDED,
            cell(clock_cost, 1),
        ),
        SeedRow::new(
            "plugging (plug=on − plug=off), CPU ns per I/O",
            NOT_RECORDED,
            cell(plug_cost, 1),
        ),
    ];
    for (i, &(plug, iostats)) in SETTINGS.iter().enumerate() {
        seed.push(SeedRow::new(
            format!("{}: CPU ns per I/O (median IOPS)", label(plug, iostats)),
            "—",
            format!(
                "{} ({})",
                cell(med[i], 1),
                crate::plot::chart::format_value(med_iops[i], Unit::Count)
            ),
        ));
    }
    let figure = Figure::one(Panel::Bars(BarChart {
        title: "plug: CPU time per I/O with plugging and clock reads on and off".into(),
        y: Axis::new(
            "CPU ns per I/O (median of rounds)",
            Scale::Linear,
            Unit::Count,
        ),
        categories: SETTINGS.iter().map(|&(p, c)| label(p, c)).collect(),
        series: vec![("null device, randread 4k, QD32".into(), med)],
    }));
    Ok(Outcome {
        points: t,
        seed,
        figure,
        notes: vec![
            format!(
                "Workload: rw=randread, bs=4k, iodepth=32, one job on the null device, {} ms \
                 per point, {ROUNDS} rounds of the four settings in turn; figures are medians.",
                r.runtime(POINT_RUNTIME).as_millis()
            ),
            "Clock reads are the layer's accounting (iostats=1: one clock read per batch); \
             iostats=0 reads no clock. A negative cost means the setting saves CPU."
                .into(),
            "Seed 003's own figures (per-I/O hpet/gettimeofday reads) are not recorded in \
             this repository."
                .into(),
        ],
    })
}
