//! `repro mq-scaling` (seed 004, §3 and §4.2, Figure 4): IOPS against the
//! number of submitting threads on one null device, from 1 to the number
//! of cores and past it, in the three queue modes, with latency
//! percentiles. Each thread has its own context; the device has one
//! hardware queue per thread.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Runner};
use super::queue_modes::{self, Sweep};
use super::seed::{self, S004};
use super::table::{spread_cell, SeedRow, Table};
use mqblk_bench::RwMode;
use mqblk_plot::chart::{format_value, Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const POINT_RUNTIME: Duration = Duration::from_millis(800);

/// Thread counts: every count up to the cores (or powers of two past 8),
/// then one and a half and twice the cores.
pub fn thread_counts(cores: usize) -> Vec<u32> {
    let cores = cores.max(1) as u32;
    let mut v: Vec<u32> = if cores <= 8 {
        (1..=cores).collect()
    } else {
        let mut p: Vec<u32> = (0..)
            .map(|i| 1u32 << i)
            .take_while(|&n| n < cores)
            .collect();
        p.push(cores);
        p
    };
    v.push(cores + cores.div_ceil(2));
    v.push(cores * 2);
    v.sort_unstable();
    v.dedup();
    v
}

/// Seed 004, §3: what one core submits through the single-queue block
/// layer, IOPS, and the ceiling of that layer whatever the cores; the
/// multi-queue design's reach; §4.2 (Figure 4): the single queue on four
/// and eight sockets.
const SEED_PER_CORE: f64 = 800e3;
const SEED_SQ_CEILING: f64 = 1e6;
const SEED_MQ_REACH: f64 = 10e6;
const SEED_MULTI_SOCKET: f64 = 125e3;

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let threads = thread_counts(r.cores());
    let mut t = Table::with_spreads(
        &["queue_mode", "threads"],
        &["iops", "clat_p99_ns"],
        &[
            "rounds",
            "iops_per_thread",
            "cpu_ns_per_io",
            "clat_p50_ns",
            "clat_p99_9_ns",
        ],
    );
    let runtime = r.runtime(POINT_RUNTIME);
    let sweep = Sweep::run(r, &threads, "thr", |n| {
        let mut j = job("mq", RwMode::RandRead, 4096, 32, runtime);
        j.devices = vec!["null".into()];
        j.numjobs = n;
        j.hw_queues = Some(n as u16);
        j
    })?;
    let mut iops_lines = queue_modes::lines();
    let mut p99_lines = queue_modes::lines();
    for (mode, n, res) in sweep.points() {
        let f = res.median();
        let iops = res.spread(|f| f.iops);
        let p99 = res.spread(|f| f.clat_ns[1] as f64);
        let mut row = vec![mode.to_string(), n.to_string()];
        row.extend(iops.cells(0));
        row.extend(p99.cells(0));
        row.extend([
            res.count().to_string(),
            cell(iops.median / f64::from(n), 0),
            cell(f.cpu_ns_process_per_io(), 0),
            f.clat_ns[0].to_string(),
            f.clat_ns[2].to_string(),
        ]);
        t.push(row);
        let m = queue_modes::line_of(mode);
        iops_lines[m].push_spread(f64::from(n), iops.median, iops.min, iops.max);
        p99_lines[m].push_spread(f64::from(n), p99.median, p99.min, p99.max);
    }
    let most = threads.last().copied().unwrap_or(1);
    let cores = r.cores() as u32;
    let iops = |mode: &str, n: u32| sweep.spread(mode, n, |f| f.iops).median;
    let best = |mode: &str| {
        threads
            .iter()
            .map(|&n| iops(mode, n))
            .fold(f64::NAN, f64::max)
    };
    let iops_ratio = |a: (&str, u32), b: (&str, u32)| sweep.paired(a, b, |p, q| p.iops / q.iops);
    let gain = |mode: &str| iops_ratio((mode, cores), (mode, 1));
    let (mq_gain, sq_gain) = (gain("mq"), gain("device-lock"));
    let mq_over_sq = iops_ratio(("mq", cores), ("device-lock", cores));
    let (intro, fig4) = (S004.at("§3 Introduction"), S004.at("§4.2, Figure 4"));
    let count = |v: f64| format_value(v, Unit::Count);
    let seed = vec![
        SeedRow::new(
            "IOPS one core submits through the block layer",
            format!(
                "about {} (Linux's single-queue layer)",
                count(SEED_PER_CORE)
            ),
            intro.cite(),
            format!(
                "{} with mq, {} with device-lock, one thread on the null device",
                count(iops("mq", 1)),
                count(iops("device-lock", 1))
            ),
            format!(
                "mq {} times the seed's core (other hardware, and no device at all)",
                cell(iops("mq", 1) / SEED_PER_CORE, 1)
            ),
        ),
        SeedRow::new(
            "the single queue's ceiling, whatever the cores",
            format!("under {} IOPS", count(SEED_SQ_CEILING)),
            intro.cite(),
            format!(
                "device-lock's best {}, mq's best {}, over 1 to {most} threads; mq ÷ \
                 device-lock at {cores} threads {}",
                count(best("device-lock")),
                count(best("mq")),
                spread_cell(&mq_over_sq, 2)
            ),
            if mq_over_sq.above(1.0) {
                "the seed's shape: the shared queue stays below per-context queues"
            } else {
                "not visible here: on this few cores the shared queue is not yet the limit, and \
                 both stay far above the seed's million"
            },
        ),
        SeedRow::new(
            format!("IOPS gain from 1 to {cores} submitting cores"),
            format!(
                "the multi-queue layer scales with cores (to {} IOPS); the single queue gains \
                 up to one socket's 6 cores, then falls when remote sockets submit",
                count(SEED_MQ_REACH)
            ),
            format!("{}; {}", intro.cite(), fig4.cite()),
            format!(
                "mq {}, device-lock {} (ideal: {cores})",
                spread_cell(&mq_gain, 2),
                spread_cell(&sq_gain, 2)
            ),
            if mq_gain.min > sq_gain.max {
                "the seed's shape: mq gains more from each core than the shared queue"
            } else if mq_gain.max < 1.2 {
                "not visible here: the second virtual CPU, shared with other work, adds little \
                 to either"
            } else {
                "within the rounds' spread of each other"
            },
        ),
        SeedRow::new(
            "the single queue with submitters on 4 or 8 sockets",
            format!("about {} IOPS", count(SEED_MULTI_SOCKET)),
            fig4.cite(),
            "not measured: this machine has one socket".to_string(),
            "—",
        ),
    ];
    iops_lines.push(Series::seed(
        format!(
            "{}: Linux's single queue, about 800k IOPS a core, under 1M in all",
            intro.short()
        ),
        threads
            .iter()
            .map(|&n| (f64::from(n), SEED_SQ_CEILING))
            .collect(),
    ));
    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "mq-scaling: IOPS against submitting threads (one null device)".into(),
                x: Axis::new("submitting threads", Scale::Linear, Unit::Count),
                y: Axis::new("I/Os per second, all threads", Scale::Linear, Unit::Count),
                series: iops_lines,
            }),
            Panel::Lines(LineChart {
                title: "mq-scaling: p99 completion latency against submitting threads".into(),
                x: Axis::new("submitting threads", Scale::Linear, Unit::Count),
                y: Axis::new("p99 completion latency", Scale::Log10, Unit::Nanos),
                series: p99_lines,
            }),
        ],
        caption: seed::caption(&[intro, fig4]),
    };
    let answer = format!(
        "With {cores} threads, mq's IOPS are {} times its one-thread figure and the single \
         shared queue's (device-lock) {} times (ideal: {cores}); past {cores} threads the \
         threads share the cores.",
        cell(mq_gain.median, 2),
        cell(sq_gain.median, 2)
    );
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes: vec![
            format!(
                "Workload: rw=randread, bs=4k, iodepth=32 per thread, one null device with \
                 hw_queues = threads, {} ms per point, {} cores. Each point ran {} times, \
                 every point once per round; the table gives the median (the median round's \
                 latencies) with the lowest and highest.",
                r.runtime(POINT_RUNTIME).as_millis(),
                r.cores(),
                super::point::ROUNDS
            ),
            "The seed's machines had up to 8 sockets; on a machine of 2 virtual CPUs shared \
             with other work, a second thread gains what the second CPU has free."
                .into(),
            "Run the same command on a machine with more cores to extend the curve.".into(),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_go_past_the_cores() {
        assert_eq!(thread_counts(1), vec![1, 2]);
        assert_eq!(thread_counts(2), vec![1, 2, 3, 4]);
        assert_eq!(thread_counts(16), vec![1, 2, 4, 8, 16, 24, 32]);
    }
}
