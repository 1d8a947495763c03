//! A job's figures as the report takes them, and the I/O that stopped it.

use crate::result::JobResult;
use crate::sample::{Recorded, Recorder};
use crate::verify::Hook;
use mqblk::{Device, Op};
use mqblk_fio::job::JobSpec;

use super::shared::*;

/// The I/O a job saw fail first.
pub(super) struct FailedIo {
    pub(super) op: Op,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) status: mqblk::Status,
}

impl FailedIo {
    pub(super) fn of(c: &mqblk::Completion<'_>) -> FailedIo {
        FailedIo {
            op: c.bio().op(),
            offset: c.bio().offset_bytes(),
            len: c.bio().len_bytes(),
            status: c.status(),
        }
    }

    /// As fio says it: the direction, the length, the offset, the error.
    pub(super) fn describe(&self, device: &str) -> String {
        let what = match self.op {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "trim",
            Op::WriteZeroes => "write-zeroes",
        };
        if self.op == Op::Flush {
            format!("{what} on {device} failed: {}", self.status)
        } else {
            format!(
                "{what} of {} bytes at offset {} on {device} failed: {}",
                self.len, self.offset, self.status
            )
        }
    }
}

/// A job's figures, as the report takes them.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish_job<V: Hook>(
    base: usize,
    index: usize,
    job: &JobSpec,
    dev: &Device,
    ctx: &mqblk::Context,
    hook: &mut V,
    m: Measured,
    rec: Option<Recorder>,
    latency_depth: Option<u32>,
) -> (JobResult, mqblk::DiskStats, Recorded) {
    let mut recorded = rec.map(Recorder::finish).unwrap_or_default();
    // The job's own stamps, when it took them (lat = slat + clat for each
    // I/O, as fio's); otherwise the layer's histograms, which start when a
    // request has a tag and read one clock a batch.
    let stamped = recorded.stamped.is_some();
    let (clat, slat, lat) = match recorded.stamped.take() {
        Some(s) => (s.clat, Some(s.slat), Some(s.lat)),
        None => (ctx.histograms().clone(), None, None),
    };
    (
        JobResult {
            name: job.name.clone(),
            index: base + index,
            group: 0,
            device: dev.name().to_string(),
            read: m.read,
            write: m.write,
            trim: m.trim,
            clat_valid: job.iostats || stamped,
            clat,
            slat,
            lat,
            runtime_ns: m.runtime_ns,
            usr_ns: m.usr_ns,
            sys_ns: m.sys_ns,
            first_error: m.first_error,
            unfinished: false,
            stopped_at: m.stopped_at,
            verify: hook.result(),
            latency_depth,
            steadystate: None,
        },
        m.stats,
        recorded,
    )
}
