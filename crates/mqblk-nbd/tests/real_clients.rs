//! `mqblk serve`'s engine against real NBD clients: libnbd's nbdinfo and
//! nbdcopy, qemu-img and qemu-io, and fio's nbd engine. The server runs
//! in-process on a unix socket, exporting ram devices.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

const T: Duration = Duration::from_secs(120);

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// nbdinfo: size, block sizes, can_* flags, base:allocation, --list of
/// every export, and --map showing holes and data as written.
#[test]
fn nbdinfo_reports_exports_flags_block_sizes_and_map() {
    require("nbdinfo");
    let mut ro = export("ro", "ram,size=64M");
    ro.read_only = true;
    let srv = TestServer::start(vec![export("disk", "ram,size=1G"), ro]);

    let j = json(&run_ok(
        Command::new("nbdinfo").arg("--json").arg(srv.uri("disk")),
        T,
    ));
    assert_eq!(j["structured"], true);
    let e = &j["exports"][0];
    assert_eq!(e["export-name"], "disk");
    assert_eq!(e["export-size"], 1u64 << 30);
    assert_eq!(e["block_size_minimum"], 512);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["block_size_maximum"], 32 << 20);
    for flag in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_multi_conn",
        "can_cache",
        "can_df",
    ] {
        assert_eq!(e[flag], true, "{flag} in {e}");
    }
    assert_eq!(e["is_read_only"], false);
    let contexts: Vec<&str> = e["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(contexts.contains(&"base:allocation"), "{contexts:?}");

    // The default export (empty name) is the first one.
    let d = json(&run_ok(
        Command::new("nbdinfo").arg("--json").arg(srv.uri("")),
        T,
    ));
    assert_eq!(d["exports"][0]["export-size"], 1u64 << 30);

    let r = json(&run_ok(
        Command::new("nbdinfo").arg("--json").arg(srv.uri("ro")),
        T,
    ));
    let e = &r["exports"][0];
    assert_eq!(e["export-size"], 64u64 << 20);
    assert_eq!(e["is_read_only"], true);
    assert_eq!(e["can_trim"], false);
    assert_eq!(e["can_zero"], false);

    let l = json(&run_ok(
        Command::new("nbdinfo")
            .args(["--list", "--json"])
            .arg(srv.uri("")),
        T,
    ));
    let names: Vec<&str> = l["exports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["export-name"].as_str())
        .collect();
    assert_eq!(names, vec!["disk", "ro"]);

    // Write 64 KiB at 1 MiB and 4 KiB at 8 MiB (through the client
    // driver), then map: everything else is a hole that reads as zeros.
    let dev = mqblk::open(&srv.uri("disk")).expect("open through the nbd client driver");
    let mut ctx = dev.context().unwrap();
    ctx.write_at(&pattern(1, 64 << 10), 1 << 20).unwrap();
    ctx.write_at(&pattern(2, 4096), 8 << 20).unwrap();
    drop(ctx);
    drop(dev);
    let m = json(&run_ok(
        Command::new("nbdinfo")
            .args(["--map", "--json"])
            .arg(srv.uri("disk")),
        T,
    ));
    let map: Vec<(u64, u64, u64)> = m
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["offset"].as_u64().unwrap(),
                x["length"].as_u64().unwrap(),
                x["type"].as_u64().unwrap(),
            )
        })
        .collect();
    let hole_zero = 3;
    assert_eq!(
        &map[..4],
        &[
            (0, 1 << 20, hole_zero),
            (1 << 20, 64 << 10, 0),
            (
                (1 << 20) + (64 << 10),
                (8 << 20) - (1 << 20) - (64 << 10),
                hole_zero
            ),
            (8 << 20, 4096, 0),
        ],
        "{map:?}"
    );
    let last = map.last().unwrap();
    assert_eq!(last.0 + last.1, 1 << 30, "the map covers the export");
    assert_eq!(last.2, hole_zero);
}

/// nbdcopy: 256 MiB of random data in and out again over 4 connections;
/// the bytes are identical.
#[test]
fn nbdcopy_256_mib_in_and_out_with_four_connections() {
    require("nbdcopy");
    let srv = TestServer::start(vec![export("", "ram,size=256M")]);
    let dir = TempDir::new("copy");
    let src = dir.path().join("src.img");
    let dst = dir.path().join("dst.img");
    let data = pattern(42, 256 << 20);
    std::fs::write(&src, &data).unwrap();
    run_ok(
        Command::new("nbdcopy")
            .args(["--connections=4", "--flush"])
            .arg(&src)
            .arg(srv.uri("")),
        T,
    );
    run_ok(
        Command::new("nbdcopy")
            .arg("--connections=4")
            .arg(srv.uri(""))
            .arg(&dst),
        T,
    );
    let back = std::fs::read(&dst).unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "nbdcopy read back different bytes");
    let st = srv.server.stats();
    assert_eq!(st.errors.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// qemu-img info/convert/compare and qemu-io pattern writes and reads.
#[test]
fn qemu_img_convert_compare_and_qemu_io_patterns() {
    require("qemu-img");
    require("qemu-io");
    let srv = TestServer::start(vec![export("vm", "ram,size=64M")]);
    let uri = srv.uri("vm");
    let info = json(&run_ok(
        Command::new("qemu-img")
            .args(["info", "--output=json", "-f", "raw"])
            .arg(&uri),
        T,
    ));
    assert_eq!(info["virtual-size"], 64u64 << 20);

    let dir = TempDir::new("qemu");
    let src = dir.path().join("src.img");
    let back = dir.path().join("back.img");
    let mut data = pattern(7, 64 << 20);
    data[(16 << 20)..(32 << 20)].fill(0); // a zero run for qemu to skip
    std::fs::write(&src, &data).unwrap();
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&src)
            .arg(&uri),
        T,
    );
    let cmp = run_ok(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&src)
            .arg(&uri),
        T,
    );
    assert!(cmp.contains("Images are identical"), "{cmp}");
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "raw"])
            .arg(&uri)
            .arg(&back),
        T,
    );
    assert!(
        std::fs::read(&back).unwrap() == data,
        "qemu-img convert read back different bytes"
    );

    // qemu-io: write patterns, read them back verified.
    let out = run_ok(
        Command::new("qemu-io")
            .args(["-f", "raw"])
            .args(["-c", "write -P 0xab 0 64k"])
            .args(["-c", "write -f -P 0xcd 1M 512k"])
            .args(["-c", "read -P 0xab 0 64k"])
            .args(["-c", "read -P 0xcd 1M 512k"])
            .args(["-c", "write -z 1M 4k"])
            .args(["-c", "read -P 0 1M 4k"])
            .args(["-c", "flush"])
            .arg(&uri),
        T,
    );
    assert!(!out.contains("verification failed"), "{out}");
    assert!(out.contains("read 524288/524288 bytes"), "{out}");
    // A wrong pattern is caught, so the checks above mean something.
    let bad = run_timeout(
        Command::new("qemu-io")
            .args(["-f", "raw", "-c", "read -P 0x11 0 4k"])
            .arg(&uri),
        T,
    );
    let text =
        String::from_utf8_lossy(&bad.stdout).into_owned() + &String::from_utf8_lossy(&bad.stderr);
    assert!(text.contains("verification failed"), "{text}");
}

/// fio's nbd engine: random read/write with crc32c verification.
#[test]
fn fio_nbd_engine_randrw_verify_crc32c() {
    require("fio");
    let srv = TestServer::start(vec![export("", "ram,size=128M")]);
    let out = run_ok(
        Command::new("fio")
            .args([
                "--name=verify",
                "--ioengine=nbd",
                "--rw=randrw",
                "--bs=4k",
                "--iodepth=16",
                "--size=32M",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                "--randseed=1",
                "--output-format=json",
            ])
            .arg(format!("--uri={}", srv.uri(""))),
        T,
    );
    let start = out.find('{').expect("fio JSON");
    let j = json(&out[start..]);
    let job = &j["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    assert!(job["read"]["total_ios"].as_u64().unwrap() > 0);
    assert!(job["write"]["total_ios"].as_u64().unwrap() > 0);
}
