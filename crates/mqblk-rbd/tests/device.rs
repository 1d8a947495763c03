//! The rbd driver against a real cluster (scripts/micro-ceph): data against
//! an in-memory model, flush/discard/write-zeroes semantics, the cache
//! modes, extents, the typed open errors and a read-only snapshot. Each
//! test starts its own cluster and stops it.

mod common;

use common::MicroCeph;
use mqblk_core::{Device, Error};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn open(spec: &str) -> mqblk_core::Result<Device> {
    let s = mqblk_core::spec::parse(spec)?;
    mqblk_rbd::open(s.target.as_deref().unwrap_or(""), s.options)
}

const MIB: u64 = 1 << 20;

/// What the image should hold: bytes, and whether each is known (a
/// discard may keep or zero what it covers: librbd ignores a discard
/// below its granularity).
struct Model {
    data: Vec<u8>,
    known: Vec<bool>,
}

#[derive(Clone, Debug)]
enum ModelOp {
    Write { off: u64, len: u64, seed: u8 },
    Read { off: u64, len: u64 },
    Discard { off: u64, len: u64 },
    WriteZeroes { off: u64, len: u64 },
    Flush,
}

const IMAGE: u64 = 12 * MIB;
const SECTOR: u64 = 512;

fn range() -> impl Strategy<Value = (u64, u64)> {
    // Up to 160 KiB, anywhere (crossing the 4 MiB object boundaries too).
    (0..IMAGE / SECTOR, 1..=320u64).prop_map(|(o, l)| {
        let off = o * SECTOR;
        let len = (l * SECTOR).min(IMAGE - off);
        (off, len)
    })
}

fn op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        4 => (range(), any::<u8>()).prop_map(|((off, len), seed)| ModelOp::Write { off, len, seed }),
        4 => range().prop_map(|(off, len)| ModelOp::Read { off, len }),
        1 => range().prop_map(|(off, len)| ModelOp::Discard { off, len }),
        1 => range().prop_map(|(off, len)| ModelOp::WriteZeroes { off, len }),
        1 => Just(ModelOp::Flush),
    ]
}

fn pattern(off: u64, len: u64, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((off + i) as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn check(model: &Model, got: &[u8], off: u64) -> Result<(), TestCaseError> {
    for (i, b) in got.iter().enumerate() {
        let p = off as usize + i;
        if model.known[p] && model.data[p] != *b {
            return Err(TestCaseError::fail(format!(
                "byte {p}: read {b:#x}, expected {:#x}",
                model.data[p]
            )));
        }
    }
    Ok(())
}

#[test]
fn data_matches_an_in_memory_model() {
    let Some(c) = MicroCeph::start() else { return };
    let spec = c.spec("model", &format!("create={IMAGE}"));
    let dev = open(&spec).unwrap();
    assert_eq!(dev.capacity_bytes(), IMAGE);
    let ctx = dev.context().unwrap();
    let model = Model {
        data: vec![0; IMAGE as usize],
        known: vec![true; IMAGE as usize],
    };
    // The device and the model carry over from case to case: every case
    // (shrunk ones too) runs on what the earlier ones left.
    let st = std::cell::RefCell::new((ctx, model));
    let mut runner = TestRunner::new(Config {
        cases: 12,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(op(), 1..40), |ops| {
            let (ctx, model) = &mut *st.borrow_mut();
            for o in ops {
                match o {
                    ModelOp::Write { off, len, seed } => {
                        let b = pattern(off, len, seed);
                        ctx.write_at(&b, off).unwrap();
                        let r = off as usize..(off + len) as usize;
                        model.data[r.clone()].copy_from_slice(&b);
                        model.known[r].fill(true);
                    }
                    ModelOp::Read { off, len } => {
                        let mut b = vec![0xa5; len as usize];
                        ctx.read_at(&mut b, off).unwrap();
                        check(model, &b, off)?;
                    }
                    ModelOp::Discard { off, len } => {
                        ctx.discard(off, len).unwrap();
                        model.known[off as usize..(off + len) as usize].fill(false);
                    }
                    ModelOp::WriteZeroes { off, len } => {
                        ctx.write_zeroes(off, len).unwrap();
                        let r = off as usize..(off + len) as usize;
                        model.data[r.clone()].fill(0);
                        model.known[r].fill(true);
                    }
                    ModelOp::Flush => ctx.flush().unwrap(),
                }
            }
            Ok(())
        })
        .unwrap();
    let (mut ctx, model) = st.into_inner();
    ctx.flush().unwrap();
    drop(ctx);
    drop(dev);
    // A new handle (another librbd client) sees the same bytes.
    let dev = open(&c.spec("model", "cache=off")).unwrap();
    let mut ctx = dev.context().unwrap();
    let mut b = vec![0; MIB as usize];
    for off in (0..IMAGE).step_by(MIB as usize) {
        ctx.read_at(&mut b, off).unwrap();
        check(&model, &b, off).unwrap();
    }
}

#[test]
fn write_zeroes_zeroes_small_ranges_and_cache_modes_are_reported() {
    let Some(c) = MicroCeph::start() else { return };
    // librbd's cache on (the default, writearound): a volatile write cache.
    let dev = open(&c.spec("wz", "create=16M,cache=on")).unwrap();
    let f = dev.info().features;
    assert!(f.write_cache, "rbd_cache on is a volatile write cache");
    assert!(!f.fua, "FUA is a write and a flush");
    assert!(f.write_zeroes && f.discard && !f.read_only);
    let mut ctx = dev.context().unwrap();
    let data = vec![0x5au8; 64 << 10];
    ctx.write_at(&data, 4 * MIB - 16384).unwrap();
    // 4 KiB inside written data, and 1 KiB across the object boundary:
    // both below librbd's discard granularity; write-zeroes must zero them.
    ctx.write_zeroes(4 * MIB - 12288, 4096).unwrap();
    ctx.write_zeroes(4 * MIB - 512, 1024).unwrap();
    ctx.flush().unwrap();
    let mut b = vec![0u8; 64 << 10];
    ctx.read_at(&mut b, 4 * MIB - 16384).unwrap();
    for (i, &v) in b.iter().enumerate() {
        let at = 4 * MIB - 16384 + i as u64;
        let zero = (4 * MIB - 12288..4 * MIB - 8192).contains(&at)
            || (4 * MIB - 512..4 * MIB + 512).contains(&at);
        assert_eq!(v, if zero { 0 } else { 0x5a }, "byte at {at}");
    }
    // Extents: the written objects are data, the rest holes.
    let ext = dev.extents(0, 16 * MIB).unwrap();
    let covered: u64 = ext.iter().map(|e| e.len_bytes).sum();
    assert_eq!(covered, 16 * MIB, "{ext:?}");
    let at = |o: u64| {
        ext.iter()
            .find(|e| (e.offset_bytes..e.offset_bytes + e.len_bytes).contains(&o))
    };
    assert!(!at(4 * MIB - 16384).unwrap().hole, "{ext:?}");
    assert!(!at(4 * MIB + 4096).unwrap().hole, "{ext:?}");
    assert!(at(8 * MIB).unwrap().hole, "{ext:?}");
    assert!(at(12 * MIB).unwrap().hole, "{ext:?}");
    drop(ctx);
    drop(dev);
    // Cache off: writes are on the OSD when acknowledged; no write cache.
    let dev = open(&c.spec("wz", "cache=off")).unwrap();
    assert!(!dev.info().features.write_cache);
    let mut ctx = dev.context().unwrap();
    ctx.read_at(&mut b, 4 * MIB - 16384).unwrap();
    assert_eq!(b[0], 0x5a);
    assert_eq!(b[4096], 0);
}

#[test]
fn open_errors_are_typed_and_say_what_to_do() {
    let Some(c) = MicroCeph::start() else { return };
    let e = open(&c.spec("nope", "")).unwrap_err().to_string();
    assert!(e.contains("image `rbd/nope` does not exist"), "{e}");
    assert!(e.contains("create=SIZE"), "{e}");
    let e = open(&format!("rbd:nopool/x,conf={}", c.conf.display()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("pool `nopool` does not exist"), "{e}");

    // A read-only snapshot: reads see the data at the snapshot, writes are
    // refused with a typed error.
    {
        let dev = open(&c.spec("snapped", "create=8M")).unwrap();
        let mut ctx = dev.context().unwrap();
        ctx.write_at(&[7u8; 4096], 0).unwrap();
        ctx.flush().unwrap();
    }
    c.rbd(&["snap", "create", "rbd/snapped@s1"]);
    {
        let dev = open(&c.spec("snapped", "")).unwrap();
        let mut ctx = dev.context().unwrap();
        ctx.write_at(&[9u8; 4096], 0).unwrap();
        ctx.flush().unwrap();
    }
    let dev = open(&c.spec("snapped@s1", "")).unwrap();
    assert!(dev.info().features.read_only);
    assert!(!dev.info().features.write_cache);
    let mut ctx = dev.context().unwrap();
    let mut b = [0u8; 4096];
    ctx.read_at(&mut b, 0).unwrap();
    assert_eq!(b, [7u8; 4096], "the snapshot's data");
    let e = ctx.write_at(&[1u8; 4096], 0).unwrap_err();
    assert!(matches!(e, Error::ReadOnly { .. }), "{e}");
    let e = open(&c.spec("snapped@s9", "")).unwrap_err().to_string();
    assert!(e.contains("has no snapshot `s9`"), "{e}");

    // No monitor: the connect gives up within io_timeout_ms.
    let conf = c.dir.join("nomon.conf");
    std::fs::write(
        &conf,
        "[global]\nmon host = [v2:127.0.0.1:9]\nauth client required = none\n\
         log to stderr = false\n",
    )
    .unwrap();
    let e = open(&format!(
        "rbd:rbd/x,conf={},io_timeout_ms=1000",
        conf.display()
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("no Ceph monitor answered"), "{e}");
}
