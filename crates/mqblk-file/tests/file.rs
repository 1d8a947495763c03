//! The file driver against real files and block devices, once per engine:
//! io_uring polled (the default), io_uring sleeping on its eventfd,
//! io_uring with COOP_TASKRUN, and the psync thread pool. Every test runs
//! the same code on each, so "the fallback passes the same suite" is the
//! suite itself. No assertion depends on timing.

mod common;

use std::io::{IoSlice, IoSliceMut};

use common::{expect_pattern, open, pattern, Scratch, Tmpfs};
use mqblk_core::bio::{Bio, BioFlags};
use mqblk_core::error::{Error, Status};
use mqblk_test_support::LoopDev;

const MIB: u64 = 1 << 20;

/// Write a pattern in blocks of several sizes (one request each), read it
/// back through the device, and check the backing file with plain reads.
fn round_trip(path: &std::path::Path, opts: &str, check_backing: bool) {
    let dev = open(path, opts).unwrap();
    let lbs = dev.logical_block_size() as usize;
    let mut ctx = dev.context().unwrap();
    for (i, &len) in [lbs, 4096, 64 << 10, MIB as usize].iter().enumerate() {
        let off = (i as u64 + 1) * 2 * MIB - len as u64;
        let mut w = dev.alloc_buf(len);
        pattern(w.as_mut_slice(), off, 7);
        ctx.write_at(w.as_slice(), off).unwrap();
        let mut r = dev.alloc_buf(len);
        ctx.read_at(r.as_mut_slice(), off).unwrap();
        expect_pattern(r.as_slice(), off, 7);
    }
    ctx.flush().unwrap();
    if check_backing {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(path).unwrap();
        let mut b = vec![0u8; 4096];
        let off = 4 * MIB - 4096;
        f.read_exact_at(&mut b, off).unwrap();
        expect_pattern(&b, off, 7);
    }
}

/// A vectored write is one request, and the data lands in order.
fn vectored(path: &std::path::Path, opts: &str) {
    let dev = open(path, opts).unwrap();
    let mut ctx = dev.context().unwrap();
    let mut a = dev.alloc_buf(4096);
    let mut b = dev.alloc_buf(8192);
    let mut c = dev.alloc_buf(4096);
    pattern(a.as_mut_slice(), 0, 3);
    pattern(b.as_mut_slice(), 4096, 3);
    pattern(c.as_mut_slice(), 12288, 3);
    let before = ctx.stats();
    ctx.writev_at(
        &[
            IoSlice::new(a.as_slice()),
            IoSlice::new(b.as_slice()),
            IoSlice::new(c.as_slice()),
        ],
        0,
    )
    .unwrap();
    let after = ctx.stats();
    assert_eq!(
        after.requests - before.requests,
        1,
        "a vectored bio is one request"
    );
    let mut r = dev.alloc_buf(16384);
    ctx.read_at(r.as_mut_slice(), 0).unwrap();
    expect_pattern(r.as_slice(), 0, 3);
    let (mut x, mut y) = (dev.alloc_buf(4096), dev.alloc_buf(12288));
    ctx.readv_at(
        &mut [
            IoSliceMut::new(x.as_mut_slice()),
            IoSliceMut::new(y.as_mut_slice()),
        ],
        0,
    )
    .unwrap();
    expect_pattern(x.as_slice(), 0, 3);
    expect_pattern(y.as_slice(), 4096, 3);
}

/// Many requests in flight through the callback API, at random offsets;
/// every one comes back once, and the data is right.
fn deep_queue(path: &std::path::Path, opts: &str) {
    let dev = open(path, &format!("{opts},queue_depth=32")).unwrap();
    let mut ctx = dev.context().unwrap();
    let bs = 4096u64;
    let blocks = 2048u64;
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut offs: Vec<u64> = (0..blocks).collect();
    for i in (1..offs.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        offs.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut completed = 0u64;
    for &b in &offs {
        let mut buf = dev.alloc_buf(bs as usize);
        pattern(buf.as_mut_slice(), b * bs, 11);
        let mut bio = Bio::write_at(b * bs, buf);
        bio.private = b;
        let mut bio = Some(bio);
        while let Some(b) = bio.take() {
            if let Err(back) = ctx.submit(b) {
                bio = Some(back.into_bio());
                ctx.poll_wait(1, |c| {
                    c.result().unwrap();
                    completed += 1;
                });
            }
        }
    }
    while ctx.in_flight() > 0 || ctx.ready() > 0 {
        ctx.poll_wait(1, |c| {
            c.result().unwrap();
            completed += 1;
        });
    }
    assert_eq!(completed, blocks, "every write completes exactly once");
    let mut seen = vec![false; blocks as usize];
    for &b in offs.iter().rev() {
        let bio = Bio::read_at(b * bs, dev.alloc_buf(bs as usize));
        let mut bio = bio;
        bio.private = b;
        let mut bio = Some(bio);
        while let Some(x) = bio.take() {
            if let Err(back) = ctx.submit(x) {
                bio = Some(back.into_bio());
                ctx.poll_wait(1, |c| {
                    c.result().unwrap();
                    let b = c.private();
                    expect_pattern(c.bio().segment(0).unwrap().as_slice(), b * bs, 11);
                    seen[b as usize] = true;
                });
            }
        }
    }
    while ctx.in_flight() > 0 || ctx.ready() > 0 {
        ctx.poll_wait(1, |c| {
            c.result().unwrap();
            let b = c.private();
            expect_pattern(c.bio().segment(0).unwrap().as_slice(), b * bs, 11);
            seen[b as usize] = true;
        });
    }
    assert!(seen.iter().all(|&s| s), "every read completed");
}

/// Flush, discard and write-zeroes do what they say, when offered.
fn discard_zeroes_flush(path: &std::path::Path, opts: &str) {
    let dev = open(path, opts).unwrap();
    let f = dev.info().features;
    let mut ctx = dev.context().unwrap();
    let mut w = dev.alloc_buf(256 << 10);
    pattern(w.as_mut_slice(), 0, 5);
    ctx.write_at(w.as_slice(), 0).unwrap();
    ctx.flush().unwrap();
    let mut r = dev.alloc_buf(64 << 10);
    if f.write_zeroes {
        ctx.write_zeroes(0, 64 << 10).unwrap();
        ctx.read_at(r.as_mut_slice(), 0).unwrap();
        assert!(
            r.as_slice().iter().all(|&b| b == 0),
            "write-zeroes reads back zeros"
        );
    }
    if f.discard {
        ctx.discard(128 << 10, 64 << 10).unwrap();
        // Discard promises nothing about the data; what it must not do is
        // touch the neighbours.
    }
    ctx.read_at(r.as_mut_slice(), 64 << 10).unwrap();
    expect_pattern(r.as_slice(), 64 << 10, 5);
    ctx.read_at(r.as_mut_slice(), 192 << 10).unwrap();
    expect_pattern(r.as_slice(), 192 << 10, 5);
    ctx.flush().unwrap();
}

/// A caller buffer that breaks the O_DIRECT alignment is bounced, counted,
/// and the data is right; it does not fail with EINVAL.
fn unaligned_buffers(path: &std::path::Path, opts: &str) {
    let dev = open(path, opts).unwrap();
    let lbs = dev.logical_block_size() as usize;
    let mut ctx = dev.context().unwrap();
    let mut backing = vec![0u8; 3 * 4096 + 1];
    let off = 40960u64;
    {
        let w = &mut backing[1..1 + 2 * 4096];
        pattern(w, off, 9);
        ctx.write_at(w, off).unwrap();
    }
    let before = ctx.stats().bytes_copied;
    let mut out = vec![0u8; 2 * 4096 + 1];
    let r = &mut out[1..];
    ctx.read_at(r, off).unwrap();
    expect_pattern(r, off, 9);
    let copied = ctx.stats().bytes_copied - before;
    assert!(
        copied >= (2 * 4096) as u64,
        "a misaligned read is bounced and counted (copied {copied} bytes, lbs {lbs})"
    );
}

/// The engine in use is named, with its ring flags.
fn engine_named(path: &std::path::Path, opts: &str, engine: &str) {
    let dev = open(path, opts).unwrap();
    let info = mqblk_file::info(dev.name()).expect("registered");
    assert_eq!(info.engine, engine, "{}", info.summary());
    if engine == "uring" {
        assert!(!info.ring_flags.is_empty());
        assert!(info.fixed_file, "{}", info.summary());
        assert!(info.fixed_bufs, "{}", info.summary());
    }
}

/// A read past the end of a file truncated under the device is an error,
/// never a silent short read, and the device stays usable.
fn short_read_is_an_error(scratch: &Scratch, opts: &str) {
    let path = scratch.file("short.img", 4 * MIB);
    let dev = open(&path, opts).unwrap();
    let mut ctx = dev.context().unwrap();
    let mut w = dev.alloc_buf(MIB as usize);
    pattern(w.as_mut_slice(), 0, 1);
    ctx.write_at(w.as_slice(), 0).unwrap();
    // Truncate behind the device's back: 1 MiB + 8 KiB remain.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(MIB + 8192)
        .unwrap();
    // Straddling the new end: the first 8 KiB come back, then end of file.
    let mut r = dev.alloc_buf(64 << 10);
    let e = ctx.read_at(r.as_mut_slice(), MIB).unwrap_err();
    match &e {
        Error::Io {
            offset_bytes,
            status,
            ..
        } => {
            assert_eq!(*offset_bytes, MIB);
            assert_eq!(*status, Status::IoError);
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    // Wholly past the end.
    assert!(ctx.read_at(r.as_mut_slice(), 2 * MIB).is_err());
    // Still usable.
    let mut r = dev.alloc_buf(4096);
    ctx.read_at(r.as_mut_slice(), 8192).unwrap();
    expect_pattern(r.as_slice(), 8192, 1);
}

/// ENOSPC from a full tmpfs reaches the bio that caused it, with its
/// offset; the other writes complete; the device stays usable.
fn enospc_reaches_the_caller(opts: &str, tag: &str) {
    let Some(fs) = Tmpfs::mount(tag, "1M") else {
        return;
    };
    let path = fs.dir.join("big.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(8 * MIB)
        .unwrap();
    // tmpfs has no O_DIRECT.
    let dev = open(&path, &format!("{opts},direct=0")).unwrap();
    let mut ctx = dev.context().unwrap();
    let bs = 64u64 << 10;
    let n = 8 * MIB / bs;
    let (mut ok, mut nospc) = (0u64, Vec::new());
    let mut handle = |c: mqblk_core::Completion<'_>| match c.result() {
        Ok(()) => ok += 1,
        Err(e) => {
            assert_eq!(c.status(), Status::NoSpace, "{e}");
            let msg = e.to_string();
            assert!(msg.contains("no space"), "{msg}");
            assert!(
                msg.contains(&format!("offset {}", c.bio().offset_bytes())),
                "{msg}"
            );
            nospc.push(c.bio().offset_bytes());
        }
    };
    for i in 0..n {
        let mut buf = dev.alloc_buf(bs as usize);
        pattern(buf.as_mut_slice(), i * bs, 2);
        let mut bio = Bio::write_at(i * bs, buf);
        // One request per bio, so each one's fate is its own.
        bio.set_flags(BioFlags::NOMERGE);
        let mut bio = Some(bio);
        while let Some(b) = bio.take() {
            if let Err(back) = ctx.submit(b) {
                bio = Some(back.into_bio());
                ctx.poll_wait(1, &mut handle);
            }
        }
    }
    while ctx.in_flight() > 0 || ctx.ready() > 0 {
        ctx.poll_wait(1, &mut handle);
    }
    assert_eq!(ok + nospc.len() as u64, n, "no I/O is lost");
    assert!(!nospc.is_empty(), "an 8 MiB file cannot fit a 1 MiB tmpfs");
    assert!(ok > 0, "what fits is written");
    // Still usable: free space, then the write that failed succeeds.
    if dev.info().features.discard {
        ctx.discard(0, 4 * MIB).unwrap();
        let at = nospc[0];
        let mut buf = dev.alloc_buf(bs as usize);
        pattern(buf.as_mut_slice(), at, 2);
        ctx.write_at(buf.as_slice(), at).unwrap();
        let mut r = dev.alloc_buf(bs as usize);
        ctx.read_at(r.as_mut_slice(), at).unwrap();
        expect_pattern(r.as_slice(), at, 2);
    }
}

/// Two threads share one hardware queue (a SINGLE_ISSUER ring is rebuilt
/// when the second one arrives), and a context moves between threads.
fn shared_queue_and_moved_context(path: &std::path::Path, opts: &str) {
    let dev = open(path, &format!("{opts},hw_queues=1")).unwrap();
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let mut ctx = dev.context().unwrap();
                for i in 0..200u64 {
                    let off = (t * 256 + i % 256) * 4096;
                    let mut w = dev.alloc_buf(4096);
                    pattern(w.as_mut_slice(), off, t);
                    ctx.write_at(w.as_slice(), off).unwrap();
                    let mut r = dev.alloc_buf(4096);
                    ctx.read_at(r.as_mut_slice(), off).unwrap();
                    expect_pattern(r.as_slice(), off, t);
                }
                ctx
            })
        })
        .collect();
    let ctxs: Vec<_> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    // The contexts now live on this thread.
    for (t, mut ctx) in ctxs.into_iter().enumerate() {
        let mut r = dev.alloc_buf(4096);
        ctx.read_at(r.as_mut_slice(), t as u64 * 256 * 4096)
            .unwrap();
        expect_pattern(r.as_slice(), t as u64 * 256 * 4096, t as u64);
    }
}

/// A read-only device refuses writes and still reads.
fn read_only(path: &std::path::Path, opts: &str) {
    let dev = open(path, &format!("{opts},ro=1")).unwrap();
    assert!(dev.info().features.read_only);
    let mut ctx = dev.context().unwrap();
    let mut b = dev.alloc_buf(4096);
    ctx.read_at(b.as_mut_slice(), 0).unwrap();
    let e = ctx.write_at(b.as_slice(), 0).unwrap_err();
    assert!(matches!(e, Error::ReadOnly { .. }), "{e}");
}

macro_rules! suite {
    ($name:ident, $opts:expr, $engine:expr) => {
        mod $name {
            use super::*;

            const OPTS: &str = $opts;

            #[test]
            fn round_trip_on_a_regular_file() {
                let s = Scratch::new(concat!(stringify!($name), "-rt"));
                let p = s.file("disk.img", 16 * MIB);
                round_trip(&p, OPTS, true);
                vectored(&p, OPTS);
            }

            #[test]
            fn round_trip_buffered() {
                let s = Scratch::new(concat!(stringify!($name), "-buf"));
                let p = s.file("disk.img", 16 * MIB);
                round_trip(&p, &format!("{OPTS},direct=0"), true);
            }

            #[test]
            fn round_trip_on_a_loop_device() {
                let s = Scratch::new(concat!(stringify!($name), "-loop"));
                let p = s.file("backing.img", 16 * MIB);
                let Some(l) = LoopDev::attach(&p) else { return };
                let dev = std::path::Path::new(&l.dev);
                round_trip(dev, OPTS, false);
                vectored(dev, OPTS);
                discard_zeroes_flush(dev, OPTS);
            }

            #[test]
            fn many_in_flight() {
                let s = Scratch::new(concat!(stringify!($name), "-deep"));
                let p = s.file("disk.img", 16 * MIB);
                deep_queue(&p, OPTS);
            }

            #[test]
            fn discard_write_zeroes_and_flush_on_a_file() {
                let s = Scratch::new(concat!(stringify!($name), "-dz"));
                let p = s.file("disk.img", 16 * MIB);
                discard_zeroes_flush(&p, OPTS);
                let dev = open(&p, OPTS).unwrap();
                let f = dev.info().features;
                assert!(
                    f.discard && f.write_zeroes && f.write_cache && f.fua,
                    "{f:?}"
                );
            }

            #[test]
            fn misaligned_buffers_are_bounced() {
                let s = Scratch::new(concat!(stringify!($name), "-mis"));
                let p = s.file("disk.img", 16 * MIB);
                unaligned_buffers(&p, OPTS);
            }

            #[test]
            fn engine_is_named() {
                let s = Scratch::new(concat!(stringify!($name), "-name"));
                let p = s.file("disk.img", 16 * MIB);
                engine_named(&p, OPTS, $engine);
            }

            #[test]
            fn short_reads_are_errors() {
                let s = Scratch::new(concat!(stringify!($name), "-short"));
                short_read_is_an_error(&s, OPTS);
            }

            #[test]
            fn enospc_from_a_full_tmpfs() {
                enospc_reaches_the_caller(OPTS, stringify!($name));
            }

            #[test]
            fn threads_share_a_queue() {
                let s = Scratch::new(concat!(stringify!($name), "-share"));
                let p = s.file("disk.img", 16 * MIB);
                shared_queue_and_moved_context(&p, OPTS);
            }

            #[test]
            fn read_only_device() {
                let s = Scratch::new(concat!(stringify!($name), "-ro"));
                let p = s.file("disk.img", 16 * MIB);
                read_only(&p, OPTS);
            }
        }
    };
}

suite!(uring, "engine=uring", "uring");
suite!(uring_sleep, "engine=uring,wait=sleep", "uring");
suite!(uring_coop, "engine=uring,taskrun=coop", "uring");
suite!(psync, "engine=psync", "psync");
