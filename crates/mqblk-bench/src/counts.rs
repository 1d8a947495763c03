//! A job's counts per fio direction, as its thread publishes them once
//! per batch for the supervisor (the averaged logs). A leaf: the per-I/O
//! samples, the histogram log and the log files all count per direction
//! and build on it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use mqblk::stats::StatGroup;
use mqblk::Op;

/// fio's data directions in logs: 0 read, 1 write (and write-zeroes),
/// 2 trim (discard).
pub const DIRECTIONS: usize = 3;

/// fio's direction of an operation (flushes are never logged).
#[inline]
pub fn direction(op: Op) -> usize {
    StatGroup::of(op) as usize
}

/// One direction's latencies summed (for the averaged logs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    /// Completions summed.
    pub ios: u64,
    /// Their latencies (submission to completion), ns.
    pub lat_ns: u64,
    /// Their submission latencies, ns.
    pub slat_ns: u64,
    /// Their completion latencies, ns.
    pub clat_ns: u64,
}

/// A job's counts as its thread publishes them, per fio direction (read,
/// write, trim).
#[derive(Default)]
pub struct Counters {
    /// Completed I/Os.
    pub ios: [AtomicU64; DIRECTIONS],
    /// Bytes transferred.
    pub bytes: [AtomicU64; DIRECTIONS],
    /// I/Os whose latencies are summed below (for the latency logs).
    pub lat_ios: [AtomicU64; DIRECTIONS],
    /// Their lat summed, in nanoseconds.
    pub lat_ns: [AtomicU64; DIRECTIONS],
    /// Their slat summed.
    pub slat_ns: [AtomicU64; DIRECTIONS],
    /// Their clat summed.
    pub clat_ns: [AtomicU64; DIRECTIONS],
}

impl Counters {
    /// Publish the latency sums (the job thread, once per batch).
    #[inline]
    pub fn publish_latency(&self, sums: &[Sums; DIRECTIONS]) {
        for (d, s) in sums.iter().enumerate() {
            self.lat_ios[d].store(s.ios, Relaxed);
            self.lat_ns[d].store(s.lat_ns, Relaxed);
            self.slat_ns[d].store(s.slat_ns, Relaxed);
            self.clat_ns[d].store(s.clat_ns, Relaxed);
        }
    }

    /// Publish (the job thread, once per batch).
    #[inline]
    pub fn publish(&self, ios: [u64; DIRECTIONS], bytes: [u64; DIRECTIONS]) {
        for d in 0..DIRECTIONS {
            self.ios[d].store(ios[d], Relaxed);
            self.bytes[d].store(bytes[d], Relaxed);
        }
    }

    /// The published latency sums of direction `d`.
    pub fn sums(&self, d: usize) -> Sums {
        Sums {
            ios: self.lat_ios[d].load(Relaxed),
            lat_ns: self.lat_ns[d].load(Relaxed),
            slat_ns: self.slat_ns[d].load(Relaxed),
            clat_ns: self.clat_ns[d].load(Relaxed),
        }
    }
}
