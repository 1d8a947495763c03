//! A server connection's transmission input: requests read from the
//! socket in batches (through the I/O thread's scratch buffer), parsed,
//! checked, and submitted as bios on the thread's context for the export,
//! within the connection's bounds. Called by the connection's face
//! (`mod.rs`); it answers a request at once through `reply.rs` below
//! (which also turns completions into replies); under that are the state
//! (`state.rs`), the reply queue (`out.rs`) and the wire (`wire.rs`).

use std::io;
use std::time::Instant;

use mqblk_core::bio::{Bio, BioFlags, Op};
use mqblk_core::{Context, IoBuf};
use mqblk_nbd_proto::consts::cmd;
use mqblk_nbd_proto::transmission::REQUEST_LEN;
use mqblk_nbd_proto::{check, payload_len, Command, NbdErrno, Request};

use super::reply::Done;
use super::state::{class_of, Closing, Conn, End, Pending, Slot, MIN_CLASS_SHIFT};
use super::wire::would_block;

/// Bytes of queued error and block status replies before the connection
/// stops taking requests and sends them.
const MAX_META_BYTES: usize = 1 << 20;
/// Socket reads per connection per wake-up, so one busy client cannot
/// starve the others on its thread.
const READS_PER_WAKE: u32 = 8;

impl Conn<'_> {
    fn full(&self) -> bool {
        self.busy_slots >= self.limits.max_requests
            || self.held_bytes >= self.limits.max_bytes
            || self.out.meta_bytes() >= MAX_META_BYTES
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
            || self.out.meta_bytes() >= MAX_META_BYTES)
    }

    pub(super) fn transmit(
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
        self.settle_meta_budget();
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
                let r = self.wire.recv(&mut p.buf.as_mut_slice()[p.got..len]);
                match r {
                    Ok(0) => {
                        self.put_buf(p.buf);
                        return Err(End::Dropped("connection closed mid-payload".into()));
                    }
                    Ok(n) => {
                        if self.wire.drained(len - p.got, n) && !self.peer_closed {
                            self.readable = false;
                        }
                        p.got += n;
                    }
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
            match self.wire.recv(&mut scratch[k..]) {
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
                    // A short read emptied the socket: the next read waits
                    // for the next edge rather than being an EAGAIN now.
                    if self.wire.drained(scratch.len() - k, n) && !self.peer_closed {
                        self.readable = false;
                    }
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
            // Past the memory budget's soft mark, a connection that holds
            // more than its share takes no request at all (buffers are
            // asked for apart, below).
            if !self.sh.budget.admits(self.owned_bytes()) {
                self.over_budget = true;
                break;
            }
            if !self.admits(&req) {
                break;
            }
            let buf_len = match req.cmd {
                cmd::READ => Some(req.len as usize),
                _ if plen > 0 => Some(plen),
                _ => None,
            };
            if buf_len.is_some_and(|len| !self.budget_for(len)) {
                self.over_budget = true;
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
}

/// True for the commands that become a bio (and so need a request).
fn goes_to_device(c: u16) -> bool {
    matches!(
        c,
        cmd::READ | cmd::WRITE | cmd::FLUSH | cmd::TRIM | cmd::WRITE_ZEROES
    )
}
