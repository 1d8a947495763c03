//! Requests the layer cannot take as they are (an offset or a length off
//! the device's logical block): a blocking read(-modify-write) of the
//! blocks around them through a bounce buffer, each read-modify-write
//! holding the device against other RMWs and aligned writes (`rmw`), so
//! that none on the same block loses its bytes; and fallocate (discard,
//! write-zeroes, and the partial blocks at its ends zeroed).

use std::ptr::NonNull;

use mqblk_core::IoBuf;

use super::state::Worker;
use crate::abi::falloc;
use crate::reply;

impl Worker {
    /// The slow path's buffer, at least `len` bytes.
    pub(super) fn bounce(&mut self, len: usize) -> NonNull<u8> {
        if self.bounce.as_ref().is_none_or(|b| b.len() < len) {
            self.bounce = Some(IoBuf::page_aligned(len));
        }
        let b = self.bounce.as_ref().expect("made above");
        NonNull::new(b.as_ptr()).expect("an IoBuf is never null")
    }

    /// The blocks around `[offset, offset + len)`: their start and length.
    pub(super) fn around(&self, offset: u64, len: u32) -> (u64, usize) {
        let b = self.shared.block;
        let start = offset / b * b;
        let end = (offset + u64::from(len)).div_ceil(b) * b;
        (
            start,
            (end.min(self.shared.capacity.div_ceil(b) * b) - start) as usize,
        )
    }

    /// A read off the device's blocks: the blocks around it, then the
    /// bytes asked for.
    pub(super) fn slow_read(&mut self, unique: u64, offset: u64, len: u32) {
        // Blocking calls wait for their own bio only: answer what is done
        // first, so the context has room.
        self.reap();
        let (start, span) = self.around(offset, len);
        let p = self.bounce(span);
        // SAFETY: the bounce buffer has `span` bytes and only this
        // thread uses it.
        let buf = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), span) };
        match self.ctx.read_at(buf, start) {
            Ok(()) => {
                self.requests += 1;
                let at = (offset - start) as usize;
                let h = reply::header(unique, 0, len as usize);
                // SAFETY: as above; `at + len <= span`.
                let data = unsafe { std::slice::from_raw_parts(p.as_ptr().add(at), len as usize) };
                self.send(&[&h, data]);
            }
            Err(e) => self.reply_err(unique, e.status().errno()),
        }
    }

    /// A write off the device's blocks: read the blocks around it, put
    /// the data in, write them back, with the device held (`rmw`: no
    /// other RMW, no aligned write in flight).
    pub(super) fn slow_write(&mut self, slot: u32, unique: u64, offset: u64, len: u32) {
        // Blocking calls wait for their own bio only: answer what is done
        // first, so the context has room.
        self.reap();
        let shared = self.shared.clone();
        let _held = match self.exclusive(&shared) {
            Ok(held) => held,
            Err(errno) => return self.reply_err(unique, errno),
        };
        let (start, span) = self.around(offset, len);
        let p = self.bounce(span);
        // SAFETY: the bounce buffer has `span` bytes and only this thread
        // uses it; the slot's data area holds the write's `len` bytes.
        let (buf, data) = unsafe {
            (
                std::slice::from_raw_parts_mut(p.as_ptr(), span),
                std::slice::from_raw_parts(self.data_ptr(slot).as_ptr(), len as usize),
            )
        };
        let r = self.ctx.read_at(buf, start).and_then(|()| {
            let at = (offset - start) as usize;
            buf[at..at + len as usize].copy_from_slice(data);
            self.ctx.write_at(buf, start)
        });
        match r {
            Ok(()) => self.reply(unique, &reply::write(len)),
            Err(e) => self.reply_err(unique, e.status().errno()),
        }
    }

    /// fallocate: the errno to answer. PUNCH_HOLE discards (the blocks
    /// the range covers whole; the bytes of partial ones are zeroed), or
    /// writes zeroes where the device has no discard or refuses it;
    /// ZERO_RANGE writes zeroes; a plain allocation inside the device
    /// needs nothing.
    pub(super) fn fallocate(&mut self, offset: u64, len: u64, mode: u32) -> i32 {
        if self.shared.read_only {
            return libc::EROFS;
        }
        let known = falloc::KEEP_SIZE | falloc::PUNCH_HOLE | falloc::ZERO_RANGE;
        if mode & !known != 0 {
            return libc::EOPNOTSUPP;
        }
        let cap = self.shared.capacity;
        let Some(end) = offset.checked_add(len) else {
            return libc::EINVAL;
        };
        let keep = mode & (falloc::KEEP_SIZE | falloc::PUNCH_HOLE) != 0;
        if end > cap && !keep {
            // The file cannot grow past the device.
            return libc::ENOSPC;
        }
        let end = end.min(cap);
        if mode & (falloc::PUNCH_HOLE | falloc::ZERO_RANGE) == 0 || offset >= end {
            return 0;
        }
        // The partial blocks are read-modify-writes, and zeroes or a
        // discard racing one of them could be undone by it: the whole
        // fallocate holds the device.
        self.reap();
        let shared = self.shared.clone();
        let _held = match self.exclusive(&shared) {
            Ok(held) => held,
            Err(errno) => return errno,
        };
        let b = self.shared.block;
        let inner_start = offset.div_ceil(b) * b;
        let inner_end = end / b * b;
        // The partial blocks at either end: zeroed byte by byte.
        let mut edges = [(offset, end.min(inner_start)), (inner_end.max(offset), end)];
        if inner_start >= inner_end {
            edges = [(offset, end), (end, end)];
        }
        for (s, e) in edges {
            if s < e {
                let errno = self.zero_bytes(s, (e - s) as u32);
                if errno != 0 {
                    return errno;
                }
            }
        }
        if inner_start >= inner_end {
            return 0;
        }
        let (s, l) = (inner_start, inner_end - inner_start);
        let punched =
            mode & falloc::PUNCH_HOLE != 0 && self.shared.discard && self.ctx.discard(s, l).is_ok();
        if punched {
            return 0;
        }
        match self.ctx.write_zeroes(s, l) {
            Ok(()) => 0,
            Err(e) => e.status().errno(),
        }
    }

    /// Zero `len` bytes at `offset`, less than two blocks, off the block
    /// boundaries: a read-modify-write (the caller holds the device).
    pub(super) fn zero_bytes(&mut self, offset: u64, len: u32) -> i32 {
        let (start, span) = self.around(offset, len);
        let p = self.bounce(span);
        // SAFETY: the bounce buffer has `span` bytes and only this thread
        // uses it.
        let buf = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), span) };
        let r = self.ctx.read_at(buf, start).and_then(|()| {
            let at = (offset - start) as usize;
            buf[at..at + len as usize].fill(0);
            self.ctx.write_at(buf, start)
        });
        match r {
            Ok(()) => 0,
            Err(e) => e.status().errno(),
        }
    }
}
