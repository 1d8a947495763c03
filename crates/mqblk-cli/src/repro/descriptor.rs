//! `repro descriptor` (seed 000 §8): the memory one in-flight I/O costs.
//! Linux 2.4's kiobuf took 8792 bytes. Ours is the request plus its bio
//! slot (`mqblk::descriptor_bytes()`), and, measured, the heap a null
//! device and one context take per tag as the queue depth grows (the
//! slope of the heap bytes against the depth); a bench run at each depth
//! shows the device working at that depth.

use std::time::Duration;

use anyhow::Result;

use super::outcome::Outcome;
use super::point::{cell, job, Runner};
use super::table::{SeedRow, Table, NOT_RECORDED};
use crate::alloc_count;
use crate::bench::job::RwMode;
use crate::plot::chart::{Axis, BarChart, Figure, LineChart, Panel, Scale, Series, Unit};

const DEPTHS: [u32; 6] = [32, 64, 128, 256, 512, 1024];
const POINT_RUNTIME: Duration = Duration::from_millis(300);
/// Linux 2.4's kiobuf (seed 000 §8; DESIGN.md).
const KIOBUF_BYTES: f64 = 8792.0;

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
    let mut t = Table::new(&[
        "queue_depth",
        "heap_bytes",
        "heap_bytes_per_added_tag",
        "descriptor_bytes",
        "iops",
        "allocs_per_io",
    ]);
    let mut heap = Vec::new();
    let mut descriptor = mqblk::descriptor_bytes() as u64;
    let mut previous: Option<(u32, i64)> = None;
    for depth in DEPTHS {
        let held = heap_bytes(depth)?;
        let mut j = job(
            "descriptor",
            RwMode::RandRead,
            4096,
            depth,
            r.runtime(POINT_RUNTIME),
        );
        j.devices = vec![format!("null,hw_queues=1,queue_depth={depth}")];
        let f = r.point(&format!("depth{depth}"), &[j])?;
        descriptor = f.descriptor_bytes;
        t.push(vec![
            depth.to_string(),
            held.to_string(),
            previous.map_or("-".into(), |(d, h)| {
                cell((held - h) as f64 / f64::from(depth - d), 1)
            }),
            f.descriptor_bytes.to_string(),
            cell(f.iops, 0),
            cell(f.allocs_per_io, 6),
        ]);
        heap.push((f64::from(depth), held as f64));
        previous = Some((depth, held));
    }
    let per_tag = slope(&heap);
    let seed = vec![
        SeedRow::new(
            "bytes per in-flight I/O: Linux 2.4 kiobuf against mqblk's request + bio",
            "8792 (kiobuf; DESIGN.md)",
            descriptor.to_string(),
        ),
        SeedRow::new(
            "bytes per in-flight I/O: Linux's struct bio",
            NOT_RECORDED,
            descriptor.to_string(),
        ),
        SeedRow::new(
            "heap bytes per tag, measured (slope over depths 32 to 1024)",
            "—",
            cell(per_tag, 1),
        ),
        SeedRow::new(
            "kiobuf ÷ ours",
            "—",
            cell(KIOBUF_BYTES / descriptor as f64, 1),
        ),
    ];
    let figure = Figure {
        panels: vec![
            Panel::Bars(BarChart {
                title: "descriptor: bytes per in-flight I/O".into(),
                y: Axis::new("bytes per in-flight I/O (log)", Scale::Log10, Unit::Count),
                categories: vec![
                    "Linux 2.4 kiobuf".into(),
                    "mqblk request + bio".into(),
                    "mqblk heap per tag (measured)".into(),
                ],
                series: vec![(
                    "bytes".into(),
                    vec![KIOBUF_BYTES, descriptor as f64, per_tag],
                )],
            }),
            Panel::Lines(LineChart {
                title: "descriptor: heap of a null device and a context against its depth".into(),
                x: Axis::new("queue depth (tags)", Scale::Log2, Unit::Count),
                y: Axis::new("heap bytes held (log)", Scale::Log2, Unit::Bytes),
                series: vec![Series {
                    name: "null,hw_queues=1 + one context".into(),
                    points: heap,
                }],
            }),
        ],
    };
    Ok(Outcome {
        points: t,
        seed,
        figure,
        notes: vec![
            "descriptor_bytes is mqblk::descriptor_bytes(): a Request, its BioNode (the bio \
             with four segments inline) and the request's atomics."
                .into(),
            "heap_bytes: bytes the process allocated and still held after opening the \
             device and one context (the counting allocator's live bytes); the slope over \
             depths is the cost of one more tag, everything per tag included."
                .into(),
            format!(
                "Each depth also runs rw=randread, bs=4k, iodepth=depth for {} ms.",
                r.runtime(POINT_RUNTIME).as_millis()
            ),
            "The size of Linux's struct bio, the seed's other figure, is not recorded in \
             this repository."
                .into(),
        ],
    })
}
