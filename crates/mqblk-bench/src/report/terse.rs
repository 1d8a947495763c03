//! fio's terse output, version 3 (`--output-format=terse`): one line per
//! report entry, 121 fields separated by `;`, in the order of fio's HOWTO
//! ("Terse output"):
//!
//! ```text
//! 3; fio version; jobname; groupid; error                          5
//! READ, then WRITE: KiB; KiB/s; IOPS; runtime ms                   4 each
//!   slat min; max; mean; stdev (us), clat the same                 8
//!   20 clat percentiles (`P%=us`, `0%=0` past fio's 17)           20
//!   lat min; max; mean; stdev (us)                                 4
//!   bw min; max; agg%; mean; stdev (KiB/s)                         5
//! cpu user%; sys%; context switches; major; minor faults           5
//! I/O depths <=1, 2, 4, 8, 16, 32, >=64 (%)                        7
//! latencies <=2, 4, 10, 20, 50, 100, 250, 500, 750, 1000 us (%)   10
//! latencies <=2, 4, 10, 20, 50, 100, 250, 500, 750, 1000,
//!   2000, >2000 ms (%)                                            12
//! ```
//!
//! mqblk keeps no per-interval bandwidth samples (fio's bw min, max,
//! mean, stdev): they are 0, as fio writes them when it has none. The
//! I/O depth is the job's `iodepth=` (the engine keeps its queue full),
//! and the latency distribution is of every completion's clat. fio adds a
//! disk's utilisation when it has one; mqblk's devices are not the
//! kernel's disks, so there is none.

use std::fmt::Write as _;

use mqblk::stats::StatGroup;

use crate::result::{DirResult, JobResult, RunResult};
use mqblk_fio::job::JobSpec;

use super::figures::*;
use super::group::reported;

/// Fields in a line of terse version 3 without a disk.
const TERSE_V3_FIELDS: usize = 121;

/// The report as fio's terse version 3 lines.
pub fn terse(specs: &[JobSpec], run: &RunResult) -> String {
    let mut out = String::new();
    for entry in reported(specs, run) {
        let job = &entry.job;
        let line_start = out.len();
        let _ = write!(
            out,
            "3;{};{};{};{}",
            version(),
            job.name,
            job.group,
            job_error(job)
        );
        for (dir, group) in [(&job.read, StatGroup::Read), (&job.write, StatGroup::Write)] {
            write_dir(&mut out, dir, DirLat::of(specs, job, group), job.runtime_ns);
        }
        let _ = write!(
            out,
            ";{:.6}%;{:.6}%;0;0;0",
            percent_of(job.usr_ns, entry.cpu_runtime_ns),
            percent_of(job.sys_ns, entry.cpu_runtime_ns),
        );
        let depth = spec_of(specs, job).map_or(1, |s| s.iodepth);
        let slot = match depth {
            0..=1 => 0,
            2..=3 => 1,
            4..=7 => 2,
            8..=15 => 3,
            16..=31 => 4,
            32..=63 => 5,
            _ => 6,
        };
        for i in 0..7 {
            let _ = write!(out, ";{:.1}%", if i == slot { 100.0 } else { 0.0 });
        }
        for share in latency_shares(job) {
            let _ = write!(out, ";{share:.2}%");
        }
        // A name with a `;` in it breaks the line's fields, as in fio.
        debug_assert!(
            job.name.contains(';') || out[line_start..].matches(';').count() + 1 == TERSE_V3_FIELDS
        );
        out.push('\n');
    }
    out
}

/// One direction: I/O, bandwidth, IOPS and runtime, then the latencies.
fn write_dir(out: &mut String, d: &DirResult, lats: DirLat, runtime_ns: u64) {
    let runtime_ms = if d.ios == 0 { 0 } else { msec(runtime_ns) };
    let (bw_kib, iops) = match runtime_ms {
        0 => (0, 0),
        ms => ((1000 * d.bytes / ms) / 1024, 1000 * d.ios / ms),
    };
    let _ = write!(out, ";{};{bw_kib};{iops};{runtime_ms}", d.bytes >> 10);
    let clat = lats.clat.filter(|c| c.n > 0);
    let summary = |out: &mut String, l: Option<&Lat>| {
        let _ = match l {
            Some(l) => write!(
                out,
                ";{};{};{:.6};{:.6}",
                l.min / 1000,
                l.max / 1000,
                l.mean / 1000.0,
                l.stdev / 1000.0
            ),
            None => write!(out, ";0;0;{:.6};{:.6}", 0.0, 0.0),
        };
    };
    summary(out, lats.slat.as_ref().filter(|s| s.n > 0));
    summary(out, clat.as_ref());
    for i in 0..20 {
        match (&clat, PERCENTILES.get(i)) {
            (Some(c), Some(p)) => {
                let _ = write!(out, ";{p:.6}%={}", c.percentiles[i] / 1000);
            }
            _ => out.push_str(";0%=0"),
        }
    }
    // Total latency: measured with slat, else clat (no submission time
    // is known).
    let total = lats.lat.filter(|t| t.n > 0);
    summary(out, total.as_ref().or(clat.as_ref()));
    let _ = write!(out, ";0;0;{:.6}%;{:.6};{:.6}", 0.0, 0.0, 0.0);
}

/// The share of completions in each of fio's latency ranges: the 10
/// microsecond ones, then the 12 millisecond ones (percent).
fn latency_shares(job: &JobResult) -> [f64; 22] {
    const US: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
    const MS: [u64; 11] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000, 2000];
    let mut shares = [0.0; 22];
    if !job.clat_valid {
        return shares;
    }
    let groups = [StatGroup::Read, StatGroup::Write, StatGroup::Discard];
    let hists: Vec<_> = groups.iter().map(|&g| job.clat.group(g)).collect();
    let total: u64 = hists.iter().map(|h| h.len()).sum();
    if total == 0 {
        return shares;
    }
    // Upper bounds in ns, each range (previous bound, bound].
    let bounds = US
        .iter()
        .map(|us| us * 1_000)
        .chain(MS.iter().map(|ms| ms * 1_000_000))
        .chain(std::iter::once(u64::MAX));
    let mut low = 0u64;
    for (share, high) in shares.iter_mut().zip(bounds) {
        let n: u64 = hists
            .iter()
            .filter(|h| !h.is_empty())
            .map(|h| {
                let below = |v: u64| if v == 0 { 0 } else { h.count_between(0, v) };
                below(high.min(h.max())) - below(low.min(h.max()))
            })
            .sum();
        *share = n as f64 * 100.0 / total as f64;
        low = high;
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_the_121_fields_of_version_3() {
        let spec = JobSpec {
            iodepth: 8,
            ..JobSpec::default()
        };
        let mut job = JobResult::unfinished("t", 0, "ram0", Default::default(), 0);
        job.unfinished = false;
        job.first_error = None;
        job.read = DirResult {
            ios: 4,
            bytes: 4 * 4096,
            errors: 0,
        };
        for ns in [1_500, 3_000, 3_000_000, 5_000_000_000] {
            job.clat.record(StatGroup::Read, ns);
        }
        job.clat_valid = true;
        job.runtime_ns = 2_000_000_000;
        let run = RunResult {
            jobs: vec![job],
            layer: Default::default(),
        };
        let text = terse(&[spec], &run);
        let fields: Vec<&str> = text.trim_end().split(';').collect();
        assert_eq!(fields.len(), TERSE_V3_FIELDS, "{text}");
        assert_eq!(fields[..5], ["3", &version(), "t", "0", "0"]);
        // read: 16 KiB, 8 KiB/s, 2 IOPS, 2000 ms.
        assert_eq!(fields[5..9], ["16", "8", "2", "2000"]);
        assert!(fields[17].starts_with("1.000000%="), "{}", fields[17]);
        assert_eq!(fields[36], "0%=0");
        // write: nothing.
        assert_eq!(fields[46..50], ["0", "0", "0", "0"]);
        // iodepth=8: the 8 slot.
        assert_eq!(
            fields[92..99].join(";"),
            "0.0%;0.0%;0.0%;100.0%;0.0%;0.0%;0.0%"
        );
        // 1.5 us, 3 us, 3 ms, 5 s: <=2us, <=4us, <=4ms, >2000ms.
        assert_eq!(fields[99], "25.00%");
        assert_eq!(fields[100], "25.00%");
        assert_eq!(fields[110], "25.00%");
        assert_eq!(fields[120], "25.00%");
    }
}
