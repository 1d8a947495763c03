//! The data half: one thread with its own cloned `/dev/fuse` descriptor
//! and its own mqblk [`Context`]. It reads requests without blocking
//! while it has free slots, turns each read and write into one bio whose
//! one segment is the slot's buffer (a write's data is read from the
//! kernel straight onto a page boundary of that buffer; a read's data is
//! read by the device into it and sent back with one `writev` of the
//! header and the buffer: no copy in between), and answers completions in
//! the order the device finishes them. It sleeps in poll(2) on the
//! descriptor and the context's completion fd.
//!
//! Requests the layer cannot take as they are (an offset or a length off
//! the device's logical block) take the slow path: a blocking
//! read(-modify-write) of the blocks around them through a bounce buffer;
//! the read-modify-writes of all threads are serialized, so two of them on
//! one block cannot lose either's bytes.

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use mqblk_core::{Bio, Context, Device, IoBuf, Op as BioOp, Status};

use crate::abi::{falloc, fattr, fopen, whence, WRITE_PREFIX_LEN};
use crate::reply::{self, Attr, InitOut, StatFs};
use crate::request::{self, Header, Op, Parsed};
use crate::seek::{self, Seek};

/// Memory page size: a write's data lands on a page boundary.
pub(crate) const PAGE: usize = 4096;

/// What every thread of an export shares (set up once; the hot path reads
/// it and takes no lock).
pub(crate) struct Shared {
    pub(crate) dev: Device,
    pub(crate) read_only: bool,
    pub(crate) capacity: u64,
    pub(crate) block: u64,
    pub(crate) max_write: u32,
    pub(crate) discard: bool,
    pub(crate) init: InitOut,
    /// The file's attributes (GETATTR and SETATTR only).
    pub(crate) attr: Mutex<Attr>,
    /// The slow path's read-modify-writes, one at a time.
    pub(crate) rmw: Mutex<()>,
    /// Leave once the requests in flight are answered, even if the
    /// connection lives (a user holds the detached file).
    pub(crate) quit: AtomicBool,
}

impl Shared {
    /// The attributes of a fresh export: the device's size, the original
    /// file's owner and times, 0644 (0444 read-only).
    pub(crate) fn attr_of(meta: &std::fs::Metadata, capacity: u64, read_only: bool) -> Attr {
        use std::os::unix::fs::MetadataExt;
        Attr {
            ino: crate::abi::ROOT_ID,
            size: capacity,
            blocks: capacity.div_ceil(512),
            atime: (meta.atime() as u64, meta.atime_nsec() as u32),
            mtime: (meta.mtime() as u64, meta.mtime_nsec() as u32),
            ctime: (meta.ctime() as u64, meta.ctime_nsec() as u32),
            mode: libc::S_IFREG | if read_only { 0o444 } else { 0o644 },
            uid: meta.uid(),
            gid: meta.gid(),
            blksize: PAGE as u32,
        }
    }
}

/// What a slot's request waits for.
#[derive(Clone, Copy)]
enum Pending {
    /// Its data: `len` bytes of the slot's buffer, after the header.
    Read { len: u32 },
    /// `fuse_write_out` with `len`.
    Write { len: u32 },
    /// A bare header (fsync).
    Done,
}

/// A request slot: free, or holding the request its bio serves.
#[derive(Clone, Copy)]
enum Slot {
    Free,
    InFlight { unique: u64, pending: Pending },
}

/// Counters of one thread, summed when it ends.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WorkerEnd {
    /// Requests answered.
    pub(crate) requests: u64,
    /// Requests answered with an error (ENOSYS, the kernel's probing,
    /// aside).
    pub(crate) errors: u64,
    /// Requests still in flight after the drain (their buffers leaked).
    pub(crate) abandoned: u32,
}

/// One thread's descriptor, context and slots.
pub(crate) struct Worker {
    fd: OwnedFd,
    ctx: Context,
    shared: Arc<Shared>,
    /// Each slot's buffer: a page before the data, for the header.
    bufs: Vec<IoBuf>,
    base: Vec<NonNull<u8>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    in_flight: u32,
    done: Vec<(u32, Status)>,
    /// The slow path's buffer, made at its first use.
    bounce: Option<IoBuf>,
    /// The connection ended (ENODEV).
    gone: bool,
    said_broken: bool,
    id: usize,
    /// Counted here, summed when the thread ends (no shared line written
    /// per request).
    requests: u64,
    errors: u64,
}

// SAFETY: the raw pointers point into `bufs`, which the worker owns and
// which move with it; nothing else holds them between calls.
unsafe impl Send for Worker {}

/// Why a read of `/dev/fuse` gave nothing.
enum NoRequest {
    Empty,
    Gone,
}

impl Worker {
    /// A worker on `fd` and `ctx` with `depth` slots.
    pub(crate) fn new(
        fd: OwnedFd,
        ctx: Context,
        shared: Arc<Shared>,
        depth: usize,
        id: usize,
    ) -> std::io::Result<Worker> {
        // SAFETY: `fd` is open; F_GETFL/F_SETFL only change its flags.
        unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let size = PAGE + shared.max_write as usize;
        let bufs: Vec<IoBuf> = (0..depth).map(|_| IoBuf::page_aligned(size)).collect();
        let base = bufs
            .iter()
            .map(|b| NonNull::new(b.as_ptr()).expect("an IoBuf is never null"))
            .collect();
        Ok(Worker {
            fd,
            ctx,
            shared,
            bufs,
            base,
            slots: vec![Slot::Free; depth],
            free: (0..depth as u32).rev().collect(),
            in_flight: 0,
            done: Vec::with_capacity(depth),
            bounce: None,
            gone: false,
            said_broken: false,
            id,
            requests: 0,
            errors: 0,
        })
    }

    /// Serve until the connection ends (or [`Shared::quit`]), then drain.
    pub(crate) fn run(mut self) -> WorkerEnd {
        let completion_fd = match self.ctx.completion_fd() {
            Ok(fd) => fd,
            Err(e) => {
                eprintln!("mqblk serve: FUSE thread {}: {e}", self.id);
                -1
            }
        };
        loop {
            let took = self.take_requests();
            self.ctx.unplug();
            let reaped = self.reap();
            let quit = self.shared.quit.load(Ordering::Acquire);
            if (self.gone || quit) && self.in_flight == 0 {
                break;
            }
            if took == 0 && reaped == 0 {
                self.sleep(completion_fd, quit);
            }
        }
        let abandoned = self.drain(Duration::from_secs(1));
        if abandoned > 0 {
            // The device may still write into the buffers: keep them.
            for b in std::mem::take(&mut self.bufs) {
                std::mem::forget(b);
            }
        }
        WorkerEnd {
            requests: self.requests,
            errors: self.errors,
            abandoned,
        }
    }

    /// Wait for a request (while a slot is free) or a completion, 100 ms
    /// at most, so that a quit is seen.
    fn sleep(&mut self, completion_fd: i32, quit: bool) {
        let listen = !self.gone && !quit && !self.free.is_empty();
        let mut fds = [
            libc::pollfd {
                fd: if listen { self.fd.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: completion_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is an array of two pollfds that outlives the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 100) };
    }

    /// Read and serve requests while slots are free; how many were read.
    fn take_requests(&mut self) -> usize {
        let mut took = 0;
        while !self.gone && !self.shared.quit.load(Ordering::Relaxed) {
            let Some(&slot) = self.free.last() else { break };
            match self.read_request(slot) {
                Ok(n) => {
                    took += 1;
                    self.handle(slot, n);
                }
                Err(NoRequest::Empty) => break,
                Err(NoRequest::Gone) => self.gone = true,
            }
        }
        took
    }

    /// Where slot `slot`'s message starts: so that a write's data lands on
    /// the page boundary at [`PAGE`].
    fn msg_ptr(&self, slot: u32) -> *mut u8 {
        debug_assert!((slot as usize) < self.base.len());
        // SAFETY: each buffer is PAGE + max_write bytes; PAGE - 80 is
        // inside it.
        unsafe {
            self.base[slot as usize]
                .as_ptr()
                .add(PAGE - WRITE_PREFIX_LEN)
        }
    }

    /// The data area of slot `slot` (after the page that holds a header).
    fn data_ptr(&self, slot: u32) -> NonNull<u8> {
        debug_assert!((slot as usize) < self.base.len());
        // SAFETY: PAGE is inside the buffer of PAGE + max_write bytes.
        unsafe { self.base[slot as usize].add(PAGE) }
    }

    fn read_request(&mut self, slot: u32) -> Result<usize, NoRequest> {
        let len = WRITE_PREFIX_LEN + self.shared.max_write as usize;
        loop {
            // SAFETY: the slot is free (no bio points into its buffer), and
            // `len` bytes from PAGE - 80 end at the buffer's end.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), self.msg_ptr(slot).cast(), len) };
            if n >= 0 {
                return Ok(n as usize);
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // ENOENT: the request was interrupted before it was read.
                Some(libc::EAGAIN) | Some(libc::ENOENT) => return Err(NoRequest::Empty),
                Some(libc::ENODEV) => return Err(NoRequest::Gone),
                _ => {
                    eprintln!(
                        "mqblk serve: FUSE thread {}: reading /dev/fuse: {}",
                        self.id,
                        std::io::Error::last_os_error()
                    );
                    return Err(NoRequest::Gone);
                }
            }
        }
    }

    /// Send a reply made of `parts`; a connection that ended is noted.
    fn send(&mut self, parts: &[&[u8]]) {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3];
        debug_assert!(parts.len() <= iov.len());
        for (v, p) in iov.iter_mut().zip(parts) {
            v.iov_base = p.as_ptr() as *mut libc::c_void;
            v.iov_len = p.len();
        }
        // SAFETY: each iovec points at a live slice of its length.
        let r = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), parts.len() as i32) };
        if r < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                // The request was interrupted, or the connection aborted.
                Some(libc::ENOENT) => {}
                Some(libc::ENODEV) => self.gone = true,
                _ => eprintln!(
                    "mqblk serve: FUSE thread {}: replying: {}",
                    self.id,
                    std::io::Error::last_os_error()
                ),
            }
        }
    }

    fn reply_err(&mut self, unique: u64, errno: i32) {
        self.requests += 1;
        // ENOSYS is the kernel probing for what the export serves.
        if errno != 0 && errno != libc::ENOSYS {
            self.errors += 1;
        }
        let h = reply::header(unique, errno, 0);
        self.send(&[&h]);
    }

    fn reply(&mut self, unique: u64, body: &[u8]) {
        self.requests += 1;
        let h = reply::header(unique, 0, body.len());
        self.send(&[&h, body]);
    }

    fn handle(&mut self, slot: u32, n: usize) {
        // SAFETY: the read gave `n` bytes at the slot's message start, in
        // its buffer; the slot is free, so nothing else touches them.
        let msg = unsafe { std::slice::from_raw_parts(self.msg_ptr(slot), n) };
        match request::parse(msg) {
            Parsed::Request(h, op) => self.serve(slot, h, op),
            Parsed::Malformed(h, why) => {
                self.say_broken(why);
                self.reply_err(h.unique, libc::EINVAL);
            }
            Parsed::Broken(why) => self.say_broken(why),
        }
    }

    fn say_broken(&mut self, why: &str) {
        if !self.said_broken {
            eprintln!(
                "mqblk serve: FUSE thread {}: a message from the kernel could not be read: {why}",
                self.id
            );
            self.said_broken = true;
        }
    }

    fn aligned(&self, offset: u64, len: u64) -> bool {
        offset.is_multiple_of(self.shared.block) && len.is_multiple_of(self.shared.block)
    }

    fn serve(&mut self, slot: u32, h: Header, op: Op) {
        let u = h.unique;
        let ro = self.shared.read_only;
        let cap = self.shared.capacity;
        match op {
            Op::Init {
                major,
                minor,
                flags,
                max_readahead,
            } => {
                if major != crate::abi::KERNEL_VERSION {
                    return self.reply_err(u, libc::EPROTO);
                }
                let mut out = reply::negotiate(minor, flags, self.shared.init);
                out.max_readahead = max_readahead;
                self.reply(u, &reply::init(&out));
            }
            Op::Destroy => self.reply_err(u, 0),
            Op::Forget | Op::Interrupt => {}
            Op::GetAttr => {
                let a = *self.shared.attr.lock().unwrap_or_else(|e| e.into_inner());
                self.reply(u, &reply::attr(&a, 1));
            }
            Op::SetAttr(sa) => {
                if sa.valid & fattr::SIZE != 0 && sa.size != cap {
                    // The device's size is fixed.
                    return self.reply_err(u, libc::EINVAL);
                }
                let a = {
                    let mut a = self.shared.attr.lock().unwrap_or_else(|e| e.into_inner());
                    let now = SystemTime::now()
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .unwrap_or_default();
                    let now = (now.as_secs(), now.subsec_nanos());
                    if sa.valid & fattr::MODE != 0 {
                        a.mode = libc::S_IFREG | (sa.mode & 0o7777);
                    }
                    if sa.valid & fattr::UID != 0 {
                        a.uid = sa.uid;
                    }
                    if sa.valid & fattr::GID != 0 {
                        a.gid = sa.gid;
                    }
                    if sa.valid & fattr::ATIME_NOW != 0 {
                        a.atime = now;
                    } else if sa.valid & fattr::ATIME != 0 {
                        a.atime = sa.atime;
                    }
                    if sa.valid & fattr::MTIME_NOW != 0 {
                        a.mtime = now;
                    } else if sa.valid & fattr::MTIME != 0 {
                        a.mtime = sa.mtime;
                    }
                    a.ctime = if sa.valid & fattr::CTIME != 0 {
                        sa.ctime
                    } else {
                        now
                    };
                    *a
                };
                self.reply(u, &reply::attr(&a, 1));
            }
            Op::Open { flags } => {
                if ro && (flags as i32 & libc::O_ACCMODE) != libc::O_RDONLY {
                    return self.reply_err(u, libc::EROFS);
                }
                self.reply(
                    u,
                    &reply::open(fopen::DIRECT_IO | fopen::PARALLEL_DIRECT_WRITES),
                );
            }
            Op::Read { offset, size } => {
                if offset >= cap || size == 0 {
                    return self.reply(u, &[]);
                }
                let len = u64::from(size.min(self.shared.max_write)).min(cap - offset) as u32;
                if self.aligned(offset, u64::from(len)) {
                    self.submit_rw(slot, u, BioOp::Read, offset, len);
                } else {
                    self.slow_read(u, offset, len);
                }
            }
            Op::Write { offset, size } => {
                if ro {
                    return self.reply_err(u, libc::EROFS);
                }
                if size == 0 {
                    return self.reply(u, &reply::write(0));
                }
                if offset >= cap {
                    return self.reply_err(u, libc::ENOSPC);
                }
                let len = u64::from(size).min(cap - offset) as u32;
                if self.aligned(offset, u64::from(len)) {
                    self.submit_rw(slot, u, BioOp::Write, offset, len);
                } else {
                    self.slow_write(slot, u, offset, len);
                }
            }
            Op::StatFs => {
                let block = self.shared.block.max(PAGE as u64);
                let s = StatFs {
                    blocks: cap / block,
                    bfree: 0,
                    bavail: 0,
                    files: 1,
                    ffree: 0,
                    bsize: block as u32,
                    namelen: 255,
                    frsize: block as u32,
                };
                self.reply(u, &reply::statfs(&s));
            }
            Op::Release | Op::Flush => self.reply_err(u, 0),
            Op::Fsync { .. } => {
                if ro {
                    return self.reply_err(u, 0);
                }
                self.submit_slot(slot, u, Pending::Done, |bio| *bio = Bio::flush());
            }
            Op::Fallocate { offset, len, mode } => {
                let errno = self.fallocate(offset, len, mode);
                self.reply_err(u, errno);
            }
            Op::Lseek { offset, whence } => {
                let kind = match whence {
                    whence::SEEK_DATA => Seek::Data,
                    whence::SEEK_HOLE => Seek::Hole,
                    _ => return self.reply_err(u, libc::EINVAL),
                };
                let dev = &self.shared.dev;
                let r = seek::seek(kind, offset, cap, |o, l| {
                    dev.extents(o, l).map_err(|e| e.status().errno())
                });
                match r {
                    Ok(at) => self.reply(u, &reply::lseek(at)),
                    Err(errno) => self.reply_err(u, errno),
                }
            }
            Op::Unsupported(_) => self.reply_err(u, libc::ENOSYS),
        }
    }

    /// One bio over the slot's data area.
    fn submit_rw(&mut self, slot: u32, unique: u64, op: BioOp, offset: u64, len: u32) {
        let data = self.data_ptr(slot);
        let pending = if op == BioOp::Read {
            Pending::Read { len }
        } else {
            Pending::Write { len }
        };
        self.submit_slot(slot, unique, pending, |bio| {
            bio.set_op(op);
            bio.set_offset_bytes(offset);
            // SAFETY: the slot's data area holds at least `len` bytes
            // (len <= max_write) and belongs to this request until its
            // completion is reaped: the slot is in flight until then, and
            // a slot's buffer is freed only when the worker ends, after
            // the drain (or never, if the drain gave up).
            let buf = unsafe { IoBuf::from_raw(data, len as usize) };
            bio.push_segment(buf, 0, len);
        });
    }

    /// Submit the bio `fill` makes for the request in `slot`.
    fn submit_slot(&mut self, slot: u32, unique: u64, pending: Pending, fill: impl Fn(&mut Bio)) {
        let popped = self.free.pop();
        debug_assert_eq!(popped, Some(slot));
        debug_assert!(matches!(self.slots[slot as usize], Slot::Free));
        self.slots[slot as usize] = Slot::InFlight { unique, pending };
        self.in_flight += 1;
        let filled = |bio: &mut Bio| {
            fill(bio);
            bio.private = u64::from(slot);
        };
        let Err(e) = self.ctx.submit_with(filled) else {
            return;
        };
        let mut bio = e.into_bio();
        // Every bio slot of the context holds a completion nobody polled:
        // reap them, then submit the same bio again (bounded: each round
        // answers at least one, and there are at most `depth` of them).
        loop {
            let Worker { ctx, done, .. } = self;
            let n = ctx.poll(|c| done.push((c.private() as u32, c.status())));
            if n == 0 {
                ctx.poll_wait_for(1, Duration::from_millis(10), |c| {
                    done.push((c.private() as u32, c.status()))
                });
            }
            self.answer_done();
            match self.ctx.submit(bio) {
                Ok(()) => return,
                Err(e) => bio = e.into_bio(),
            }
        }
    }

    /// Poll the context and answer what completed; how many.
    fn reap(&mut self) -> usize {
        if self.in_flight == 0 {
            return 0;
        }
        let Worker { ctx, done, .. } = self;
        ctx.poll(|c| done.push((c.private() as u32, c.status())));
        self.answer_done()
    }

    fn answer_done(&mut self) -> usize {
        let mut done = std::mem::take(&mut self.done);
        let n = done.len();
        for &(slot, status) in &done {
            let Some(s) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let Slot::InFlight { unique, pending } = std::mem::replace(s, Slot::Free) else {
                continue;
            };
            self.free.push(slot);
            self.in_flight -= 1;
            if !status.is_ok() {
                self.reply_err(unique, status.errno());
                continue;
            }
            match pending {
                Pending::Read { len } => {
                    self.requests += 1;
                    let h = reply::header(unique, 0, len as usize);
                    let data = self.data_ptr(slot);
                    // SAFETY: the device finished with the slot's data
                    // area; `len` bytes of it are the read's data.
                    let data = unsafe { std::slice::from_raw_parts(data.as_ptr(), len as usize) };
                    self.send(&[&h, data]);
                }
                Pending::Write { len } => self.reply(unique, &reply::write(len)),
                Pending::Done => self.reply_err(unique, 0),
            }
        }
        done.clear();
        self.done = done;
        n
    }

    /// Wait for the requests in flight, up to `max`; how many are left.
    fn drain(&mut self, max: Duration) -> u32 {
        let deadline = std::time::Instant::now() + max;
        while self.in_flight > 0 && std::time::Instant::now() < deadline {
            let Worker { ctx, done, .. } = self;
            ctx.poll_wait_for(1, Duration::from_millis(10), |c| {
                done.push((c.private() as u32, c.status()))
            });
            self.answer_done();
        }
        self.in_flight
    }

    /// The slow path's buffer, at least `len` bytes.
    fn bounce(&mut self, len: usize) -> NonNull<u8> {
        if self.bounce.as_ref().is_none_or(|b| b.len() < len) {
            self.bounce = Some(IoBuf::page_aligned(len));
        }
        let b = self.bounce.as_ref().expect("made above");
        NonNull::new(b.as_ptr()).expect("an IoBuf is never null")
    }

    /// The blocks around `[offset, offset + len)`: their start and length.
    fn around(&self, offset: u64, len: u32) -> (u64, usize) {
        let b = self.shared.block;
        let start = offset / b * b;
        let end = (offset + u64::from(len)).div_ceil(b) * b;
        (
            start,
            (end.min(self.shared.capacity.div_ceil(b) * b) - start) as usize,
        )
    }

    /// A read off the device's blocks: the blocks around it, then the
    /// bytes asked for.
    fn slow_read(&mut self, unique: u64, offset: u64, len: u32) {
        // Blocking calls wait for their own bio only: answer what is done
        // first, so the context has room.
        self.reap();
        let (start, span) = self.around(offset, len);
        let p = self.bounce(span);
        // SAFETY: the bounce buffer has `span` bytes and only this
        // thread uses it.
        let buf = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), span) };
        match self.ctx.read_at(buf, start) {
            Ok(()) => {
                self.requests += 1;
                let at = (offset - start) as usize;
                let h = reply::header(unique, 0, len as usize);
                // SAFETY: as above; `at + len <= span`.
                let data = unsafe { std::slice::from_raw_parts(p.as_ptr().add(at), len as usize) };
                self.send(&[&h, data]);
            }
            Err(e) => self.reply_err(unique, e.status().errno()),
        }
    }

    /// A write off the device's blocks: read the blocks around it, put
    /// the data in, write them back, one such write at a time.
    fn slow_write(&mut self, slot: u32, unique: u64, offset: u64, len: u32) {
        self.reap();
        let (start, span) = self.around(offset, len);
        let p = self.bounce(span);
        // SAFETY: the bounce buffer has `span` bytes and only this thread
        // uses it; the slot's data area holds the write's `len` bytes.
        let (buf, data) = unsafe {
            (
                std::slice::from_raw_parts_mut(p.as_ptr(), span),
                std::slice::from_raw_parts(self.data_ptr(slot).as_ptr(), len as usize),
            )
        };
        let shared = self.shared.clone();
        let r = {
            let _one = shared.rmw.lock().unwrap_or_else(|e| e.into_inner());
            self.ctx.read_at(buf, start).and_then(|()| {
                let at = (offset - start) as usize;
                buf[at..at + len as usize].copy_from_slice(data);
                self.ctx.write_at(buf, start)
            })
        };
        match r {
            Ok(()) => self.reply(unique, &reply::write(len)),
            Err(e) => self.reply_err(unique, e.status().errno()),
        }
    }

    /// fallocate: the errno to answer. PUNCH_HOLE discards (the blocks
    /// the range covers whole; the bytes of partial ones are zeroed), or
    /// writes zeroes where the device has no discard or refuses it;
    /// ZERO_RANGE writes zeroes; a plain allocation inside the device
    /// needs nothing.
    fn fallocate(&mut self, offset: u64, len: u64, mode: u32) -> i32 {
        if self.shared.read_only {
            return libc::EROFS;
        }
        let known = falloc::KEEP_SIZE | falloc::PUNCH_HOLE | falloc::ZERO_RANGE;
        if mode & !known != 0 {
            return libc::EOPNOTSUPP;
        }
        let cap = self.shared.capacity;
        let Some(end) = offset.checked_add(len) else {
            return libc::EINVAL;
        };
        let keep = mode & (falloc::KEEP_SIZE | falloc::PUNCH_HOLE) != 0;
        if end > cap && !keep {
            // The file cannot grow past the device.
            return libc::ENOSPC;
        }
        let end = end.min(cap);
        if mode & (falloc::PUNCH_HOLE | falloc::ZERO_RANGE) == 0 || offset >= end {
            return 0;
        }
        self.reap();
        let b = self.shared.block;
        let inner_start = offset.div_ceil(b) * b;
        let inner_end = end / b * b;
        // The partial blocks at either end: zeroed byte by byte.
        let mut edges = [(offset, end.min(inner_start)), (inner_end.max(offset), end)];
        if inner_start >= inner_end {
            edges = [(offset, end), (end, end)];
        }
        for (s, e) in edges {
            if s < e {
                let errno = self.zero_bytes(s, (e - s) as u32);
                if errno != 0 {
                    return errno;
                }
            }
        }
        if inner_start >= inner_end {
            return 0;
        }
        let (s, l) = (inner_start, inner_end - inner_start);
        let punched =
            mode & falloc::PUNCH_HOLE != 0 && self.shared.discard && self.ctx.discard(s, l).is_ok();
        if punched {
            return 0;
        }
        match self.ctx.write_zeroes(s, l) {
            Ok(()) => 0,
            Err(e) => e.status().errno(),
        }
    }

    /// Zero `len` bytes at `offset`, less than two blocks, off the block
    /// boundaries: a read-modify-write.
    fn zero_bytes(&mut self, offset: u64, len: u32) -> i32 {
        let (start, span) = self.around(offset, len);
        let p = self.bounce(span);
        // SAFETY: the bounce buffer has `span` bytes and only this thread
        // uses it.
        let buf = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), span) };
        let shared = self.shared.clone();
        let _one = shared.rmw.lock().unwrap_or_else(|e| e.into_inner());
        let r = self.ctx.read_at(buf, start).and_then(|()| {
            let at = (offset - start) as usize;
            buf[at..at + len as usize].fill(0);
            self.ctx.write_at(buf, start)
        });
        match r {
            Ok(()) => 0,
            Err(e) => e.status().errno(),
        }
    }
}
