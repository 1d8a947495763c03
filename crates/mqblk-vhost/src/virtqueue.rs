//! The data half: one virtqueue served by one thread with its own mqblk
//! [`Context`]. A kick pops the available chains, each becomes one bio
//! whose segments point into guest memory (no bounce, no copy), and the
//! completions, in whatever order the device finishes them, write the
//! status byte and fill the used ring; the driver is interrupted only when
//! EVENT_IDX says it wants to be.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqblk_core::{Bio, BioFlags, Context, IoBuf, Op as BioOp, Status};
use vhost_user_backend::{VringRwLock, VringState, VringT};
use virtio_queue::{Error as QueueError, QueueOwnedT, QueueT};
use vm_memory::{
    Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap,
};

use crate::request::{self, Desc, Op, Parsed, ReadGuest};
use crate::virtio_blk::{BlkStatus, Shape};

/// The largest ring a driver may set up.
pub(crate) const MAX_QUEUE_SIZE: usize = 1024;

/// Guest memory as the backend maps it (no dirty-page log).
pub(crate) type Memory = GuestMemoryMmap<()>;
/// The shared, replaceable view of it.
pub(crate) type AtomicMemory = GuestMemoryAtomic<Memory>;
/// A virtqueue as the backend crate keeps it.
pub(crate) type Vring = VringRwLock<AtomicMemory>;

impl ReadGuest for Memory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        // One region (a header, a range, a status byte): one lookup and a
        // copy; across regions, vm-memory's walk.
        match GuestMemoryBackend::get_slice(self, GuestAddress(addr), buf.len()) {
            Ok(s) => s.copy_to(buf) == buf.len(),
            Err(_) => self.read_slice(buf, GuestAddress(addr)).is_ok(),
        }
    }
}

/// One memory table the driver gave, kept mapped while a request points
/// into it.
struct Generation {
    mem: Arc<Memory>,
    in_flight: u32,
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
    status_at: u64,
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
    descs: Vec<Desc>,
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
// during one call on the owning thread; everything else is Send.
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
            self.generations.push_back(Generation {
                mem: now.into_inner(),
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
        let mut state = vring.get_mut();
        let event_idx = state.get_queue().event_idx_enabled();
        while self.broken.is_none() {
            if event_idx {
                let _ = state.get_queue_mut().disable_notification(&*self.current());
            }
            self.take_available(atomic, &mut state, write_through);
            self.ctx.unplug();
            self.reap(&mut state);
            if !event_idx {
                break;
            }
            // Re-arm, and look once more: a chain made available between
            // the last look and the re-arm would otherwise wait for a kick
            // the driver will not send.
            match state.get_queue_mut().enable_notification(&*self.current()) {
                Ok(true) => continue,
                _ => break,
            }
        }
        self.reap(&mut state);
        self.notify(&mut state);
        drop(state);
        if let Some(poll) = poll {
            self.busy_poll(atomic, vring, write_through, poll);
        }
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
        let mut deadline = Instant::now() + poll;
        while self.broken.is_none() {
            let seen = (self.taken, self.reaped);
            let mut state = vring.get_mut();
            self.take_available(atomic, &mut state, write_through);
            self.ctx.unplug();
            self.reap(&mut state);
            self.notify(&mut state);
            drop(state);
            let now = Instant::now();
            if (self.taken, self.reaped) != seen {
                deadline = now + poll;
            } else if now >= deadline {
                break;
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Reap completions only (the context's fd fired).
    fn complete_with(&mut self, atomic: &AtomicMemory, vring: &Vring) {
        self.refresh(atomic);
        let mut state = vring.get_mut();
        self.reap(&mut state);
        self.notify(&mut state);
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
            let mem = self.current();
            let queue = state.get_queue_mut();
            let iter = match queue.iter(&*mem) {
                Ok(it) => it,
                Err(QueueError::InvalidAvailRingIndex) => {
                    self.break_ring("the available index moved past the queue size");
                    return;
                }
                Err(_) => return,
            };
            if self.refresh(atomic) {
                continue 'table;
            }
            for chain in iter {
                let head = chain.head_index();
                self.descs.clear();
                let mut more = 0usize;
                let mut last = None;
                // The iterator stops at a loop (after as many descriptors
                // as the table holds), at a next index past the table or
                // at a descriptor it cannot read; then the last one it gave
                // still says NEXT.
                let mut open_end = false;
                let cap = self.shape.seg_max as usize + 2;
                for d in chain {
                    open_end = d.has_next();
                    let desc = Desc {
                        addr: d.addr().0,
                        len: d.len(),
                        writable: d.is_write_only(),
                    };
                    if self.descs.len() < cap {
                        self.descs.push(desc);
                    } else {
                        more += 1;
                        last = Some(desc);
                    }
                }
                let parsed = if open_end {
                    Parsed::Broken("the chain does not end: a loop, or a next index past the table")
                } else {
                    request::parse(&self.shape, &self.descs, more, last, &*mem)
                };
                let translated = match parsed {
                    Parsed::Submit(req) => {
                        translate(req.op, &self.descs, &self.serial, &mem, &mut self.pieces)
                    }
                    _ => Ok(()),
                };
                self.taken += 1;
                match (parsed, translated) {
                    (Parsed::Submit(req), Ok(())) => self.submit(head, req, &mem, write_through),
                    (Parsed::Submit(req), Err(status)) => {
                        self.refused(status, "data outside guest memory");
                        let _ = mem.write_obj(status as u8, GuestAddress(req.status_at));
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
                        let _ = mem.write_obj(status as u8, GuestAddress(status_at));
                        self.used.push((head, 1));
                    }
                    (Parsed::Broken(why), _) => {
                        self.break_ring(why);
                        return;
                    }
                }
            }
            return;
        }
    }

    /// The newest memory table this worker has taken.
    fn current(&self) -> Arc<Memory> {
        self.generations.back().expect("a generation").mem.clone()
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
    fn submit(&mut self, head: u16, req: request::Request, mem: &Arc<Memory>, write_through: bool) {
        let answer_now = |w: &mut Worker, status: BlkStatus, len: u32| {
            let _ = mem.write_obj(status as u8, GuestAddress(req.status_at));
            w.used.push((head, len));
        };
        if let Op::GetId { .. } = req.op {
            return answer_now(self, BlkStatus::Ok, req.used_len);
        }
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
            status_at: req.status_at,
            used_len: req.used_len,
            generation,
        });
        self.generations.back_mut().expect("a generation").in_flight += 1;
        self.in_flight += 1;
        let mut bio = match req.op {
            Op::Read { offset, .. } | Op::Write { offset, .. } => {
                let write = matches!(req.op, Op::Write { .. });
                let mut bio = Bio::at(if write { BioOp::Write } else { BioOp::Read }, offset);
                if write && write_through {
                    bio.set_flags(BioFlags::FUA);
                }
                for &(p, len) in &self.pieces {
                    // SAFETY: `p` points at `len` bytes of guest memory in a
                    // mapping this worker keeps (its generation counts the
                    // request) until the completion is reaped. The driver
                    // gave those bytes to the device for this request
                    // (virtio 2.7.13: it does not touch them until the used
                    // element appears); a driver that breaks that rule races
                    // only with itself, on its own memory.
                    let buf = unsafe { IoBuf::from_raw(p, len as usize) };
                    bio.push_segment(buf, 0, len);
                }
                bio
            }
            Op::Flush => Bio::flush(),
            Op::Discard { offset, len } => Bio::discard_at(offset, len),
            Op::WriteZeroes { offset, len, .. } => Bio::write_zeroes_at(offset, len),
            Op::GetId { .. } => unreachable!("answered above"),
        };
        bio.private = u64::from(slot);
        loop {
            match self.ctx.submit(bio) {
                Ok(()) => return,
                Err(e) => {
                    // Every slot of the context holds a completion nobody
                    // polled: reap them (their used elements wait for the
                    // ring), then submit the same bio again.
                    bio = e.into_bio();
                    let Worker { ctx, done, .. } = self;
                    let n = ctx.poll(|c| done.push((c.private() as u32, blk_status(c.status()))));
                    if n == 0 {
                        ctx.poll_wait_for(1, std::time::Duration::from_millis(10), |c| {
                            done.push((c.private() as u32, blk_status(c.status())))
                        });
                    }
                    self.answer_done();
                }
            }
        }
    }

    /// Poll the context and answer what completed.
    fn reap(&mut self, state: &mut VringState<AtomicMemory>) {
        let mem = self.current();
        let Worker { ctx, done, .. } = self;
        ctx.poll(|c| done.push((c.private() as u32, blk_status(c.status()))));
        self.answer_done();
        let queue = state.get_queue_mut();
        for (head, len) in self.used.drain(..) {
            self.added += 1;
            if queue.add_used(&*mem, head, len).is_err() {
                // A head outside the ring: the driver broke it.
                self.broken.get_or_insert("a used element outside the ring");
            }
        }
    }

    /// Write the status of each reaped completion; queue its used element.
    fn answer_done(&mut self) {
        let done = std::mem::take(&mut self.done);
        self.reaped += done.len() as u64;
        for &(slot, status) in &done {
            if let Some((f, generation)) = self.finish(slot) {
                let g = &self.generations[(generation - self.gen_base) as usize];
                let _ = g.mem.write_obj(status as u8, GuestAddress(f.status_at));
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

    /// Interrupt the driver if used elements were added and it wants them.
    fn notify(&mut self, state: &mut VringState<AtomicMemory>) {
        let mem = self.current();
        if self.added == 0 {
            return;
        }
        self.added = 0;
        let needs = state
            .get_queue_mut()
            .needs_notification(&*mem)
            .unwrap_or(true);
        if needs {
            let _ = state.signal_used_queue();
        }
    }
}

/// Resolve a request's data into host pieces (reads and writes), or write
/// the serial (GET_ID). IOERR for data outside guest memory.
fn translate(
    op: Op,
    descs: &[Desc],
    serial: &[u8; crate::virtio_blk::ID_LEN],
    mem: &Memory,
    pieces: &mut Vec<(NonNull<u8>, u32)>,
) -> Result<(), BlkStatus> {
    pieces.clear();
    match op {
        Op::Read { data, .. } | Op::Write { data, .. } => {
            for (addr, len) in data.pieces(descs) {
                // One region, as nearly every buffer lies: one lookup.
                if let Ok(s) = GuestMemoryBackend::get_slice(mem, GuestAddress(addr), len as usize)
                {
                    let p = NonNull::new(s.ptr_guard_mut().as_ptr()).ok_or(BlkStatus::IoErr)?;
                    pieces.push((p, len));
                    continue;
                }
                for s in GuestMemoryBackend::get_slices(mem, GuestAddress(addr), len as usize) {
                    let s = s.map_err(|_| BlkStatus::IoErr)?;
                    let p = NonNull::new(s.ptr_guard_mut().as_ptr()).ok_or(BlkStatus::IoErr)?;
                    pieces.push((p, s.len() as u32));
                }
            }
        }
        Op::GetId { id } => {
            let mut at = 0usize;
            for (addr, len) in id.pieces(descs) {
                let b = &serial[at..at + len as usize];
                mem.write_slice(b, GuestAddress(addr))
                    .map_err(|_| BlkStatus::IoErr)?;
                at += len as usize;
            }
        }
        _ => {}
    }
    Ok(())
}
