//! The stacked driver over ram and null legs, with no syscalls, so that
//! Miri checks its clones and completions: tables of several lines and
//! targets, checked against a plain in-memory model.

use mqblk_core::spec::parse;
use mqblk_core::{Device, Error, Result};
use proptest::prelude::*;

fn opener(spec: &str) -> Result<Device> {
    let s = parse(spec)?;
    match s.kind.as_str() {
        "ram" => mqblk_ram::open(s.options),
        "null" => mqblk_null::open(s.options),
        other => Err(Error::spec(spec, format!("no `{other}` in this test"))),
    }
}

fn open(table: &str) -> Device {
    mqblk_dm::open_inline(
        table,
        parse(&format!("dm-table:{table}")).unwrap().options,
        &mqblk_dm::Nesting::default(),
        &|spec, _| opener(spec),
    )
    .unwrap()
}

/// 96 KiB: a linear line over leg A, a striped line over A and B (chunk 8
/// sectors), and a zero line.
const TABLE: &str = "0 64 linear ram,size=64k,hw_queues=1 0;\
                     64 64 striped 2 8 ram,size=64k,hw_queues=1 64 ram,size=32k,hw_queues=2 0;\
                     128 64 zero";

#[derive(Debug, Clone)]
enum Step {
    Write {
        sector: u64,
        sectors: u64,
        seed: u8,
        segs: usize,
    },
    Read {
        sector: u64,
        sectors: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u64..190, 1u64..16, any::<u8>(), 1usize..4).prop_map(|(sector, sectors, seed, segs)| {
            Step::Write {
                sector,
                sectors,
                seed,
                segs,
            }
        }),
        (0u64..190, 1u64..16).prop_map(|(sector, sectors)| Step::Read { sector, sectors }),
    ]
}

fn range(size: usize, sector: u64, sectors: u64) -> (usize, usize) {
    let off = sector as usize * 512;
    (off, (sectors as usize * 512).min(size - off))
}

proptest! {
    // Under Miri (about a thousand times slower) 4 cases: the paths are
    // the same, and CI's budget is shared with every other target.
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 16 },
        ..ProptestConfig::default()
    })]
    #[test]
    fn a_table_reads_back_what_a_model_holds(steps in proptest::collection::vec(step(), 1..12)) {
        let dev = open(TABLE);
        let size = dev.capacity_bytes() as usize;
        let mut model = vec![0u8; size];
        let mut ctx = dev.context().unwrap();
        for s in steps {
            match s {
                Step::Write { sector, sectors, seed, segs } => {
                    let (off, len) = range(size, sector, sectors);
                    let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_add(seed)).collect();
                    // Several segments: pieces are cut across them.
                    let cut = (len / segs / 512).max(1) * 512;
                    let parts: Vec<std::io::IoSlice<'_>> =
                        data.chunks(cut).map(std::io::IoSlice::new).collect();
                    ctx.writev_at(&parts, off as u64).unwrap();
                    // The zero line drops writes.
                    for (i, b) in data.iter().enumerate() {
                        if off + i < 128 * 512 {
                            model[off + i] = *b;
                        }
                    }
                }
                Step::Read { sector, sectors } => {
                    let (off, len) = range(size, sector, sectors);
                    let mut back = vec![0xa5u8; len];
                    ctx.read_at(&mut back, off as u64).unwrap();
                    prop_assert_eq!(&back[..], &model[off..off + len]);
                }
            }
        }
        ctx.flush().unwrap();
    }
}

#[test]
fn contexts_on_several_threads_share_the_table() {
    let dev = open("0 256 striped 2 8 ram,size=64k,hw_queues=1 0 ram,size=64k,hw_queues=2 0");
    std::thread::scope(|s| {
        for t in 0..2u8 {
            let dev = dev.clone();
            s.spawn(move || {
                let mut ctx = dev.context().unwrap();
                let off = u64::from(t) * 64 * 1024;
                let data = vec![t + 1; 64 * 1024];
                ctx.write_at(&data, off).unwrap();
                let mut back = vec![0u8; data.len()];
                ctx.read_at(&mut back, off).unwrap();
                assert_eq!(back, data);
            });
        }
    });
}

#[test]
fn an_error_line_fails_only_what_touches_it() {
    let dev = open("0 8 linear ram,size=4k 0;8 8 error");
    let mut ctx = dev.context().unwrap();
    let mut b = vec![0u8; 4096];
    ctx.write_at(&b, 0).unwrap();
    assert!(ctx.read_at(&mut b, 4096).is_err());
    let mut both = vec![0u8; 8192];
    assert!(ctx.read_at(&mut both, 0).is_err());
    ctx.read_at(&mut b, 0).unwrap();
}

#[test]
fn a_one_line_linear_table_is_a_window_of_its_leg() {
    let lower = opener("ram,size=64k").unwrap();
    let dev = mqblk_dm::linear(lower.clone(), 16 << 10, 32 << 10, "ram0p1").unwrap();
    assert_eq!(dev.capacity_bytes(), 32 << 10);
    let (disk, start) = dev.remapped_from().unwrap();
    assert!(disk.same(&lower));
    assert_eq!(start, 16 << 10);
    let mut ctx = dev.context().unwrap();
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    ctx.write_at(&data, 4096).unwrap();
    // The callback sees the bio at the offset it was submitted with.
    let mut b = mqblk_core::Bio::read_at(4096, dev.alloc_buf(8192));
    b.private = 7;
    ctx.submit(b).unwrap();
    let mut seen = None;
    ctx.poll_wait(1, |c| {
        seen = Some((c.bio().offset_bytes(), c.private(), c.status()))
    });
    assert_eq!(seen, Some((4096, 7, mqblk_core::Status::Ok)));
    let mut back = vec![0u8; 8192];
    lower
        .context()
        .unwrap()
        .read_at(&mut back, (16 << 10) + 4096)
        .unwrap();
    assert_eq!(back, data);
    // Past the window: refused, named, with the window's offset; the
    // neighbour is untouched.
    let e = ctx.write_at(&data, (32 << 10) - 4096).unwrap_err();
    match &e {
        Error::OutOfRange {
            device,
            offset_bytes,
            capacity_bytes,
            ..
        } => {
            assert_eq!(&**device, "ram0p1");
            assert_eq!(*offset_bytes, (32 << 10) - 4096);
            assert_eq!(*capacity_bytes, 32 << 10);
        }
        other => panic!("{other}"),
    }
    let mut after = vec![1u8; 16 << 10];
    lower
        .context()
        .unwrap()
        .read_at(&mut after, 48 << 10)
        .unwrap();
    assert!(after == vec![0; after.len()]);
    // A window of a window adds up; stats count on the view and the disk.
    let inner = dev.remap(8192, 8192, "ram0p1a", false, None).unwrap();
    let mut ictx = inner.context().unwrap();
    let mut four = vec![0u8; 4096];
    ictx.read_at(&mut four, 0).unwrap();
    assert_eq!(four, data[4096..8192]);
    drop((ctx, ictx));
    let view = dev.stats().snapshot();
    let disk = lower.stats().snapshot();
    assert_eq!(view.ios[0], 2, "{view:?}");
    assert!(disk.ios[0] >= 3 && disk.ios[1] >= 1, "{disk:?}");
    ctx_flush(&dev);
}

fn ctx_flush(dev: &Device) {
    dev.context().unwrap().flush().unwrap();
}
