//! The receive side of one NBD client connection, run inside the hardware
//! queue's `poll`: no thread. It reads what the socket holds, without
//! waiting, and parses replies as far as they have arrived; a reply that
//! is cut short by the end of what arrived is taken up again at the next
//! `poll` (the parser is a small state machine).
//!
//! Replies are read through a receive buffer, as a NIC's ring is: one
//! `recv` takes in as many replies as the socket holds. Read data is
//! copied from the buffer into the request's segments; when a payload of
//! [`DIRECT_BYTES`] or more is still to come and the buffer is empty, it
//! is received straight into the request's segments instead.

use std::io;

use mqblk_core::bio::Op;
use mqblk_core::driver::{Completions, RqRef};
use mqblk_nbd_proto::consts::reply_type;
use mqblk_nbd_proto::transmission::{
    decode_offset_hole, reply_header_len, ErrorPayload, ReplyHeader,
};
use mqblk_nbd_proto::NbdErrno;

use super::queue::{protocol, status_of, InFlight, MAX_CHUNK_META};
use crate::transport::ClientRx;

/// Bytes of the receive buffer.
const RX_BYTES: usize = 256 * 1024;
/// A payload with at least this many bytes still to come, when nothing is
/// buffered, is received straight into the request's buffers.
const DIRECT_BYTES: u64 = 32 * 1024;
const _: () = assert!(MAX_CHUNK_META as usize + 64 <= RX_BYTES);

/// Where the parser is in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// At the start of a reply or chunk.
    Header,
    /// `left` bytes of read data for the request of `tag` are still to
    /// come, to go `rel` bytes into it; `ends` if its reply ends with them.
    Data {
        tag: u32,
        rel: u64,
        left: u64,
        ends: bool,
    },
    /// `left` bytes to throw away (a timed-out request's late data).
    Skip { left: u64 },
}

/// The receiving half of a connection, with its buffer and parser.
pub(super) struct Receiver {
    sock: ClientRx,
    buf: Box<[u8]>,
    /// `buf[start..end]` is received and not yet parsed.
    start: usize,
    end: usize,
    state: State,
}

impl Receiver {
    pub(super) fn new(sock: ClientRx) -> Receiver {
        Receiver {
            sock,
            buf: vec![0u8; RX_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            state: State::Header,
        }
    }

    pub(super) fn socket(&self) -> &crate::transport::Socket {
        self.sock.socket()
    }

    /// Start over on a new connection.
    pub(super) fn reset(&mut self, sock: ClientRx) {
        self.sock = sock;
        self.start = 0;
        self.end = 0;
        self.state = State::Header;
    }

    /// The tag whose buffers the parser is filling, if it is inside a
    /// reply's data.
    pub(super) fn inside(&self) -> Option<u32> {
        match self.state {
            State::Data { tag, .. } => Some(tag),
            _ => None,
        }
    }

    /// Take in whatever has arrived and complete the requests whose
    /// replies are whole. Returns how many completed; an error means the
    /// connection is unusable (`InvalidData`: the server broke the
    /// protocol).
    pub(super) fn pump(
        &mut self,
        fl: &mut InFlight,
        done: &mut Completions<'_>,
    ) -> io::Result<usize> {
        let mut n = 0;
        loop {
            n += self.parse(fl, done)?;
            let got = match self.state {
                State::Data {
                    tag,
                    rel,
                    left,
                    ends,
                } if self.start == self.end && left >= DIRECT_BYTES => {
                    let rq = fl.slots[tag as usize]
                        .rq
                        .as_mut()
                        .ok_or_else(|| protocol("data for a request not in flight"))?;
                    match recv_into(&mut self.sock, rq, rel, left) {
                        Ok(k) => {
                            self.state = State::Data {
                                tag,
                                rel: rel + k as u64,
                                left: left - k as u64,
                                ends,
                            };
                            Ok(k)
                        }
                        Err(e) => Err(e),
                    }
                }
                _ => {
                    if self.start == self.end {
                        self.start = 0;
                        self.end = 0;
                    } else if self.start > 0 {
                        self.buf.copy_within(self.start..self.end, 0);
                        self.end -= self.start;
                        self.start = 0;
                    }
                    match self.sock.read_now(&mut self.buf[self.end..]) {
                        Ok(k) => {
                            self.end += k;
                            Ok(k)
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            match got {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Parse from the buffer as far as it goes.
    fn parse(&mut self, fl: &mut InFlight, done: &mut Completions<'_>) -> io::Result<usize> {
        let mut n = 0;
        loop {
            let avail = self.end - self.start;
            match self.state {
                State::Data {
                    tag,
                    rel,
                    left,
                    ends,
                } => {
                    let k = (avail as u64).min(left) as usize;
                    let slot = &mut fl.slots[tag as usize];
                    let rq = slot
                        .rq
                        .as_mut()
                        .ok_or_else(|| protocol("data for a request not in flight"))?;
                    copy_into(rq, rel, &self.buf[self.start..self.start + k]);
                    self.start += k;
                    if (k as u64) < left {
                        self.state = State::Data {
                            tag,
                            rel: rel + k as u64,
                            left: left - k as u64,
                            ends,
                        };
                        return Ok(n);
                    }
                    self.state = State::Header;
                    if ends {
                        n += fl.finish(tag, done);
                    }
                }
                State::Skip { left } => {
                    let k = (avail as u64).min(left) as usize;
                    self.start += k;
                    if (k as u64) < left {
                        self.state = State::Skip {
                            left: left - k as u64,
                        };
                        return Ok(n);
                    }
                    self.state = State::Header;
                }
                State::Header => {
                    if avail < 4 {
                        return Ok(n);
                    }
                    let b = &self.buf[self.start..self.end];
                    let magic = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                    let hlen = reply_header_len(magic).map_err(|e| protocol(&e.to_string()))?;
                    if avail < hlen {
                        return Ok(n);
                    }
                    let h =
                        ReplyHeader::decode(&b[..hlen]).map_err(|e| protocol(&e.to_string()))?;
                    match h {
                        ReplyHeader::Simple { error, cookie } => {
                            self.start += hlen;
                            n += self.simple(fl, done, error, cookie)?;
                        }
                        ReplyHeader::Chunk(h) => {
                            if !fl.structured {
                                return Err(protocol("structured reply without negotiation"));
                            }
                            let tag = fl.tag_of(h.cookie)?;
                            let slot = &mut fl.slots[tag as usize];
                            let live = slot.rq.is_some() && slot.cookie == h.cookie;
                            if !live && slot.zombie.is_some_and(|z| z.cookie == h.cookie) {
                                self.start += hlen;
                                if h.done() {
                                    slot.zombie = None;
                                    fl.zombies -= 1;
                                }
                                self.state = State::Skip {
                                    left: u64::from(h.len),
                                };
                                continue;
                            }
                            if !live {
                                return Err(protocol("chunk for a request not in flight"));
                            }
                            // The chunk's fixed part must be whole before
                            // it is acted on.
                            let meta = match h.typ {
                                reply_type::NONE => 0,
                                reply_type::OFFSET_DATA => 8,
                                reply_type::OFFSET_HOLE => 12,
                                t if t & reply_type::FLAG_ERROR != 0 => {
                                    if h.len > MAX_CHUNK_META {
                                        return Err(protocol("error chunk too long"));
                                    }
                                    h.len as usize
                                }
                                _ => return Err(protocol("unexpected chunk type")),
                            };
                            if avail < hlen + meta {
                                return Ok(n);
                            }
                            let p = &self.buf[self.start + hlen..self.start + hlen + meta];
                            let rq = slot.rq.as_mut().expect("live");
                            let (rq_off, rq_len, is_read) =
                                (rq.offset_bytes(), rq.len_bytes(), rq.op() == Op::Read);
                            match h.typ {
                                reply_type::NONE => {
                                    if h.len != 0 {
                                        return Err(protocol("NONE chunk with a payload"));
                                    }
                                }
                                reply_type::OFFSET_DATA => {
                                    if h.len < 9 || !is_read {
                                        return Err(protocol("bad OFFSET_DATA chunk"));
                                    }
                                    let off = u64::from_be_bytes(p.try_into().expect("8 bytes"));
                                    let dlen = u64::from(h.len - 8);
                                    if off < rq_off || off + dlen > rq_off + rq_len {
                                        return Err(protocol("OFFSET_DATA outside the request"));
                                    }
                                    self.start += hlen + meta;
                                    self.state = State::Data {
                                        tag,
                                        rel: off - rq_off,
                                        left: dlen,
                                        ends: h.done(),
                                    };
                                    continue;
                                }
                                reply_type::OFFSET_HOLE => {
                                    if h.len != 12 || !is_read {
                                        return Err(protocol("bad OFFSET_HOLE chunk"));
                                    }
                                    let (off, hl) = decode_offset_hole(p)
                                        .map_err(|e| protocol(&e.to_string()))?;
                                    if off < rq_off || off + u64::from(hl) > rq_off + rq_len {
                                        return Err(protocol("OFFSET_HOLE outside the request"));
                                    }
                                    zero_into(rq, off - rq_off, hl.into());
                                }
                                t => {
                                    let e = ErrorPayload::decode(t, p)
                                        .map_err(|e| protocol(&e.to_string()))?;
                                    slot.err.get_or_insert(status_of(e.errno));
                                }
                            }
                            self.start += hlen + meta;
                            if h.done() {
                                n += fl.finish(tag, done);
                            }
                        }
                    }
                }
            }
        }
    }

    /// A simple reply (its header already consumed).
    fn simple(
        &mut self,
        fl: &mut InFlight,
        done: &mut Completions<'_>,
        error: u32,
        cookie: u64,
    ) -> io::Result<usize> {
        let tag = fl.tag_of(cookie)?;
        let slot = &mut fl.slots[tag as usize];
        if let Some(rq) = slot.rq.as_ref().filter(|_| slot.cookie == cookie) {
            if error == 0 && rq.op() == Op::Read && rq.len_bytes() > 0 {
                let len = rq.len_bytes();
                self.state = State::Data {
                    tag,
                    rel: 0,
                    left: len,
                    ends: true,
                };
                return Ok(0);
            }
            if error != 0 {
                slot.err = Some(status_of(NbdErrno::from_code(error)));
            }
            return Ok(fl.finish(tag, done));
        }
        if let Some(z) = slot.zombie.filter(|z| z.cookie == cookie) {
            slot.zombie = None;
            fl.zombies -= 1;
            if error == 0 {
                self.state = State::Skip { left: z.read_len };
            }
            return Ok(0);
        }
        Err(protocol("reply to a request not in flight"))
    }
}

/// Copy `src` into the request's segments, `rel` bytes into it.
fn copy_into(rq: &mut RqRef, rel: u64, src: &[u8]) {
    let mut pos = 0u64;
    let (start, end) = (rel, rel + src.len() as u64);
    for buf in rq.read_bufs() {
        let seg_len = buf.len() as u64;
        let (a, b) = (start.max(pos), end.min(pos + seg_len));
        if a < b {
            buf[(a - pos) as usize..(b - pos) as usize]
                .copy_from_slice(&src[(a - start) as usize..(b - start) as usize]);
        }
        pos += seg_len;
    }
}

/// Receive, without waiting, at most `left` bytes straight into the
/// segment of the request that holds byte `rel`.
fn recv_into(sock: &mut ClientRx, rq: &mut RqRef, rel: u64, left: u64) -> io::Result<usize> {
    let mut pos = 0u64;
    for buf in rq.read_bufs() {
        let seg_len = buf.len() as u64;
        if rel < pos + seg_len {
            let a = (rel - pos) as usize;
            let b = (a as u64 + left).min(seg_len) as usize;
            return sock.read_now(&mut buf[a..b]);
        }
        pos += seg_len;
    }
    Err(protocol("read data past the request's buffers"))
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
