//! `repro copies` (seed 001): what copying through the page cache costs
//! the CPU. Two files (the seed's two disks), a job reading each
//! sequentially, in three ways: pread(2) through the page cache (the file
//! driver's psync engine with `direct=0`: the seed's read(2)), io_uring
//! through the page cache (`direct=0`), and the file driver's direct path
//! (io_uring, O_DIRECT, registered buffers: the device writes into the
//! caller's buffer). The block size is swept 16 KiB to 1 MiB; the figure
//! is the whole process's CPU time per KiB read, its throughput, and the
//! bytes copied.
//!
//! Bytes copied: the layer counts its own bounce copies (`bytes_copied`,
//! measured). A read through the page cache copies every byte once more,
//! from the cache into the caller's buffer (that is what read(2) does; the
//! kernel has no counter of it), and a direct read copies none: the table
//! gives that copy as the bytes read through the page cache.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Figures, Plan, Rounds, Runner};
use super::readv::data_file;
use super::seed::{self, S001};
use super::table::{spread_cell, SeedRow, Table};
use mqblk_bench::RwMode;
use mqblk_plot::chart::{Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const BLOCK_KIB: [u64; 4] = [16, 64, 256, 1024];
const POINT_RUNTIME: Duration = Duration::from_millis(800);
const IODEPTH: u32 = 4;

/// Seed 001: read(2) from two disks at about 30 MB/s took about 45% of a
/// 400 MHz CPU; one copy at that rate takes 20–30% of the CPU (memory
/// bandwidth of 200–300 MB/s); the example program took 70 s with read(2)
/// and 107 s with mmap and mlock.
const SEED_MBS: f64 = 30.0;
const SEED_CPU_PERCENT: f64 = 45.0;
const SEED_COPY_PERCENT: (f64, f64) = (20.0, 30.0);
const SEED_READ_SECONDS: f64 = 70.0;
const SEED_MMAP_SECONDS: f64 = 107.0;

/// One way to read the files.
struct Way {
    name: &'static str,
    /// Options after `file:PATH`.
    options: &'static str,
    /// Whether the bytes go through the page cache (and so are copied).
    page_cache: bool,
}

const WAYS: [Way; 3] = [
    Way {
        name: "pread(2) via the page cache",
        options: "engine=psync,direct=0",
        page_cache: true,
    },
    Way {
        name: "io_uring via the page cache",
        options: "engine=uring,direct=0",
        page_cache: true,
    },
    Way {
        name: "io_uring with O_DIRECT",
        options: "engine=uring,direct=1",
        page_cache: false,
    },
];

/// CPU ns of the whole process per KiB read.
fn cpu_ns_per_kib(f: &Figures) -> f64 {
    if f.bytes > 0 {
        f.cpu_ns_process as f64 * 1024.0 / f.bytes as f64
    } else {
        f64::NAN
    }
}

fn mib_per_s(f: &Figures) -> f64 {
    f.bw_bytes / (1u64 << 20) as f64
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let size: u64 = if r.scale() >= 0.1 { 64 << 20 } else { 8 << 20 };
    let files = [
        r.out().join("copies-disk1.img"),
        r.out().join("copies-disk2.img"),
    ];
    let runtime = r.runtime(POINT_RUNTIME);
    // One job per file of `files`, each reading its file `way`, `kib` KiB
    // at a time.
    let read_job = |files: &[PathBuf], way: &Way, kib: u64| {
        let mut j = job("copies", RwMode::Read, kib << 10, IODEPTH, runtime);
        j.devices = files
            .iter()
            .map(|f| format!("file:{},{}", f.display(), way.options))
            .collect();
        j.numjobs = files.len() as u32;
        j.size = Some(size);
        j
    };
    let made = files.iter().try_for_each(|f| data_file(f, size));
    let results = made.and_then(|()| {
        let mut plan = Vec::new();
        for (wi, way) in WAYS.iter().enumerate() {
            for kib in BLOCK_KIB {
                let j = read_job(&files, way, kib);
                plan.push(Plan::new(format!("way{wi}-{kib}k"), vec![j]));
            }
        }
        // One job on one file, the direct way at the largest block: what
        // the second file adds.
        let kib = BLOCK_KIB[BLOCK_KIB.len() - 1];
        let j = read_job(&files[..1], &WAYS[2], kib);
        plan.push(Plan::new(format!("one-file-{kib}k"), vec![j]));
        r.rounds(&plan)
    });
    for f in &files {
        let _ = std::fs::remove_file(f);
    }
    let results = results?;
    let at = |wi: usize, kib: u64| -> &Rounds {
        let k = BLOCK_KIB.iter().position(|&b| b == kib).unwrap_or(0);
        &results[wi * BLOCK_KIB.len() + k]
    };
    let one_file = &results[results.len() - 1];

    let mut t = Table::with_spreads(
        &["way", "files", "bs_kib"],
        &["cpu_ns_per_kib", "mib_per_s"],
        &[
            "rounds",
            "bytes_read",
            "page_cache_copy_bytes",
            "layer_bounce_bytes",
            "cpu_busy_percent",
        ],
    );
    let cores = r.cores();
    let row_of =
        |t: &mut Table, name: &str, files: u32, kib: u64, page_cache: bool, res: &Rounds| {
            let f = res.median();
            let mut row = vec![name.to_string(), files.to_string(), kib.to_string()];
            row.extend(res.spread(cpu_ns_per_kib).cells(0));
            row.extend(res.spread(mib_per_s).cells(1));
            row.extend([
                res.count().to_string(),
                f.bytes.to_string(),
                if page_cache { f.bytes } else { 0 }.to_string(),
                f.bytes_copied.to_string(),
                cell(f.cpu_busy_percent(cores), 1),
            ]);
            t.push(row);
        };
    let mut cpu_lines = Vec::new();
    let mut mib_lines = Vec::new();
    for (wi, way) in WAYS.iter().enumerate() {
        let mut cpu = Series::new(way.name);
        let mut mib = Series::new(way.name);
        for kib in BLOCK_KIB {
            let res = at(wi, kib);
            row_of(&mut t, way.name, 2, kib, way.page_cache, res);
            let c = res.spread(cpu_ns_per_kib);
            let m = res.spread(mib_per_s);
            cpu.push_spread(kib as f64, c.median, c.min, c.max);
            mib.push_spread(kib as f64, m.median, m.min, m.max);
        }
        cpu_lines.push(cpu);
        mib_lines.push(mib);
    }
    let big = BLOCK_KIB[BLOCK_KIB.len() - 1];
    row_of(&mut t, WAYS[2].name, 1, big, false, one_file);

    // The seed's CPU per KB: 45% of one CPU while 30 MB/s arrive.
    let seed_ns_per_kib = SEED_CPU_PERCENT / 100.0 * 1e9 / (SEED_MBS * 1e6 / 1024.0);
    let sent = (
        S001.at("the detailed description"),
        S001.at("the example program's timings"),
    );
    cpu_lines.push(Series::seed(
        format!(
            "seed 001: read(2), 2 IDE disks, 400 MHz CPU ({:.0} ns/KiB)",
            seed_ns_per_kib
        ),
        BLOCK_KIB
            .iter()
            .map(|&k| (k as f64, seed_ns_per_kib))
            .collect(),
    ));

    let cpu_at = |wi: usize, kib: u64| at(wi, kib).spread(cpu_ns_per_kib);
    let small = BLOCK_KIB[0];
    let (pread, uring_cached, direct) = (cpu_at(0, big), cpu_at(1, big), cpu_at(2, big));
    let direct_mib = at(2, big).spread(mib_per_s);
    // What a copy costs: the cached read through io_uring at the largest
    // block is the copy and a page-cache lookup, nothing else.
    let copy_ns_per_kib = uring_cached.median;
    let share_at = |mb_per_s: f64| 100.0 * copy_ns_per_kib * mb_per_s * 1e6 / 1024.0 / 1e9;
    let parallel = at(2, big).paired(one_file, |a, b| a.bw_bytes / b.bw_bytes);
    let bounce: u64 = results.iter().map(|res| res.median().bytes_copied).sum();
    let cached_cheaper = pread.max < direct.min || uring_cached.max < direct.min;
    let seed = vec![
        SeedRow::new(
            "CPU to read through the page cache",
            format!(
                "about {SEED_CPU_PERCENT:.0}% of a 400 MHz CPU at about {SEED_MBS:.0} MB/s from \
                 two disks: {seed_ns_per_kib:.0} ns per KiB"
            ),
            sent.0.cite(),
            format!(
                "{} ns per KiB with pread(2), {} with io_uring, both through the page cache, \
                 {big} KiB reads",
                spread_cell(&pread, 0),
                spread_cell(&uring_cached, 0)
            ),
            format!(
                "{} times less CPU per KiB than the seed's 400 MHz machine",
                cell(seed_ns_per_kib / pread.median, 0)
            ),
        ),
        SeedRow::new(
            "CPU per KiB, read through the page cache against the direct path",
            "a page-aligned read into a page-aligned buffer should need almost no kernel CPU \
             (the writer's expectation, not a measurement)",
            sent.0.cite(),
            format!(
                "O_DIRECT {} ns per KiB at {big} KiB and {} at {small} KiB; through the cache \
                 {} (pread) and {} (io_uring) at {small} KiB",
                spread_cell(&direct, 0),
                spread_cell(&cpu_at(2, small), 0),
                spread_cell(&cpu_at(0, small), 0),
                spread_cell(&cpu_at(1, small), 0)
            ),
            if pread.min > direct.max && uring_cached.min > direct.max {
                "the seed's shape: the direct path leaves the copy out and costs less".to_string()
            } else if cached_cheaper {
                "not the seed's shape: a cached read here is a copy from memory at tens of \
                 GB/s, while the direct read's own work per I/O (the virtual machine's emulated \
                 disk, its interrupts and completions) costs more; the direct path spends its \
                 CPU on I/O, not on copies"
                    .to_string()
            } else {
                "within the rounds' spread of each other at this block size".to_string()
            },
        ),
        SeedRow::new(
            "share of a CPU one copy takes",
            format!(
                "{:.0}–{:.0}% at {SEED_MBS:.0} MB/s, memory copying at 200–300 MB/s",
                SEED_COPY_PERCENT.0, SEED_COPY_PERCENT.1
            ),
            sent.0.cite(),
            format!(
                "a copy from the cache costs about {} ns per KiB (io_uring, {big} KiB): {}% of \
                 one core at {SEED_MBS:.0} MB/s, {}% at the direct path's {} MiB/s",
                cell(copy_ns_per_kib, 0),
                cell(share_at(SEED_MBS), 2),
                cell(share_at(direct_mib.median * 1.048576), 1),
                cell(direct_mib.median, 0)
            ),
            "the copy's share has shrunk: memory now copies far faster than a disk delivers",
        ),
        SeedRow::new(
            "bytes copied per byte read",
            "at least one copy from buffer to buffer before the data reaches the program",
            sent.0.cite(),
            format!(
                "page cache: 1 (each byte from the cache into the buffer); O_DIRECT: 0; the \
                 layer's own bounce copies: {bounce} bytes in all"
            ),
            "one copy through the cache, none on the direct path",
        ),
        SeedRow::new(
            "one process reading two disks at once",
            format!(
                "{SEED_MMAP_SECONDS:.0} s with mmap and mlock against {SEED_READ_SECONDS:.0} s \
                 with read(2) ({:.2} times as long): mlock serialises a process's reads",
                SEED_MMAP_SECONDS / SEED_READ_SECONDS
            ),
            sent.1.cite(),
            format!(
                "two jobs on two files in one process read {} times what one job reads alone \
                 (O_DIRECT, {big} KiB; both files on one disk here)",
                spread_cell(&parallel, 2)
            ),
            if parallel.above(1.0) {
                "the seed's read(2) shape, not its mmap one: nothing serialises the two jobs, \
                 and the second file adds throughput"
            } else {
                "the second file adds nothing beyond the spread: both files are on one \
                 virtual disk, which is the limit"
            },
        ),
    ];
    let x = || Axis::new("block size (KiB)", Scale::Log2, Unit::Count);
    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "copies: CPU per KiB read, page cache against O_DIRECT".into(),
                x: x(),
                y: Axis::new(
                    "CPU ns per KiB, whole process (log)",
                    Scale::Log10,
                    Unit::Count,
                ),
                series: cpu_lines,
            }),
            Panel::Lines(LineChart {
                title: "copies: throughput, two jobs on two files".into(),
                x: x(),
                y: Axis::new("MiB/s, both jobs", Scale::Log10, Unit::Count),
                series: mib_lines,
            }),
        ],
        caption: seed::caption(&[sent.0, sent.1]),
    };
    let answer = format!(
        "At {big} KiB, a read through the page cache costs {} CPU ns per KiB with pread(2) and \
         {} with io_uring, against {} on the direct path, which copies nothing but pays for the \
         disk's I/O (the seed: about {seed_ns_per_kib:.0} ns per KiB on a 400 MHz CPU).",
        cell(pread.median, 0),
        cell(uring_cached.median, 0),
        cell(direct.median, 0)
    );
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes: vec![
            r.workload_note(
                &format!(
                    "rw=read (sequential), iodepth={IODEPTH}, numjobs=2, each job on its own \
                     {size}-byte file written beforehand"
                ),
                POINT_RUNTIME,
            ),
            "Reads through the page cache find the files cached after the first pass: their \
             cost is the copy and the cache lookup, not the disk."
                .into(),
            "cpu_ns_per_kib: the whole process's CPU time (job threads, io_uring's workers, the \
             psync engine's threads) per KiB read. page_cache_copy_bytes is derived (every \
             byte read through the cache is copied once); layer_bounce_bytes is counted."
                .into(),
        ],
    })
}
