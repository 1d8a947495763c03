//! Criterion benchmarks of the layer's hot path on the null device: a batch
//! of 32 bios through submit → plug → dispatch → inline completion → poll,
//! per queue mode, and the same with a 16-segment vectored bio. Throughput
//! is reported in I/Os, so criterion prints time per I/O.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mqblk::{Bio, Op};

const BATCH: u64 = 32;

fn batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("null_inline_batch32");
    g.throughput(Throughput::Elements(BATCH));
    for mode in ["mq", "device-lock", "global-lock"] {
        for segments in [1u32, 16] {
            let dev = mqblk::open(&format!("null,size=1G,hw_queues=1,queue_mode={mode}")).unwrap();
            let mut ctx = dev.context().unwrap();
            let mut bios: Vec<Bio> = (0..BATCH)
                .map(|_| {
                    let mut b = Bio::at(Op::Read, 0);
                    for _ in 0..segments {
                        b.push_segment(dev.alloc_buf(4096), 0, 4096);
                    }
                    b
                })
                .collect();
            let mut sector = 0u64;
            g.bench_with_input(
                BenchmarkId::new(mode, format!("{segments}seg")),
                &segments,
                |b, _| {
                    b.iter(|| {
                        for mut bio in bios.drain(..) {
                            sector = (sector + 8 * u64::from(segments)) % (1 << 21);
                            bio.set_offset_bytes(sector * 512);
                            ctx.submit(bio).unwrap();
                        }
                        let mut n = 0;
                        while n < BATCH as usize {
                            n += ctx.poll_wait(1, |c| bios.push(c.into_bio()));
                        }
                    })
                },
            );
        }
    }
    g.finish();
}

criterion_group!(benches, batch);
criterion_main!(benches);
