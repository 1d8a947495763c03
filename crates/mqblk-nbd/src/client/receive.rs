//! The receive side of one NBD client connection: a thread that reads
//! replies, fills read data into the requests' buffers, and hands finished
//! requests to the hardware queue's `poll`.
//!
//! Replies are read through a receive buffer, as a NIC's ring is: one
//! `read` takes in as many replies as the socket holds, and the thread
//! parses them from memory. Small read payloads are copied once from the
//! buffer into the request; a payload of [`DIRECT_BYTES`] or more that has
//! not arrived yet is read straight into the request's segments. Finished
//! requests are gathered and handed over, with one wake-up, only when the
//! thread is about to read from the socket again (and so might sleep):
//! one lock and one notify per batch of replies, not per reply.

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use mqblk_core::bio::Op;
use mqblk_core::driver::RqRef;
use mqblk_core::error::Status;
use mqblk_nbd_proto::consts::reply_type;
use mqblk_nbd_proto::transmission::{
    decode_offset_hole, reply_header_len, ErrorPayload, ReplyHeader, CHUNK_HEADER_LEN,
};
use mqblk_nbd_proto::NbdErrno;

use super::driver::{lock, protocol, status_of, ConnShared, Slot, MAX_CHUNK_META};
use crate::transport::ClientRx;

/// Bytes of the receive buffer.
const RX_BYTES: usize = 256 * 1024;
/// A payload with at least this many bytes still to come is read straight
/// into the request's buffers instead of through the receive buffer.
pub(super) const DIRECT_BYTES: usize = 32 * 1024;
const _: () = assert!(DIRECT_BYTES < RX_BYTES);
/// Bytes of the buffer late replies' payloads are drained through (error
/// chunks are read into it too).
const DRAIN_BYTES: usize = 64 * 1024;
const _: () = assert!(MAX_CHUNK_META as usize <= DRAIN_BYTES);

/// The receiving half of a connection, buffered, with the requests that
/// finished since the last hand-over.
struct Rx<'a> {
    sock: ClientRx,
    buf: Box<[u8]>,
    /// `buf[start..end]` is received and not yet parsed.
    start: usize,
    end: usize,
    sh: &'a ConnShared,
    finished: Vec<(RqRef, Status)>,
}

impl Rx<'_> {
    /// Hand the finished requests to `poll` and wake the queue's waiters.
    fn hand_over(&mut self) {
        if self.finished.is_empty() {
            return;
        }
        lock(&self.sh.done).append(&mut self.finished);
        self.sh.notifier.notify();
    }

    fn finish(&mut self, rq: RqRef, status: Status) {
        self.finished.push((rq, status));
    }

    /// Read from the socket into the (empty) buffer. Whatever finished is
    /// handed over first: the read may sleep.
    fn fill(&mut self) -> io::Result<()> {
        debug_assert_eq!(self.start, self.end, "fill only an empty buffer");
        self.hand_over();
        self.start = 0;
        self.end = 0;
        loop {
            match self.sock.read(&mut self.buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    self.end = n;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Fill `dst` from the buffer, and then from the socket.
    fn read_exact(&mut self, dst: &mut [u8]) -> io::Result<()> {
        let mut at = 0;
        loop {
            let n = (self.end - self.start).min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&self.buf[self.start..self.start + n]);
            self.start += n;
            at += n;
            if at == dst.len() {
                return Ok(());
            }
            if dst.len() - at >= DIRECT_BYTES {
                // The buffer is empty: the rest goes straight in.
                self.hand_over();
                return self.sock.read_exact(&mut dst[at..]);
            }
            self.fill()?;
        }
    }

    /// Read and throw away `len` bytes (a late reply's payload).
    fn skip(&mut self, mut len: u64) -> io::Result<()> {
        loop {
            let n = ((self.end - self.start) as u64).min(len) as usize;
            self.start += n;
            len -= n as u64;
            if len == 0 {
                return Ok(());
            }
            self.fill()?;
        }
    }
}

/// The receive thread of one connection.
pub(super) fn receive(sock: ClientRx, sh: &ConnShared) {
    let mut rx = Rx {
        sock,
        buf: vec![0u8; RX_BYTES].into_boxed_slice(),
        start: 0,
        end: 0,
        sh,
        finished: Vec::with_capacity(sh.slots.len()),
    };
    loop {
        let Err(e) = receive_loop(&mut rx);
        rx.hand_over();
        rx.sock.shutdown();
        // The stream cannot be followed after a protocol error: that is
        // the server's fault, and a new connection would not mend it.
        if e.kind() == io::ErrorKind::InvalidData {
            break;
        }
        match super::reconnect::reconnect(sh, &e) {
            Some(sock) => {
                rx.sock = sock;
                rx.start = 0;
                rx.end = 0;
            }
            None => break,
        }
    }
    // Gone: fail everything parked, and everything that comes later.
    sh.dead.store(true, Ordering::Release);
    let mut failed = Vec::new();
    for (slot, stalls) in sh.slots.iter().zip(sh.stalls.iter()) {
        if let Some(rq) = lock(slot).rq.take() {
            // A request whose reply stalled past its deadline timed out.
            let status = if stalls.load(Ordering::Acquire) > 0 {
                Status::Timeout
            } else {
                Status::IoError
            };
            failed.push((rq, status));
        }
    }
    if !failed.is_empty() {
        lock(&sh.done).extend(failed);
    }
    sh.notifier.notify();
}

/// Read `len` bytes into the request's segments, starting `rel` bytes into
/// the request.
fn read_into(rx: &mut Rx<'_>, rq: &mut RqRef, rel: u64, len: u64) -> io::Result<()> {
    let mut pos = 0u64;
    let (start, end) = (rel, rel + len);
    for buf in rq.read_bufs() {
        let seg_len = buf.len() as u64;
        let (a, b) = (start.max(pos), end.min(pos + seg_len));
        if a < b {
            rx.read_exact(&mut buf[(a - pos) as usize..(b - pos) as usize])?;
        }
        pos += seg_len;
    }
    Ok(())
}

fn zero_into(rq: &mut RqRef, rel: u64, len: u64) {
    let mut pos = 0u64;
    for buf in rq.read_bufs() {
        let seg_len = buf.len() as u64;
        let (a, b) = (rel.max(pos), (rel + len).min(pos + seg_len));
        if a < b {
            buf[(a - pos) as usize..(b - pos) as usize].fill(0);
        }
        pos += seg_len;
    }
}

fn slot_of(sh: &ConnShared, cookie: u64) -> io::Result<&Mutex<Slot>> {
    usize::try_from(cookie & 0xffff_ffff)
        .ok()
        .and_then(|i| sh.slots.get(i))
        .ok_or_else(|| protocol("reply to an unknown cookie"))
}

fn receive_loop(rx: &mut Rx<'_>) -> io::Result<std::convert::Infallible> {
    let sh = rx.sh;
    let mut hdr = [0u8; CHUNK_HEADER_LEN];
    let mut scratch = vec![0u8; DRAIN_BYTES];
    loop {
        rx.read_exact(&mut hdr[..4])?;
        let magic = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let hlen = reply_header_len(magic).map_err(|e| protocol(&e.to_string()))?;
        rx.read_exact(&mut hdr[4..hlen])?;
        match ReplyHeader::decode(&hdr[..hlen]).map_err(|e| protocol(&e.to_string()))? {
            ReplyHeader::Simple { error, cookie } => {
                let slot = slot_of(sh, cookie)?;
                let mut g = lock(slot);
                if g.rq.is_some() && g.cookie == cookie {
                    let rq = g.rq.as_mut().expect("checked above");
                    if error == 0 && rq.op() == Op::Read {
                        // On an error the request stays parked, and is
                        // failed with the others when this thread ends.
                        let len = rq.len_bytes();
                        read_into(rx, rq, 0, len)?;
                    }
                    let rq = g.rq.take().expect("checked above");
                    drop(g);
                    let status = if error == 0 {
                        Status::Ok
                    } else {
                        status_of(NbdErrno::from_code(error))
                    };
                    rx.finish(rq, status);
                } else if g.zombie.is_some_and(|z| z.cookie == cookie) {
                    let z = g.zombie.take().expect("checked above");
                    drop(g);
                    if error == 0 {
                        rx.skip(z.read_len)?;
                    }
                    sh.zombies.fetch_sub(1, Ordering::AcqRel);
                } else {
                    return Err(protocol("reply to a request not in flight"));
                }
            }
            ReplyHeader::Chunk(h) => {
                if !sh.structured {
                    return Err(protocol("structured reply without negotiation"));
                }
                let slot = slot_of(sh, h.cookie)?;
                let mut g = lock(slot);
                if g.zombie.is_some_and(|z| z.cookie == h.cookie)
                    && !(g.rq.is_some() && g.cookie == h.cookie)
                {
                    drop(g);
                    rx.skip(u64::from(h.len))?;
                    if h.done() {
                        lock(slot).zombie = None;
                        sh.zombies.fetch_sub(1, Ordering::AcqRel);
                    }
                    continue;
                }
                if g.rq.is_none() || g.cookie != h.cookie {
                    return Err(protocol("chunk for a request not in flight"));
                }
                let Slot { rq, err, .. } = &mut *g;
                let rq = rq.as_mut().expect("checked above");
                let rq_len = rq.len_bytes();
                let rq_off = rq.offset_bytes();
                match h.typ {
                    reply_type::NONE => {
                        if h.len != 0 {
                            return Err(protocol("NONE chunk with a payload"));
                        }
                    }
                    reply_type::OFFSET_DATA => {
                        if h.len < 9 || rq.op() != Op::Read {
                            return Err(protocol("bad OFFSET_DATA chunk"));
                        }
                        let mut o = [0u8; 8];
                        rx.read_exact(&mut o)?;
                        let off = u64::from_be_bytes(o);
                        let dlen = u64::from(h.len - 8);
                        if off < rq_off || off + dlen > rq_off + rq_len {
                            return Err(protocol("OFFSET_DATA outside the request"));
                        }
                        read_into(rx, rq, off - rq_off, dlen)?;
                    }
                    reply_type::OFFSET_HOLE => {
                        if h.len != 12 || rq.op() != Op::Read {
                            return Err(protocol("bad OFFSET_HOLE chunk"));
                        }
                        let mut p = [0u8; 12];
                        rx.read_exact(&mut p)?;
                        let (off, hl) =
                            decode_offset_hole(&p).map_err(|e| protocol(&e.to_string()))?;
                        if off < rq_off || off + u64::from(hl) > rq_off + rq_len {
                            return Err(protocol("OFFSET_HOLE outside the request"));
                        }
                        zero_into(rq, off - rq_off, hl.into());
                    }
                    t if t & reply_type::FLAG_ERROR != 0 => {
                        if h.len > MAX_CHUNK_META {
                            return Err(protocol("error chunk too long"));
                        }
                        let p = &mut scratch[..h.len as usize];
                        rx.read_exact(p)?;
                        let e = ErrorPayload::decode(t, p).map_err(|e| protocol(&e.to_string()))?;
                        err.get_or_insert(status_of(e.errno));
                    }
                    _ => return Err(protocol("unexpected chunk type")),
                }
                if h.done() {
                    let rq = g.rq.take().expect("checked above");
                    let status = g.err.take().unwrap_or(Status::Ok);
                    drop(g);
                    rx.finish(rq, status);
                }
            }
        }
    }
}
