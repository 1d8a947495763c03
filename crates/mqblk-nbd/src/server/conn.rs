//! One server connection: negotiation, then the transmission loop.
//!
//! The data path is one thread per connection, owning the connection's
//! [`Context`]. It reads requests from the socket into a buffer, turns
//! each into a bio (data buffers from a per-connection cache of the
//! device's pool buffers, `bio.private` = the request's slot) and submits
//! it; completions are reaped with `ctx.poll` and become replies, queued
//! in completion order (out of order with respect to the requests) and
//! written with one `writev` per batch, the read data straight from the
//! bio's buffer. Replies go out whenever the thread is about to block, so
//! a pipelined client gets its replies in batches without waiting.
//!
//! Bounds: at most `max_requests` requests and `max_bytes` of buffers per
//! connection; a client that sends more waits in TCP (the server stops
//! reading). A malformed header, an oversize write payload, or a client
//! stalled mid-message for `stall_timeout` closes this connection only.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::sync::atomic::Ordering;
use std::time::Instant;

use mqblk_core::bio::{Bio, BioFlags, Op};
use mqblk_core::error::{InvalidKind, Status};
use mqblk_core::Completion;
use mqblk_core::{Context, Device, IoBuf};
use mqblk_nbd_proto::consts::{cmd, state};
use mqblk_nbd_proto::handshake::{OptionHeader, OPTION_HEADER_LEN};
use mqblk_nbd_proto::transmission::{
    encode_block_status, encode_error_chunk, encode_none, encode_offset_data_prefix,
    encode_simple_reply, Descriptor, OFFSET_DATA_PREFIX_LEN, REQUEST_LEN, SIMPLE_REPLY_LEN,
};
use mqblk_nbd_proto::{check, payload_len, Command, NbdErrno, Negotiation, Request, Session, Step};

use super::{Shared, TICK};
use crate::transport::{is_timeout, ServerStream, Socket};

/// Why a connection ended early.
#[derive(Debug)]
enum End {
    /// The peer closed or aborted: nothing wrong.
    Closed,
    /// The server is shutting down.
    Shutdown,
    /// The peer broke the protocol or stalled.
    Dropped(String),
    /// The socket failed.
    Io(io::Error),
}

impl From<io::Error> for End {
    fn from(e: io::Error) -> End {
        End::Io(e)
    }
}

/// Serve one accepted socket to the end.
pub(crate) fn serve(sock: Socket, sh: &Shared) {
    sock.set_nodelay();
    if sock.set_read_timeout(Some(TICK)).is_err() || sock.set_write_timeout(Some(TICK)).is_err() {
        return;
    }
    let stream = ServerStream::Plain(sock);
    let result = match negotiate(stream, sh) {
        Ok(Some((stream, session))) => transmit(stream, session, sh),
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) | Err(End::Closed) | Err(End::Shutdown) => {}
        Err(End::Dropped(why)) => {
            sh.stats.dropped.fetch_add(1, Ordering::Relaxed);
            if std::env::var_os("MQBLK_NBD_DEBUG").is_some() {
                eprintln!("mqblk serve: connection dropped: {why}");
            }
        }
        Err(End::Io(e)) => {
            sh.stats.dropped.fetch_add(1, Ordering::Relaxed);
            if std::env::var_os("MQBLK_NBD_DEBUG").is_some() {
                eprintln!("mqblk serve: connection failed: {e}");
            }
        }
    }
}

/// Read exactly `buf.len()` bytes, retrying read timeouts until
/// `deadline`; a shutdown ends the wait only before the first byte.
fn read_full(
    s: &mut ServerStream,
    buf: &mut [u8],
    deadline: Instant,
    sh: &Shared,
) -> Result<(), End> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(if got == 0 {
                    End::Closed
                } else {
                    End::Dropped("connection closed mid-message".into())
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => {
                if Instant::now() >= deadline {
                    return Err(End::Dropped("stalled".into()));
                }
                if got == 0 && sh.shutdown.load(Ordering::Relaxed) {
                    return Err(End::Shutdown);
                }
            }
            Err(e) => return Err(End::Io(e)),
        }
    }
    Ok(())
}

fn write_all(s: &mut ServerStream, mut buf: &[u8], deadline: Instant) -> Result<(), End> {
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(0) => return Err(End::Closed),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => {
                if Instant::now() >= deadline {
                    return Err(End::Dropped("not reading replies".into()));
                }
            }
            Err(e) => return Err(End::Io(e)),
        }
    }
    flush_stream(s, deadline)
}

/// Push out what TLS still buffers; a send timeout is retried until
/// `deadline` (a plain socket has nothing buffered).
fn flush_stream(s: &mut ServerStream, deadline: Instant) -> Result<(), End> {
    loop {
        match s.flush() {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => {
                if Instant::now() >= deadline {
                    return Err(End::Dropped("not reading replies".into()));
                }
            }
            Err(e) => return Err(End::Io(e)),
        }
    }
}

/// Fixed newstyle negotiation. Returns the session, or `None` if the
/// client aborted.
fn negotiate(
    mut stream: ServerStream,
    sh: &Shared,
) -> Result<Option<(ServerStream, Session)>, End> {
    let deadline = Instant::now() + sh.limits.handshake_timeout;
    let mut neg = Negotiation::new(&sh.infos, sh.tls_mode);
    write_all(&mut stream, &neg.greeting(), deadline)?;
    let mut flags = [0u8; 4];
    read_full(&mut stream, &mut flags, deadline, sh)?;
    neg.client_flags(&flags)
        .map_err(|e| End::Dropped(e.to_string()))?;
    let mut out = Vec::with_capacity(256);
    let mut data = Vec::new();
    loop {
        let mut hdr = [0u8; OPTION_HEADER_LEN];
        read_full(&mut stream, &mut hdr, deadline, sh)?;
        let h = OptionHeader::decode(&hdr).map_err(|e| End::Dropped(e.to_string()))?;
        data.resize(h.len as usize, 0);
        read_full(&mut stream, &mut data, deadline, sh)?;
        out.clear();
        let step = neg.handle_option(h.opt, &data, &mut out);
        if !out.is_empty() {
            write_all(&mut stream, &out, deadline)?;
        }
        match step {
            Step::Continue => {}
            Step::Abort => return Ok(None),
            Step::Close(why) => return Err(End::Dropped(why.into())),
            Step::Transmission(s) => return Ok(Some((stream, s))),
            Step::StartTls => {
                stream = start_tls(stream, sh, deadline)?;
                neg.tls_started();
            }
        }
    }
}

fn start_tls(stream: ServerStream, sh: &Shared, deadline: Instant) -> Result<ServerStream, End> {
    let Some(cfg) = sh.tls.clone() else {
        return Err(End::Dropped("TLS requested without a configuration".into()));
    };
    let ServerStream::Plain(sock) = stream else {
        return Err(End::Dropped("TLS is already running".into()));
    };
    let conn = rustls::ServerConnection::new(cfg).map_err(|e| End::Dropped(e.to_string()))?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        match tls.conn.complete_io(&mut tls.sock) {
            Ok(_) => {}
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                if Instant::now() >= deadline {
                    return Err(End::Dropped("TLS handshake stalled".into()));
                }
            }
            Err(e) => return Err(End::Dropped(format!("TLS handshake failed: {e}"))),
        }
    }
    Ok(ServerStream::Tls(Box::new(tls)))
}

/// Bytes of the input buffer: many small requests per read.
const INBUF_BYTES: usize = 64 * 1024;
/// Smallest data buffer class (one page).
const MIN_CLASS_SHIFT: u32 = 12;
/// Buffer size classes: 4 KiB .. 64 MiB.
const NR_CLASSES: usize = 15;
/// Bytes of queued error and block status replies before the connection
/// stops taking requests and sends them.
const MAX_META_BYTES: usize = 1 << 20;
/// Slices per writev.
const IOV_BATCH: usize = 64;

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
    /// A variable-size reply (error chunk with a message, block status).
    Bytes(Vec<u8>),
}

impl Out {
    fn parts(&self) -> [&[u8]; 2] {
        match self {
            Out::Small { buf, len } => [&buf[..*len as usize], &[]],
            Out::Data {
                prefix,
                prefix_len,
                data,
                len,
            } => [
                &prefix[..*prefix_len as usize],
                &data.as_slice()[..*len as usize],
            ],
            Out::Bytes(v) => [v.as_slice(), &[]],
        }
    }

    fn len(&self) -> usize {
        let [a, b] = self.parts();
        a.len() + b.len()
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

/// The connection's state, apart from its context (so a completion
/// callback can borrow it while the context is polled).
struct State {
    stream: ServerStream,
    session: Session,
    device: Device,
    stall: std::time::Duration,
    inbuf: Box<[u8]>,
    in_start: usize,
    in_end: usize,
    /// When the partial message at the head of `inbuf` started waiting.
    partial_since: Option<Instant>,
    out: VecDeque<Out>,
    /// Bytes of `out.front()` already written.
    out_pos: usize,
    /// Bytes of queued replies that own their bytes (errors, block
    /// status): bounded, so requests that need no buffer still cannot
    /// queue replies without limit.
    out_meta_bytes: usize,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    /// Cached data buffers by size class.
    cache: Vec<Vec<IoBuf>>,
    cached_bytes: u64,
    /// Bytes of buffers held by requests in flight and queued replies.
    held_bytes: u64,
    max_bytes: u64,
    max_requests: u32,
    /// Requests submitted and not completed.
    submitted: u32,
    /// Requests whose slots are in use (submitted or reply queued).
    busy_slots: u32,
    draining: bool,
    peer_gone: bool,
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

impl State {
    fn get_buf(&mut self, len: usize) -> IoBuf {
        let c = class_of(len);
        self.held_bytes += 1u64 << (c as u32 + MIN_CLASS_SHIFT);
        if let Some(b) = self.cache[c].pop() {
            self.cached_bytes -= b.len() as u64;
            return b;
        }
        self.device.alloc_buf(1 << (c as u32 + MIN_CLASS_SHIFT))
    }

    fn put_buf(&mut self, buf: IoBuf) {
        let c = class_of(buf.len());
        let size = 1u64 << (c as u32 + MIN_CLASS_SHIFT);
        debug_assert!(self.held_bytes >= size);
        self.held_bytes -= size;
        if buf.len() as u64 == size && self.cached_bytes + self.held_bytes + size <= self.max_bytes
        {
            self.cached_bytes += size;
            self.cache[c].push(buf);
        } else {
            self.device.buf_pool().put(buf);
        }
    }

    fn take_slot(&mut self, s: Slot) -> u32 {
        let idx = self
            .free_slots
            .pop()
            .expect("a slot is free: busy_slots < max_requests");
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
        self.out_meta_bytes += b.len();
        let mut buf = [0u8; 32];
        buf[..b.len()].copy_from_slice(b);
        self.out.push_back(Out::Small {
            buf,
            len: b.len() as u8,
        });
    }

    /// Queue a success reply without data.
    fn reply_ok(&mut self, cookie: u64, cmd_type: u16) {
        self.requests += 1;
        if self.session.structured && cmd_type == cmd::READ {
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
        if self.session.structured {
            let mut v = Vec::with_capacity(26 + why.len());
            encode_error_chunk(cookie, errno, why, &mut v);
            self.push_bytes(v);
        } else {
            let r = encode_simple_reply(cookie, errno.code());
            self.push_small(&r);
        }
    }

    /// A completed bio becomes a reply.
    fn complete(&mut self, c: Completion<'_>) {
        let idx = c.private() as u32;
        let status = c.status();
        let bio = c.into_bio();
        self.submitted -= 1;
        let slot = self.slots[idx as usize];
        self.free_slot(idx);
        let mut bufs = bio.into_buffers();
        if status.is_ok() && slot.cmd == cmd::READ {
            let data = bufs.next().expect("a read carries its buffer");
            let len = slot.len;
            self.requests += 1;
            let mut prefix = [0u8; OFFSET_DATA_PREFIX_LEN];
            let prefix_len = if self.session.structured {
                prefix = encode_offset_data_prefix(slot.cookie, slot.offset, len);
                OFFSET_DATA_PREFIX_LEN
            } else {
                prefix[..SIMPLE_REPLY_LEN].copy_from_slice(&encode_simple_reply(slot.cookie, 0));
                SIMPLE_REPLY_LEN
            };
            self.out.push_back(Out::Data {
                prefix,
                prefix_len: prefix_len as u8,
                data,
                len,
            });
            return;
        }
        for b in bufs {
            self.put_buf(b);
        }
        if status.is_ok() {
            self.reply_ok(slot.cookie, slot.cmd);
        } else {
            let errno = errno_for(status, slot.cmd, slot.fast_zero);
            let why = format!("{status}");
            self.reply_err(slot.cookie, errno, &why);
        }
    }
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

/// The transmission phase of one connection.
fn transmit(stream: ServerStream, session: Session, sh: &Shared) -> Result<(), End> {
    let export = &sh.exports[session.export];
    let device = export.device.clone();
    let mut ctx = device
        .context()
        .map_err(|e| End::Dropped(format!("no context: {e}")))?;
    let lim = sh.limits;
    let max_requests = lim.max_requests;
    let mut st = State {
        stream,
        session,
        device,
        stall: lim.stall_timeout,
        inbuf: vec![0u8; INBUF_BYTES].into_boxed_slice(),
        in_start: 0,
        in_end: 0,
        partial_since: None,
        out: VecDeque::with_capacity(2 * max_requests as usize),
        out_pos: 0,
        out_meta_bytes: 0,
        slots: vec![Slot::default(); max_requests as usize],
        free_slots: (0..max_requests).rev().collect(),
        cache: (0..NR_CLASSES).map(|_| Vec::new()).collect(),
        cached_bytes: 0,
        held_bytes: 0,
        max_bytes: lim.max_bytes,
        max_requests,
        submitted: 0,
        busy_slots: 0,
        draining: false,
        peer_gone: false,
        requests: 0,
        errors: 0,
    };
    let r = run(&mut ctx, &mut st, sh);
    // Whatever happened, nothing may stay in flight: the bios point into
    // our buffers. Wait for every completion (bounded by the device's
    // request timeout), then say goodbye.
    while ctx.in_flight() > 0 {
        ctx.poll_wait(1, |c| st.complete(c));
    }
    if r.is_ok() && !st.peer_gone {
        let _ = st.flush_out();
        st.stream.close_tls();
    }
    sh.stats.requests.fetch_add(st.requests, Ordering::Relaxed);
    sh.stats.errors.fetch_add(st.errors, Ordering::Relaxed);
    st.stream.socket().shutdown();
    r
}

/// The transmission loop.
fn run(ctx: &mut Context, st: &mut State, sh: &Shared) -> Result<(), End> {
    loop {
        if sh.shutdown.load(Ordering::Relaxed) {
            st.draining = true;
        }
        // 1. Take every complete request already received, within bounds.
        let mut took = 0;
        while !st.draining {
            match st.next_request(ctx, sh)? {
                Next::Done => took += 1,
                Next::NeedInput | Next::Full => break,
            }
        }
        // 2. Issue what was plugged and turn completions into replies.
        ctx.poll(|c| st.complete(c));
        if st.draining && st.submitted == 0 {
            if !st.peer_gone {
                st.flush_out()?;
            }
            return Ok(());
        }
        if took > 0 && st.has_complete_request() && !st.full() {
            continue;
        }
        // 3. About to wait: send what is queued.
        st.flush_out()?;
        if !st.draining && st.has_complete_request() && !st.full() {
            continue;
        }
        if st.submitted > 0
            && (st.draining || st.full() || st.in_end == st.in_start || st.has_complete_request())
        {
            // Completions are due (from another thread): wait for one.
            ctx.poll_wait(1, |c| st.complete(c));
            continue;
        }
        if st.draining {
            continue;
        }
        // 4. Nothing in flight (or waiting for the rest of a message):
        // read more.
        st.fill(sh)?;
    }
}

/// The outcome of looking at the input buffer.
enum Next {
    /// A request was handled.
    Done,
    /// The buffer holds no complete request header.
    NeedInput,
    /// The connection's bounds are reached: wait for completions.
    Full,
}

impl State {
    fn full(&self) -> bool {
        self.busy_slots >= self.max_requests
            || self.held_bytes >= self.max_bytes
            || self.out_meta_bytes >= MAX_META_BYTES
    }

    fn has_complete_request(&self) -> bool {
        self.in_end - self.in_start >= REQUEST_LEN
    }

    /// Read more input (blocking, with the tick as timeout).
    fn fill(&mut self, sh: &Shared) -> Result<(), End> {
        if self.in_start > 0 {
            self.inbuf.copy_within(self.in_start..self.in_end, 0);
            self.in_end -= self.in_start;
            self.in_start = 0;
        }
        if self.in_end > 0 && self.partial_since.is_none() {
            self.partial_since = Some(Instant::now());
        }
        match self.stream.read(&mut self.inbuf[self.in_end..]) {
            Ok(0) => {
                self.peer_gone = true;
                self.draining = true;
                if self.in_end > 0 {
                    return Err(End::Dropped("connection closed mid-request".into()));
                }
                Ok(())
            }
            Ok(n) => {
                self.in_end += n;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) if is_timeout(&e) => {
                if let Some(t) = self.partial_since {
                    if t.elapsed() >= self.stall {
                        return Err(End::Dropped("client stalled mid-request".into()));
                    }
                } else if sh.shutdown.load(Ordering::Relaxed) {
                    self.draining = true;
                }
                Ok(())
            }
            Err(e) => {
                self.peer_gone = true;
                Err(End::Io(e))
            }
        }
    }

    /// Read exactly `buf.len()` bytes of payload: first from the input
    /// buffer, then straight from the socket into `buf`.
    fn read_payload(&mut self, buf: &mut [u8]) -> Result<(), End> {
        let have = (self.in_end - self.in_start).min(buf.len());
        buf[..have].copy_from_slice(&self.inbuf[self.in_start..self.in_start + have]);
        self.in_start += have;
        let mut got = have;
        let started = Instant::now();
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => {
                    self.peer_gone = true;
                    return Err(End::Dropped("connection closed mid-payload".into()));
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {
                    if started.elapsed() >= self.stall {
                        return Err(End::Dropped("client stalled mid-payload".into()));
                    }
                }
                Err(e) => return Err(End::Io(e)),
            }
        }
        Ok(())
    }

    /// Take one request from the input buffer and act on it.
    fn next_request(&mut self, ctx: &mut Context, sh: &Shared) -> Result<Next, End> {
        if !self.has_complete_request() {
            return Ok(Next::NeedInput);
        }
        let hdr = &self.inbuf[self.in_start..self.in_start + REQUEST_LEN];
        let req = Request::decode(hdr).map_err(|e| End::Dropped(e.to_string()))?;
        let plen = payload_len(&self.session, &req).map_err(|e| End::Dropped(e.to_string()))?;
        // Bounds: a request that needs a slot or a buffer waits while any
        // are held; an idle connection always admits one.
        let need_bytes = if req.cmd == cmd::READ || req.cmd == cmd::WRITE {
            1u64 << (class_of(req.len as usize) as u32 + MIN_CLASS_SHIFT)
        } else {
            0
        };
        if self.busy_slots >= self.max_requests
            || (self.held_bytes > 0 && self.held_bytes + need_bytes > self.max_bytes)
            || self.out_meta_bytes >= MAX_META_BYTES
        {
            return Ok(Next::Full);
        }
        self.in_start += REQUEST_LEN;
        self.partial_since = None;
        let payload = if plen > 0 {
            let mut buf = self.get_buf(plen as usize);
            let r = self.read_payload(&mut buf.as_mut_slice()[..plen as usize]);
            if let Err(e) = r {
                self.put_buf(buf);
                return Err(e);
            }
            Some(buf)
        } else {
            None
        };
        let command = match check(&self.session, &req) {
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
                return Ok(Next::Done);
            }
        };
        self.dispatch(ctx, sh, req, command, payload)?;
        Ok(Next::Done)
    }

    fn dispatch(
        &mut self,
        ctx: &mut Context,
        _sh: &Shared,
        req: Request,
        command: Command,
        payload: Option<IoBuf>,
    ) -> Result<(), End> {
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
                self.draining = true;
                return Ok(());
            }
        };
        let idx = self.take_slot(slot);
        let mut bio = bio;
        bio.private = u64::from(idx);
        self.submitted += 1;
        loop {
            match ctx.submit(bio) {
                Ok(()) => return Ok(()),
                // The context is full of completions we have not polled.
                Err(e) => {
                    bio = e.into_bio();
                    ctx.poll(|c| self.complete(c));
                }
            }
        }
    }

    /// Answer `BLOCK_STATUS` for `base:allocation` from the device's
    /// extents.
    fn block_status(&mut self, cookie: u64, offset: u64, len: u32, req_one: bool, ctx_id: u32) {
        let extents = match self.device.extents(offset, len.into()) {
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

    /// Write every queued reply (one `writev` per batch of slices); data
    /// buffers go back to the cache once written.
    fn flush_out(&mut self) -> Result<(), End> {
        let mut started: Option<Instant> = None;
        while !self.out.is_empty() {
            let mut iov = [IoSlice::new(&[]); IOV_BATCH];
            let mut n = 0;
            let mut skip = self.out_pos;
            'fill: for item in self.out.iter() {
                for part in item.parts() {
                    if part.is_empty() {
                        continue;
                    }
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    if n == IOV_BATCH {
                        break 'fill;
                    }
                    iov[n] = IoSlice::new(&part[skip..]);
                    skip = 0;
                    n += 1;
                }
            }
            let written = match self.stream.write_vectored(&iov[..n]) {
                Ok(0) => {
                    self.peer_gone = true;
                    return Err(End::Closed);
                }
                Ok(w) => w,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                Err(e) if is_timeout(&e) => {
                    let t = *started.get_or_insert_with(Instant::now);
                    if t.elapsed() >= self.stall {
                        return Err(End::Dropped("client not reading replies".into()));
                    }
                    0
                }
                Err(e) => {
                    self.peer_gone = true;
                    return Err(End::Io(e));
                }
            };
            if written > 0 {
                started = None;
            }
            let mut w = self.out_pos + written;
            self.out_pos = 0;
            while let Some(front) = self.out.front() {
                let l = front.len();
                if w < l {
                    self.out_pos = w;
                    break;
                }
                w -= l;
                match self.out.pop_front() {
                    Some(Out::Data { data, .. }) => self.put_buf(data),
                    Some(_) => self.out_meta_bytes -= l,
                    None => {}
                }
            }
        }
        flush_stream(&mut self.stream, Instant::now() + self.stall)
    }
}
