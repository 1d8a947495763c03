//! Remapped views (`Device::remap`, Linux `blk_partition_remap`): a bio on
//! a window is checked against the window, shifted by its start on the way
//! down and back on the way up, whichever path it takes (the fused check,
//! the full checks, admission, a trace, a split), and whether it succeeds
//! or fails. Errors name the view, the caller's offset and the window's
//! limit; the view's I/O counts on the view and on its disk.

mod common;

use std::ops::Range;
use std::sync::{Arc, Mutex};

use common::{MemDisk, Order};
use mqblk_core::driver::{Completions, Driver, HwQueueSetup, QueueRq, RqRef};
use mqblk_core::{Bio, BioFlags, Device, Error, Op, Status};

/// Where the window starts on its disk, and how long it is.
const START: u64 = 256 << 10;
const LEN: u64 = 128 << 10;
const DISK: usize = 1 << 20;

/// A memory disk and a window of it named `mem0p1`, completing as `order`
/// says, with `max_sectors` per request.
fn window(
    order: Order,
    max_sectors: u32,
    read_only: bool,
) -> (Device, Device, Arc<Mutex<Vec<u8>>>) {
    let mut d = MemDisk::new(DISK, order);
    d.limits.max_sectors = max_sectors;
    let data = d.data.clone();
    let disk = Device::new(d, common::config("mem0", DISK as u64)).unwrap();
    let view = disk.remap(START, LEN, "mem0p1", read_only, None).unwrap();
    (disk, view, data)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// Bytes `range` of the view, as its disk holds them.
fn on_disk(data: &Mutex<Vec<u8>>, range: Range<u64>) -> Vec<u8> {
    let d = data.lock().unwrap();
    d[(START + range.start) as usize..(START + range.end) as usize].to_vec()
}

/// Everything of the disk outside the window is still zero.
fn outside_untouched(data: &Mutex<Vec<u8>>) {
    let d = data.lock().unwrap();
    assert!(common::all_zero(&d[..START as usize]), "before the window");
    assert!(
        common::all_zero(&d[(START + LEN) as usize..]),
        "after the window"
    );
}

#[test]
fn plain_bios_land_in_the_window_and_come_back_at_the_callers_offset() {
    for order in [Order::Inline, Order::Reversed] {
        let (_disk, view, data) = window(order, u32::MAX, false);
        let mut ctx = view.context().unwrap();
        let written = pattern(16 << 10, 0x5a);
        ctx.write_at(&written, 4096).unwrap();
        assert_eq!(on_disk(&data, 4096..20480), written, "{order:?}");
        // A callback sees its bio at the offset it gave, with the data of
        // the window there.
        let mut b = Bio::read_at(4096, view.alloc_buf(8192));
        b.private = 7;
        ctx.submit(b).unwrap();
        let mut seen = Vec::new();
        ctx.poll_wait(1, |c| {
            let bytes = c.bio().segments()[0].as_slice().to_vec();
            seen.push((c.bio().offset_bytes(), c.private(), c.status(), bytes));
        });
        assert_eq!(
            seen,
            vec![(4096, 7, Status::Ok, written[..8192].to_vec())],
            "{order:?}"
        );
        // Two adjacent bios merge into one request on the disk; each comes
        // back at its own offset with its own bytes.
        let before = ctx.stats().merges[0];
        for off in [8192u64, 12288] {
            let mut b = Bio::read_at(off, view.alloc_buf(4096));
            b.private = off;
            ctx.submit(b).unwrap();
        }
        let mut seen = Vec::new();
        while seen.len() < 2 {
            ctx.poll_wait(1, |c| {
                let bytes = c.bio().segments()[0].as_slice().to_vec();
                seen.push((c.bio().offset_bytes(), c.private(), bytes));
            });
        }
        seen.sort();
        assert_eq!(
            seen,
            vec![
                (8192, 8192, written[4096..8192].to_vec()),
                (12288, 12288, written[8192..12288].to_vec()),
            ],
            "{order:?}"
        );
        assert_eq!(ctx.stats().merges[0], before + 1, "{order:?}: one merge");
        // A callback that aims its bio elsewhere and resubmits it: the
        // new offset is the window's too.
        let mut b = Bio::read_at(0, view.alloc_buf(4096));
        b.private = 1;
        ctx.submit(b).unwrap();
        let mut seen = Vec::new();
        while seen.len() < 2 {
            ctx.poll_wait(1, |mut c| {
                let bytes = c.bio().segments()[0].as_slice().to_vec();
                seen.push((c.bio().offset_bytes(), bytes));
                if c.private() == 1 {
                    c.bio_mut().private = 2;
                    c.bio_mut().set_offset_bytes(16384);
                    c.resubmit();
                }
            });
        }
        assert_eq!(
            seen,
            vec![(0, vec![0; 4096]), (16384, written[12288..16384].to_vec())],
            "{order:?}"
        );
        // A blocking submission hands its bio back as it gave it.
        let (bio, r) = ctx.submit_wait(Bio::read_at(4096, view.alloc_buf(4096)));
        r.unwrap();
        assert_eq!(bio.offset_bytes(), 4096, "{order:?}");
        outside_untouched(&data);
    }
}

#[test]
fn bios_the_full_checks_take_are_shifted_once_and_back() {
    // 8 KiB per request: a larger bio is split into pieces.
    let (_disk, view, data) = window(Order::Reversed, 16, false);
    let mut ctx = view.context().unwrap();
    // Split: 32 KiB in four pieces.
    let written = pattern(32 << 10, 0x33);
    let mut buf = view.alloc_buf(written.len());
    buf.as_mut_slice().copy_from_slice(&written);
    let (bio, r) = ctx.submit_wait(Bio::write_at(8192, buf));
    r.unwrap();
    assert_eq!(bio.offset_bytes(), 8192);
    assert_eq!(on_disk(&data, 8192..40960), written);
    assert!(ctx.stats().splits >= 1, "{:?}", ctx.stats());
    // A FUA write (a flush sequence).
    let mut buf = view.alloc_buf(4096);
    buf.as_mut_slice().fill(0xee);
    let mut fua = Bio::write_at(65536, buf);
    fua.set_flags(BioFlags::FUA);
    let (bio, r) = ctx.submit_wait(fua);
    r.unwrap();
    assert_eq!(bio.offset_bytes(), 65536);
    assert_eq!(on_disk(&data, 65536..69632), vec![0xee; 4096]);
    // Write-zeroes, which this disk lacks: emulated with writes of zeroes.
    let (bio, r) = ctx.submit_wait(Bio::write_zeroes_at(12288, 8192));
    r.unwrap();
    assert_eq!(bio.offset_bytes(), 12288);
    let mut want = written.clone();
    want[4096..12288].fill(0);
    assert_eq!(on_disk(&data, 8192..40960), want);
    // A flush has no offset to shift.
    let (bio, r) = ctx.submit_wait(Bio::flush());
    r.unwrap();
    assert_eq!((bio.op(), bio.offset_bytes()), (Op::Flush, 0));
    outside_untouched(&data);
}

/// The error of a bio on `mem0p1` past its end, and the bio as it came
/// back.
fn out_of_range(e: &Error, offset: u64) {
    match e {
        Error::OutOfRange {
            device,
            offset_bytes,
            capacity_bytes,
            ..
        } => {
            assert_eq!(&**device, "mem0p1");
            assert_eq!(*offset_bytes, offset);
            assert_eq!(*capacity_bytes, LEN);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn bad_bios_name_the_view_and_come_back_at_the_callers_offset() {
    let (disk, view, data) = window(Order::Inline, u32::MAX, false);
    let mut ctx = view.context().unwrap();
    // Across the end, wholly past it (still inside the disk), and at an
    // offset whose shift would wrap: refused, nothing written.
    for offset in [LEN - 4096, LEN, LEN + 4096, u64::MAX - 4095] {
        let (bio, r) = ctx.submit_wait(Bio::write_at(offset, view.alloc_buf(8192)));
        out_of_range(&r.unwrap_err(), offset);
        assert_eq!(bio.offset_bytes(), offset);
    }
    // The same through a callback: its error names the view.
    ctx.submit(Bio::read_at(LEN, view.alloc_buf(4096))).unwrap();
    let mut errs = Vec::new();
    ctx.poll_wait(1, |c| errs.push((c.bio().offset_bytes(), c.result())));
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].0, LEN);
    out_of_range(errs[0].1.as_ref().unwrap_err(), LEN);
    // Not whole blocks.
    let (bio, r) = ctx.submit_wait(Bio::read_at(100, view.alloc_buf(4096)));
    match r.unwrap_err() {
        Error::BadLength {
            device,
            offset_bytes,
            logical_block_size,
            ..
        } => assert_eq!(
            (&*device, offset_bytes, logical_block_size),
            ("mem0p1", 100, 512)
        ),
        other => panic!("{other}"),
    }
    assert_eq!(bio.offset_bytes(), 100);
    outside_untouched(&data);
    let in_window = common::all_zero(&data.lock().unwrap()[START as usize..(START + LEN) as usize]);
    assert!(in_window, "nothing written");
    // A read-only window of the same disk refuses writes, naming itself;
    // reads pass, and the disk stays writable.
    let ro = disk.remap(START, LEN, "mem0p1ro", true, None).unwrap();
    let mut rctx = ro.context().unwrap();
    let (bio, r) = rctx.submit_wait(Bio::write_at(4096, ro.alloc_buf(4096)));
    match r.unwrap_err() {
        Error::ReadOnly {
            device,
            offset_bytes,
            ..
        } => assert_eq!((&*device, offset_bytes), ("mem0p1ro", 4096)),
        other => panic!("{other}"),
    }
    assert_eq!(bio.offset_bytes(), 4096);
    ctx.write_at(&[9u8; 4096], 4096).unwrap();
    let mut back = [0u8; 4096];
    rctx.read_at(&mut back, 4096).unwrap();
    assert_eq!(back, [9u8; 4096]);
}

/// A disk whose requests fail with a medium error where they touch
/// `bad` (its own offsets), and succeed elsewhere.
struct BadRange {
    bad: Range<u64>,
}

impl Driver for BadRange {
    type HwQueue = ();

    fn init_hw_queue(&self, _setup: HwQueueSetup<'_>) -> Result<(), Error> {
        Ok(())
    }

    fn queue_rq(
        &self,
        _hq: &mut (),
        rq: RqRef,
        _last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        let (start, end) = (rq.offset_bytes(), rq.offset_bytes() + rq.len_bytes());
        let status = if start < self.bad.end && end > self.bad.start {
            Status::Medium
        } else {
            Status::Ok
        };
        done.complete(rq, status);
        QueueRq::Issued
    }

    fn commit_rqs(&self, _hq: &mut ()) {}

    fn poll(&self, _hq: &mut (), _done: &mut Completions<'_>) -> usize {
        0
    }
}

#[test]
fn a_failure_below_comes_back_at_the_views_offset_naming_the_view() {
    // The disk fails the window's second 4 KiB and nothing else: only a
    // bio shifted by the window's start meets it.
    let bad = START + 4096..START + 8192;
    let disk = Device::new(BadRange { bad }, common::config("bad0", DISK as u64)).unwrap();
    let view = disk.remap(START, LEN, "bad0p1", false, None).unwrap();
    let mut ctx = view.context().unwrap();
    let (bio, r) = ctx.submit_wait(Bio::read_at(0, view.alloc_buf(4096)));
    r.unwrap();
    assert_eq!(bio.offset_bytes(), 0);
    for bio in [
        Bio::read_at(4096, view.alloc_buf(4096)),
        Bio::write_zeroes_at(4096, 4096),
    ] {
        let op = bio.op();
        let (bio, r) = ctx.submit_wait(bio);
        match r.unwrap_err() {
            Error::Io {
                device,
                offset_bytes,
                status,
                ..
            } => assert_eq!(
                (&*device, offset_bytes, status),
                ("bad0p1", 4096, Status::Medium),
                "{op}"
            ),
            other => panic!("{op}: {other}"),
        }
        assert_eq!(bio.offset_bytes(), 4096, "{op}");
    }
    // The callback path: the same bio, the same offset.
    ctx.submit(Bio::read_at(4096, view.alloc_buf(4096)))
        .unwrap();
    let mut seen = Vec::new();
    ctx.poll_wait(1, |c| seen.push((c.bio().offset_bytes(), c.status())));
    assert_eq!(seen, vec![(4096, Status::Medium)]);
}

#[test]
fn a_views_io_counts_on_the_view_and_on_its_disk() {
    let (disk, view, _data) = window(Order::Reversed, u32::MAX, false);
    {
        let mut vctx = view.context().unwrap();
        let mut dctx = disk.context().unwrap();
        let mut buf = vec![0u8; 4096];
        for i in 0..5 {
            vctx.read_at(&mut buf, i * 8192).unwrap();
        }
        for i in 0..3 {
            vctx.write_at(&buf, i * 8192).unwrap();
        }
        for i in 0..2 {
            dctx.read_at(&mut buf, i * 8192).unwrap();
        }
        // A bad bio counts as the view's error, not as its I/O.
        assert!(vctx.read_at(&mut buf, LEN).is_err());
        let own = vctx.stats();
        assert_eq!((own.ios[0], own.ios[1]), (5, 3), "{own:?}");
    }
    let v = view.stats().snapshot();
    assert_eq!((v.ios[0], v.ios[1]), (5, 3), "{v:?}");
    assert_eq!((v.sectors[0], v.sectors[1]), (40, 24), "{v:?}");
    assert_eq!(v.errors, 1, "{v:?}");
    let d = disk.stats().snapshot();
    assert_eq!((d.ios[0], d.ios[1]), (7, 3), "{d:?}");
    assert_eq!((d.sectors[0], d.sectors[1]), (56, 24), "{d:?}");
    assert_eq!(d.errors, 1, "{d:?}");
}

#[test]
#[cfg_attr(miri, ignore)] // waits on the clock for the rate
fn admitted_bios_are_shifted_once_whether_held_or_not() {
    let (_disk, view, data) = window(Order::Inline, u32::MAX, false);
    // A low read rate (a burst of one) holds most of the bios back.
    view.io_max().set_limits(mqblk_core::throttle::IoMaxLimits {
        riops: 100,
        ..Default::default()
    });
    let mut ctx = view.context().unwrap();
    let written = pattern(64 << 10, 0x11);
    ctx.write_at(&written, 0).unwrap();
    for i in 0..16u64 {
        let mut b = Bio::read_at(i * 4096, view.alloc_buf(4096));
        b.private = i;
        ctx.submit(b).unwrap();
    }
    let mut seen = Vec::new();
    let mut held = 0;
    // Bounded: 16 reads at 100/s take about 150 ms; each poll_wait
    // returns with a completion or at the request timeout.
    for _ in 0..1000 {
        held = held.max(ctx.throttled());
        ctx.poll_wait(1, |c| {
            let bytes = c.bio().segments()[0].as_slice().to_vec();
            seen.push((c.private(), c.bio().offset_bytes(), c.status(), bytes));
        });
        if seen.len() == 16 {
            break;
        }
    }
    assert!(held > 0, "the limit held some bios back");
    seen.sort_by_key(|s| s.0);
    assert_eq!(seen.len(), 16);
    for (i, off, status, bytes) in seen {
        assert_eq!((off, status), (i * 4096, Status::Ok));
        let at = (i * 4096) as usize;
        assert_eq!(bytes, written[at..at + 4096], "read {i}");
    }
    outside_untouched(&data);
}

#[test]
#[cfg_attr(miri, ignore)] // the trace writes files
fn traced_bios_are_shifted_once_and_back() {
    let dir = mqblk_test_support::Scratch::new("remap-trace");
    let (_disk, view, data) = window(Order::Reversed, u32::MAX, false);
    view.start_trace(dir.path()).unwrap();
    let mut ctx = view.context().unwrap();
    let written = pattern(8192, 0x77);
    ctx.write_at(&written, 4096).unwrap();
    let mut b = Bio::read_at(4096, view.alloc_buf(8192));
    b.private = 3;
    ctx.submit(b).unwrap();
    let mut seen = Vec::new();
    ctx.poll_wait(1, |c| {
        let bytes = c.bio().segments()[0].as_slice().to_vec();
        seen.push((c.bio().offset_bytes(), c.status(), bytes));
    });
    assert_eq!(seen, vec![(4096, Status::Ok, written.clone())]);
    let (bio, r) = ctx.submit_wait(Bio::read_at(LEN, view.alloc_buf(4096)));
    out_of_range(&r.unwrap_err(), LEN);
    assert_eq!(bio.offset_bytes(), LEN);
    drop(ctx);
    view.stop_trace().unwrap();
    assert_eq!(on_disk(&data, 4096..12288), written);
    outside_untouched(&data);
}
