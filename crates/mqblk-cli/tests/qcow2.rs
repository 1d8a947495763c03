//! The `qcow2:` device through the command line (issue 37): images made
//! with `create=` that `qemu-img info` and `check` accept, a `bench`
//! workload with verify, discards and write-zeroes after which `qemu-img
//! check` finds no error and no leak and `qemu-img compare` finds the
//! image equal to a raw file given the same workload, and block status
//! over `mqblk serve` that shows the image's layout through its backing
//! chain as `qemu-img map` does.

use std::process::Command;
use std::time::Duration;

use mqblk_test_support::{require_tool, run_ok, run_ok_within, Watched};

/// Longest a bench or a tool may run here (a hang guard).
const RUN_MAX: Duration = Duration::from_secs(120);

/// A directory on tmpfs, removed on drop.
struct Dir(std::path::PathBuf);
impl Dir {
    fn new(tag: &str) -> Dir {
        let base = std::path::Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("mqblk-cli-qcow2-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn s(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}
impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run a bench; its JSON, after checking that no job failed.
fn bench(device: &str, args: &[&str]) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mqblk"));
    cmd.arg("bench")
        .arg(format!("--device={device}"))
        .args(args)
        .arg("--output-format=json");
    let out = run_ok_within(&mut cmd, RUN_MAX);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{device}: {e}: {out}"));
    for j in v["jobs"].as_array().unwrap() {
        assert_eq!(j["error"].as_u64(), Some(0), "{device}: {j}");
    }
    v
}

fn check_clean(img: &str) {
    let out = run_ok("qemu-img", &["check", img]);
    assert!(
        out.contains("No errors were found") && !out.contains("leaked"),
        "{img}: {out}"
    );
}

#[test]
fn create_makes_images_qemu_img_accepts() {
    require_tool("qemu-img");
    let d = Dir::new("create");
    for (name, opts) in [
        ("a", "create=64M"),
        ("b", "create=8M,cluster_size=4k"),
        ("c", "create=32M,cluster_size=2M"),
    ] {
        let img = d.s(&format!("{name}.qcow2"));
        bench(
            &format!("qcow2:{img},{opts}"),
            &["--rw=write", "--bs=64k", "--size=1M", "--iodepth=4"],
        );
        let info = run_ok("qemu-img", &["info", &img]);
        assert!(info.contains("file format: qcow2"), "{info}");
        check_clean(&img);
        eprintln!("{name} ({opts}): qemu-img info and check accept it");
    }
    // backing= at creation: the new image reads through to its base.
    let base = d.s("base.qcow2");
    run_ok("qemu-img", &["create", "-q", "-f", "qcow2", &base, "8M"]);
    run_ok(
        "qemu-io",
        &["-f", "qcow2", "-c", "write -P 0x44 0 1M", &base],
    );
    let top = d.s("top.qcow2");
    bench(
        &format!("qcow2:{top},create=8M,backing={base}"),
        &["--rw=write", "--bs=4k", "--size=64k", "--offset=2M"],
    );
    let info = run_ok("qemu-img", &["info", &top]);
    assert!(
        info.contains("backing file: ")
            && info.contains("base.qcow2")
            && info.contains("backing file format: qcow2"),
        "{info}"
    );
    check_clean(&top);
    let raw = d.s("top.raw");
    run_ok("qemu-img", &["convert", "-O", "raw", &top, &raw]);
    let b = std::fs::read(&raw).unwrap();
    assert!(
        b[..1 << 20].iter().all(|&x| x == 0x44),
        "the base's data does not show through"
    );
    // An existing image is never overwritten by create= (a bench: info
    // drops create=, it never creates).
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args([
            "bench",
            "--device",
            &format!("qcow2:{top},create=8M"),
            "--rw=write",
            "--number_ios=1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not empty"), "{err}");
}

#[test]
fn a_bench_workload_passes_check_and_compares_equal_to_raw() {
    require_tool("qemu-img");
    let d = Dir::new("bench");
    let img = d.s("w.qcow2");
    let mix = [
        "--rw=randwrite",
        "--bs=4k",
        "--size=32M",
        "--verify=crc32c",
        "--trim_percentage=10",
        "--write_zeroes_percentage=10",
        "--trim_verify_zero=1",
        "--number_ios=4000",
    ];
    // Deep queues, verified.
    let mut a = mix.to_vec();
    a.push("--iodepth=16");
    let v = bench(&format!("qcow2:{img},create=32M,cluster_size=4k"), &a);
    let w = v["jobs"][0]["write"]["total_ios"].as_u64().unwrap();
    check_clean(&img);
    eprintln!("iodepth=16: {w} writes verified; qemu-img check: no errors, no leaks");
    // The same workload, one at a time (so that overlapping writes land
    // in one order), on the image and on a raw file: identical.
    let img2 = d.s("w2.qcow2");
    let raw = d.s("w2.raw");
    std::fs::File::create(&raw)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    let mut a = mix.to_vec();
    a.push("--iodepth=1");
    bench(&format!("qcow2:{img2},create=32M,cluster_size=64k"), &a);
    bench(&format!("file:{raw},direct=0"), &a);
    check_clean(&img2);
    let cmp = run_ok(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "qcow2", &raw, &img2],
    );
    assert!(cmp.contains("identical"), "{cmp}");
    eprintln!(
        "iodepth=1: qemu-img compare with the raw file: {}",
        cmp.trim()
    );
}

/// The figure before `what` in `line` ("... 42 what ...").
fn figure_before(line: &str, what: &str) -> u64 {
    let head = &line[..line
        .find(what)
        .unwrap_or_else(|| panic!("no `{what}` in {line}"))];
    head.split_whitespace()
        .last()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no figure before `{what}` in {line}"))
}

#[test]
fn a_read_over_contiguous_clusters_goes_down_whole_and_without_the_lock() {
    // 4 KiB clusters, allocated in order by sequential 64 KiB writes:
    // a 64 KiB read spans 16 clusters, contiguous in the file but where an
    // L2 table or a refcount block was placed between them.
    let d = Dir::new("contig");
    let img = d.s("c.qcow2");
    let spec = format!("qcow2:{img},create=16M,cluster_size=4k");
    bench(
        &spec,
        &["--rw=write", "--bs=64k", "--size=16M", "--iodepth=1"],
    );
    check_clean(&img);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mqblk"));
    cmd.env("MQBLK_QCOW2_STATS", "1")
        .arg("bench")
        .arg(format!("--device=qcow2:{img}"))
        .args(["--rw=read", "--bs=64k", "--size=16M", "--iodepth=4"])
        .arg("--output-format=json");
    let (status, out, err) = Watched::spawn(&mut cmd).finish(RUN_MAX);
    assert!(status.success(), "bench exited {status}:\n{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let bios = v["mqblk"]["bios"].as_u64().unwrap();
    let requests = v["mqblk"]["requests"].as_u64().unwrap();
    let line = err
        .lines()
        .find(|l| l.contains("L2 slices"))
        .unwrap_or_else(|| panic!("no slice figures in:\n{err}"));
    let clones = figure_before(line, "clones sent");
    let unlocked = figure_before(line, "requests planned from them");
    let locked = figure_before(line, "under it");
    eprintln!(
        "64k reads of a 4k-cluster image: {bios} bios, {requests} requests, {clones} clones to the file; {unlocked} requests planned without the lock, {locked} under it"
    );
    // Not cut at each cluster (that was 16 requests a bio).
    assert!(requests <= bios, "{requests} requests for {bios} bios");
    // One clone a request, but where the file breaks the run: the 8 L2
    // tables and the refcount blocks placed among the data.
    assert!(
        clones <= requests + 16,
        "{clones} clones for {requests} requests"
    );
    // Under the lock: the first request into each slice (8 slices of
    // 512 clusters), nothing else.
    assert!(locked <= 8, "{locked} requests planned under the lock");
    assert_eq!(unlocked + locked, requests);
}

/// `(start, length, data, zero)` runs, adjacent equal runs merged.
fn merged(runs: Vec<(u64, u64, bool, bool)>) -> Vec<(u64, u64, bool, bool)> {
    let mut out: Vec<(u64, u64, bool, bool)> = Vec::new();
    for r in runs {
        match out.last_mut() {
            Some(l) if l.0 + l.1 == r.0 && l.2 == r.2 && l.3 == r.3 => l.1 += r.1,
            _ => out.push(r),
        }
    }
    out
}

#[test]
fn nbdinfo_map_over_serve_shows_the_layout_through_the_chain() {
    require_tool("qemu-img");
    require_tool("nbdinfo");
    let d = Dir::new("map");
    let base = d.s("base.qcow2");
    let top = d.s("top.qcow2");
    run_ok(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=65536",
            &base,
            "8M",
        ],
    );
    run_ok(
        "qemu-io",
        &[
            "-f",
            "qcow2",
            "-c",
            "write -P 1 1M 192k",
            "-c",
            "write -z 4M 128k",
            &base,
        ],
    );
    run_ok(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            &base,
            "-F",
            "qcow2",
            "-o",
            "cluster_size=65536",
            &top,
        ],
    );
    run_ok(
        "qemu-io",
        &[
            "-f",
            "qcow2",
            "-c",
            "write -P 2 0 64k",
            "-c",
            "write -z 1M 64k",
            "-c",
            "write -P 3 6M 64k",
            &top,
        ],
    );
    // The judge: qemu-img map of the image itself.
    let want: Vec<(u64, u64, bool, bool)> = {
        let j = run_ok("qemu-img", &["map", "--output=json", &top]);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["start"].as_u64().unwrap(),
                    e["length"].as_u64().unwrap(),
                    e["data"].as_bool().unwrap(),
                    e["zero"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let sock = d.0.join("s.sock");
    let mut srv = Watched::spawn(Command::new(env!("CARGO_BIN_EXE_mqblk")).args([
        "serve",
        &format!("qcow2:{top}"),
        "--socket",
        sock.to_str().unwrap(),
    ]));
    srv.wait_for_path(&sock);
    let url = format!("nbd+unix:///?socket={}", sock.display());
    let map = run_ok_within(Command::new("nbdinfo").args(["--map", &url]), RUN_MAX);
    srv.kill();
    // nbdinfo: start, length, type (bit 0 hole, bit 1 zero), description.
    let got: Vec<(u64, u64, bool, bool)> = map
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let t: u32 = f[2].parse().unwrap();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                t & 1 == 0,
                t & 2 != 0,
            )
        })
        .collect();
    let (got, want) = (merged(got), merged(want));
    eprintln!("nbdinfo --map:\n{map}");
    assert_eq!(
        got, want,
        "nbdinfo --map over mqblk serve against qemu-img map"
    );
    assert!(got.len() >= 5, "too few runs to show a layout: {got:?}");
    eprintln!("{} runs, as qemu-img map shows them", got.len());
}

/// `mqblk bench` writing, discarding and zeroing at depth 16 with a
/// flush every 8 writes,
/// SIGKILLed (by its pid) at a seeded random moment, 20 times on one
/// image, each run with its own random offsets: after each kill
/// `qemu-img check` finds no corruption (leaks are allowed: exit code
/// 3), and the next round opens the image again. (Which blocks a flush
/// made durable is checked in the qcow2 crate's tests/crash.rs, whose
/// writer reports each flush.)
#[test]
fn bench_sigkilled_during_fsync_writes_leaves_no_corruption() {
    require_tool("qemu-img");
    let d = Dir::new("kill");
    let img = d.s("k.qcow2");
    run_ok(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=4096",
            &img,
            "64M",
        ],
    );
    let seed = std::env::var("MQBLK_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("seed {seed} (MQBLK_CRASH_SEED={seed} repeats these kill moments)");
    let mut x = seed | 1;
    let mut clean = 0;
    for n in 0..20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let kill_ms = 100 + x % 500;
        let mut b = Watched::spawn(Command::new(env!("CARGO_BIN_EXE_mqblk")).args([
            "bench",
            &format!("--device=qcow2:{img}"),
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--fsync=8",
            "--size=64M",
            "--runtime=60s",
            "--time_based",
            &format!("--randseed={}", x % 1_000_000),
            // A fifth of the writes are discards (which free clusters), a
            // tenth write-zeroes: clusters are freed and allocated again.
            "--verify=crc32c",
            "--trim_percentage=20",
            "--write_zeroes_percentage=10",
        ]));
        std::thread::sleep(Duration::from_millis(kill_ms));
        assert!(
            b.try_wait().is_none(),
            "round {n}: the bench ended before the kill"
        );
        b.kill();
        // The killed process's io_uring lets go of the image's lock a
        // moment after it dies: check once it is free (a bounded wait).
        let start = std::time::Instant::now();
        let o = loop {
            let o = Command::new("qemu-img")
                .args(["check", &img])
                .output()
                .unwrap();
            if !String::from_utf8_lossy(&o.stderr).contains("Failed to lock") {
                break o;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "round {n}: still locked"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(
            matches!(o.status.code(), Some(0) | Some(3)),
            "round {n}: qemu-img check: {text}"
        );
        let allocated = text
            .lines()
            .find(|l| l.contains("allocated"))
            .unwrap_or("")
            .trim()
            .to_string();
        eprintln!(
            "kill {n:2} after {kill_ms:3} ms: no corruption{}; {allocated}",
            if o.status.code() == Some(3) {
                " (leaks)"
            } else {
                ""
            }
        );
        clean += 1;
    }
    eprintln!("{clean} of 20 kills left no corruption");
    assert_eq!(clean, 20);
}
