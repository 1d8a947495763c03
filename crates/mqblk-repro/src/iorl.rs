//! `repro iorl` (seed 000 §5, Tables 5 and 6): Linux 2.4's
//! `io_request_lock`, one lock over every device's queue. Many null
//! devices (1 to 32), one job on each, in `global-lock` (the 2.4 lock),
//! `device-lock` (one lock per device, the seed's patch) and `mq` (no
//! shared lock): total IOPS and CPU per I/O against the number of devices
//! and jobs. The null device completes inline, so the lock is nearly all
//! the work: this is the lock's own cost. `repro many-disks` runs the
//! seed's disk microbenchmark, where the devices take time.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Runner};
use super::queue_modes::{self, Sweep, MODES};
use super::seed::{self, S000};
use super::table::{spread_cell, SeedRow, Table};
use mqblk_bench::RwMode;
use mqblk_plot::chart::{format_value, Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const DEVICES: [u32; 6] = [1, 2, 4, 8, 16, 32];
const POINT_RUNTIME: Duration = Duration::from_millis(700);

/// Seed 000, Table 5 (SB kernel: one global lock), share of 8 CPUs spent
/// spinning on `io_request_lock`; Table 6 (SBI: per-queue locks), the
/// same for the global lock, and for the per-queue locks
/// (`scsi_make_request`).
const SEED_SPIN_GLOBAL: f64 = 66.2;
const SEED_SPIN_AFTER: f64 = 7.6;
const SEED_SPIN_QUEUE: f64 = 0.3;
/// Seed 000, Table 2: the decision-support workload's gain from the lock
/// patch, %; Table 3: the disk microbenchmark's MB/s before and after.
const SEED_DSW_GAIN: f64 = 78.0;
const SEED_DM_MBS: (f64, f64) = (133.0, 235.0);

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let mut t = Table::with_spreads(
        &["queue_mode", "devices", "jobs"],
        &["iops", "cpu_ns_per_io"],
        &["rounds", "iops_per_job", "clat_p99_ns"],
    );
    let runtime = r.runtime(POINT_RUNTIME);
    let sweep = Sweep::run(r, &DEVICES, "dev", |n| {
        let mut j = job("iorl", RwMode::RandRead, 4096, 8, runtime);
        j.devices = vec!["null".to_string(); n as usize];
        j.numjobs = n;
        j
    })?;
    let mut iops_lines = queue_modes::lines();
    let mut cpu_lines = queue_modes::lines();
    for (mode, n, res) in sweep.points() {
        let f = res.median();
        let iops = res.spread(|f| f.iops);
        let cpu = res.spread(|f| f.cpu_ns_process_per_io());
        let mut row = vec![mode.to_string(), n.to_string(), n.to_string()];
        row.extend(iops.cells(0));
        row.extend(cpu.cells(0));
        row.extend([
            res.count().to_string(),
            cell(iops.median / f64::from(n), 0),
            f.clat_ns[1].to_string(),
        ]);
        t.push(row);
        let m = queue_modes::line_of(mode);
        iops_lines[m].push_spread(f64::from(n), iops.median, iops.min, iops.max);
        cpu_lines[m].push_spread(f64::from(n), cpu.median, cpu.min, cpu.max);
    }
    let most = DEVICES[DEVICES.len() - 1];
    let ratio = |a: &str, b: &str, n: u32| sweep.paired((a, n), (b, n), |p, q| p.iops / q.iops);
    let cpu_ratio = |a: &str, b: &str, n: u32| {
        sweep.paired((a, n), (b, n), |p, q| {
            p.cpu_ns_process_per_io() / q.cpu_ns_process_per_io()
        })
    };
    let split = ratio("device-lock", "global-lock", most);
    let mq = ratio("mq", "global-lock", most);
    let cpu = cpu_ratio("global-lock", "device-lock", most);
    let iops_at = |mode: &str, n: u32| sweep.spread(mode, n, |f| f.iops).median;
    let (t2, t3, t5, t6) = (
        S000.at("Table 2"),
        S000.at("Table 3"),
        S000.at("Table 5"),
        S000.at("Table 6"),
    );
    let gain_shape = if split.above(1.0) {
        "the seed's direction: every round gained from the split lock; less than the seed's \
         8 CPUs gained, as no more jobs run at once than there are cores"
    } else if split.below(1.0) {
        "the opposite of the seed's in every round: with no more jobs at once than there are \
         cores, the per-device locks only add work"
    } else {
        "within the rounds' spread: with no more jobs at once than there are cores, and an \
         inline device that gives each lock holder little to do, the global lock is rarely \
         contended"
    };
    let cpu_shape = if cpu.above(1.0) {
        "the seed's direction: the global lock cost more CPU per I/O in every round"
    } else if cpu.below(1.0) {
        "the opposite of the seed's: the global lock cost less CPU per I/O than the per-device \
         locks in every round; with few cores it is rarely contended, and its one cache line \
         stays warm"
    } else {
        "within the rounds' spread: with few cores the global lock is rarely contended"
    };
    let mq_over_split = ratio("mq", "device-lock", most);
    let seed = vec![
        SeedRow::new(
            format!("throughput with a lock per queue ÷ one global lock, {most} devices"),
            format!(
                "{:.2} for the decision-support workload; {:.2} for the disk microbenchmark \
                 ({:.0} → {:.0} MB/s)",
                1.0 + SEED_DSW_GAIN / 100.0,
                SEED_DM_MBS.1 / SEED_DM_MBS.0,
                SEED_DM_MBS.0,
                SEED_DM_MBS.1
            ),
            format!("{}; {}", t2.cite(), t3.cite()),
            format!(
                "device-lock ÷ global-lock {}; mq ÷ global-lock {}",
                spread_cell(&split, 2),
                spread_cell(&mq, 2)
            ),
            gain_shape,
        ),
        SeedRow::new(
            "CPU time lost to the global lock",
            format!("{SEED_SPIN_GLOBAL}% of 8 CPUs spinning on io_request_lock"),
            t5.cite(),
            format!(
                "CPU per I/O, global-lock ÷ device-lock at {most} devices: {}",
                spread_cell(&cpu, 2)
            ),
            cpu_shape,
        ),
        SeedRow::new(
            "CPU time on locks once each queue has its own",
            format!(
                "{SEED_SPIN_AFTER}% of CPUs on what remained of the global lock, \
                 {SEED_SPIN_QUEUE}% on the per-queue locks"
            ),
            t6.cite(),
            format!(
                "mq takes no shared lock: {} IOPS at {most} devices against {} with a lock \
                 per device, {} times",
                format_value(iops_at("mq", most), Unit::Count),
                format_value(iops_at("device-lock", most), Unit::Count),
                spread_cell(&mq_over_split, 2)
            ),
            if mq_over_split.above(1.0) {
                "beyond the seed's patch: taking no lock at all gains over a lock per device"
            } else {
                "as the seed: once each device has its own lock, the lock costs little"
            },
        ),
    ];
    // Each mode over global-lock, round by round, with the seed's gains
    // from its lock patch at its 32 disks.
    let ratio_lines: Vec<Series> = MODES
        .iter()
        .map(|&m| {
            let mut line = Series::new(m);
            for n in DEVICES {
                let q = ratio(m, "global-lock", n);
                line.push_spread(f64::from(n), q.median, q.min, q.max);
            }
            line
        })
        .chain([
            Series::seed(
                format!("{}: disk benchmark, a lock per queue ÷ one", t3.short()),
                vec![(f64::from(most), SEED_DM_MBS.1 / SEED_DM_MBS.0)],
            ),
            Series::seed(
                format!("{}: decision support, the same", t2.short()),
                vec![(f64::from(most), 1.0 + SEED_DSW_GAIN / 100.0)],
            ),
        ])
        .collect();
    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "iorl: IOPS ÷ one global lock's".into(),
                x: Axis::new("null devices = jobs", Scale::Log2, Unit::Count),
                y: Axis::new("÷ global-lock, round by round", Scale::Linear, Unit::Count),
                series: ratio_lines,
            }),
            Panel::Lines(LineChart {
                title: "iorl: total IOPS against devices (one job each)".into(),
                x: Axis::new("null devices = jobs", Scale::Log2, Unit::Count),
                y: Axis::new("I/Os per second, all jobs", Scale::Linear, Unit::Count),
                series: iops_lines,
            }),
            Panel::Lines(LineChart {
                title: "iorl: CPU time per I/O against devices".into(),
                x: Axis::new("null devices = jobs", Scale::Log2, Unit::Count),
                y: Axis::new("CPU ns per I/O, whole process", Scale::Linear, Unit::Count),
                series: cpu_lines,
            }),
        ],
        caption: seed::caption(&[t2, t3, t5, t6]),
    };
    let answer = format!(
        "At {most} devices, a lock per device gives {} times the IOPS of one global lock, and \
         mq {} times (the seed: {:.2} on 8 CPUs with 32 disks).",
        cell(split.median, 2),
        cell(mq.median, 2),
        SEED_DM_MBS.1 / SEED_DM_MBS.0
    );
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes: vec![
            format!(
                "Workload: rw=randread, bs=4k, iodepth=8, one job per null device, {} ms per \
                 point, on {} cores: past that many jobs, threads share the cores. Each \
                 point ran {} times, every point once per round; the table gives the \
                 median with the lowest and highest.",
                r.runtime(POINT_RUNTIME).as_millis(),
                r.cores(),
                super::point::ROUNDS
            ),
            "Ratios pair round k of one mode with round k of the other. The seed measured \
             the time spent spinning on the lock; ours is the whole process's CPU per I/O, of \
             which the lock is a part."
                .into(),
        ],
    })
}
