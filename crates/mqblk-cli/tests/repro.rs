//! `mqblk repro`: every experiment runs at `--scale=0.01` and writes its
//! directory: a JSON file per run, a CSV with the expected columns, axes
//! that only grow within each series, and every plotted figure as a median
//! with its lowest and highest; a markdown table with the seed's figure
//! and its source in every row; and the plot as SVG and PNG, its caption
//! naming the seed's file. `repro all` writes one HTML page that headless
//! Chromium renders with every plot loaded. No assertion depends on timing
//! or throughput.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mqblk_test_support::require_tool;
use mqblk_test_support::Scratch as TempDir;

/// Every experiment `repro list` names, in the report's order.
const EXPERIMENTS: [&str; 10] = [
    "readv",
    "submits",
    "iorl",
    "many-disks",
    "mq-scaling",
    "plug",
    "part-cache",
    "descriptor",
    "copies",
    "mapping",
];

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .output()
        .expect("run the mqblk binary")
}

/// A table's cells, from a markdown table whose header line is `header`.
fn markdown_rows(md: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = md.lines().skip_while(|l| *l != header).skip(2);
    let mut rows = Vec::new();
    for l in lines.by_ref() {
        if !l.starts_with('|') {
            break;
        }
        rows.push(
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect(),
        );
    }
    rows
}

/// The seed table's header line.
const SEED_HEADER: &str = "| figure | the seed's | source | ours (this run) | comparison |";

/// Every row of `NAME.md`'s seed table has the seed's figure, its source
/// (a seed file and a place in it) and ours; no table says a figure is
/// missing or cites a document that is not in the repository.
fn assert_seed_table(name: &str, md: &str) {
    assert!(md.contains(SEED_HEADER), "{name}: {md}");
    let rows = markdown_rows(md, SEED_HEADER);
    assert!(!rows.is_empty(), "{name}: an empty seed table");
    for r in &rows {
        assert_eq!(r.len(), 5, "{name}: {r:?}");
        assert!(!r[1].is_empty(), "{name}: no seed figure in {r:?}");
        assert!(!r[3].is_empty(), "{name}: no figure of ours in {r:?}");
        let src = &r[2];
        assert!(
            src.starts_with("seeds/00") && src.contains(".txt, "),
            "{name}: the source names no seed file and place: {r:?}"
        );
    }
    for banned in ["not recorded", "DESIGN.md", "/work/", "/tmp/"] {
        assert!(!md.contains(banned), "{name}: says {banned:?}: {md}");
    }
    for part in ["**The question.**", "**The seed's answer.**", "**Ours.**"] {
        assert!(md.contains(part), "{name}: no {part}");
    }
}

/// Run `repro NAME --scale=0.01`; return the CSV's header and rows.
fn run(name: &str, out: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let o = mqblk(&[
        "repro",
        name,
        "--scale=0.01",
        &format!("--out={}", out.display()),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "repro {name} failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("## The seed beside ours"), "{stdout}");

    let csv = std::fs::read_to_string(out.join(format!("{name}.csv"))).unwrap();
    let mut lines = csv.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    assert!(!rows.is_empty(), "{name}: no rows");
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{name}: {r:?} against {header:?}");
    }
    // Every plotted figure is a median with its lowest and highest.
    let spread: Vec<&str> = header
        .iter()
        .filter_map(|h| h.strip_suffix("_min"))
        .collect();
    assert!(!spread.is_empty(), "{name}: no figure with its spread");
    for s in spread {
        assert_spread(&header, &rows, s);
    }
    let rounds = col(&header, "rounds");
    for r in &rows {
        assert!(r[rounds].parse::<usize>().unwrap() >= 3, "{name}: {r:?}");
    }

    let md = std::fs::read_to_string(out.join(format!("{name}.md"))).unwrap();
    assert_seed_table(name, &md);
    assert!(md.contains(&format!("({name}.png)")), "{md}");

    let png = std::fs::read(out.join(format!("{name}.png"))).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{name}.png is not a PNG"
    );
    let svg = std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
    assert!(svg.contains("<svg"), "{name}.svg");
    assert!(svg.contains(&format!("{name}:")), "{name}.svg has no title");
    assert!(
        svg.contains("Seed figures: seeds/00"),
        "{name}.svg: no caption naming the seed"
    );

    // One raw fio-shaped JSON per run.
    let points: Vec<PathBuf> = std::fs::read_dir(out.join("points"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let runs: usize = rows
        .iter()
        .map(|r| r[rounds].parse::<usize>().unwrap())
        .sum();
    // part-cache's baseline row is one point; every other row is too.
    assert_eq!(points.len(), runs, "{name}: a JSON per run");
    for p in &points {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        assert!(v["jobs"].as_array().is_some_and(|j| !j.is_empty()), "{p:?}");
        assert!(v["mqblk"]["requests"].is_u64(), "{p:?}");
    }
    (header, rows)
}

fn col(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

/// `NAME`, `NAME_min`, `NAME_max` are numbers with min <= median <= max.
fn assert_spread(header: &[String], rows: &[Vec<String>], name: &str) {
    let (m, lo, hi) = (
        col(header, name),
        col(header, &format!("{name}_min")),
        col(header, &format!("{name}_max")),
    );
    for r in rows {
        let v = |c: usize| {
            r[c].parse::<f64>()
                .unwrap_or_else(|_| panic!("{name}: {:?} in {r:?}", r[c]))
        };
        assert!(
            v(lo) <= v(m) + 1e-9 && v(m) <= v(hi) + 1e-9,
            "{name}: not min <= median <= max in {r:?}"
        );
    }
}

/// Within each run of rows with the same cells in `series`, `axis` grows.
fn assert_monotone(header: &[String], rows: &[Vec<String>], series: &[&str], axis: &str) {
    let s: Vec<usize> = series.iter().map(|n| col(header, n)).collect();
    let a = col(header, axis);
    let key = |r: &Vec<String>| s.iter().map(|&c| r[c].clone()).collect::<Vec<_>>();
    for w in rows.windows(2) {
        if key(&w[0]) == key(&w[1]) {
            let x0: f64 = w[0][a].parse().unwrap();
            let x1: f64 = w[1][a].parse().unwrap();
            assert!(
                x1 > x0,
                "{axis} goes {x0} then {x1} in series {:?}",
                key(&w[0])
            );
        }
    }
}

fn numbers(header: &[String], rows: &[Vec<String>], names: &[&str]) {
    for n in names {
        let c = col(header, n);
        for r in rows {
            let v: f64 = r[c].parse().unwrap_or_else(|_| panic!("{n}: {:?}", r[c]));
            assert!(v.is_finite() && v >= 0.0, "{n}: {v}");
        }
    }
}

#[test]
fn readv() {
    let d = TempDir::new("repro-readv");
    let (h, rows) = run("readv", &d.0);
    assert_monotone(&h, &rows, &["device"], "segments");
    numbers(
        &h,
        &rows,
        &["mib_per_s", "requests_per_bio", "cpu_ns_per_io"],
    );
    assert_eq!(rows.len(), 14, "ram and file, 7 segment counts");
    // A vectored bio is one request, on both devices.
    for r in &rows {
        assert_eq!(r[col(&h, "requests_per_bio")], "1.000", "{r:?}");
    }
    assert!(
        !d.0.join("readv-data.img").exists(),
        "the data file is removed"
    );
}

#[test]
fn submits() {
    let d = TempDir::new("repro-submits");
    let (h, rows) = run("submits", &d.0);
    assert_monotone(&h, &rows, &["way"], "max_sectors");
    numbers(&h, &rows, &["requests_per_128k", "bios_per_128k"]);
    assert_eq!(rows.len(), 18);
    let svg = std::fs::read_to_string(d.0.join("submits.svg")).unwrap();
    // The x axis says what it plots.
    assert!(svg.contains("max_sectors × 512 bytes (KiB)"), "x axis");
    assert!(!svg.contains(">max_sectors (KiB)<"), "the old x axis label");
    // The merged line lies on the one-bio line: its legend says so, so
    // no series is hidden.
    assert!(
        svg.contains("32 × 4 KiB bios (merging on): on the line of 1 × 128 KiB bio"),
        "the covered line's legend"
    );
}

#[test]
fn iorl() {
    let d = TempDir::new("repro-iorl");
    let (h, rows) = run("iorl", &d.0);
    assert_monotone(&h, &rows, &["queue_mode"], "devices");
    numbers(&h, &rows, &["iops", "iops_per_job", "cpu_ns_per_io"]);
    let modes: std::collections::BTreeSet<&str> = rows
        .iter()
        .map(|r| r[col(&h, "queue_mode")].as_str())
        .collect();
    assert_eq!(modes.len(), 3, "{modes:?}");
}

#[test]
fn many_disks() {
    let d = TempDir::new("repro-many-disks");
    let (h, rows) = run("many-disks", &d.0);
    assert_monotone(&h, &rows, &["queue_mode"], "devices");
    numbers(
        &h,
        &rows,
        &["mib_per_s", "over_global_lock", "cpu_ns_per_io"],
    );
    for r in &rows {
        let idle: f64 = r[col(&h, "cpu_idle_percent")].parse().unwrap();
        assert!(idle <= 100.0, "{r:?}");
    }
    assert_eq!(rows.len(), 18, "3 modes, 1 to 32 devices");
    let devices: Vec<u32> = rows
        .iter()
        .map(|r| r[col(&h, "devices")].parse().unwrap())
        .collect();
    assert_eq!(devices.iter().max(), Some(&32));
    let md = std::fs::read_to_string(d.0.join("many-disks.md")).unwrap();
    assert!(
        md.contains("133") && md.contains("235"),
        "Table 3's MB/s: {md}"
    );
}

#[test]
fn mq_scaling() {
    let d = TempDir::new("repro-mq-scaling");
    let (h, rows) = run("mq-scaling", &d.0);
    assert_monotone(&h, &rows, &["queue_mode"], "threads");
    numbers(
        &h,
        &rows,
        &["iops", "clat_p50_ns", "clat_p99_ns", "clat_p99_9_ns"],
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let most: usize = rows
        .iter()
        .map(|r| r[col(&h, "threads")].parse::<usize>().unwrap())
        .max()
        .unwrap();
    assert!(most > cores, "threads go past the {cores} cores: {most}");
}

#[test]
fn plug() {
    let d = TempDir::new("repro-plug");
    let (h, rows) = run("plug", &d.0);
    numbers(&h, &rows, &["iops", "allocs_per_io"]);
    for (p, c) in [("on", "on"), ("on", "off"), ("off", "on"), ("off", "off")] {
        assert!(
            rows.iter()
                .any(|r| r[col(&h, "plug")] == p && r[col(&h, "clock_reads")] == c),
            "plug={p} clock={c}"
        );
    }
}

#[test]
fn part_cache() {
    let d = TempDir::new("repro-part-cache");
    let (h, rows) = run("part-cache", &d.0);
    assert_monotone(&h, &rows, &["pattern", "partition_cache"], "partitions");
    numbers(&h, &rows, &["cpu_ns_per_io", "iops"]);
    // The baseline, then 4 to 128 partitions for each pattern and cache.
    assert_eq!(rows.len(), 1 + 2 * 2 * 4);
    let parts: std::collections::BTreeSet<u32> = rows
        .iter()
        .map(|r| r[col(&h, "partitions")].parse().unwrap())
        .collect();
    assert!(parts.contains(&4) && parts.contains(&128), "{parts:?}");
    for cache in ["on", "off"] {
        assert!(rows.iter().any(|r| r[col(&h, "partition_cache")] == cache));
    }
}

#[test]
fn descriptor() {
    let d = TempDir::new("repro-descriptor");
    let (h, rows) = run("descriptor", &d.0);
    assert_monotone(&h, &rows, &["descriptor_bytes"], "queue_depth");
    numbers(&h, &rows, &["heap_bytes", "descriptor_bytes"]);
    let md = std::fs::read_to_string(d.0.join("descriptor.md")).unwrap();
    assert!(md.contains("8792"), "the kiobuf's figure beside ours: {md}");
    // More tags hold more memory.
    let heap: Vec<f64> = rows
        .iter()
        .map(|r| r[col(&h, "heap_bytes")].parse().unwrap())
        .collect();
    assert!(heap.last() > heap.first(), "{heap:?}");
}

#[test]
fn copies() {
    let d = TempDir::new("repro-copies");
    let (h, rows) = run("copies", &d.0);
    assert_monotone(&h, &rows, &["way", "files"], "bs_kib");
    numbers(
        &h,
        &rows,
        &[
            "cpu_ns_per_kib",
            "mib_per_s",
            "bytes_read",
            "page_cache_copy_bytes",
            "layer_bounce_bytes",
        ],
    );
    // Through the page cache every byte read is copied once; the direct
    // path copies none.
    for r in &rows {
        let copied = &r[col(&h, "page_cache_copy_bytes")];
        if r[col(&h, "way")].contains("page cache") {
            assert_eq!(copied, &r[col(&h, "bytes_read")], "{r:?}");
        } else {
            assert_eq!(copied, "0", "{r:?}");
        }
    }
    for f in ["copies-disk1.img", "copies-disk2.img"] {
        assert!(!d.0.join(f).exists(), "{f} is removed");
    }
}

#[test]
fn mapping() {
    require_tool("strace");
    let d = TempDir::new("repro-mapping");
    let (h, rows) = run("mapping", &d.0);
    assert_monotone(&h, &rows, &["buffers"], "bs_kib");
    numbers(
        &h,
        &rows,
        &[
            "cpu_ns_per_io",
            "pages_pinned_per_io",
            "syscalls_per_io",
            "iops",
        ],
    );
    let ways: std::collections::BTreeSet<&str> = rows
        .iter()
        .map(|r| r[col(&h, "buffers")].as_str())
        .collect();
    assert_eq!(ways.len(), 2, "registered and pinned per I/O: {ways:?}");
    assert!(!d.0.join("mapping-data.img").exists());
}

/// `repro all` writes one page; headless Chromium renders it from the
/// file, with every plot loaded, and takes a screenshot.
#[test]
fn all_writes_one_page_that_chromium_renders() {
    require_tool("chromium");
    let d = TempDir::new("repro-all");
    let o = mqblk(&[
        "repro",
        "all",
        "--scale=0.05",
        &format!("--out={}", d.0.display()),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "repro all failed: {stderr}");
    let index = d.0.join("index.html");
    let html = std::fs::read_to_string(&index).unwrap();
    for name in EXPERIMENTS {
        assert!(
            html.contains(&format!("src=\"{name}/{name}.png\"")),
            "{name}: no plot linked"
        );
        assert!(d.0.join(name).join(format!("{name}.png")).is_file());
        let md = std::fs::read_to_string(d.0.join(name).join(format!("{name}.md"))).unwrap();
        assert_seed_table(name, &md);
    }
    // Nothing from the network, no path of this machine.
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(!html.contains(&d.0.display().to_string()));
    for part in [
        "The machine",
        "The question.",
        "The seed's answer.",
        "Ours.",
    ] {
        assert!(html.contains(part), "no {part:?}");
    }

    let url = format!("file://{}", index.display());
    let chromium = |args: &[&str]| {
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--virtual-time-budget=5000",
            ])
            .args(args)
            .arg(&url)
            .output()
            .expect("run chromium")
    };
    // The page's script counts the plots that loaded once the page has.
    let dom = chromium(&["--dump-dom"]);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    let n = EXPERIMENTS.len();
    assert!(
        dom.contains(&format!("data-images-loaded=\"{n}/{n}\"")),
        "not every plot loaded: {}",
        dom.lines()
            .filter(|l| l.contains("data-images-loaded") || l.contains("missing"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let shot = d.0.join("screenshot.png");
    let o = chromium(&[
        "--window-size=1100,3000",
        &format!("--screenshot={}", shot.display()),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (1100, 3000));
}

#[test]
fn unknown_experiments_are_named() {
    let o = mqblk(&["repro", "readvv"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("readv, submits, iorl"), "{err}");
    assert!(err.contains("copies, mapping, or all"), "{err}");
    let o = mqblk(&["repro", "list"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for name in EXPERIMENTS.iter().chain(&["all"]) {
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{out}"
        );
    }
}
