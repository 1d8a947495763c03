//! `repro descriptor` (seed 000 §2 and §8): the memory one in-flight I/O
//! costs. Linux 2.4.17's kiobuf took 8792 bytes (608 after the seed's
//! patch). Ours is the request plus its bio
//! slot (`mqblk::descriptor_bytes()`), and, measured, the heap a null
//! device and one context take per tag as the queue depth grows (the
//! slope of the heap bytes against the depth); a bench run at each depth
//! shows the device working at that depth.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Plan, Runner, Spread};
use super::seed::{self, S000};
use super::table::{spread_cell, SeedRow, Table};
use mqblk_bench::alloc_count;
use mqblk_bench::RwMode;
use mqblk_plot::chart::{Axis, BarChart, Bars, Figure, LineChart, Panel, Scale, Series, Unit};

const DEPTHS: [u32; 6] = [32, 64, 128, 256, 512, 1024];
const POINT_RUNTIME: Duration = Duration::from_millis(300);
/// Seed 000 §8: Linux 2.4.17's kiobuf, its two arrays of
/// `KIO_MAX_SECTORS` entries, and the kiobuf after the seed's patch.
const KIOBUF_BYTES: f64 = 8792.0;
const KIO_MAX_SECTORS: u32 = 1024;
const KIO_ARRAYS_BYTES: f64 = 8192.0;
const LIGHT_KIOBUF_BYTES: f64 = 608.0;
/// Segments a bio stores inline.
const INLINE_SEGMENTS: usize = mqblk::bio::BIO_INLINE_SEGMENTS;

/// Heap bytes a null device with one hardware queue of `depth` tags and
/// one context hold.
fn heap_bytes(depth: u32) -> Result<i64> {
    let before = alloc_count::live_bytes();
    let dev = mqblk::open(&format!("null,hw_queues=1,queue_depth={depth}"))?;
    let ctx = dev.context()?;
    let held = alloc_count::live_bytes() - before;
    drop(ctx);
    drop(dev);
    Ok(held)
}

/// Least-squares slope of y against x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    sxy / sxx
}

/// Run the experiment.
pub fn run(r: &mut Runner) -> Result<Outcome> {
    let mut t = Table::with_spreads(
        &["queue_depth"],
        &["heap_bytes"],
        &[
            "heap_bytes_per_added_tag",
            "descriptor_bytes",
            "rounds",
            "iops",
            "allocs_per_io",
        ],
    );
    // The heap a device holds, measured once per round at every depth.
    let mut held: Vec<Vec<f64>> = vec![Vec::new(); DEPTHS.len()];
    for _ in 0..super::point::ROUNDS {
        for (i, depth) in DEPTHS.into_iter().enumerate() {
            held[i].push(heap_bytes(depth)? as f64);
        }
    }
    let plan: Vec<Plan> = DEPTHS
        .iter()
        .map(|&depth| {
            let mut j = job(
                "descriptor",
                RwMode::RandRead,
                4096,
                depth,
                r.runtime(POINT_RUNTIME),
            );
            j.devices = vec![format!("null,hw_queues=1,queue_depth={depth}")];
            Plan::new(format!("depth{depth}"), vec![j])
        })
        .collect();
    let results = r.rounds(&plan)?;
    let mut descriptor = mqblk::descriptor_bytes() as u64;
    let mut heap_line = Series::new("null,hw_queues=1 + one context");
    let mut previous: Option<(u32, f64)> = None;
    for ((depth, h), res) in DEPTHS.into_iter().zip(&held).zip(&results) {
        let heap = Spread::of(h);
        let f = res.median();
        descriptor = f.descriptor_bytes;
        let mut row = vec![depth.to_string()];
        row.extend(heap.cells(0));
        row.extend([
            previous.map_or("-".into(), |(d, m)| {
                cell((heap.median - m) / f64::from(depth - d), 1)
            }),
            f.descriptor_bytes.to_string(),
            res.count().to_string(),
            cell(f.iops, 0),
            cell(f.allocs_per_io, 6),
        ]);
        t.push(row);
        heap_line.push_spread(f64::from(depth), heap.median, heap.min, heap.max);
        previous = Some((depth, heap.median));
    }
    // The slope in each round, so that the cost of a tag has a spread too.
    let per_tag = Spread::of(
        &(0..super::point::ROUNDS)
            .map(|k| {
                slope(
                    &DEPTHS
                        .iter()
                        .zip(&held)
                        .map(|(&d, h)| (f64::from(d), h[k]))
                        .collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>(),
    );
    let (s2, s8) = (S000.at("§2"), S000.at("§8"));
    let seed = vec![
        SeedRow::new(
            "bytes of the descriptor one raw I/O goes through",
            format!(
                "{KIOBUF_BYTES:.0} (the 2.4.17 kiobuf, one per open raw device, from vmalloc \
                 space); {LIGHT_KIOBUF_BYTES:.0} after the lightweight-kiobuf patch"
            ),
            s8.cite(),
            format!("{descriptor} (request + bio, per in-flight I/O)"),
            format!(
                "{} times smaller than the kiobuf, {} times the patched one's",
                cell(KIOBUF_BYTES / descriptor as f64, 1),
                cell(descriptor as f64 / LIGHT_KIOBUF_BYTES, 2)
            ),
        ),
        SeedRow::new(
            "what makes the descriptor large",
            format!(
                "two arrays of {KIO_MAX_SECTORS} entries (buffer-head pointers and block \
                 numbers): {KIO_ARRAYS_BYTES:.0} of the {KIOBUF_BYTES:.0} bytes"
            ),
            format!("{}; {}", s2.cite(), s8.cite()),
            format!(
                "no per-sector array: {INLINE_SEGMENTS} segments inline in the bio, any \
                 length each"
            ),
            "the patch's direction taken to its end: a descriptor per I/O, not per sector",
        ),
        SeedRow::new(
            "memory per I/O slot, everything included",
            format!(
                "{KIOBUF_BYTES:.0} per open raw device, so memory grew with the devices opened"
            ),
            s8.cite(),
            format!(
                "{} heap bytes per added tag (slope over depths {} to {})",
                spread_cell(&per_tag, 0),
                DEPTHS[0],
                DEPTHS[DEPTHS.len() - 1]
            ),
            "ours grows with the tags a device has, fixed when it is created",
        ),
    ];
    let figure = Figure {
        panels: vec![
            Panel::Bars(BarChart {
                title: "descriptor: bytes per in-flight I/O".into(),
                y: Axis::new("bytes (log)", Scale::Log10, Unit::Count),
                categories: vec![
                    "2.4.17 kiobuf".into(),
                    "patched kiobuf".into(),
                    "request + bio".into(),
                    "heap per tag".into(),
                ],
                series: vec![
                    Bars::new(
                        "seed 000 §8",
                        vec![KIOBUF_BYTES, LIGHT_KIOBUF_BYTES, f64::NAN, f64::NAN],
                    ),
                    Bars {
                        name: "mqblk".into(),
                        values: vec![f64::NAN, f64::NAN, descriptor as f64, per_tag.median],
                        spread: vec![
                            (f64::NAN, f64::NAN),
                            (f64::NAN, f64::NAN),
                            (descriptor as f64, descriptor as f64),
                            (per_tag.min, per_tag.max),
                        ],
                    },
                ],
            }),
            Panel::Lines(LineChart {
                title: "descriptor: heap of a null device and a context against its depth".into(),
                x: Axis::new("queue depth (tags)", Scale::Log2, Unit::Count),
                y: Axis::new("heap bytes held (log)", Scale::Log2, Unit::Bytes),
                series: vec![heap_line],
            }),
        ],
        caption: seed::caption(&[s2, s8]),
    };
    let answer = format!(
        "One in-flight I/O takes {descriptor} bytes of descriptor (the seed's kiobuf: \
         {KIOBUF_BYTES:.0}, {LIGHT_KIOBUF_BYTES:.0} patched), and each tag a device adds holds \
         {} heap bytes in all.",
        cell(per_tag.median, 0)
    );
    Ok(Outcome {
        points: t,
        seed,
        figure,
        answer,
        notes: vec![
            "descriptor_bytes is mqblk::descriptor_bytes(): a Request, its BioNode (the bio \
             with four segments inline) and the request's atomics."
                .into(),
            format!(
                "heap_bytes: bytes the process allocated and still held after opening the \
                 device and one context (the counting allocator's live bytes), measured {} \
                 times at every depth; the slope over depths is the cost of one more tag, \
                 everything per tag included.",
                super::point::ROUNDS
            ),
            format!(
                "Each depth also runs rw=randread, bs=4k, iodepth=depth for {} ms, {} rounds.",
                r.runtime(POINT_RUNTIME).as_millis(),
                super::point::ROUNDS
            ),
        ],
    })
}
