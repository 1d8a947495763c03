//! A context's trace points (Linux's `blk_add_trace_*` hooks): one call
//! per event, each a clock read, a 48-to-64-byte record and its copy into
//! the context's channel. Called from the stages of `context/` (and from
//! the hardware queue's dispatch, as a [`DispatchTrace`]) only when the
//! context traces.

use std::sync::Arc;

use super::channel::Channel;
use super::event::{self, Action, Header, RECORD_MAX};
use super::{BlkTrace, DevNum};
use crate::bio::{Bio, BioFlags, Op};
use crate::clock;
use crate::error::Status;
use crate::hw_queue::DispatchTrace;
use crate::request::Request;

/// The producer side of one context's channel.
pub(crate) struct Recorder {
    trace: Arc<BlkTrace>,
    ch: Arc<Channel>,
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
}

impl Recorder {
    /// The recorder of file `cpu` of `trace`, writing into `ch`. Its first
    /// record names the thread (blkparse prints it beside each event).
    pub(super) fn new(trace: Arc<BlkTrace>, ch: Arc<Channel>, cpu: u32) -> Recorder {
        // SAFETY: gettid has no preconditions.
        let pid = unsafe { libc::gettid() } as u32;
        let mut r = Recorder {
            dev: trace.dev().encode(),
            cap: ch.capacity(),
            trace,
            ch,
            head: 0,
            tail_seen: 0,
            seq: 0,
            pid,
            cpu,
        };
        let note = Header {
            action: Action::Process as u32,
            pdu_len: 16,
            ..r.header()
        };
        r.put(note, &comm());
        r
    }

    /// True if this records for `trace`.
    pub(crate) fn is_of(&self, trace: &Arc<BlkTrace>) -> bool {
        Arc::ptr_eq(&self.trace, trace)
    }

    fn header(&self) -> Header {
        Header {
            pid: self.pid,
            device: self.dev,
            cpu: self.cpu,
            time_ns: clock::now_ns(),
            ..Header::default()
        }
    }

    /// Record one event now.
    #[inline]
    fn emit(&mut self, action: Action, op: Op, flags: BioFlags, sector: u64, bytes: u64) {
        self.emit_with(action, op, flags, sector, bytes, 0, &[]);
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn emit_with(
        &mut self,
        action: Action,
        op: Op,
        flags: BioFlags,
        sector: u64,
        bytes: u64,
        error: u16,
        pdu: &[u8],
    ) {
        self.seq = self.seq.wrapping_add(1);
        let h = Header {
            sequence: self.seq,
            sector,
            bytes: bytes.min(u64::from(u32::MAX)) as u32,
            action: action as u32 | event::op_bits(op, flags),
            error,
            pdu_len: pdu.len() as u16,
            ..self.header()
        };
        self.put(h, pdu);
    }

    #[inline]
    fn put(&mut self, h: Header, pdu: &[u8]) {
        let mut rec = [0u8; RECORD_MAX];
        let n = h.encode(pdu, &mut rec);
        let len = n as u64;
        if self.head + len - self.tail_seen > self.cap && !self.make_room(len) {
            self.ch.add_lost(1);
            return;
        }
        // SAFETY: this recorder is the channel's one producer, `head` its
        // count of bytes put, and the room was checked against a tail read
        // from the channel.
        unsafe { self.ch.put(self.head, &rec[..n]) };
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
        self.emit(
            Action::Queue,
            bio.op(),
            bio.flags(),
            sector,
            bio.len_bytes(),
        );
    }

    /// A: bio, at `sector` here, came from `from_sector` of `from`.
    pub(crate) fn remap(&mut self, bio: &Bio, sector: u64, from: DevNum, from_sector: u64) {
        let pdu = event::remap_pdu(from.encode(), self.dev, from_sector);
        self.emit_with(
            Action::Remap,
            bio.op(),
            bio.flags(),
            sector,
            bio.len_bytes(),
            0,
            &pdu,
        );
    }

    /// M or F: bio joined a waiting request at its back or front.
    pub(crate) fn merge(&mut self, bio: &Bio, front: bool) {
        let a = if front {
            Action::FrontMerge
        } else {
            Action::BackMerge
        };
        self.emit(a, bio.op(), bio.flags(), bio.sector(), bio.len_bytes());
    }

    /// X: bio (at `sector`, of `bytes`) was cut at `at_sector`.
    pub(crate) fn split(&mut self, bio: &Bio, at_sector: u64) {
        let pdu = event::u64_pdu(at_sector);
        let (op, flags) = (bio.op(), bio.flags());
        self.emit_with(
            Action::Split,
            op,
            flags,
            bio.sector(),
            bio.len_bytes(),
            0,
            &pdu,
        );
    }

    /// G and I: a bio got request `rq`, which went into the context's
    /// queue; P first if it starts the plug.
    pub(crate) fn get_rq(&mut self, rq: &Request, starts_plug: bool) {
        if starts_plug {
            self.emit(Action::Plug, Op::Read, BioFlags::NONE, 0, 0);
        }
        self.rq_event(Action::GetRq, rq);
        self.rq_event(Action::Insert, rq);
    }

    /// U: the plug was flushed with `depth` requests in it.
    pub(crate) fn unplug(&mut self, depth: usize) {
        let pdu = event::u64_pdu(depth as u64);
        self.emit_with(Action::UnplugIo, Op::Read, BioFlags::NONE, 0, 0, 0, &pdu);
    }

    /// C: a caller's bio ended with `status`, at `sector` (where its Q
    /// was).
    pub(crate) fn complete(&mut self, bio: &Bio, sector: u64, status: Status) {
        self.emit_with(
            Action::Complete,
            bio.op(),
            bio.flags(),
            sector,
            bio.len_bytes(),
            event::error_of(status),
            &[],
        );
    }

    #[inline]
    fn rq_event(&mut self, a: Action, rq: &Request) {
        self.emit(a, rq.op, rq.flags, rq.sector, rq.size_bytes);
    }
}

impl DispatchTrace for Recorder {
    /// D.
    #[inline]
    fn issue(&mut self, rq: &Request) {
        self.rq_event(Action::Issue, rq);
    }

    /// R.
    #[inline]
    fn requeue(&mut self, rq: &Request) {
        self.rq_event(Action::Requeue, rq);
    }
}

impl Drop for Recorder {
    /// The context stops tracing: what it recorded is written out and its
    /// file closed.
    fn drop(&mut self) {
        if let Some(c) = self.ch.close() {
            self.trace.retire(c);
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
