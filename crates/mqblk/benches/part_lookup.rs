//! The cost of partition accounting (seed 003's one-hit cache): the
//! lookup alone (`mqblk::partition::lookup`) and a whole I/O on the null
//! device with the disk's partitions registered, for 4 and 128 partitions,
//! with the cache on and off, beside the same I/O with no partitions.
//!
//! Two access patterns: random sectors inside the last partition (a job on
//! one partition, as a database on its own partition is; without the cache
//! every lookup scans the whole table), and random sectors over the whole
//! disk (the cache mostly misses). Throughput is in lookups or I/Os, so
//! criterion prints time per lookup or per I/O.
//!
//!     cargo bench -p mqblk --bench part_lookup

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mqblk::{Bio, Op, PartitionRange};

/// Partition length in 512-byte sectors (16 MiB); the disk holds 128 of
/// them after the first MiB.
const PART_SECTORS: u64 = 32768;
const FIRST: u64 = 2048;
const BATCH: u64 = 32;

fn ranges(n: u64) -> Vec<PartitionRange> {
    (0..n)
        .map(|i| PartitionRange {
            start_sector: FIRST + i * PART_SECTORS,
            nr_sectors: PART_SECTORS,
            name: format!("nullb0p{}", i + 1),
        })
        .collect()
}

/// `len` random 4 KiB-aligned sectors: inside the last of `n` partitions,
/// or anywhere in the `n` partitions.
fn sectors(n: u64, last_only: bool, len: usize) -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (base, span) = if last_only {
                (FIRST + (n - 1) * PART_SECTORS, PART_SECTORS)
            } else {
                (FIRST, n * PART_SECTORS)
            };
            base + (x % (span / 8)) * 8
        })
        .collect()
}

fn lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("part_lookup");
    g.measurement_time(Duration::from_secs(2));
    g.warm_up_time(Duration::from_millis(500));
    let len = 4096;
    g.throughput(Throughput::Elements(len as u64));
    for n in [4u64, 128] {
        let bounds: Vec<(u64, u64)> = ranges(n)
            .iter()
            .map(|r| (r.start_sector, r.start_sector + r.nr_sectors))
            .collect();
        for (pattern, last_only) in [("one_partition", true), ("whole_disk", false)] {
            let s = sectors(n, last_only, len);
            for cache in [true, false] {
                let id = format!("{n}parts/{pattern}/cache={}", u8::from(cache));
                let mut last = 0usize;
                g.bench_function(BenchmarkId::from_parameter(id), |b| {
                    b.iter(|| {
                        let mut hits = 0usize;
                        for &sector in &s {
                            hits += mqblk::partition::lookup(
                                std::hint::black_box(&bounds),
                                &mut last,
                                cache,
                                sector,
                            )
                            .is_some() as usize;
                        }
                        hits
                    })
                });
            }
        }
    }
    g.finish();
}

fn io(c: &mut Criterion) {
    let mut g = c.benchmark_group("part_io_null_inline_batch32");
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(BATCH));
    let mut cases: Vec<(u64, Option<bool>)> = vec![(128, None)];
    for n in [4u64, 128] {
        cases.push((n, Some(true)));
        cases.push((n, Some(false)));
    }
    for (n, cache) in cases {
        let spec = format!(
            "null,size={}M,hw_queues=1,part_cache={}",
            (FIRST + 128 * PART_SECTORS) / 2048,
            u8::from(cache.unwrap_or(true))
        );
        let dev = mqblk::open(&spec).unwrap();
        if cache.is_some() {
            dev.set_partitions(&ranges(n), Duration::from_secs(10))
                .unwrap();
        }
        let mut ctx = dev.context().unwrap();
        let mut bios: Vec<Bio> = (0..BATCH)
            .map(|_| {
                let mut b = Bio::at(Op::Read, 0);
                b.push_segment(dev.alloc_buf(4096), 0, 4096);
                b
            })
            .collect();
        let s = sectors(n, true, 4096);
        let mut i = 0usize;
        let id = match cache {
            None => "no_partitions".to_string(),
            Some(c) => format!("{n}parts/one_partition/cache={}", u8::from(c)),
        };
        g.bench_function(BenchmarkId::from_parameter(id), |b| {
            b.iter(|| {
                for mut bio in bios.drain(..) {
                    i = (i + 1) % s.len();
                    bio.set_offset_bytes(s[i] * 512);
                    ctx.submit(bio).unwrap();
                }
                let mut done = 0;
                while done < BATCH as usize {
                    done += ctx.poll_wait(1, |c| bios.push(c.into_bio()));
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, lookup, io);
criterion_main!(benches);
