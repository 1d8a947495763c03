//! One server connection as a non-blocking state machine, driven by its
//! I/O thread's event loop: negotiation (with TLS through rustls's
//! non-blocking API), then transmission.
//!
//! Transmission: requests are parsed in batches from the thread's scratch
//! buffer (bytes of a partial header wait in `stash`; a write payload that
//! has not all arrived is read straight into its own data buffer), each
//! becomes a bio on the thread's context for the export (`bio.private` =
//! connection index << 32 | slot), and completions come back through
//! [`Conn::complete`] as replies queued in completion order. Replies go out
//! with one `writev` per batch of up to [`IOV_BATCH`] slices, read data
//! straight from the bio's buffer.
//!
//! Bounds: at most `max_requests` requests and `max_bytes` of buffers per
//! connection; past them the connection stops reading its socket (the
//! client waits in TCP). A client that stops mid-message, or stops reading
//! replies, for `stall_timeout` is dropped; so is one that has not
//! finished negotiating within `handshake_timeout`, or (if set) one idle
//! for `idle_timeout`.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::IpAddr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use mqblk_core::bio::{Bio, BioFlags, Op};
use mqblk_core::error::{InvalidKind, Status};
use mqblk_core::{Context, Device, IoBuf};
use mqblk_nbd_proto::consts::{cmd, opt, rep, reply_flags, reply_type, state};
use mqblk_nbd_proto::handshake::{
    encode_greeting, encode_option_reply, OptionHeader, OPTION_HEADER_LEN,
};
use mqblk_nbd_proto::transmission::{
    encode_block_status, encode_chunk_header, encode_error_chunk, encode_none,
    encode_offset_data_prefix, encode_offset_hole, encode_simple_reply, Descriptor,
    OFFSET_DATA_PREFIX_LEN, REQUEST_LEN, SIMPLE_REPLY_LEN,
};
use mqblk_nbd_proto::{check, payload_len, Command, NbdErrno, Negotiation, Request, Session, Step};

use super::event_loop::{Done, LogLimit};
use super::Shared;
use crate::transport::Socket;

/// Why a connection ended early.
#[derive(Debug)]
pub(crate) enum End {
    /// The peer closed or aborted: nothing wrong.
    Closed,
    /// The peer broke the protocol or stalled.
    Dropped(String),
    /// The socket failed.
    Io(io::Error),
}

/// An accepted socket, before it is a connection.
pub(crate) struct Limbo {
    pub(crate) sock: Socket,
    pub(crate) peer: Option<IpAddr>,
    /// Why the server will not serve it (answered, then closed).
    pub(crate) refusal: Option<String>,
}

/// Smallest data buffer class (one page).
const MIN_CLASS_SHIFT: u32 = 12;
/// Buffer size classes: 4 KiB .. 64 MiB.
const NR_CLASSES: usize = 15;
/// Bytes of queued error and block status replies before the connection
/// stops taking requests and sends them.
const MAX_META_BYTES: usize = 1 << 20;
/// Slices per writev.
pub(crate) const IOV_BATCH: usize = 64;
/// Socket reads per connection per wake-up, so one busy client cannot
/// starve the others on its thread.
const READS_PER_WAKE: u32 = 8;
/// Reads above this size ask the device where its holes are, and send
/// holes as `OFFSET_HOLE` chunks (structured replies only).
const SPARSE_READ_MIN: u32 = 64 * 1024;

/// One reply waiting to be written.
enum Out {
    /// A header-only reply (simple reply, or a small chunk).
    Small { buf: [u8; 32], len: u8 },
    /// Read data: the header (simple or `OFFSET_DATA` prefix), then `len`
    /// bytes of `data`.
    Data {
        prefix: [u8; OFFSET_DATA_PREFIX_LEN],
        prefix_len: u8,
        data: IoBuf,
        len: u32,
    },
    /// A sparse read: chunk headers in `headers`, and `pieces` of
    /// (header start, header len, data start, data len) into it and `data`.
    Sparse {
        headers: Vec<u8>,
        pieces: Vec<[u32; 4]>,
        data: IoBuf,
    },
    /// A variable-size reply (error chunk with a message, block status).
    Bytes(Vec<u8>),
}

impl Out {
    fn for_each_part<'a>(&'a self, mut f: impl FnMut(&'a [u8]) -> bool) {
        match self {
            Out::Small { buf, len } => {
                f(&buf[..*len as usize]);
            }
            Out::Data {
                prefix,
                prefix_len,
                data,
                len,
            } => {
                if f(&prefix[..*prefix_len as usize]) {
                    f(&data.as_slice()[..*len as usize]);
                }
            }
            Out::Sparse {
                headers,
                pieces,
                data,
            } => {
                for p in pieces {
                    let h = &headers[p[0] as usize..(p[0] + p[1]) as usize];
                    if !f(h) {
                        return;
                    }
                    if p[3] > 0 && !f(&data.as_slice()[p[2] as usize..(p[2] + p[3]) as usize]) {
                        return;
                    }
                }
            }
            Out::Bytes(v) => {
                f(v);
            }
        }
    }

    fn len(&self) -> usize {
        let mut n = 0;
        self.for_each_part(|p| {
            n += p.len();
            true
        });
        n
    }
}

/// A request between submission and reply.
#[derive(Clone, Copy, Default)]
struct Slot {
    cookie: u64,
    offset: u64,
    len: u32,
    cmd: u16,
    fast_zero: bool,
}

/// A write whose payload has not all arrived.
struct Pending {
    req: Request,
    buf: IoBuf,
    got: usize,
    len: usize,
}

/// Where the connection is in the protocol.
enum Phase<'s> {
    /// Negotiating.
    Handshake {
        neg: Box<Negotiation<'s>>,
        got_flags: bool,
        /// `STARTTLS` was acknowledged: start TLS once the ack is out.
        tls_next: bool,
    },
    /// Refused: answer the first option with the reason, then close.
    Refusing { reason: String, got_flags: bool },
    /// Serving requests.
    Transmission(Session),
}

/// How a connection is ending.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Closing {
    /// Send what is queued (and TLS close_notify), then close.
    Graceful,
    /// Close now; only wait for the I/O in flight.
    Abort,
}

/// One connection.
pub(crate) struct Conn<'s> {
    sh: &'s Shared,
    sock: Socket,
    tls: Option<Box<rustls::ServerConnection>>,
    phase: Phase<'s>,
    peer: Option<IpAddr>,
    limits: super::ConnLimits,
    /// Unparsed input: a partial header, negotiation bytes, or requests
    /// held back by the bounds.
    stash: Vec<u8>,
    pending: Option<Pending>,
    /// Negotiation output not yet sent.
    hs_out: Vec<u8>,
    out: VecDeque<Out>,
    /// Bytes of `out.front()` already written.
    out_pos: usize,
    out_meta_bytes: usize,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    cache: [Vec<IoBuf>; NR_CLASSES],
    cached_bytes: u64,
    held_bytes: u64,
    submitted: u32,
    busy_slots: u32,
    device: Option<Device>,
    /// The socket may have input (edge-triggered: cleared on `WouldBlock`).
    pub(crate) readable: bool,
    /// The socket may take output.
    pub(crate) writable: bool,
    /// In the loop's dirty list.
    pub(crate) dirty: bool,
    /// The deadline the loop's timer heap holds for us.
    pub(crate) timer_at: Option<Instant>,
    /// Stopped reading after `READS_PER_WAKE` reads with input left.
    pub(crate) more: bool,
    /// Stopped taking requests because the export's context had no room
    /// (every tag in use): the loop drives us again once it reaps a
    /// completion of that context. The requests wait in the socket.
    pub(crate) stalled: bool,
    /// In its export context's list of connections waiting for room.
    pub(crate) waiting: bool,
    accepted_at: Instant,
    last_active: Instant,
    partial_since: Option<Instant>,
    blocked_since: Option<Instant>,
    draining: bool,
    closing: Option<Closing>,
    requests: u64,
    errors: u64,
}

fn class_of(len: usize) -> usize {
    let c = len
        .max(1 << MIN_CLASS_SHIFT)
        .next_power_of_two()
        .trailing_zeros()
        - MIN_CLASS_SHIFT;
    (c as usize).min(NR_CLASSES - 1)
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl<'s> Conn<'s> {
    pub(crate) fn new(limbo: Limbo, sh: &'s Shared, now: Instant) -> Conn<'s> {
        let greeting;
        let phase = match limbo.refusal {
            Some(reason) => {
                greeting = encode_greeting(Negotiation::HANDSHAKE_FLAGS);
                Phase::Refusing {
                    reason,
                    got_flags: false,
                }
            }
            None => {
                let neg = Negotiation::new(&sh.infos, sh.tls_mode);
                greeting = neg.greeting();
                Phase::Handshake {
                    neg: Box::new(neg),
                    got_flags: false,
                    tls_next: false,
                }
            }
        };
        Conn {
            sh,
            sock: limbo.sock,
            tls: None,
            phase,
            peer: limbo.peer,
            limits: sh.limits,
            stash: Vec::new(),
            pending: None,
            hs_out: greeting.to_vec(),
            out: VecDeque::new(),
            out_pos: 0,
            out_meta_bytes: 0,
            slots: Vec::new(),
            free_slots: Vec::new(),
            cache: Default::default(),
            cached_bytes: 0,
            held_bytes: 0,
            submitted: 0,
            busy_slots: 0,
            device: None,
            readable: true,
            writable: true,
            dirty: false,
            timer_at: None,
            more: false,
            stalled: false,
            waiting: false,
            accepted_at: now,
            last_active: now,
            partial_since: None,
            blocked_since: None,
            draining: false,
            closing: None,
            requests: 0,
            errors: 0,
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.sock.fd()
    }

    pub(crate) fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    pub(crate) fn is_refusal(&self) -> bool {
        matches!(self.phase, Phase::Refusing { .. })
    }

    /// The export served, once in transmission.
    pub(crate) fn export(&self) -> Option<usize> {
        match &self.phase {
            Phase::Transmission(s) if self.closing != Some(Closing::Abort) => Some(s.export),
            _ => None,
        }
    }

    /// Done: closing, nothing in flight, nothing left to send.
    pub(crate) fn finished(&self) -> bool {
        match self.closing {
            None => false,
            Some(Closing::Abort) => self.submitted == 0,
            Some(Closing::Graceful) => {
                self.submitted == 0 && self.out.is_empty() && self.hs_out.is_empty()
            }
        }
    }

    /// When the loop must look at this connection again, whatever
    /// happens on its socket.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let lim = &self.limits;
        if self.closing == Some(Closing::Abort) {
            return None;
        }
        if !matches!(self.phase, Phase::Transmission(_)) {
            return Some(self.accepted_at + lim.handshake_timeout);
        }
        let mut d: Option<Instant> = None;
        let mut at = |t: Instant| d = Some(d.map_or(t, |x| x.min(t)));
        if let Some(t) = self.partial_since {
            at(t + lim.stall_timeout);
        }
        if let Some(t) = self.blocked_since {
            at(t + lim.stall_timeout);
        }
        if let Some(idle) = lim.idle_timeout {
            if self.submitted == 0 && self.out.is_empty() && self.partial_since.is_none() {
                at(self.last_active + idle);
            }
        }
        d
    }

    /// The deadline passed: say why, and drop the connection.
    pub(crate) fn expired(&mut self, sh: &Shared, now: Instant, log: &mut LogLimit) {
        let lim = &self.limits;
        let why = if !matches!(self.phase, Phase::Transmission(_)) {
            format!(
                "negotiation not finished within {} ms (handshake timeout)",
                lim.handshake_timeout.as_millis()
            )
        } else if self.partial_since.is_some() {
            format!(
                "stalled mid-request for {} ms (stall timeout)",
                lim.stall_timeout.as_millis()
            )
        } else if self.blocked_since.is_some() {
            format!(
                "not reading replies for {} ms (stall timeout)",
                lim.stall_timeout.as_millis()
            )
        } else {
            format!(
                "idle for {} ms (idle timeout)",
                lim.idle_timeout.unwrap_or_default().as_millis()
            )
        };
        log.line(now, format_args!("dropping {}: {why}", self.who()));
        sh.stats.dropped.fetch_add(1, Ordering::Relaxed);
        self.abort();
    }

    fn who(&self) -> String {
        match self.peer {
            Some(ip) => format!("a connection from {ip}"),
            None => "a connection".into(),
        }
    }

    fn abort(&mut self) {
        self.closing = Some(Closing::Abort);
        self.sock.shutdown();
        self.stash = Vec::new();
        if let Some(p) = self.pending.take() {
            self.put_buf(p.buf);
        }
        while let Some(o) = self.out.pop_front() {
            self.drop_out(o);
        }
        self.hs_out = Vec::new();
    }

    /// The connection failed: count it, and close it.
    pub(crate) fn fail(&mut self, end: End, sh: &Shared) {
        match end {
            End::Closed => {}
            End::Dropped(why) => {
                sh.stats.dropped.fetch_add(1, Ordering::Relaxed);
                if std::env::var_os("MQBLK_NBD_DEBUG").is_some() {
                    eprintln!("mqblk serve: connection dropped: {why}");
                }
            }
            End::Io(e) => {
                sh.stats.dropped.fetch_add(1, Ordering::Relaxed);
                if std::env::var_os("MQBLK_NBD_DEBUG").is_some() {
                    eprintln!("mqblk serve: connection failed: {e}");
                }
            }
        }
        self.abort();
    }

    /// The server is stopping: finish what is in flight, then close.
    pub(crate) fn start_drain(&mut self) {
        self.draining = true;
        if !matches!(self.phase, Phase::Transmission(_)) {
            self.abort();
        }
    }

    /// Last words: counters, TLS close_notify, and the socket.
    pub(crate) fn close(&mut self, sh: &Shared) {
        debug_assert!(self.submitted == 0);
        if self.closing == Some(Closing::Graceful) {
            if let Some(t) = self.tls.as_mut() {
                t.send_close_notify();
                let _ = t.write_tls(&mut self.sock);
            }
        }
        sh.stats
            .requests
            .fetch_add(self.requests, Ordering::Relaxed);
        sh.stats.errors.fetch_add(self.errors, Ordering::Relaxed);
        self.sock.shutdown();
        for c in self.cache.iter_mut() {
            c.clear();
        }
    }

    // ---- bytes in and out, plain or TLS ----

    /// Read what is there. `Ok(0)` is the end of the stream.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = self.tls.as_mut() else {
            return self.sock.read(buf);
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if would_block(&e) => {}
                Err(e) => return Err(e),
            }
            match tls.read_tls(&mut self.sock) {
                Ok(0) => return Ok(0),
                Ok(_) => {
                    let r = tls.process_new_packets();
                    // Handshake messages and alerts go out even on error.
                    while tls.wants_write() {
                        match tls.write_tls(&mut self.sock) {
                            Ok(_) => {}
                            Err(e) if would_block(&e) => break,
                            Err(e) => return Err(e),
                        }
                    }
                    if let Err(e) = r {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Push what TLS holds to the socket. `Ok(true)` when all is out.
    fn push_tls(&mut self) -> io::Result<bool> {
        push_tls_on(&mut self.sock, &mut self.tls)
    }

    /// Send from `iov`; `WouldBlock` when nothing could be taken.
    fn send(&mut self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        send_on(&mut self.sock, &mut self.tls, iov)
    }

    // ---- the state machine ----

    /// Make all the progress possible without blocking.
    pub(crate) fn drive(
        &mut self,
        ctx: Option<(&mut Context, &mut Vec<Done>)>,
        idx: u32,
        scratch: &mut [u8],
        now: Instant,
    ) -> Result<(), End> {
        self.more = false;
        if self.closing == Some(Closing::Abort) {
            return Ok(());
        }
        match &self.phase {
            Phase::Transmission(_) => {
                if let Some((ctx, done)) = ctx {
                    self.transmit(ctx, done, idx, scratch, now)?;
                }
            }
            Phase::Handshake { .. } | Phase::Refusing { .. } => self.negotiate(now)?,
        }
        Ok(())
    }

    fn flush_hs(&mut self, now: Instant) -> Result<bool, End> {
        while !self.hs_out.is_empty() {
            let buf = std::mem::take(&mut self.hs_out);
            let r = self.send(&[IoSlice::new(&buf)]);
            self.hs_out = buf;
            match r {
                Ok(0) => return Err(End::Closed),
                Ok(n) => {
                    self.hs_out.drain(..n);
                }
                Err(e) if would_block(&e) => {
                    self.writable = false;
                    self.blocked_since.get_or_insert(now);
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(End::Io(e)),
            }
        }
        let out = self.push_tls().map_err(End::Io)?;
        if out {
            self.blocked_since = None;
        }
        Ok(out)
    }

    fn negotiate(&mut self, now: Instant) -> Result<(), End> {
        loop {
            if !self.flush_hs(now)? {
                return Ok(());
            }
            if self.closing == Some(Closing::Graceful) {
                return Ok(());
            }
            if let Phase::Handshake { tls_next, .. } = &mut self.phase {
                if *tls_next {
                    *tls_next = false;
                    self.start_tls()?;
                }
            }
            if self.parse_option(now)? {
                if matches!(self.phase, Phase::Transmission(_)) {
                    return Ok(());
                }
                continue;
            }
            // Need more input.
            if !self.readable {
                return Ok(());
            }
            let mut tmp = [0u8; 4096];
            match self.recv(&mut tmp) {
                Ok(0) => return Err(End::Closed),
                Ok(n) => self.stash.extend_from_slice(&tmp[..n]),
                Err(e) if would_block(&e) => {
                    self.readable = false;
                    // TLS may have handshake bytes to send.
                    self.push_tls().map_err(End::Io)?;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(End::Io(e)),
            }
        }
    }

    fn start_tls(&mut self) -> Result<(), End> {
        let Phase::Handshake { .. } = &self.phase else {
            return Err(End::Dropped("TLS outside negotiation".into()));
        };
        if self.tls.is_some() {
            return Err(End::Dropped("TLS is already running".into()));
        }
        let Some(cfg) = self.sh.tls.clone() else {
            return Err(End::Dropped("TLS requested without a configuration".into()));
        };
        let mut conn =
            rustls::ServerConnection::new(cfg).map_err(|e| End::Dropped(e.to_string()))?;
        // The client may have sent its hello right behind STARTTLS.
        let early = std::mem::take(&mut self.stash);
        let mut rd: &[u8] = &early;
        while !rd.is_empty() {
            match conn.read_tls(&mut rd) {
                Ok(_) => {
                    conn.process_new_packets()
                        .map_err(|e| End::Dropped(format!("TLS handshake failed: {e}")))?;
                }
                Err(e) => return Err(End::Dropped(format!("TLS: {e}"))),
            }
        }
        self.tls = Some(Box::new(conn));
        if let Phase::Handshake { neg, .. } = &mut self.phase {
            neg.tls_started();
        }
        self.readable = true;
        Ok(())
    }

    /// Handle one negotiation message from `stash` if it is all there.
    /// Returns false when more input is needed.
    fn parse_option(&mut self, now: Instant) -> Result<bool, End> {
        let got_flags = match &self.phase {
            Phase::Handshake { got_flags, .. } | Phase::Refusing { got_flags, .. } => *got_flags,
            Phase::Transmission(_) => return Ok(false),
        };
        if !got_flags {
            if self.stash.len() < 4 {
                return Ok(false);
            }
            let flags: [u8; 4] = self.stash[..4].try_into().expect("4 bytes");
            self.stash.drain(..4);
            match &mut self.phase {
                Phase::Handshake { neg, got_flags, .. } => {
                    neg.client_flags(&flags)
                        .map_err(|e| End::Dropped(e.to_string()))?;
                    *got_flags = true;
                }
                Phase::Refusing { got_flags, .. } => *got_flags = true,
                Phase::Transmission(_) => {}
            }
            return Ok(true);
        }
        if self.stash.len() < OPTION_HEADER_LEN {
            return Ok(false);
        }
        let h = OptionHeader::decode(&self.stash[..OPTION_HEADER_LEN])
            .map_err(|e| End::Dropped(e.to_string()))?;
        let total = OPTION_HEADER_LEN + h.len as usize;
        if self.stash.len() < total {
            return Ok(false);
        }
        let stash = std::mem::take(&mut self.stash);
        let data = &stash[OPTION_HEADER_LEN..total];
        let mut out = std::mem::take(&mut self.hs_out);
        let result = match &mut self.phase {
            Phase::Refusing { reason, .. } => {
                if h.opt == opt::EXPORT_NAME {
                    Err(End::Dropped("refused".into()))
                } else {
                    let msg = format!("mqblk serve: connection refused: {reason}");
                    encode_option_reply(h.opt, rep::ERR_POLICY, msg.as_bytes(), &mut out);
                    self.closing = Some(Closing::Graceful);
                    Ok(())
                }
            }
            Phase::Handshake { neg, tls_next, .. } => {
                match neg.handle_option(h.opt, data, &mut out) {
                    Step::Continue => Ok(()),
                    Step::Abort => {
                        self.closing = Some(Closing::Graceful);
                        Ok(())
                    }
                    Step::Close(why) => Err(End::Dropped(why.into())),
                    Step::StartTls => {
                        *tls_next = true;
                        Ok(())
                    }
                    Step::Transmission(s) => {
                        self.phase = Phase::Transmission(s);
                        self.last_active = now;
                        self.blocked_since = None;
                        Ok(())
                    }
                }
            }
            Phase::Transmission(_) => Ok(()),
        };
        self.hs_out = out;
        self.stash = stash;
        self.stash.drain(..total);
        result?;
        if let Phase::Transmission(s) = &self.phase {
            // The handshake's last reply goes out with the first replies.
            self.device = Some(self.sh.exports[s.export].device.clone());
            self.move_hs_out();
        }
        Ok(true)
    }

    /// Negotiation bytes still unsent become the first reply.
    fn move_hs_out(&mut self) {
        if !self.hs_out.is_empty() {
            let v = std::mem::take(&mut self.hs_out);
            self.push_bytes(v);
        }
    }
}

// ---- transmission ----
impl Conn<'_> {
    fn session(&self) -> &Session {
        match &self.phase {
            Phase::Transmission(s) => s,
            _ => unreachable!("only called in transmission"),
        }
    }

    fn structured(&self) -> bool {
        matches!(&self.phase, Phase::Transmission(s) if s.structured)
    }

    fn device(&self) -> &Device {
        self.device.as_ref().expect("set when transmission starts")
    }

    fn get_buf(&mut self, len: usize) -> IoBuf {
        let c = class_of(len);
        self.held_bytes += 1u64 << (c as u32 + MIN_CLASS_SHIFT);
        if let Some(b) = self.cache[c].pop() {
            self.cached_bytes -= b.len() as u64;
            return b;
        }
        self.device().alloc_buf(1 << (c as u32 + MIN_CLASS_SHIFT))
    }

    fn put_buf(&mut self, buf: IoBuf) {
        let c = class_of(buf.len());
        let size = 1u64 << (c as u32 + MIN_CLASS_SHIFT);
        debug_assert!(self.held_bytes >= size);
        self.held_bytes -= size;
        if self.closing.is_none()
            && buf.len() as u64 == size
            && self.cached_bytes + self.held_bytes + size <= self.limits.max_bytes
        {
            self.cached_bytes += size;
            self.cache[c].push(buf);
        } else if let Some(d) = &self.device {
            d.buf_pool().put(buf);
        }
    }

    fn take_slot(&mut self, s: Slot) -> u32 {
        let idx = match self.free_slots.pop() {
            Some(i) => i,
            None => {
                debug_assert!(self.slots.len() < self.limits.max_requests as usize);
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        debug_assert!((idx as usize) < self.slots.len());
        self.slots[idx as usize] = s;
        self.busy_slots += 1;
        idx
    }

    fn free_slot(&mut self, idx: u32) {
        debug_assert!(self.busy_slots > 0);
        self.busy_slots -= 1;
        self.free_slots.push(idx);
    }

    fn push_bytes(&mut self, v: Vec<u8>) {
        self.out_meta_bytes += v.len();
        self.out.push_back(Out::Bytes(v));
    }

    fn push_small(&mut self, b: &[u8]) {
        debug_assert!(b.len() <= 32);
        self.out_meta_bytes += b.len();
        let mut buf = [0u8; 32];
        buf[..b.len()].copy_from_slice(b);
        self.out.push_back(Out::Small {
            buf,
            len: b.len() as u8,
        });
    }

    /// A reply leaves the queue (sent, or dropped with the connection).
    fn drop_out(&mut self, o: Out) {
        match o {
            Out::Data { data, .. } | Out::Sparse { data, .. } => self.put_buf(data),
            Out::Small { len, .. } => self.out_meta_bytes -= len as usize,
            Out::Bytes(v) => self.out_meta_bytes -= v.len(),
        }
    }

    /// Queue a success reply without data.
    fn reply_ok(&mut self, cookie: u64, cmd_type: u16) {
        self.requests += 1;
        if self.structured() && cmd_type == cmd::READ {
            let mut v = Vec::with_capacity(20);
            encode_none(cookie, &mut v);
            self.push_small(&v);
        } else {
            let r = encode_simple_reply(cookie, 0);
            self.push_small(&r);
        }
    }

    /// Queue an error reply.
    fn reply_err(&mut self, cookie: u64, errno: NbdErrno, why: &str) {
        self.requests += 1;
        self.errors += 1;
        if self.structured() {
            let mut v = Vec::with_capacity(26 + why.len());
            encode_error_chunk(cookie, errno, why, &mut v);
            self.push_bytes(v);
        } else {
            let r = encode_simple_reply(cookie, errno.code());
            self.push_small(&r);
        }
    }

    fn full(&self) -> bool {
        self.busy_slots >= self.limits.max_requests
            || self.held_bytes >= self.limits.max_bytes
            || self.out_meta_bytes >= MAX_META_BYTES
    }

    /// Bounds: a request that needs a slot or a buffer waits while any are
    /// held; an idle connection always admits one.
    fn admits(&self, req: &Request) -> bool {
        let need_bytes = if req.cmd == cmd::READ || req.cmd == cmd::WRITE {
            1u64 << (class_of(req.len as usize) as u32 + MIN_CLASS_SHIFT)
        } else {
            0
        };
        !(self.busy_slots >= self.limits.max_requests
            || (self.held_bytes > 0 && self.held_bytes + need_bytes > self.limits.max_bytes)
            || self.out_meta_bytes >= MAX_META_BYTES)
    }

    fn transmit(
        &mut self,
        ctx: &mut Context,
        done: &mut Vec<Done>,
        idx: u32,
        scratch: &mut [u8],
        now: Instant,
    ) -> Result<(), End> {
        let r = self.take_input(ctx, done, idx, scratch, now);
        // Send what is queued even when the input went wrong: replies to
        // the requests before the bad one are owed.
        let w = self.flush_out(now);
        r?;
        w?;
        if self.closing.is_none() && self.draining && self.submitted == 0 && self.out.is_empty() {
            self.closing = Some(Closing::Graceful);
        }
        Ok(())
    }

    /// Read and act on requests until the socket is empty, the bounds are
    /// reached, or this wake-up's share of reads is used.
    fn take_input(
        &mut self,
        ctx: &mut Context,
        done: &mut Vec<Done>,
        idx: u32,
        scratch: &mut [u8],
        now: Instant,
    ) -> Result<(), End> {
        let mut reads = 0;
        loop {
            if self.closing.is_some() || self.draining {
                break;
            }
            if let Some(mut p) = self.pending.take() {
                if !self.readable {
                    self.pending = Some(p);
                    break;
                }
                let len = p.len;
                let r = self.recv(&mut p.buf.as_mut_slice()[p.got..len]);
                match r {
                    Ok(0) => {
                        self.put_buf(p.buf);
                        return Err(End::Dropped("connection closed mid-payload".into()));
                    }
                    Ok(n) => p.got += n,
                    Err(e) if would_block(&e) => self.readable = false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.put_buf(p.buf);
                        return Err(End::Io(e));
                    }
                }
                if p.got == p.len {
                    self.last_active = now;
                    self.handle(ctx, done, idx, p.req, Some(p.buf))?;
                } else {
                    self.pending = Some(p);
                }
                continue;
            }
            if self.stash.len() >= REQUEST_LEN {
                let stash = std::mem::take(&mut self.stash);
                let r = self.consume(ctx, done, idx, &stash, now);
                self.stash = stash;
                let used = r?;
                self.stash.drain(..used);
                if used == 0 {
                    break;
                }
                continue;
            }
            if self.full() || !self.readable {
                break;
            }
            if reads == READS_PER_WAKE {
                self.more = true;
                break;
            }
            reads += 1;
            let k = self.stash.len();
            debug_assert!(k < REQUEST_LEN);
            scratch[..k].copy_from_slice(&self.stash);
            self.stash.clear();
            match self.recv(&mut scratch[k..]) {
                Ok(0) => {
                    if k > 0 {
                        return Err(End::Dropped("connection closed mid-request".into()));
                    }
                    // The client is gone, or only half-closed: answer what
                    // it asked, then close.
                    self.closing = Some(Closing::Graceful);
                    break;
                }
                Ok(n) => {
                    let data = &scratch[..k + n];
                    let used = self.consume(ctx, done, idx, data, now)?;
                    self.stash.extend_from_slice(&data[used..]);
                }
                Err(e) if would_block(&e) => {
                    self.stash.extend_from_slice(&scratch[..k]);
                    self.readable = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    self.stash.extend_from_slice(&scratch[..k]);
                }
                Err(e) => return Err(End::Io(e)),
            }
        }
        let partial =
            self.pending.is_some() || (!self.stash.is_empty() && self.stash.len() < REQUEST_LEN);
        if partial {
            self.partial_since.get_or_insert(now);
        } else {
            self.partial_since = None;
        }
        Ok(())
    }

    /// Act on the complete requests at the start of `data`; returns the
    /// bytes used. A write whose payload is cut off becomes `pending`.
    fn consume(
        &mut self,
        ctx: &mut Context,
        done: &mut Vec<Done>,
        idx: u32,
        data: &[u8],
        now: Instant,
    ) -> Result<usize, End> {
        let mut pos = 0;
        while data.len() - pos >= REQUEST_LEN {
            let req = Request::decode(&data[pos..pos + REQUEST_LEN])
                .map_err(|e| End::Dropped(e.to_string()))?;
            let plen = payload_len(self.session(), &req).map_err(|e| End::Dropped(e.to_string()))?
                as usize;
            if !self.admits(&req) {
                break;
            }
            if goes_to_device(req.cmd) && !ctx.has_room() {
                self.stalled = true;
                break;
            }
            pos += REQUEST_LEN;
            self.last_active = now;
            let payload = if plen > 0 {
                let mut buf = self.get_buf(plen);
                let avail = plen.min(data.len() - pos);
                buf.as_mut_slice()[..avail].copy_from_slice(&data[pos..pos + avail]);
                pos += avail;
                if avail < plen {
                    self.pending = Some(Pending {
                        req,
                        buf,
                        got: avail,
                        len: plen,
                    });
                    debug_assert!(pos == data.len());
                    return Ok(pos);
                }
                Some(buf)
            } else {
                None
            };
            self.handle(ctx, done, idx, req, payload)?;
        }
        Ok(pos)
    }

    /// Check one request and submit it (or answer it at once).
    fn handle(
        &mut self,
        ctx: &mut Context,
        done: &mut Vec<Done>,
        idx: u32,
        req: Request,
        payload: Option<IoBuf>,
    ) -> Result<(), End> {
        let command = match check(self.session(), &req) {
            Ok(c) => c,
            Err(errno) => {
                if let Some(b) = payload {
                    self.put_buf(b);
                }
                let why = match errno {
                    NbdErrno::Perm => "the export is read-only",
                    NbdErrno::NoSpc => "write past the end of the export",
                    _ => "invalid request: bad command, flags, range or alignment",
                };
                self.reply_err(req.cookie, errno, why);
                return Ok(());
            }
        };
        let fua_flag = |fua: bool| if fua { BioFlags::FUA } else { BioFlags::NONE };
        let mut slot = Slot {
            cookie: req.cookie,
            offset: req.offset,
            len: req.len,
            cmd: req.cmd,
            fast_zero: false,
        };
        let bio = match command {
            Command::Read { offset, len } => {
                let buf = self.get_buf(len as usize);
                let mut bio = Bio::at(Op::Read, offset);
                bio.push_segment(buf, 0, len);
                bio
            }
            Command::Write { offset, len, fua } => {
                let buf = payload.expect("a write has its payload");
                let mut bio = Bio::at(Op::Write, offset);
                bio.push_segment(buf, 0, len);
                bio.set_flags(fua_flag(fua));
                bio
            }
            Command::Flush => Bio::flush(),
            Command::Trim { offset, len, fua } => {
                let mut bio = Bio::discard_at(offset, len.into());
                bio.set_flags(fua_flag(fua));
                bio
            }
            Command::WriteZeroes {
                offset,
                len,
                fua,
                fast,
                ..
            } => {
                // NO_HOLE: the core's write-zeroes promises zeros, not
                // deallocation, so it is honoured as it is.
                slot.fast_zero = fast;
                let mut bio = Bio::write_zeroes_at(offset, len.into());
                bio.set_flags(fua_flag(fua));
                bio
            }
            Command::Cache { .. } | Command::Nop => {
                // The layer keeps no cache of its own above the device:
                // CACHE is advisory, and answered at once.
                if let Some(b) = payload {
                    self.put_buf(b);
                }
                self.reply_ok(req.cookie, req.cmd);
                return Ok(());
            }
            Command::BlockStatus {
                offset,
                len,
                req_one,
                ctx_id,
            } => {
                self.block_status(req.cookie, offset, len, req_one, ctx_id);
                return Ok(());
            }
            Command::Disc => {
                self.closing = Some(Closing::Graceful);
                return Ok(());
            }
        };
        let s = self.take_slot(slot);
        let mut bio = bio;
        bio.private = (u64::from(idx) << 32) | u64::from(s);
        self.submitted += 1;
        loop {
            match ctx.submit(bio) {
                Ok(()) => return Ok(()),
                // The context is full of completions nobody polled: reap
                // them (they are routed after this connection's turn).
                Err(e) => {
                    bio = e.into_bio();
                    ctx.poll(|c| {
                        let private = c.private();
                        let status = c.status();
                        done.push(Done {
                            private,
                            status,
                            bio: c.into_bio(),
                        });
                    });
                }
            }
        }
    }

    /// A completed bio becomes a reply.
    pub(crate) fn complete(&mut self, d: Done) {
        let s = (d.private & 0xffff_ffff) as u32;
        debug_assert!((s as usize) < self.slots.len());
        debug_assert!(self.submitted > 0);
        self.submitted -= 1;
        let slot = self.slots[s as usize];
        self.free_slot(s);
        let mut bufs = d.bio.into_buffers();
        if self.closing == Some(Closing::Abort) {
            for b in bufs {
                self.put_buf(b);
            }
            return;
        }
        if d.status.is_ok() && slot.cmd == cmd::READ {
            let data = bufs.next().expect("a read carries its buffer");
            self.requests += 1;
            if self.structured() && slot.len >= SPARSE_READ_MIN {
                if let Some(o) = self.sparse_reply(&slot, data) {
                    self.out.push_back(o);
                    return;
                }
                return;
            }
            self.push_data(&slot, data);
            return;
        }
        for b in bufs {
            self.put_buf(b);
        }
        if d.status.is_ok() {
            self.reply_ok(slot.cookie, slot.cmd);
        } else {
            let errno = errno_for(d.status, slot.cmd, slot.fast_zero);
            let why = format!("{}", d.status);
            self.reply_err(slot.cookie, errno, &why);
        }
    }

    fn push_data(&mut self, slot: &Slot, data: IoBuf) {
        let mut prefix = [0u8; OFFSET_DATA_PREFIX_LEN];
        let prefix_len = if self.structured() {
            prefix = encode_offset_data_prefix(slot.cookie, slot.offset, slot.len);
            OFFSET_DATA_PREFIX_LEN
        } else {
            prefix[..SIMPLE_REPLY_LEN].copy_from_slice(&encode_simple_reply(slot.cookie, 0));
            SIMPLE_REPLY_LEN
        };
        self.out.push_back(Out::Data {
            prefix,
            prefix_len: prefix_len as u8,
            data,
            len: slot.len,
        });
    }

    /// A large read on a device with holes: `OFFSET_DATA` chunks for data
    /// and `OFFSET_HOLE` chunks for holes. `None` (the data was queued as
    /// one chunk) when the range has no hole.
    fn sparse_reply(&mut self, slot: &Slot, data: IoBuf) -> Option<Out> {
        let end = slot.offset + u64::from(slot.len);
        let extents = match self.device().extents(slot.offset, slot.len.into()) {
            Ok(e) if e.iter().any(|x| x.hole) => e,
            _ => {
                self.push_data(slot, data);
                return None;
            }
        };
        // Merge neighbours of one kind, clipped to the request.
        let mut runs: Vec<(u64, u64, bool)> = Vec::with_capacity(extents.len());
        let mut covered = slot.offset;
        for e in &extents {
            let from = e.offset_bytes.max(covered);
            let to = (e.offset_bytes + e.len_bytes).min(end);
            if from >= to {
                continue;
            }
            if from > covered {
                // A gap the device did not describe: send it as data.
                runs.push((covered, from, false));
            }
            match runs.last_mut() {
                Some(r) if r.2 == e.hole && r.1 == from => r.1 = to,
                _ => runs.push((from, to, e.hole)),
            }
            covered = to;
        }
        if covered < end {
            match runs.last_mut() {
                Some(r) if !r.2 => r.1 = end,
                _ => runs.push((covered, end, false)),
            }
        }
        let mut headers = Vec::with_capacity(runs.len() * 32);
        let mut pieces = Vec::with_capacity(runs.len());
        let last = runs.len() - 1;
        for (i, &(from, to, hole)) in runs.iter().enumerate() {
            let len = (to - from) as u32;
            let h0 = headers.len() as u32;
            if hole {
                encode_offset_hole(slot.cookie, i == last, from, len, &mut headers);
                pieces.push([h0, headers.len() as u32 - h0, 0, 0]);
            } else {
                let flags = if i == last { reply_flags::DONE } else { 0 };
                headers.extend_from_slice(&encode_chunk_header(
                    slot.cookie,
                    flags,
                    reply_type::OFFSET_DATA,
                    len + 8,
                ));
                headers.extend_from_slice(&from.to_be_bytes());
                pieces.push([
                    h0,
                    OFFSET_DATA_PREFIX_LEN as u32,
                    (from - slot.offset) as u32,
                    len,
                ]);
            }
        }
        Some(Out::Sparse {
            headers,
            pieces,
            data,
        })
    }

    /// Answer `BLOCK_STATUS` for `base:allocation` from the device's
    /// extents.
    fn block_status(&mut self, cookie: u64, offset: u64, len: u32, req_one: bool, ctx_id: u32) {
        let extents = match self.device().extents(offset, len.into()) {
            Ok(e) => e,
            Err(e) => {
                self.reply_err(cookie, NbdErrno::Io, &e.to_string());
                return;
            }
        };
        let max = if req_one { 1 } else { 1 << 16 };
        let mut descs: Vec<Descriptor> = Vec::with_capacity(extents.len().min(max));
        let end = offset + u64::from(len);
        for e in &extents {
            let from = e.offset_bytes.max(offset);
            let to = (e.offset_bytes + e.len_bytes).min(end);
            if from >= to {
                continue;
            }
            let mut flags = 0;
            if e.hole {
                flags |= state::HOLE;
            }
            if e.zero {
                flags |= state::ZERO;
            }
            let l = (to - from) as u32;
            let full = descs.len() == max;
            match descs.last_mut() {
                Some(d) if d.flags == flags => d.len += l,
                _ if full => break,
                _ => descs.push(Descriptor { len: l, flags }),
            }
        }
        if descs.is_empty() {
            descs.push(Descriptor { len, flags: 0 });
        }
        self.requests += 1;
        let mut v = Vec::with_capacity(24 + 8 * descs.len());
        encode_block_status(cookie, ctx_id, &descs, &mut v);
        self.push_bytes(v);
    }

    /// Write queued replies (one `writev` per batch of slices) until all
    /// are out or the socket is full; data buffers go back to the cache
    /// once written.
    fn flush_out(&mut self, now: Instant) -> Result<(), End> {
        while !self.out.is_empty() && self.writable {
            let mut iov = [IoSlice::new(&[]); IOV_BATCH];
            let mut n = 0;
            let mut skip = self.out_pos;
            for item in self.out.iter() {
                item.for_each_part(|part| {
                    if part.is_empty() {
                        return true;
                    }
                    if skip >= part.len() {
                        skip -= part.len();
                        return true;
                    }
                    if n == IOV_BATCH {
                        return false;
                    }
                    iov[n] = IoSlice::new(&part[skip..]);
                    skip = 0;
                    n += 1;
                    true
                });
                if n == IOV_BATCH {
                    break;
                }
            }
            let written = match send_on(&mut self.sock, &mut self.tls, &iov[..n]) {
                Ok(0) => return Err(End::Closed),
                Ok(w) => w,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                Err(e) if would_block(&e) => {
                    self.writable = false;
                    break;
                }
                Err(e) => return Err(End::Io(e)),
            };
            let mut w = self.out_pos + written;
            self.out_pos = 0;
            while let Some(front) = self.out.front() {
                let l = front.len();
                if w < l {
                    self.out_pos = w;
                    break;
                }
                w -= l;
                if let Some(o) = self.out.pop_front() {
                    self.drop_out(o);
                }
            }
        }
        let tls_out = if self.writable {
            match self.push_tls() {
                Ok(all) => {
                    if !all {
                        self.writable = false;
                    }
                    all
                }
                Err(e) => return Err(End::Io(e)),
            }
        } else {
            false
        };
        if self.out.is_empty() && tls_out {
            self.blocked_since = None;
        } else {
            self.blocked_since.get_or_insert(now);
        }
        Ok(())
    }
}

/// Push what TLS holds to the socket. `Ok(true)` when all is out.
fn push_tls_on(
    sock: &mut Socket,
    tls: &mut Option<Box<rustls::ServerConnection>>,
) -> io::Result<bool> {
    let Some(tls) = tls.as_mut() else {
        return Ok(true);
    };
    while tls.wants_write() {
        match tls.write_tls(sock) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if would_block(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Send from `iov` (through TLS if it runs); `WouldBlock` when nothing
/// could be taken.
fn send_on(
    sock: &mut Socket,
    tls: &mut Option<Box<rustls::ServerConnection>>,
    iov: &[IoSlice<'_>],
) -> io::Result<usize> {
    if tls.is_none() {
        return sock.write_vectored(iov);
    }
    // rustls takes nothing while its send buffer is full: push that out,
    // then try once more.
    for _ in 0..2 {
        let t = tls.as_mut().expect("checked above");
        let n = t.writer().write_vectored(iov)?;
        let all_out = push_tls_on(sock, tls)?;
        if n > 0 || iov.iter().all(|s| s.is_empty()) {
            return Ok(n);
        }
        if !all_out {
            break;
        }
    }
    Err(io::ErrorKind::WouldBlock.into())
}

/// The NBD error for a completion status.
fn errno_for(status: Status, cmd_type: u16, fast_zero: bool) -> NbdErrno {
    let writes = matches!(cmd_type, cmd::WRITE | cmd::WRITE_ZEROES);
    match status {
        Status::Ok => NbdErrno::Inval,
        Status::NoSpace => NbdErrno::NoSpc,
        Status::Invalid(InvalidKind::ReadOnly) => NbdErrno::Perm,
        Status::Invalid(InvalidKind::OutOfRange) if writes => NbdErrno::NoSpc,
        Status::Invalid(InvalidKind::Unsupported) | Status::NotSupported if fast_zero => {
            NbdErrno::NotSup
        }
        Status::Invalid(_) | Status::NotSupported => NbdErrno::Inval,
        Status::Shutdown => NbdErrno::Shutdown,
        _ => NbdErrno::Io,
    }
}

/// True for the commands that become a bio (and so need a request).
fn goes_to_device(c: u16) -> bool {
    matches!(
        c,
        cmd::READ | cmd::WRITE | cmd::FLUSH | cmd::TRIM | cmd::WRITE_ZEROES
    )
}
