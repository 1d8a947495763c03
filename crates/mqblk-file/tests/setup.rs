//! Setup of file devices: discovery, fallbacks that must be announced
//! (IOPOLL on a device that cannot poll), SQPOLL, extents, and setup
//! errors that must say what to do.

mod common;

use common::{expect_pattern, open, pattern, Scratch, Tmpfs};
use mqblk_test_support::LoopDev;

const MIB: u64 = 1 << 20;

fn write_read(dev: &mqblk_core::Device) {
    let mut ctx = dev.context().unwrap();
    for i in 0..64u64 {
        let off = i * 8192;
        let mut w = dev.alloc_buf(4096);
        pattern(w.as_mut_slice(), off, 4);
        ctx.write_at(w.as_slice(), off).unwrap();
        let mut r = dev.alloc_buf(4096);
        ctx.read_at(r.as_mut_slice(), off).unwrap();
        expect_pattern(r.as_slice(), off, 4);
    }
}

#[test]
fn iopoll_on_a_loop_device_falls_back_with_a_message() {
    let s = Scratch::new("iopoll-loop");
    let p = s.file("backing.img", 16 * MIB);
    let Some(l) = LoopDev::attach(&p) else { return };
    let dev = open(std::path::Path::new(&l.dev), "engine=uring,iopoll=1").unwrap();
    let info = mqblk_file::info(dev.name()).unwrap();
    assert_eq!(info.engine, "uring", "{}", info.summary());
    assert!(!info.iopoll, "{}", info.summary());
    assert!(!info.ring_flags.contains("IOPOLL"), "{}", info.summary());
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("iopoll=1 requested") && n.contains("poll queues")),
        "{:?}",
        info.notes
    );
    write_read(&dev);
}

/// Whether the block device under `path`'s file system has poll queues,
/// read from sysfs here (not through the driver): None when the file
/// system has no block device of its own (tmpfs, overlay).
fn fs_device_polls(path: &std::path::Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).unwrap().dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let sys = std::path::PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition's queue is its disk's.
    [sys.join("queue/io_poll"), sys.join("../queue/io_poll")]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim() == "1")
}

#[test]
fn iopoll_on_a_regular_file_polls_or_says_why_not() {
    let s = Scratch::new("iopoll-file");
    let p = s.file("disk.img", 16 * MIB);
    let dev = open(&p, "engine=uring,iopoll=1").unwrap();
    // I/O first: a ring may still drop IOPOLL at its first polled I/O.
    write_read(&dev);
    let info = mqblk_file::info(dev.name()).unwrap();
    assert_eq!(info.engine, "uring", "{}", info.summary());
    // Which path must run follows from the machine, and the driver must
    // report that one.
    match fs_device_polls(&p) {
        Some(true) => {
            assert!(info.iopoll, "poll queues, yet {}", info.summary());
            assert!(info.ring_flags.contains("IOPOLL"), "{}", info.summary());
            assert!(
                !info.notes.iter().any(|n| n.contains("fell back")),
                "{:?}",
                info.notes
            );
        }
        Some(false) => {
            assert!(!info.iopoll, "no poll queues, yet {}", info.summary());
            assert!(!info.ring_flags.contains("IOPOLL"), "{}", info.summary());
            assert!(
                info.notes.iter().any(|n| n.contains("iopoll=1 requested")
                    && n.contains("no poll queues")
                    && n.contains("interrupt-driven")),
                "{:?}",
                info.notes
            );
        }
        None => {
            assert!(!info.iopoll, "{}", info.summary());
            assert!(
                info.notes.iter().any(|n| n.contains("iopoll=1 requested")),
                "{:?}",
                info.notes
            );
        }
    }
}

#[test]
fn sqpoll_round_trip() {
    let s = Scratch::new("sqpoll");
    let p = s.file("disk.img", 16 * MIB);
    let dev = open(&p, "engine=uring,sqpoll=1,hw_queues=1").unwrap();
    let info = mqblk_file::info(dev.name()).unwrap();
    assert_eq!(info.engine, "uring", "{}", info.summary());
    assert!(info.sqpoll, "{}", info.summary());
    assert!(info.ring_flags.contains("SQPOLL"), "{}", info.summary());
    write_read(&dev);
}

#[test]
fn extents_follow_holes_and_data() {
    let s = Scratch::new("extents");
    let p = s.file("sparse.img", 8 * MIB);
    let dev = open(&p, "").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut w = dev.alloc_buf(MIB as usize);
    pattern(w.as_mut_slice(), 2 * MIB, 1);
    ctx.write_at(w.as_slice(), 2 * MIB).unwrap();
    ctx.flush().unwrap();
    let ext = dev.extents(0, 8 * MIB).unwrap();
    let total: u64 = ext.iter().map(|e| e.len_bytes).sum();
    assert_eq!(total, 8 * MIB, "{ext:?}");
    let data: Vec<_> = ext.iter().filter(|e| !e.hole).collect();
    assert!(
        data.iter()
            .any(|e| e.offset_bytes <= 2 * MIB && e.offset_bytes + e.len_bytes >= 3 * MIB),
        "the written MiB is data: {ext:?}"
    );
    assert!(
        ext.first().unwrap().hole && ext.last().unwrap().hole,
        "{ext:?}"
    );
    // Discard punches a hole that extents see.
    ctx.discard(2 * MIB, MIB).unwrap();
    let ext = dev.extents(0, 8 * MIB).unwrap();
    assert!(ext.iter().all(|e| e.hole), "{ext:?}");
}

#[test]
fn geometry_comes_from_discovery() {
    let s = Scratch::new("geom");
    let p = s.file("disk.img", 16 * MIB + 1000);
    let dev = open(&p, "").unwrap();
    let lbs = u64::from(dev.logical_block_size());
    assert_eq!(dev.capacity_bytes(), (16 * MIB + 1000) / lbs * lbs);
    let l = dev.info().limits;
    assert!(l.dma_alignment + 1 >= 1);
    assert!(l.max_segments >= 1);
    let info = mqblk_file::info(dev.name()).unwrap();
    assert!(!info.align_source.is_empty());
    // size= creates a file.
    let q = s.path("new.img");
    let dev = open(&q, "size=4M").unwrap();
    assert_eq!(dev.capacity_bytes(), 4 * MIB);
    assert_eq!(std::fs::metadata(&q).unwrap().len(), 4 * MIB);
}

#[test]
fn a_missing_path_under_dev_is_a_missing_device_never_a_file_to_create() {
    let p = std::path::Path::new("/dev/mqblk-no-such-disk");
    for opts in ["", "size=1M", "size=1M,create=1"] {
        let e = open(p, opts).unwrap_err().to_string();
        assert!(
            e.contains("/dev/mqblk-no-such-disk does not exist: there is no such device"),
            "{opts}: {e}"
        );
        assert!(!e.contains("size=1G"), "{e}");
        assert!(!p.exists(), "{opts}: created {}", p.display());
    }
}

#[test]
fn setup_errors_say_what_to_do() {
    let s = Scratch::new("errors");
    let e = open(&s.path("missing.img"), "").unwrap_err().to_string();
    assert!(e.contains("does not exist") && e.contains("size="), "{e}");
    let e = open(&s.dir, "").unwrap_err().to_string();
    assert!(
        e.contains("is a directory; expected a regular file or a block device"),
        "{e}"
    );
    let p = s.file("disk.img", MIB);
    let e = open(&p, "bogus=1").unwrap_err().to_string();
    assert!(e.contains("unknown option `bogus`"), "{e}");
    let e = open(&p, "wait=sleep,iopoll=1").unwrap_err().to_string();
    assert!(e.contains("wait=poll"), "{e}");
    let p0 = s.file("empty.img", 0);
    let e = open(&p0, "").unwrap_err().to_string();
    assert!(e.contains("less than one"), "{e}");
    if let Some(fs) = Tmpfs::mount("odirect", "4M") {
        let t = fs.dir.join("x.img");
        std::fs::File::create(&t).unwrap().set_len(MIB).unwrap();
        // tmpfs takes O_DIRECT since Linux 6.6; before, the error says
        // what to do.
        match open(&t, "direct=1") {
            Ok(dev) => write_read(&dev),
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("O_DIRECT") && e.contains("direct=0"), "{e}");
            }
        }
        let dev = open(&t, "direct=0").unwrap();
        write_read(&dev);
    }
}

#[test]
fn zram_round_trip() {
    // zram may be a module: load it if modprobe is there. Without zram (or
    // root to add one) the skip is counted, and fails in CI.
    let _ = std::process::Command::new("modprobe")
        .arg("zram")
        .stderr(std::process::Stdio::null())
        .status();
    let hot_add = std::path::Path::new("/sys/class/zram-control/hot_add");
    let id = match std::fs::read_to_string(hot_add) {
        Ok(id) => id,
        Err(e) => {
            mqblk_test_support::skip_unless_ci(&format!(
                "cannot add a zram device ({}: {e})",
                hot_add.display()
            ));
            return;
        }
    };
    let name = format!("zram{}", id.trim());
    struct Reset(String);
    impl Drop for Reset {
        fn drop(&mut self) {
            // The kernel lets go of a ring's registered file a moment
            // after the ring is closed: retry while the device is busy.
            for _ in 0..100 {
                if std::fs::write(format!("/sys/block/{}/reset", self.0), "1").is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = std::fs::write(
                "/sys/class/zram-control/hot_remove",
                self.0.trim_start_matches("zram"),
            );
        }
    }
    let _reset = Reset(name.clone());
    if let Err(e) = std::fs::write(format!("/sys/block/{name}/disksize"), "64M") {
        mqblk_test_support::skip_unless_ci(&format!("cannot size /dev/{name}: {e}"));
        return;
    }
    let dev = open(std::path::Path::new(&format!("/dev/{name}")), "").unwrap();
    assert_eq!(dev.capacity_bytes(), 64 * MIB);
    write_read(&dev);
}
