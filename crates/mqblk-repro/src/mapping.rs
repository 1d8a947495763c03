//! `repro mapping` (seed 002): what it costs to make a buffer reachable
//! for I/O on every I/O, against once. The file driver's io_uring engine
//! with O_DIRECT, its buffers registered with the ring once
//! (`fixed_bufs=64M`: READ_FIXED, the pages pinned at registration) or
//! not (`fixed_bufs=0`: READ, the kernel pins the buffer's pages for each
//! I/O and lets them go at its end). Random reads of 4 KiB to 256 KiB from
//! a file written beforehand; per I/O: the whole process's CPU time, the
//! pages pinned (`/proc/vmstat`), the TLB shootdowns (`/proc/interrupts`),
//! and the system calls ([`super::syscalls`], by strace, when installed).
//!
//! The seed's FreeBSD mapped each buffer's pages into the kernel's address
//! space, and unmapping them meant a TLB shootdown on every core; its
//! unmapped buffers skipped the mapping. io_uring never maps a user
//! buffer into the kernel: what it does per I/O without registered
//! buffers is pin and unpin the pages, the cost that registration moves
//! out of the I/O path.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Figures, Plan, Runner, Spread};
use super::readv::data_file;
use super::seed::{self, S002};
use super::syscalls;
use super::table::{spread_cell, SeedRow, Table};
use mqblk_bench::RwMode;
use mqblk_plot::chart::{Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const BLOCK_KIB: [u64; 4] = [4, 16, 64, 256];
const POINT_RUNTIME: Duration = Duration::from_millis(700);
const IODEPTH: u32 = 16;
/// I/Os of strace's two runs (see [`super::syscalls`]).
const STRACE_IOS: (u64, u64) = (1000, 3000);

/// Seed 002: system time saved by unmapped buffers hashing a 5 GB file.
const SEED_SYS_SAVED_PERCENT: f64 = 30.0;

/// One way to reach the buffers.
struct Way {
    name: &'static str,
    fixed_bufs: &'static str,
}

const WAYS: [Way; 2] = [
    Way {
        name: "registered once (fixed_bufs=64M)",
        fixed_bufs: "64M",
    },
    Way {
        name: "pinned per I/O (fixed_bufs=0)",
        fixed_bufs: "0",
    },
];

fn pins_per_io(f: &Figures) -> f64 {
    f.per_io(f.pages_pinned)
}

fn tlb_per_io(f: &Figures) -> f64 {
    f.per_io(f.tlb_shootdowns)
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let size: u64 = if r.scale() >= 0.1 { 64 << 20 } else { 8 << 20 };
    let file = r.out().join("mapping-data.img");
    let spec = |way: &Way| {
        format!(
            "file:{},engine=uring,direct=1,fixed_bufs={}",
            file.display(),
            way.fixed_bufs
        )
    };
    let strace = syscalls::have_strace();
    let measured = data_file(&file, size).and_then(|()| {
        let mut plan = Vec::new();
        for (wi, way) in WAYS.iter().enumerate() {
            for kib in BLOCK_KIB {
                let mut j = job(
                    "mapping",
                    RwMode::RandRead,
                    kib << 10,
                    IODEPTH,
                    r.runtime(POINT_RUNTIME),
                );
                j.devices = vec![spec(way)];
                j.size = Some(size);
                plan.push(Plan::new(format!("way{wi}-{kib}k"), vec![j]));
            }
        }
        let results = r.rounds(&plan)?;
        // Syscalls per I/O: every way and block size, a pair of strace runs
        // per round.
        let mut calls: Vec<Vec<syscalls::PerIo>> = vec![Vec::new(); plan.len()];
        if strace {
            for _ in 0..super::point::ROUNDS {
                for (wi, way) in WAYS.iter().enumerate() {
                    for (k, kib) in BLOCK_KIB.into_iter().enumerate() {
                        let args = [
                            format!("--device={}", spec(way)),
                            "--rw=randread".into(),
                            format!("--bs={kib}k"),
                            format!("--iodepth={IODEPTH}"),
                            format!("--size={size}"),
                        ];
                        calls[wi * BLOCK_KIB.len() + k].push(syscalls::per_io(
                            &args,
                            STRACE_IOS.0,
                            STRACE_IOS.1,
                            r.out(),
                        )?);
                    }
                }
            }
        }
        Ok((results, calls))
    });
    let _ = std::fs::remove_file(&file);
    let (results, calls) = measured?;
    let at = |wi: usize, kib: u64| -> usize {
        wi * BLOCK_KIB.len() + BLOCK_KIB.iter().position(|&b| b == kib).unwrap_or(0)
    };
    let syscall_spread = |i: usize, f: fn(&syscalls::PerIo) -> f64| {
        Spread::of(&calls[i].iter().map(f).collect::<Vec<_>>())
    };

    let mut t = Table::with_spreads(
        &["buffers", "bs_kib"],
        &[
            "cpu_ns_per_io",
            "pages_pinned_per_io",
            "tlb_shootdowns_per_io",
            "syscalls_per_io",
        ],
        &["io_uring_enter_per_io", "iops", "rounds"],
    );
    let mut cpu_lines = Vec::new();
    let mut pin_lines = Vec::new();
    let mut tlb_lines = Vec::new();
    for (wi, way) in WAYS.iter().enumerate() {
        let mut cpu = Series::new(way.name);
        let mut pins = Series::new(way.name);
        let mut tlb = Series::new(way.name);
        for kib in BLOCK_KIB {
            let i = at(wi, kib);
            let res = &results[i];
            let c = res.spread(|f| f.cpu_ns_process_per_io());
            let p = res.spread(pins_per_io);
            let s = res.spread(tlb_per_io);
            let mut row = vec![way.name.to_string(), kib.to_string()];
            row.extend(c.cells(0));
            row.extend(p.cells(2));
            row.extend(s.cells(4));
            row.extend(syscall_spread(i, |c| c.total).cells(3));
            row.extend([
                cell(syscall_spread(i, |c| c.io_uring_enter).median, 3),
                cell(res.spread(|f| f.iops).median, 0),
                res.count().to_string(),
            ]);
            t.push(row);
            cpu.push_spread(kib as f64, c.median, c.min, c.max);
            pins.push_spread(kib as f64, p.median, p.min, p.max);
            tlb.push_spread(kib as f64, s.median, s.min, s.max);
        }
        cpu_lines.push(cpu);
        pin_lines.push(pins);
        tlb_lines.push(tlb);
    }
    let intro = S002.at("the opening paragraph");
    let result = S002.at("the paragraph on test results");
    tlb_lines.push(Series::seed(
        format!(
            "{}: a shootdown per mapped buffer, on every core",
            intro.short()
        ),
        BLOCK_KIB.iter().map(|&k| (k as f64, 1.0)).collect(),
    ));

    // The seed beside ours.
    let saved = |kib: u64| -> Spread {
        results[at(0, kib)].paired(&results[at(1, kib)], |a, b| {
            100.0 * (1.0 - a.cpu_ns_process_per_io() / b.cpu_ns_process_per_io())
        })
    };
    let (small, big) = (BLOCK_KIB[0], BLOCK_KIB[BLOCK_KIB.len() - 1]);
    let pins = |wi: usize, kib: u64| results[at(wi, kib)].spread(pins_per_io);
    let tlb = |wi: usize| -> Spread {
        Spread::of(
            &BLOCK_KIB
                .iter()
                .flat_map(|&k| results[at(wi, k)].runs.iter().map(tlb_per_io))
                .collect::<Vec<_>>(),
        )
    };
    let calls_of = |wi: usize| -> String {
        if strace {
            spread_cell(&syscall_spread(at(wi, small), |c| c.total), 3)
        } else {
            "-".into()
        }
    };
    let seed = vec![
        SeedRow::new(
            "TLB shootdowns per buffer",
            "one per buffer mapped into the kernel and unmapped, interrupting every core \
             (an IPI) while the initiating thread waits; none for an unmapped buffer",
            intro.cite(),
            format!(
                "per I/O, machine-wide: {} registered, {} pinned per I/O",
                spread_cell(&tlb(0), 4),
                spread_cell(&tlb(1), 4)
            ),
            if tlb(1).median < 0.5 {
                "both the seed's unmapped shape: io_uring pins a user buffer, it never maps it \
                 into the kernel"
            } else {
                "shootdowns track the I/O here: see the note on machine-wide counts"
            },
        ),
        SeedRow::new(
            "pages set up for the device per I/O",
            "every page of every buffer mapped into kernel address space (mapped buffers); \
             none (unmapped buffers)",
            intro.cite(),
            format!(
                "pages pinned per I/O at {small} and {big} KiB: {} and {} pinned per I/O, {} \
                 and {} registered",
                spread_cell(&pins(1, small), 2),
                spread_cell(&pins(1, big), 2),
                spread_cell(&pins(0, small), 2),
                spread_cell(&pins(0, big), 2)
            ),
            if pins(1, big).median > pins(0, big).median {
                "the seed's shape: per-I/O work grows with the buffer's pages, and registering \
                 once removes it (the counter is machine-wide)"
            } else {
                "no difference seen: see the note on machine-wide counts"
            },
        ),
        SeedRow::new(
            "CPU saved by not setting the buffer up per I/O",
            format!(
                "{SEED_SYS_SAVED_PERCENT:.0}% less system time hashing a 5 GB file; no \
                 significant change in a parallel build"
            ),
            result.cite(),
            format!(
                "{}% less CPU per I/O at {small} KiB, {}% at {big} KiB",
                spread_cell(&saved(small), 1),
                spread_cell(&saved(big), 1)
            ),
            if saved(big).above(0.0) && saved(big).median > saved(small).median {
                "the seed's direction, growing with the buffer's pages"
            } else if saved(big).above(0.0) {
                "the seed's direction"
            } else {
                "within the rounds' spread: pinning a few pages is cheap next to the I/O"
            },
        ),
    ];
    let x = || Axis::new("block size (KiB)", Scale::Log2, Unit::Count);
    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "mapping: CPU per I/O, registered buffers against pinned per I/O".into(),
                x: x(),
                y: Axis::new("CPU ns per I/O, whole process", Scale::Linear, Unit::Count),
                series: cpu_lines,
            }),
            Panel::Lines(LineChart {
                title: "mapping: pages pinned for I/O, per I/O".into(),
                x: x(),
                y: Axis::new(
                    "pages pinned per I/O (machine-wide)",
                    Scale::Linear,
                    Unit::Count,
                ),
                series: pin_lines,
            }),
            Panel::Lines(LineChart {
                title: "mapping: TLB shootdowns per I/O".into(),
                x: x(),
                y: Axis::new(
                    "shootdowns per I/O (machine-wide)",
                    Scale::Linear,
                    Unit::Count,
                ),
                series: tlb_lines,
            }),
        ],
        caption: seed::caption(&[intro, result]),
    };
    let answer = format!(
        "Without registration the kernel pins {} pages per I/O at {big} KiB ({} with registered \
         buffers; the counter is machine-wide), and registering saves {}% of the CPU per I/O at \
         {big} KiB, {}% at {small} KiB. Neither way maps the buffer into the kernel: TLB \
         shootdowns per I/O are {} and {}, the machine's background. System calls per I/O: {} \
         registered, {} pinned per I/O.",
        cell(pins(1, big).median, 1),
        cell(pins(0, big).median, 1),
        cell(saved(big).median, 1),
        cell(saved(small).median, 1),
        cell(tlb(0).median, 4),
        cell(tlb(1).median, 4),
        calls_of(0),
        calls_of(1)
    );
    let mut notes = vec![
        format!(
            "Workload: rw=randread, iodepth={IODEPTH}, one job on a {size}-byte file written \
             beforehand, O_DIRECT through io_uring, {} ms per point, {} rounds of every point \
             in turn; the table gives the median with the lowest and highest.",
            r.runtime(POINT_RUNTIME).as_millis(),
            super::point::ROUNDS
        ),
        "Pages pinned (/proc/vmstat nr_foll_pin_acquired) and TLB shootdowns (/proc/interrupts) \
         are counted for the whole machine: other processes' work shows in them too."
            .into(),
    ];
    notes.push(if strace {
        format!(
            "syscalls_per_io: `mqblk bench` under strace -f -c with {} and {} I/Os, the \
             difference over {} I/Os, once per round.",
            STRACE_IOS.0,
            STRACE_IOS.1,
            STRACE_IOS.1 - STRACE_IOS.0
        )
    } else {
        "syscalls_per_io: not counted, strace is not installed (Debian: apt-get install \
         strace)."
            .into()
    });
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes,
    })
}
