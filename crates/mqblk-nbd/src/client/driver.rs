//! The NBD client driver: one NBD connection per hardware queue (Linux
//! drivers/block/nbd.c, where each socket is one blk-mq hardware queue).
//!
//! `queue_rq` writes the request (and a write's payload) on the queue's
//! socket and parks the request in the slot of its tag. The NBD cookie is
//! the tag in the low 32 bits and the slot's generation in the high 32, so
//! a reply always names one submission, never a later reuse of the tag. A
//! receive thread per connection reads replies, fills read data straight
//! into the request's segments (holding the slot's lock while it does),
//! and moves finished requests to a completed list, then rings the
//! hardware queue's notifier; `poll` hands the completed list to the core.
//! If the connection drops, the receive thread fails every parked request,
//! and later requests fail at once: nothing waits for a reply that cannot
//! come.
//!
//! Timeouts. NBD has no cancel: a request the server has is the server's
//! until it answers. Linux's nbd tears the connection down on a timeout
//! (`nbd_xmit_timeout`) and waits for user space to reconnect. Here the
//! connection is kept: the timed-out request is taken out of its slot
//! under the slot's lock (so the receive thread can no longer reach its
//! buffers) and completed with [`Status::Timeout`]; its cookie is kept as
//! a *zombie*, and when the late reply comes its payload is read and
//! thrown away. A server that is slow, not dead, so costs one request, not
//! the connection. The connection is closed (and every request on it
//! fails) only where the stream can no longer be followed: a second
//! timeout on a tag whose zombie is still unanswered (the server answers
//! nothing), or a reply that stays stuck half-read past two timeouts (the
//! receive thread is inside that request's buffers; shutting the socket
//! down is the only way to get them back). A timed-out write may still be
//! carried out by the server later: `Timeout` means the outcome is
//! unknown, as it does for a local disk.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;

use mqblk_core::bio::{BioFlags, Op};
use mqblk_core::driver::{Completions, HwNotifier};
use mqblk_core::driver::{Driver, HwQueueSetup, QueueRq, TimeoutAction};
use mqblk_core::driver::{Extent, RqRef};
use mqblk_core::error::{Error, InvalidKind, Result, Status};
use mqblk_core::limits::{Features, QueueLimits, SECTOR_SIZE};
use mqblk_nbd_proto::consts::{
    cmd, cmd_flags, reply_type, transmission_flags as tf, DEFAULT_MAX_PAYLOAD,
};
use mqblk_nbd_proto::transmission::{
    decode_block_status, reply_header_len, ErrorPayload, ReplyHeader, CHUNK_HEADER_LEN,
};
use mqblk_nbd_proto::{NbdErrno, Request};

use super::handshake::Negotiated;
use super::reconnect::Reconnect;
use super::send::TxBatch;
use super::url::NbdUrl;
use crate::transport::{ClientRx, ClientTx};

/// The NBD client driver of one device.
pub struct NbdDriver {
    name: String,
    neg: Negotiated,
    /// Connections not yet bound to a hardware queue, by queue index.
    pending: Mutex<Vec<Option<ClientTx>>>,
    /// Where to open the control connection that answers
    /// [`Driver::extents`] (block status), and the connection once open:
    /// a separate connection keeps the control plane's blocking
    /// request/reply off the hardware queues' sockets.
    control_at: Option<NbdUrl>,
    control: Mutex<Option<(ClientTx, ClientRx)>>,
    /// Reconnect dropped connections (`reconnect_ms`).
    reconnect: Option<Arc<Reconnect>>,
}

impl std::fmt::Debug for NbdDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdDriver")
            .field("name", &self.name)
            .field("negotiated", &self.neg)
            .finish()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl NbdDriver {
    /// A driver over negotiated connections (one per hardware queue).
    pub fn new(name: String, neg: Negotiated, conns: Vec<ClientTx>) -> NbdDriver {
        NbdDriver {
            name,
            neg,
            pending: Mutex::new(conns.into_iter().map(Some).collect()),
            control_at: None,
            control: Mutex::new(None),
            reconnect: None,
        }
    }

    /// Reconnect a dropped connection to `url` for up to `window`, and
    /// send the requests that were in flight on it again; only after that
    /// do they fail. A new connection's sends time out after
    /// `send_timeout`, as the first one's do.
    pub fn with_reconnect(
        mut self,
        url: NbdUrl,
        window: std::time::Duration,
        send_timeout: std::time::Duration,
    ) -> NbdDriver {
        self.reconnect = Some(Arc::new(Reconnect {
            url,
            window,
            send_timeout,
            size: self.neg.size,
            flags: self.neg.flags,
        }));
        self
    }

    /// Answer [`Driver::extents`] through a control connection to `url`,
    /// opened on first use (only if the server selected
    /// `base:allocation`).
    pub fn with_control(mut self, url: NbdUrl) -> NbdDriver {
        self.control_at = Some(url);
        self
    }

    /// Ask the server where `[offset, offset + len)` has data and holes.
    fn block_status(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        out: &mut Vec<Extent>,
    ) -> std::io::Result<bool> {
        let Some(ctx_id) = self.neg.base_allocation else {
            return Ok(false);
        };
        let Some(url) = &self.control_at else {
            return Ok(false);
        };
        let mut ctl = lock(&self.control);
        if ctl.is_none() {
            let (tx, n) = super::connect_negotiate(url).map_err(|e| protocol(&e))?;
            if n.base_allocation.is_none() {
                return Ok(false);
            }
            tx.socket().set_read_timeout(Some(super::SEND_TIMEOUT))?;
            tx.socket().set_write_timeout(Some(super::SEND_TIMEOUT))?;
            let rx = tx.receiver()?;
            *ctl = Some((tx, rx));
        }
        let (tx, rx) = ctl.as_mut().expect("opened above");
        let r = block_status_on(tx, rx, ctx_id, offset_bytes, len_bytes, out);
        if r.is_err() {
            // The stream may be mid-reply: start over next time.
            if let Some((tx, _)) = ctl.take() {
                tx.shutdown();
            }
        }
        r.map(|()| true)
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

/// A timed-out request whose reply is still due: the reply is drained.
#[derive(Clone, Copy, Debug)]
pub(super) struct Zombie {
    pub(super) cookie: u64,
    /// Data bytes a simple reply to it carries (a read's length).
    pub(super) read_len: u64,
}

/// One tag's place on the connection.
#[derive(Default)]
pub(super) struct Slot {
    /// The request waiting for its reply.
    pub(super) rq: Option<RqRef>,
    /// The cookie `rq` was sent with.
    pub(super) cookie: u64,
    /// Submissions on this tag so far (the cookie's high half).
    gen: u32,
    /// The first error chunk of a structured reply to `rq`.
    pub(super) err: Option<Status>,
    /// `rq`'s NBD command and command flags, to send it again after a
    /// reconnect.
    cmd: u16,
    flags: u16,
    pub(super) zombie: Option<Zombie>,
}

/// The cookie of the `gen`-th submission on `tag`.
#[inline]
fn cookie_of(tag: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32) | tag as u64
}

/// What a connection's submit side and receive thread share.
pub(super) struct ConnShared {
    /// Requests in flight, by tag.
    pub(super) slots: Box<[Mutex<Slot>]>,
    /// Timeouts that found the receive thread inside a tag's reply.
    pub(super) stalls: Box<[AtomicU8]>,
    /// Zombies not yet answered.
    pub(super) zombies: AtomicU32,
    /// Finished requests, for `poll`.
    pub(super) done: Mutex<Vec<(RqRef, Status)>>,
    /// The connection is gone: fail everything.
    pub(super) dead: AtomicBool,
    pub(super) notifier: HwNotifier,
    pub(super) structured: bool,
    /// How to get the connection back when it drops (`reconnect_ms`).
    pub(super) reconnect: Option<Arc<Reconnect>>,
    /// The connection dropped and is being reconnected: requests stay
    /// parked, unsent. Set by whoever sees the loss; cleared by the submit
    /// side when it takes the new connection.
    pub(super) down: AtomicBool,
    /// A new connection's sending half, for the submit side to take.
    pub(super) fresh: Mutex<Option<ClientTx>>,
    /// `fresh` holds a connection: take it and send every parked request
    /// again.
    pub(super) resend: AtomicBool,
}

/// One hardware queue: one NBD connection.
pub struct NbdQueue {
    sock: ClientTx,
    shared: Arc<ConnShared>,
    recv: Option<JoinHandle<()>>,
    /// Requests queued since the last doorbell.
    tx: TxBatch,
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
        if !self.shared.dead.load(Ordering::Acquire)
            && self.shared.zombies.load(Ordering::Acquire) == 0
        {
            // Soft disconnect: nothing is in flight when a device goes
            // (with a zombie still at the server, the close is hard).
            let disc = Request {
                cmd: cmd::DISC,
                ..Request::default()
            };
            let _ = self.sock.write_all(&disc.encode());
        }
        self.shared.dead.store(true, Ordering::Release);
        self.sock.shutdown();
        if let Some(fresh) = lock(&self.shared.fresh).take() {
            fresh.shutdown();
        }
        if let Some(h) = self.recv.take() {
            let _ = h.join();
        }
    }
}

/// Send the queued batch; if that fails, the connection is gone (the
/// receive thread then fails every parked request, these among them).
fn send(hq: &mut NbdQueue) {
    if hq.shared.resend.load(Ordering::Acquire) {
        adopt(hq);
    }
    if hq.tx.is_empty() {
        return;
    }
    if hq.shared.dead.load(Ordering::Acquire) || hq.shared.down.load(Ordering::Acquire) {
        // Parked: failed with the rest, or sent again on the next
        // connection.
        hq.tx.clear();
        return;
    }
    if hq.tx.send(&mut hq.sock, &hq.shared.slots).is_err() {
        lose(&hq.shared, &hq.sock);
    }
}

/// Kill the connection: mark it dead, wake the receive thread (which then
/// fails every parked request).
fn kill(shared: &ConnShared, sock: &ClientTx) {
    shared.dead.store(true, Ordering::Release);
    sock.shutdown();
}

/// The connection can no longer be used. With `reconnect_ms`, requests
/// stay parked and the receive thread reconnects; without, everything
/// fails.
fn lose(shared: &ConnShared, sock: &ClientTx) {
    if shared.reconnect.is_some() {
        shared.down.store(true, Ordering::Release);
        sock.shutdown();
    } else {
        kill(shared, sock);
    }
}

/// The request that sends `g`'s parked request again, on its next cookie.
fn next_submission(tag: usize, g: &mut Slot) -> Option<Request> {
    let rq = g.rq.as_ref()?;
    g.gen = g.gen.wrapping_add(1);
    g.cookie = cookie_of(tag, g.gen);
    g.err = None;
    let flush = g.cmd == cmd::FLUSH;
    Some(Request {
        flags: g.flags,
        cmd: g.cmd,
        cookie: g.cookie,
        offset: if flush { 0 } else { rq.offset_bytes() },
        len: if flush { 0 } else { rq.len_bytes() as u32 },
    })
}

/// Take the new connection the receive thread made, and send every
/// parked request on it again (what was queued for the old one is among
/// them).
fn adopt(hq: &mut NbdQueue) {
    let Some(tx) = lock(&hq.shared.fresh).take() else {
        return;
    };
    hq.shared.resend.store(false, Ordering::Release);
    hq.sock = tx;
    hq.tx.clear();
    for (tag, slot) in hq.shared.slots.iter().enumerate() {
        let mut g = lock(slot);
        if let Some(req) = next_submission(tag, &mut g) {
            hq.shared.stalls[tag].store(0, Ordering::Relaxed);
            hq.tx
                .push(&req, (req.cmd == cmd::WRITE).then_some(tag as u32));
        }
    }
    hq.shared.down.store(false, Ordering::Release);
}

pub(super) fn status_of(e: NbdErrno) -> Status {
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
            slots: (0..nr_slots).map(|_| Mutex::new(Slot::default())).collect(),
            stalls: (0..nr_slots).map(|_| AtomicU8::new(0)).collect(),
            zombies: AtomicU32::new(0),
            done: Mutex::new(Vec::with_capacity(nr_slots)),
            dead: AtomicBool::new(false),
            notifier: setup.notifier,
            structured: self.neg.structured,
            reconnect: self.reconnect.clone(),
            down: AtomicBool::new(false),
            fresh: Mutex::new(None),
            resend: AtomicBool::new(false),
        });
        let rsock = sock.receiver().map_err(|e| Error::Setup {
            device: self.name.as_str().into(),
            reason: format!("cannot clone the connection's socket: {e}"),
        })?;
        let sh = shared.clone();
        let recv = std::thread::Builder::new()
            .name(format!("{}-recv{}", self.name, setup.index))
            .spawn(move || super::receive::receive(rsock, &sh))
            .map_err(|e| Error::Setup {
                device: self.name.as_str().into(),
                reason: format!("cannot start the receive thread: {e}"),
            })?;
        Ok(NbdQueue {
            sock,
            shared,
            recv: Some(recv),
            tx: TxBatch::new(nr_slots),
        })
    }

    fn queue_rq(
        &self,
        hq: &mut NbdQueue,
        rq: RqRef,
        last: bool,
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
        debug_assert!(g.rq.is_none(), "tag {tag} already in flight");
        g.gen = g.gen.wrapping_add(1);
        g.cookie = cookie_of(tag, g.gen);
        g.err = None;
        g.cmd = command;
        g.flags = flags;
        hq.shared.stalls[tag].store(0, Ordering::Relaxed);
        let req = Request {
            flags,
            cmd: command,
            cookie: g.cookie,
            offset: if command == cmd::FLUSH {
                0
            } else {
                rq.offset_bytes()
            },
            len: if command == cmd::FLUSH { 0 } else { len as u32 },
        };
        g.rq = Some(rq);
        drop(g);
        // The header (and a write's payload, gathered from the slot) goes
        // out with the rest of the batch.
        let payload = (command == cmd::WRITE).then_some(tag as u32);
        hq.tx.push(&req, payload);
        if last {
            send(hq);
        }
        QueueRq::Issued
    }

    fn commit_rqs(&self, hq: &mut NbdQueue) {
        send(hq);
    }

    fn poll(&self, hq: &mut NbdQueue, done: &mut Completions<'_>) -> usize {
        // The core rings the doorbell before it polls; this is for safety
        // only: a request must never wait unsent.
        send(hq);
        let mut list = lock(&hq.shared.done);
        let n = list.len();
        for (rq, status) in list.drain(..) {
            done.complete(rq, status);
        }
        n
    }

    /// See the module's doc: the request leaves its slot and completes
    /// with `Timeout`; its late reply is drained.
    fn timeout(&self, hq: &mut NbdQueue, tag: u32, done: &mut Completions<'_>) -> TimeoutAction {
        send(hq);
        let sh = &*hq.shared;
        let Some(slot) = sh.slots.get(tag as usize) else {
            return TimeoutAction::ResetTimer;
        };
        let mut g = match slot.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                // The receive thread is reading this request's reply into
                // its buffers. Give it one more period; then the stream is
                // stuck mid-reply, and only closing the socket gets the
                // buffers back (the receive thread then fails the request).
                if sh.stalls[tag as usize].fetch_add(1, Ordering::AcqRel) >= 1 {
                    lose(sh, &hq.sock);
                }
                return TimeoutAction::ResetTimer;
            }
        };
        // Not parked: answered, and on the completed list for `poll`.
        let Some(rq) = g.rq.take() else {
            return TimeoutAction::ResetTimer;
        };
        let unanswered = g.zombie.is_some();
        // While the connection is down the request was never sent (or its
        // connection is gone): no reply will come to drain.
        if !unanswered && !sh.down.load(Ordering::Acquire) {
            let read_len = if rq.op() == Op::Read {
                rq.len_bytes()
            } else {
                0
            };
            g.zombie = Some(Zombie {
                cookie: g.cookie,
                read_len,
            });
            sh.zombies.fetch_add(1, Ordering::AcqRel);
        }
        drop(g);
        done.complete(rq, Status::Timeout);
        if unanswered {
            // The last timed-out request of this tag was never answered
            // either: the server answers nothing; close the connection.
            lose(sh, &hq.sock);
        }
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

    /// From `BLOCK_STATUS` with `base:allocation`, on a control
    /// connection of its own.
    fn extents(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) -> Result<bool> {
        self.block_status(offset_bytes, len_bytes, out)
            .map_err(|e| Error::Setup {
                device: self.name.as_str().into(),
                reason: format!("block status of {len_bytes} bytes at {offset_bytes}: {e}"),
            })
    }
}

/// `BLOCK_STATUS` on the control connection until `[offset, offset + len)`
/// is described, in order and without gaps.
fn block_status_on(
    tx: &mut ClientTx,
    s: &mut ClientRx,
    ctx_id: u32,
    offset_bytes: u64,
    len_bytes: u64,
    out: &mut Vec<Extent>,
) -> std::io::Result<()> {
    use mqblk_nbd_proto::consts::state;
    let end = offset_bytes + len_bytes;
    let mut at = offset_bytes;
    let mut descs = Vec::new();
    let mut payload = Vec::new();
    let mut cookie = 0u64;
    while at < end {
        cookie += 1;
        let len = (end - at).min(1 << 30) as u32;
        let req = Request {
            flags: 0,
            cmd: cmd::BLOCK_STATUS,
            cookie,
            offset: at,
            len,
        };
        tx.write_all(&req.encode())?;
        let mut got_any = false;
        let mut failed: Option<String> = None;
        loop {
            let mut hdr = [0u8; CHUNK_HEADER_LEN];
            s.read_exact(&mut hdr[..4])?;
            let magic = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
            let hlen = reply_header_len(magic).map_err(|e| protocol(&e.to_string()))?;
            s.read_exact(&mut hdr[4..hlen])?;
            let h = match ReplyHeader::decode(&hdr[..hlen]).map_err(|e| protocol(&e.to_string()))? {
                ReplyHeader::Simple { error, .. } => {
                    return Err(protocol(&format!(
                        "BLOCK_STATUS answered with a simple reply (error {error})"
                    )))
                }
                ReplyHeader::Chunk(h) => h,
            };
            if h.cookie != cookie || h.len > MAX_CHUNK_META * 16 {
                return Err(protocol("unexpected BLOCK_STATUS reply"));
            }
            payload.resize(h.len as usize, 0);
            s.read_exact(&mut payload)?;
            match h.typ {
                reply_type::BLOCK_STATUS => {
                    descs.clear();
                    let id = decode_block_status(&payload, &mut descs)
                        .map_err(|e| protocol(&e.to_string()))?;
                    if id == ctx_id && !got_any {
                        got_any = true;
                        for d in &descs {
                            if at >= end || d.len == 0 {
                                break;
                            }
                            let l = u64::from(d.len).min(end - at);
                            out.push(Extent {
                                offset_bytes: at,
                                len_bytes: l,
                                hole: d.flags & state::HOLE != 0,
                                zero: d.flags & state::ZERO != 0,
                            });
                            at += l;
                        }
                    }
                }
                reply_type::NONE => {}
                t if t & reply_type::FLAG_ERROR != 0 => {
                    let e =
                        ErrorPayload::decode(t, &payload).map_err(|e| protocol(&e.to_string()))?;
                    failed = Some(format!("{}: {}", e.errno.name(), e.message));
                }
                _ => return Err(protocol("unexpected chunk type in BLOCK_STATUS reply")),
            }
            if h.done() {
                break;
            }
        }
        if let Some(why) = failed {
            return Err(std::io::Error::other(format!("BLOCK_STATUS failed: {why}")));
        }
        if !got_any {
            return Err(protocol(
                "BLOCK_STATUS reply without base:allocation extents",
            ));
        }
    }
    Ok(())
}

/// Largest error or unknown-chunk payload the client reads.
pub(super) const MAX_CHUNK_META: u32 = 64 * 1024;

pub(super) fn protocol(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}
