//! Stats that existing tools read: the bench keeps `DIR/diskstats` in
//! `/proc/diskstats` format (so `iostat -x -f DIR -p ALL 1` shows mqblk
//! devices) and `DIR/mqblk.json` with the layer's own counters, which
//! `mqblk stat DIR` shows as a live iostat-like view (merges, splits and
//! bounce bytes included) or, for a finished run, as totals and averages.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use mqblk::stats::StatGroup;
use mqblk::DiskStats;
use serde_json::Value;

/// The writer of the directory this reads (the bench's, and `serve`'s).
pub use mqblk_bench::stats_dir::StatsDir;

/// One device's counters as read back from `mqblk.json`.
#[derive(Clone, Debug, Default)]
struct Row {
    name: String,
    s: DiskStats,
    /// Its mirror legs out of service, one line each.
    degraded: Vec<String>,
}

fn read_rows(dir: &Path) -> Result<(Vec<Row>, u64, bool)> {
    let path = dir.join("mqblk.json");
    let text = match mqblk::input::read_text_capped(
        &path,
        "stats file",
        mqblk::input::STATS_JSON_BYTES_MAX,
    ) {
        Err(e @ mqblk::input::InputError::Io { .. }) => {
            bail!("{e} (is a bench running with --stats-dir?)")
        }
        r => r?,
    };
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let u = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut rows = Vec::new();
    for d in v
        .get("devices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f: Vec<u64> = d
            .get("diskstats")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        if f.len() != 17 {
            bail!("{}: a device without 17 diskstats fields", path.display());
        }
        let mut s = DiskStats::default();
        let (r, w, dsc, fl) = (
            StatGroup::Read as usize,
            StatGroup::Write as usize,
            StatGroup::Discard as usize,
            StatGroup::Flush as usize,
        );
        (s.ios[r], s.merges[r], s.sectors[r], s.nsecs[r]) = (f[0], f[1], f[2], f[3] * 1_000_000);
        (s.ios[w], s.merges[w], s.sectors[w], s.nsecs[w]) = (f[4], f[5], f[6], f[7] * 1_000_000);
        s.in_flight = f[8];
        s.io_ticks_ms = f[9];
        (s.ios[dsc], s.merges[dsc], s.sectors[dsc], s.nsecs[dsc]) =
            (f[11], f[12], f[13], f[14] * 1_000_000);
        (s.ios[fl], s.nsecs[fl]) = (f[15], f[16] * 1_000_000);
        s.requests = u(d, "requests");
        s.bios = u(d, "bios");
        s.splits = u(d, "splits");
        s.bytes_copied = u(d, "bytes_copied");
        s.requeues = u(d, "requeues");
        s.timeouts = u(d, "timeouts");
        s.errors = u(d, "errors");
        let degraded = d
            .get("degraded")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|l| {
                l.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("a mirror leg is out")
                    .to_string()
            })
            .collect();
        rows.push(Row {
            name: d
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string(),
            s,
            degraded,
        });
    }
    Ok((
        rows,
        u(&v, "elapsed_ms"),
        v.get("done").and_then(Value::as_bool).unwrap_or(false),
    ))
}

fn header() -> String {
    format!(
        "{:<10} {:>11} {:>11} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>10} {:>8} {:>7}",
        "Device",
        "r/s",
        "w/s",
        "rMB/s",
        "wMB/s",
        "rrqm/s",
        "wrqm/s",
        "rq/bio",
        "splits/s",
        "bounceMB/s",
        "aqu-sz",
        "%util"
    )
}

fn line(name: &str, now: &DiskStats, before: &DiskStats, secs: f64) -> String {
    let d = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
    let r = StatGroup::Read as usize;
    let w = StatGroup::Write as usize;
    let bios = now.bios.saturating_sub(before.bios);
    let rq_per_bio = if bios == 0 {
        0.0
    } else {
        now.requests.saturating_sub(before.requests) as f64 / bios as f64
    };
    let busy_ms = now.io_ticks_ms.saturating_sub(before.io_ticks_ms) as f64;
    let queue_ms: u64 = now.nsecs.iter().sum::<u64>() / 1_000_000;
    let queue_ms_before: u64 = before.nsecs.iter().sum::<u64>() / 1_000_000;
    format!(
        "{:<10} {:>11.1} {:>11.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7.3} {:>9.1} {:>10.2} {:>8.2} {:>7.1}",
        name,
        d(now.ios[r], before.ios[r]),
        d(now.ios[w], before.ios[w]),
        d(now.sectors[r], before.sectors[r]) * 512.0 / 1e6,
        d(now.sectors[w], before.sectors[w]) * 512.0 / 1e6,
        d(now.merges[r], before.merges[r]),
        d(now.merges[w], before.merges[w]),
        rq_per_bio,
        d(now.splits, before.splits),
        d(now.bytes_copied, before.bytes_copied) / 1e6,
        queue_ms.saturating_sub(queue_ms_before) as f64 / (secs * 1000.0),
        (busy_ms / (secs * 10.0)).min(100.0),
    )
}

/// A device's mirror legs out of service, under its line.
fn print_degraded(r: &Row) {
    for d in &r.degraded {
        println!("{:<10} DEGRADED: {d}", "");
    }
}

/// `mqblk stat DIR [--interval S] [--count N]`.
pub fn stat_command(dir: &Path, interval: Option<Duration>, count: Option<u64>) -> Result<()> {
    let (rows, elapsed_ms, done) = read_rows(dir)?;
    let Some(interval) = interval else {
        // A finished (or running) run as a whole: averages since it began.
        let secs = (elapsed_ms as f64 / 1000.0).max(1e-3);
        println!(
            "mqblk stats in {} ({}, {:.1} s)",
            dir.display(),
            if done { "finished run" } else { "running" },
            secs
        );
        println!("{}", header());
        for r in &rows {
            println!("{}", line(&r.name, &r.s, &DiskStats::default(), secs));
            println!(
                "{:<10} requests={} bios={} merges={} splits={} bytes_copied={} requeues={} timeouts={} errors={}",
                "", r.s.requests, r.s.bios, r.s.merges.iter().sum::<u64>(), r.s.splits, r.s.bytes_copied,
                r.s.requeues, r.s.timeouts, r.s.errors
            );
            print_degraded(r);
        }
        return Ok(());
    };
    let mut before = rows;
    let mut before_ms = elapsed_ms;
    let mut shown = 0u64;
    while count.is_none_or(|c| shown < c) {
        std::thread::sleep(interval);
        let (now, now_ms, done) = read_rows(dir)?;
        let secs = (now_ms.saturating_sub(before_ms) as f64 / 1000.0).max(1e-3);
        println!("{}", header());
        for r in &now {
            let prev = before
                .iter()
                .find(|b| b.name == r.name)
                .map(|b| b.s)
                .unwrap_or_default();
            println!("{}", line(&r.name, &r.s, &prev, secs));
            print_degraded(r);
        }
        println!();
        shown += 1;
        if done {
            break;
        }
        before = now;
        before_ms = now_ms;
    }
    Ok(())
}
