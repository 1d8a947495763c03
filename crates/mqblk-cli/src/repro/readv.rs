//! `repro readv` (seed 000, Table 3): a 64 KiB read as one segment against
//! the same 64 KiB as a vector of smaller segments, on the ram and file
//! devices, the segment count swept 1 to 64. In the seed's kernel a readv
//! was served as a series of blocking reads, one per segment; here a
//! vectored bio is one request.

use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context as _, Result};

use super::outcome::Outcome;
use super::point::{cell, job, Runner};
use super::table::{SeedRow, Table, NOT_RECORDED};
use crate::bench::job::RwMode;
use crate::plot::chart::{Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const BS: u64 = 64 << 10;
const SEGMENTS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
const POINT_RUNTIME: Duration = Duration::from_millis(1000);

/// A data file of `bytes` for the file device, filled (not sparse), so
/// that reads reach the file system's blocks.
fn data_file(path: &std::path::Path, bytes: u64) -> Result<()> {
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let chunk = vec![0x5au8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    Ok(())
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let size: u64 = if r.scale() >= 0.1 { 64 << 20 } else { 8 << 20 };
    let file = r.out().join("readv-data.img");
    data_file(&file, size)?;
    let devices = [
        ("ram", format!("ram,size={size}")),
        ("file", format!("file:{}", file.display())),
    ];
    let mut t = Table::new(&[
        "device",
        "segments",
        "segment_bytes",
        "iops",
        "mib_per_s",
        "requests_per_bio",
        "bytes_copied",
        "ns_per_io_cpu",
        "clat_p50_ns",
        "clat_p99_ns",
    ]);
    let mut mib: Vec<Series> = Vec::new();
    let mut reqs: Vec<Series> = Vec::new();
    let mut by_point: Vec<(&str, u32, f64)> = Vec::new();
    for (name, spec) in &devices {
        let mut line = Series {
            name: format!("{name}: mqblk"),
            points: Vec::new(),
        };
        let mut req_line = line.clone();
        for segs in SEGMENTS {
            let mut j = job("readv", RwMode::Read, BS, 1, r.runtime(POINT_RUNTIME));
            j.devices = vec![spec.clone()];
            j.segments = segs;
            j.size = Some(size);
            let f = r.point(&format!("{name}-{segs}seg"), &[j])?;
            let mibs = f.bw_bytes / (1u64 << 20) as f64;
            // Both counted at submission: a request per bio submitted.
            let per_io = f.requests as f64 / f.bios.max(1) as f64;
            t.push(vec![
                name.to_string(),
                segs.to_string(),
                (BS / u64::from(segs)).to_string(),
                cell(f.iops, 0),
                cell(mibs, 1),
                cell(per_io, 3),
                f.bytes_copied.to_string(),
                cell(f.ns_per_io_cpu, 0),
                f.clat_ns[0].to_string(),
                f.clat_ns[1].to_string(),
            ]);
            line.points.push((f64::from(segs), mibs));
            req_line.points.push((f64::from(segs), per_io));
            by_point.push((name, segs, mibs));
        }
        mib.push(line);
        reqs.push(req_line);
    }
    let _ = std::fs::remove_file(&file);
    reqs.push(Series {
        name: "seed: a blocking read per segment".into(),
        points: SEGMENTS
            .iter()
            .map(|&s| (f64::from(s), f64::from(s)))
            .collect(),
    });

    let find = |dev: &str, segs: u32| {
        by_point
            .iter()
            .find(|p| p.0 == dev && p.1 == segs)
            .map_or(f64::NAN, |p| p.2)
    };
    let mut seed = Vec::new();
    for (dev, _) in &devices {
        let read = find(dev, 1);
        let readv = find(dev, 16);
        seed.push(SeedRow::new(
            format!("{dev}: read, 64 KiB as 1 segment (MiB/s)"),
            NOT_RECORDED,
            cell(read, 1),
        ));
        seed.push(SeedRow::new(
            format!("{dev}: readv, 16 × 4 KiB (MiB/s)"),
            NOT_RECORDED,
            cell(readv, 1),
        ));
        seed.push(SeedRow::new(
            format!("{dev}: readv ÷ read"),
            NOT_RECORDED,
            cell(readv / read, 2),
        ));
    }
    let row16 = t
        .rows
        .iter()
        .find(|row| row[1] == "16")
        .map_or("-".to_string(), |row| row[5].clone());
    seed.push(SeedRow::new(
        "requests per readv of 16 × 4 KiB",
        "16: a series of blocking reads (DESIGN.md)",
        row16,
    ));

    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "readv: 64 KiB reads cut into N segments".into(),
                x: Axis::new("segments per 64 KiB read", Scale::Log2, Unit::Count),
                y: Axis::new("throughput (MiB/s, log)", Scale::Log10, Unit::Count),
                series: mib,
            }),
            Panel::Lines(LineChart {
                title: "readv: requests per 64 KiB read".into(),
                x: Axis::new("segments per 64 KiB read", Scale::Log2, Unit::Count),
                y: Axis::new("requests per read", Scale::Log2, Unit::Count),
                series: reqs,
            }),
        ],
    };
    Ok(Outcome {
        points: t,
        seed,
        figure,
        notes: vec![
            format!(
                "Workload: rw=read, bs=64k, iodepth=1, one job, {} ms per point; \
                 --segments=N cuts each buffer into N separately allocated pieces.",
                r.runtime(POINT_RUNTIME).as_millis()
            ),
            format!(
                "Devices: ram,size={size} (sparse: reads of never-written blocks), and a \
                 {size}-byte file written beforehand, opened O_DIRECT through io_uring."
            ),
            "Seed 000 Table 3's own figures are not recorded in this repository; its \
             readv was a series of blocking reads (DESIGN.md), one request per segment."
                .into(),
        ],
    })
}
