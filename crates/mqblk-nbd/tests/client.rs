//! The NBD client driver against nbdkit (memory, the error filter, the
//! delay filter) and against mqblk's own server: data round trips, limits
//! and features from negotiation, errors on the right bios, and dropped
//! connections failing in-flight bios instead of hanging.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use mqblk::{Bio, Status};
use mqblk_test_support::time_bound;

#[test]
fn round_trips_against_nbdkit_memory_with_several_connections() {
    let kit = Nbdkit::start(&["memory", "64M"]);
    let dev = mqblk::open(&format!("{},conns=3", kit.uri())).expect("open nbd device");
    assert_eq!(dev.capacity_bytes(), 64 << 20);
    assert_eq!(dev.nr_hw_queues(), 3);
    let f = dev.info().features;
    assert!(
        f.write_cache && f.fua && f.discard && f.write_zeroes && !f.read_only,
        "{f:?}"
    );
    // Three threads, each its own context (mapped to its own connection),
    // each writing and reading back its own region.
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let mut ctx = dev.context().unwrap();
                let base = t * (16 << 20);
                for i in 0..64u64 {
                    let len = 4096 * (1 + (i as usize % 16));
                    let data = pattern(t * 1000 + i, len);
                    ctx.write_at(&data, base + i * (128 << 10)).unwrap();
                }
                ctx.flush().unwrap();
                for i in 0..64u64 {
                    let len = 4096 * (1 + (i as usize % 16));
                    let mut back = vec![0u8; len];
                    ctx.read_at(&mut back, base + i * (128 << 10)).unwrap();
                    assert!(back == pattern(t * 1000 + i, len), "thread {t} block {i}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Trim and write-zeroes go through and read back as zeros.
    let mut ctx = dev.context().unwrap();
    ctx.write_at(&[9u8; 8192], 0).unwrap();
    ctx.write_zeroes(0, 4096).unwrap();
    ctx.discard(4096, 4096).unwrap();
    let mut back = [1u8; 8192];
    ctx.read_at(&mut back, 0).unwrap();
    assert!(back.iter().all(|&b| b == 0));

    // Pipelined through the callback API: 64 bios in flight on one
    // context, all complete with the right data.
    let mut bufs = Vec::new();
    for i in 0..64u64 {
        let mut b = dev.alloc_buf(4096);
        b.as_mut_slice().copy_from_slice(&pattern(i, 4096));
        let mut bio = Bio::write_at(i * 4096, b);
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    let mut done = 0;
    while done < 64 {
        done += ctx.poll_wait(1, |c| {
            c.result().unwrap();
            bufs.push(c.into_bio());
        });
    }
    for bio in bufs.drain(..) {
        let i = bio.private;
        let mut r = Bio::read_at(i * 4096, bio.into_buffers().next().unwrap());
        r.private = i;
        ctx.submit(r).unwrap();
    }
    let mut done = 0;
    while done < 64 {
        done += ctx.poll_wait(1, |c| {
            c.result().unwrap();
            let i = c.private();
            let bio = c.into_bio();
            assert!(
                bio.segment(0).unwrap().as_slice() == pattern(i, 4096).as_slice(),
                "bio {i}"
            );
        });
    }
}

#[test]
fn limits_and_features_come_from_negotiation() {
    let mut ro = export("ro", "ram,size=16M,block_size=4096");
    ro.read_only = true;
    let srv = TestServer::start(vec![export("rw", "ram,size=16M,block_size=4096"), ro]);
    let dev = mqblk::open(&srv.uri("rw")).unwrap();
    let l = dev.info().limits;
    assert_eq!(l.logical_block_size, 4096);
    assert_eq!(l.physical_block_size, 4096);
    assert_eq!(u64::from(l.max_sectors) * 512, 32 << 20);
    assert!(l.max_discard_sectors > 0 && l.max_write_zeroes_sectors > 0);
    // mqblk over mqblk: the data goes through both layers.
    let mut ctx = dev.context().unwrap();
    let data = pattern(5, 1 << 20);
    ctx.write_at(&data, 4096).unwrap();
    let mut back = vec![0u8; 1 << 20];
    ctx.read_at(&mut back, 4096).unwrap();
    assert!(back == data);
    let ro = mqblk::open(&srv.uri("ro")).unwrap();
    assert!(ro.info().features.read_only);
    assert!(!ro.info().features.discard);
    // Bad specs are typed errors naming the problem.
    let e = mqblk::open(&format!("{},conns=0", srv.uri("rw")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("conns"), "{e}");
    let e = mqblk::open(&srv.uri("missing")).unwrap_err().to_string();
    assert!(e.contains("no such export"), "{e}");
}

#[test]
fn error_replies_reach_the_right_bios() {
    // Every write fails with EPERM, every read succeeds.
    let kit = Nbdkit::start(&[
        "--filter=error",
        "memory",
        "16M",
        "error-pwrite=EPERM",
        "error-pwrite-rate=100%",
    ]);
    let dev = mqblk::open(&kit.uri()).unwrap();
    let mut ctx = dev.context().unwrap();
    for i in 0..32u64 {
        let b = dev.alloc_buf(4096);
        let mut bio = if i % 2 == 0 {
            Bio::write_at(i * 4096, b)
        } else {
            Bio::read_at(i * 4096, b)
        };
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    let mut done = 0;
    while done < 32 {
        done += ctx.poll_wait(1, |c| {
            let i = c.private();
            if i % 2 == 0 {
                assert_eq!(
                    c.status(),
                    Status::Invalid(mqblk::error::InvalidKind::ReadOnly),
                    "write {i}"
                );
                let e = c.result().unwrap_err().to_string();
                assert!(e.contains("write"), "{e}");
            } else {
                assert_eq!(c.status(), Status::Ok, "read {i}");
            }
        });
    }

    // Reads fail with EIO half the time: every bio still completes, and
    // only reads fail, with an I/O error.
    let kit = Nbdkit::start(&[
        "--filter=error",
        "memory",
        "16M",
        "error-pread=EIO",
        "error-pread-rate=50%",
    ]);
    let dev = mqblk::open(&kit.uri()).unwrap();
    let mut ctx = dev.context().unwrap();
    let (mut failed, mut ok) = (0, 0);
    for round in 0..4u64 {
        for i in 0..32u64 {
            let b = dev.alloc_buf(4096);
            let mut bio = if i % 4 == 0 {
                Bio::write_at(i * 4096, b)
            } else {
                Bio::read_at(i * 4096, b)
            };
            bio.private = i;
            ctx.submit(bio).unwrap();
        }
        let mut done = 0;
        while done < 32 {
            done += ctx.poll_wait(1, |c| match c.status() {
                Status::Ok => ok += 1,
                s => {
                    assert_eq!(s, Status::IoError, "round {round}");
                    assert!(c.private() % 4 != 0, "a write failed");
                    failed += 1;
                }
            });
        }
    }
    assert!(failed > 0 && ok > 0, "failed {failed} ok {ok}");
}

#[test]
fn a_dropped_connection_fails_in_flight_bios_and_never_hangs() {
    // Reads take 30 s in this server; kill it while they are in flight.
    let mut kit = Nbdkit::start(&["--filter=delay", "memory", "16M", "rdelay=30"]);
    let dev = mqblk::open(&format!("{},conns=2", kit.uri())).unwrap();
    let mut ctx = dev.context().unwrap();
    for i in 0..16u64 {
        let mut bio = Bio::read_at(i * 4096, dev.alloc_buf(4096));
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    ctx.unplug();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    kit.kill();
    let mut done = 0;
    while done < 16 {
        done += ctx.poll_wait(1, |c| {
            assert_eq!(c.status(), Status::IoError);
        });
    }
    // No timeout is involved: the client sees the end of the stream as
    // soon as the server dies, so 1 s is scheduling alone.
    let took = t.elapsed();
    assert!(
        time_bound("failed", took, Duration::from_secs(1)),
        "failing the in-flight bios took {took:?}"
    );
    // Later I/O fails at once.
    let mut b = [0u8; 4096];
    assert!(ctx.read_at(&mut b, 0).is_err());
}

#[test]
fn tcp_urls_and_qemu_nbd_holes() {
    // nbd://host:port/export over loopback TCP, against mqblk's server.
    let srv = TestServer::start_with(
        vec![export("t", "ram,size=8M")],
        mqblk_nbd::ConnLimits::default(),
        mqblk_nbd::TlsMode::Off,
        None,
        true,
    );
    let addr = srv.tcp.unwrap();
    let dev = mqblk::open(&format!("nbd://{addr}/t,conns=2")).unwrap();
    let mut ctx = dev.context().unwrap();
    ctx.write_at(&pattern(9, 65536), 8192).unwrap();
    let mut back = vec![0u8; 65536];
    ctx.read_at(&mut back, 8192).unwrap();
    assert!(back == pattern(9, 65536));
    drop(ctx);
    drop(dev);

    // qemu-nbd answers reads of a sparse file with OFFSET_HOLE chunks:
    // the client fills them with zeros around the data.
    require("qemu-nbd");
    let dir = TempDir::new("qemu-nbd");
    let img = dir.path().join("sparse.img");
    let f = std::fs::File::create(&img).unwrap();
    f.set_len(16 << 20).unwrap();
    drop(f);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.write_all_at(&pattern(11, 65536), 4 << 20).unwrap();
    }
    let sock = dir.path().join("q.sock");
    let mut q = Command::new("qemu-nbd")
        .args(["-f", "raw", "-t", "-k"])
        .arg(&sock)
        .arg(&img)
        .stdin(Stdio::null())
        .spawn()
        .expect("start qemu-nbd");
    mqblk_test_support::wait_for_path(&sock, "qemu-nbd", None);
    let dev = mqblk::open(&format!("nbd+unix:///?socket={}", sock.display())).unwrap();
    let mut ctx = dev.context().unwrap();
    let mut buf = vec![0xffu8; 1 << 20];
    ctx.read_at(&mut buf, (4 << 20) - (512 << 10)).unwrap();
    let data_at = 512 << 10;
    assert!(
        buf[..data_at].iter().all(|&b| b == 0),
        "hole before the data reads as zeros"
    );
    assert!(buf[data_at..data_at + 65536] == pattern(11, 65536)[..]);
    assert!(
        buf[data_at + 65536..].iter().all(|&b| b == 0),
        "hole after the data reads as zeros"
    );
    drop(ctx);
    drop(dev);
    let _ = q.kill();
    let _ = q.wait();
}

/// `Device::extents` through `BLOCK_STATUS` (`base:allocation`), against
/// mqblk's own server and nbdkit's memory plugin: a written range is data,
/// the rest of a sparse export is holes.
#[test]
fn extents_come_from_block_status() {
    const MIB: u64 = 1 << 20;
    let srv = TestServer::start(vec![export("", "ram,size=16M")]);
    let kit = Nbdkit::start(&["memory", "16M"]);
    for uri in [srv.uri(""), kit.uri()] {
        let dev = mqblk::open(&uri).expect("open nbd device");
        let mut ctx = dev.context().unwrap();
        ctx.write_at(&pattern(5, MIB as usize), 2 * MIB).unwrap();
        let ext = dev.extents(0, 8 * MIB).unwrap();
        // In order, without gaps, covering the range.
        let mut at = 0;
        for e in &ext {
            assert_eq!(e.offset_bytes, at, "{uri}: {ext:?}");
            at += e.len_bytes;
        }
        assert_eq!(at, 8 * MIB, "{uri}: {ext:?}");
        let kind_at = |off: u64| {
            ext.iter()
                .find(|e| e.offset_bytes <= off && off < e.offset_bytes + e.len_bytes)
                .map(|e| e.hole)
                .unwrap()
        };
        assert!(kind_at(0), "{uri}: the start is a hole: {ext:?}");
        assert!(
            !kind_at(2 * MIB),
            "{uri}: the written range is data: {ext:?}"
        );
        assert!(!kind_at(3 * MIB - 1), "{uri}: {ext:?}");
        assert!(kind_at(5 * MIB), "{uri}: past the write is a hole: {ext:?}");
    }
}
