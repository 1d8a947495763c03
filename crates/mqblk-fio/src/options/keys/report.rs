//! What a job writes out besides its figures: logs, histograms, statistics and
//! traces.

use crate::job::HIST_COARSENESS_MAX;

use super::entry::{key, log, on_off, put, Entry, LOG_PREFIX};

/// The keys of this group, in the order they are listed.
pub(super) const KEYS: &[Entry] = &[
    on_off(
        "group_reporting",
        "1 or 0 (1: a group's jobs are reported, and judged for steady state, together)",
        |o, v| put(&mut o.group_reporting, v.bool()),
    ),
    on_off(
        "slat_percentiles",
        "1 (report submission latency percentiles) or 0",
        |o, v| put(&mut o.slat_percentiles, v.bool()),
    ),
    key(
        "stats_dir",
        "a directory to write diskstats and mqblk.json into",
        |o, v| put(&mut o.stats_dir, v.non_empty()),
    ),
    key(
        "trace",
        "a directory to write blktrace files into (NAME.blktrace.N, for blkparse and btt)",
        |o, v| put(&mut o.trace, v.non_empty()),
    ),
    log("write_bw_log", LOG_PREFIX, |o, v| {
        put(&mut o.write_bw_log, v.log_prefix())
    }),
    log("write_iops_log", LOG_PREFIX, |o, v| {
        put(&mut o.write_iops_log, v.log_prefix())
    }),
    log("write_lat_log", LOG_PREFIX, |o, v| {
        put(&mut o.write_lat_log, v.log_prefix())
    }),
    key(
        "log_avg_msec",
        "the logs' window in milliseconds up to 3600000 (default 500), or 0 for a line per I/O",
        |o, v| put(&mut o.log_avg_msec, v.int(0..=3_600_000)),
    ),
    on_off(
        "log_offset",
        "1 (per-I/O log lines carry the I/O's offset) or 0",
        |o, v| put(&mut o.log_offset, v.bool()),
    ),
    on_off(
        "log_prio",
        "1 (log lines carry the I/O priority value) or 0 (1 only for real time)",
        |o, v| put(&mut o.log_prio, v.bool()),
    ),
    log(
        "write_hist_log",
        "a file name prefix (PREFIX_clat_hist.N.log)",
        |o, v| put(&mut o.write_hist_log, v.log_prefix()),
    ),
    key(
        "log_hist_msec",
        "the histogram log's window in milliseconds up to 3600000 (default 0, as fio: no lines)",
        |o, v| put(&mut o.log_hist_msec, v.int(0..=3_600_000)),
    ),
    key(
        "log_hist_coarseness",
        "0 to 6: each column of the histogram log sums 2^N of fio's 1856 latency bins",
        |o, v| put(&mut o.log_hist_coarseness, v.int(0..=HIST_COARSENESS_MAX)),
    ),
    on_off(
        "per_job_logs",
        "1 (a log file per job) or 0 (one file for all)",
        |o, v| put(&mut o.per_job_logs, v.bool()),
    ),
];
