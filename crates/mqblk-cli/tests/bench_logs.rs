//! fio's logs from `mqblk bench` on the null device, read back: a line
//! per I/O with `log_avg_msec=0` (with `log_offset=1`, `log_prio=1`,
//! `per_job_logs=0`), the histogram log (`write_hist_log`), the
//! submission latency asked for by `slat_percentiles=1`, and the columns
//! beside those of fio's own logs (fio's null engine). fio's parsers
//! (`fiologparser.py`, `fiologparser_hist.py`) read them. No timing is
//! asserted: every check compares the logs with each other and with the
//! report.

use std::path::{Path, PathBuf};
use std::process::Command;

use mqblk_test_support::{fio_source, require_tool, Scratch};
use serde_json::Value;

/// Run `cmd`, which must succeed (`what` names it in the failure, with
/// its stderr); its output.
fn run_ok(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Run `mqblk bench --device null` on the job file `job` in `dir`; the
/// JSON report.
fn bench(dir: &Path, job: &str) -> Value {
    let path = dir.join("job.fio");
    std::fs::write(&path, job).unwrap();
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .current_dir(dir)
            .args(["bench", "--device", "null", "--output-format=json"])
            .arg(&path),
        job,
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn total_ios(v: &Value, job: usize, dir: &str) -> u64 {
    v["jobs"][job][dir]["total_ios"].as_u64().unwrap()
}

/// One log line, its columns parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Line {
    time_ms: u64,
    value: u64,
    dir: u8,
    bs: u64,
    offset: Option<u64>,
    prio: String,
}

/// Every line of a log with (`offset`) or without the offset column.
fn read_log(path: &Path, offset: bool) -> Vec<Line> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let c: Vec<&str> = l.split(", ").collect();
            assert_eq!(c.len(), 5 + usize::from(offset), "{}: {l}", path.display());
            let n = |i: usize| -> u64 {
                c[i].parse()
                    .unwrap_or_else(|_| panic!("{}: {l}", path.display()))
            };
            Line {
                time_ms: n(0),
                value: n(1),
                dir: n(2) as u8,
                bs: n(3),
                offset: offset.then(|| n(4)),
                prio: c[c.len() - 1].to_string(),
            }
        })
        .collect()
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

#[test]
fn per_io_logs_have_a_line_per_completed_io() {
    let d = Scratch::new("logs-per-io");
    let v = bench(
        d.path(),
        "[logged]\nrw=randrw\nbs=4k\niodepth=4\noffset=4m\nsize=64m\n\
         write_bw_log=run\nwrite_iops_log=run\nwrite_lat_log=run\n\
         log_avg_msec=0\nlog_offset=1\n",
    );
    let reads = total_ios(&v, 0, "read");
    let writes = total_ios(&v, 0, "write");
    assert_eq!(reads + writes, 16384, "64 MiB in 4 KiB I/Os");
    let log = |kind: &str| read_log(&d.path().join(format!("run_{kind}.1.log")), true);
    let (bw, iops, lat, clat, slat) =
        (log("bw"), log("iops"), log("lat"), log("clat"), log("slat"));
    for (kind, lines) in [
        ("bw", &bw),
        ("iops", &iops),
        ("lat", &lat),
        ("clat", &clat),
        ("slat", &slat),
    ] {
        assert_eq!(lines.len() as u64, reads + writes, "{kind}");
        let count = |dir| lines.iter().filter(|l| l.dir == dir).count() as u64;
        assert_eq!((count(0), count(1)), (reads, writes), "{kind}");
        for l in lines.iter() {
            assert_eq!(l.bs, 4096, "{kind}: {l:?}");
            let offset = l.offset.unwrap();
            assert_eq!(offset % 4096, 0, "{kind}: {l:?}");
            assert!((4 << 20..68 << 20).contains(&offset), "{kind}: {l:?}");
            // No priority set: not real time.
            assert_eq!(l.prio, "0", "{kind}: {l:?}");
        }
        // Completion order (issue order for slat): time never goes back.
        assert!(
            lines.windows(2).all(|w| w[0].time_ms <= w[1].time_ms),
            "{kind}"
        );
    }
    // bw, iops, lat and clat are the same I/Os in the same order.
    let key = |l: &Line| (l.time_ms, l.dir, l.bs, l.offset);
    for other in [&bw, &iops, &lat] {
        assert!(other.iter().map(key).eq(clat.iter().map(key)));
    }
    assert!(iops.iter().all(|l| l.value == 1));
    for ((b, c), l) in bw.iter().zip(&clat).zip(&lat) {
        // fio's per-I/O bandwidth: bytes * 1000000 / clat in ns.
        let rate = (c.bs * 1_000_000).checked_div(c.value).unwrap_or(0);
        assert_eq!(b.value, rate, "{b:?} {c:?}");
        assert!(l.value >= c.value, "{l:?} {c:?}");
    }
    // lat = slat + clat, I/O by I/O: the differences are the slats.
    let diffs: Vec<u64> = lat
        .iter()
        .zip(&clat)
        .map(|(l, c)| l.value - c.value)
        .collect();
    assert_eq!(
        sorted(diffs),
        sorted(slat.iter().map(|l| l.value).collect())
    );
    // The slat log holds the same I/Os.
    let io = |l: &Line| (l.dir, l.offset);
    let mut a: Vec<_> = slat.iter().map(io).collect();
    let mut b: Vec<_> = clat.iter().map(io).collect();
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
    // A sized job's samples fit the log made before the run.
    assert_eq!(v["mqblk"]["allocs"], 0, "{}", v["mqblk"]);
}

#[test]
fn the_priority_column_is_fio_s() {
    let d = Scratch::new("logs-prio");
    // Real time: 1 without log_prio.
    let v = bench(
        d.path(),
        "[rt]\nrw=randread\nnumber_ios=64\nprioclass=1\nprio=3\n\
         write_iops_log=rt\nlog_avg_msec=0\n",
    );
    let lines = read_log(&d.path().join("rt_iops.1.log"), false);
    assert_eq!(lines.len() as u64, total_ios(&v, 0, "read"));
    assert!(lines.iter().all(|l| l.prio == "1"), "{lines:?}");
    // log_prio=1: fio's value in hex, class 2 (best effort) << 13 | 5.
    bench(
        d.path(),
        "[be]\nrw=randread\nnumber_ios=64\nprioclass=2\nprio=5\nlog_prio=1\n\
         write_iops_log=be\nlog_avg_msec=0\n",
    );
    let lines = read_log(&d.path().join("be_iops.1.log"), false);
    assert!(lines.iter().all(|l| l.prio == "0x4005"), "{lines:?}");
}

#[test]
fn per_job_logs_0_puts_every_job_in_one_file() {
    let d = Scratch::new("logs-shared");
    let v = bench(
        d.path(),
        "[shared]\nrw=randwrite\nnumber_ios=5000\nnumjobs=2\nper_job_logs=0\n\
         write_iops_log=all\nwrite_lat_log=all\nlog_avg_msec=0\n\
         write_hist_log=all\nlog_hist_msec=1\n",
    );
    let ios = total_ios(&v, 0, "write") + total_ios(&v, 1, "write");
    assert_eq!(ios, 10000);
    for kind in ["iops", "lat", "slat", "clat"] {
        let lines = read_log(&d.path().join(format!("all_{kind}.log")), false);
        assert_eq!(lines.len() as u64, ios, "{kind}");
        assert!(!d.path().join(format!("all_{kind}.1.log")).exists());
    }
    // Both jobs' histogram lines, each job's windows replayed on its own
    // half of the clat log (the jobs write one after the other).
    let hist = read_hist(&d.path().join("all_clat_hist.log"));
    assert!(!d.path().join("all_clat_hist.1.log").exists());
    let clat = read_log(&d.path().join("all_clat.log"), false);
    let (first, second) = clat.split_at(total_ios(&v, 0, "write") as usize);
    let mut expected = replay_hist(first, 1, 0);
    expected.extend(replay_hist(second, 1, 0));
    assert_eq!(hist, expected);
}

#[test]
fn slat_is_reported_when_asked() {
    let d = Scratch::new("logs-slat");
    let v = bench(
        d.path(),
        "[s]\nrw=randrw\niodepth=4\nnumber_ios=2000\nslat_percentiles=1\n",
    );
    for dir in ["read", "write"] {
        let slat = &v["jobs"][0][dir]["slat_ns"];
        assert_eq!(slat["N"].as_u64(), Some(total_ios(&v, 0, dir)), "{slat}");
        let pct = slat["percentile"].as_object().unwrap();
        assert_eq!(pct.len(), 17, "{slat}");
        assert!(slat["min"].as_u64().unwrap() <= pct["50.000000"].as_u64().unwrap());
    }
    // Nothing asks: no slat measured.
    let v = bench(d.path(), "[s]\nrw=randrw\niodepth=4\nnumber_ios=2000\n");
    let slat = &v["jobs"][0]["read"]["slat_ns"];
    assert_eq!(slat["N"], 0, "{slat}");
    assert!(slat.get("percentile").is_none(), "{slat}");
    // The text report: fio's slat line and block before clat's.
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(d.path())
        .args(["bench", "--device", "null"])
        .arg(d.path().join("job.fio"))
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("slat"));
    std::fs::write(
        d.path().join("job.fio"),
        "[s]\nrw=randread\nnumber_ios=2000\nslat_percentiles=1\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(d.path())
        .args(["bench", "--device", "null"])
        .arg(d.path().join("job.fio"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let at = |k: &str| text.find(k).unwrap_or_else(|| panic!("{k}: {text}"));
    assert!(at("    slat (") < at("    clat ("), "{text}");
    assert!(
        at("    slat percentiles (") < at("    clat percentiles ("),
        "{text}"
    );
}

#[test]
fn the_command_line_takes_the_log_options_and_lat_is_the_total() {
    let d = Scratch::new("logs-cli");
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .current_dir(d.path())
            .args([
                "bench",
                "--device=null",
                "--rw=randread",
                "--iodepth=4",
                "--number_ios=3000",
                "--slat_percentiles",
                "--write_lat_log=c",
                "--log_avg_msec=0",
                "--log_offset=1",
                "--output-format=json",
            ]),
        "bench with log options on the command line",
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["jobs"][0]["read"];
    let n = total_ios(&v, 0, "read");
    assert_eq!(r["slat_ns"]["N"].as_u64(), Some(n), "{r}");
    assert_eq!(r["lat_ns"]["N"].as_u64(), Some(n), "{r}");
    assert_eq!(r["clat_ns"]["N"].as_u64(), Some(n), "{r}");
    // Each I/O's lat is its slat plus its wait after submit.
    let (lat, slat) = (&r["lat_ns"], &r["slat_ns"]);
    assert!(lat["min"].as_u64() >= slat["min"].as_u64(), "{r}");
    assert!(lat["max"].as_u64() >= slat["max"].as_u64(), "{r}");
    let lat_log = read_log(&d.path().join("c_lat.1.log"), true);
    let slat_log = read_log(&d.path().join("c_slat.1.log"), true);
    let clat_log = read_log(&d.path().join("c_clat.1.log"), true);
    assert_eq!(lat_log.len() as u64, n);
    let sum: u64 = lat_log.iter().map(|l| l.value).sum();
    let parts: u64 = slat_log.iter().chain(&clat_log).map(|l| l.value).sum();
    assert_eq!(sum, parts, "lat = slat + clat, summed over the I/Os");
}

#[test]
fn a_bad_log_value_is_refused_by_name() {
    let d = Scratch::new("logs-bad");
    for (line, key) in [
        ("log_offset=maybe", "log_offset"),
        ("log_prio=2", "log_prio"),
        ("slat_percentiles=yes please", "slat_percentiles"),
        ("log_hist_coarseness=7", "log_hist_coarseness"),
        ("log_hist_msec=10q", "log_hist_msec"),
    ] {
        let path = d.path().join("bad.fio");
        std::fs::write(&path, format!("[bad]\nrw=read\n{line}\n")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["bench", "--device", "null"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{line}");
        assert!(
            err.contains(key) && err.contains("expected"),
            "{line}: {err}"
        );
    }
}

/// The columns of the first line of each log `PREFIX_KIND.1.log` in
/// `dir`, with what varies from run to run (time, value, direction, a
/// per-I/O offset) blanked.
fn shapes(dir: &Path, prefix: &str, per_io_offset: bool) -> Vec<(String, Vec<String>)> {
    ["bw", "iops", "lat", "slat", "clat"]
        .iter()
        .map(|kind| {
            let path = dir.join(format!("{prefix}_{kind}.1.log"));
            let text = std::fs::read_to_string(&path).unwrap();
            let first = text
                .lines()
                .next()
                .unwrap_or_else(|| panic!("{} is empty", path.display()));
            let cols = first
                .split(", ")
                .enumerate()
                .map(|(i, c)| match i {
                    0..=2 => "N".to_string(),
                    4 if per_io_offset => "OFFSET".to_string(),
                    _ => c.to_string(),
                })
                .collect();
            (kind.to_string(), cols)
        })
        .collect()
}

#[test]
fn the_columns_are_those_of_fio_s_own_logs() {
    require_tool("fio");
    let d = Scratch::new("logs-fio-columns");
    for per_io in [true, false] {
        // Per I/O: 256 I/Os; averaged: 50 ms windows over 200 ms, and the
        // histogram log.
        let run: &[&str] = if per_io {
            &["log_avg_msec=0", "number_ios=256"]
        } else {
            &[
                "log_avg_msec=50",
                "runtime=200ms",
                "time_based=1",
                "write_hist_log=PREFIX",
                "log_hist_msec=50",
            ]
        };
        for (offset, prio) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut keys: Vec<String> = [
                "rw=randrw",
                "bs=4k",
                "size=64m",
                "iodepth=4",
                "write_bw_log=PREFIX",
                "write_iops_log=PREFIX",
                "write_lat_log=PREFIX",
            ]
            .iter()
            .chain(run)
            .map(|k| k.to_string())
            .collect();
            keys.push(format!("log_offset={}", u8::from(offset)));
            keys.push(format!("log_prio={}", u8::from(prio)));
            let fio = Command::new("fio")
                .current_dir(d.path())
                .args(["--name=x", "--ioengine=null", "--output=/dev/null"])
                .args(
                    keys.iter()
                        .map(|k| format!("--{}", k.replace("PREFIX", "fio"))),
                )
                .output()
                .expect("run fio");
            assert!(
                fio.status.success(),
                "{}",
                String::from_utf8_lossy(&fio.stderr)
            );
            let job: String = keys
                .iter()
                .map(|k| k.replace("PREFIX", "mq") + "\n")
                .collect();
            bench(d.path(), &format!("[x]\n{job}"));
            assert_eq!(
                shapes(d.path(), "mq", per_io && offset),
                shapes(d.path(), "fio", per_io && offset),
                "{keys:?}"
            );
            if !per_io {
                // Time, direction, block size and fio 3.33's 1856 bins.
                for prefix in ["mq", "fio"] {
                    let hist = read_hist(&d.path().join(format!("{prefix}_clat_hist.1.log")));
                    assert!(!hist.is_empty(), "{prefix}");
                    assert!(hist.iter().all(|h| h.3.len() == 1856), "{prefix}");
                }
            }
        }
    }
}

/// fio's tools directory (fiologparser.py, hist/).
fn fio_tools() -> PathBuf {
    fio_source().join("tools")
}

#[test]
fn fiologparser_reads_per_io_logs() {
    require_tool("python3");
    let d = Scratch::new("logs-fiologparser");
    let v = bench(
        d.path(),
        "[p]\nrw=randread\niodepth=2\nnumber_ios=3000\n\
         write_iops_log=p\nwrite_lat_log=p\nlog_avg_msec=0\n",
    );
    assert_eq!(total_ios(&v, 0, "read"), 3000);
    for (kind, how) in [("iops", "-s"), ("clat", "-a"), ("slat", "-a")] {
        let path = d.path().join(format!("p_{kind}.1.log"));
        let lines = read_log(&path, false);
        // fiologparser.py unpacks fio's older four columns: as with fio
        // 3.33's own logs, the priority column is cut first.
        let four: String = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| format!("{}\n", l.rsplit_once(", ").unwrap().0))
            .collect();
        let cut = d.path().join(format!("{kind}.4.log"));
        std::fs::write(&cut, four).unwrap();
        let out = run_ok(
            Command::new("python3")
                .arg(fio_tools().join("fiologparser.py"))
                .arg(how)
                .arg(&cut),
            &format!("fiologparser.py on {kind}"),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        // One line per second of log, ending at its last sample.
        let last = stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("{kind}: no output"));
        let (end, value) = last.split_once(", ").unwrap();
        let end: f64 = end.parse().unwrap();
        let last_ms = lines.iter().map(|l| l.time_ms).max().unwrap();
        assert_eq!(end as u64, last_ms, "{kind}: {stdout}");
        let value: f64 = value.parse().unwrap();
        assert!(value.is_finite() && value >= 0.0, "{kind}: {stdout}");
    }
}

/// fio's `plat_val_to_idx` (stat.c), transcribed: the test's oracle for
/// the bins.
fn fio_bin(ns: u64) -> usize {
    const BITS: u32 = 6;
    const NR: usize = 29 << BITS;
    let msb = if ns == 0 { 0 } else { 63 - ns.leading_zeros() };
    if msb <= BITS {
        return ns as usize;
    }
    let error_bits = msb - BITS;
    let base = ((error_bits + 1) as usize) << BITS;
    let offset = (63 & (ns >> error_bits)) as usize;
    (base + offset).min(NR - 1)
}

/// A histogram line: time, direction, block size, bins.
type HistLine = (u64, u8, u64, Vec<u64>);

fn read_hist(path: &Path) -> Vec<HistLine> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| {
            let v: Vec<u64> = l.split(", ").map(|c| c.parse().unwrap()).collect();
            (v[0], v[1] as u8, v[2], v[3..].to_vec())
        })
        .collect()
}

/// The histogram lines fio writes for the completions of a per-I/O clat
/// log (in completion order), replaying stat.c's `add_clat_sample`: a
/// direction's window starts at its first completion after time 0, the
/// completion that finds `window_ms` passed closes it (and is counted in
/// it), and the next starts where it should have ended.
fn replay_hist(clat: &[Line], window_ms: u64, coarseness: u32) -> Vec<HistLine> {
    let mut bins = vec![vec![0u64; 1856]; 3];
    let mut last = [0u64; 3];
    let mut out = Vec::new();
    for l in clat {
        let d = usize::from(l.dir);
        bins[d][fio_bin(l.value)] += 1;
        if last[d] == 0 {
            last[d] = l.time_ms;
        }
        let open = l.time_ms - last[d];
        if open >= window_ms {
            let line = bins[d]
                .chunks(1 << coarseness)
                .map(|c| c.iter().sum())
                .collect();
            out.push((l.time_ms, l.dir, l.bs, line));
            bins[d].fill(0);
            last[d] = l.time_ms - (open - window_ms);
        }
    }
    out
}

#[test]
fn the_histogram_log_counts_each_window_in_fio_s_bins() {
    let d = Scratch::new("logs-hist");
    for coarseness in [0u32, 3] {
        // The per-I/O clat log of the same run is the oracle.
        let v = bench(
            d.path(),
            &format!(
                "[h]\nrw=randrw\niodepth=4\nruntime=300ms\ntime_based\n\
                 write_lat_log=h\nlog_avg_msec=0\n\
                 write_hist_log=h\nlog_hist_msec=20\nlog_hist_coarseness={coarseness}\n"
            ),
        );
        let hist = read_hist(&d.path().join("h_clat_hist.1.log"));
        let clat = read_log(&d.path().join("h_clat.1.log"), false);
        // The run lasts 300 ms, so 20 ms windows close.
        assert!(!hist.is_empty());
        for (time_ms, dir, bs, bins) in &hist {
            assert_eq!(bins.len(), 1856 >> coarseness, "{time_ms} {dir}");
            assert!(*dir < 2 && *bs == 4096, "{time_ms} {dir} {bs}");
            assert!(bins.iter().sum::<u64>() >= 1);
        }
        assert_eq!(
            hist,
            replay_hist(&clat, 20, coarseness),
            "coarseness {coarseness}"
        );
        for (dir, name) in [(0, "read"), (1, "write")] {
            let counted: u64 = hist
                .iter()
                .filter(|h| h.1 == dir)
                .map(|h| h.3.iter().sum::<u64>())
                .sum();
            assert!(counted <= total_ios(&v, 0, name), "{name}");
        }
    }
}

#[test]
fn without_log_hist_msec_the_histogram_log_is_empty_as_fio_s() {
    let d = Scratch::new("logs-hist-empty");
    let path = d.path().join("job.fio");
    std::fs::write(
        &path,
        "[e]\nrw=randread\nnumber_ios=1000\nwrite_hist_log=e\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(d.path())
        .args(["bench", "--device", "null"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("log_hist_msec"), "{err}");
    assert_eq!(
        std::fs::read(d.path().join("e_clat_hist.1.log")).unwrap(),
        b""
    );
}

/// A python3 that imports pandas and numpy (fiologparser_hist.py needs
/// them): the one on PATH, or the system's.
fn python_with_pandas() -> String {
    for python in ["python3", "/usr/bin/python3"] {
        let ok = Command::new(python)
            .args(["-c", "import pandas, numpy"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return python.to_string();
        }
    }
    panic!(
        "fiologparser_hist.py needs python3 with pandas and numpy: apt-get install \
         python3-pandas (scripts/test installs it)"
    );
}

#[test]
fn fiologparser_hist_reads_the_histogram_log() {
    let python = python_with_pandas();
    let d = Scratch::new("logs-hist-parser");
    bench(
        d.path(),
        "[h]\nrw=randrw\niodepth=4\nruntime=300ms\ntime_based\n\
         write_hist_log=h\nlog_hist_msec=50\n",
    );
    let log = d.path().join("h_clat_hist.1.log");
    let hist = read_hist(&log);
    assert!(!hist.is_empty());
    let parser = fio_tools().join("hist/fiologparser_hist.py");
    let run = |args: &[&str]| {
        let out = run_ok(
            Command::new(&python).arg(&parser).args(args).arg(&log),
            &format!("fiologparser_hist.py {args:?}"),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Unweighted, per direction: every line's samples land in one
    // interval, so the samples add up to the bins.
    let out = run(&["--noweight", "--directions=rw", "-i", "50"]);
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("end-time, dir, samples, min, avg, median, 90%, 95%, 99%, max")
    );
    let mut samples = [0u64; 2];
    for l in lines {
        let c: Vec<&str> = l.split(", ").collect();
        assert_eq!(c.len(), 10, "{l}");
        let d = if c[1] == "r" { 0 } else { 1 };
        samples[d] += c[2].parse::<u64>().unwrap();
        let min: f64 = c[3].parse().unwrap();
        let max: f64 = c[9].parse().unwrap();
        assert!(min > 0.0 && min <= max, "{l}");
    }
    for (d, s) in samples.iter().enumerate() {
        let bins: u64 = hist
            .iter()
            .filter(|h| usize::from(h.1) == d)
            .map(|h| h.3.iter().sum::<u64>())
            .sum();
        assert_eq!(*s, bins, "direction {d}: {out}");
    }
    // fio's default: weighted, mixed directions.
    let out = run(&[]);
    assert!(
        out.starts_with("end-time, samples, min, avg, median, 90%, 95%, 99%, max\n"),
        "{out}"
    );
    assert!(out.lines().count() >= 2, "{out}");
}
