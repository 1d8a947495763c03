//! `mqblk bench --trace=DIR` writes blktrace files that the real `blkparse`
//! and `btt` read (scripts/test installs the blktrace package: a missing
//! tool fails these tests). Each event is checked against what the layer
//! counted and, through a partition of a striped device, against the
//! stripe's table.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use mqblk_test_support::{require_tool, Scratch};
use serde_json::Value;

/// Benches here measure latency: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn mqblk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
}

/// Run `mqblk bench ARGS --output-format=json`: its report.
fn bench(args: &[&str]) -> Value {
    let o = mqblk()
        .arg("bench")
        .args(args)
        .arg("--output-format=json")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "bench {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// One event of blkparse's default output.
#[derive(Clone, Debug, PartialEq)]
struct Event {
    /// `MAJOR,MINOR`.
    dev: String,
    time_s: f64,
    action: String,
    rwbs: String,
    sector: u64,
    sectors: u64,
    /// An A event's device and sector before the remap.
    from: Option<(String, u64)>,
    /// A C event's error.
    error: Option<i64>,
}

/// `blkparse -D dir -i NAME...`: the events, in time order, and the
/// summary's text.
fn blkparse(dir: &Path, names: &[&str]) -> (Vec<Event>, String) {
    require_tool("blkparse");
    let mut c = Command::new("blkparse");
    c.arg("-D").arg(dir);
    for n in names {
        c.args(["-i", n]);
    }
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "blkparse: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).unwrap();
    let mut events = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "240,0 0 1 0.000000000 123 Q R 2048 + 8 [job0.0]"
        if f.len() < 7 || !f[0].starts_with("240,") {
            continue;
        }
        let (dev, time_s, action, rwbs) = (f[0], f[3], f[5], f[6]);
        let mut e = Event {
            dev: dev.to_string(),
            time_s: time_s.parse().unwrap(),
            action: action.to_string(),
            rwbs: rwbs.to_string(),
            sector: 0,
            sectors: 0,
            from: None,
            error: None,
        };
        if f.len() >= 10 && f[8] == "+" {
            e.sector = f[7].parse().unwrap();
            e.sectors = f[9].parse().unwrap();
        }
        match action {
            // "A R 65648 + 8 <- (240,3) 63600"
            "A" => {
                assert_eq!(f[10], "<-", "{l}");
                let d = f[11].trim_matches(|c| c == '(' || c == ')');
                e.from = Some((d.to_string(), f[12].parse().unwrap()));
            }
            // "C R 85370456 + 8 [0]"
            "C" => {
                let last = f[f.len() - 1].trim_matches(|c| c == '[' || c == ']');
                e.error = Some(last.parse().unwrap());
            }
            _ => {}
        }
        events.push(e);
    }
    (events, text)
}

/// The figure after `label` in blkparse's summary (`Reads Queued: N,`).
fn summary(text: &str, label: &str) -> u64 {
    let at = text
        .rfind(label)
        .unwrap_or_else(|| panic!("no {label} in blkparse's summary"));
    let n: String = text[at + label.len()..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    n.parse().unwrap()
}

fn count(events: &[Event], action: &str) -> u64 {
    events.iter().filter(|e| e.action == action).count() as u64
}

/// The (sector, sectors) of every `action` event, counted.
fn ranges(events: &[Event], action: &str) -> BTreeMap<(u64, u64), u64> {
    let mut m = BTreeMap::new();
    for e in events.iter().filter(|e| e.action == action) {
        *m.entry((e.sector, e.sectors)).or_insert(0) += 1;
    }
    m
}

/// The device's own counters for the whole run, from the stats dir the
/// bench keeps (its JSON report counts the measured phase only, after the
/// job's first I/Os).
fn device_counts(stats_dir: &Path, name: &str) -> Value {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(stats_dir.join("mqblk.json")).unwrap())
            .unwrap();
    v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {v}"))
        .clone()
}

/// The name stems of the trace files in `dir` (`nullb0` of
/// `nullb0.blktrace.0`), sorted.
fn traced(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().unwrap();
            n.split_once(".blktrace.").map(|(s, _)| s.to_string())
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// A 100,000-I/O bench on null, traced: blkparse reads every event, each
/// bio has one Q and one C at the same range, and the D and merge events
/// are the device's requests and merges. Random reads never merge;
/// sequential reads merge in the plug.
#[test]
fn a_null_bench_trace_has_a_q_and_a_c_per_bio_a_d_per_request_and_its_merges() {
    let _s = serial();
    for (rw, merging) in [("randread", false), ("read", true)] {
        let dir = Scratch::new(&format!("blktrace-{rw}"));
        let trace = dir.path().join("trace");
        let stats = dir.path().join("stats");
        let report = bench(&[
            "--device",
            "null,size=64G",
            &format!("--rw={rw}"),
            "--bs=4k",
            "--iodepth=32",
            "--number_ios=100000",
            &format!("--trace={}", trace.display()),
            &format!("--stats-dir={}", stats.display()),
        ]);
        assert_eq!(traced(&trace), ["nullb0"]);
        let (ev, text) = blkparse(&trace, &["nullb0"]);
        let dev = device_counts(&stats, "nullb0");
        let bios = dev["bios"].as_u64().unwrap();
        let requests = dev["requests"].as_u64().unwrap();
        let d = dev["diskstats"].as_array().unwrap();
        // diskstats' read, write and discard merges.
        let merges: u64 = [1, 5, 12].iter().map(|&i| d[i].as_u64().unwrap()).sum();
        // The bench's own report counts the measured phase, which is all
        // of the run but the I/Os its job sent before the phase began.
        let measured = &report["mqblk"];
        assert!(bios >= 100_000, "{rw}: {bios} bios");
        assert!(measured["bios"].as_u64().unwrap() <= bios);
        assert!(measured["requests"].as_u64().unwrap() <= requests);
        assert!(measured["merges"].as_u64().unwrap() <= merges);

        assert_eq!(count(&ev, "Q"), bios, "{rw}: a Q per bio");
        assert_eq!(count(&ev, "C"), bios, "{rw}: a C per bio");
        assert!(
            ranges(&ev, "Q") == ranges(&ev, "C"),
            "{rw}: a bio's C is not at its Q's range"
        );
        assert!(ev
            .iter()
            .filter(|e| e.action == "C")
            .all(|e| e.error == Some(0) && e.rwbs == "R"));
        assert_eq!(count(&ev, "D"), requests, "{rw}: a D per request");
        assert_eq!(count(&ev, "G"), requests, "{rw}: a G per request");
        assert_eq!(count(&ev, "I"), requests, "{rw}: an I per request");
        assert_eq!(
            count(&ev, "M") + count(&ev, "F"),
            merges,
            "{rw}: an M or F per merge"
        );
        assert_eq!(merging, merges > 0, "{rw}: {merges} merges");
        assert_eq!(count(&ev, "U"), count(&ev, "P"), "{rw}: every plug flushed");
        // blkparse's own summary agrees, and it found no gap.
        assert_eq!(summary(&text, "Reads Queued:"), bios, "{rw}");
        assert_eq!(summary(&text, "Read Dispatches:"), requests, "{rw}");
        assert_eq!(summary(&text, "Reads Completed:"), bios, "{rw}");
        assert_eq!(summary(&text, "Read Merges:"), merges, "{rw}");
        assert!(text.contains("Skips: 0 forward"), "{rw}");
        // Time moves forward through each context's file.
        assert!(ev.windows(2).all(|w| w[0].time_s <= w[1].time_s));
    }
}

/// btt's D2C on a null device that completes each request 100 µs after it
/// is issued is the device's time: never below those 100 µs, and below
/// the bench's completion latency (fio's clat, at depth 1, where nothing
/// queues), which adds the layer's reap of the completion to it. C is
/// stamped where the driver completes (here the timer's expiry), not
/// where the context reaps.
#[test]
fn btt_d2c_is_the_timer_devices_completion_latency() {
    let _s = serial();
    require_tool("btt");
    let dir = Scratch::new("blktrace-btt");
    let trace = dir.path().join("trace");
    let report = bench(&[
        "--device",
        "null,size=64G,completion=timer,completion_nsec=100000",
        "--rw=randread",
        "--bs=4k",
        "--iodepth=1",
        "--number_ios=20000",
        &format!("--trace={}", trace.display()),
    ]);
    let clat_s = report["jobs"][0]["read"]["clat_ns"]["mean"]
        .as_f64()
        .unwrap()
        / 1e9;
    let bin = dir.path().join("nullb0.bin");
    let o = Command::new("blkparse")
        .arg("-D")
        .arg(&trace)
        .args(["-i", "nullb0", "-O", "-d"])
        .arg(&bin)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // btt writes its iostat-style .dat files into its working directory.
    let o = Command::new("btt")
        .current_dir(dir.path())
        .arg("-i")
        .arg(&bin)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    // "D2C   MIN   AVG   MAX   N"
    let d2c: Vec<f64> = out
        .lines()
        .find(|l| l.starts_with("D2C"))
        .unwrap_or_else(|| panic!("no D2C line in:\n{out}"))
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let (min, avg, n) = (d2c[0], d2c[1], d2c[3]);
    eprintln!("btt D2C min {min} s, avg {avg} s over {n} I/Os; bench clat mean {clat_s} s");
    assert!(n >= 20_000.0, "{out}");
    assert!(min >= 100e-6, "a C before the device's 100 us: {out}");
    assert!(
        avg < clat_s,
        "D2C average {avg} s is not below the bench's completion latency {clat_s} s, \
         which adds the reap to the device's time:\n{out}"
    );
}

/// Write an MBR with one partition, from sector `start` for `sectors`,
/// made by the real sfdisk on a scratch image, into the first sector of
/// `leg0` (where a stripe keeps the device's sector 0).
fn mbr_onto(dir: &Path, leg0: &Path, start: u64, sectors: u64, device_bytes: u64) {
    require_tool("sfdisk");
    let img = dir.join("label.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(device_bytes)
        .unwrap();
    let mut c = Command::new("sfdisk")
        .arg("-q")
        .arg(&img)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::{Read, Seek, Write};
    writeln!(
        c.stdin.take().unwrap(),
        "label: dos\nstart={start}, size={sectors}, type=83"
    )
    .unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut sector0 = [0u8; 512];
    std::fs::File::open(&img)
        .unwrap()
        .read_exact(&mut sector0)
        .unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(leg0).unwrap();
    f.seek(std::io::SeekFrom::Start(0)).unwrap();
    f.write_all(&sector0).unwrap();
}

/// I/O on partition 1 of a two-leg stripe (`dm:TABLE,part=1`): every bio
/// shows as an A from the partition to the stripe, at the partition's
/// start plus its sector, and then as an A from the stripe to the leg and
/// sector the table maps it to (chunk k of 128 sectors on leg k mod 2, at
/// chunk k div 2 there), and every leg's Q follows its A.
#[test]
fn a_partition_of_a_stripe_remaps_each_bio_to_the_leg_and_sector_of_the_table() {
    let _s = serial();
    const CHUNK: u64 = 128;
    const LEG_SECTORS: u64 = 131_072; // 64 MiB each
    const PART_START: u64 = 2048;
    const PART_SECTORS: u64 = 100_000;
    let dir = Scratch::new("blktrace-stripe");
    let a = dir.file("a.img", LEG_SECTORS * 512);
    let b = dir.file("b.img", LEG_SECTORS * 512);
    mbr_onto(
        dir.path(),
        &a,
        PART_START,
        PART_SECTORS,
        2 * LEG_SECTORS * 512,
    );
    let table = dir.path().join("stripe.table");
    std::fs::write(
        &table,
        format!(
            "0 {} striped 2 {CHUNK} file:{} 0 file:{} 0\n",
            2 * LEG_SECTORS,
            a.display(),
            b.display()
        ),
    )
    .unwrap();
    let trace = dir.path().join("trace");
    bench(&[
        "--device",
        &format!("dm:{},part=1", table.display()),
        "--rw=randrw",
        "--bs=4k",
        "--iodepth=16",
        "--number_ios=4000",
        &format!("--trace={}", trace.display()),
    ]);
    // The stripe and its two legs, each traced; legs are named in the
    // order the table opens them.
    let names = traced(&trace);
    let dm: Vec<&String> = names.iter().filter(|n| n.starts_with("dm-")).collect();
    let mut legs: Vec<&String> = names.iter().filter(|n| n.starts_with("file")).collect();
    legs.sort_by_key(|n| n["file".len()..].parse::<u32>().unwrap());
    assert_eq!((dm.len(), legs.len()), (1, 2), "{names:?}");

    // The stripe: an A from the partition before each Q.
    let (top, _) = blkparse(&trace, &[dm[0]]);
    let stripe_dev = top[0].dev.clone();
    let qs = count(&top, "Q");
    assert!(qs >= 4000, "{qs}");
    assert_eq!(count(&top, "A"), qs);
    let mut part_dev = None;
    for w in top.windows(2).filter(|w| w[0].action == "A") {
        let (a, q) = (&w[0], &w[1]);
        let (from_dev, from) = a.from.clone().unwrap();
        assert_ne!(from_dev, stripe_dev);
        assert_eq!(*part_dev.get_or_insert(from_dev.clone()), from_dev);
        assert!(from + a.sectors <= PART_SECTORS, "{a:?}");
        assert_eq!(a.sector, PART_START + from, "{a:?}");
        assert_eq!(
            (q.action.as_str(), q.sector, q.sectors),
            ("Q", a.sector, a.sectors)
        );
    }

    // The legs: an A from the stripe before each Q, where the table says.
    let mut mapped = BTreeMap::new();
    for (leg, name) in legs.iter().enumerate() {
        let (ev, _) = blkparse(&trace, &[name]);
        let leg_dev = ev[0].dev.clone();
        assert_ne!(leg_dev, stripe_dev);
        assert!(count(&ev, "A") > 0, "leg {leg} got no I/O");
        assert_eq!(count(&ev, "A"), count(&ev, "Q"), "leg {leg}");
        assert_eq!(count(&ev, "C"), count(&ev, "Q"), "leg {leg}");
        for w in ev.windows(2).filter(|w| w[0].action == "A") {
            let (a, q) = (&w[0], &w[1]);
            let (from_dev, from) = a.from.clone().unwrap();
            assert_eq!(from_dev, stripe_dev, "{a:?}");
            let chunk = from / CHUNK;
            assert_eq!(
                chunk % 2,
                leg as u64,
                "{a:?}: sector {from} is on the other leg"
            );
            assert_eq!(a.sector, chunk / 2 * CHUNK + from % CHUNK, "{a:?}");
            assert_eq!(a.dev, leg_dev);
            assert_eq!(
                (q.action.as_str(), q.sector, q.sectors),
                ("Q", a.sector, a.sectors)
            );
            *mapped.entry((from, a.sectors)).or_insert(0u64) += 1;
        }
    }
    // The stripe is bio-based: every bio it was given (its Q) went down
    // once, cut at its chunks' ends, and nothing else did; it issued no
    // request of its own (no D).
    assert_eq!(count(&top, "D"), 0);
    let mut want = BTreeMap::new();
    for d in top.iter().filter(|e| e.action == "Q") {
        let (mut s, end) = (d.sector, d.sector + d.sectors);
        while s < end {
            let n = (end - s).min(CHUNK - s % CHUNK);
            *want.entry((s, n)).or_insert(0u64) += 1;
            s += n;
        }
    }
    assert!(
        mapped == want,
        "the legs' A events are not the stripe's bios cut at its chunks"
    );
}

/// A `mqblk serve` child, sent SIGTERM and waited for when dropped.
struct Serve(std::process::Child);

impl Serve {
    /// Serve `spec` on `sock`, with `args` more; back once it answers.
    fn start(spec: &str, sock: &Path, args: &[&std::ffi::OsStr]) -> Serve {
        let mut c = mqblk()
            .args(["serve", spec, "--socket"])
            .arg(sock)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        mqblk_test_support::wait_for_path(sock, "mqblk serve", Some(&mut c));
        Serve(c)
    }

    /// SIGTERM, and wait (bounded) for it to exit 0.
    fn stop(mut self) {
        let st = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let t = std::time::Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                assert!(s.success(), "{s}");
                return;
            }
            assert!(
                t.elapsed() < std::time::Duration::from_secs(30),
                "mqblk serve did not exit after SIGTERM"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// qemu-io's commands on the export at `sock`.
fn qemu_io(sock: &Path, cmds: &[&str]) {
    require_tool("qemu-io");
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw"]);
    for k in cmds {
        c.args(["-c", k]);
    }
    let o = c
        .arg(format!("nbd+unix:///?socket={}", sock.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "qemu-io {cmds:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `mqblk qos --control=SOCKET WORDS`: its answer.
fn control(ctl: &Path, words: &[&str]) -> String {
    let o = mqblk()
        .arg("qos")
        .arg(format!("--control={}", ctl.display()))
        .args(words)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "qos {words:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A running `mqblk serve` traces what its clients do between `trace
/// start` and `trace stop` on its control socket, and nothing else; with
/// `--trace` it traces from the start, and its files are whole once it
/// exits.
#[test]
fn serve_traces_from_its_flag_or_between_start_and_stop_on_its_control_socket() {
    let _s = serial();
    let d = Scratch::new("blktrace-serve");
    let (sock, ctl, trace) = (
        d.path().join("nbd.sock"),
        d.path().join("ctl.sock"),
        d.path().join("trace"),
    );
    let srv = Serve::start(
        "ram,size=16M",
        &sock,
        &["--control".as_ref(), ctl.as_os_str()],
    );
    qemu_io(&sock, &["write -P 1 0 64k"]);
    let said = control(&ctl, &["trace", "start", trace.to_str().unwrap()]);
    assert!(said.starts_with("tracing 1 devices"), "{said}");
    qemu_io(&sock, &["write -P 2 1M 64k", "read -P 2 1M 64k"]);
    let said = control(&ctl, &["trace", "stop"]);
    assert!(said.contains("ram0: "), "{said}");
    qemu_io(&sock, &["read 2M 4k"]);
    let (ev, _) = blkparse(&trace, &["ram0"]);
    let sectors = |rw: &str| -> u64 {
        ev.iter()
            .filter(|e| e.action == "Q" && e.rwbs.starts_with(rw))
            .map(|e| {
                assert!((2048..2048 + 128).contains(&e.sector), "{e:?}");
                e.sectors
            })
            .sum()
    };
    assert_eq!((sectors("W"), sectors("R")), (128, 128));
    assert_eq!(count(&ev, "Q"), count(&ev, "C"));
    srv.stop();

    // From the start, with --trace.
    let trace2 = d.path().join("trace2");
    let srv = Serve::start(
        "null,size=16M",
        &d.path().join("n.sock"),
        &["--trace".as_ref(), trace2.as_os_str()],
    );
    qemu_io(&d.path().join("n.sock"), &["read 4k 4k"]);
    srv.stop();
    let names = traced(&trace2);
    let (ev, _) = blkparse(&trace2, &[&names[0]]);
    assert!(
        ev.iter().any(|e| e.action == "C" && e.sector == 8),
        "{ev:?}"
    );
}
