//! An RBD image through the `mqblk` command, on a throwaway cluster
//! (scripts/micro-ceph): `mqblk serve` exports it over NBD (an rbd-nbd
//! without a kernel module) to real clients (nbdinfo shows its size and
//! extents, nbdcopy round-trips, qemu-img compare passes against `rbd
//! export`), and `mqblk bench --verify=crc32c` on it, with writes mixed
//! with discards, write-zeroes and flushes, finds no mismatch.

#[path = "../../mqblk-rbd/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::MicroCeph;
use mqblk_test_support::{require_tool, run_ok, Watched};

const MIB: u64 = 1 << 20;

/// 40 MiB with data in a few places: 1 MiB at 0, 4 KiB at 9 MiB, 2 MiB
/// at 20 MiB; zeros elsewhere.
fn source(p: &Path) {
    let mut v = vec![0u8; (40 * MIB) as usize];
    for (off, len) in [(0, MIB), (9 * MIB, 4096), (20 * MIB, 2 * MIB)] {
        for i in off..off + len {
            v[i as usize] = (i % 251) as u8 ^ 0x3c;
        }
    }
    std::fs::write(p, v).unwrap();
}

#[test]
fn serve_exports_an_rbd_image_to_real_clients() {
    let Some(c) = MicroCeph::start() else { return };
    for t in ["nbdinfo", "nbdcopy", "qemu-img"] {
        require_tool(t);
    }
    c.rbd(&["create", "--size", "40M", "rbd/srv"]);
    let sock = c.dir.join("nbd.sock");
    let mut child = Watched::spawn(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["serve", "--device", &c.spec("srv", ""), "--export", "disk"])
            .arg("--socket")
            .arg(&sock),
    );
    child.wait_for_path(&sock);
    let url = format!("nbd+unix:///disk?socket={}", sock.display());
    assert_eq!(
        run_ok("nbdinfo", &["--size", &url]).trim(),
        (40 * MIB).to_string()
    );
    // A fresh image is all hole.
    let map = run_ok("nbdinfo", &["--map", &url]);
    assert!(map.contains("hole") && !map.contains("data"), "{map}");

    let src = c.dir.join("src.img");
    source(&src);
    run_ok("nbdcopy", &[src.to_str().unwrap(), &url]);
    let map = run_ok("nbdinfo", &["--map", &url]);
    assert!(map.lines().next().unwrap().contains("data"), "{map}");
    eprintln!("nbdinfo --map after nbdcopy:\n{map}");

    let back = c.dir.join("back.img");
    run_ok("nbdcopy", &[&url, back.to_str().unwrap()]);
    assert!(
        std::fs::read(&back).unwrap() == std::fs::read(&src).unwrap(),
        "nbdcopy round trip"
    );
    // What librbd holds, read by Ceph's own tool, is what was written.
    let exported = c.dir.join("exported.img");
    c.rbd(&["export", "rbd/srv", exported.to_str().unwrap()]);
    // Against the export over NBD, and against the source file.
    for other in [url.as_str(), src.to_str().unwrap()] {
        run_ok(
            "qemu-img",
            &[
                "compare",
                "-f",
                "raw",
                "-F",
                "raw",
                exported.to_str().unwrap(),
                other,
            ],
        );
    }
    child.signal("-TERM");
    let (s, _, err) = child.finish(Duration::from_secs(60));
    assert!(s.success(), "mqblk serve exit status {s}: {err}");
}

/// Run `mqblk bench ARGS --verify=crc32c --output-format=json`: it must
/// succeed with no I/O or verify error, and each of the `counts` in its
/// verify report must be above zero.
fn verify_run(args: &[&str], counts: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .arg("bench")
        .args(args)
        .args(["--verify=crc32c", "--output-format=json"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let job = &v["jobs"][0];
    assert_eq!(job["verify_errors"], 0, "{job:#}");
    assert_eq!(job["error"], 0, "{job:#}");
    for n in counts {
        assert!(job["verify"][n].as_u64().unwrap() > 0, "{n}: {job:#}");
    }
}

#[test]
fn bench_verify_finds_no_mismatch_on_rbd() {
    let Some(c) = MicroCeph::start() else { return };
    verify_run(
        &[
            &format!("--device={}", c.spec("ver", "create=64M")),
            "--rw=randrw",
            "--bs=4k",
            "--iodepth=16",
            "--runtime=2s",
            "--time_based",
            "--trim_percentage=10",
            "--write_zeroes_percentage=10",
            "--fsync=64",
        ],
        &["blocks_verified", "blocks_trimmed", "blocks_zeroed"],
    );
}

/// An RBD image as a leg of a dm mirror, beside a local file: a verify run
/// (writes mixed with write-zeroes and flushes) finds no mismatch, and
/// afterwards the file and `rbd export` of the image are byte-identical.
/// (Discards are left out: what a discarded block reads as differs by leg,
/// since librbd ignores a discard below its object's granularity and a
/// file punches a hole, so the legs need not be identical after one.)
#[test]
fn a_mirror_of_a_file_and_an_rbd_image_keeps_both_legs_identical() {
    let Some(c) = MicroCeph::start() else { return };
    c.rbd(&["create", "--size", "32M", "rbd/leg"]);
    let file = c.dir.join("leg.img");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(32 * MIB)
        .unwrap();
    let table = format!(
        "dm-table:0 {} mirror core 2 128 nosync 2 file:{} 0 {} 0",
        32 * MIB / 512,
        file.display(),
        c.spec("leg", "")
    );
    verify_run(
        &[
            &format!("--device={table}"),
            "--rw=randrw",
            "--bs=4k",
            "--iodepth=16",
            "--size=32M",
            "--io_size=48M",
            "--write_zeroes_percentage=20",
            "--fsync=64",
        ],
        &["blocks_written", "blocks_verified", "blocks_zeroed"],
    );
    let exported = c.dir.join("leg.exported");
    c.rbd(&["export", "rbd/leg", exported.to_str().unwrap()]);
    assert!(
        std::fs::read(&file).unwrap() == std::fs::read(&exported).unwrap(),
        "the file leg and the RBD leg differ after the run"
    );
}
