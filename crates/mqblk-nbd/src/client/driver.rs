//! The NBD client driver: one NBD connection per hardware queue (Linux
//! drivers/block/nbd.c, where each socket is one blk-mq hardware queue).
//!
//! `queue_rq` writes the request (and a write's payload) on the queue's
//! socket, with the request's tag as the NBD cookie, and parks the request
//! in the slot of its tag. A receive thread per connection reads replies,
//! fills read data straight into the request's segments, and moves
//! finished requests to a completed list, then rings the hardware queue's
//! notifier; `poll` hands the completed list to the core. If the
//! connection drops, the receive thread fails every parked request, and
//! later requests fail at once: nothing waits for a reply that cannot
//! come.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use mqblk_core::bio::{BioFlags, Op};
use mqblk_core::driver::RqRef;
use mqblk_core::driver::{Completions, HwNotifier};
use mqblk_core::driver::{Driver, HwQueueSetup, QueueRq, TimeoutAction};
use mqblk_core::error::{Error, InvalidKind, Result, Status};
use mqblk_core::limits::{Features, QueueLimits, SECTOR_SIZE};
use mqblk_nbd_proto::consts::{
    cmd, cmd_flags, reply_type, transmission_flags as tf, DEFAULT_MAX_PAYLOAD,
};
use mqblk_nbd_proto::transmission::{
    decode_offset_hole, reply_header_len, ErrorPayload, ReplyHeader, CHUNK_HEADER_LEN,
};
use mqblk_nbd_proto::{NbdErrno, Request};

use super::handshake::Negotiated;
use crate::transport::Socket;

/// The NBD client driver of one device.
pub struct NbdDriver {
    name: String,
    neg: Negotiated,
    /// Connections not yet bound to a hardware queue, by queue index.
    pending: Mutex<Vec<Option<Socket>>>,
}

impl std::fmt::Debug for NbdDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdDriver")
            .field("name", &self.name)
            .field("negotiated", &self.neg)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl NbdDriver {
    /// A driver over negotiated connections (one per hardware queue).
    pub fn new(name: String, neg: Negotiated, conns: Vec<Socket>) -> NbdDriver {
        NbdDriver {
            name,
            neg,
            pending: Mutex::new(conns.into_iter().map(Some).collect()),
        }
    }

    /// What negotiation settled.
    pub fn negotiated(&self) -> &Negotiated {
        &self.neg
    }

    fn has(&self, f: u16) -> bool {
        self.neg.flags & f != 0
    }

    fn max_payload(&self) -> u32 {
        self.neg.block_size.map_or(DEFAULT_MAX_PAYLOAD, |b| {
            b.max_payload.min(DEFAULT_MAX_PAYLOAD)
        })
    }

    fn block(&self) -> u32 {
        self.neg.block_size.map_or(512, |b| b.min.clamp(512, 65536))
    }
}

/// What a connection's submit side and receive thread share.
struct ConnShared {
    /// Requests in flight, by tag (the NBD cookie).
    slots: Box<[Mutex<Option<RqRef>>]>,
    /// Finished requests, for `poll`.
    done: Mutex<Vec<(RqRef, Status)>>,
    /// The connection is gone: fail everything.
    dead: AtomicBool,
    notifier: HwNotifier,
    structured: bool,
}

/// One hardware queue: one NBD connection.
pub struct NbdQueue {
    sock: Socket,
    shared: Arc<ConnShared>,
    recv: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for NbdQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdQueue")
            .field("dead", &self.shared.dead.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for NbdQueue {
    fn drop(&mut self) {
        if !self.shared.dead.load(Ordering::Acquire) {
            // Soft disconnect: nothing is in flight when a device goes.
            let disc = Request {
                cmd: cmd::DISC,
                ..Request::default()
            };
            let _ = self.sock.write_all(&disc.encode());
        }
        self.shared.dead.store(true, Ordering::Release);
        self.sock.shutdown();
        if let Some(h) = self.recv.take() {
            let _ = h.join();
        }
    }
}

/// Kill the connection: mark it dead, wake the receive thread (which then
/// fails every parked request).
fn kill(shared: &ConnShared, sock: &Socket) {
    shared.dead.store(true, Ordering::Release);
    sock.shutdown();
}

fn status_of(e: NbdErrno) -> Status {
    match e {
        NbdErrno::Perm => Status::Invalid(InvalidKind::ReadOnly),
        NbdErrno::NoSpc => Status::NoSpace,
        NbdErrno::Inval | NbdErrno::Overflow => Status::Invalid(InvalidKind::Driver),
        NbdErrno::NotSup => Status::NotSupported,
        NbdErrno::Shutdown => Status::Shutdown,
        NbdErrno::Io | NbdErrno::NoMem => Status::IoError,
    }
}

impl Driver for NbdDriver {
    type HwQueue = NbdQueue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<NbdQueue> {
        let sock = lock(&self.pending)
            .get_mut(setup.index as usize)
            .and_then(Option::take)
            .ok_or_else(|| Error::Setup {
                device: self.name.as_str().into(),
                reason: format!("no connection for hardware queue {}", setup.index),
            })?;
        let nr_slots = (setup.queue_depth + setup.reserved_tags) as usize;
        let shared = Arc::new(ConnShared {
            slots: (0..nr_slots).map(|_| Mutex::new(None)).collect(),
            done: Mutex::new(Vec::with_capacity(nr_slots)),
            dead: AtomicBool::new(false),
            notifier: setup.notifier,
            structured: self.neg.structured,
        });
        let rsock = sock.try_clone().map_err(|e| Error::Setup {
            device: self.name.as_str().into(),
            reason: format!("cannot clone the connection's socket: {e}"),
        })?;
        let sh = shared.clone();
        let recv = std::thread::Builder::new()
            .name(format!("{}-recv{}", self.name, setup.index))
            .spawn(move || receive(rsock, &sh))
            .map_err(|e| Error::Setup {
                device: self.name.as_str().into(),
                reason: format!("cannot start the receive thread: {e}"),
            })?;
        Ok(NbdQueue {
            sock,
            shared,
            recv: Some(recv),
        })
    }

    fn queue_rq(
        &self,
        hq: &mut NbdQueue,
        rq: RqRef,
        _last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        let len = rq.len_bytes();
        let fua = rq.flags().contains(BioFlags::FUA) && self.has(tf::SEND_FUA);
        let (command, flags) = match rq.op() {
            Op::Read => (cmd::READ, 0),
            Op::Write => (cmd::WRITE, if fua { cmd_flags::FUA } else { 0 }),
            Op::Flush if !self.has(tf::SEND_FLUSH) => {
                // No write cache to flush.
                done.complete(rq, Status::Ok);
                return QueueRq::Issued;
            }
            Op::Flush => (cmd::FLUSH, 0),
            Op::Discard => (cmd::TRIM, if fua { cmd_flags::FUA } else { 0 }),
            Op::WriteZeroes => (cmd::WRITE_ZEROES, if fua { cmd_flags::FUA } else { 0 }),
        };
        let too_long = if rq.op().has_data() {
            len > u64::from(self.max_payload())
        } else {
            len > u64::from(u32::MAX)
        };
        if too_long {
            done.complete(rq, Status::Invalid(InvalidKind::Driver));
            return QueueRq::Issued;
        }
        let tag = rq.tag() as usize;
        let req = Request {
            flags,
            cmd: command,
            cookie: tag as u64,
            offset: if command == cmd::FLUSH {
                0
            } else {
                rq.offset_bytes()
            },
            len: if command == cmd::FLUSH { 0 } else { len as u32 },
        };
        debug_assert!(tag < hq.shared.slots.len());
        let Some(slot) = hq.shared.slots.get(tag) else {
            done.complete(rq, Status::IoError);
            return QueueRq::Issued;
        };
        let mut g = lock(slot);
        if hq.shared.dead.load(Ordering::Acquire) {
            drop(g);
            done.complete(rq, Status::IoError);
            return QueueRq::Issued;
        }
        debug_assert!(g.is_none(), "tag {tag} already in flight");
        let rq = g.insert(rq);
        // The reply cannot come before the server has the whole request,
        // so the receive thread does not wait on this slot while we write.
        let mut failed = hq.sock.write_all(&req.encode()).is_err();
        if command == cmd::WRITE && !failed {
            let sock = &mut hq.sock;
            for data in rq.write_bufs() {
                if !failed && sock.write_all(data).is_err() {
                    failed = true;
                }
            }
        }
        drop(g);
        if failed {
            // The receive thread fails this request with the others.
            kill(&hq.shared, &hq.sock);
        }
        QueueRq::Issued
    }

    fn commit_rqs(&self, _hq: &mut NbdQueue) {}

    fn poll(&self, hq: &mut NbdQueue, done: &mut Completions<'_>) -> usize {
        let mut list = lock(&hq.shared.done);
        let n = list.len();
        for (rq, status) in list.drain(..) {
            done.complete(rq, status);
        }
        n
    }

    fn timeout(&self, hq: &mut NbdQueue, _tag: u32, _done: &mut Completions<'_>) -> TimeoutAction {
        // A server that does not answer within the timeout is treated as
        // gone: the receive thread fails every request of the connection.
        kill(&hq.shared, &hq.sock);
        TimeoutAction::Done
    }

    fn limits(&self) -> QueueLimits {
        let lbs = self.block();
        let preferred = self
            .neg
            .block_size
            .map_or(lbs, |b| b.preferred.clamp(lbs, 65536));
        let max_sectors = (self.max_payload() / lbs * lbs) / SECTOR_SIZE as u32;
        let max_range = (u32::MAX / lbs * lbs) / SECTOR_SIZE as u32;
        QueueLimits {
            physical_block_size: preferred,
            max_sectors,
            max_discard_sectors: if self.has(tf::SEND_TRIM) {
                max_range
            } else {
                0
            },
            max_write_zeroes_sectors: if self.has(tf::SEND_WRITE_ZEROES) {
                max_range
            } else {
                0
            },
            ..QueueLimits::with_block_size(lbs)
        }
    }

    fn features(&self) -> Features {
        Features {
            write_cache: self.has(tf::SEND_FLUSH),
            fua: self.has(tf::SEND_FUA),
            discard: self.has(tf::SEND_TRIM),
            write_zeroes: self.has(tf::SEND_WRITE_ZEROES),
            read_only: self.has(tf::READ_ONLY),
            rotational: self.has(tf::ROTATIONAL),
        }
    }

    fn completes_async(&self) -> bool {
        true
    }
}

/// Largest error or unknown-chunk payload the client reads.
const MAX_CHUNK_META: u32 = 64 * 1024;

/// The receive thread of one connection.
fn receive(mut sock: Socket, sh: &ConnShared) {
    let mut errs: Vec<Option<Status>> = vec![None; sh.slots.len()];
    let _ = receive_loop(&mut sock, sh, &mut errs);
    // Gone: fail everything parked, and everything that comes later.
    sh.dead.store(true, Ordering::Release);
    sock.shutdown();
    let mut failed = Vec::new();
    for slot in sh.slots.iter() {
        if let Some(rq) = lock(slot).take() {
            failed.push((rq, Status::IoError));
        }
    }
    if !failed.is_empty() {
        lock(&sh.done).extend(failed);
    }
    sh.notifier.notify();
}

fn finish(sh: &ConnShared, rq: RqRef, status: Status) {
    lock(&sh.done).push((rq, status));
    sh.notifier.notify();
}

/// Read `len` bytes from the socket into the request's segments, starting
/// `rel` bytes into the request.
fn read_into(sock: &mut Socket, rq: &mut RqRef, rel: u64, len: u64) -> std::io::Result<()> {
    let mut pos = 0u64;
    let (start, end) = (rel, rel + len);
    for buf in rq.read_bufs() {
        let seg_len = buf.len() as u64;
        let (a, b) = (start.max(pos), end.min(pos + seg_len));
        if a < b {
            sock.read_exact(&mut buf[(a - pos) as usize..(b - pos) as usize])?;
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

fn protocol(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}

fn slot_of(sh: &ConnShared, cookie: u64) -> std::io::Result<&Mutex<Option<RqRef>>> {
    usize::try_from(cookie)
        .ok()
        .and_then(|i| sh.slots.get(i))
        .ok_or_else(|| protocol("reply to an unknown cookie"))
}

fn receive_loop(
    sock: &mut Socket,
    sh: &ConnShared,
    errs: &mut [Option<Status>],
) -> std::io::Result<()> {
    let mut hdr = [0u8; CHUNK_HEADER_LEN];
    loop {
        sock.read_exact(&mut hdr[..4])?;
        let magic = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let hlen = reply_header_len(magic).map_err(|e| protocol(&e.to_string()))?;
        sock.read_exact(&mut hdr[4..hlen])?;
        match ReplyHeader::decode(&hdr[..hlen]).map_err(|e| protocol(&e.to_string()))? {
            ReplyHeader::Simple { error, cookie } => {
                let slot = slot_of(sh, cookie)?;
                let mut rq = lock(slot)
                    .take()
                    .ok_or_else(|| protocol("reply to a request not in flight"))?;
                if error == 0 && rq.op() == Op::Read {
                    let len = rq.len_bytes();
                    if let Err(e) = read_into(sock, &mut rq, 0, len) {
                        finish(sh, rq, Status::IoError);
                        return Err(e);
                    }
                }
                let status = if error == 0 {
                    Status::Ok
                } else {
                    status_of(NbdErrno::from_code(error))
                };
                finish(sh, rq, status);
            }
            ReplyHeader::Chunk(h) => {
                if !sh.structured {
                    return Err(protocol("structured reply without negotiation"));
                }
                let slot = slot_of(sh, h.cookie)?;
                let idx = h.cookie as usize;
                {
                    let mut g = lock(slot);
                    let rq = g
                        .as_mut()
                        .ok_or_else(|| protocol("chunk for a request not in flight"))?;
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
                            sock.read_exact(&mut o)?;
                            let off = u64::from_be_bytes(o);
                            let dlen = u64::from(h.len - 8);
                            if off < rq_off || off + dlen > rq_off + rq_len {
                                return Err(protocol("OFFSET_DATA outside the request"));
                            }
                            read_into(sock, rq, off - rq_off, dlen)?;
                        }
                        reply_type::OFFSET_HOLE => {
                            if h.len != 12 || rq.op() != Op::Read {
                                return Err(protocol("bad OFFSET_HOLE chunk"));
                            }
                            let mut p = [0u8; 12];
                            sock.read_exact(&mut p)?;
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
                            let mut p = vec![0u8; h.len as usize];
                            sock.read_exact(&mut p)?;
                            let e = ErrorPayload::decode(t, &p)
                                .map_err(|e| protocol(&e.to_string()))?;
                            if let Some(s) = errs.get_mut(idx) {
                                s.get_or_insert(status_of(e.errno));
                            }
                        }
                        _ => return Err(protocol("unexpected chunk type")),
                    }
                }
                if h.done() {
                    let rq = lock(slot)
                        .take()
                        .ok_or_else(|| protocol("chunk for a request not in flight"))?;
                    let status = errs
                        .get_mut(idx)
                        .and_then(Option::take)
                        .unwrap_or(Status::Ok);
                    finish(sh, rq, status);
                }
            }
        }
    }
}
