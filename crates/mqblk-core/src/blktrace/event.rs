//! The record blktrace writes and blkparse and btt read (Linux
//! `include/uapi/linux/blktrace_api.h`): `struct blk_io_trace`, 48 bytes in
//! the writer's byte order, then `pdu_len` bytes of payload; the action
//! word (what happened in its low 16 bits, the categories above); the
//! payloads of a remap, an unplug, a split and a process name; and the
//! device numbers records name (`dev_t`).
//!
//! The leaf of `blktrace/`: it only encodes.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::bio::BioFlags;
use crate::error::Status;
use crate::op::Op;

/// A device's number as blktrace records it (Linux `dev_t`, with 20
/// bits of minor). Every device and every view gets its own, under one
/// major.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevNum {
    /// The major number: [`DevNum::MAJOR`].
    pub major: u32,
    /// The minor number, counted from 0 in the order devices are made.
    pub minor: u32,
}

impl DevNum {
    /// The major of every mqblk device: 240, the first of Linux's block
    /// majors for local use (`Documentation/admin-guide/devices.txt`),
    /// so it is told apart from a real disk in a combined trace.
    pub const MAJOR: u32 = 240;
    const MINOR_BITS: u32 = 20;

    /// The next device's number.
    pub(crate) fn next() -> DevNum {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        DevNum {
            major: Self::MAJOR,
            minor: NEXT.fetch_add(1, Ordering::Relaxed) & ((1 << Self::MINOR_BITS) - 1),
        }
    }

    /// As the `device` field holds it (`MKDEV`: the major above 20 bits
    /// of minor).
    pub fn encode(self) -> u32 {
        (self.major << Self::MINOR_BITS) | self.minor
    }
}

impl std::fmt::Display for DevNum {
    /// As blkparse and btt print it: `240,3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.major, self.minor)
    }
}

/// `BLK_IO_TRACE_MAGIC`, with `BLK_IO_TRACE_VERSION` in the low byte.
pub(crate) const MAGIC_VERSION: u32 = 0x6561_7400 | 0x07;
/// `sizeof(struct blk_io_trace)`.
pub(crate) const HEADER_BYTES: usize = 48;
/// The largest payload written: a remap (`struct blk_io_trace_remap`) or
/// a process name (`TASK_COMM_LEN`), 16 bytes each.
pub(crate) const PDU_MAX: usize = 16;
/// The largest record.
pub(crate) const RECORD_MAX: usize = HEADER_BYTES + PDU_MAX;

/// Trace categories (`enum blktrace_cat`), shifted into the action word's
/// high half by [`cat`].
mod tc {
    pub(super) const READ: u32 = 1 << 0;
    pub(super) const WRITE: u32 = 1 << 1;
    pub(super) const FLUSH: u32 = 1 << 2;
    pub(super) const QUEUE: u32 = 1 << 4;
    pub(super) const REQUEUE: u32 = 1 << 5;
    pub(super) const ISSUE: u32 = 1 << 6;
    pub(super) const COMPLETE: u32 = 1 << 7;
    pub(super) const FS: u32 = 1 << 8;
    pub(super) const NOTIFY: u32 = 1 << 10;
    pub(super) const DISCARD: u32 = 1 << 13;
    pub(super) const FUA: u32 = 1 << 15;
}

/// `BLK_TC_ACT`: a category in the action word.
const fn cat(tc: u32) -> u32 {
    tc << 16
}

/// What happened (`BLK_TA_*`: the action in the low half, its category in
/// the high half); the operation's categories are added by [`op_bits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Action {
    /// Q: a bio entered the layer.
    Queue = 1 | cat(tc::QUEUE),
    /// M: a bio joined the back of a waiting request.
    BackMerge = 2 | cat(tc::QUEUE),
    /// F: a bio joined the front of a waiting request.
    FrontMerge = 3 | cat(tc::QUEUE),
    /// G: a bio got a request (a tag).
    GetRq = 4 | cat(tc::QUEUE),
    /// R: the driver was busy and the request went back to the queue.
    Requeue = 6 | cat(tc::REQUEUE) | cat(tc::FS),
    /// D: the request went to the driver.
    Issue = 7 | cat(tc::ISSUE) | cat(tc::FS),
    /// C: the I/O completed (with its error).
    Complete = 8 | cat(tc::COMPLETE) | cat(tc::FS),
    /// P: the plug was started.
    Plug = 9 | cat(tc::QUEUE),
    /// U: the plug was flushed (with its depth).
    UnplugIo = 10 | cat(tc::QUEUE),
    /// I: the request was inserted into the context's queue.
    Insert = 12 | cat(tc::QUEUE) | cat(tc::FS),
    /// X: a bio was split (with where its next piece starts).
    Split = 13,
    /// A: a bio was remapped from a device above (with its device and
    /// sector there).
    Remap = 15 | cat(tc::QUEUE),
    /// The pid/name mapping blkparse prints (`BLK_TN_PROCESS`).
    Process = cat(tc::NOTIFY),
}

/// The categories of an operation (Linux `__blk_add_trace`: read or write
/// by `op_is_write`, then flush, discard and FUA).
const fn categories(op: Op, fua: bool, preflush: bool) -> u32 {
    let mut c = if op.is_write() { tc::WRITE } else { tc::READ };
    if matches!(op, Op::Flush) || preflush {
        c |= tc::FLUSH;
    }
    if matches!(op, Op::Discard) {
        c |= tc::DISCARD;
    }
    if fua {
        c |= tc::FUA;
    }
    cat(c)
}

/// [`categories`] of every operation (by its number) and FUA and
/// PREFLUSH flag pair, made at compile time: one load per event.
const OP_BITS: [[u32; 4]; 6] = {
    let ops = [
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Discard,
        Op::Read, // no operation 4
        Op::WriteZeroes,
    ];
    let mut t = [[0u32; 4]; 6];
    let mut i = 0;
    while i < 6 {
        let mut f = 0;
        while f < 4 {
            t[i][f] = categories(ops[i], f & 1 != 0, f & 2 != 0);
            f += 1;
        }
        i += 1;
    }
    t
};

/// The categories of `op` with `flags`, in the action word.
#[inline(always)]
pub(crate) fn op_bits(op: Op, flags: BioFlags) -> u32 {
    let f = flags.bits() & (BioFlags::FUA.bits() | BioFlags::PREFLUSH.bits());
    OP_BITS[op as usize][f as usize]
}

/// The `error` field: the negative errno, as the kernel stores it.
#[inline]
pub(crate) fn error_of(status: Status) -> u16 {
    (status.errno() as u16).wrapping_neg()
}

/// One record's fixed part: `struct blk_io_trace`, field for field, in
/// the writer's byte order (blkparse tells the order by the magic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct BlkIoTrace {
    pub(crate) magic: u32,
    pub(crate) sequence: u32,
    pub(crate) time_ns: u64,
    pub(crate) sector: u64,
    pub(crate) bytes: u32,
    pub(crate) action: u32,
    pub(crate) pid: u32,
    pub(crate) device: u32,
    pub(crate) cpu: u32,
    pub(crate) error: u16,
    pub(crate) pdu_len: u16,
}

// The kernel's layout: 48 bytes, no padding.
const _: () = assert!(std::mem::size_of::<BlkIoTrace>() == HEADER_BYTES);

impl BlkIoTrace {
    /// Write the record, header then `pdu`, into `out`; its length.
    pub(crate) fn encode(&self, pdu: &[u8], out: &mut [u8; RECORD_MAX]) -> usize {
        let n = pdu.len().min(PDU_MAX);
        // SAFETY: `out` has room for the 48-byte header, written unaligned.
        unsafe { self.write_to(out.as_mut_ptr()) };
        out[HEADER_BYTES..HEADER_BYTES + n].copy_from_slice(&pdu[..n]);
        HEADER_BYTES + n
    }

    /// Store the header at `dst` (any alignment).
    ///
    /// # Safety
    ///
    /// `dst` is valid for writes of [`HEADER_BYTES`] bytes, and nothing
    /// else reads or writes them meanwhile.
    #[inline(always)]
    pub(crate) unsafe fn write_to(&self, dst: *mut u8) {
        // SAFETY: the caller's promise; the struct is plain data of
        // exactly HEADER_BYTES, stored unaligned.
        unsafe { dst.cast::<BlkIoTrace>().write_unaligned(*self) };
    }

    /// Read a record's header back (tests).
    #[cfg(test)]
    pub(crate) fn decode(b: &[u8]) -> Option<BlkIoTrace> {
        if b.len() < HEADER_BYTES {
            return None;
        }
        // SAFETY: `b` has at least HEADER_BYTES bytes, read unaligned into
        // plain data that any bit pattern makes.
        let h = unsafe { b.as_ptr().cast::<BlkIoTrace>().read_unaligned() };
        (h.magic == MAGIC_VERSION).then_some(h)
    }
}

/// `struct blk_io_trace_remap`, big-endian as the kernel writes it: the
/// device and sector a bio came from, and the device it went to.
#[inline]
pub(crate) fn remap_pdu(from_dev: u32, to_dev: u32, from_sector: u64) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[0..4].copy_from_slice(&from_dev.to_be_bytes());
    p[4..8].copy_from_slice(&to_dev.to_be_bytes());
    p[8..16].copy_from_slice(&from_sector.to_be_bytes());
    p
}

/// A 64-bit big-endian payload: an unplug's depth, a split's next sector.
#[inline]
pub(crate) fn u64_pdu(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

/// A process name (`comm`): at most 15 bytes and a NUL, in 16.
pub(crate) fn comm_pdu(name: &str) -> [u8; 16] {
    let mut p = [0u8; 16];
    let b = name.as_bytes();
    let n = b.len().min(15);
    p[..n].copy_from_slice(&b[..n]);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_blk_io_trace_with_its_payload() {
        let h = BlkIoTrace {
            magic: MAGIC_VERSION,
            sequence: 7,
            time_ns: 1_000_000_123,
            sector: 2048,
            bytes: 4096,
            action: Action::Remap as u32 | op_bits(Op::Write, BioFlags::FUA),
            pid: 42,
            device: (240 << 20) | 3,
            cpu: 1,
            error: 0,
            pdu_len: 16,
        };
        let pdu = remap_pdu((240 << 20) | 1, (240 << 20) | 3, 8);
        let mut out = [0u8; RECORD_MAX];
        assert_eq!(h.encode(&pdu, &mut out), 64);
        assert_eq!(BlkIoTrace::decode(&out), Some(h));
        assert_eq!(&out[0..4], &0x6561_7407u32.to_ne_bytes());
        // The action: REMAP (15) with QUEUE, WRITE and FUA categories.
        assert_eq!(h.action, 15 | (1 << 20) | (1 << 17) | (1 << 31));
        // The payload is big-endian, as blkparse's be32_to_cpu expects.
        assert_eq!(&out[48..52], &[0xf, 0, 0, 1]);
        assert_eq!(out[63], 8);
    }

    #[test]
    fn operations_map_to_blkparse_rwbs_categories() {
        let c = |op, f| op_bits(op, f) >> 16;
        assert_eq!(c(Op::Read, BioFlags::NONE), tc::READ);
        assert_eq!(c(Op::Write, BioFlags::NONE), tc::WRITE);
        assert_eq!(c(Op::Flush, BioFlags::NONE), tc::READ | tc::FLUSH);
        assert_eq!(c(Op::Discard, BioFlags::NONE), tc::WRITE | tc::DISCARD);
        assert_eq!(c(Op::WriteZeroes, BioFlags::NONE), tc::WRITE);
        assert_eq!(
            c(Op::Write, BioFlags::PREFLUSH | BioFlags::FUA),
            tc::WRITE | tc::FLUSH | tc::FUA
        );
        assert_eq!(error_of(Status::Ok), 0);
        assert_eq!(error_of(Status::IoError) as i16, -libc::EIO as i16);
        assert_eq!(&comm_pdu("a-very-long-thread-name")[15..], &[0]);
    }
}
