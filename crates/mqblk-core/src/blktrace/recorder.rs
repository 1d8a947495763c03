//! A context's trace points (Linux's `blk_add_trace_*` hooks): one call
//! per event, each a clock read, a 48-to-64-byte record and its copy into
//! the context's channel. Called from the stages of `context/` (and from
//! the hardware queue's dispatch, as a [`DispatchTrace`]) only when the
//! context traces.

use std::sync::Arc;

use super::channel::{Channel, Totals};
use super::event::{self, Action, BlkIoTrace, DevNum, HEADER_BYTES};
use crate::bio::{Bio, BioFlags, Op};
use crate::clock;
use crate::error::Status;
use crate::hw_queue::DispatchTrace;
use crate::request::Request;

/// The producer side of one context's channel.
pub(crate) struct Recorder {
    ch: Arc<Channel>,
    /// Where the channel's figures go when it closes (its session's).
    totals: Arc<Totals>,
    /// Bytes put into the channel so far.
    head: u64,
    /// The channel's tail as last read: the room left is at least
    /// `capacity - (head - tail_seen)`.
    tail_seen: u64,
    cap: u64,
    seq: u32,
    pid: u32,
    cpu: u32,
    dev: u32,
    /// Time of the newest event put in the file: events go in time order.
    last_ns: u64,
}

impl Recorder {
    /// The recorder of file `cpu` of device `dev`, writing into `ch`, its
    /// figures added to `totals` when it closes. Its first record names
    /// the thread (blkparse prints it beside each event).
    pub(super) fn new(ch: Arc<Channel>, totals: Arc<Totals>, dev: DevNum, cpu: u32) -> Recorder {
        // SAFETY: gettid has no preconditions.
        let pid = unsafe { libc::gettid() } as u32;
        let mut r = Recorder {
            dev: dev.encode(),
            cap: ch.capacity(),
            ch,
            totals,
            head: 0,
            tail_seen: 0,
            seq: 0,
            pid,
            cpu,
            last_ns: 0,
        };
        let comm = comm();
        let mut note = r.record(clock::now_ns(), Action::Process as u32, 0, 0, 0, comm.len());
        // Notes are outside the events' sequence, which starts at 1.
        (note.sequence, r.seq) = (0, 0);
        r.put(&note, &comm);
        r
    }

    /// True if this adds its figures to `totals` (its session's).
    pub(super) fn adds_to(&self, totals: &Arc<Totals>) -> bool {
        Arc::ptr_eq(&self.totals, totals)
    }

    /// The record of an event at `time_ns`, numbered next.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        time_ns: u64,
        action: u32,
        sector: u64,
        bytes: u64,
        error: u16,
        pdu_len: usize,
    ) -> BlkIoTrace {
        self.seq = self.seq.wrapping_add(1);
        BlkIoTrace {
            magic: event::MAGIC_VERSION,
            sequence: self.seq,
            time_ns,
            sector,
            bytes: bytes.min(u64::from(u32::MAX)) as u32,
            action,
            pid: self.pid,
            device: self.dev,
            cpu: self.cpu,
            error,
            pdu_len: pdu_len as u16,
        }
    }

    /// Record an event of `op` at `time_ns`. Inlined into each trace
    /// point, so that its constants fold.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        time_ns: u64,
        action: Action,
        op: Op,
        flags: BioFlags,
        sector: u64,
        bytes: u64,
        error: u16,
        pdu: &[u8],
    ) {
        self.last_ns = time_ns;
        let action = action as u32 | event::op_bits(op, flags);
        let rec = self.record(time_ns, action, sector, bytes, error, pdu.len());
        self.put(&rec, pdu);
    }

    /// Put a record into the channel (when there is no room even after a
    /// drain, it is counted lost).
    #[inline(always)]
    fn put(&mut self, rec: &BlkIoTrace, pdu: &[u8]) {
        let len = (HEADER_BYTES + pdu.len()) as u64;
        if self.head + len - self.tail_seen > self.cap && !self.make_room(len) {
            self.ch.add_lost(1);
            return;
        }
        // SAFETY: this recorder is the channel's one producer, `head` its
        // count of bytes put, and the room was checked against a tail read
        // from the channel.
        unsafe { self.ch.put_record(self.head, rec, pdu) };
        self.head += len;
        self.ch.publish(self.head);
        if self.head - self.tail_seen >= self.cap / 4 * 3 {
            self.ease();
        }
    }

    /// The ring looks full: look at the tail again, and drain it here if
    /// the flusher has not (waiting for a drain under way). False if there
    /// is still no room (not reached: a drain empties the ring).
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, len: u64) -> bool {
        self.tail_seen = self.ch.tail();
        if self.head + len - self.tail_seen <= self.cap {
            return true;
        }
        self.ch.drain();
        self.tail_seen = self.ch.tail();
        self.head + len - self.tail_seen <= self.cap
    }

    /// Three quarters full as last seen: write it out here, in one go,
    /// unless the flusher has or is at it.
    #[cold]
    #[inline(never)]
    fn ease(&mut self) {
        self.tail_seen = self.ch.tail();
        if self.head - self.tail_seen >= self.cap / 4 * 3 && self.ch.try_drain() {
            self.tail_seen = self.ch.tail();
        }
    }

    // ---- the trace points ----

    /// Q: bio entered the layer, at `sector` (the device's, after any
    /// window's remap).
    pub(crate) fn queue(&mut self, bio: &Bio, sector: u64) {
        let now = clock::now_ns();
        let (op, flags, bytes) = (bio.op(), bio.flags(), bio.len_bytes());
        self.emit(now, Action::Queue, op, flags, sector, bytes, 0, &[]);
    }

    /// A: bio, at `sector` here, came from `from_sector` of `from`.
    pub(crate) fn remap(&mut self, bio: &Bio, sector: u64, from: DevNum, from_sector: u64) {
        let now = clock::now_ns();
        let pdu = event::remap_pdu(from.encode(), self.dev, from_sector);
        let (op, flags, bytes) = (bio.op(), bio.flags(), bio.len_bytes());
        self.emit(now, Action::Remap, op, flags, sector, bytes, 0, &pdu);
    }

    /// M or F: bio joined a waiting request at its back or front.
    pub(crate) fn merge(&mut self, bio: &Bio, front: bool) {
        let now = clock::now_ns();
        let a = if front {
            Action::FrontMerge
        } else {
            Action::BackMerge
        };
        let (op, flags, bytes) = (bio.op(), bio.flags(), bio.len_bytes());
        self.emit(now, a, op, flags, bio.sector(), bytes, 0, &[]);
    }

    /// X: bio was cut, its next piece starting at `at_sector`.
    pub(crate) fn split(&mut self, bio: &Bio, at_sector: u64) {
        let now = clock::now_ns();
        let pdu = event::u64_pdu(at_sector);
        let (op, flags, bytes) = (bio.op(), bio.flags(), bio.len_bytes());
        self.emit(now, Action::Split, op, flags, bio.sector(), bytes, 0, &pdu);
    }

    /// G and I (at one clock read): a bio got request `rq`, which went
    /// into the context's queue; P first if it starts the plug.
    pub(crate) fn get_rq(&mut self, rq: &Request, starts_plug: bool) {
        let now = clock::now_ns();
        if starts_plug {
            self.emit(now, Action::Plug, Op::Read, BioFlags::NONE, 0, 0, 0, &[]);
        }
        self.rq_event(now, Action::GetRq, rq);
        self.rq_event(now, Action::Insert, rq);
    }

    /// U: the plug was flushed with `depth` requests in it.
    pub(crate) fn unplug(&mut self, depth: usize) {
        let now = clock::now_ns();
        let pdu = event::u64_pdu(depth as u64);
        let (op, flags) = (Op::Read, BioFlags::NONE);
        self.emit(now, Action::UnplugIo, op, flags, 0, 0, 0, &pdu);
    }

    /// C: a caller's bio ended with `status`, at `sector` (where its Q
    /// was), stamped `done_ns`: when its driver finished the request
    /// (Linux records C in `blk_mq_end_request`, where the driver ends
    /// it), so that D2C is the device's time; 0 if the driver gave no
    /// time (the reap's). The delay from there to this reap is counted
    /// apart (`TraceSummary::reap_delay_ns`). The file stays in time
    /// order: a C is never stamped before the event put in just before
    /// it (a request completed inline, behind the D of a later one, gets
    /// that D's time).
    pub(crate) fn complete(&mut self, bio: &Bio, sector: u64, status: Status, done_ns: u64) {
        let mut now = clock::now_ns();
        if done_ns != 0 && done_ns <= now {
            self.ch.count_reap(now - done_ns);
            now = done_ns.max(self.last_ns);
        }
        let (op, flags, bytes) = (bio.op(), bio.flags(), bio.len_bytes());
        let error = event::error_of(status);
        self.emit(now, Action::Complete, op, flags, sector, bytes, error, &[]);
    }

    #[inline(always)]
    fn rq_event(&mut self, now: u64, a: Action, rq: &Request) {
        self.emit(now, a, rq.op, rq.flags, rq.sector, rq.size_bytes, 0, &[]);
    }
}

impl DispatchTrace for Recorder {
    /// D.
    #[inline]
    fn issue(&mut self, rq: &Request) {
        self.rq_event(clock::now_ns(), Action::Issue, rq);
    }

    /// R.
    #[inline]
    fn requeue(&mut self, rq: &Request) {
        self.rq_event(clock::now_ns(), Action::Requeue, rq);
    }
}

impl Drop for Recorder {
    /// The context stops tracing: what it recorded is written out and its
    /// file closed.
    fn drop(&mut self) {
        if let Some(c) = self.ch.close() {
            self.totals.add(c);
        }
    }
}

/// The calling thread's name as the kernel keeps it (its `comm`, what
/// blktrace records), NUL-padded to 16 bytes.
fn comm() -> [u8; 16] {
    let mut name = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into the
    // buffer, which has 16.
    if unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) } != 0 {
        return event::comm_pdu("mqblk");
    }
    name[15] = 0;
    name
}
