//! The data half: one virtqueue served by one thread with its own mqblk
//! [`Context`]. A kick pops the available chains, each becomes one bio
//! whose segments point into guest memory (no bounce, no copy), and the
//! completions, in whatever order the device finishes them, write the
//! status byte and fill the used ring; the driver is interrupted only when
//! EVENT_IDX says it wants to be. Below it: `split_ring` (the ring's parts
//! through host pointers) and `guest` (the memory table, resolved once).

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqblk_core::{Bio, BioFlags, Context, IoBuf, Op as BioOp, Status};
use vhost_user_backend::{VringRwLock, VringState, VringT};
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use crate::guest::Guest;
use crate::request::{self, Op, Parsed};
use crate::split_ring::{Layout, SplitRing};
use crate::virtio_blk::{BlkStatus, Shape};

/// The largest ring a driver may set up.
pub(crate) const MAX_QUEUE_SIZE: usize = 1024;

/// Guest memory as the backend maps it (no dirty-page log).
pub(crate) type Memory = GuestMemoryMmap<()>;
/// The shared, replaceable view of it.
pub(crate) type AtomicMemory = GuestMemoryAtomic<Memory>;
/// A virtqueue as the backend crate keeps it.
pub(crate) type Vring = VringRwLock<AtomicMemory>;

/// One memory table the driver gave, resolved, and kept mapped while a
/// request points into it.
struct Generation {
    /// The table as the backend crate gave it (to tell a new one).
    mem: Arc<Memory>,
    guest: Arc<Guest>,
    in_flight: u32,
}

/// Where the queue's rings are, if it is set up.
fn layout(queue: &Queue) -> Option<Layout> {
    if !queue.ready() || queue.avail_ring() == 0 {
        return None;
    }
    Some(Layout {
        desc: queue.desc_table(),
        avail: queue.avail_ring(),
        used: queue.used_ring(),
        size: queue.size(),
        event_idx: queue.event_idx_enabled(),
    })
}

/// A request slot: free, or holding a submitted request until its bio
/// completes (typed states: a free slot has no guest address to write).
enum Slot {
    Free,
    InFlight(InFlight),
}

/// What a completion needs to answer the driver.
struct InFlight {
    head: u16,
    /// The status byte, resolved in the request's generation.
    status: NonNull<u8>,
    used_len: u32,
    /// Index into the generations, counted from `gen_base`.
    generation: u64,
}

/// The thread's virtqueue, its context and its requests.
pub(crate) struct Worker {
    ctx: Context,
    shape: Arc<Shape>,
    serial: [u8; crate::virtio_blk::ID_LEN],
    slots: Vec<Slot>,
    free: Vec<u32>,
    in_flight: u32,
    generations: VecDeque<Generation>,
    gen_base: u64,
    /// Reused per chain: its descriptors, its data's host pieces, and the
    /// used elements and completions waiting to be written.
    descs: Vec<request::Desc>,
    pieces: Vec<(NonNull<u8>, u32)>,
    used: Vec<(u16, u32)>,
    done: Vec<(u32, BlkStatus)>,
    /// The driver's memory table, as the backend crate keeps it (none
    /// before the first SET_MEM_TABLE).
    memory: Option<AtomicMemory>,
    /// The driver broke the ring: nothing more is taken from it.
    broken: Option<&'static str>,
    /// Used elements added since the driver was last interrupted.
    added: u32,
    /// Requests refused since the last line said so, and when it was.
    refusals: u64,
    said_at: Option<Instant>,
    /// Chains taken and completions reaped, for the busy poll's progress.
    taken: u64,
    reaped: u64,
    queue: u16,
}

// SAFETY: the raw pointers in `pieces` are scratch space, only meaningful
// during one call on the owning thread; those in the slots point into the
// generation their request counts, which the worker keeps (whatever thread
// holds it) until the completion is reaped; everything else is Send.
unsafe impl Send for Worker {}

/// Map the layer's status onto virtio-blk's.
fn blk_status(s: Status) -> BlkStatus {
    match s {
        Status::Ok => BlkStatus::Ok,
        Status::Invalid(mqblk_core::error::InvalidKind::Unsupported) => BlkStatus::Unsupp,
        _ => BlkStatus::IoErr,
    }
}

impl Worker {
    /// A worker for virtqueue `queue`, on context `ctx`.
    pub(crate) fn new(ctx: Context, shape: Arc<Shape>, serial: &[u8], queue: u16) -> Worker {
        let size = MAX_QUEUE_SIZE;
        let mut id = [0u8; crate::virtio_blk::ID_LEN];
        let n = serial.len().min(id.len());
        id[..n].copy_from_slice(&serial[..n]);
        let seg_max = shape.seg_max as usize;
        Worker {
            ctx,
            shape,
            serial: id,
            slots: (0..size).map(|_| Slot::Free).collect(),
            free: (0..size as u32).rev().collect(),
            in_flight: 0,
            generations: VecDeque::new(),
            gen_base: 0,
            descs: Vec::with_capacity(seg_max + 2),
            pieces: Vec::with_capacity(seg_max + 2),
            used: Vec::with_capacity(size),
            done: Vec::with_capacity(size),
            memory: None,
            broken: None,
            added: 0,
            refusals: 0,
            said_at: None,
            taken: 0,
            reaped: 0,
            queue,
        }
    }

    /// The context's completion fd, for the thread's epoll.
    pub(crate) fn completion_fd(&mut self) -> mqblk_core::Result<std::os::fd::RawFd> {
        self.ctx.completion_fd()
    }

    /// Requests submitted and not yet completed.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The driver stopped the ring (`GET_VRING_BASE`) and has every
    /// request back: a ring it broke may be set up afresh (a guest that
    /// resets its device, a VM that reboots).
    pub(crate) fn ring_stopped(&mut self) {
        self.broken = None;
    }

    /// Take the driver's current memory table as the newest generation,
    /// and let go of older ones no request points into.
    /// True if the table is newer than the one taken before.
    fn refresh(&mut self, atomic: &AtomicMemory) -> bool {
        let now = atomic.memory();
        let same = self
            .generations
            .back()
            .is_some_and(|g| std::ptr::eq(&*g.mem, &*now));
        if !same {
            let mem = now.into_inner();
            self.generations.push_back(Generation {
                guest: Arc::new(Guest::of(mem.clone())),
                mem,
                in_flight: 0,
            });
        }
        while self.generations.len() > 1 && self.generations[0].in_flight == 0 {
            self.generations.pop_front();
            self.gen_base += 1;
        }
        !same
    }

    /// A kick (or a completion): take every available chain, submit, reap,
    /// and interrupt the driver if it asked to be.
    /// The driver's memory table changed (or was first given).
    pub(crate) fn set_memory(&mut self, mem: AtomicMemory) {
        self.memory = Some(mem);
    }

    /// A kick: [`Worker::run_with`] the memory table.
    pub(crate) fn run(&mut self, vring: &Vring, write_through: bool, poll: Option<Duration>) {
        if let Some(atomic) = self.memory.take() {
            self.run_with(&atomic, vring, write_through, poll);
            self.memory = Some(atomic);
        }
    }

    /// The context's fd fired: [`Worker::complete_with`] the memory table.
    pub(crate) fn complete(&mut self, vring: &Vring) {
        if let Some(atomic) = self.memory.take() {
            self.complete_with(&atomic, vring);
            self.memory = Some(atomic);
        }
    }

    fn run_with(
        &mut self,
        atomic: &AtomicMemory,
        vring: &Vring,
        write_through: bool,
        poll: Option<Duration>,
    ) {
        self.refresh(atomic);
        // This thread polls the context before it sleeps again: no
        // eventfd write for what completes inside a submit, no read for
        // it in the poll (turned back on below, before the thread waits).
        self.ctx.set_completion_fd_enabled(false);
        let mut state = vring.get_mut();
        let event_idx = state.get_queue().event_idx_enabled();
        // With EVENT_IDX, kicks stay off from the one that woke us (the
        // driver kicks once as it passes `avail_event`) until re-armed.
        while self.broken.is_none() {
            self.take_available(atomic, &mut state, write_through);
            self.ctx.unplug();
            self.reap(&mut state);
            if !event_idx {
                break;
            }
            // Re-arm, and look once more: a chain made available between
            // the last look and the re-arm would otherwise wait for a kick
            // the driver will not send.
            let guest = self.current();
            let queue = state.get_queue();
            let more = layout(queue)
                .and_then(|l| SplitRing::map(&guest, l))
                .is_some_and(|r| r.arm_kick(queue.next_avail()));
            if !more {
                break;
            }
        }
        self.reap(&mut state);
        self.notify(&mut state);
        drop(state);
        if let Some(poll) = poll {
            self.busy_poll(atomic, vring, write_through, poll);
        }
        self.ctx.set_completion_fd_enabled(true);
    }

    /// After a batch, keep looking for chains and completions for `poll`
    /// past the last one found (`--poll-us`): a driver that submits again
    /// within it needs no kick, and its completions no eventfd round trip.
    /// The ring's lock is taken per look, so the frontend's control
    /// messages wait for one look at most.
    fn busy_poll(
        &mut self,
        atomic: &AtomicMemory,
        vring: &Vring,
        write_through: bool,
        poll: Duration,
    ) {
        // The clock is read only in looks that found nothing.
        let mut deadline = None;
        while self.broken.is_none() {
            let seen = (self.taken, self.reaped);
            let mut state = vring.get_mut();
            self.take_available(atomic, &mut state, write_through);
            self.ctx.unplug();
            if self.in_flight > 0 {
                self.reap(&mut state);
            } else {
                // Nothing to reap: no poll of the context (each clears its
                // completion fd, a system call); a completion fd another
                // context's queue made readable meanwhile wakes the thread
                // once the poll ends, and that poll clears it.
                self.put_used(&mut state);
            }
            self.notify(&mut state);
            drop(state);
            if (self.taken, self.reaped) != seen {
                deadline = None;
                continue;
            }
            let now = Instant::now();
            match deadline {
                None => deadline = Some(now + poll),
                Some(d) if now >= d => break,
                Some(_) => std::hint::spin_loop(),
            }
        }
    }

    /// Reap completions only (the context's fd fired).
    fn complete_with(&mut self, atomic: &AtomicMemory, vring: &Vring) {
        self.refresh(atomic);
        self.ctx.set_completion_fd_enabled(false);
        let mut state = vring.get_mut();
        self.reap(&mut state);
        self.notify(&mut state);
        drop(state);
        self.ctx.set_completion_fd_enabled(true);
    }

    /// Reap without a ring (the frontend is gone): wait for every request
    /// in flight, up to `max`. True if none is left.
    pub(crate) fn drain(&mut self, max: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + max;
        while self.in_flight > 0 && std::time::Instant::now() < deadline {
            let Worker { ctx, done, .. } = self;
            ctx.poll_wait_for(1, std::time::Duration::from_millis(10), |c| {
                done.push((c.private() as u32, blk_status(c.status())));
            });
            for (slot, _) in std::mem::take(&mut self.done) {
                self.finish(slot);
            }
        }
        self.in_flight == 0
    }

    /// Keep the memory a device may still write mapped for ever: the
    /// frontend left with requests the device never finished.
    pub(crate) fn leak_memory(&mut self) {
        for g in self.generations.drain(..) {
            std::mem::forget(g.mem);
        }
    }

    /// Take every available chain, read with a memory table loaded after
    /// the available index was: the driver publishes a chain only after
    /// the regions it points into were added (and acknowledged), so such a
    /// table has them all. A table loaded before the index might not.
    fn take_available(
        &mut self,
        atomic: &AtomicMemory,
        state: &mut VringState<AtomicMemory>,
        write_through: bool,
    ) {
        'table: loop {
            let guest = self.current();
            let queue = state.get_queue_mut();
            let Some(ring) = layout(queue).and_then(|l| SplitRing::map(&guest, l)) else {
                return;
            };
            let avail = ring.avail_idx();
            if self.refresh(atomic) {
                continue 'table;
            }
            let mut next = queue.next_avail();
            if avail.wrapping_sub(next) > ring.size() {
                self.break_ring("the available index moved past the queue size");
                return;
            }
            let cap = self.shape.seg_max as usize + 2;
            while next != avail {
                let head = ring.avail_head(next);
                next = next.wrapping_add(1);
                // The walk stops at a loop (after as many descriptors as
                // the table holds), at a next index past the table or at a
                // descriptor it cannot read; then the last one it gave
                // still says NEXT.
                let walked = ring.walk(head, cap, &mut self.descs);
                let parsed = if walked.open_end {
                    Parsed::Broken("the chain does not end: a loop, or a next index past the table")
                } else {
                    request::parse(&self.shape, &self.descs, walked.more, walked.last, &*guest)
                };
                let translated = match parsed {
                    Parsed::Submit(req) => {
                        translate(req.op, &self.descs, &self.serial, &guest, &mut self.pieces)
                    }
                    _ => Ok(()),
                };
                self.taken += 1;
                match (parsed, translated) {
                    (Parsed::Submit(req), Ok(())) => self.submit(head, req, &guest, write_through),
                    (Parsed::Submit(req), Err(status)) => {
                        self.refused(status, "data outside guest memory");
                        guest.write(req.status_at, &[status as u8]);
                        self.used.push((head, 1));
                    }
                    (
                        Parsed::Answer {
                            status,
                            status_at,
                            why,
                        },
                        _,
                    ) => {
                        self.refused(status, why);
                        guest.write(status_at, &[status as u8]);
                        self.used.push((head, 1));
                    }
                    (Parsed::Broken(why), _) => {
                        self.break_ring(why);
                        break;
                    }
                }
            }
            state.get_queue_mut().set_next_avail(next);
            return;
        }
    }

    /// The newest memory table this worker has taken.
    fn current(&self) -> Arc<Guest> {
        self.generations.back().expect("a generation").guest.clone()
    }

    /// Say why a request was refused: at most one line a second per
    /// queue (a driver that sends only bad requests cannot flood the log),
    /// with the count of those not said.
    fn refused(&mut self, status: BlkStatus, why: &'static str) {
        self.refusals += 1;
        let now = Instant::now();
        if self
            .said_at
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        let more = self.refusals - 1;
        eprintln!(
            "mqblk serve: vhost-user-blk queue {}: a request answered {status:?}: {why}{}",
            self.queue,
            if more > 0 {
                format!(" ({more} more refused since the last line)")
            } else {
                String::new()
            }
        );
        self.refusals = 0;
        self.said_at = Some(now);
    }

    fn break_ring(&mut self, why: &'static str) {
        eprintln!(
            "mqblk serve: vhost-user-blk queue {}: the driver broke the ring ({why}); the queue \
             takes no more requests until the driver resets it",
            self.queue
        );
        self.broken = Some(why);
    }

    /// Turn one checked request, its data resolved into `pieces`, into a
    /// bio on the context (GET_ID, whose answer is written already, is
    /// answered at once).
    fn submit(&mut self, head: u16, req: request::Request, guest: &Guest, write_through: bool) {
        let answer_now = |w: &mut Worker, status: BlkStatus, len: u32| {
            guest.write(req.status_at, &[status as u8]);
            w.used.push((head, len));
        };
        if let Op::GetId { .. } = req.op {
            return answer_now(self, BlkStatus::Ok, req.used_len);
        }
        // The parser read the status byte: it is mapped, in one region.
        let Some(status) = guest.resolve(req.status_at, 1) else {
            return self.break_ring("the status byte lies outside guest memory");
        };
        let Some(slot) = self.free.pop() else {
            // More chains than the ring holds: only a driver that put one
            // head in flight twice gets here.
            self.refused(
                BlkStatus::IoErr,
                "more requests in flight than the ring holds",
            );
            return answer_now(self, BlkStatus::IoErr, 1);
        };
        let generation = self.gen_base + self.generations.len() as u64 - 1;
        self.slots[slot as usize] = Slot::InFlight(InFlight {
            head,
            status,
            used_len: req.used_len,
            generation,
        });
        self.generations.back_mut().expect("a generation").in_flight += 1;
        self.in_flight += 1;
        // The bio is built where it lies in the context's bio set (no
        // move of a whole bio per request).
        let fill = |bio: &mut Bio, pieces: &[(NonNull<u8>, u32)]| {
            match req.op {
                Op::Read { offset, .. } | Op::Write { offset, .. } => {
                    let write = matches!(req.op, Op::Write { .. });
                    bio.set_op(if write { BioOp::Write } else { BioOp::Read });
                    bio.set_offset_bytes(offset);
                    if write && write_through {
                        bio.set_flags(BioFlags::FUA);
                    }
                    for &(p, len) in pieces {
                        // SAFETY: `p` points at `len` bytes of guest memory
                        // in a mapping this worker keeps (its generation
                        // counts the request) until the completion is
                        // reaped. The driver gave those bytes to the device
                        // for this request (virtio 2.7.13: it does not touch
                        // them until the used element appears); a driver
                        // that breaks that rule races only with itself, on
                        // its own memory.
                        let buf = unsafe { IoBuf::from_raw(p, len as usize) };
                        bio.push_segment(buf, 0, len);
                    }
                }
                Op::Flush => *bio = Bio::flush(),
                Op::Discard { offset, len } => *bio = Bio::discard_at(offset, len),
                Op::WriteZeroes { offset, len, .. } => *bio = Bio::write_zeroes_at(offset, len),
                Op::GetId { .. } => unreachable!("answered above"),
            }
            bio.private = u64::from(slot);
        };
        let Worker { ctx, pieces, .. } = self;
        let Err(e) = ctx.submit_with(|bio| fill(bio, pieces)) else {
            return;
        };
        let mut bio = e.into_bio();
        loop {
            // Every slot of the context holds a completion nobody polled:
            // reap them (their used elements wait for the ring), then
            // submit the same bio again.
            let Worker { ctx, done, .. } = self;
            let n = ctx.poll(|c| done.push((c.private() as u32, blk_status(c.status()))));
            if n == 0 {
                ctx.poll_wait_for(1, std::time::Duration::from_millis(10), |c| {
                    done.push((c.private() as u32, blk_status(c.status())))
                });
            }
            self.answer_done();
            match self.ctx.submit(bio) {
                Ok(()) => return,
                Err(e) => bio = e.into_bio(),
            }
        }
    }

    /// Poll the context and answer what completed: status bytes written,
    /// used elements put in the ring and published with one store.
    fn reap(&mut self, state: &mut VringState<AtomicMemory>) {
        let Worker { ctx, done, .. } = self;
        ctx.poll(|c| done.push((c.private() as u32, blk_status(c.status()))));
        self.answer_done();
        self.put_used(state);
    }

    /// Put the used elements waiting in the ring, and publish them with
    /// one store.
    fn put_used(&mut self, state: &mut VringState<AtomicMemory>) {
        if self.used.is_empty() {
            return;
        }
        let guest = self.current();
        let queue = state.get_queue_mut();
        let Some(ring) = layout(queue).and_then(|l| SplitRing::map(&guest, l)) else {
            self.used.clear();
            self.broken
                .get_or_insert("the used ring lies outside guest memory");
            return;
        };
        let mut next = queue.next_used();
        for (head, len) in self.used.drain(..) {
            if head >= ring.size() {
                // A head outside the ring: the driver broke it.
                self.broken.get_or_insert("a used element outside the ring");
                continue;
            }
            ring.put_used(next, head, len);
            next = next.wrapping_add(1);
            self.added += 1;
        }
        ring.publish_used(next);
        queue.set_next_used(next);
    }

    /// Write the status of each reaped completion; queue its used element.
    fn answer_done(&mut self) {
        let done = std::mem::take(&mut self.done);
        self.reaped += done.len() as u64;
        for &(slot, status) in &done {
            if let Some((f, generation)) = self.finish(slot) {
                let g = &self.generations[(generation - self.gen_base) as usize];
                // SAFETY: `f.status` was resolved on this generation's
                // table, which the worker kept while the request was in
                // flight and still holds.
                unsafe { g.guest.write_byte(f.status, status as u8) };
                self.used.push((
                    f.head,
                    if status == BlkStatus::Ok {
                        f.used_len
                    } else {
                        1
                    },
                ));
            }
        }
        self.done = done;
        self.done.clear();
    }

    /// Free a slot; what it held.
    fn finish(&mut self, slot: u32) -> Option<(InFlight, u64)> {
        let s = std::mem::replace(self.slots.get_mut(slot as usize)?, Slot::Free);
        let Slot::InFlight(f) = s else { return None };
        self.free.push(slot);
        self.in_flight -= 1;
        let g = (f.generation - self.gen_base) as usize;
        self.generations[g].in_flight -= 1;
        let generation = f.generation;
        Some((f, generation))
    }

    /// Interrupt the driver if used elements were added and it wants them
    /// (one decision per batch).
    fn notify(&mut self, state: &mut VringState<AtomicMemory>) {
        if self.added == 0 {
            return;
        }
        let added = self.added.min(u32::from(u16::MAX)) as u16;
        self.added = 0;
        let guest = self.current();
        let queue = state.get_queue();
        let new = queue.next_used();
        let needs = layout(queue)
            .and_then(|l| SplitRing::map(&guest, l))
            .is_none_or(|r| r.needs_interrupt(new.wrapping_sub(added), new));
        if needs {
            let _ = state.signal_used_queue();
        }
    }
}

/// Resolve a request's data into host pieces (reads and writes), or write
/// the serial (GET_ID). IOERR for data outside guest memory.
fn translate(
    op: Op,
    descs: &[request::Desc],
    serial: &[u8; crate::virtio_blk::ID_LEN],
    guest: &Guest,
    pieces: &mut Vec<(NonNull<u8>, u32)>,
) -> Result<(), BlkStatus> {
    pieces.clear();
    match op {
        Op::Read { data, .. } | Op::Write { data, .. } => {
            for (addr, len) in data.pieces(descs) {
                if !guest.pieces(addr, len, pieces) {
                    return Err(BlkStatus::IoErr);
                }
            }
        }
        Op::GetId { id } => {
            let mut at = 0usize;
            for (addr, len) in id.pieces(descs) {
                if !guest.write(addr, &serial[at..at + len as usize]) {
                    return Err(BlkStatus::IoErr);
                }
                at += len as usize;
            }
        }
        _ => {}
    }
    Ok(())
}
