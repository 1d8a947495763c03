//! The export in-process, through the kernel: a ram device mounted over a
//! scratch file, and the system calls a program makes on it (read, write
//! on and off the device's blocks, fsync, fallocate, lseek, statfs,
//! stat), a read-only export's EROFS, and a stop that unmounts. Root
//! only (mount(2)); FUSE is built into the kernels this runs on.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mqblk_fuse::{Ended, Server, ServerConfig, StopHandle};
use mqblk_test_support::Scratch;

/// A mounted export; dropped, it is stopped (unmounted) even when the
/// test fails, then its scratch directory removed.
struct Mounted {
    path: PathBuf,
    dev: mqblk::Device,
    connection: Option<u64>,
    stop: StopHandle,
    thread: Option<std::thread::JoinHandle<Result<Ended, mqblk_fuse::Error>>>,
    _scratch: Scratch,
}

impl Mounted {
    fn new(tag: &str, spec: &str, read_only: bool) -> Mounted {
        Mounted::with_threads(tag, spec, read_only, 2)
    }

    fn with_threads(tag: &str, spec: &str, read_only: bool, threads: usize) -> Mounted {
        let scratch = Scratch::new(tag);
        let file = scratch.file("disk.img", 0);
        let dev = mqblk::open(spec).expect("open the device");
        let server = Server::mount(
            dev.clone(),
            &ServerConfig {
                file,
                threads: Some(threads),
                read_only,
            },
        )
        .expect("mount the export (as root)");
        let path = server.path().to_path_buf();
        let connection = server.connection();
        let stop = server.stop_handle();
        let thread = Some(std::thread::spawn(move || server.run()));
        Mounted {
            path,
            dev,
            connection,
            stop,
            thread,
            _scratch: scratch,
        }
    }

    /// Stop and wait (bounded); how it ended and how long it took.
    fn stop(&mut self) -> (Ended, Duration) {
        let t0 = Instant::now();
        self.stop.stop();
        let ended = self.end().expect("the export ends cleanly");
        (ended, t0.elapsed())
    }

    /// Wait (5 s at most) for the server's run to return.
    fn end(&mut self) -> Result<Ended, mqblk_fuse::Error> {
        let t0 = Instant::now();
        let t = self.thread.take().expect("ended once");
        while !t.is_finished() {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the export did not end within 5 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        t.join().expect("the server thread")
    }

    /// The device's flushes so far.
    fn flushes(&self) -> u64 {
        self.dev.stats().snapshot().ios[mqblk::stats::StatGroup::Flush as usize]
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
        }
    }
}

const MIB: u64 = 1 << 20;

#[test]
#[cfg_attr(miri, ignore)]
fn reads_writes_fsync_fallocate_lseek_statfs() {
    let mut m = Mounted::new("fuse-ops", "ram,size=64M", false);
    let meta = std::fs::metadata(&m.path).unwrap();
    assert_eq!(meta.len(), 64 * MIB, "the file's size is the capacity");
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    }
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&m.path)
        .unwrap();
    // On the device's blocks: the zero-copy path.
    let block: Vec<u8> = (0..1024 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    f.write_all_at(&block, 4 * MIB).unwrap();
    let mut back = vec![0u8; block.len()];
    f.read_exact_at(&mut back, 4 * MIB).unwrap();
    assert!(back == block, "1 MiB read back as written");
    // Off the blocks: the read-modify-write path.
    f.write_all_at(b"hello, device", 4 * MIB + 3).unwrap();
    let mut b = [0u8; 20];
    f.read_exact_at(&mut b, 4 * MIB + 1).unwrap();
    assert_eq!(&b[2..15], b"hello, device");
    assert_eq!(
        &b[..2],
        &block[1..3],
        "the bytes around an unaligned write are kept"
    );
    assert_eq!(&b[15..], &block[16..21]);
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    // Past the end: nothing read, and no write.
    let n = f.read_at(&mut b, 64 * MIB).unwrap();
    assert_eq!(n, 0);
    let e = f.write_at(b"x", 64 * MIB).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    // A hole punched, a range zeroed: SEEK_HOLE finds them, reads give zeros.
    let fd = f.as_raw_fd();
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: an open descriptor; fallocate takes integers only.
    let r = unsafe { libc::fallocate(fd, punch, (4 * MIB) as i64, (256 * 1024) as i64) };
    assert_eq!(r, 0, "punch hole: {}", std::io::Error::last_os_error());
    // SAFETY: as above.
    let r = unsafe {
        libc::fallocate(
            fd,
            libc::FALLOC_FL_ZERO_RANGE,
            (4 * MIB + 512 * 1024 + 100) as i64,
            5000,
        )
    };
    assert_eq!(r, 0, "zero range: {}", std::io::Error::last_os_error());
    let mut z = vec![1u8; 256 * 1024];
    f.read_exact_at(&mut z, 4 * MIB).unwrap();
    assert!(
        z.iter().all(|&x| x == 0),
        "the punched range reads as zeros"
    );
    let mut z = vec![1u8; 5002];
    f.read_exact_at(&mut z, 4 * MIB + 512 * 1024 + 99).unwrap();
    assert_eq!(z[0], block[512 * 1024 + 99]);
    assert!(
        z[1..5001].iter().all(|&x| x == 0),
        "the zeroed range reads as zeros"
    );
    assert_eq!(z[5001], block[512 * 1024 + 100 + 5000]);
    // SAFETY: lseek on an open descriptor.
    let hole = unsafe { libc::lseek(fd, (4 * MIB) as i64, libc::SEEK_HOLE) };
    assert_eq!(hole, (4 * MIB) as i64, "SEEK_HOLE finds the punched hole");
    // SAFETY: as above.
    let data = unsafe { libc::lseek(fd, 0, libc::SEEK_DATA) };
    assert_eq!(
        data,
        (4 * MIB + 256 * 1024) as i64,
        "SEEK_DATA skips the holes before the data"
    );
    // Growing the file, or past the device: refused.
    // SAFETY: as above.
    let r = unsafe { libc::fallocate(fd, 0, (63 * MIB) as i64, (2 * MIB) as i64) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOSPC)
    );
    // The size is fixed: a truncate, to any size, is refused as
    // qemu-storage-daemon refuses it on a node it cannot resize.
    for size in [MIB, 64 * MIB] {
        let e = f.set_len(size).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{size}: {e}");
    }
    assert_eq!(std::fs::metadata(&m.path).unwrap().len(), 64 * MIB);
    // statfs
    let c = std::ffi::CString::new(m.path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a zeroed statfs is valid, and the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` outlives the call.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_blocks as u64 * st.f_bsize as u64, 64 * MIB);
    // Plain std I/O: seek and read.
    f.seek(SeekFrom::Start(4 * MIB + 300 * 1024)).unwrap();
    let mut s = [0u8; 10];
    f.read_exact(&mut s).unwrap();
    assert_eq!(&s, &block[300 * 1024..300 * 1024 + 10]);
    drop(f);
    let (ended, took) = m.stop();
    eprintln!("stopped in {took:?}: {ended:?}");
    assert!(!ended.detached && !ended.aborted, "{ended:?}");
    assert_eq!(
        ended.errors, 4,
        "the four refused requests (a write and a fallocate past the end: ENOSPC; two \
         truncates: EOPNOTSUPP): {ended:?}"
    );
    assert!(
        mqblk_fuse::mount::mounts_on(&m.path).unwrap().is_empty(),
        "unmounted"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_read_only_export_refuses_writes_with_erofs() {
    let m = Mounted::new("fuse-ro", "ram,size=8M", true);
    let meta = std::fs::metadata(&m.path).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o444);
    }
    let e = OpenOptions::new().write(true).open(&m.path).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let mut f = std::fs::File::open(&m.path).unwrap();
    let mut b = vec![1u8; 4096];
    f.read_exact(&mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0));
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_stop_with_the_file_open_detaches_and_aborts() {
    let mut m = Mounted::new("fuse-busy", "ram,size=8M", false);
    let f = std::fs::File::open(&m.path).unwrap();
    let (ended, took) = m.stop();
    eprintln!("stopped with the file open in {took:?}: {ended:?}");
    assert!(ended.detached, "{ended:?}");
    assert!(ended.aborted, "{ended:?}");
    assert_eq!(ended.threads_left, 0);
    let mut b = [0u8; 512];
    let e = f.read_at(&mut b, 0).unwrap_err();
    eprintln!("a read after the abort: {e}");
    // The bound for a stop; the export's own waits (DETACH_WAIT,
    // then QUIT_WAIT at most) fit in it.
    let bound = Duration::from_secs(2);
    assert!(mqblk_fuse::DETACH_WAIT + mqblk_fuse::QUIT_WAIT < bound);
    assert!(
        mqblk_test_support::time_bound("stop-file-open", took, bound),
        "stopped in {took:?}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_close_flushes_the_device_as_fsync_does() {
    // A file image: a device with a write cache, whose flushes count.
    let img = Scratch::new("fuse-flush-img");
    let spec = format!("file:{}", img.file("image.raw", 8 * MIB).display());
    let m = Mounted::new("fuse-flush", &spec, false);
    let f = OpenOptions::new().write(true).open(&m.path).unwrap();
    f.write_all_at(&[7u8; 4096], 0).unwrap();
    let before = m.flushes();
    drop(f);
    let after_close = m.flushes();
    eprintln!("device flushes: {before} before the close, {after_close} after it");
    assert!(
        after_close > before,
        "FLUSH (sent on close) flushes the device: {before} -> {after_close}"
    );
    let f = OpenOptions::new().write(true).open(&m.path).unwrap();
    let at_open = m.flushes();
    f.sync_data().unwrap();
    assert!(m.flushes() > at_open, "fdatasync flushes the device");
}

/// Unaligned writes (each a read-modify-write of the 4 KiB block around
/// it) race aligned writes of the same blocks, from several threads,
/// round after round. In round r every write puts the byte v(r)
/// (the unaligned ones into parts of the blocks the aligned one fills), so
/// whatever order they land in, the model is the region all v(r); an
/// aligned write lost under a read-modify-write's write-back leaves
/// v(r - 1) around the patches. (With the RMWs only serialised among
/// themselves, 13 to 29 of 1000 rounds lost a block this way.)
#[test]
#[cfg_attr(miri, ignore)]
fn unaligned_and_aligned_writes_to_the_same_blocks_exclude_each_other() {
    const BLOCK: u64 = 4096;
    const BLOCKS: u64 = 8;
    const ROUNDS: usize = 400;
    const UNALIGNED_THREADS: u64 = 3;
    const ALIGNED_THREADS: u64 = 2;
    // Memory that takes 100 us an I/O: a read-modify-write's window
    // between its read and its write is wide enough for a racing aligned
    // write to land in it.
    const SLOW_MEMORY: &str =
        "null,size=8M,memory_backed=1,block_size=4096,completion=timer,completion_nsec=100000";
    let m = Mounted::with_threads("fuse-rmw", SLOW_MEMORY, false, 4);
    let base = MIB;
    let v = |r: usize| (r % 250 + 1) as u8;
    let barrier = std::sync::Barrier::new((ALIGNED_THREADS + UNALIGNED_THREADS) as usize + 1);
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&m.path)
            .unwrap()
    };
    let mut bad_rounds = Vec::new();
    std::thread::scope(|s| {
        // The aligned writers: the region block by block, one in the
        // order the unaligned ones go, one backwards.
        for t in 0..ALIGNED_THREADS {
            let (barrier, open) = (&barrier, &open);
            s.spawn(move || {
                let f = open();
                for r in 0..ROUNDS {
                    barrier.wait();
                    for k in 0..BLOCKS {
                        let k = if t % 2 == 0 { k } else { BLOCKS - 1 - k };
                        f.write_all_at(&[v(r); BLOCK as usize], base + k * BLOCK)
                            .unwrap();
                    }
                    barrier.wait();
                }
            });
        }
        // The unaligned writers: 700 bytes off the block boundaries in
        // every block, each thread at its own place in the block.
        for t in 0..UNALIGNED_THREADS {
            let (barrier, open) = (&barrier, &open);
            s.spawn(move || {
                let f = open();
                for r in 0..ROUNDS {
                    barrier.wait();
                    for k in 0..BLOCKS {
                        let at = base + k * BLOCK + 100 + t * 1000;
                        f.write_all_at(&[v(r); 700], at).unwrap();
                    }
                    barrier.wait();
                }
            });
        }
        let f = open();
        let mut back = vec![0u8; (BLOCK * BLOCKS) as usize];
        for r in 0..ROUNDS {
            barrier.wait();
            barrier.wait();
            f.read_exact_at(&mut back, base).unwrap();
            let wrong = back.iter().filter(|&&b| b != v(r)).count();
            if wrong > 0 {
                bad_rounds.push((r, wrong));
            }
        }
    });
    let rmws = ROUNDS as u64 * UNALIGNED_THREADS * BLOCKS;
    eprintln!(
        "{ROUNDS} rounds of {} aligned writes and {} read-modify-writes on the same \
         {BLOCKS} blocks, 4 server threads: {} rounds off the model {:?}",
        ALIGNED_THREADS * BLOCKS,
        UNALIGNED_THREADS * BLOCKS,
        bad_rounds.len(),
        &bad_rounds[..bad_rounds.len().min(5)]
    );
    assert!(
        bad_rounds.is_empty(),
        "{} of {ROUNDS} rounds ({rmws} RMWs) lost bytes: (round, bytes off) {:?}",
        bad_rounds.len(),
        &bad_rounds[..bad_rounds.len().min(10)]
    );
}

/// Mount fusectl on /sys/fs/fuse/connections if it is not mounted (root).
fn fusectl() {
    let dir = std::path::Path::new("/sys/fs/fuse/connections");
    let mounted = std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(2) == Some("fusectl"));
    if !mounted {
        let st = std::process::Command::new("mount")
            .args(["-t", "fusectl", "none"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount -t fusectl: {st}");
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn an_abort_by_the_kernel_ends_the_io_and_the_export_with_an_error_within_2_s() {
    fusectl();
    let mut m = Mounted::new("fuse-abort", "ram,size=32M", false);
    let id = m
        .connection
        .expect("the connection's id, from the mount table");
    let path = m.path.clone();
    // Readers and writers with I/O in flight when the connection goes.
    let stop_load = std::sync::atomic::AtomicBool::new(false);
    let (ended, took, ios) = std::thread::scope(|s| {
        let load: Vec<_> = (0..4u64)
            .map(|t| {
                let (path, stop_load) = (&path, &stop_load);
                s.spawn(move || {
                    let f = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(path)
                        .unwrap();
                    let mut b = vec![t as u8; 64 * 1024];
                    let mut ios = 0u64;
                    for i in 0u64.. {
                        if stop_load.load(std::sync::atomic::Ordering::Relaxed) {
                            break;
                        }
                        let at = (i * 4 + t) % 512 * 64 * 1024;
                        let r = if t % 2 == 0 {
                            f.read_at(&mut b, at).map(|_| ())
                        } else {
                            f.write_all_at(&b, at)
                        };
                        if r.is_err() {
                            // The abort failed it.
                            break;
                        }
                        ios += 1;
                    }
                    ios
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        std::fs::write(format!("/sys/fs/fuse/connections/{id}/abort"), b"1")
            .expect("abort through fusectl");
        let ended = m.end();
        let took = t0.elapsed();
        stop_load.store(true, std::sync::atomic::Ordering::Relaxed);
        let ios: Vec<u64> = load.into_iter().map(|h| h.join().unwrap()).collect();
        (ended, took, ios)
    });
    eprintln!(
        "aborted under load ({ios:?} I/Os by 4 threads): the export ended in {took:?}: {ended:?}"
    );
    let e = ended.expect_err("an abort from outside is an error");
    let said = e.to_string();
    assert!(
        matches!(e, mqblk_fuse::Error::Aborted { connection, abandoned: 0, .. } if connection == id),
        "{said}"
    );
    assert!(said.contains("aborted FUSE connection"), "{said}");
    assert!(ios.iter().all(|&n| n > 0), "the load ran: {ios:?}");
    assert!(
        mqblk_test_support::time_bound("abort", took, Duration::from_secs(2)),
        "the export took {took:?} to end after the abort"
    );
    assert!(
        mqblk_fuse::mount::mounts_on(&m.path).unwrap().is_empty(),
        "the export unmounted the aborted file"
    );
}
