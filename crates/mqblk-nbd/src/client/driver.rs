//! The NBD client driver: one NBD connection per hardware queue (Linux
//! drivers/block/nbd.c, where each socket is one blk-mq hardware queue),
//! driven by the contexts themselves, with no thread of its own.
//!
//! `queue_rq` parks the request in the slot of its tag and encodes its
//! header into the queue's send batch; the batch goes out in one `writev`
//! at the doorbell (`last`, or `commit_rqs`), a write's payload gathered
//! from its request without a copy. The NBD cookie is the tag in the low
//! 32 bits and the slot's generation in the high 32, so a reply always
//! names one submission, never a later reuse of the tag. `poll` reads what
//! the socket holds without waiting, parses the replies that are whole
//! (`receive.rs`), fills read data into the requests' segments, and
//! completes them into the core's batch. A context alone on its queue
//! sleeps in [`Driver::wait`], on the queue's interrupt line (`irq.rs`:
//! the socket, in an epoll set that outlives a reconnect), which is also
//! part of every context's completion fd, so an event loop sleeps until a
//! reply arrives. If the connection drops, every parked request fails (or,
//! with `reconnect_ms`, is sent again on a new connection: `reconnect.rs`),
//! and later requests fail at once: nothing waits for a reply that cannot
//! come.
//!
//! Timeouts. NBD has no cancel: a request the server has is the server's
//! until it answers. Linux's nbd tears the connection down on a timeout
//! (`nbd_xmit_timeout`) and waits for user space to reconnect. Here the
//! connection is kept: the timed-out request is taken out of its slot and
//! completed with [`Status::Timeout`]; its cookie is kept as a *zombie*,
//! and when the late reply comes its payload is read and thrown away. A
//! server that is slow, not dead, so costs one request, not the
//! connection. The connection is closed (and every request on it fails)
//! only where the stream can no longer be followed: a second timeout on a
//! tag whose zombie is still unanswered (the server answers nothing), or a
//! reply that stays stuck half-read past two timeouts (the parser is
//! inside that request's buffers; closing the connection is the only way
//! to get them back). A timed-out write may still be carried out by the
//! server later: `Timeout` means the outcome is unknown, as it does for a
//! local disk.

use std::io::{Read, Write};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use mqblk_core::bio::{BioFlags, Op};
use mqblk_core::driver::Completions;
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
use mqblk_nbd_proto::Request;

use super::handshake::{connect_negotiate, Negotiated};
use super::irq::Irq;
use super::queue::{cookie_of, lock, protocol, InFlight, Slot, Zombie, MAX_CHUNK_META};
use super::receive::Receiver;
use super::reconnect::{Link, Reconnect, GAVE_UP, UP};
use super::send::TxBatch;
use super::url::NbdUrl;
use crate::transport::{ClientRx, ClientTx};

/// How long a send may make no progress before the connection is failed.
pub const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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
            let (tx, n) = connect_negotiate(url).map_err(|e| protocol(&e))?;
            if n.base_allocation.is_none() {
                return Ok(false);
            }
            tx.socket().set_read_timeout(Some(SEND_TIMEOUT))?;
            tx.socket().set_write_timeout(Some(SEND_TIMEOUT))?;
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

/// One hardware queue: one NBD connection.
pub struct NbdQueue {
    sock: ClientTx,
    rx: Receiver,
    fl: InFlight,
    /// Requests queued since the last doorbell.
    tx: TxBatch,
    irq: Irq,
    /// The connection is gone for good: everything fails.
    dead: bool,
    /// The connection dropped and a new one is being made: requests stay
    /// parked, unsent.
    down: bool,
    reconnect: Option<Arc<Reconnect>>,
    link: Arc<Link>,
    reconnector: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for NbdQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdQueue")
            .field("dead", &self.dead)
            .field("down", &self.down)
            .finish()
    }
}

impl Drop for NbdQueue {
    fn drop(&mut self) {
        if !self.dead && !self.down && self.fl.zombies == 0 {
            // Soft disconnect: nothing is in flight when a device goes
            // (with a zombie still at the server, the close is hard).
            let disc = Request {
                cmd: cmd::DISC,
                ..Request::default()
            };
            let _ = self.sock.write_all(&disc.encode());
        }
        self.sock.shutdown();
        self.link.closing.store(true, Ordering::Release);
        if let Some(h) = self.reconnector.take() {
            let _ = h.join();
        }
        if let Some(fresh) = lock(&self.link.fresh).take() {
            fresh.shutdown();
        }
    }
}

/// Send the queued batch. A failed send shuts the socket down; the next
/// `poll` then finds the connection lost.
fn send(hq: &mut NbdQueue) {
    if hq.down {
        take_link(hq, None);
    }
    if hq.tx.is_empty() {
        return;
    }
    if hq.dead || hq.down {
        // Parked: failed with the rest, or sent again on the next
        // connection.
        hq.tx.clear();
        return;
    }
    if hq.tx.send(&mut hq.sock, &hq.fl.slots).is_err() {
        hq.tx.clear();
        hq.sock.shutdown();
    }
}

/// The request that sends `slot`'s parked request again, on its next
/// cookie.
fn next_submission(tag: usize, slot: &mut Slot) -> Option<Request> {
    let rq = slot.rq.as_ref()?;
    slot.gen = slot.gen.wrapping_add(1);
    slot.cookie = cookie_of(tag, slot.gen);
    slot.err = None;
    slot.stalls = 0;
    let flush = slot.cmd == cmd::FLUSH;
    Some(Request {
        flags: slot.flags,
        cmd: slot.cmd,
        cookie: slot.cookie,
        offset: if flush { 0 } else { rq.offset_bytes() },
        len: if flush { 0 } else { rq.len_bytes() as u32 },
    })
}

/// While the connection is down: take what the reconnect thread has to
/// say. A new connection is taken, and every parked request is sent on it
/// again; if the thread gave up, the requests fail (in `poll`, which has
/// `done`).
fn take_link(hq: &mut NbdQueue, done: Option<&mut Completions<'_>>) {
    match hq.link.outcome.load(Ordering::Acquire) {
        UP => {
            hq.irq.clear_kick();
            if let Some(h) = hq.reconnector.take() {
                let _ = h.join();
            }
            let Some(tx) = lock(&hq.link.fresh).take() else {
                return;
            };
            let rx = match tx.receiver() {
                Ok(rx) => rx,
                Err(_) => {
                    tx.shutdown();
                    hq.down = false;
                    hq.dead = true;
                    return;
                }
            };
            if hq.irq.watch(rx.socket().fd()).is_err() {
                tx.shutdown();
                hq.down = false;
                hq.dead = true;
                return;
            }
            hq.sock = tx;
            hq.rx.reset(rx);
            hq.tx.clear();
            for (tag, slot) in hq.fl.slots.iter_mut().enumerate() {
                if let Some(req) = next_submission(tag, slot) {
                    hq.tx
                        .push(&req, (req.cmd == cmd::WRITE).then_some(tag as u32));
                }
            }
            hq.down = false;
        }
        GAVE_UP => {
            if let Some(done) = done {
                hq.irq.clear_kick();
                if let Some(h) = hq.reconnector.take() {
                    let _ = h.join();
                }
                hq.down = false;
                fail_all(hq, done);
            }
        }
        _ => {}
    }
}

/// The connection is gone for good: fail every parked request, and every
/// later one.
fn fail_all(hq: &mut NbdQueue, done: &mut Completions<'_>) -> usize {
    hq.dead = true;
    hq.tx.clear();
    let mut n = 0;
    for slot in hq.fl.slots.iter_mut() {
        if let Some(rq) = slot.rq.take() {
            // A request whose reply stalled past its deadline timed out.
            let status = if slot.stalls > 0 {
                Status::Timeout
            } else {
                Status::IoError
            };
            done.complete(rq, status);
            n += 1;
        }
    }
    n
}

/// The connection broke (`why`). With `reconnect_ms` (and a server that
/// did not break the protocol), requests stay parked while a new
/// connection is made; otherwise everything fails.
fn lost(hq: &mut NbdQueue, why: &std::io::Error, done: &mut Completions<'_>) -> usize {
    hq.irq.unwatch(hq.rx.socket().fd());
    hq.sock.shutdown();
    hq.tx.clear();
    for slot in hq.fl.slots.iter_mut() {
        slot.zombie = None;
    }
    hq.fl.zombies = 0;
    if let Some(rc) = &hq.reconnect {
        if why.kind() != std::io::ErrorKind::InvalidData {
            let started = hq.irq.kicker().and_then(|kick| {
                super::reconnect::start(rc.clone(), hq.link.clone(), kick, why.to_string())
            });
            if let Ok(h) = started {
                hq.reconnector = Some(h);
                hq.down = true;
                return 0;
            }
        }
    }
    fail_all(hq, done)
}

impl Driver for NbdDriver {
    type HwQueue = NbdQueue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<NbdQueue> {
        let setup_err = |reason: String| Error::Setup {
            device: self.name.as_str().into(),
            reason,
        };
        let sock = lock(&self.pending)
            .get_mut(setup.index as usize)
            .and_then(Option::take)
            .ok_or_else(|| {
                setup_err(format!("no connection for hardware queue {}", setup.index))
            })?;
        let nr_slots = (setup.queue_depth + setup.reserved_tags) as usize;
        let rx = sock
            .receiver()
            .map_err(|e| setup_err(format!("cannot clone the connection's socket: {e}")))?;
        let irq = Irq::new()
            .and_then(|irq| irq.watch(rx.socket().fd()).map(|()| irq))
            .map_err(|e| setup_err(format!("cannot make the interrupt line: {e}")))?;
        Ok(NbdQueue {
            sock,
            rx: Receiver::new(rx),
            fl: InFlight {
                slots: (0..nr_slots).map(|_| Slot::default()).collect(),
                zombies: 0,
                structured: self.neg.structured,
            },
            tx: TxBatch::new(nr_slots),
            irq,
            dead: false,
            down: false,
            reconnect: self.reconnect.clone(),
            link: Arc::new(Link::default()),
            reconnector: None,
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
        let tag = rq.tag() as usize;
        if too_long || hq.dead || tag >= hq.fl.slots.len() {
            let status = if too_long {
                Status::Invalid(InvalidKind::Driver)
            } else {
                Status::IoError
            };
            done.complete(rq, status);
            return QueueRq::Issued;
        }
        let slot = &mut hq.fl.slots[tag];
        debug_assert!(slot.rq.is_none(), "tag {tag} already in flight");
        slot.gen = slot.gen.wrapping_add(1);
        slot.cookie = cookie_of(tag, slot.gen);
        slot.err = None;
        slot.cmd = command;
        slot.flags = flags;
        slot.stalls = 0;
        let req = Request {
            flags,
            cmd: command,
            cookie: slot.cookie,
            offset: if command == cmd::FLUSH {
                0
            } else {
                rq.offset_bytes()
            },
            len: if command == cmd::FLUSH { 0 } else { len as u32 },
        };
        slot.rq = Some(rq);
        // The header (and a write's payload, gathered from the slot) goes
        // out with the rest of the batch.
        hq.tx
            .push(&req, (command == cmd::WRITE).then_some(tag as u32));
        if last {
            send(hq);
        }
        QueueRq::Issued
    }

    fn commit_rqs(&self, hq: &mut NbdQueue) {
        send(hq);
    }

    fn poll(&self, hq: &mut NbdQueue, done: &mut Completions<'_>) -> usize {
        if hq.down {
            take_link(hq, Some(done));
        }
        // The core rings the doorbell before it polls; this also sends
        // what a reconnect left to send again.
        send(hq);
        if hq.dead || hq.down {
            return 0;
        }
        match hq.rx.pump(&mut hq.fl, done) {
            Ok(n) => n,
            Err(e) => {
                let n = done.len();
                lost(hq, &e, done);
                done.len() - n
            }
        }
    }

    fn wait(&self, hq: &mut NbdQueue, timeout: std::time::Duration) -> bool {
        hq.irq.wait(timeout);
        true
    }

    fn can_wait(&self) -> bool {
        true
    }

    fn irq_fd(&self, hq: &NbdQueue) -> Option<RawFd> {
        Some(hq.irq.raw())
    }

    /// See the module's doc: the request leaves its slot and completes
    /// with `Timeout`; its late reply is drained.
    fn timeout(&self, hq: &mut NbdQueue, tag: u32, done: &mut Completions<'_>) -> TimeoutAction {
        send(hq);
        let stalled = hq.rx.inside() == Some(tag);
        let down = hq.down;
        let Some(slot) = hq.fl.slots.get_mut(tag as usize) else {
            return TimeoutAction::ResetTimer;
        };
        if stalled {
            // The parser is filling this request's buffers. Give it one
            // more period; then the stream is stuck mid-reply, and only
            // closing the connection gets the buffers back (the next poll
            // then finds it lost).
            slot.stalls = slot.stalls.saturating_add(1);
            if slot.stalls >= 2 {
                hq.sock.shutdown();
            }
            return TimeoutAction::ResetTimer;
        }
        let Some(rq) = slot.rq.take() else {
            return TimeoutAction::ResetTimer;
        };
        let unanswered = slot.zombie.is_some();
        // While the connection is down the request is not at the server
        // (or its connection is gone): no reply will come to drain.
        if !unanswered && !down {
            let read_len = if rq.op() == Op::Read {
                rq.len_bytes()
            } else {
                0
            };
            slot.zombie = Some(Zombie {
                cookie: slot.cookie,
                read_len,
            });
            hq.fl.zombies += 1;
        }
        done.complete(rq, Status::Timeout);
        if unanswered {
            // The last timed-out request of this tag was never answered
            // either: the server answers nothing; close the connection.
            hq.sock.shutdown();
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
        // Completions come from `poll`; the interrupt line wakes waiters.
        false
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
