//! `mqblk serve DEVICE --fuse FILE` with real programs: a loop device
//! (`losetup --direct-io=on`) over the exported file, `mkfs.ext4`, files
//! written and checked, `e2fsck -fn` clean, and read back after a second
//! mount — on `ram`, on `file:` (an image on an ext4 loop file system) and
//! on a dm stripe; `qemu-img info` and `convert` reading the file; fio
//! verifying a pattern through io_uring and O_DIRECT; `fallocate
//! --punch-hole` and `--zero-range` seen by SEEK_HOLE and read back as
//! zeros; a read-only export's EROFS; SIGTERM under load within 2 s; an
//! abort by the kernel under load: an error exit within 2 s; SIGKILL
//! under load, then the next export on the same file; and the
//! layer underneath (stats, QoS control, blktrace, the image lock, a
//! degraded mirror) as with the NBD export.
//!
//! Root only (mount(2), losetup); FUSE and loop are built into the
//! kernels this runs on. Every mount, loop device and server a test makes
//! is undone by a guard, failure or not, and only those.

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_test_support::{require_tool, run_ok, time_bound, Ext4, Scratch, Watched};
use sha2::{Digest, Sha256};

const MIB: u64 = 1 << 20;
/// How long a server has to come up, and a tool to finish.
const WAIT_MAX: Duration = Duration::from_secs(60);
/// A stop (SIGTERM or SIGINT) ends the server within this.
const STOP_BOUND: Duration = Duration::from_secs(2);

/// `mqblk serve SPEC --fuse FILE EXTRA...`, up and mounted. Dropped: the
/// server is killed by its pid if still running, and a mount it left on
/// the file is detached.
struct Export {
    server: Option<Watched>,
    file: PathBuf,
}

impl Export {
    fn start(spec: &str, file: &Path, extra: &[&str]) -> Export {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mqblk"));
        cmd.args(["serve", spec, "--fuse"]).arg(file).args(extra);
        let server = Watched::spawn(&mut cmd);
        server.wait_err("FUSE export on", WAIT_MAX);
        Export {
            server: Some(server),
            file: file.to_path_buf(),
        }
    }

    /// SIGKILL, by its pid.
    fn kill(&mut self) {
        if let Some(s) = &mut self.server {
            s.kill();
        }
    }

    /// SIGTERM; its exit status, stderr, and how long it took, printed
    /// against [`STOP_BOUND`].
    fn stop(mut self, what: &str) -> (std::process::ExitStatus, String, Duration) {
        let mut server = self.server.take().expect("a running server");
        let t0 = Instant::now();
        server.signal("-TERM");
        let st = server.wait(WAIT_MAX);
        let took = t0.elapsed();
        let within = time_bound(what, took, STOP_BOUND);
        let (_, _, err) = server.finish(WAIT_MAX);
        assert!(
            within,
            "the server took {took:?} to stop (bound {STOP_BOUND:?}):\n{err}"
        );
        (st, err, took)
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        self.kill();
        if is_fuse_mounted(&self.file) {
            let _ = Command::new("umount").arg("-l").arg(&self.file).status();
        }
    }
}

/// Whether a FUSE file system is mounted on `file` now.
fn is_fuse_mounted(file: &Path) -> bool {
    let dir = file.parent().and_then(|d| d.canonicalize().ok());
    let Some(p) = dir.map(|d| d.join(file.file_name().unwrap())) else {
        return false;
    };
    !mqblk_fuse::mount::mounts_on(&p)
        .unwrap_or_default()
        .is_empty()
}

/// A loop device with direct I/O over a file, detached on drop.
struct Loop(String);

impl Loop {
    fn attach(file: &Path) -> Loop {
        require_tool("losetup");
        let out = run_ok_cmd(
            Command::new("losetup")
                .args(["--find", "--show", "--direct-io=on"])
                .arg(file),
        );
        Loop(out.trim().to_string())
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        // This device only, by its name.
        for _ in 0..100 {
            if Command::new("losetup")
                .args(["-d", &self.0])
                .status()
                .is_ok_and(|s| s.success())
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A file system mounted on a directory, unmounted on drop.
struct Mounted(PathBuf);

impl Mounted {
    fn new(dev: &str, dir: &Path) -> Mounted {
        std::fs::create_dir_all(dir).unwrap();
        run_ok_cmd(Command::new("mount").arg(dev).arg(dir));
        Mounted(dir.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        mqblk_test_support::unmount(&self.0);
    }
}

fn run_ok_cmd(cmd: &mut Command) -> String {
    mqblk_test_support::run_ok_within(cmd, WAIT_MAX)
}

/// Bytes of file `i`, a pattern of its own.
fn file_data(i: u32, len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9u32.wrapping_mul(i + 1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// ext4 on a loop device over the exported file of `spec`: files
/// written, e2fsck clean, read back after a second mount.
fn ext4_round_trip(tag: &str, spec: &str) {
    require_tool("mkfs.ext4");
    require_tool("e2fsck");
    let s = Scratch::new(tag);
    let file = s.file("disk.img", 0);
    let export = Export::start(spec, &file, &[]);
    let files: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| {
            (
                format!("f{i}"),
                file_data(i, (3 + i as usize) * MIB as usize + 1234),
            )
        })
        .collect();
    let sums: Vec<Vec<u8>> = files
        .iter()
        .map(|(_, d)| Sha256::digest(d).to_vec())
        .collect();
    {
        let lo = Loop::attach(&file);
        run_ok("mkfs.ext4", &["-q", "-F", &lo.0]);
        {
            let m = Mounted::new(&lo.0, &s.path().join("mnt"));
            for (name, data) in &files {
                std::fs::write(m.0.join(name), data).unwrap();
            }
        }
        let fsck = Command::new("e2fsck")
            .args(["-fn", &lo.0])
            .output()
            .unwrap();
        assert!(
            fsck.status.success(),
            "e2fsck -fn on {spec}: {}\n{}",
            String::from_utf8_lossy(&fsck.stdout),
            String::from_utf8_lossy(&fsck.stderr)
        );
        let m = Mounted::new(&lo.0, &s.path().join("mnt"));
        for ((name, _), sum) in files.iter().zip(&sums) {
            let back = std::fs::read(m.0.join(name)).unwrap();
            assert_eq!(&Sha256::digest(&back).to_vec(), sum, "{name} on {spec}");
        }
    }
    let (st, err, took) = export.stop(tag);
    assert!(st.success(), "{st}: {err}");
    eprintln!("{spec}: 3 files checked after e2fsck -fn and a second mount; stopped in {took:?}");
    assert!(!is_fuse_mounted(&file), "still mounted after the stop");
}

#[test]
fn ext4_on_a_loop_device_over_the_file_of_ram() {
    ext4_round_trip("fuse-ext4-ram", "ram,size=128M");
}

#[test]
fn ext4_on_a_loop_device_over_the_file_of_a_file_image() {
    let Some(fs) = Ext4::new("fuse-ext4-file-host", 512 * MIB) else {
        return;
    };
    let img = fs.file("image.raw", 128 * MIB);
    ext4_round_trip("fuse-ext4-file", &format!("file:{}", img.display()));
}

#[test]
fn ext4_on_a_loop_device_over_the_file_of_a_dm_stripe() {
    ext4_round_trip(
        "fuse-ext4-stripe",
        "dm-table:0 262144 striped 2 128 ram,size=64M 0 ram,size=64M,hw_queues=1 0",
    );
}

#[test]
fn qemu_img_reads_and_fio_verifies_the_file() {
    require_tool("qemu-img");
    require_tool("fio");
    let s = Scratch::new("fuse-qemu-fio");
    let file = s.file("disk.img", 0);
    let export = Export::start("ram,size=64M", &file, &["--fuse-threads", "3"]);
    let out = run_ok_cmd(
        Command::new("fio")
            .args([
                "--name=verify",
                "--ioengine=io_uring",
                "--direct=1",
                "--rw=randwrite",
                "--bs=4k",
                "--iodepth=16",
                "--size=32M",
                "--verify=crc32c",
                "--do_verify=1",
                "--output-format=json",
            ])
            .arg(format!("--filename={}", file.display())),
    );
    let v: serde_json::Value = serde_json::from_str(&out[out.find('{').unwrap()..]).unwrap();
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "{job:#}");
    let verified = job["read"]["io_bytes"].as_u64().unwrap();
    assert_eq!(
        verified,
        32 * MIB,
        "fio read back and verified all it wrote"
    );
    eprintln!(
        "fio: 32 MiB written at QD16 through io_uring and O_DIRECT, {verified} bytes verified"
    );
    let info = run_ok_cmd(
        Command::new("qemu-img")
            .args(["info", "--output=json", "-f", "raw"])
            .arg(&file),
    );
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["virtual-size"], 64 * MIB, "{info:#}");
    let copy = s.path().join("copy.raw");
    run_ok_cmd(
        Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "raw"])
            .arg(&file)
            .arg(&copy),
    );
    let a = std::fs::read(&file).unwrap();
    let b = std::fs::read(&copy).unwrap();
    assert_eq!(a.len(), b.len());
    assert!(a == b, "qemu-img convert's copy differs from the file");
    assert!(a.iter().any(|&x| x != 0), "the copy holds fio's data");
    let (st, err, _) = export.stop("qemu-fio");
    assert!(st.success(), "{st}: {err}");
}

#[test]
fn punched_and_zeroed_ranges_show_as_holes_and_read_zeros() {
    require_tool("fallocate");
    let s = Scratch::new("fuse-holes");
    let file = s.file("disk.img", 0);
    let export = Export::start("ram,size=16M", &file, &[]);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    let data = file_data(7, 8 * MIB as usize);
    f.write_all_at(&data, 0).unwrap();
    run_ok_cmd(
        Command::new("fallocate")
            .args(["--punch-hole", "--offset", "1048576", "--length", "1048576"])
            .arg(&file),
    );
    run_ok_cmd(
        Command::new("fallocate")
            .args(["--zero-range", "--offset", "4194304", "--length", "65536"])
            .arg(&file),
    );
    let fd = f.as_raw_fd();
    // SAFETY: lseek on a descriptor this test holds open.
    let hole = unsafe { libc::lseek(fd, 0, libc::SEEK_HOLE) };
    assert_eq!(hole, MIB as i64, "SEEK_HOLE finds the punched megabyte");
    // SAFETY: as above.
    let data_at = unsafe { libc::lseek(fd, MIB as i64, libc::SEEK_DATA) };
    assert_eq!(data_at, 2 * MIB as i64, "SEEK_DATA finds the data after it");
    // SAFETY: as above.
    let end_hole = unsafe { libc::lseek(fd, 2 * MIB as i64, libc::SEEK_HOLE) };
    assert!(end_hole >= (4 * MIB) as i64, "{end_hole}");
    let mut back = vec![0u8; 8 * MIB as usize];
    f.read_exact_at(&mut back, 0).unwrap();
    let zero = |r: std::ops::Range<usize>| back[r].iter().all(|&b| b == 0);
    assert!(
        zero(MIB as usize..2 * MIB as usize),
        "the punched range reads zeros"
    );
    assert!(
        zero(4 * MIB as usize..4 * MIB as usize + 65536),
        "the zeroed range reads zeros"
    );
    assert!(
        back[..MIB as usize] == data[..MIB as usize],
        "before the hole: kept"
    );
    assert!(
        back[2 * MIB as usize..4 * MIB as usize] == data[2 * MIB as usize..4 * MIB as usize],
        "between: kept"
    );
    assert!(
        back[4 * MIB as usize + 65536..] == data[4 * MIB as usize + 65536..],
        "after: kept"
    );
    eprintln!("holes: SEEK_HOLE at {hole}, SEEK_DATA at {data_at}, next hole at {end_hole}");
    drop(f);
    let (st, err, _) = export.stop("holes");
    assert!(st.success(), "{st}: {err}");
}

#[test]
fn a_read_only_export_refuses_writes_with_erofs_and_the_device_is_unchanged() {
    let s = Scratch::new("fuse-ro");
    let img = s.path().join("image.raw");
    let data = file_data(3, 4 * MIB as usize);
    std::fs::write(&img, &data).unwrap();
    let file = s.file("disk.img", 0);
    let export = Export::start(&format!("file:{}", img.display()), &file, &["--read-only"]);
    let e = std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let dd = Command::new("dd")
        .args(["if=/dev/zero", "bs=4k", "count=1", "conv=notrunc,fsync"])
        .arg(format!("of={}", file.display()))
        .output()
        .unwrap();
    assert!(!dd.status.success());
    let err = String::from_utf8_lossy(&dd.stderr);
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(
        std::fs::read(&file).unwrap() == data,
        "the export reads the image"
    );
    let (st, err, _) = export.stop("read-only");
    assert!(st.success(), "{st}: {err}");
    assert!(
        std::fs::read(&img).unwrap() == data,
        "the image is unchanged"
    );
}

#[test]
fn a_read_only_device_is_exported_read_only_without_the_flag() {
    let s = Scratch::new("fuse-ro-dev");
    let file = s.file("disk.img", 0);
    let export = Export::start("ram,size=4M,ro=1", &file, &[]);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o444);
    let e = std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let (st, err, _) = export.stop("read-only-device");
    assert!(st.success(), "{st}: {err}");
    assert!(err.contains("read-only"), "the startup line says so: {err}");
}

/// fio writing the file for `secs` seconds, verifying nothing (it is
/// stopped or sees the export go).
fn fio_load(file: &Path, secs: u32) -> Watched {
    require_tool("fio");
    Watched::spawn(
        Command::new("fio")
            .args([
                "--name=load",
                "--ioengine=io_uring",
                "--direct=1",
                "--rw=randrw",
                "--bs=64k",
                "--iodepth=8",
                "--size=16M",
                "--time_based",
                &format!("--runtime={secs}"),
            ])
            .arg(format!("--filename={}", file.display())),
    )
}

/// Wait until the device has completed at least 64 I/Os, as the server's
/// `--stats-dir` counts them (refreshed every 100 ms): the load is
/// running through the export (fio opened the file and submits).
fn wait_for_load(stats: &Path) {
    let t0 = Instant::now();
    loop {
        let disk = std::fs::read_to_string(stats.join("diskstats")).unwrap_or_default();
        let ios: u64 = disk
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some(f.get(3)?.parse::<u64>().ok()? + f.get(7)?.parse::<u64>().ok()?)
            })
            .sum();
        if ios >= 64 {
            eprintln!(
                "load running: {ios} I/Os completed {:?} after fio started",
                t0.elapsed()
            );
            return;
        }
        assert!(
            t0.elapsed() < WAIT_MAX,
            "no I/O through the export within {WAIT_MAX:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_under_load_unmounts_and_exits_within_2_s_leaving_no_process_stuck() {
    let s = Scratch::new("fuse-sigterm");
    let file = s.file("disk.img", 0);
    let stats = s.path().join("stats");
    let export = Export::start(
        "ram,size=32M",
        &file,
        &[&format!("--stats-dir={}", stats.display())],
    );
    let mut fio = fio_load(&file, 30);
    wait_for_load(&stats);
    assert!(fio.try_wait().is_none(), "fio ended early");
    let (st, err, took) = export.stop("sigterm-under-load");
    eprintln!("SIGTERM under load: exited {st} in {took:?}\n{err}");
    assert!(err.contains("FUSE export stopped after"), "{err}");
    assert!(
        err.contains("the mount was detached"),
        "fio held the file: {err}"
    );
    assert!(!is_fuse_mounted(&file), "still mounted");
    // fio, whose requests the abort failed, is not left in the kernel.
    let t0 = Instant::now();
    fio.wait(Duration::from_secs(10));
    eprintln!("fio ended {:?} after the server", t0.elapsed());
}

/// Mount fusectl on /sys/fs/fuse/connections if it is not mounted (root).
fn fusectl() {
    let mounted = std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(2) == Some("fusectl"));
    if !mounted {
        run_ok_cmd(Command::new("mount").args([
            "-t",
            "fusectl",
            "none",
            "/sys/fs/fuse/connections",
        ]));
    }
}

/// The FUSE connection serving `file` (its directory under fusectl): the
/// kernel's dev_t of the mount, from `/proc/self/mountinfo`.
fn connection_of(file: &Path) -> u64 {
    let p = file.parent().unwrap().canonicalize().unwrap();
    let m = mqblk_fuse::mount::mounts_on(&p.join(file.file_name().unwrap())).unwrap();
    m.last().expect("the export's mount").connection()
}

#[test]
fn an_abort_by_the_kernel_under_load_ends_the_server_with_a_clear_error_within_2_s() {
    fusectl();
    let s = Scratch::new("fuse-abort");
    let file = s.file("disk.img", 0);
    let stats = s.path().join("stats");
    let mut export = Export::start(
        "ram,size=32M",
        &file,
        &[&format!("--stats-dir={}", stats.display())],
    );
    let mut fio = fio_load(&file, 30);
    wait_for_load(&stats);
    let id = connection_of(&file);
    let mut server = export.server.take().expect("a running server");
    let t0 = Instant::now();
    std::fs::write(format!("/sys/fs/fuse/connections/{id}/abort"), b"1")
        .expect("abort the connection through fusectl");
    let st = server.wait(WAIT_MAX);
    let took = t0.elapsed();
    let (_, _, err) = server.finish(WAIT_MAX);
    eprintln!("aborted under load: the server exited {st} in {took:?}\n{err}");
    assert!(!st.success(), "an abort is an error: {st}\n{err}");
    assert!(
        err.contains(&format!("aborted FUSE connection {id}")),
        "the error names the abort and the connection: {err}"
    );
    assert!(
        time_bound("abort-under-load", took, STOP_BOUND),
        "the server took {took:?} to exit after the abort (bound {STOP_BOUND:?}):\n{err}"
    );
    // fio, whose requests the abort failed, is not left in the kernel.
    let t1 = Instant::now();
    fio.wait(Duration::from_secs(10));
    eprintln!("fio ended {:?} after the server", t1.elapsed());
    assert!(
        !is_fuse_mounted(&file),
        "the server unmounted the aborted file"
    );
}

#[test]
fn after_sigkill_under_load_the_next_export_clears_the_stale_mount() {
    let s = Scratch::new("fuse-sigkill");
    let file = s.file("disk.img", 0);
    let img = s.file("image.raw", 32 * MIB);
    let spec = format!("file:{}", img.display());
    let stats = s.path().join("stats");
    let mut export = Export::start(&spec, &file, &[&format!("--stats-dir={}", stats.display())]);
    let mut fio = fio_load(&file, 30);
    wait_for_load(&stats);
    export.kill();
    assert!(is_fuse_mounted(&file), "the killed server's mount stays");
    // The kernel aborted the connection as the server's descriptors
    // closed: fio's requests fail, and it ends.
    fio.wait(Duration::from_secs(10));
    let e = std::fs::metadata(&file).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN), "{e}");
    let next = Export::start(&spec, &file, &[]);
    let err_line = "cleared a stale FUSE mount";
    // The line came before the startup line the start waited for.
    let (st, err, _) = {
        let f = std::fs::File::open(&file).unwrap();
        let mut b = vec![0u8; 4096];
        f.read_exact_at(&mut b, 0).unwrap();
        drop(f);
        next.stop("after-sigkill")
    };
    assert!(st.success(), "{st}: {err}");
    assert!(err.contains(err_line), "{err}");
    drop(export);
}

#[test]
fn stats_qos_blktrace_and_the_image_lock_work_under_the_fuse_export() {
    let s = Scratch::new("fuse-layer");
    let img = s.file("image.raw", 16 * MIB);
    let spec = format!("file:{}", img.display());
    let file = s.file("disk.img", 0);
    let stats = s.path().join("stats");
    let trace = s.path().join("trace");
    let ctl = s.path().join("control");
    let export = Export::start(
        &spec,
        &file,
        &[
            &format!("--stats-dir={}", stats.display()),
            &format!("--trace={}", trace.display()),
            &format!("--control={}", ctl.display()),
        ],
    );
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    f.write_all_at(&file_data(1, 2 * MIB as usize), 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // QoS: the control socket answers, and a limit takes.
    let q = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .arg("qos")
        .arg(format!("--control={}", ctl.display()))
        .args(["device", "wiops=5000"])
        .output()
        .unwrap();
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    let show = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .arg("qos")
        .arg(format!("--control={}", ctl.display()))
        .arg("show")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["devices"][0]["limits"]["wiops"], 5000, "{v:#}");
    // The image lock: a second server may not write the image.
    let other = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", &spec, "--fuse"])
        .arg(s.file("other.img", 0))
        .output()
        .unwrap();
    assert!(!other.status.success());
    let oerr = String::from_utf8_lossy(&other.stderr);
    assert!(oerr.contains("is locked"), "{oerr}");
    // Stats: the writes are counted (written every 100 ms).
    let t0 = Instant::now();
    let sectors_written = loop {
        let disk = std::fs::read_to_string(stats.join("diskstats")).unwrap_or_default();
        let w: u64 = disk
            .lines()
            .filter_map(|l| l.split_whitespace().nth(9)?.parse::<u64>().ok())
            .sum();
        if w >= 4096 || t0.elapsed() > Duration::from_secs(10) {
            break w;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        sectors_written >= 4096,
        "2 MiB written: {sectors_written} sectors in diskstats"
    );
    let (st, err, _) = export.stop("layer");
    assert!(st.success(), "{st}: {err}");
    let traced = std::fs::read_dir(&trace)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".blktrace."))
        .map(|e| e.metadata().unwrap().len())
        .sum::<u64>();
    assert!(traced > 0, "blktrace files written");
    eprintln!("diskstats: {sectors_written} sectors written; blktrace: {traced} bytes");
}

#[test]
fn a_mirror_that_lost_a_leg_is_reported_degraded_at_the_stop() {
    let s = Scratch::new("fuse-degraded");
    let sock = s.path().join("leg.sock");
    let mut leg = Watched::spawn(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["serve", "ram,size=16M", "--socket"])
            .arg(&sock),
    );
    leg.wait_for_path(&sock);
    let spec = format!(
        "dm-table:0 32768 mirror core 2 128 nosync 2 ram,size=16M 0 nbd+unix:///?socket={} 0",
        sock.display()
    );
    let file = s.file("disk.img", 0);
    let export = Export::start(&spec, &file, &[]);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    let data = file_data(5, MIB as usize);
    f.write_all_at(&data, 0).unwrap();
    leg.kill();
    for i in 0..8u64 {
        f.write_all_at(&data, i * MIB).unwrap();
    }
    f.sync_all().unwrap();
    let mut back = vec![0u8; MIB as usize];
    f.read_exact_at(&mut back, 7 * MIB).unwrap();
    assert!(back == data, "the mirror serves from its live leg");
    drop(f);
    let (st, err, _) = export.stop("degraded");
    assert!(st.success(), "{st}: {err}");
    assert!(
        err.lines()
            .any(|l| l.contains("DEGRADED: ") && l.contains("mirror leg 1 (nbd+unix")),
        "{err}"
    );
}

#[test]
fn a_directory_or_a_missing_file_is_refused_with_what_to_do() {
    let s = Scratch::new("fuse-bad");
    for (target, says) in [
        (s.path().to_path_buf(), "is not a regular file"),
        (s.path().join("missing.img"), "does not exist"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["serve", "ram,size=1M", "--fuse"])
            .arg(&target)
            .output()
            .unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{err}");
        assert!(!is_fuse_mounted(&target));
    }
}
