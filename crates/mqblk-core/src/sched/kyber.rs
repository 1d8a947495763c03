//! kyber (Linux `block/kyber-iosched.c`): latency targets per scheduling
//! domain (reads, writes, discards, other), met by shrinking and growing
//! how many requests of each domain the device may hold.
//!
//! Every request's latency, from insertion to completion, goes into its
//! domain's log2 histogram. Once a window (100 ms) has passed, the windows
//! are judged: a domain whose 99th percentile is over its target makes
//! every other domain's depth shrink by a quarter (its own requests then
//! wait behind fewer of theirs); when every domain met its target with
//! room to spare, depths grow back by an eighth toward their maxima.
//! Dispatch takes the domains in turn, each while it holds fewer requests
//! in the device than its depth. This hardware queue's instance is its
//! own: nothing here is shared with another queue.

use std::collections::VecDeque;
use std::sync::Arc;

use super::elevator::{Elevator, ElevatorType};
use crate::bio::Op;
use crate::clock;
use crate::request::{Request, RqRef};

/// kyber's tunables (Linux's sysfs names, in nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KyberParams {
    /// The reads' latency target (Linux: 2 ms).
    pub read_lat_nsec: u64,
    /// The writes' latency target (Linux: 10 ms).
    pub write_lat_nsec: u64,
}

impl Default for KyberParams {
    fn default() -> Self {
        KyberParams {
            read_lat_nsec: 2_000_000,
            write_lat_nsec: 10_000_000,
        }
    }
}

const READ: usize = 0;
const WRITE: usize = 1;
const DISCARD: usize = 2;
const OTHER: usize = 3;
const DOMAINS: usize = 4;

/// Linux's `kyber_depth`: each domain's most requests in the device.
const MAX_DEPTH: [u32; DOMAINS] = [256, 128, 64, 16];

/// Length of a judging window.
const WINDOW_NS: u64 = 100_000_000;

/// Latency buckets: bucket i holds latencies below 2^(i+10) ns.
const BUCKETS: usize = 32;

fn domain(op: Op) -> usize {
    match op {
        Op::Read => READ,
        Op::Write | Op::WriteZeroes => WRITE,
        Op::Discard => DISCARD,
        Op::Flush => OTHER,
    }
}

/// The domains' depths and their judging, apart from requests (tests
/// drive it with made-up latencies and clock).
#[derive(Debug, Clone)]
pub(crate) struct KyberDepths {
    targets: [u64; DOMAINS],
    max: [u32; DOMAINS],
    pub(crate) depth: [u32; DOMAINS],
    hist: [[u32; BUCKETS]; DOMAINS],
    window_start: u64,
}

fn bucket(ns: u64) -> usize {
    ((64 - (ns >> 10).leading_zeros()) as usize).min(BUCKETS - 1)
}

/// The upper bound of bucket `b`.
fn bucket_ns(b: usize) -> u64 {
    1u64 << (b + 10)
}

impl KyberDepths {
    pub(crate) fn new(p: KyberParams, queue_depth: u32) -> KyberDepths {
        let max = MAX_DEPTH.map(|m| m.min(queue_depth).max(1));
        KyberDepths {
            targets: [
                p.read_lat_nsec,
                p.write_lat_nsec,
                5_000_000_000,
                5_000_000_000,
            ],
            max,
            depth: max,
            hist: [[0; BUCKETS]; DOMAINS],
            window_start: 0,
        }
    }

    /// The `pct` percentile's bucket bound of domain `d` (None: no data).
    fn percentile(&self, d: usize, pct: u64) -> Option<u64> {
        let h = &self.hist[d];
        let total: u64 = h.iter().map(|&c| u64::from(c)).sum();
        if total == 0 {
            return None;
        }
        let want = (total * pct).div_ceil(100);
        let mut seen = 0;
        for (b, &c) in h.iter().enumerate() {
            seen += u64::from(c);
            if seen >= want {
                return Some(bucket_ns(b));
            }
        }
        Some(bucket_ns(BUCKETS - 1))
    }

    /// A request of domain `d` took `lat_ns`; judge the window if it ended.
    pub(crate) fn record(&mut self, d: usize, lat_ns: u64, now_ns: u64) {
        self.hist[d][bucket(lat_ns)] += 1;
        if self.window_start == 0 {
            self.window_start = now_ns;
        }
        if now_ns.saturating_sub(self.window_start) >= WINDOW_NS {
            self.judge();
            self.window_start = now_ns;
        }
    }

    fn judge(&mut self) {
        let p99: [Option<u64>; DOMAINS] = std::array::from_fn(|d| self.percentile(d, 99));
        // A bucket bound is up to twice the latency in it: "over" means the
        // bucket starts past the target.
        let bad: [bool; DOMAINS] =
            std::array::from_fn(|d| p99[d].is_some_and(|v| v / 2 > self.targets[d]));
        if bad.iter().any(|&b| b) {
            for (depth, bad) in self.depth.iter_mut().zip(bad) {
                if !bad {
                    *depth = depth.saturating_sub((*depth / 4).max(1)).max(1);
                }
            }
        } else {
            let roomy = (0..DOMAINS).all(|d| p99[d].is_none_or(|v| v <= self.targets[d]));
            if roomy {
                for (depth, max) in self.depth.iter_mut().zip(self.max) {
                    *depth = (*depth + *depth / 8 + 1).min(max);
                }
            }
        }
        self.hist = [[0; BUCKETS]; DOMAINS];
    }
}

struct Kyber {
    d: KyberDepths,
    queues: [VecDeque<RqRef>; DOMAINS],
    in_flight: [u32; DOMAINS],
    /// Insertion time per tag.
    start_ns: Vec<u64>,
    next_domain: usize,
    queued: u32,
}

impl Elevator for Kyber {
    fn insert(&mut self, rq: RqRef) {
        let t = rq.tag() as usize;
        if t >= self.start_ns.len() {
            self.start_ns.resize(t + 1, 0);
        }
        self.start_ns[t] = clock::now_ns();
        self.queues[domain(rq.op())].push_back(rq);
        self.queued += 1;
    }

    fn dispatch(&mut self) -> Option<RqRef> {
        for i in 0..DOMAINS {
            let d = (self.next_domain + i) % DOMAINS;
            if self.in_flight[d] < self.d.depth[d] {
                if let Some(rq) = self.queues[d].pop_front() {
                    self.in_flight[d] += 1;
                    self.queued -= 1;
                    self.next_domain = (d + 1) % DOMAINS;
                    return Some(rq);
                }
            }
        }
        None
    }

    fn has_work(&self) -> bool {
        self.queued > 0
    }

    fn requeue(&mut self, rq: RqRef) {
        let d = domain(rq.op());
        self.in_flight[d] = self.in_flight[d].saturating_sub(1);
        self.queues[d].push_front(rq);
        self.queued += 1;
    }

    fn completed(&mut self, rq: &Request) {
        let d = domain(rq.op());
        self.in_flight[d] = self.in_flight[d].saturating_sub(1);
        let now = clock::now_ns();
        let start = self.start_ns.get(rq.tag() as usize).copied().unwrap_or(now);
        self.d.record(d, now.saturating_sub(start), now);
    }
}

/// The kyber scheduler type (`scheduler=kyber`).
#[derive(Debug, Default)]
pub struct KyberType {
    /// Its tunables.
    pub params: KyberParams,
}

impl KyberType {
    /// With these tunables.
    pub fn new(params: KyberParams) -> Arc<KyberType> {
        Arc::new(KyberType { params })
    }
}

impl ElevatorType for KyberType {
    fn name(&self) -> &str {
        "kyber"
    }

    fn async_depth(&self, nr_requests: u32) -> Option<u32> {
        Some((3 * nr_requests / 4).max(1))
    }

    fn init(&self, _hwq: u16, nr_requests: u32) -> Box<dyn Elevator> {
        // The device's depth is half the scheduler tags.
        let depth = (nr_requests / 2).max(1);
        Box::new(Kyber {
            d: KyberDepths::new(self.params, depth),
            queues: Default::default(),
            in_flight: [0; DOMAINS],
            start_ns: vec![0; nr_requests as usize * 2],
            next_domain: 0,
            queued: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn slow_reads_shrink_the_writes_and_good_windows_grow_them_back() {
        let mut k = KyberDepths::new(
            KyberParams {
                read_lat_nsec: MS,
                ..Default::default()
            },
            64,
        );
        assert_eq!(k.depth[WRITE], 64);
        let mut now = 1_000 * MS;
        // Reads at 5 ms against a 1 ms target: each window cuts writes.
        for _ in 0..5 {
            for _ in 0..100 {
                k.record(READ, 5 * MS, now);
                k.record(WRITE, 3 * MS, now);
            }
            now += WINDOW_NS;
            k.record(WRITE, MS, now);
        }
        let shrunk = k.depth[WRITE];
        assert!(shrunk < 64 / 2, "writes at {shrunk}");
        assert_eq!(k.depth[READ], 64, "the slow domain keeps its depth");
        // Reads well within target: writes grow back, up to the maximum.
        for _ in 0..60 {
            for _ in 0..100 {
                k.record(READ, 100_000, now);
                k.record(WRITE, 200_000, now);
            }
            now += WINDOW_NS;
            k.record(WRITE, 200_000, now);
        }
        assert_eq!(k.depth[WRITE], 64);
    }

    #[test]
    fn a_depth_never_falls_below_one() {
        let mut k = KyberDepths::new(KyberParams::default(), 8);
        let mut now = MS;
        for _ in 0..100 {
            k.record(READ, 1_000 * MS, now);
            k.record(WRITE, MS, now);
            now += WINDOW_NS;
        }
        assert!(k.depth.iter().all(|&d| d >= 1));
        assert_eq!(k.depth[WRITE], 1);
    }

    #[test]
    fn percentiles_come_from_log2_buckets() {
        let mut k = KyberDepths::new(KyberParams::default(), 8);
        for i in 0..100u64 {
            k.hist[READ][bucket(if i < 98 { 10_000 } else { 10 * MS })] += 1;
        }
        assert_eq!(k.percentile(READ, 50), Some(16_384));
        assert!(k.percentile(READ, 99).unwrap() >= 10 * MS);
        assert_eq!(k.percentile(WRITE, 99), None);
    }
}
