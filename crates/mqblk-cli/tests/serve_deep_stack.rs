//! `mqblk serve` over a mirror whose second leg is a stack three levels
//! deep (the mirror, two linear lines, a `delay` over a file): every read
//! of a sized, verified job gets its reply, and the server never fails to
//! arm a completion fd (issue 34: the context's completion fd was an epoll
//! set holding the stacked legs' sets, past the kernel's nesting limit;
//! `epoll_ctl` failed with ELOOP and the connection waited forever). Then a
//! leg opened while serving (`mqblk dm replace` onto another three-level
//! stack) gets its lines into the same completion fd: 10,000 more reads.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_test_support::{Scratch, Watched};

/// A hang guard for each process (not a timing assertion).
const WAIT_MAX: Duration = Duration::from_secs(180);
/// Reads per job, each answered and checked.
const READS: u64 = 10_000;
const SIZE: u64 = 64 << 20;

fn mqblk(args: &[&str]) -> Watched {
    Watched::spawn(Command::new(env!("CARGO_BIN_EXE_mqblk")).args(args))
}

/// Table files for a stack of three levels over `file` once a mirror is
/// on top: `delay` over the file, then two linear lines over that (not
/// one, which would be a remapped window rather than a level). Returns
/// the spec of the upper table.
fn stack(dir: &Path, tag: &str, file: &Path) -> String {
    let sectors = SIZE >> 9;
    let half = sectors / 2;
    let bottom = dir.join(format!("{tag}-delay.table"));
    std::fs::write(
        &bottom,
        format!("0 {sectors} delay file:{} 0 1\n", file.display()),
    )
    .unwrap();
    let upper = dir.join(format!("{tag}-linear.table"));
    std::fs::write(
        &upper,
        format!(
            "0 {half} linear dm:{b} 0\n{half} {half} linear dm:{b} {half}\n",
            b = bottom.display()
        ),
    )
    .unwrap();
    format!("dm:{}", upper.display())
}

/// Run `mqblk bench` to its end; its JSON.
fn bench(args: &[&str]) -> serde_json::Value {
    let (st, out, err) = mqblk(args).finish(WAIT_MAX);
    assert!(st.success(), "bench {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `READS` random 4k reads of the blocks written, each checked; returns
/// how many were answered and checked.
fn checked_reads(device: &str) -> (u64, u64) {
    let v = bench(&[
        "bench",
        &format!("--device={device}"),
        "--rw=randread",
        "--bs=4k",
        "--iodepth=8",
        &format!("--size={}", READS * 4096),
        &format!("--number_ios={READS}"),
        "--verify=crc32c",
        "--output-format=json",
    ]);
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "{job:#}");
    assert_eq!(job["verify_errors"], 0, "{job:#}");
    assert_eq!(job["verify"]["errors"], 0, "{job:#}");
    (
        job["read"]["total_ios"].as_u64().unwrap(),
        job["verify"]["blocks_verified"].as_u64().unwrap(),
    )
}

#[test]
fn serve_over_a_mirror_of_a_three_level_stack_answers_every_read() {
    let s = Scratch::new("serve-deep-stack");
    let (a, c, d) = (
        s.file("a.img", SIZE),
        s.file("c.img", SIZE),
        s.file("d.img", SIZE),
    );
    let leg1 = stack(s.path(), "first", &c);
    let sock = s.path().join("nbd.sock");
    let control = s.path().join("control.sock");
    let spec = format!(
        "dm-table:0 {} mirror core 1 1024 2 file:{} 0 {leg1} 0",
        SIZE >> 9,
        a.display()
    );
    let mut server = mqblk(&[
        "serve",
        &spec,
        "--socket",
        sock.to_str().unwrap(),
        "--control",
        control.to_str().unwrap(),
    ]);
    server.wait_for_path(&sock);
    server.wait_for_path(&control);
    let device = format!("nbd+unix:///?socket={}", sock.display());

    // The blocks, each with a checked header.
    let v = bench(&[
        "bench",
        &format!("--device={device}"),
        "--rw=write",
        "--bs=4k",
        "--iodepth=8",
        &format!("--size={}", READS * 4096),
        "--verify=crc32c",
        "--do_verify=0",
        "--output-format=json",
    ]);
    assert_eq!(v["jobs"][0]["error"], 0, "{v:#}");
    assert_eq!(v["jobs"][0]["verify"]["blocks_written"], READS, "{v:#}");

    let t = Instant::now();
    let (answered, verified) = checked_reads(&device);
    eprintln!(
        "3-level stack: {answered} of {READS} reads answered, {verified} checked, in {:?}",
        t.elapsed()
    );
    assert_eq!(answered, READS);
    assert_eq!(verified, READS);

    // Leg 1 rebuilt onto another three-level stack while serving: the
    // server's context opens it lazily, after its completion fd was armed.
    let c = control.to_str().unwrap();
    let (st, out, err) = mqblk(&["qos", &format!("--control={c}"), "show"]).finish(WAIT_MAX);
    assert!(st.success(), "{err}");
    let show: serde_json::Value = serde_json::from_str(&out).unwrap();
    let name = show["devices"][0]["device"].as_str().unwrap().to_string();
    let leg1b = stack(s.path(), "second", &d);
    let (st, out, err) = mqblk(&[
        "dm",
        "replace",
        &format!("--control={c}"),
        &name,
        "1",
        &leg1b,
    ])
    .finish(WAIT_MAX);
    assert!(st.success(), "{err}");
    assert!(out.contains("leg 1 rebuilt"), "{out}");

    let t = Instant::now();
    let (answered, verified) = checked_reads(&device);
    eprintln!(
        "after the leg was replaced: {answered} of {READS} reads answered, {verified} checked, in {:?}",
        t.elapsed()
    );
    assert_eq!(answered, READS);
    assert_eq!(verified, READS);

    server.signal("-TERM");
    let (st, _, err) = server.finish(WAIT_MAX);
    assert!(st.success(), "{err}");
    assert!(!err.contains("epoll_ctl"), "the server logged: {err}");
    assert!(!err.contains("cannot watch"), "the server logged: {err}");
    assert!(!err.contains("polling"), "the server fell back: {err}");
}
