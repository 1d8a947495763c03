//! `repro plug` (seed 003): what plugging, the per-I/O clock reads and the
//! allocations per I/O cost on a fast device. The null device, one job,
//! random 4 KiB reads at depth 32, with plugging on and off and
//! accounting (the only clock reads: `iostats=1`) on and off; CPU ns per
//! I/O and IOPS, the median of rounds run in turn so that a noisy
//! neighbour hits every setting alike.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Plan, Rounds, Runner, Spread};
use super::seed::{self, S003};
use super::table::{spread_cell, SeedRow, Table};
use mqblk_bench::RwMode;
use mqblk_plot::chart::{format_value, Axis, BarChart, Bars, Figure, Panel, Scale, Unit};

const POINT_RUNTIME: Duration = Duration::from_millis(1500);
/// (plug, iostats), in the order the rounds run them.
const SETTINGS: [(bool, bool); 4] = [(true, true), (false, true), (true, false), (false, false)];

/// Seed 003: IOPS gained by a TSC clock over hpet (over 10%), by turning
/// plugging off (about 1%, at 30–40k IOPS), by folding the allocations
/// per I/O and caching requests (3–4%); the allocations per I/O before.
const SEED_CLOCK_GAIN_PERCENT: f64 = 10.0;
const SEED_PLUG_GAIN_PERCENT: f64 = 1.0;
const SEED_ALLOC_GAIN_PERCENT: (f64, f64) = (3.0, 4.0);
const SEED_ALLOCS_PER_IO: u32 = 5;

fn label(plug: bool, iostats: bool) -> String {
    format!(
        "plug={} clock={}",
        if plug { "on" } else { "off" },
        if iostats { "on" } else { "off" }
    )
}

fn on_off(b: bool) -> String {
    if b { "on" } else { "off" }.into()
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let plan: Vec<Plan> = SETTINGS
        .iter()
        .map(|&(plug, iostats)| {
            let mut j = job("plug", RwMode::RandRead, 4096, 32, r.runtime(POINT_RUNTIME));
            j.devices = vec!["null".into()];
            j.plug = Some(plug);
            j.iostats = iostats;
            Plan::new(label(plug, iostats).replace(' ', "-"), vec![j])
        })
        .collect();
    let results = r.rounds(&plan)?;

    let mut t = Table::with_spreads(
        &["plug", "clock_reads"],
        &["cpu_ns_per_io", "iops"],
        &["rounds", "allocs_per_io"],
    );
    let cpu: Vec<Spread> = results
        .iter()
        .map(|res| res.spread(|f| f.cpu_ns_process_per_io()))
        .collect();
    for (res, (&(plug, iostats), c)) in results.iter().zip(SETTINGS.iter().zip(&cpu)) {
        let mut row = vec![on_off(plug), on_off(iostats)];
        row.extend(c.cells(1));
        row.extend(res.spread(|f| f.iops).cells(0));
        row.extend([res.count().to_string(), cell(res.median().allocs_per_io, 6)]);
        t.push(row);
    }
    // SETTINGS order: 0 plug+clock, 1 clock only, 2 plug only, 3 neither.
    // A gain pairs round k of one setting with round k of the other.
    let gain = |off: &Rounds, on: &Rounds| off.paired(on, |a, b| 100.0 * (a.iops / b.iops - 1.0));
    let cost = |with: &Rounds, without: &Rounds| {
        with.paired(without, |a, b| {
            a.cpu_ns_process_per_io() - b.cpu_ns_process_per_io()
        })
    };
    let clock_gain = gain(&results[2], &results[0]);
    let plug_gain = gain(&results[1], &results[0]);
    let clock_cost = cost(&results[0], &results[2]);
    let plug_cost = cost(&results[0], &results[1]);
    let allocs = results[0].spread(|f| f.allocs_per_io);
    let (p3, p4, p5) = (
        S003.at("¶3 (hpet and gettimeofday)"),
        S003.at("¶4 (plugging)"),
        S003.at("¶5 (slab allocations)"),
    );
    let seed = vec![
        SeedRow::new(
            "IOPS gained by cheaper clock reads",
            format!(
                "over {SEED_CLOCK_GAIN_PERCENT:.0}% from a TSC clock instead of hpet; fio's \
                 gettimeofday calls per I/O cost more still"
            ),
            p3.cite(),
            format!(
                "{}% from iostats=0 (no clock read) over iostats=1; the reads cost {} CPU ns \
                 per I/O",
                spread_cell(&clock_gain, 1),
                cell(clock_cost.median, 1)
            ),
            if clock_gain.max < SEED_CLOCK_GAIN_PERCENT {
                "smaller than the seed's in every round: the layer reads the clock once per \
                 batch, not per I/O"
            } else if clock_gain.min >= SEED_CLOCK_GAIN_PERCENT {
                "as large as the seed's in every round: on a null device an I/O costs so \
                 little that even a read per batch shows"
            } else {
                "the rounds straddle the seed's figure: one clock read per batch costs a few \
                 ns per I/O, a noticeable share of an I/O on a null device"
            },
        ),
        SeedRow::new(
            "IOPS gained by turning plugging off",
            format!("about {SEED_PLUG_GAIN_PERCENT:.0}%, on an SSD at 30–40k IOPS"),
            p4.cite(),
            format!(
                "{}% (plug=off over plug=on, clock on); plugging costs {} CPU ns per I/O",
                spread_cell(&plug_gain, 1),
                cell(plug_cost.median, 1)
            ),
            if plug_gain.below(0.0) {
                "the opposite of the seed's: here plugging is what batches submissions into one \
                 commit to the driver, so turning it off loses IOPS; the seed's plug only \
                 delayed an SSD's commands"
            } else if plug_gain.above(0.0) {
                "the seed's direction: plugging costs a little on a fast device"
            } else {
                "within the rounds' spread of zero, as the seed's 1% was nearly"
            },
        ),
        SeedRow::new(
            "heap allocations per I/O",
            format!(
                "{SEED_ALLOCS_PER_IO} (bio, bio_vec list, request, SCSI command, sense buffer); \
                 folding them into one and caching requests gained {:.0}–{:.0}%",
                SEED_ALLOC_GAIN_PERCENT.0, SEED_ALLOC_GAIN_PERCENT.1
            ),
            p5.cite(),
            format!(
                "{} (counted by the allocator over the measured run)",
                spread_cell(&allocs, 6)
            ),
            if allocs.max < 0.01 {
                "past the seed's end point: no allocation per I/O at all"
            } else {
                "allocations remain on the path"
            },
        ),
    ];
    let figure = Figure {
        panels: vec![
            Panel::Bars(BarChart {
                title: "plug: CPU time per I/O with plugging and clock reads on and off".into(),
                y: Axis::new("CPU ns per I/O, whole process", Scale::Linear, Unit::Count),
                categories: SETTINGS.iter().map(|&(p, c)| label(p, c)).collect(),
                series: vec![Bars {
                    name: "null device, randread 4k, QD32".into(),
                    values: cpu.iter().map(|s| s.median).collect(),
                    spread: cpu.iter().map(|s| (s.min, s.max)).collect(),
                }],
            }),
            Panel::Bars(BarChart {
                title: "plug: IOPS gained by turning each off".into(),
                y: Axis::new("IOPS gained (%)", Scale::Linear, Unit::Count),
                categories: vec!["clock reads off".into(), "plugging off".into()],
                series: vec![
                    Bars {
                        name: "mqblk, null device".into(),
                        values: vec![clock_gain.median, plug_gain.median],
                        spread: vec![
                            (clock_gain.min, clock_gain.max),
                            (plug_gain.min, plug_gain.max),
                        ],
                    },
                    Bars::new(
                        "seed 003 ¶3, ¶4: Linux on an SSD (over 10%; about 1%)",
                        vec![SEED_CLOCK_GAIN_PERCENT, SEED_PLUG_GAIN_PERCENT],
                    ),
                ],
            }),
        ],
        caption: seed::caption(&[p3, p4, p5]),
    };
    let answer = format!(
        "Turning clock reads off changes IOPS by {}% (the seed: over \
         {SEED_CLOCK_GAIN_PERCENT:.0}% more), turning plugging off by {}% (the seed: about \
         {SEED_PLUG_GAIN_PERCENT:.0}% more), and the path makes {} heap allocations per I/O \
         (the seed: {SEED_ALLOCS_PER_IO}).",
        cell(clock_gain.median, 1),
        cell(plug_gain.median, 1),
        cell(allocs.median, 3)
    );
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes: vec![
            format!(
                "Workload: rw=randread, bs=4k, iodepth=32, one job on the null device, {} ms \
                 per point, {} rounds of the four settings in turn; the table gives the \
                 median with the lowest and highest, and gains pair round k with round k.",
                r.runtime(POINT_RUNTIME).as_millis(),
                super::point::ROUNDS
            ),
            "Clock reads are the layer's accounting (iostats=1: one clock read per batch); \
             iostats=0 reads no clock. A negative cost means the setting saves CPU."
                .into(),
            format!(
                "IOPS for reference: {}.",
                results
                    .iter()
                    .zip(SETTINGS)
                    .map(|(res, (p, c))| format!(
                        "{} {}",
                        label(p, c),
                        format_value(res.spread(|f| f.iops).median, Unit::Count)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ],
    })
}
