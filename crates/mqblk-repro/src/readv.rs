//! `repro readv` (seed 000, Table 3 and §7): a 64 KiB read as one segment
//! against the same 64 KiB as a vector of smaller segments, on the ram and
//! file devices, the segment count swept 1 to 64. In the seed's kernel a
//! readv on a raw device was served as a series of blocking reads, one per
//! segment, until its readv patch; here a vectored bio is one request.

use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context as _, Result};

use super::outcome::Outcome;
use super::point::{cell, job, Plan, Rounds, Runner, Spread};
use super::seed::{self, S000};
use super::table::{spread_cell, SeedRow, Table};
use mqblk_bench::RwMode;
use mqblk_plot::chart::{Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const BS: u64 = 64 << 10;
const SEGMENTS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
/// The seed's readv: 16 vectors of 4 KiB.
const SEED_SEGMENTS: u32 = 16;
const POINT_RUNTIME: Duration = Duration::from_millis(800);

/// Seed 000, Table 3: MB/s of the disk microbenchmark (32 disks), by
/// kernel. Read: 2.4.17 with bounce, lock and rawvary patches (SBIR), and
/// 2.5.17. Readv of 16 × 4 KiB: SBIR, SBIR with the readv patch (SBIRV),
/// 2.5.17.
const SEED_READ_SBIR: f64 = 240.0;
const SEED_READ_25: f64 = 243.0;
const SEED_READV_SBIR: f64 = 104.0;
const SEED_READV_SBIRV: f64 = 241.0;
const SEED_READV_25: f64 = 150.0;
/// The same rows' CPU idle, %.
const SEED_IDLE_READ_SBIR: f64 = 94.0;
const SEED_IDLE_READ_25: f64 = 97.0;
const SEED_IDLE_READV_SBIR: f64 = 41.0;
const SEED_IDLE_READV_SBIRV: f64 = 94.0;
const SEED_IDLE_READV_25: f64 = 61.0;

/// CPU per byte of a readv row over that of a read row: busy share over
/// throughput, each.
fn cpu_per_byte_ratio(readv: (f64, f64), read: (f64, f64)) -> f64 {
    ((100.0 - readv.1) / readv.0) / ((100.0 - read.1) / read.0)
}

/// A data file of `bytes` for the file device, filled (not sparse), so
/// that reads reach the file system's blocks.
pub fn data_file(path: &std::path::Path, bytes: u64) -> Result<()> {
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

fn mib_per_s(f: &super::point::Figures) -> f64 {
    f.bw_bytes / (1u64 << 20) as f64
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
    let mut plan = Vec::new();
    for (name, spec) in &devices {
        for segs in SEGMENTS {
            let mut j = job("readv", RwMode::Read, BS, 1, r.runtime(POINT_RUNTIME));
            j.devices = vec![spec.clone()];
            j.segments = segs;
            j.size = Some(size);
            plan.push(Plan::new(format!("{name}-{segs}seg"), vec![j]));
        }
    }
    let results = r.rounds(&plan);
    let _ = std::fs::remove_file(&file);
    let results = results?;
    let at = |dev: usize, segs: u32| -> &Rounds {
        let k = SEGMENTS.iter().position(|&s| s == segs).unwrap_or(0);
        &results[dev * SEGMENTS.len() + k]
    };

    let mut t = Table::with_spreads(
        &["device", "segments", "segment_bytes"],
        &["mib_per_s", "readv_over_read"],
        &[
            "rounds",
            "requests_per_bio",
            "bytes_copied",
            "cpu_ns_per_io",
            "clat_p50_ns",
            "clat_p99_ns",
        ],
    );
    let mut mib_lines = Vec::new();
    let mut ratio_lines = Vec::new();
    for (d, (name, _)) in devices.iter().enumerate() {
        let mut mib = Series::new(format!("{name}: mqblk"));
        let mut ratio = Series::new(format!("{name}: mqblk"));
        for segs in SEGMENTS {
            let res = at(d, segs);
            let m = res.spread(mib_per_s);
            // Round k of N segments against round k of one segment.
            let q = res.paired(at(d, 1), |a, b| a.bw_bytes / b.bw_bytes);
            let f = res.median();
            let mut row = vec![
                name.to_string(),
                segs.to_string(),
                (BS / u64::from(segs)).to_string(),
            ];
            row.extend(m.cells(1));
            row.extend(q.cells(3));
            row.extend([
                res.count().to_string(),
                // Both counted at submission: a request per bio submitted.
                cell(f.requests as f64 / f.bios.max(1) as f64, 3),
                f.bytes_copied.to_string(),
                cell(f.cpu_ns_process_per_io(), 0),
                f.clat_ns[0].to_string(),
                f.clat_ns[1].to_string(),
            ]);
            t.push(row);
            mib.push_spread(f64::from(segs), m.median, m.min, m.max);
            ratio.push_spread(f64::from(segs), q.median, q.min, q.max);
        }
        mib_lines.push(mib);
        ratio_lines.push(ratio);
    }
    let table3 = S000.at("Table 3");
    let s16 = f64::from(SEED_SEGMENTS);
    ratio_lines.push(Series::seed(
        format!("{}: 2.4.17+SBIR, before the readv patch", table3.short()),
        vec![(s16, SEED_READV_SBIR / SEED_READ_SBIR)],
    ));
    ratio_lines.push(Series::seed(
        format!("{}: with the readv patch (SBIRV)", table3.short()),
        vec![(s16, SEED_READV_SBIRV / SEED_READ_SBIR)],
    ));
    ratio_lines.push(Series::seed(
        format!("{}: 2.5.17", table3.short()),
        vec![(s16, SEED_READV_25 / SEED_READ_25)],
    ));

    // The seed beside ours.
    let ratio16: Vec<Spread> = (0..devices.len())
        .map(|d| at(d, SEED_SEGMENTS).paired(at(d, 1), |a, b| a.bw_bytes / b.bw_bytes))
        .collect();
    let cpu16: Vec<Spread> = (0..devices.len())
        .map(|d| {
            at(d, SEED_SEGMENTS).paired(at(d, 1), |a, b| {
                a.cpu_ns_process_per_io() / b.cpu_ns_process_per_io()
            })
        })
        .collect();
    let per_device = |v: &[Spread], digits: usize| {
        devices
            .iter()
            .zip(v)
            .map(|((n, _), s)| format!("{n} {}", spread_cell(s, digits)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let worst_ratio = ratio16
        .iter()
        .map(|s| s.median)
        .fold(f64::INFINITY, f64::min);
    let requests16: Vec<f64> = (0..devices.len())
        .map(|d| {
            let f = at(d, SEED_SEGMENTS).median();
            f.requests as f64 / f.bios.max(1) as f64
        })
        .collect();
    let read_mib: Vec<Spread> = (0..devices.len())
        .map(|d| at(d, 1).spread(mib_per_s))
        .collect();
    let seed = vec![
        SeedRow::new(
            "readv of 16 × 4 KiB ÷ read of 64 KiB, throughput",
            format!(
                "{:.2} before the readv patch ({SEED_READV_SBIR:.0} ÷ {SEED_READ_SBIR:.0} MB/s), \
                 {:.2} with it ({SEED_READV_SBIRV:.0} ÷ {SEED_READ_SBIR:.0}), {:.2} on 2.5.17 \
                 ({SEED_READV_25:.0} ÷ {SEED_READ_25:.0})",
                SEED_READV_SBIR / SEED_READ_SBIR,
                SEED_READV_SBIRV / SEED_READ_SBIR,
                SEED_READV_25 / SEED_READ_25
            ),
            table3.cite(),
            per_device(&ratio16, 2),
            if worst_ratio >= 0.9 {
                "the patched kernel's shape: a vector costs next to nothing".to_string()
            } else if worst_ratio > SEED_READV_SBIR / SEED_READ_SBIR {
                format!(
                    "between the unpatched ({:.2}) and the patched (1.00) kernel: each segment \
                     costs a little here, as the device handles the segments one by one",
                    SEED_READV_SBIR / SEED_READ_SBIR
                )
            } else {
                "as slow as the unpatched kernel: the segments cost more than the read".to_string()
            },
        ),
        SeedRow::new(
            "CPU per byte, readv of 16 × 4 KiB ÷ read of 64 KiB",
            format!(
                "{:.1} before the patch (CPU idle {SEED_IDLE_READV_SBIR:.0}% at \
                 {SEED_READV_SBIR:.0} MB/s against {SEED_IDLE_READ_SBIR:.0}% at \
                 {SEED_READ_SBIR:.0}), {:.1} with it, {:.1} on 2.5.17",
                cpu_per_byte_ratio(
                    (SEED_READV_SBIR, SEED_IDLE_READV_SBIR),
                    (SEED_READ_SBIR, SEED_IDLE_READ_SBIR)
                ),
                cpu_per_byte_ratio(
                    (SEED_READV_SBIRV, SEED_IDLE_READV_SBIRV),
                    (SEED_READ_SBIR, SEED_IDLE_READ_SBIR)
                ),
                cpu_per_byte_ratio(
                    (SEED_READV_25, SEED_IDLE_READV_25),
                    (SEED_READ_25, SEED_IDLE_READ_25)
                ),
            ),
            table3.cite(),
            per_device(&cpu16, 2),
            if cpu16.iter().all(|s| s.median < 2.0) {
                "near the patched kernel's 1.0, far from the unpatched one's: the vector is \
                 one request, its segments cost a little each"
            } else {
                "well above the patched kernel's 1.0: the segments cost CPU here"
            },
        ),
        SeedRow::new(
            "requests the device sees per readv of 16 segments",
            "16: one blocking read per segment, each waiting for the last, before the patch; \
             the patched readv maps up to 65 pages into one kiobuf and submits them together",
            S000.at("§7").cite(),
            devices
                .iter()
                .zip(&requests16)
                .map(|((n, _), q)| format!("{n} {q:.3}"))
                .collect::<Vec<_>>()
                .join("; "),
            if requests16.iter().all(|&q| q <= 1.0 + 1e-9) {
                "the patched shape: one request per vector".to_string()
            } else {
                "more than one request per vector".to_string()
            },
        ),
        SeedRow::new(
            "read of 64 KiB, throughput",
            format!(
                "{SEED_READ_SBIR:.0} MB/s (2.4.17+SBIR) and {SEED_READ_25:.0} MB/s (2.5.17), \
                 32 processes on 32 disks"
            ),
            table3.cite(),
            format!("{} MiB/s, one job at depth 1", per_device(&read_mib, 0)),
            "a scale, not a match: 32 disks of 2002 against one memory or file device",
        ),
    ];

    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "readv: 64 KiB reads cut into N segments".into(),
                x: Axis::new("segments per 64 KiB read", Scale::Log2, Unit::Count),
                y: Axis::new("throughput (MiB/s, log)", Scale::Log10, Unit::Count),
                series: mib_lines,
            }),
            Panel::Lines(LineChart {
                title: "readv: N segments ÷ one segment, throughput".into(),
                x: Axis::new("segments per 64 KiB read", Scale::Log2, Unit::Count),
                y: Axis::new("readv ÷ read", Scale::Linear, Unit::Count),
                series: ratio_lines,
            }),
        ],
        caption: seed::caption(&[table3]),
    };
    let answer = format!(
        "A 64 KiB read cut into 16 segments runs at {} of the one-segment read's throughput \
         and stays one request: the seed's patched readv, not its series of blocking reads.",
        per_device(&ratio16, 2)
    );
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes: vec![
            r.workload_note("rw=read, bs=64k, iodepth=1, one job", POINT_RUNTIME)
                + " --segments=N cuts each buffer into N separately allocated pieces.",
            format!(
                "Devices: ram,size={size} (sparse: reads of never-written blocks), and a \
                 {size}-byte file written beforehand, opened O_DIRECT through io_uring."
            ),
            "readv_over_read pairs round k of N segments with round k of one segment; \
             cpu_ns_per_io is the whole process's CPU time (every thread) per I/O."
                .into(),
        ],
    })
}
