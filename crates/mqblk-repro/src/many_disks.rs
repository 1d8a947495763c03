//! `repro many-disks` (seed 000, §3 and Table 3): the seed's disk
//! microbenchmark, one process per disk reading 64 KiB at a time, over 1
//! to 32 devices, under one global lock (`global-lock`, Linux 2.4's
//! `io_request_lock`), a lock per device (`device-lock`, the seed's patch)
//! and `mq`. The disks are null devices that complete each request
//! `COMPLETION_NSEC` after it was queued, from a timer (their interrupt),
//! so a job sleeps while its disk works, as the seed's processes did; the
//! figures are the total throughput and the CPU left idle, the columns of
//! the seed's Table 3. (The seed calls this benchmark "DM", for disk
//! microbenchmark; it is not device-mapper.)

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Figures, Runner};
use super::queue_modes::{self, Sweep};
use super::seed::{self, S000};
use super::table::{spread_cell, SeedRow, Table};
use mqblk_bench::RwMode;
use mqblk_plot::chart::{Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const DEVICES: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// Each disk's service time: the seed's 10,000 RPM disks took some
/// milliseconds per 64 KiB read; a hundred times faster keeps a point
/// short and still leaves the CPU waiting on the disks.
const COMPLETION_NSEC: u64 = 100_000;
const BS: u64 = 64 << 10;
const POINT_RUNTIME: Duration = Duration::from_millis(700);

/// Seed 000, Table 3, reads, 32 disks: MB/s and CPU idle % of the kernel
/// with one global lock (SB), with per-queue locks (SBI), and of 2.5.17.
const SEED_SB: (f64, f64) = (133.0, 21.0);
const SEED_SBI: (f64, f64) = (235.0, 61.0);
const SEED_25: (f64, f64) = (243.0, 97.0);
const SEED_DISKS: u32 = 32;

fn mib_per_s(f: &Figures) -> f64 {
    f.bw_bytes / (1u64 << 20) as f64
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let cores = r.cores();
    let idle = move |f: &Figures| 100.0 - f.cpu_busy_percent(cores);
    let runtime = r.runtime(POINT_RUNTIME);
    let sweep = Sweep::run(r, &DEVICES, "disks", |n| {
        let mut j = job("disk", RwMode::Read, BS, 1, runtime);
        j.devices =
            vec![format!("null,completion=timer,completion_nsec={COMPLETION_NSEC}"); n as usize];
        j.numjobs = n;
        j
    })?;
    // Each mode's throughput over global-lock's at `n` devices, round by
    // round.
    let over_global_lock = |mode: &str, n: u32| {
        sweep.paired((mode, n), ("global-lock", n), |a, b| {
            a.bw_bytes / b.bw_bytes
        })
    };

    let mut t = Table::with_spreads(
        &["queue_mode", "devices", "jobs"],
        &["mib_per_s", "cpu_idle_percent", "over_global_lock"],
        &["rounds", "cpu_ns_per_io", "clat_p99_ns"],
    );
    let mut mib_lines = queue_modes::lines();
    // global-lock's own line (1 in every round) keeps each mode's colour
    // the same in every panel.
    let mut ratio_lines = queue_modes::lines();
    let mut idle_lines = queue_modes::lines();
    for (mode, n, res) in sweep.points() {
        let m = res.spread(mib_per_s);
        let i = res.spread(idle);
        let q = over_global_lock(mode, n);
        let f = res.median();
        let mut row = vec![mode.to_string(), n.to_string(), n.to_string()];
        row.extend(m.cells(1));
        row.extend(i.cells(1));
        row.extend(q.cells(3));
        row.extend([
            res.count().to_string(),
            cell(f.cpu_ns_process_per_io(), 0),
            f.clat_ns[1].to_string(),
        ]);
        t.push(row);
        let k = queue_modes::line_of(mode);
        let x = f64::from(n);
        mib_lines[k].push_spread(x, m.median, m.min, m.max);
        idle_lines[k].push_spread(x, i.median, i.min, i.max);
        ratio_lines[k].push_spread(x, q.median, q.min, q.max);
    }
    let table3 = S000.at("Table 3");
    let dm = S000.at("§3");
    let at32 = f64::from(SEED_DISKS);
    ratio_lines.push(Series::seed(
        format!(
            "{}: per-queue locks (SBI) ÷ global lock (SB)",
            table3.short()
        ),
        vec![(at32, SEED_SBI.0 / SEED_SB.0)],
    ));
    ratio_lines.push(Series::seed(
        format!("{}: 2.5.17 ÷ global lock (SB)", table3.short()),
        vec![(at32, SEED_25.0 / SEED_SB.0)],
    ));
    for (name, v) in [
        ("global lock (SB)", SEED_SB.1),
        ("per-queue locks (SBI)", SEED_SBI.1),
        ("2.5.17", SEED_25.1),
    ] {
        idle_lines.push(Series::seed(
            format!("{}: {name}", table3.short()),
            vec![(at32, v)],
        ));
    }

    let most = DEVICES[DEVICES.len() - 1];
    let ratio = |mode: &str| over_global_lock(mode, most);
    let idle_of = |mode: &str| sweep.spread(mode, most, idle);
    let mib_of = |mode: &str| sweep.spread(mode, most, mib_per_s);
    let (split, mq) = (ratio("device-lock"), ratio("mq"));
    let seed = vec![
        SeedRow::new(
            format!("throughput, {SEED_DISKS} disks, a lock per queue ÷ one global lock"),
            format!(
                "{:.2} ({:.0} → {:.0} MB/s)",
                SEED_SBI.0 / SEED_SB.0,
                SEED_SB.0,
                SEED_SBI.0
            ),
            table3.cite(),
            format!(
                "{} (round by round; medians {} and {} MiB/s at {most} devices)",
                spread_cell(&split, 2),
                cell(mib_of("global-lock").median, 0),
                cell(mib_of("device-lock").median, 0)
            ),
            if split.above(1.0) {
                "the seed's direction: splitting the lock raised throughput in every round"
            } else if split.below(1.0) {
                "the opposite of the seed's in every round"
            } else {
                "within the rounds' spread: while the jobs sleep on their disks, no more of \
                 them contend for the global lock than there are cores"
            },
        ),
        SeedRow::new(
            format!("CPU idle, {SEED_DISKS} disks, one global lock against a lock per queue"),
            format!("{:.0}% against {:.0}%", SEED_SB.1, SEED_SBI.1),
            table3.cite(),
            format!(
                "{}% against {}% (100 less this process's share of {cores} cores)",
                spread_cell(&idle_of("global-lock"), 0),
                spread_cell(&idle_of("device-lock"), 0)
            ),
            if idle_of("device-lock").min > idle_of("global-lock").max {
                "the seed's direction: the lock per queue left more CPU idle in every round"
            } else {
                "no difference beyond the rounds' spread: the global lock costs little CPU here"
            },
        ),
        SeedRow::new(
            format!("a block layer with no global lock, {SEED_DISKS} disks"),
            format!(
                "2.5.17: {:.0} MB/s ({:.2} times SB), {:.0}% idle",
                SEED_25.0,
                SEED_25.0 / SEED_SB.0,
                SEED_25.1
            ),
            table3.cite(),
            format!(
                "mq: {} times global-lock, {}% idle",
                spread_cell(&mq, 2),
                spread_cell(&idle_of("mq"), 0)
            ),
            if mq.above(1.0) {
                "the seed's direction: without the global lock, more throughput in every round"
            } else {
                "within the rounds' spread of the global lock's"
            },
        ),
        SeedRow::new(
            "the workload",
            format!(
                "{SEED_DISKS} processes, each reading 4096 × 64 KiB from its own raw disk; \
                 the average of 3 runs"
            ),
            dm.cite(),
            format!(
                "1 to {most} jobs, each reading 64 KiB at a time from its own null device \
                 ({} µs a request); the median of {} runs",
                COMPLETION_NSEC / 1000,
                super::point::ROUNDS
            ),
            "the same shape of load, on disks a hundred times faster",
        ),
    ];
    let x = || Axis::new("devices = jobs", Scale::Log2, Unit::Count);
    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "many-disks: total throughput, one job per device".into(),
                x: x(),
                y: Axis::new("MiB/s, all jobs", Scale::Linear, Unit::Count),
                series: mib_lines,
            }),
            Panel::Lines(LineChart {
                title: "many-disks: throughput ÷ one global lock's".into(),
                x: x(),
                y: Axis::new("÷ global-lock", Scale::Linear, Unit::Count),
                series: ratio_lines,
            }),
            Panel::Lines(LineChart {
                title: "many-disks: CPU left idle".into(),
                x: x(),
                y: Axis::new("CPU idle (%)", Scale::Linear, Unit::Percent),
                series: idle_lines,
            }),
        ],
        caption: seed::caption(&[table3, dm]),
    };
    let answer = format!(
        "At {most} devices a lock per device reads {} times what one global lock does, mq {} \
         times, with {}% and {}% of the CPU idle against {}% (the seed: {:.2} times, idle \
         {:.0}% against {:.0}%).",
        cell(split.median, 2),
        cell(mq.median, 2),
        cell(idle_of("device-lock").median, 0),
        cell(idle_of("mq").median, 0),
        cell(idle_of("global-lock").median, 0),
        SEED_SBI.0 / SEED_SB.0,
        SEED_SBI.1,
        SEED_SB.1
    );
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes: vec![
            format!(
                "Workload: rw=read (sequential), bs=64k, iodepth=1, one job per \
                 null,completion=timer,completion_nsec={COMPLETION_NSEC} device, {} ms per \
                 point, on {cores} cores, {} rounds of every point in turn; the table gives the \
                 median with the lowest and highest.",
                r.runtime(POINT_RUNTIME).as_millis(),
                super::point::ROUNDS
            ),
            "cpu_idle_percent: 100 less this process's CPU time over the run's wall time on \
             every core (the seed's is the machine's idle time); over_global_lock pairs round \
             k with global-lock's round k."
                .into(),
        ],
    })
}
