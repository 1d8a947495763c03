//! bfq (Linux `block/bfq-iosched.c`), budget fair queueing: the device's
//! service, counted in sectors, is shared among groups in proportion to
//! their weights, and among the contexts of a group in turn.
//!
//! Each group has a virtual time that advances by `sectors / weight` as
//! its requests are dispatched; the group with the smallest virtual time
//! is served next, for up to one budget (`max_budget` sectors) before the
//! choice is made again, as bfq serves its in-service queue. A group that
//! was idle restarts at the device's virtual time, so it cannot bank
//! credit. The real-time class is served before anything else; the idle
//! class only when no other request waits or runs on the device, or once
//! every `idle_timeout_ms` so that it is never starved.
//!
//! Like Linux's bfq, which keeps one lock for the whole device, the groups'
//! virtual times are device-wide state under one lock, taken by each
//! hardware queue's dispatch: a group that is ahead of its share waits
//! even when its requests are on another hardware queue than the group
//! behind. A hardware queue with nothing in the driver always dispatches,
//! so every queue keeps making progress.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use super::elevator::{Elevator, ElevatorType};
use crate::clock;
use crate::ioprio::IoPrioClass;
use crate::request::{Request, RqRef};

/// bfq's tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BfqParams {
    /// Sectors a group is served for before the next choice.
    pub max_budget: u32,
    /// The idle class is served at least this often (ms), as Linux's
    /// `BFQ_CL_IDLE_TIMEOUT`.
    pub idle_timeout_ms: u64,
}

impl Default for BfqParams {
    fn default() -> Self {
        BfqParams {
            max_budget: 256,
            idle_timeout_ms: 200,
        }
    }
}

/// Virtual time per sector at weight 1.
const VSCALE: u64 = 1 << 16;

#[derive(Clone, Copy, Debug, Default)]
struct GroupState {
    /// Virtual time: service received, divided by weight.
    vtime: u64,
    /// Requests waiting in an elevator, on any hardware queue.
    queued: u32,
    /// Requests dispatched and not completed.
    in_flight: u32,
    /// Its weight, as its latest request carried it.
    weight: u16,
}

impl GroupState {
    fn busy(&self) -> bool {
        self.queued + self.in_flight > 0
    }
}

/// The device-wide part.
#[derive(Debug, Default)]
struct Shared {
    groups: Vec<GroupState>,
    /// Requests of the rt and be classes waiting or in flight.
    others_busy: u32,
    last_idle_ns: u64,
}

impl Shared {
    fn group(&mut self, g: u16) -> &mut GroupState {
        let i = usize::from(g);
        if i >= self.groups.len() {
            self.groups.resize(i + 1, GroupState::default());
        }
        &mut self.groups[i]
    }

    /// The device's virtual time: the least of the busy groups'.
    fn vmin(&self) -> Option<u64> {
        self.groups
            .iter()
            .filter(|g| g.busy())
            .map(|g| g.vtime)
            .min()
    }
}

/// One context's requests within a group.
struct CtxQueue {
    owner: usize,
    rqs: VecDeque<RqRef>,
}

/// One group's requests on this hardware queue.
#[derive(Default)]
struct GroupQueue {
    ctxs: Vec<CtxQueue>,
    next: usize,
    len: u32,
}

impl GroupQueue {
    fn push(&mut self, owner: usize, rq: RqRef, front: bool) {
        let q = match self.ctxs.iter().position(|c| c.owner == owner) {
            Some(i) => &mut self.ctxs[i],
            None => {
                self.ctxs.push(CtxQueue {
                    owner,
                    rqs: VecDeque::new(),
                });
                self.ctxs.last_mut().expect("just pushed")
            }
        };
        if front {
            q.rqs.push_front(rq);
        } else {
            q.rqs.push_back(rq);
        }
        self.len += 1;
    }

    /// The next request, contexts taking turns.
    fn pop(&mut self) -> Option<RqRef> {
        let n = self.ctxs.len();
        for i in 0..n {
            let k = (self.next + i) % n;
            if let Some(rq) = self.ctxs[k].rqs.pop_front() {
                self.next = (k + 1) % n;
                self.len -= 1;
                return Some(rq);
            }
        }
        None
    }
}

/// Per class, per group id: the requests here.
type ClassQueues = Vec<GroupQueue>;

struct Bfq {
    p: BfqParams,
    shared: Arc<Mutex<Shared>>,
    classes: [ClassQueues; 3],
    queued: u32,
    /// Requests this hardware queue has in the driver.
    in_flight: u32,
    /// The group being served, and the budget it has left.
    in_service: Option<(usize, u16)>,
    budget_left: u64,
}

fn owner_key(rq: &Request) -> usize {
    rq.owner.map_or(0, |p| p.as_ptr() as usize)
}

fn sectors(rq: &Request) -> u64 {
    (rq.size_bytes >> 9).max(1)
}

impl Bfq {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn class_of(rq: &Request) -> usize {
        rq.ioprio.class as usize
    }

    fn take(&mut self, s: &mut Shared, class: usize, g: u16) -> Option<RqRef> {
        let rq = self.classes[class].get_mut(usize::from(g))?.pop()?;
        let weight = u64::from(rq.weight.max(1));
        let st = s.group(g);
        st.queued -= 1;
        st.in_flight += 1;
        st.vtime += sectors(&rq) * VSCALE / weight;
        self.queued -= 1;
        self.in_flight += 1;
        Some(rq)
    }

    /// The group of `class` with requests here and the least virtual time.
    fn pick(&self, s: &Shared, class: usize) -> Option<u16> {
        self.classes[class]
            .iter()
            .enumerate()
            .filter(|(_, q)| q.len > 0)
            .min_by_key(|(g, _)| s.groups.get(*g).map_or(0, |st| st.vtime))
            .map(|(g, _)| g as u16)
    }

    fn dispatch_locked(&mut self, s: &mut Shared) -> Option<RqRef> {
        // Real time first, least virtual time first, ungated.
        if let Some(g) = self.pick(s, IoPrioClass::Rt as usize) {
            return self.take(s, IoPrioClass::Rt as usize, g);
        }
        let be = IoPrioClass::Be as usize;
        // Keep serving the group in service while its budget lasts.
        if let Some((class, g)) = self.in_service {
            let has = self.classes[class]
                .get(usize::from(g))
                .is_some_and(|q| q.len > 0);
            if class == be && has && self.budget_left > 0 && self.may_go(s, g) {
                let rq = self.take(s, be, g)?;
                self.budget_left = self.budget_left.saturating_sub(sectors(&rq));
                return Some(rq);
            }
            self.in_service = None;
        }
        if let Some(g) = self.pick(s, be) {
            if !self.may_go(s, g) {
                return None;
            }
            let rq = self.take(s, be, g)?;
            self.in_service = Some((be, g));
            self.budget_left = u64::from(self.p.max_budget).saturating_sub(sectors(&rq));
            return Some(rq);
        }
        // The idle class: when nothing else uses the device, or when it
        // has waited a whole idle timeout.
        let idle = IoPrioClass::Idle as usize;
        let g = self.pick(s, idle)?;
        let now = clock::now_ns();
        let starved = now.saturating_sub(s.last_idle_ns) >= self.p.idle_timeout_ms * 1_000_000;
        if s.others_busy == 0 || starved {
            s.last_idle_ns = now;
            return self.take(s, idle, g);
        }
        None
    }

    /// Whether group `g` may be served now: it is not more than a budget
    /// ahead of the device's virtual time, or this hardware queue would
    /// otherwise have nothing in the driver.
    fn may_go(&self, s: &Shared, g: u16) -> bool {
        if self.in_flight == 0 {
            return true;
        }
        let Some(vmin) = s.vmin() else { return true };
        let st = s.groups.get(usize::from(g)).copied().unwrap_or_default();
        let weight = u64::from(st.weight.max(1));
        st.vtime <= vmin + u64::from(self.p.max_budget) * VSCALE / weight
    }
}

impl Elevator for Bfq {
    fn insert(&mut self, rq: RqRef) {
        let class = Self::class_of(&rq);
        let g = rq.group;
        {
            let mut s = self.lock();
            let vmin = s.vmin();
            let st = s.group(g);
            if !st.busy() {
                // Back from idle: start at the device's virtual time.
                st.vtime = st.vtime.max(vmin.unwrap_or(0));
            }
            st.queued += 1;
            st.weight = rq.weight;
            if class != IoPrioClass::Idle as usize {
                s.others_busy += 1;
            }
        }
        let qs = &mut self.classes[class];
        let gi = usize::from(g);
        if gi >= qs.len() {
            qs.resize_with(gi + 1, GroupQueue::default);
        }
        qs[gi].push(owner_key(&rq), rq, false);
        self.queued += 1;
    }

    fn dispatch(&mut self) -> Option<RqRef> {
        if self.queued == 0 {
            return None;
        }
        let shared = self.shared.clone();
        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
        self.dispatch_locked(&mut s)
    }

    fn has_work(&self) -> bool {
        self.queued > 0
    }

    fn requeue(&mut self, rq: RqRef) {
        let class = Self::class_of(&rq);
        let g = rq.group;
        {
            let mut s = self.lock();
            let st = s.group(g);
            st.in_flight -= 1;
            st.queued += 1;
        }
        self.in_flight -= 1;
        self.classes[class][usize::from(g)].push(owner_key(&rq), rq, true);
        self.queued += 1;
    }

    fn completed(&mut self, rq: &Request) {
        let mut s = self.lock();
        let st = s.group(rq.group);
        st.in_flight = st.in_flight.saturating_sub(1);
        if Self::class_of(rq) != IoPrioClass::Idle as usize {
            s.others_busy = s.others_busy.saturating_sub(1);
        }
        drop(s);
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

/// The bfq scheduler type (`scheduler=bfq`).
#[derive(Debug)]
pub struct BfqType {
    p: BfqParams,
    shared: Arc<Mutex<Shared>>,
}

impl BfqType {
    /// With these tunables.
    pub fn new(p: BfqParams) -> Arc<BfqType> {
        Arc::new(BfqType {
            p,
            shared: Arc::default(),
        })
    }
}

impl ElevatorType for BfqType {
    fn name(&self) -> &str {
        "bfq"
    }

    fn async_depth(&self, nr_requests: u32) -> Option<u32> {
        Some((3 * nr_requests / 4).max(1))
    }

    fn init(&self, _hwq: u16, _nr_requests: u32) -> Box<dyn Elevator> {
        Box::new(Bfq {
            p: self.p,
            shared: self.shared.clone(),
            classes: Default::default(),
            queued: 0,
            in_flight: 0,
            in_service: None,
            budget_left: 0,
        })
    }
}
