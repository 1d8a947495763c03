//! `reconnect_ms`: a dropped connection is made again, and the bios that
//! were in flight on it are sent again, with nbdkit's file plugin as a
//! server that is killed and started again over the same file.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mqblk::{Bio, Status};
use mqblk_test_support::time_bound;

const BLOCKS: u64 = 64;
const BS: usize = 4096;
/// The client's longest pause between two attempts to connect again
/// (`PAUSE_MAX` in `src/client/reconnect.rs`): once the server is back,
/// the next attempt comes within it.
const RETRY_MAX: Duration = Duration::from_millis(500);
/// What a bound allows on top of the deadline it tests: scheduling on a
/// loaded 2-core machine.
const GRACE: Duration = Duration::from_secs(1);

/// An image of BLOCKS blocks, block `i` holding `pattern(i)`.
fn image(dir: &TempDir) -> String {
    let img = dir.path().join("disk.img");
    let mut data = Vec::with_capacity(BLOCKS as usize * BS);
    for i in 0..BLOCKS {
        data.extend_from_slice(&pattern(i, BS));
    }
    std::fs::write(&img, data).unwrap();
    img.display().to_string()
}

#[test]
fn bios_in_flight_when_the_server_dies_are_sent_again_after_it_comes_back() {
    let dir = TempDir::new("reconnect");
    let img = image(&dir);
    let file = format!("file={img}");
    // Every request sits 300 ms in the server: all are in flight when it
    // is killed.
    let mut kit = Nbdkit::start(&[
        "--filter=delay",
        "file",
        &file,
        "rdelay=300ms",
        "wdelay=300ms",
    ]);
    let dev = mqblk::open(&kit.spec_with("conns=2,reconnect_ms=20000")).unwrap();
    let mut ctx = dev.context().unwrap();
    // Reads of the even blocks, and writes of new data to the odd ones.
    for i in 0..BLOCKS {
        let mut buf = dev.alloc_buf(BS);
        let mut bio = if i % 2 == 0 {
            Bio::read_at(i * BS as u64, buf)
        } else {
            buf.as_mut_slice().copy_from_slice(&pattern(1000 + i, BS));
            Bio::write_at(i * BS as u64, buf)
        };
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    ctx.unplug();
    std::thread::sleep(Duration::from_millis(100));
    kit.kill();
    // Down for a while: the client keeps trying.
    std::thread::sleep(Duration::from_millis(700));
    kit.restart(&["file", &file]);
    let t = Instant::now();
    let mut done = 0;
    while done < BLOCKS {
        done += ctx.poll_wait(1, |c| {
            let i = c.private();
            assert_eq!(c.status(), Status::Ok, "bio {i}");
            if i % 2 == 0 {
                let bio = c.into_bio();
                assert!(
                    bio.segment(0).unwrap().as_slice() == pattern(i, BS).as_slice(),
                    "read of block {i}"
                );
            }
        }) as u64;
        assert!(
            t.elapsed() < RETRY_MAX + GRACE,
            "{done} of {BLOCKS} done {:?} after the server came back",
            t.elapsed()
        );
    }
    time_bound("all done", t.elapsed(), RETRY_MAX + GRACE);
    // The writes landed, and the device goes on working.
    for i in 0..BLOCKS {
        let mut back = vec![0u8; BS];
        ctx.read_at(&mut back, i * BS as u64).unwrap();
        let want = if i % 2 == 0 {
            pattern(i, BS)
        } else {
            pattern(1000 + i, BS)
        };
        assert!(back == want, "block {i} after the reconnect");
    }
}

#[test]
fn bios_fail_once_the_reconnect_window_passes() {
    let dir = TempDir::new("reconnect-window");
    let img = image(&dir);
    let file = format!("file={img}");
    let mut kit = Nbdkit::start(&["--filter=delay", "file", &file, "rdelay=30"]);
    let dev = mqblk::open(&kit.spec_with("reconnect_ms=500")).unwrap();
    let mut ctx = dev.context().unwrap();
    for i in 0..8u64 {
        let mut bio = Bio::read_at(i * BS as u64, dev.alloc_buf(BS));
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    ctx.unplug();
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    kit.kill();
    let mut done = 0;
    while done < 8 {
        done += ctx.poll_wait(1, |c| assert_eq!(c.status(), Status::IoError));
    }
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "failed after {took:?}, before the window"
    );
    assert!(
        time_bound("failed", took, Duration::from_millis(500) + GRACE),
        "failing took {took:?}, past the 500 ms window"
    );
    let mut b = [0u8; BS];
    assert!(
        ctx.read_at(&mut b, 0).is_err(),
        "a lost connection fails later I/O at once"
    );
}

#[test]
fn a_server_that_comes_back_with_another_export_is_not_used() {
    let dir = TempDir::new("reconnect-changed");
    let img = image(&dir);
    let file = format!("file={img}");
    let mut kit = Nbdkit::start(&["--filter=delay", "file", &file, "rdelay=30"]);
    let dev = mqblk::open(&kit.spec_with("reconnect_ms=20000")).unwrap();
    let mut ctx = dev.context().unwrap();
    let mut bio = Bio::read_at(0, dev.alloc_buf(BS));
    bio.private = 7;
    ctx.submit(bio).unwrap();
    ctx.unplug();
    std::thread::sleep(Duration::from_millis(100));
    kit.kill();
    // The same socket now serves an export of another size.
    kit.restart(&["memory", "1M"]);
    let t = Instant::now();
    let mut done = 0;
    while done < 1 {
        done += ctx.poll_wait(1, |c| assert_eq!(c.status(), Status::IoError));
    }
    let took = t.elapsed();
    assert!(
        time_bound("failed", took, RETRY_MAX + GRACE),
        "took {took:?} after the server came back"
    );
}
