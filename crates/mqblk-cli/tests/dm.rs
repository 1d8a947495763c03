//! Stacked devices everywhere a device works: `mqblk bench` on `dm-table:`
//! and `dm:` specs (a stats line per device and per leg), `mqblk info`
//! (the table and the legs), `mqblk serve` of a striped device to real
//! NBD clients (nbdinfo, nbdcopy, qemu-img compare against its legs), and
//! a stripe whose legs are two `mqblk serve` exports (the legs complete on
//! their own threads: the stacked driver's forwarded completions). Bad
//! tables fail the command with the line and the field on stderr. Every
//! process a test kills is one it started, by its pid.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use mqblk_test_support::{require_tool, run_ok, Scratch, Watched};

const MIB: usize = 1 << 20;
/// The chunk of the tables here: 128 sectors.
const CHUNK: usize = 64 << 10;

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mqblk")
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "status {}: {}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 512) as u8).wrapping_mul(13) ^ (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// The two legs' contents of `data` striped over 2 legs in CHUNK chunks.
fn destripe(data: &[u8]) -> [Vec<u8>; 2] {
    let mut legs = [Vec::new(), Vec::new()];
    for (i, c) in data.chunks(CHUNK).enumerate() {
        legs[i % 2].extend_from_slice(c);
    }
    legs
}

/// A `mqblk serve` this test started; killed by its pid when dropped.
struct Server {
    proc: Watched,
    sock: PathBuf,
}

impl Server {
    fn start(dir: &Path, name: &str, spec: &str) -> Server {
        let sock = dir.join(format!("{name}.sock"));
        let mut proc = Watched::spawn(
            Command::new(env!("CARGO_BIN_EXE_mqblk"))
                .args(["serve", "--device", spec, "--socket"])
                .arg(&sock),
        );
        proc.wait_for_path(&sock);
        Server { proc, sock }
    }

    /// The default export's URL.
    fn url(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock.display())
    }

    /// SIGTERM (the server flushes and exits 0), and wait.
    fn stop(mut self) {
        self.proc.signal("-TERM");
        let (s, _, err) = self.proc.finish(Duration::from_secs(60));
        assert!(s.success(), "mqblk serve exit status {s}: {err}");
    }
}

#[test]
fn bench_and_info_on_stacked_devices_with_a_stats_line_per_leg() {
    let dir = Scratch::new("dm-cli-bench");
    let table = "dm-table:0 4096 striped 2 128 ram,size=1M 0 ram,size=1M,hw_queues=1 0";
    let stats = dir.path().join("stats");
    ok(mqblk(&[
        "bench",
        "--device",
        table,
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=8",
        "--size=2M",
        "--verify=crc32c",
        "--stats-dir",
        stats.to_str().unwrap(),
    ]));
    // The stacked device and each leg, as iostat reads them.
    let ds = std::fs::read_to_string(stats.join("diskstats")).unwrap();
    let rows: Vec<Vec<&str>> = ds.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 3, "{ds}");
    assert!(rows[0][2].starts_with("dm-"), "{ds}");
    assert!(
        rows[1][2].starts_with("ram") && rows[2][2].starts_with("ram"),
        "{ds}"
    );
    // Fields: writes completed (8th), sectors written (10th).
    let writes = |r: &Vec<&str>| r[7].parse::<u64>().unwrap();
    let sectors = |r: &Vec<&str>| r[9].parse::<u64>().unwrap();
    assert!(writes(&rows[0]) > 0, "{ds}");
    // The legs took the device's sectors between them, each a share.
    assert_eq!(
        sectors(&rows[1]) + sectors(&rows[2]),
        sectors(&rows[0]),
        "{ds}"
    );
    assert!(writes(&rows[1]) > 0 && writes(&rows[2]) > 0, "{ds}");

    // A table file, a job file whose inline table has spaces around `;`.
    let tf = dir.path().join("t.table");
    std::fs::write(
        &tf,
        "# two lines\n0 2048 linear null,size=1M 0\n2048 2048 delay null,size=2M 0 1\n",
    )
    .unwrap();
    let info = ok(mqblk(&["info", &format!("dm:{}", tf.display())]));
    assert!(info.contains("0 2048 linear"), "{info}");
    // Bio-based, with no request queue of its own; bio_remap=0 gives it one.
    assert!(
        info.contains("queue:") && info.contains("bio-based"),
        "{info}"
    );
    assert!(!info.contains("hw_queues:"), "{info}");
    let rq = ok(mqblk(&[
        "info",
        &format!("dm:{},bio_remap=0", tf.display()),
    ]));
    assert!(
        rq.contains("hw_queues:") && !rq.contains("bio-based"),
        "{rq}"
    );
    assert!(info.contains("2048 2048 delay delay 1 ms"), "{info}");
    assert!(info.contains("(null,size=2M)"), "{info}");
    let job = dir.path().join("j.fio");
    std::fs::write(
        &job,
        format!(
            "[global]\nrw=randread\nbs=4k\nsize=1M ; a comment\n\
             [a]\ndevice=dm:{}\n\
             [b]\ndevice=dm-table:0 2048 zero ; 2048 2048 linear null,size=1M 0\n",
            tf.display()
        ),
    )
    .unwrap();
    let out = ok(mqblk(&[
        "bench",
        job.to_str().unwrap(),
        "--output-format=json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{out}");
    for j in jobs {
        assert!(j["read"]["io_bytes"].as_u64().unwrap() >= MIB as u64, "{j}");
    }
}

#[test]
fn bad_tables_fail_the_command_naming_line_and_field() {
    let cases = [
        ("dm-table:0 8 zero;9 8 zero", "line 2, field 1 (start)"),
        (
            "dm-table:0 1000 striped 2 128 ram,size=1M 0 ram,size=1M 0",
            "line 1, field 2 (length)",
        ),
        (
            "dm-table:0 8 stripped 1 8 ram,size=1M 0",
            "unknown target `stripped`",
        ),
        (
            "dm-table:0 8 linear nbd+unix:///?socket=/nonexistent/x.sock 0",
            "line 1, field 4 (device)",
        ),
        (
            "dm-table:0 8 delay ram,size=1M 0 soon",
            "line 1, field 6 (delay)",
        ),
    ];
    for (spec, want) in cases {
        let o = mqblk(&["bench", "--device", spec, "--rw=read", "--size=4k"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{spec}: succeeded");
        assert!(err.contains(want), "{spec}: stderr lacks {want:?}: {err}");
    }
}

/// `mqblk info SPEC`: its status, stdout and stderr.
fn info(spec: &str) -> (std::process::ExitStatus, String, String) {
    let o = mqblk(&["info", spec]);
    (
        o.status,
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_table_that_includes_itself_is_refused_naming_the_cycle() {
    let dir = Scratch::new("dm-cli-self");
    let path = |name: &str| dir.0.join(name).display().to_string();
    // Directly: a line whose device is the table's own file.
    let me = path("self.table");
    std::fs::write(&me, format!("0 8 linear dm:{me} 0\n")).unwrap();
    // Through another file, as a mirror leg (a partition of it, even).
    let (a, b) = (path("a.table"), path("b.table"));
    std::fs::write(
        &a,
        format!("0 2048 mirror core 2 8 nosync 2 ram,size=1M 0 dm:{b},part=1 0\n"),
    )
    .unwrap();
    std::fs::write(&b, format!("0 2048 linear dm:{a},hw_queues=1 0\n")).unwrap();
    for (spec, cycle) in [
        (format!("dm:{me}"), format!("{me} → {me}")),
        (format!("dm:{a}"), format!("{a} → {b} → {a}")),
        (format!("dm:{b}"), format!("{b} → {a} → {b}")),
    ] {
        let (st, _, err) = info(&spec);
        eprintln!("mqblk info {spec}: {st}: {err}");
        // Refused with an error, not a signal.
        assert_eq!(st.code(), Some(1), "{spec}: {st}: {err}");
        assert!(
            err.contains(&format!("the dm table includes itself: {cycle}")),
            "{spec}: stderr lacks the cycle {cycle}: {err}"
        );
    }
}

#[test]
fn dm_tables_nest_16_deep_and_the_17th_is_refused_naming_the_limit() {
    let dir = Scratch::new("dm-cli-nest");
    let path = |n: usize| dir.0.join(format!("t{n}.table")).display().to_string();
    // t0 is a zero target; t{n} a linear view of t{n-1}.
    let deepest = 17;
    std::fs::write(path(0), "0 8 zero\n").unwrap();
    for n in 1..deepest {
        std::fs::write(path(n), format!("0 8 linear dm:{} 0\n", path(n - 1))).unwrap();
    }
    // t15 holds 16 tables, one inside another: allowed.
    let (st, out, err) = info(&format!("dm:{}", path(15)));
    assert!(st.success(), "16 deep: {st}: {err}");
    assert!(out.contains("4096"), "16 deep: {out}");
    // t16 holds 17.
    let (st, _, err) = info(&format!("dm:{}", path(16)));
    eprintln!("mqblk info dm:t16.table: {st}: {err}");
    assert_eq!(st.code(), Some(1), "17 deep: {st}: {err}");
    assert!(
        err.contains("dm tables nest 17 deep, over the limit of 16"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{} → {}", path(16), path(15))) && err.contains(&path(0)),
        "the chain is named: {err}"
    );
}

#[test]
fn serve_exports_a_striped_device_to_real_clients() {
    for t in ["nbdinfo", "nbdcopy", "qemu-img"] {
        require_tool(t);
    }
    let dir = Scratch::new("dm-cli-serve");
    let size = 8 * MIB;
    let legs: Vec<PathBuf> = (0..2)
        .map(|i| dir.path().join(format!("leg{i}.img")))
        .collect();
    for l in &legs {
        std::fs::write(l, vec![0u8; size / 2]).unwrap();
    }
    let tf = dir.path().join("stripe.table");
    std::fs::write(
        &tf,
        format!(
            "0 {} striped 2 128 file:{} 0 file:{} 0\n",
            size / 512,
            legs[0].display(),
            legs[1].display()
        ),
    )
    .unwrap();
    let srv = Server::start(dir.path(), "dm", &format!("dm:{}", tf.display()));
    let url = srv.url();
    assert_eq!(
        run_ok("nbdinfo", &["--size", &url]).trim(),
        size.to_string()
    );
    let src = dir.path().join("src.img");
    let data = pattern(0x5a, size);
    std::fs::write(&src, &data).unwrap();
    run_ok("nbdcopy", &[src.to_str().unwrap(), &url]);
    let back = dir.path().join("back.img");
    run_ok("nbdcopy", &[&url, back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "nbdcopy round trip");
    run_ok(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            &url,
            src.to_str().unwrap(),
        ],
    );
    srv.stop();
    // Each leg holds its chunks, and nothing else.
    for (i, want) in destripe(&data).iter().enumerate() {
        let exp = dir.path().join(format!("want{i}.img"));
        std::fs::write(&exp, want).unwrap();
        run_ok(
            "qemu-img",
            &[
                "compare",
                "-f",
                "raw",
                "-F",
                "raw",
                exp.to_str().unwrap(),
                legs[i].to_str().unwrap(),
            ],
        );
    }
}

#[test]
fn a_stripe_over_two_nbd_exports_writes_and_reads_back() {
    let dir = Scratch::new("dm-cli-nbd-legs");
    let leg_size = 4 * MIB;
    let a = Server::start(dir.path(), "a", &format!("ram,size={leg_size}"));
    let b = Server::start(dir.path(), "b", &format!("ram,size={leg_size}"));
    let spec = format!(
        "dm-table:0 {} striped 2 128 {},conns=2 0 {},conns=2 0",
        2 * leg_size / 512,
        a.url(),
        b.url()
    );
    let dev = mqblk::open(&spec).unwrap();
    // NBD legs complete when polled, and have interrupt lines: so has the
    // stripe, so that its waiters and event loops sleep until a reply.
    assert!(!dev.completes_async());
    assert!(dev.has_irq_lines(), "the stripe has no interrupt line");
    let data = pattern(0xa5, 2 * leg_size);
    {
        // Many requests in flight at once, of several sizes: some cross
        // chunks (split over both legs), some not.
        let mut ctx = dev.context().unwrap();
        let mut off = 0usize;
        let mut sizes = [4096usize, 192 << 10, 12288, 64 << 10, 256 << 10]
            .iter()
            .cycle();
        let mut in_flight = 0;
        while off < data.len() {
            let n = (*sizes.next().unwrap()).min(data.len() - off);
            let mut buf = dev.alloc_buf(n);
            buf.as_mut_slice().copy_from_slice(&data[off..off + n]);
            ctx.submit(mqblk::Bio::write_at(off as u64, buf)).unwrap();
            in_flight += 1;
            off += n;
            if in_flight == 16 {
                ctx.unplug();
                in_flight -= ctx.poll_wait(8, |c| assert!(c.result().is_ok(), "{:?}", c.result()));
            }
        }
        ctx.unplug();
        while in_flight > 0 {
            in_flight -= ctx.poll_wait(1, |c| assert!(c.result().is_ok(), "{:?}", c.result()));
        }
        ctx.flush().unwrap();
        let mut back = vec![0u8; data.len()];
        for (i, c) in back.chunks_mut(MIB).enumerate() {
            ctx.read_at(c, (i * MIB) as u64).unwrap();
        }
        assert!(back == data, "read back through the stripe");
    }
    drop(dev);
    // Each export holds its chunks, read over NBD by a device of its own.
    for (srv, want) in [&a, &b].iter().zip(destripe(&data)) {
        let leg = mqblk::open(&srv.url()).unwrap();
        let mut got = vec![0u8; leg_size];
        leg.context().unwrap().read_at(&mut got, 0).unwrap();
        assert!(got == want, "{}: not the chunks striped to it", srv.url());
    }
    // A delay line over an NBD leg: the device is polled rather than slept
    // on, and the child still goes out after its time.
    let dev = mqblk::open(&format!("dm-table:0 2048 delay {} 0 30", a.url())).unwrap();
    assert!(!dev.completes_async());
    let mut ctx = dev.context().unwrap();
    let mut got = vec![0u8; CHUNK];
    let t = Instant::now();
    ctx.read_at(&mut got, 0).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(30),
        "{:?}",
        t.elapsed()
    );
    assert!(got == data[..CHUNK], "the delayed read's data");
    drop(ctx);
    drop(dev);
    a.stop();
    b.stop();
}

/// The request-based driver (`bio_remap=0`) keeps an ended child's bio for
/// the next clone: sequential 4 KiB I/O at depth 32 merges into requests
/// of 32 segments, whose clones outgrow a bio's 4 inline segments. Before,
/// every such clone grew a new bio (1,314 allocations for these 512
/// requests); now at most the bios in flight grow, each at most 3 times
/// (4 → 8 → 16 → 32 segments): 32 × 3.
#[test]
fn request_based_clones_of_merged_requests_reuse_their_bios() {
    let s = Scratch::new("dm-rq-clones");
    let table = s.path().join("linear.table");
    std::fs::write(
        &table,
        "0 2097152 linear null,size=1G,completion=inline,hw_queues=1 0\n",
    )
    .unwrap();
    let spec = format!("dm:{},bio_remap=0", table.display());
    for rw in ["write", "read"] {
        let out = ok(mqblk(&[
            "bench",
            "--device",
            &spec,
            "--rw",
            rw,
            "--bs=4k",
            "--iodepth=32",
            "--size=64m",
            "--output-format=json",
        ]));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let m = &v["mqblk"];
        let (allocs, requests) = (
            m["allocs"].as_u64().unwrap(),
            m["requests"].as_u64().unwrap(),
        );
        eprintln!("{rw}: {allocs} allocations for {requests} requests");
        // Merged: far fewer requests than the 16,384 I/Os.
        assert!(requests <= 1024, "{rw}: {m}");
        assert!(allocs <= 32 * 3, "{rw}: {m}");
    }
}
