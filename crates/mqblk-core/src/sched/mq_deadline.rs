//! mq-deadline (Linux `block/mq-deadline.c`): reads and writes each kept
//! twice, in arrival order with a deadline and in sector order, for every
//! priority class.
//!
//! Dispatch serves the highest class that has work (after any request of
//! a lower class that has waited longer than `prio_aging_expire`). Within
//! a class it continues the current sector-sorted batch for up to
//! `fifo_batch` requests; then it picks a direction, reads first unless
//! writes have been passed over `writes_starved` times, and starts a new
//! batch at the oldest request if that one is past its deadline, or else
//! at the next request in sector order.
//!
//! Nothing here allocates once the tables have grown to the scheduler
//! depth: requests are indexed by tag, the FIFOs are lists linked through
//! that index, and the sorted lists are vectors sized for the depth.

use std::sync::Arc;

use super::elevator::{Elevator, ElevatorType};
use crate::clock;
use crate::ioprio::IoPrioClass;
use crate::request::RqRef;

/// mq-deadline's tunables (Linux's sysfs names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadlineParams {
    /// A read's deadline, in ms (Linux: 500).
    pub read_expire_ms: u64,
    /// A write's deadline, in ms (Linux: 5000).
    pub write_expire_ms: u64,
    /// Requests in one sector-sorted batch (Linux: 16).
    pub fifo_batch: u32,
    /// Times reads may be chosen over waiting writes (Linux: 2).
    pub writes_starved: u32,
    /// A lower class's request that has waited this long (ms) goes ahead
    /// of higher classes (Linux: 10 000).
    pub prio_aging_expire_ms: u64,
    /// Scheduler tags writes may hold on a hardware queue (Linux's
    /// `async_depth`); 0: three quarters of them, Linux's default. Set
    /// below the device's queue depth, it keeps driver slots for reads.
    pub async_depth: u32,
}

impl Default for DeadlineParams {
    fn default() -> Self {
        DeadlineParams {
            read_expire_ms: 500,
            write_expire_ms: 5000,
            fifo_batch: 16,
            writes_starved: 2,
            prio_aging_expire_ms: 10_000,
            async_depth: 0,
        }
    }
}

/// What the deadline logic needs of a request.
pub(crate) trait DeadlineRq {
    /// Unique among the requests waiting (the tag).
    fn key(&self) -> u32;
    fn sector(&self) -> u64;
    fn end_sector(&self) -> u64;
    fn is_write(&self) -> bool;
    fn class(&self) -> IoPrioClass;
}

impl DeadlineRq for RqRef {
    fn key(&self) -> u32 {
        self.tag()
    }
    fn sector(&self) -> u64 {
        self.sector
    }
    fn end_sector(&self) -> u64 {
        self.sector + (self.size_bytes >> 9)
    }
    fn is_write(&self) -> bool {
        self.op.is_write()
    }
    fn class(&self) -> IoPrioClass {
        self.ioprio.class
    }
}

const NIL: u32 = u32::MAX;

struct Entry<T> {
    rq: T,
    inserted_ns: u64,
    expire_ns: u64,
    prev: u32,
    next: u32,
}

/// One direction of one class.
#[derive(Default)]
struct DirQueue {
    fifo_head: u32,
    fifo_tail: u32,
    /// (sector, key), sorted.
    sorted: Vec<(u64, u32)>,
}

impl DirQueue {
    fn new() -> DirQueue {
        DirQueue {
            fifo_head: NIL,
            fifo_tail: NIL,
            sorted: Vec::new(),
        }
    }
}

/// The deadline scheduler's state, over any request type (tests use a
/// plain one, with their own clock).
pub(crate) struct Deadline<T> {
    p: DeadlineParams,
    slots: Vec<Option<Entry<T>>>,
    /// [class][dir]
    q: [[DirQueue; 2]; 3],
    /// Where the last dispatch in each direction ended.
    latest_pos: [u64; 2],
    last_dir: usize,
    batching: u32,
    starved: u32,
    queued: u32,
}

impl<T: DeadlineRq> Deadline<T> {
    pub(crate) fn new(p: DeadlineParams, depth: usize) -> Deadline<T> {
        let mk = || [DirQueue::new(), DirQueue::new()];
        let mut q = [mk(), mk(), mk()];
        for c in q.iter_mut() {
            for d in c.iter_mut() {
                d.sorted.reserve(depth);
            }
        }
        let mut slots = Vec::with_capacity(depth);
        slots.resize_with(depth, || None);
        Deadline {
            p,
            slots,
            q,
            latest_pos: [0; 2],
            last_dir: 0,
            // No batch is running yet.
            batching: p.fifo_batch,
            starved: 0,
            queued: 0,
        }
    }

    pub(crate) fn len(&self) -> u32 {
        self.queued
    }

    pub(crate) fn insert(&mut self, rq: T, now_ns: u64) {
        let key = rq.key();
        let dir = rq.is_write() as usize;
        let c = rq.class() as usize;
        let expire_ms = if dir == 1 {
            self.p.write_expire_ms
        } else {
            self.p.read_expire_ms
        };
        let k = key as usize;
        if k >= self.slots.len() {
            self.slots.resize_with(k + 1, || None);
        }
        let dq = &mut self.q[c][dir];
        let pos = dq
            .sorted
            .partition_point(|&(s, kk)| (s, kk) < (rq.sector(), key));
        dq.sorted.insert(pos, (rq.sector(), key));
        let tail = dq.fifo_tail;
        debug_assert!(self.slots[k].is_none(), "tag {key} queued twice");
        self.slots[k] = Some(Entry {
            rq,
            inserted_ns: now_ns,
            expire_ns: now_ns.saturating_add(expire_ms.saturating_mul(1_000_000)),
            prev: tail,
            next: NIL,
        });
        if tail == NIL {
            dq.fifo_head = key;
        } else if let Some(e) = self.slots[tail as usize].as_mut() {
            e.next = key;
        }
        dq.fifo_tail = key;
        self.queued += 1;
    }

    /// Take `key` out of every list.
    fn remove(&mut self, key: u32) -> T {
        let e = self.slots[key as usize].take().expect("queued request");
        let dir = e.rq.is_write() as usize;
        let c = e.rq.class() as usize;
        let sorted = &mut self.q[c][dir].sorted;
        let sector = e.rq.sector();
        let pos = sorted.partition_point(|&x| x < (sector, key));
        debug_assert_eq!(sorted.get(pos), Some(&(sector, key)));
        sorted.remove(pos);
        if e.prev == NIL {
            self.q[c][dir].fifo_head = e.next;
        } else if let Some(p) = self.slots[e.prev as usize].as_mut() {
            p.next = e.next;
        }
        if e.next == NIL {
            self.q[c][dir].fifo_tail = e.prev;
        } else if let Some(n) = self.slots[e.next as usize].as_mut() {
            n.prev = e.prev;
        }
        self.queued -= 1;
        e.rq
    }

    fn fifo_head(&self, c: usize, dir: usize) -> Option<&Entry<T>> {
        let h = self.q[c][dir].fifo_head;
        (h != NIL).then(|| self.slots[h as usize].as_ref().expect("fifo entry"))
    }

    /// The first request at or after the last dispatch's end, in sector order.
    fn next_from_pos(&self, c: usize, dir: usize) -> Option<u32> {
        let s = &self.q[c][dir].sorted;
        let i = s.partition_point(|&(sec, _)| sec < self.latest_pos[dir]);
        s.get(i).map(|&(_, k)| k)
    }

    pub(crate) fn dispatch(&mut self, now_ns: u64) -> Option<T> {
        if self.queued == 0 {
            return None;
        }
        // A lower class's request that waited too long goes first.
        let aging = self.p.prio_aging_expire_ms.saturating_mul(1_000_000);
        let higher_waiting =
            |d: &Self, c: usize| (0..c).any(|h| d.q[h].iter().any(|dq| dq.fifo_head != NIL));
        for c in 1..3 {
            if !higher_waiting(self, c) {
                continue;
            }
            for dir in 0..2 {
                if let Some(e) = self.fifo_head(c, dir) {
                    if now_ns.saturating_sub(e.inserted_ns) >= aging {
                        let key = e.rq.key();
                        return Some(self.take(key, dir));
                    }
                }
            }
        }
        for c in 0..3 {
            if let Some(rq) = self.dispatch_class(c, now_ns) {
                return Some(rq);
            }
        }
        None
    }

    fn take(&mut self, key: u32, dir: usize) -> T {
        let rq = self.remove(key);
        self.latest_pos[dir] = rq.end_sector();
        self.last_dir = dir;
        self.batching += 1;
        rq
    }

    fn dispatch_class(&mut self, c: usize, now_ns: u64) -> Option<T> {
        let reads = !self.q[c][0].sorted.is_empty();
        let writes = !self.q[c][1].sorted.is_empty();
        if !reads && !writes {
            return None;
        }
        // Continue the batch, in sector order.
        if self.batching < self.p.fifo_batch {
            if let Some(k) = self.next_from_pos(c, self.last_dir) {
                let dir = self.last_dir;
                return Some(self.take(k, dir));
            }
        }
        let dir = if reads {
            if writes && self.starved >= self.p.writes_starved {
                self.starved = 0;
                1
            } else {
                if writes {
                    self.starved += 1;
                }
                0
            }
        } else {
            self.starved = 0;
            1
        };
        let head = self.fifo_head(c, dir).expect("direction has work");
        let expired = now_ns >= head.expire_ns;
        let head_key = head.rq.key();
        let key = match self.next_from_pos(c, dir) {
            Some(k) if !expired => k,
            _ => head_key,
        };
        self.batching = 0;
        Some(self.take(key, dir))
    }
}

/// The mq-deadline elevator of one hardware queue.
struct MqDeadline {
    d: Deadline<RqRef>,
}

impl Elevator for MqDeadline {
    fn insert(&mut self, rq: RqRef) {
        self.d.insert(rq, clock::now_ns());
    }

    fn dispatch(&mut self) -> Option<RqRef> {
        self.d.dispatch(clock::now_ns())
    }

    fn has_work(&self) -> bool {
        self.d.len() > 0
    }
}

/// The mq-deadline scheduler type (`scheduler=mq-deadline`).
#[derive(Debug, Default)]
pub struct MqDeadlineType {
    /// Its tunables.
    pub params: DeadlineParams,
}

impl MqDeadlineType {
    /// With these tunables.
    pub fn new(params: DeadlineParams) -> Arc<MqDeadlineType> {
        Arc::new(MqDeadlineType { params })
    }
}

impl ElevatorType for MqDeadlineType {
    fn name(&self) -> &str {
        "mq-deadline"
    }

    fn async_depth(&self, nr_requests: u32) -> Option<u32> {
        Some(match self.params.async_depth {
            0 => (3 * nr_requests / 4).max(1),
            d => d.min(nr_requests),
        })
    }

    fn init(&self, _hwq: u16, nr_requests: u32) -> Box<dyn Elevator> {
        Box::new(MqDeadline {
            d: Deadline::new(self.params, nr_requests as usize),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct T {
        key: u32,
        sector: u64,
        write: bool,
        class: IoPrioClass,
    }

    impl DeadlineRq for T {
        fn key(&self) -> u32 {
            self.key
        }
        fn sector(&self) -> u64 {
            self.sector
        }
        fn end_sector(&self) -> u64 {
            self.sector + 8
        }
        fn is_write(&self) -> bool {
            self.write
        }
        fn class(&self) -> IoPrioClass {
            self.class
        }
    }

    fn rq(key: u32, sector: u64, write: bool) -> T {
        T {
            key,
            sector,
            write,
            class: IoPrioClass::Be,
        }
    }

    const MS: u64 = 1_000_000;

    fn drain(d: &mut Deadline<T>, now: u64) -> Vec<u32> {
        std::iter::from_fn(|| d.dispatch(now).map(|r| r.key)).collect()
    }

    #[test]
    fn a_batch_goes_in_sector_order() {
        let mut d = Deadline::new(DeadlineParams::default(), 16);
        for (k, s) in [(0, 80), (1, 8), (2, 40), (3, 16)] {
            d.insert(rq(k, s, false), 0);
        }
        assert_eq!(drain(&mut d, MS), vec![1, 3, 2, 0]);
        assert_eq!(d.len(), 0);
    }

    #[test]
    fn an_expired_request_starts_the_next_batch() {
        let p = DeadlineParams {
            fifo_batch: 2,
            ..Default::default()
        };
        let mut d = Deadline::new(p, 16);
        // Oldest at a high sector, then a run of low ones.
        d.insert(rq(0, 1000, false), 0);
        for k in 1..6 {
            d.insert(rq(k, k as u64 * 8, false), 100 * MS);
        }
        // Before key 0 expires: sector order from 0 (keys 1..5 then 0).
        // After (at 600 ms), the batch ends after 2 and the FIFO head goes.
        let now = 600 * MS;
        let order = drain(&mut d, now);
        assert_eq!(order[0], 0, "expired head first: {order:?}");
        assert_eq!(&order[1..], &[1, 2, 3, 4, 5]);
    }

    #[test]
    fn writes_are_starved_at_most_writes_starved_times() {
        let p = DeadlineParams {
            fifo_batch: 1,
            writes_starved: 2,
            ..Default::default()
        };
        let mut d = Deadline::new(p, 64);
        for k in 0..4 {
            d.insert(rq(100 + k, 1_000_000 + k as u64 * 8, true), 0);
        }
        for k in 0..12 {
            d.insert(rq(k, k as u64 * 1000, false), 0);
        }
        let order = drain(&mut d, MS);
        // Each write batch (one request) comes after at most two read batches.
        let mut reads_in_a_row = 0;
        for k in &order {
            if *k >= 100 {
                assert!(reads_in_a_row <= 2, "{order:?}");
                reads_in_a_row = 0;
            } else {
                reads_in_a_row += 1;
            }
        }
        assert_eq!(order.len(), 16);
    }

    #[test]
    fn higher_classes_go_first_and_old_low_ones_age_in() {
        let mut d = Deadline::new(DeadlineParams::default(), 16);
        let mut idle = rq(0, 0, false);
        idle.class = IoPrioClass::Idle;
        let mut rt = rq(1, 500, true);
        rt.class = IoPrioClass::Rt;
        d.insert(idle, 0);
        d.insert(rq(2, 100, false), 0);
        d.insert(rt, 0);
        assert_eq!(drain(&mut d, MS), vec![1, 2, 0]);

        // An idle request that has waited 10 s goes before best effort.
        d.insert(idle, 0);
        d.insert(rq(2, 100, false), 10_000 * MS);
        assert_eq!(drain(&mut d, 10_000 * MS), vec![0, 2]);
    }

    #[test]
    fn requests_are_never_lost_or_doubled() {
        use proptest::prelude::*;
        proptest!(|(ops in proptest::collection::vec((any::<bool>(), 0u64..64, 0u8..3, 0u64..2000), 1..200))| {
            let p = DeadlineParams { fifo_batch: 4, read_expire_ms: 5, write_expire_ms: 50, ..Default::default() };
            let mut d = Deadline::new(p, 8);
            let mut now = 0;
            let mut queued = std::collections::BTreeSet::new();
            let mut next_key = 0u32;
            for (insert, sector, class, dt) in ops {
                now += dt * 10_000;
                if insert || queued.is_empty() {
                    let key = next_key;
                    next_key += 1;
                    d.insert(T { key, sector: sector * 8, write: sector % 3 == 0, class: IoPrioClass::ALL[class as usize] }, now);
                    queued.insert(key);
                } else {
                    let r = d.dispatch(now).expect("work waits");
                    prop_assert!(queued.remove(&r.key));
                }
                prop_assert_eq!(d.len() as usize, queued.len());
            }
            while let Some(r) = d.dispatch(now) {
                prop_assert!(queued.remove(&r.key));
            }
            prop_assert!(queued.is_empty());
        });
    }
}
