//! `repro part-cache` (seed 003, ¶7): what counting every I/O in its
//! partition costs, with the one-hit cache in front of the partition
//! lookup (`part_cache=1`) and without it (`part_cache=0`: a scan of the
//! table per request), for 4 to 128 partitions. The null device, one job,
//! random 4 KiB reads at depth 32, in two patterns: inside the last
//! partition (a job on its own partition, as a database on `sda16`: the
//! scan goes the furthest), and over the whole disk (the partition changes
//! from one I/O to the next: the cache mostly misses). The partitions are
//! registered on the device before the jobs start
//! (`Device::set_partitions`), as `bench --stats-dir` does for a disk
//! whose table it reads.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use mqblk::PartitionRange;

use super::outcome::Outcome;
use super::point::{cell, job, Plan, Rounds, Runner, Setup, Spread};
use super::seed::{self, S003};
use super::table::{spread_cell, SeedRow, Table};
use mqblk_bench::RwMode;
use mqblk_plot::chart::{Axis, Figure, LineChart, Panel, Scale, Series, Unit};

/// Partition counts, swept.
pub const PARTITIONS: [u32; 4] = [4, 16, 64, 128];
/// Each partition's length: 16 MiB, in 512-byte sectors.
const PART_SECTORS: u64 = 32768;
/// The first partition starts at 1 MiB, as partitioning tools align it.
const FIRST_SECTOR: u64 = 2048;
const POINT_RUNTIME: Duration = Duration::from_millis(700);
const FREEZE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the I/O goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    /// Random offsets inside the last partition.
    Last,
    /// Random offsets over every partition.
    Whole,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Last => "last partition",
            Pattern::Whole => "whole disk",
        }
    }
}

/// `n` partitions of [`PART_SECTORS`] each, one after another.
fn ranges(n: u32) -> Vec<PartitionRange> {
    (0..u64::from(n))
        .map(|i| PartitionRange {
            start_sector: FIRST_SECTOR + i * PART_SECTORS,
            nr_sectors: PART_SECTORS,
            name: format!("nullb0p{}", i + 1),
        })
        .collect()
}

/// The null device, big enough for the most partitions.
fn spec(cache: bool) -> String {
    let most = u64::from(PARTITIONS[PARTITIONS.len() - 1]);
    let bytes = (FIRST_SECTOR + most * PART_SECTORS) * 512;
    format!(
        "null,size={bytes},hw_queues=1,part_cache={}",
        u8::from(cache)
    )
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let base = |cache: bool| {
        let mut j = job("part", RwMode::RandRead, 4096, 32, r.runtime(POINT_RUNTIME));
        j.devices = vec![spec(cache)];
        j
    };
    let mut plan = vec![Plan::new("no-partitions", vec![base(true)])];
    let mut keys = vec![None];
    for pattern in [Pattern::Last, Pattern::Whole] {
        for cache in [true, false] {
            for n in PARTITIONS {
                let mut j = base(cache);
                let (first, count) = match pattern {
                    Pattern::Last => (FIRST_SECTOR + u64::from(n - 1) * PART_SECTORS, 1),
                    Pattern::Whole => (FIRST_SECTOR, u64::from(n)),
                };
                j.offset = first * 512;
                j.size = Some(count * PART_SECTORS * 512);
                let table = ranges(n);
                let setup: Setup = Arc::new(move |devs: &[mqblk::Device]| {
                    for d in devs {
                        d.set_partitions(&table, FREEZE_TIMEOUT)?;
                    }
                    Ok(())
                });
                plan.push(Plan {
                    label: format!(
                        "{}-cache{}-{n}parts",
                        if pattern == Pattern::Last {
                            "last"
                        } else {
                            "whole"
                        },
                        u8::from(cache)
                    ),
                    jobs: vec![j],
                    setup: Some(setup),
                });
                keys.push(Some((pattern, cache, n)));
            }
        }
    }
    let results = r.rounds(&plan)?;
    let none = &results[0];
    let find = |pattern: Pattern, cache: bool, n: u32| -> &Rounds {
        let i = keys
            .iter()
            .position(|k| *k == Some((pattern, cache, n)))
            .unwrap_or(0);
        &results[i]
    };

    let mut t = Table::with_spreads(
        &["pattern", "partition_cache", "partitions"],
        &["cpu_ns_per_io", "lookup_ns_per_io", "iops"],
        &["rounds"],
    );
    let cpu = |f: &super::point::Figures| f.cpu_ns_process_per_io();
    // The cost of counting in a partition: round k against round k of the
    // same I/O with no partitions.
    let lookup = |res: &Rounds| res.paired(none, |a, b| cpu(a) - cpu(b));
    let mut row = vec!["whole disk".to_string(), "-".into(), "0".into()];
    row.extend(none.spread(cpu).cells(1));
    row.extend(["0.0", "0.0", "0.0"].map(String::from));
    row.extend(none.spread(|f| f.iops).cells(0));
    row.push(none.count().to_string());
    t.push(row);
    let mut lines = Vec::new();
    let mut gain_lines = Vec::new();
    for pattern in [Pattern::Last, Pattern::Whole] {
        for cache in [true, false] {
            let mut line = Series::new(format!(
                "{}, cache {}",
                pattern.name(),
                if cache { "on" } else { "off" }
            ));
            for n in PARTITIONS {
                let res = find(pattern, cache, n);
                let c = res.spread(cpu);
                let mut row = vec![
                    pattern.name().to_string(),
                    if cache { "on" } else { "off" }.into(),
                    n.to_string(),
                ];
                row.extend(c.cells(1));
                row.extend(lookup(res).cells(1));
                row.extend(res.spread(|f| f.iops).cells(0));
                row.push(res.count().to_string());
                t.push(row);
                line.push_spread(f64::from(n), c.median, c.min, c.max);
            }
            lines.push(line);
        }
        let mut gain = Series::new(format!("{}: cache on over off", pattern.name()));
        for n in PARTITIONS {
            let g = find(pattern, true, n).paired(find(pattern, false, n), |a, b| {
                100.0 * (a.iops / b.iops - 1.0)
            });
            gain.push_spread(f64::from(n), g.median, g.min, g.max);
        }
        gain_lines.push(gain);
    }
    let none_cpu = none.spread(cpu);
    let mut flat = Series::new("no partitions");
    for n in PARTITIONS {
        flat.push_spread(f64::from(n), none_cpu.median, none_cpu.min, none_cpu.max);
    }
    lines.push(flat);

    let (few, most) = (PARTITIONS[0], PARTITIONS[PARTITIONS.len() - 1]);
    let scan_few = lookup(find(Pattern::Last, false, few));
    let scan_most = lookup(find(Pattern::Last, false, most));
    let hit_most = lookup(find(Pattern::Last, true, most));
    let removed = 100.0 * (1.0 - hit_most.median / scan_most.median);
    let gain_at = |pattern: Pattern, n: u32| -> Spread {
        find(pattern, true, n).paired(find(pattern, false, n), |a, b| {
            100.0 * (a.iops / b.iops - 1.0)
        })
    };
    let (gain_last, gain_whole) = (gain_at(Pattern::Last, most), gain_at(Pattern::Whole, most));
    let p7 = S003.at("¶7 (partition lookup)");
    let seed = vec![
        SeedRow::new(
            "cost of the partition lookup against the partition's number",
            "grows with it: the table is scanned on every I/O, so I/O to sda1 or sda2 hardly \
             pays and I/O to sda16 shows in the profile",
            p7.cite(),
            format!(
                "without the cache, I/O in the last partition: {} CPU ns per I/O with {few} \
                 partitions, {} with {most}",
                spread_cell(&scan_few, 1),
                spread_cell(&scan_most, 1)
            ),
            if scan_most.min > scan_few.max {
                "the seed's shape: the later the partition, the longer the scan"
            } else {
                "not visible beyond the rounds' spread: the scan is lost in the noise"
            },
        ),
        SeedRow::new(
            "lookup time the one-hit cache removes",
            "most of it",
            p7.cite(),
            format!(
                "{}% at {most} partitions, I/O in the last one ({} → {} ns per I/O)",
                cell(removed, 0),
                cell(scan_most.median, 1),
                cell(hit_most.median, 1)
            ),
            if removed >= 50.0 {
                "the same: the cache removes most of the lookup"
            } else {
                "less than the seed: see the spread in the table"
            },
        ),
        SeedRow::new(
            "IOPS gained by the cache",
            "a few percent, when submissions come in batches to one partition",
            p7.cite(),
            format!(
                "{}% at {most} partitions in the last one; {}% when every I/O may go to \
                 another partition",
                spread_cell(&gain_last, 1),
                spread_cell(&gain_whole, 1)
            ),
            if gain_last.median > 10.0 {
                "far more than a few percent: on a null device a whole I/O costs tens of ns, so \
                 a scan of the table is a large share of it; and, as the seed says, the cache \
                 pays only while I/O stays in one partition"
            } else {
                "a few percent, as the seed's; the cache pays only while I/O stays in one \
                 partition"
            },
        ),
    ];
    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "part-cache: CPU time per I/O against partitions".into(),
                x: Axis::new("partitions on the disk", Scale::Log2, Unit::Count),
                y: Axis::new("CPU ns per I/O, whole process", Scale::Linear, Unit::Count),
                series: lines,
            }),
            Panel::Lines(LineChart {
                title: "part-cache: IOPS gained by the one-hit cache".into(),
                x: Axis::new("partitions on the disk", Scale::Log2, Unit::Count),
                y: Axis::new("IOPS, cache on over off (%)", Scale::Linear, Unit::Count),
                series: gain_lines,
            }),
        ],
        caption: {
            let mut c = seed::caption(&[p7]);
            c.push(
                "The seed gives the shape, not a number: the scan grows with the partition's \
                 number; the one-hit cache removes most of it, a few percent of IOPS."
                    .into(),
            );
            c
        },
    };
    let answer = format!(
        "Without the cache, counting I/O in partition {most} of {most} costs {} CPU ns per \
         I/O; the one-hit cache brings it to {} ({}% less), {}% more IOPS.",
        cell(scan_most.median, 1),
        cell(hit_most.median, 1),
        cell(removed, 0),
        cell(gain_last.median, 1)
    );
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes: vec![
            r.workload_note(
                &format!("rw=randread, bs=4k, iodepth=32, one job on {}", spec(true)),
                POINT_RUNTIME,
            ),
            format!(
                "Partitions of 16 MiB from sector {FIRST_SECTOR}, registered with \
                 Device::set_partitions; part_cache=0 scans the table on every request."
            ),
            "lookup_ns_per_io: CPU per I/O with the partitions less CPU per I/O without \
             them, round k against round k."
                .into(),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_fit_the_device() {
        let most = PARTITIONS[PARTITIONS.len() - 1];
        let r = ranges(most);
        let end = r.last().map(|p| p.start_sector + p.nr_sectors).unwrap();
        assert!(spec(true).contains(&format!("size={}", end * 512)));
        assert!(r
            .windows(2)
            .all(|w| w[0].start_sector + w[0].nr_sectors == w[1].start_sector));
    }
}
