//! `repro submits` (seed 000, Table 8 and §6): how many pieces one 128 KiB
//! read is cut into on its way to the device, and how many requests reach
//! the driver, with merging on and off, as the device's `max_sectors` is
//! swept. Three ways to read 128 KiB on the null device: one 128 KiB bio
//! (split to `max_sectors`), and 32 contiguous 4 KiB bios in flight
//! together, merged in the plug (`nomerges=0`) or not (`nomerges=2`).
//! The seed's raw I/O cut 128 KiB into 256 buffer heads of 512 bytes (its
//! rawvary patch: 32 of 4 KiB), each entering the request queue.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Figures, Plan, Rounds, Runner, Spread};
use super::seed::{self, S000};
use super::table::{SeedRow, Table};
use mqblk_bench::RwMode;
use mqblk_plot::chart::{Axis, Figure, LineChart, Panel, Scale, Series, Unit};

const READ_BYTES: u64 = 128 << 10;
const MAX_SECTORS: [u32; 6] = [8, 16, 32, 64, 128, 256];
const POINT_RUNTIME: Duration = Duration::from_millis(300);

/// Seed 000, Table 8: calls for 128 reads of 128 KiB, before and after
/// the rawvary patch.
const SEED_READS: f64 = 128.0;
const SEED_SUBMIT_BH: (f64, f64) = (32768.0, 4096.0);
const SEED_MAKE_REQUEST: (f64, f64) = (32789.0, 4160.0);
const SEED_MERGE_TRIES: (f64, f64) = (32659.0, 4029.0);

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
        name: "32 × 4 KiB bios (merging on)",
        bs: 4 << 10,
        iodepth: 32,
        nomerges: 0,
    },
    Way {
        name: "32 × 4 KiB bios (merging off)",
        bs: 4 << 10,
        iodepth: 32,
        nomerges: 2,
    },
];

/// 128 KiB reads submitted (counted at submission, as requests are).
fn reads(f: &Figures, way: &Way) -> f64 {
    (f.bios as f64 * way.bs as f64 / READ_BYTES as f64).max(1e-9)
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let mut plan = Vec::new();
    for (wi, way) in WAYS.iter().enumerate() {
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
            plan.push(Plan::new(format!("way{wi}-max_sectors{ms}"), vec![j]));
        }
    }
    let results = r.rounds(&plan)?;
    let at = |wi: usize, ms: u32| -> &Rounds {
        let k = MAX_SECTORS.iter().position(|&m| m == ms).unwrap_or(0);
        &results[wi * MAX_SECTORS.len() + k]
    };

    let mut t = Table::with_spreads(
        &["way", "max_sectors", "max_request_kib"],
        &["requests_per_128k"],
        &[
            "rounds",
            "bios_per_128k",
            "merges_per_128k",
            "splits_per_128k",
            "iops",
            "cpu_ns_per_io",
        ],
    );
    let mut request_lines = Vec::new();
    let mut bio_lines = Vec::new();
    for (wi, way) in WAYS.iter().enumerate() {
        let mut req = Series::new(way.name);
        let mut bio = Series::new(way.name);
        for ms in MAX_SECTORS {
            let res = at(wi, ms);
            let rq = res.spread(|f| f.requests as f64 / reads(f, way));
            let bios = res.spread(|f| f.bios as f64 / reads(f, way));
            let f = res.median();
            let per = |n: u64| n as f64 / reads(f, way);
            let mut row = vec![way.name.to_string(), ms.to_string(), (ms / 2).to_string()];
            row.extend(rq.cells(2));
            row.extend([
                res.count().to_string(),
                cell(per(f.bios), 2),
                cell(per(f.merges), 2),
                cell(per(f.splits), 2),
                cell(f.iops, 0),
                cell(f.cpu_ns_process_per_io(), 0),
            ]);
            t.push(row);
            let kib = f64::from(ms / 2);
            req.push_spread(kib, rq.median, rq.min, rq.max);
            bio.push_spread(kib, bios.median, bios.min, bios.max);
        }
        request_lines.push(req);
        bio_lines.push(bio);
    }
    let table8 = S000.at("Table 8");
    let flat = |y: f64| {
        MAX_SECTORS
            .iter()
            .map(|&ms| (f64::from(ms / 2), y))
            .collect()
    };
    bio_lines.push(Series::seed(
        format!("{}: 2.4.17, 512-byte buffer heads", table8.short()),
        flat(SEED_MAKE_REQUEST.0 / SEED_READS),
    ));
    bio_lines.push(Series::seed(
        format!("{}: rawvary patch, 4 KiB buffer heads", table8.short()),
        flat(SEED_MAKE_REQUEST.1 / SEED_READS),
    ));

    // The seed beside ours, at a limit of 128 KiB (max_sectors=256).
    let spread_at = |wi: usize, f: &dyn Fn(&Figures) -> f64| -> Spread { at(wi, 256).spread(f) };
    let bios_of = |wi: usize| spread_at(wi, &|f| f.bios as f64 / reads(f, &WAYS[wi]));
    let reqs_of = |wi: usize| spread_at(wi, &|f| f.requests as f64 / reads(f, &WAYS[wi]));
    let merges_of = |wi: usize| spread_at(wi, &|f| f.merges as f64 / reads(f, &WAYS[wi]));
    let seed = vec![
        SeedRow::new(
            "pieces a 128 KiB read enters the request queue as (seed: submit_bh calls; ours: bios)",
            format!(
                "{:.0} of 512 bytes (2.4.17), {:.0} of 4 KiB with the rawvary patch: {:.0}× fewer",
                SEED_SUBMIT_BH.0 / SEED_READS,
                SEED_SUBMIT_BH.1 / SEED_READS,
                SEED_SUBMIT_BH.0 / SEED_SUBMIT_BH.1
            ),
            table8.cite(),
            format!(
                "{} (one 128 KiB bio) or {} (4 KiB bios)",
                cell(bios_of(0).median, 0),
                cell(bios_of(1).median, 0)
            ),
            "the same shape as rawvary, one step further: a large bio is one piece, cut only \
             where the device's limit requires",
        ),
        SeedRow::new(
            "calls into the queue's make_request per 128 KiB read",
            format!(
                "{:.1} (2.4.17), {:.1} (rawvary)",
                SEED_MAKE_REQUEST.0 / SEED_READS,
                SEED_MAKE_REQUEST.1 / SEED_READS
            ),
            table8.cite(),
            format!(
                "requests built at a 128 KiB limit: {} (one bio), {} (4 KiB bios merged), {} \
                 (not merged)",
                cell(reqs_of(0).median, 2),
                cell(reqs_of(1).median, 2),
                cell(reqs_of(2).median, 2)
            ),
            "ours counts requests after merging; the seed counts pieces before it",
        ),
        SeedRow::new(
            "merge attempts per 128 KiB read (elevator_linus_merge)",
            format!(
                "{:.1} (2.4.17), {:.1} (rawvary)",
                SEED_MERGE_TRIES.0 / SEED_READS,
                SEED_MERGE_TRIES.1 / SEED_READS
            ),
            table8.cite(),
            format!(
                "merges: {} (one bio), {} (4 KiB bios, merging on), {} (merging off)",
                cell(merges_of(0).median, 2),
                cell(merges_of(1).median, 2),
                cell(merges_of(2).median, 2)
            ),
            "the same shape: merging does the work that cutting into small pieces made; \
             one large bio needs none",
        ),
    ];

    let x = || {
        Axis::new(
            "largest request: max_sectors × 512 bytes (KiB)",
            Scale::Log2,
            Unit::Count,
        )
    };
    let figure = Figure {
        panels: vec![
            Panel::Lines(LineChart {
                title: "submits: pieces a 128 KiB read enters the queue as".into(),
                x: x(),
                y: Axis::new(
                    "bios per 128 KiB (seed: make_request calls)",
                    Scale::Log2,
                    Unit::Count,
                ),
                series: bio_lines,
            }),
            Panel::Lines(LineChart {
                title: "submits: requests per 128 KiB read against the request size limit".into(),
                x: x(),
                y: Axis::new("requests per 128 KiB read", Scale::Log2, Unit::Count),
                series: request_lines,
            }),
        ],
        caption: seed::caption(&[table8]),
    };
    let answer = format!(
        "A 128 KiB read enters the queue as {} bio (the seed's 2.4.17: {:.0} buffer heads; \
         rawvary: {:.0}); 32 bios of 4 KiB are merged into {} request at a 128 KiB limit, and \
         split or merged requests follow the limit down to 4 KiB.",
        cell(bios_of(0).median, 0),
        SEED_SUBMIT_BH.0 / SEED_READS,
        SEED_SUBMIT_BH.1 / SEED_READS,
        cell(reqs_of(1).median, 2)
    );
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes: vec![
            r.workload_note(
                "rw=read (sequential) on null,max_sectors=N,nomerges=0|2,plug=on, one job",
                POINT_RUNTIME,
            ),
            "A 128 KiB bio is split where max_sectors requires (splits_per_128k); 4 KiB \
             bios in flight together are merged in the plug up to max_sectors."
                .into(),
            "The one-bio line and the merged line have the same requests at every limit: \
             the plot draws the second dashed on the first."
                .into(),
        ],
    })
}
