//! `mqblk serve --vhost-user-blk` with a real client: libblkio's
//! `virtio-blk-vhost-user` driver (the `blkio` crate), as QEMU's and
//! SPDK's users reach a vhost-user-blk backend. Reads and writes checked
//! against a plain in-memory model over several queues at once, flush,
//! discard, write-zeroes, capacity and block size from the configuration
//! space, a read-only device, memory regions added while running, and
//! SIGINT with the client attached.

use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use blkio::{Blkio, Blkioq, Completion, MemoryRegion, ReqFlags};
use mqblk_test_support::{time_bound, Scratch, Watched};

/// `mqblk serve SPEC --vhost-user-blk SOCKET` and its extra options;
/// waits for the socket.
/// The server a test started: killed by its pid when dropped, and then,
/// if the test is failing, what it printed is shown.
struct Server(Option<Watched>);

impl Server {
    fn signal(&mut self, sig: &str) {
        self.0.as_mut().expect("running").signal(sig);
    }
    fn wait(&mut self, max: Duration) -> std::process::ExitStatus {
        self.0.as_mut().expect("running").wait(max)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut s) = self.0.take() {
            s.kill();
            let (_, _, err) = s.finish(Duration::from_secs(10));
            if std::thread::panicking() {
                eprintln!("--- mqblk serve's stderr:\n{err}");
            }
        }
    }
}

fn serve(scratch: &Scratch, spec: &str, extra: &[&str]) -> (Server, PathBuf) {
    let sock = scratch.path().join("vhost.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mqblk"));
    cmd.args(["serve", spec, "--vhost-user-blk"])
        .arg(&sock)
        .args(extra);
    let server = Watched::spawn(&mut cmd);
    // The startup line comes once the socket listens (its path appears at
    // bind, a moment before).
    server.wait_err("mqblk serve: vhost-user-blk on", Duration::from_secs(30));
    (Server(Some(server)), sock)
}

/// A started libblkio instance with `queues` queues and one memory region.
struct Client {
    blkio: Blkio,
    queues: Vec<Blkioq>,
    region: MemoryRegion,
}

fn connect(sock: &Path, queues: i32) -> Client {
    connect_as(sock, queues, false)
}

/// As [`connect`]; `read_only` opens the device read-only, as libblkio
/// requires of a device that offers VIRTIO_BLK_F_RO.
fn connect_as(sock: &Path, queues: i32, read_only: bool) -> Client {
    let mut blkio = Blkio::new("virtio-blk-vhost-user").expect("libblkio driver");
    blkio
        .set_str("path", sock.to_str().unwrap())
        .expect("set path");
    blkio.set_bool("read-only", read_only).expect("read-only");
    blkio.connect().expect("connect to the vhost-user socket");
    blkio.set_i32("num-queues", queues).expect("num-queues");
    let out = blkio.start().expect("start");
    let region = blkio
        .alloc_mem_region(1 << 20)
        .expect("alloc a memory region");
    blkio
        .map_mem_region(&region)
        .expect("map the memory region");
    Client {
        blkio,
        queues: out.queues,
        region,
    }
}

impl Client {
    /// The region's bytes.
    fn buf(&mut self) -> &mut [u8] {
        // SAFETY: the region is `len` bytes mapped read-write by libblkio
        // for as long as `self.blkio` lives; no request is in flight while
        // this borrow is used (every helper waits for its completions).
        unsafe { std::slice::from_raw_parts_mut(self.region.addr as *mut u8, self.region.len) }
    }

    /// Wait for `n` completions on queue `q`; their results, by user_data.
    fn reap(&mut self, q: usize, n: usize) -> Vec<(usize, i32)> {
        let mut out = Vec::new();
        let mut c = [const { MaybeUninit::<Completion>::uninit() }; 64];
        while out.len() < n {
            let mut timeout = Duration::from_secs(10);
            let got = self.queues[q]
                .do_io(&mut c, 1, Some(&mut timeout), None)
                .expect("do_io");
            assert!(got > 0, "no completion on queue {q} within 10 s");
            for done in &c[..got] {
                // SAFETY: do_io initialised the first `got` completions.
                let done = unsafe { done.assume_init_ref() };
                out.push((done.user_data, done.ret));
            }
        }
        out
    }

    /// One request on queue `q`, waited for: its result.
    fn one(&mut self, q: usize, submit: impl FnOnce(&mut Blkioq, *mut u8)) -> i32 {
        let base = self.region.addr as *mut u8;
        submit(&mut self.queues[q], base);
        self.reap(q, 1)[0].1
    }
}

/// A deterministic generator for offsets and data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Random 4 KiB writes and reads over two queues, 16 in flight on each,
/// checked against a model of the device's bytes. `keeps_data`: the
/// device stores what is written (a plain null device does not, and
/// leaves a read's buffer as it was, as null_blk does: only the statuses
/// are checked).
fn model_check(tag: &str, spec: &str, size: u64, keeps_data: bool, extra: &[&str]) {
    let scratch = Scratch::new(tag);
    let args: Vec<&str> = ["--num-queues", "2"].iter().chain(extra).copied().collect();
    let (server, sock) = serve(&scratch, spec, &args);
    let mut c = connect(&sock, 2);
    assert_eq!(c.blkio.get_u64("capacity").unwrap(), size);
    let mut model = vec![0u8; size as usize];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    const BS: usize = 4096;
    const DEPTH: usize = 16;
    let blocks = size / BS as u64;
    let mut verified = 0u64;
    for round in 0..40 {
        // Each queue gets DEPTH requests at distinct blocks, written first,
        // then all read back: requests in flight never overlap.
        let mut picked: Vec<u64> = Vec::new();
        while picked.len() < 2 * DEPTH {
            let b = rng.next() % blocks;
            if !picked.contains(&b) {
                picked.push(b);
            }
        }
        for (i, &b) in picked.iter().enumerate() {
            let slot = i * BS;
            let fill = (rng.next() & 0xff) as u8;
            for (j, byte) in c.buf()[slot..slot + BS].iter_mut().enumerate() {
                *byte = fill ^ (j as u8) ^ (round as u8);
            }
            let data = c.buf()[slot..slot + BS].to_vec();
            if keeps_data {
                model[(b as usize) * BS..(b as usize + 1) * BS].copy_from_slice(&data);
            }
            let base = c.region.addr as *const u8;
            // SAFETY: slot + BS lies inside the 1 MiB region (2 * DEPTH * BS).
            let p = unsafe { base.add(slot) };
            c.queues[i % 2].write(b * BS as u64, p, BS, i, ReqFlags::empty());
        }
        for q in 0..2 {
            for (ud, ret) in c.reap(q, DEPTH) {
                assert_eq!(ret, 0, "write {ud} on queue {q} failed: {ret}");
            }
        }
        for byte in c.buf()[..2 * DEPTH * BS].iter_mut() {
            *byte = 0xa5;
        }
        for (i, &b) in picked.iter().enumerate() {
            let base = c.region.addr as *mut u8;
            // SAFETY: as above.
            let p = unsafe { base.add(i * BS) };
            c.queues[i % 2].read(b * BS as u64, p, BS, i, ReqFlags::empty());
        }
        for q in 0..2 {
            for (ud, ret) in c.reap(q, DEPTH) {
                assert_eq!(ret, 0, "read {ud} on queue {q} failed: {ret}");
            }
        }
        for (i, &b) in picked.iter().enumerate() {
            if !keeps_data {
                break;
            }
            let want = &model[(b as usize) * BS..(b as usize + 1) * BS];
            let got = &c.buf()[i * BS..(i + 1) * BS];
            assert!(
                got == want,
                "{spec}: block {b} read back differs from the model"
            );
            verified += 1;
        }
    }
    if keeps_data {
        eprintln!("{spec}: {verified} blocks read back over 2 queues, 0 verify errors");
    } else {
        eprintln!(
            "{spec}: {} writes and reads over 2 queues, all completed OK",
            40 * 4 * DEPTH
        );
    }
    stop(server);
}

/// SIGINT: the server exits 0.
fn stop(mut server: Server) {
    server.signal("-INT");
    let st = server.wait(Duration::from_secs(5));
    assert!(st.success(), "mqblk serve exited {st}");
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve and libblkio (syscalls)")]
fn libblkio_reads_back_what_it_wrote_over_two_queues_on_ram() {
    model_check("vhost-blkio-ram", "ram,size=64M", 64 << 20, true, &[]);
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve and libblkio (syscalls)")]
fn libblkio_reads_back_what_it_wrote_over_two_queues_on_a_file() {
    let scratch = Scratch::new("vhost-blkio-file-img");
    let f = scratch.file("disk.img", 32 << 20);
    model_check(
        "vhost-blkio-file",
        &format!("file:{}", f.display()),
        32 << 20,
        true,
        &[],
    );
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve and libblkio (syscalls)")]
fn libblkio_reads_back_what_it_wrote_over_two_queues_on_null() {
    model_check("vhost-blkio-null", "null,size=1G", 1 << 30, false, &[]);
    model_check(
        "vhost-blkio-null-mem",
        "null,size=256M,memory_backed=1",
        256 << 20,
        true,
        &[],
    );
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve and libblkio (syscalls)")]
fn libblkio_reads_back_what_it_wrote_with_the_queues_busy_polling() {
    model_check(
        "vhost-blkio-poll",
        "ram,size=64M",
        64 << 20,
        true,
        &["--poll-us", "200"],
    );
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve and libblkio (syscalls)")]
fn flush_discard_and_write_zeroes_reach_the_device() {
    let scratch = Scratch::new("vhost-blkio-ops");
    let (server, sock) = serve(&scratch, "ram,size=16M", &["--num-queues", "1"]);
    let mut c = connect(&sock, 1);
    let bs = 64 << 10;
    c.buf()[..bs].fill(0x5a);
    let ret = c.one(0, |q, p| q.write(0, p, bs, 1, ReqFlags::empty()));
    assert_eq!(ret, 0, "write");
    assert_eq!(c.one(0, |q, _| q.flush(2, ReqFlags::empty())), 0, "flush");
    // Zero the first 32 KiB, discard the next 32 KiB (ram reads zeros after
    // a discard, as brd does).
    assert_eq!(
        c.one(0, |q, _| q.write_zeroes(0, 32 << 10, 3, ReqFlags::empty())),
        0,
        "write-zeroes"
    );
    assert_eq!(
        c.one(0, |q, _| q.discard(
            32 << 10,
            32 << 10,
            4,
            ReqFlags::empty()
        )),
        0,
        "discard"
    );
    c.buf()[..bs].fill(0xff);
    assert_eq!(c.one(0, |q, p| q.read(0, p, bs, 5, ReqFlags::empty())), 0);
    assert!(c.buf()[..32 << 10].iter().all(|&b| b == 0), "zeroed range");
    assert!(
        c.buf()[32 << 10..bs].iter().all(|&b| b == 0),
        "discarded range"
    );
    // A range past the end fails, and the queue goes on.
    let ret = c.one(0, |q, _| {
        q.write_zeroes(16 << 20, 4096, 6, ReqFlags::empty())
    });
    assert!(ret < 0, "write-zeroes past the end succeeded");
    assert_eq!(c.one(0, |q, p| q.read(0, p, 4096, 7, ReqFlags::empty())), 0);
    stop(server);
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve and libblkio (syscalls)")]
fn capacity_and_block_size_come_from_the_config_space() {
    let scratch = Scratch::new("vhost-blkio-config");
    let (server, sock) = serve(
        &scratch,
        "ram,size=8M,block_size=4096",
        &["--num-queues", "3"],
    );
    let c = connect(&sock, 3);
    assert_eq!(c.blkio.get_u64("capacity").unwrap(), 8 << 20);
    assert_eq!(c.blkio.get_i32("request-alignment").unwrap(), 4096);
    assert_eq!(c.blkio.get_i32("num-queues").unwrap(), 3);
    assert!(!c.blkio.get_bool("read-only").unwrap());
    eprintln!(
        "config space: capacity {} bytes, request-alignment {}, max-segments {}, \
         max-segment-len {}",
        c.blkio.get_u64("capacity").unwrap(),
        c.blkio.get_i32("request-alignment").unwrap(),
        c.blkio.get_i32("max-segments").unwrap(),
        c.blkio.get_i32("max-segment-len").unwrap(),
    );
    drop(c);
    stop(server);
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve and libblkio (syscalls)")]
fn a_read_only_device_refuses_writes_and_serves_reads() {
    let scratch = Scratch::new("vhost-blkio-ro");
    let (server, sock) = serve(&scratch, "ram,size=8M", &["--read-only"]);
    // libblkio refuses to start a device that offers RO unless it is
    // opened read-only.
    let refused = std::panic::catch_unwind(|| connect(&sock, 1));
    assert!(
        refused.is_err(),
        "libblkio started a read-only device read-write"
    );
    let mut c = connect_as(&sock, 1, true);
    assert!(c.blkio.get_bool("read-only").unwrap(), "RO not offered");
    let ret = c.one(0, |q, p| q.write(0, p, 4096, 1, ReqFlags::empty()));
    assert!(ret < 0, "a write to a read-only device succeeded");
    assert_eq!(c.one(0, |q, p| q.read(0, p, 4096, 2, ReqFlags::empty())), 0);
    eprintln!("read-only: the write ended with {ret}, the read with 0");
    stop(server);
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve and libblkio (syscalls)")]
fn memory_regions_added_while_running_carry_io() {
    let scratch = Scratch::new("vhost-blkio-regions");
    let (server, sock) = serve(&scratch, "ram,size=8M", &["--num-queues", "1"]);
    let mut c = connect(&sock, 1);
    // Three more regions, mapped after start (VHOST_USER_ADD_MEM_REGION),
    // each written from and read into.
    let mut regions = Vec::new();
    for i in 0..3u8 {
        let r = c.blkio.alloc_mem_region(64 << 10).expect("alloc");
        c.blkio.map_mem_region(&r).expect("map after start");
        // SAFETY: `r` is 64 KiB mapped read-write until it is freed below;
        // nothing is in flight on it while this borrow is used.
        let b = unsafe { std::slice::from_raw_parts_mut(r.addr as *mut u8, r.len) };
        b.fill(0x30 + i);
        let ret = c.one(0, |q, _| {
            q.write(
                u64::from(i) << 16,
                r.addr as *const u8,
                r.len,
                1,
                ReqFlags::empty(),
            )
        });
        assert_eq!(ret, 0, "write from added region {i}");
        regions.push(r);
    }
    for (i, r) in regions.iter().enumerate() {
        // SAFETY: as above.
        let b = unsafe { std::slice::from_raw_parts_mut(r.addr as *mut u8, r.len) };
        b.fill(0);
        let ret = c.one(0, |q, _| {
            q.read(
                (i as u64) << 16,
                r.addr as *mut u8,
                r.len,
                2,
                ReqFlags::empty(),
            )
        });
        assert_eq!(ret, 0);
        // SAFETY: as above; the read completed.
        let b = unsafe { std::slice::from_raw_parts(r.addr as *const u8, r.len) };
        assert!(b.iter().all(|&x| x == 0x30 + i as u8), "region {i}");
    }
    // One region unmapped (VHOST_USER_REM_MEM_REGION); the others still
    // carry I/O.
    c.blkio.unmap_mem_region(&regions[0]);
    let r = &regions[1];
    let ret = c.one(0, |q, _| {
        q.read(0, r.addr as *mut u8, r.len, 3, ReqFlags::empty())
    });
    assert_eq!(ret, 0);
    eprintln!("3 regions added after start carried I/O; one removed, the rest went on");
    stop(server);
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve and libblkio (syscalls)")]
fn sigint_with_a_client_attached_exits_within_2s_and_the_next_client_is_served_first() {
    let scratch = Scratch::new("vhost-blkio-sigint");
    let (mut server, sock) = serve(&scratch, "null,size=1G", &["--num-queues", "2"]);
    // A first client comes and goes; a second one is served after it.
    let first = connect(&sock, 2);
    drop(first);
    let mut c = connect(&sock, 2);
    // Requests in flight on both queues when the signal comes.
    for q in 0..2 {
        for i in 0..16 {
            let base = c.region.addr as *mut u8;
            // SAFETY: 32 reads of 4 KiB fit in the 1 MiB region.
            let p = unsafe { base.add((q * 16 + i) * 4096) };
            c.queues[q].read((i as u64) << 12, p, 4096, i, ReqFlags::empty());
        }
    }
    let t = Instant::now();
    server.signal("-INT");
    let st = server.wait(Duration::from_secs(10));
    let took = t.elapsed();
    time_bound(
        "vhost-user-blk: SIGINT with a client attached to exit",
        took,
        Duration::from_secs(2),
    );
    assert!(st.success(), "mqblk serve exited {st}");
    assert!(
        took < Duration::from_secs(2),
        "exit took {took:?}, bound 2 s"
    );
    drop(c);
}

/// `mqblk qos --control=SOCKET ARGS...`: its stdout, failing on an error.
fn qos(ctl: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .arg("qos")
        .arg(format!("--control={}", ctl.display()))
        .args(args)
        .output()
        .expect("run mqblk qos");
    assert!(
        out.status.success(),
        "qos {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The read and write completions of `dev` in a diskstats file
/// (`MAJOR MINOR NAME reads ... writes ...`, as /proc/diskstats).
fn diskstats(path: &Path, dev: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(path).expect("read diskstats");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(dev))
        .unwrap_or_else(|| panic!("no {dev} in {text}"));
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(3)
        .map(|x| x.parse().unwrap())
        .collect();
    (f[0], f[4])
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve, libblkio and blkparse (syscalls)")]
fn the_layers_stats_limits_scheduler_and_trace_reach_the_guests_disk() {
    mqblk_test_support::require_tool("blkparse");
    let scratch = Scratch::new("vhost-blkio-services");
    let ctl = scratch.path().join("control");
    let trace = scratch.path().join("trace");
    let stats = scratch.path().join("stats");
    std::fs::create_dir_all(&trace).unwrap();
    let (server, sock) = serve(
        &scratch,
        "ram,size=16M",
        &[
            "--num-queues",
            "2",
            "--control",
            ctl.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--stats-dir",
            stats.to_str().unwrap(),
        ],
    );
    mqblk_test_support::wait_for_path(&ctl, "the control socket", None);
    let mut c = connect(&sock, 2);
    // Limits and the elevator change while the guest's disk is in use.
    qos(&ctl, &["device", "riops=100000", "wbps=64m"]);
    qos(&ctl, &["scheduler", "mq-deadline"]);
    let show: serde_json::Value = serde_json::from_str(&qos(&ctl, &["show"])).unwrap();
    assert_eq!(show["devices"][0]["limits"]["riops"], 100000);
    const N: usize = 64;
    for i in 0..N {
        let q = i % 2;
        let ret = c.one(q, |q, p| {
            q.write((i as u64) << 12, p, 4096, i, ReqFlags::empty())
        });
        assert_eq!(ret, 0, "write {i}");
    }
    qos(&ctl, &["scheduler", "none"]);
    for i in 0..N {
        let ret = c.one(i % 2, |q, p| {
            q.read((i as u64) << 12, p, 4096, i, ReqFlags::empty())
        });
        assert_eq!(ret, 0, "read {i}");
    }
    drop(c);
    stop(server);
    // The counters `mqblk stat` and iostat read.
    let (reads, writes) = diskstats(&stats.join("diskstats"), "ram0");
    assert!(
        reads >= N as u64 && writes >= N as u64,
        "diskstats: {reads} reads, {writes} writes; expected at least {N} of each"
    );
    let stat = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .arg("stat")
        .arg(&stats)
        .output()
        .unwrap();
    let stat_out = String::from_utf8_lossy(&stat.stdout);
    assert!(
        stat.status.success() && stat_out.contains("ram0"),
        "{stat_out}"
    );
    assert!(
        stat_out.contains("bytes_copied=0"),
        "the guest's I/O was copied: {stat_out}"
    );
    // blkparse reads the guest's requests from the trace.
    let out = Command::new("blkparse")
        .arg("-D")
        .arg(&trace)
        .args(["-i", "ram0"])
        .output()
        .unwrap();
    assert!(out.status.success(), "blkparse failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let queued = |rwbs: &str| {
        text.lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 6 && f[5] == "Q" && f[6].starts_with(rwbs)
            })
            .count()
    };
    let (qr, qw) = (queued("R"), queued("W"));
    assert!(
        qr >= N && qw >= N,
        "blkparse: {qr} reads and {qw} writes queued; expected at least {N} of each"
    );
    eprintln!(
        "diskstats: {reads} reads, {writes} writes; blkparse: {qr} reads and {qw} writes \
         queued; bytes_copied=0"
    );
}

#[test]
#[cfg_attr(miri, ignore = "runs mqblk serve (syscalls)")]
fn a_socket_path_is_never_taken_from_anyone() {
    let scratch = Scratch::new("vhost-blkio-claim");
    // A regular file at the path: refused, and left as it was.
    let file = scratch.path().join("not-a-socket");
    std::fs::write(&file, b"keep me").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", "null,size=1G", "--vhost-user-blk"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not a socket"),
        "{err}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    // A live server's socket: refused; the first server still serves.
    let (server, sock) = serve(&scratch, "null,size=1G", &[]);
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", "null,size=1G", "--vhost-user-blk"])
        .arg(&sock)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("another server is listening"),
        "{err}"
    );
    let mut c = connect(&sock, 1);
    assert_eq!(c.one(0, |q, p| q.read(0, p, 4096, 1, ReqFlags::empty())), 0);
    drop(c);
    stop(server);
    // The server removed its socket; a stale socket is replaced.
    assert!(!sock.exists(), "the socket outlived its server");
    let stale = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    drop(stale);
    let (server, _) = serve(&scratch, "null,size=1G", &[]);
    let mut c = connect(&sock, 1);
    assert_eq!(c.one(0, |q, p| q.read(0, p, 4096, 2, ReqFlags::empty())), 0);
    drop(c);
    stop(server);
}
