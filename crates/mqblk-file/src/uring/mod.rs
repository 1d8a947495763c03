//! The io_uring engine: one ring per hardware queue (the hardware queue's
//! submission and completion queues, as an NVMe queue pair would be).
//!
//! - `queue_rq` turns a request into ONE submission entry: READ/WRITE
//!   (READ_FIXED/WRITE_FIXED when the buffer comes from the registered
//!   arena), READV/WRITEV for a request of several segments, FSYNC
//!   (DATASYNC) for a flush, FALLOCATE for discard and write-zeroes. A FUA
//!   write carries RWF_DSYNC; a PREFLUSH write is preceded by a linked
//!   fdatasync. `user_data` is the tag, so completion needs no lookup and
//!   no allocation: per-tag slots hold the request and its iovecs.
//! - Entries are submitted once per batch (`last`, or `commit_rqs`), with
//!   GETEVENTS so that deferred completion work runs in the same system
//!   call.
//! - `poll` reaps the completion queue without a system call when it has
//!   entries; it enters the kernel only when the kernel flags pending task
//!   work (IORING_SQ_TASKRUN), or always with IOPOLL (the kernel polls the
//!   device inside the call).
//! - The interrupt line of `wait=poll` ([`UringQueue::irq_fd`]): an
//!   eventfd registered with the ring, which the kernel signals as it
//!   posts completions (and, on a DEFER_TASKRUN ring, as it queues their
//!   task work), so that a context's completion fd, and so an event loop
//!   or a future, sleeps until there is something to poll. Nobody reads it
//!   but `poll`, once it took completions, and only when the ring goes
//!   quiet: a `poll` that finds nothing, or that took the last request in
//!   flight, drains the eventfd, then takes what came in meanwhile and
//!   runs task work whose signal it drained. So the line is readable while
//!   a completion waits, quiet once nothing is in flight, and it wakes a
//!   sleeper at most once for completions already taken; a ring that
//!   completes something at every `poll` never reads it. No line with
//!   IOPOLL (completions appear only when the ring is polled) or
//!   COOP_TASKRUN (the kernel signals only once the sleeper itself runs
//!   the task work).
//! - A short read or write is resubmitted for the rest; a read that hits
//!   the end of the file is an I/O error.
//! - A timed-out request (Linux `->timeout`): its slot is marked, and an
//!   IORING_OP_ASYNC_CANCEL for its `user_data` (and its linked PREFLUSH)
//!   is submitted; the request completes with [`Status::Timeout`] when its
//!   own completion comes back (-ECANCELED, -EINTR, or whatever it ends
//!   with), because only then has the kernel let go of its buffers. Until
//!   then the timeout answers `ResetTimer`, and each later call sends the
//!   cancel again. A timed-out request is never retried or continued.
//! - On a file system whose requests wait for a server (FUSE, NFS, SMB,
//!   9p, Ceph), every entry carries IOSQE_ASYNC. io_uring would otherwise
//!   issue a read inline, in the submitting thread, and a FUSE read blocks
//!   there until the server answers (seen on Linux 6.18): the thread
//!   that should notice the timeout would be the one stuck. In an io-wq
//!   worker the read can be cancelled (the worker is signalled, FUSE
//!   sends FUSE_INTERRUPT to its server).
//!
//! Task-run modes, detected rather than assumed: SINGLE_ISSUER +
//! DEFER_TASKRUN (completion work runs only when the ring's one issuer
//! enters the kernel), else COOP_TASKRUN, else neither. A DEFER_TASKRUN
//! ring is created disabled and bound to the first thread that uses it; if
//! another thread uses the hardware queue later (contexts sharing it, or a
//! context that moved), new submissions wait until the ring is idle, and
//! the ring is then rebuilt without SINGLE_ISSUER (COOP_TASKRUN). The
//! in-flight I/O of the old issuer completes when that thread next polls
//! the queue (or exits): a context must not move to another thread with
//! I/O in flight on a DEFER_TASKRUN ring and then leave its old thread
//! idle forever; `taskrun=coop` avoids the question.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use mqblk_core::bio::{BioFlags, Op};
use mqblk_core::buf::BufRegion;
use mqblk_core::driver::{Completions, HwNotifier, RqRef, TimeoutAction};
use mqblk_core::error::Status;

use crate::config::WaitMode;
use crate::discover::{DiscardHow, TargetKind};
use crate::info::{note, Notes};
use crate::psync::PsyncQueue;
use crate::target::{fill_iovecs, Target, MAX_RETRIES, MAX_SEGMENTS};

mod irq;
mod ring;

use irq::{eventfd, Irq};
pub use ring::{build_ring, Flavor, RingConfig};

/// `user_data` bits above the tag: what the entry is.
const UD_MAIN: u64 = 0;
/// The fdatasync linked before a PREFLUSH write.
const UD_PREFLUSH: u64 = 1 << 32;
/// An IORING_OP_ASYNC_CANCEL for the request at the tag (its own result
/// is ignored: the cancelled request's completion is what counts).
const UD_CANCEL: u64 = 2 << 32;
/// Longest the ring's drop waits for stray in-flight I/O, in 100 ms steps.
const DROP_WAIT_STEPS: u32 = 100;
/// Most drains of the interrupt line per `poll` (see `quiet_line`).
const LINE_QUIET_ROUNDS: u32 = 4;

/// The name of the file system under `fd` if its requests wait for a
/// server (so an inline issue can block the submitting thread).
fn blocking_file_system(fd: RawFd) -> Option<&'static str> {
    // SAFETY: fstatfs writes one statfs into `st`, a zeroed local.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return None;
    }
    // Magic numbers from linux/magic.h and the file systems' sources.
    match st.f_type as u64 {
        0x6573_5546 => Some("FUSE"),
        0x6969 => Some("NFS"),
        0xFF53_4D42 | 0xFE53_4D42 => Some("SMB"),
        0x0102_1997 => Some("9p"),
        0x00C3_6400 => Some("Ceph"),
        _ => None,
    }
}

thread_local! {
    static TID: Cell<i32> = const { Cell::new(0) };
}

/// The calling thread's id, cached (no system call after the first).
#[inline]
fn tid() -> i32 {
    TID.with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        // SAFETY: gettid has no preconditions.
        let v = unsafe { libc::gettid() };
        t.set(v);
        v
    })
}

/// One in-flight request of the ring, at its tag.
#[derive(Debug, Default)]
struct Slot {
    rq: Option<RqRef>,
    /// Bytes already transferred (a short read or write continues here).
    done_bytes: u64,
    /// EAGAIN/EINTR retries so far.
    retries: u8,
    /// Outcome of the linked PREFLUSH, if it failed.
    status: Status,
    /// Timed out: cancel sent; its completion ends it with `Timeout`.
    timed_out: bool,
}

/// What a queue reports about its ring, for `mqblk info`.
#[derive(Clone, Debug)]
pub struct RingReport {
    /// The flavor in use.
    pub flavor: Flavor,
    /// Registered buffers in use.
    pub fixed_bufs: bool,
    /// Registered file in use.
    pub fixed_file: bool,
}

/// One hardware queue of the io_uring engine.
pub struct UringQueue {
    ring: IoUring,
    cfg: RingConfig,
    flavor: Flavor,
    target: Target,
    index: u16,
    /// The file is registered at index 0.
    fixed_file: bool,
    /// Registered buffers: (arena id, buffer index).
    fixed_bufs: Vec<(u16, u16)>,
    regions: Vec<BufRegion>,
    slots: Box<[Slot]>,
    /// MAX_SEGMENTS iovecs per tag, for vectored requests.
    iovecs: Box<[libc::iovec]>,
    /// Requests whose rest must be resubmitted (short or EAGAIN).
    resubmit: Vec<u32>,
    /// Requests on the ring (not the side queue).
    in_flight: u32,
    /// Entries pushed and not yet consumed by the kernel.
    unsubmitted: u32,
    /// The bound issuer of a SINGLE_ISSUER ring (0: not bound yet).
    owner: i32,
    /// Another thread wants the ring: take nothing new until it is idle.
    draining: bool,
    /// Operations the ring cannot carry (BLKDISCARD) run here.
    side: Option<PsyncQueue>,
    /// The helper thread's eventfd of `wait=sleep`.
    irq: Option<Irq>,
    /// The interrupt line of `wait=poll`: a non-blocking eventfd the ring
    /// signals (see the module's doc).
    line: Option<OwnedFd>,
    /// Completions were taken, or task work run, since the line was last
    /// drained: it may be readable for them.
    line_dirty: bool,
    notes: Notes,
    /// A polled I/O answered EOPNOTSUPP: drop IOPOLL at the next chance.
    iopoll_refused: bool,
    /// Every entry is issued from an io-wq worker (IOSQE_ASYNC): the
    /// file's requests may block the thread that issues them.
    force_async: bool,
}

// SAFETY: the ring's raw pointers (its mmaps, the iovecs handed to the
// kernel) are owned by this queue and move with it; the core reaches a
// hardware queue through &mut only, from one thread at a time.
unsafe impl Send for UringQueue {}

impl std::fmt::Debug for UringQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringQueue")
            .field("index", &self.index)
            .field("flavor", &self.flavor)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl UringQueue {
    /// Set up the ring of hardware queue `index`: `depth` tags, buffers
    /// from `regions`, the file registered.
    pub fn new(
        target: Target,
        cfg: RingConfig,
        index: u16,
        depth: usize,
        regions: &[BufRegion],
        hw: HwNotifier,
        notes: Notes,
    ) -> io::Result<UringQueue> {
        let (ring, flavor) = build_ring(&cfg, true)?;
        let side = match (target.kind, target.discard) {
            (TargetKind::Block, Some(DiscardHow::BlkDiscard)) => Some(PsyncQueue::new(
                target.clone(),
                index,
                1,
                depth,
                hw.clone(),
            )?),
            _ => None,
        };
        let irq = match cfg.wait {
            WaitMode::Sleep => Some(Irq::new(index, hw)?),
            WaitMode::Poll => None,
        };
        let line = if cfg.irq_line() {
            Some(eventfd(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)?)
        } else {
            None
        };
        let iovec0 = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut q = UringQueue {
            ring,
            cfg,
            flavor,
            target,
            index,
            fixed_file: false,
            fixed_bufs: Vec::new(),
            regions: regions.to_vec(),
            slots: (0..depth).map(|_| Slot::default()).collect(),
            iovecs: vec![iovec0; depth * MAX_SEGMENTS].into_boxed_slice(),
            resubmit: Vec::with_capacity(depth),
            in_flight: 0,
            unsubmitted: 0,
            owner: 0,
            draining: false,
            side,
            irq,
            line,
            line_dirty: false,
            notes,
            iopoll_refused: false,
            force_async: false,
        };
        if let Some(fs) = blocking_file_system(q.target.fd) {
            q.force_async = true;
            if index == 0 {
                note(
                    &q.notes,
                    format!(
                        "the file is on {fs}, whose requests wait for a server: I/O is issued \
                         from io_uring's workers (IOSQE_ASYNC), so a hung request can be \
                         cancelled"
                    ),
                );
            }
        }
        q.register()?;
        Ok(q)
    }

    /// Register the file, the buffer regions and the eventfd with the
    /// (new) ring. Files and buffers are optimisations: a failure is
    /// noted, not fatal.
    fn register(&mut self) -> io::Result<()> {
        let sub = self.ring.submitter();
        self.fixed_file = match sub.register_files(&[self.target.fd]) {
            Ok(()) => true,
            Err(e) => {
                note(
                    &self.notes,
                    format!("registered file not in use (IORING_REGISTER_FILES: {e})"),
                );
                false
            }
        };
        self.fixed_bufs.clear();
        if !self.regions.is_empty() {
            let iov: Vec<libc::iovec> = self
                .regions
                .iter()
                .map(|r| libc::iovec {
                    iov_base: r.addr as *mut libc::c_void,
                    iov_len: r.len,
                })
                .collect();
            // SAFETY: every region is a live buffer arena of the device's
            // pool; arenas outlive the hardware queues (the device drops
            // its queues before its pool, and an arena lives on while any
            // of its buffers does), and the kernel pins the pages.
            match unsafe { sub.register_buffers(&iov) } {
                Ok(()) => {
                    self.fixed_bufs = self
                        .regions
                        .iter()
                        .enumerate()
                        .map(|(i, r)| (r.arena_id, i as u16))
                        .collect();
                }
                Err(e) => note(
                    &self.notes,
                    format!(
                        "registered buffers not in use (IORING_REGISTER_BUFFERS of {} bytes: {e}; \
                     raise RLIMIT_MEMLOCK or lower fixed_bufs=)",
                        self.regions.iter().map(|r| r.len).sum::<usize>()
                    ),
                ),
            }
        }
        if let Some(irq) = &self.irq {
            sub.register_eventfd(irq.fd())?;
        }
        if let Some(line) = &self.line {
            sub.register_eventfd(line.as_raw_fd())?;
        }
        Ok(())
    }

    /// What this ring uses.
    pub fn report(&self) -> RingReport {
        RingReport {
            flavor: self.flavor,
            fixed_bufs: !self.fixed_bufs.is_empty(),
            fixed_file: self.fixed_file,
        }
    }

    /// The interrupt line of `wait=poll` (see the module's doc), the same
    /// for the queue's life: a rebuilt ring is registered with it again.
    pub fn irq_fd(&self) -> Option<RawFd> {
        self.line.as_ref().map(|l| l.as_raw_fd())
    }

    /// Requests taken and not yet given back.
    pub fn in_flight(&self) -> u32 {
        self.in_flight + self.side.as_ref().map_or(0, |s| s.in_flight())
    }

    /// May this thread submit on the ring now? Binds a fresh
    /// SINGLE_ISSUER ring to its first user, and rebuilds it for a second
    /// one once it is idle.
    #[inline]
    fn usable(&mut self) -> bool {
        if self.flavor != Flavor::Defer {
            return true;
        }
        let me = tid();
        if self.owner == me && !self.draining {
            return true;
        }
        self.bind_slow(me)
    }

    #[cold]
    fn bind_slow(&mut self, me: i32) -> bool {
        if self.owner == 0 {
            match self.ring.submitter().register_enable_rings() {
                Ok(()) => {
                    self.owner = me;
                    return true;
                }
                Err(e) => {
                    note(&self.notes, format!("enabling the ring failed ({e})"));
                    return self.rebuild(me);
                }
            }
        }
        if self.in_flight == 0 && self.unsubmitted == 0 {
            return self.rebuild(me);
        }
        self.draining = true;
        false
    }

    /// Replace the idle ring by one without SINGLE_ISSUER.
    #[cold]
    fn rebuild(&mut self, me: i32) -> bool {
        if !self.replace_ring(false, me) {
            return false;
        }
        note(
            &self.notes,
            format!(
                "hardware queue {} was used by a second thread: its ring was rebuilt with {}",
                self.index,
                self.flavor.describe()
            ),
        );
        true
    }

    /// Build a new ring from `self.cfg` (nothing may be in flight on the
    /// old one), register with it, and bind it to `me` if it is
    /// SINGLE_ISSUER.
    #[cold]
    fn replace_ring(&mut self, allow_defer: bool, me: i32) -> bool {
        debug_assert_eq!(self.unsubmitted, 0);
        let (ring, flavor) = match build_ring(&self.cfg, allow_defer) {
            Ok(r) => r,
            Err(e) => {
                note(
                    &self.notes,
                    format!(
                        "hardware queue {}: rebuilding the ring failed ({e})",
                        self.index
                    ),
                );
                return false;
            }
        };
        self.ring = ring;
        self.flavor = flavor;
        self.owner = 0;
        self.draining = false;
        if let Err(e) = self.register() {
            note(
                &self.notes,
                format!("registering with the rebuilt ring failed ({e})"),
            );
        }
        if flavor == Flavor::Defer {
            if self.ring.submitter().register_enable_rings().is_err() {
                return false;
            }
            self.owner = me;
        }
        true
    }

    /// The first polled read or write answered EOPNOTSUPP: the file cannot
    /// be polled after all. Let the rest of the ring's I/O finish, then
    /// carry on with a ring without IOPOLL, resubmitting what failed.
    #[cold]
    fn drop_iopoll(&mut self, done: &mut Completions<'_>) {
        let mut steps = 0u32;
        while self.in_flight as usize > self.resubmit.len() && steps < 100_000 {
            steps += 1;
            self.getevents();
            self.reap(done);
        }
        if self.in_flight as usize > self.resubmit.len() {
            return;
        }
        self.cfg.iopoll = false;
        if self.replace_ring(true, tid()) {
            note(
                &self.notes,
                format!(
                    "iopoll=1: the first polled I/O answered EOPNOTSUPP; hardware queue {} \
                     fell back to interrupt-driven completions",
                    self.index
                ),
            );
        } else {
            self.cfg.iopoll = true;
        }
    }

    /// Issue `rq`. Busy when the submission queue is full or the ring is
    /// changing hands.
    #[inline]
    pub fn queue_rq(&mut self, rq: RqRef, last: bool) -> Result<(), RqRef> {
        let op = rq.op();
        if let Some(side) = self.side.as_mut() {
            if op == Op::Discard {
                side.queue(rq, last);
                if last {
                    self.submit();
                }
                return Ok(());
            }
        }
        if !self.usable() {
            return Err(rq);
        }
        let need = if op == Op::Write && rq.flags().contains(BioFlags::PREFLUSH) {
            2
        } else {
            1
        };
        if !self.sq_has_room(need) {
            self.submit();
            if !self.sq_has_room(need) {
                return Err(rq);
            }
        }
        let tag = rq.tag() as usize;
        debug_assert!(tag < self.slots.len(), "tag {tag} beyond the ring's slots");
        let slot = &mut self.slots[tag];
        debug_assert!(slot.rq.is_none(), "tag {tag} already in flight");
        *slot = Slot {
            rq: Some(rq),
            done_bytes: 0,
            retries: 0,
            status: Status::Ok,
            timed_out: false,
        };
        let extra = if self.force_async {
            squeue::Flags::ASYNC
        } else {
            squeue::Flags::empty()
        };
        if need == 2 {
            let e = self
                .fsync_entry(UD_PREFLUSH | tag as u64)
                .flags(squeue::Flags::IO_LINK | extra);
            self.push(&e);
        }
        let e = self.entry(tag).flags(extra);
        self.push(&e);
        self.in_flight += 1;
        if last {
            self.submit();
        }
        Ok(())
    }

    #[inline]
    fn sq_has_room(&mut self, need: usize) -> bool {
        let sq = self.ring.submission();
        sq.capacity() - sq.len() >= need
    }

    #[inline]
    fn push(&mut self, e: &squeue::Entry) {
        // SAFETY: every entry built by `entry`/`fsync_entry` points only at
        // memory that outlives the operation: the request's segments (the
        // request is held in its slot until its completion is reaped) and
        // the slot's iovecs (owned by this queue, which waits for in-flight
        // I/O before it is dropped).
        let r = unsafe { self.ring.submission().push(e) };
        debug_assert!(r.is_ok(), "room was checked");
        self.unsubmitted += 1;
    }

    fn fsync_entry(&self, ud: u64) -> squeue::Entry {
        let f = types::FsyncFlags::DATASYNC;
        if self.fixed_file {
            opcode::Fsync::new(types::Fixed(0)).flags(f).build()
        } else {
            opcode::Fsync::new(types::Fd(self.target.fd))
                .flags(f)
                .build()
        }
        .user_data(ud)
    }

    /// The submission entry for the request at `tag`, from its
    /// `done_bytes` on.
    #[inline]
    fn entry(&mut self, tag: usize) -> squeue::Entry {
        let slot = &mut self.slots[tag];
        let skip = slot.done_bytes;
        let rq = slot.rq.as_mut().expect("slot holds its request");
        let op = rq.op();
        let ud = UD_MAIN | tag as u64;
        let fd = self.target.fd;
        let fixed_file = self.fixed_file;
        macro_rules! with_fd {
            ($f:ident => $e:expr) => {
                if fixed_file {
                    let $f = types::Fixed(0);
                    $e
                } else {
                    let $f = types::Fd(fd);
                    $e
                }
            };
        }
        match op {
            Op::Read | Op::Write => {
                let offset = rq.offset_bytes() + skip;
                let rw_flags = if op == Op::Write && rq.flags().contains(BioFlags::FUA) {
                    libc::RWF_DSYNC
                } else {
                    0
                };
                let base = tag * MAX_SEGMENTS;
                let iov = &mut self.iovecs[base..base + MAX_SEGMENTS];
                let (n, arena) = fill_iovecs(rq, skip, iov);
                if n == 1 {
                    let (ptr, len) = (iov[0].iov_base.cast::<u8>(), iov[0].iov_len as u32);
                    let fixed = arena.and_then(|a| {
                        self.fixed_bufs
                            .iter()
                            .find(|(id, _)| *id == a)
                            .map(|&(_, i)| i)
                    });
                    match (op, fixed) {
                        (Op::Read, Some(i)) => with_fd!(f => opcode::ReadFixed::new(f, ptr, len, i)
                            .offset(offset)
                            .build()),
                        (Op::Read, None) => with_fd!(f => opcode::Read::new(f, ptr, len)
                            .offset(offset)
                            .build()),
                        (_, Some(i)) => with_fd!(f => opcode::WriteFixed::new(f, ptr, len, i)
                            .offset(offset)
                            .rw_flags(rw_flags)
                            .build()),
                        (_, None) => with_fd!(f => opcode::Write::new(f, ptr, len)
                            .offset(offset)
                            .rw_flags(rw_flags)
                            .build()),
                    }
                } else {
                    // n == 0 only if the request has more segments than
                    // the limit the core enforces; the kernel answers
                    // EINVAL for an empty vector, which reaches the caller.
                    let p = iov.as_ptr();
                    if op == Op::Read {
                        with_fd!(f => opcode::Readv::new(f, p, n as u32).offset(offset).build())
                    } else {
                        with_fd!(f => opcode::Writev::new(f, p, n as u32)
                            .offset(offset)
                            .rw_flags(rw_flags)
                            .build())
                    }
                }
            }
            Op::Flush => return self.fsync_entry(ud),
            Op::Discard | Op::WriteZeroes => {
                let (offset, len) = (rq.offset_bytes(), rq.len_bytes());
                // The driver checked that the op has a fallocate mode.
                let mode = self.target.fallocate_mode(op).unwrap_or(0);
                with_fd!(f => opcode::Fallocate::new(f, len)
                    .offset(offset)
                    .mode(mode)
                    .build())
            }
        }
        .user_data(ud)
    }

    /// Hand the pushed entries to the kernel (one system call), running
    /// deferred completion work in the same call.
    #[inline]
    pub fn submit(&mut self) {
        if let Some(side) = self.side.as_mut() {
            side.commit();
        }
        if self.unsubmitted == 0 {
            return;
        }
        if self.cfg.sqpoll_idle_ms.is_some() {
            // The kernel thread consumes the queue; a system call only if
            // it went to sleep.
            if self.ring.submitter().submit().is_ok() {
                self.unsubmitted = 0;
            }
            return;
        }
        if self.flavor == Flavor::Defer && self.owner != tid() {
            return;
        }
        let flags = io_uring::EnterFlags::GETEVENTS.bits();
        // SAFETY: no argument is passed; the entries were pushed with valid
        // memory (see `push`).
        let r = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(self.unsubmitted, 0, flags, None)
        };
        if let Ok(n) = r {
            self.unsubmitted -= (n as u32).min(self.unsubmitted);
        }
        // EAGAIN/EBUSY/EINTR: the entries stay queued and the next
        // submit or poll tries again.
    }

    /// Reap completions into `done`.
    #[inline]
    pub fn poll(&mut self, done: &mut Completions<'_>) -> usize {
        let mut n = match self.side.as_mut() {
            Some(side) => side.poll(done),
            None => 0,
        };
        if self.in_flight == 0 {
            if self.line_dirty {
                n += self.quiet_line(done);
            }
            return n;
        }
        if self.unsubmitted > 0 {
            self.submit();
        }
        n += self.reap(done);
        if n == 0 && self.should_enter() {
            self.getevents();
            n += self.reap(done);
        }
        // While every poll finds completions the line is left alone: a
        // waiter that wakes for it finds completions, or quiets it.
        if self.line_dirty && (n == 0 || self.in_flight == 0) {
            n += self.quiet_line(done);
        }
        if self.iopoll_refused {
            self.iopoll_refused = false;
            let before = done.len();
            self.drop_iopoll(done);
            n += done.len() - before;
        }
        if !self.resubmit.is_empty() {
            self.resubmit_pending();
        }
        n
    }

    /// Block until the completion queue has an entry or `timeout` passes:
    /// one `io_uring_enter(GETEVENTS, min_complete=1)` with a timeout, as
    /// fio waits. False when this thread may not wait on the ring (a
    /// DEFER_TASKRUN ring owned by another thread).
    pub fn wait(&mut self, timeout: std::time::Duration) -> bool {
        if self.in_flight == 0 || !self.ring.completion().is_empty() {
            return true;
        }
        if self.flavor == Flavor::Defer && self.owner != tid() {
            return false;
        }
        if self.cfg.sqpoll_idle_ms.is_some() {
            return false;
        }
        let ts = io_uring::types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = io_uring::types::SubmitArgs::new().timespec(&ts);
        // Submits anything still queued and waits for one completion;
        // ETIME (timeout) and EINTR are fine: the caller polls again.
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(n) => {
                self.unsubmitted -= (n as u32).min(self.unsubmitted);
                true
            }
            Err(e)
                if e.raw_os_error() == Some(libc::ETIME)
                    || e.raw_os_error() == Some(libc::EINTR) =>
            {
                true
            }
            Err(_) => false,
        }
    }

    /// Must we enter the kernel for completions to show up?
    #[inline]
    fn should_enter(&mut self) -> bool {
        if self.cfg.iopoll {
            return true;
        }
        match self.flavor {
            Flavor::Plain => false,
            Flavor::Coop => self.ring.submission().taskrun(),
            Flavor::Defer => self.owner == tid() && self.ring.submission().taskrun(),
        }
    }

    #[inline]
    fn getevents(&mut self) {
        let flags = io_uring::EnterFlags::GETEVENTS.bits();
        // SAFETY: no submissions and no argument; only runs completion
        // work and (IOPOLL) polls the device.
        let _ = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(0, 0, flags, None)
        };
        // The task work it ran signalled the line, completions or not.
        self.line_dirty = self.line.is_some();
    }

    /// Quiet the interrupt line after `poll` took completions, once the
    /// ring goes quiet (see the module's doc): drain the eventfd, then take what was posted in the
    /// meantime and run the task work that was queued (its signal went
    /// with the drain). Anything taken may have signalled after the
    /// drain: go round again, a bounded number of times (past that the
    /// line stays marked, and the next `poll` quiets it). Returns the
    /// requests completed.
    fn quiet_line(&mut self, done: &mut Completions<'_>) -> usize {
        let mut n = 0;
        for _ in 0..LINE_QUIET_ROUNDS {
            let Some(line) = &self.line else {
                self.line_dirty = false;
                return n;
            };
            self.line_dirty = false;
            let mut count = 0u64;
            // SAFETY: read writes 8 bytes into `count`, a live local; the
            // eventfd is non-blocking (EAGAIN: it was quiet already).
            unsafe { libc::read(line.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
            n += self.reap(done);
            if self.should_enter() {
                self.getevents();
                n += self.reap(done);
            }
            if !self.line_dirty {
                break;
            }
        }
        n
    }

    #[inline]
    fn reap(&mut self, done: &mut Completions<'_>) -> usize {
        let mut n = 0;
        let iopoll = self.cfg.iopoll;
        let Self {
            ring,
            slots,
            resubmit,
            in_flight,
            iopoll_refused,
            line,
            line_dirty,
            ..
        } = self;
        let mut cq = ring.completion();
        // Each completion posted signalled the line.
        *line_dirty |= line.is_some() && !cq.is_empty();
        for cqe in &mut cq {
            let ud = cqe.user_data();
            let res = cqe.result();
            let tag = (ud & 0xffff_ffff) as usize;
            debug_assert!(tag < slots.len(), "completion for unknown tag {tag}");
            if ud & UD_CANCEL != 0 {
                continue;
            }
            let slot = &mut slots[tag];
            if ud & UD_PREFLUSH != 0 {
                if res < 0 {
                    slot.status = Status::from_errno(-res);
                }
                continue;
            }
            let Some(rq) = slot.rq.as_ref() else {
                debug_assert!(false, "completion for idle tag {tag}");
                continue;
            };
            let status = match rq.op() {
                // Whatever it ended with, the core has given up on it.
                _ if slot.timed_out => Status::Timeout,
                Op::Read | Op::Write if res >= 0 => {
                    slot.done_bytes += res as u64;
                    if slot.done_bytes >= rq.len_bytes() {
                        slot.status
                    } else if res == 0 {
                        // End of file (truncated under us) or of device:
                        // never pass a short transfer off as success.
                        Status::IoError
                    } else {
                        debug_assert!(resubmit.len() < resubmit.capacity());
                        resubmit.push(tag as u32);
                        continue;
                    }
                }
                Op::Read | Op::Write
                    if (res == -libc::EAGAIN
                        || res == -libc::EINTR
                        || (res == -libc::EOPNOTSUPP && iopoll))
                        && slot.retries < MAX_RETRIES
                        && slot.status.is_ok() =>
                {
                    *iopoll_refused |= res == -libc::EOPNOTSUPP;
                    slot.retries += 1;
                    debug_assert!(resubmit.len() < resubmit.capacity());
                    resubmit.push(tag as u32);
                    continue;
                }
                _ if !slot.status.is_ok() => slot.status,
                _ if res < 0 => Status::from_errno(-res),
                _ => Status::Ok,
            };
            let rq = slot.rq.take().expect("checked above");
            debug_assert!(*in_flight > 0);
            *in_flight -= 1;
            done.complete(rq, status);
            n += 1;
        }
        n
    }

    /// Request `tag` has timed out (see the module's doc).
    #[cold]
    pub fn timeout(&mut self, tag: u32, done: &mut Completions<'_>) -> TimeoutAction {
        let t = tag as usize;
        let on_ring = self.slots.get(t).is_some_and(|s| s.rq.is_some());
        if !on_ring {
            // A discard on the side queue, or finished and not yet reaped.
            return match self.side.as_mut() {
                Some(side) => side.timeout(tag, done),
                None => TimeoutAction::ResetTimer,
            };
        }
        // Waiting to be resubmitted (short or EAGAIN): nothing of it is in
        // the kernel, so it ends here.
        if let Some(pos) = self.resubmit.iter().position(|&r| r == tag) {
            self.resubmit.swap_remove(pos);
            let rq = self.slots[t].rq.take().expect("checked above");
            debug_assert!(self.in_flight > 0);
            self.in_flight -= 1;
            done.complete(rq, Status::Timeout);
            return TimeoutAction::Done;
        }
        self.slots[t].timed_out = true;
        let preflush = self.slots[t]
            .rq
            .as_ref()
            .is_some_and(|rq| rq.op() == Op::Write && rq.flags().contains(BioFlags::PREFLUSH));
        let targets = [UD_MAIN | u64::from(tag), UD_PREFLUSH | u64::from(tag)];
        let n = if preflush { 2 } else { 1 };
        for &ud in &targets[..n] {
            if !self.sq_has_room(1) {
                self.submit();
                if !self.sq_has_room(1) {
                    // Asked again next period.
                    break;
                }
            }
            let e = opcode::AsyncCancel::new(ud)
                .build()
                .user_data(UD_CANCEL | u64::from(tag));
            self.push(&e);
        }
        self.submit();
        // The kernel holds it until the cancel (or the I/O) lands.
        match self.slots[t].rq.as_ref() {
            Some(rq) => TimeoutAction::Held(mqblk_core::Overdue::of(rq)),
            None => TimeoutAction::ResetTimer,
        }
    }

    #[cold]
    fn resubmit_pending(&mut self) {
        while let Some(&tag) = self.resubmit.last() {
            if !self.sq_has_room(1) {
                self.submit();
                if !self.sq_has_room(1) {
                    break;
                }
            }
            self.resubmit.pop();
            let mut e = self.entry(tag as usize);
            if self.force_async {
                e = e.flags(squeue::Flags::ASYNC);
            }
            self.push(&e);
        }
        self.submit();
    }
}

impl Drop for UringQueue {
    fn drop(&mut self) {
        // The core drains every context before a device goes, so nothing
        // should be in flight; if something is, the kernel may still write
        // into its buffers, so wait for it (bounded) and leak what never
        // came back rather than free memory under the kernel.
        let mut steps = 0;
        while self.in_flight > 0 && steps < DROP_WAIT_STEPS {
            steps += 1;
            if self.flavor == Flavor::Defer && self.owner != tid() {
                break;
            }
            let ts = types::Timespec::new().nsec(100_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            let cq: Vec<cqueue::Entry> = self.ring.completion().collect();
            for cqe in cq {
                let tag = (cqe.user_data() & 0xffff_ffff) as usize;
                // The request cannot go back to a core that is gone; an
                // RqRef owns nothing, so letting go of it frees nothing.
                let ended = cqe.user_data() >> 32 == UD_MAIN
                    && self
                        .slots
                        .get_mut(tag)
                        .is_some_and(|s| s.rq.take().is_some());
                if ended {
                    self.in_flight -= 1;
                }
            }
        }
        if self.in_flight > 0 {
            // The kernel may still read these iovecs: never free them.
            let iovecs = std::mem::take(&mut self.iovecs);
            std::mem::forget(iovecs);
        }
    }
}
