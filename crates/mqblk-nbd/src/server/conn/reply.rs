//! A server connection's replies: a completed bio becomes a reply (read
//! data straight from the bio's buffer; a large read on a device with
//! holes as `OFFSET_DATA` and `OFFSET_HOLE` chunks), requests answered at
//! once get theirs, and queued replies go out with one `writev` per batch
//! of slices. Called by the request side (`request.rs`) and, through the
//! connection's face (`mod.rs`), by the event loop with each completion;
//! below it are the state (`state.rs`), the reply queue (`out.rs`) and
//! the wire (`wire.rs`).

use std::io::{self, IoSlice};
use std::time::Instant;

use mqblk_core::bio::Bio;
use mqblk_core::error::{InvalidKind, Status};
use mqblk_core::IoBuf;
use mqblk_nbd_proto::consts::{cmd, reply_flags, reply_type, state};
use mqblk_nbd_proto::transmission::{
    encode_block_status, encode_chunk_header, encode_error_chunk, encode_none,
    encode_offset_data_prefix, encode_offset_hole, encode_simple_reply, Descriptor,
    OFFSET_DATA_PREFIX_LEN, SIMPLE_REPLY_LEN,
};
use mqblk_nbd_proto::NbdErrno;

use super::out::{Out, IOV_BATCH};
use super::state::{Closing, Conn, End, Slot};
use super::wire::would_block;

/// Reads above this size ask the device where its holes are, and send
/// holes as `OFFSET_HOLE` chunks (structured replies only).
const SPARSE_READ_MIN: u32 = 64 * 1024;

/// A finished I/O on its way back to its connection.
pub(crate) struct Done {
    pub(crate) private: u64,
    pub(crate) status: Status,
    pub(crate) bio: Bio,
}

impl Conn<'_> {
    /// Queue a success reply without data.
    pub(super) fn reply_ok(&mut self, cookie: u64, cmd_type: u16) {
        self.requests += 1;
        if self.structured() && cmd_type == cmd::READ {
            let mut v = Vec::with_capacity(20);
            encode_none(cookie, &mut v);
            self.out.push_small(&v);
        } else {
            let r = encode_simple_reply(cookie, 0);
            self.out.push_small(&r);
        }
    }

    /// Queue an error reply.
    pub(super) fn reply_err(&mut self, cookie: u64, errno: NbdErrno, why: &str) {
        self.requests += 1;
        self.errors += 1;
        if self.structured() {
            let mut v = Vec::with_capacity(26 + why.len());
            encode_error_chunk(cookie, errno, why, &mut v);
            self.out.push_bytes(v);
        } else {
            let r = encode_simple_reply(cookie, errno.code());
            self.out.push_small(&r);
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
                    self.out.push(o);
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
        self.out.push(Out::Data {
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
    pub(super) fn block_status(
        &mut self,
        cookie: u64,
        offset: u64,
        len: u32,
        req_one: bool,
        ctx_id: u32,
    ) {
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
        self.out.push_bytes(v);
    }

    /// Write queued replies (one `writev` per batch of slices) until all
    /// are out or the socket is full; data buffers go back to the cache
    /// once written.
    pub(super) fn flush_out(&mut self, now: Instant) -> Result<(), End> {
        while !self.out.is_empty() && self.writable {
            let mut iov = [IoSlice::new(&[]); IOV_BATCH];
            let n = self.out.gather(&mut iov);
            let written = match self.wire.send(&iov[..n]) {
                Ok(0) => return Err(End::Closed),
                Ok(w) => w,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                Err(e) if would_block(&e) => {
                    self.writable = false;
                    break;
                }
                Err(e) => return Err(End::Io(e)),
            };
            self.out.wrote(written);
            while let Some(o) = self.out.pop_written() {
                self.drop_out(o);
            }
            if self.out.is_empty() {
                // Idle time counts from the last reply too: a request that
                // took long does not leave its client idle on its answer.
                self.last_active = now;
            }
        }
        let tls_out = if self.writable {
            match self.wire.push_tls() {
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
