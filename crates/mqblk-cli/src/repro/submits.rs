//! `repro submits` (seed 000, Table 8): how many requests and bios one
//! 128 KiB read costs, with merging on and off, as the device's
//! `max_sectors` is swept. Three ways to read 128 KiB on the null device:
//! one 128 KiB bio (split to `max_sectors`), and 32 contiguous 4 KiB bios
//! in flight together, merged in the plug (`nomerges=0`) or not
//! (`nomerges=2`).

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Runner};
use super::table::{SeedRow, Table, NOT_RECORDED};
use crate::bench::job::RwMode;
use crate::plot::chart::{Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const READ_BYTES: u64 = 128 << 10;
const MAX_SECTORS: [u32; 6] = [8, 16, 32, 64, 128, 256];
const POINT_RUNTIME: Duration = Duration::from_millis(500);

struct Way {
    name: &'static str,
    bs: u64,
    iodepth: u32,
    nomerges: u32,
}

const WAYS: [Way; 3] = [
    Way {
        name: "1 × 128 KiB bio",
        bs: 128 << 10,
        iodepth: 1,
        nomerges: 0,
    },
    Way {
        name: "32 × 4 KiB bios merging on",
        bs: 4 << 10,
        iodepth: 32,
        nomerges: 0,
    },
    Way {
        name: "32 × 4 KiB bios merging off",
        bs: 4 << 10,
        iodepth: 32,
        nomerges: 2,
    },
];

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let mut t = Table::new(&[
        "way",
        "max_sectors",
        "max_request_kib",
        "requests_per_128k",
        "bios_per_128k",
        "merges_per_128k",
        "splits_per_128k",
        "iops",
        "ns_per_io_cpu",
    ]);
    let mut lines = Vec::new();
    let mut at_256 = Vec::new();
    for (wi, way) in WAYS.iter().enumerate() {
        let mut line = Series {
            name: way.name.into(),
            points: Vec::new(),
        };
        for ms in MAX_SECTORS {
            let mut j = job(
                "submits",
                RwMode::Read,
                way.bs,
                way.iodepth,
                r.runtime(POINT_RUNTIME),
            );
            j.devices = vec![format!(
                "null,max_sectors={ms},nomerges={},plug=on",
                way.nomerges
            )];
            let f = r.point(&format!("way{wi}-max_sectors{ms}"), &[j])?;
            // Counted at submission, as requests are: 128 KiB reads submitted.
            let reads_128k = (f.bios as f64 * way.bs as f64 / READ_BYTES as f64).max(1e-9);
            let per = |n: u64| n as f64 / reads_128k;
            t.push(vec![
                way.name.into(),
                ms.to_string(),
                (ms / 2).to_string(),
                cell(per(f.requests), 2),
                cell(per(f.bios), 2),
                cell(per(f.merges), 2),
                cell(per(f.splits), 2),
                cell(f.iops, 0),
                cell(f.ns_per_io_cpu, 0),
            ]);
            line.points.push((f64::from(ms / 2), per(f.requests)));
            if ms == 256 || ms == 8 {
                at_256.push((way.name, ms, per(f.requests), per(f.bios)));
            }
        }
        lines.push(line);
    }
    lines.push(Series {
        name: "seed: 256 × 512-byte units".into(),
        points: MAX_SECTORS
            .iter()
            .map(|&ms| (f64::from(ms / 2), 256.0))
            .collect(),
    });
    let mut seed = vec![SeedRow::new(
        "units a 128 KiB raw read was cut into (512-byte buffer heads)",
        "256 (DESIGN.md: 512-byte units split up and merged back)",
        "1 bio (one 128 KiB bio) or 32 (4 KiB bios); requests below",
    )];
    for (way, ms, req, bios) in at_256 {
        seed.push(SeedRow::new(
            format!("{way}, max_sectors={ms}: requests / bios per 128 KiB"),
            NOT_RECORDED,
            format!("{} / {}", cell(req, 2), cell(bios, 2)),
        ));
    }
    let figure = Figure::one(Panel::Lines(LineChart {
        title: "submits: requests per 128 KiB read against the request size limit".into(),
        x: Axis::new("max_sectors (KiB)", Scale::Log2, Unit::Count),
        y: Axis::new("requests per 128 KiB read", Scale::Log2, Unit::Count),
        series: lines,
    }));
    Ok(Outcome {
        points: t,
        seed,
        figure,
        notes: vec![
            format!(
                "Workload: rw=read (sequential) on null,max_sectors=N,nomerges=0|2,plug=on, \
                 one job, {} ms per point.",
                r.runtime(POINT_RUNTIME).as_millis()
            ),
            "A 128 KiB bio is split where max_sectors requires (splits_per_128k); 4 KiB \
             bios in flight together are merged in the plug up to max_sectors."
                .into(),
            "Seed 000 Table 8's own counts are not recorded in this repository.".into(),
        ],
    })
}
