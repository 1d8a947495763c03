//! The record blktrace writes and blkparse and btt read (Linux
//! `include/uapi/linux/blktrace_api.h`): `struct blk_io_trace`, 48 bytes in
//! the writer's byte order, then `pdu_len` bytes of payload; the action
//! word (what happened in its low 16 bits, the categories above); and the
//! payloads of a remap, an unplug, a split and a process name.
//!
//! The leaf of `blktrace/`: it only encodes.

use crate::bio::BioFlags;
use crate::error::Status;
use crate::op::Op;

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
#[inline]
pub(crate) fn op_bits(op: Op, flags: BioFlags) -> u32 {
    let mut c = if op.is_write() { tc::WRITE } else { tc::READ };
    if op == Op::Flush || flags.contains(BioFlags::PREFLUSH) {
        c |= tc::FLUSH;
    }
    if op == Op::Discard {
        c |= tc::DISCARD;
    }
    if flags.contains(BioFlags::FUA) {
        c |= tc::FUA;
    }
    cat(c)
}

/// The `error` field: the negative errno, as the kernel stores it.
#[inline]
pub(crate) fn error_of(status: Status) -> u16 {
    (status.errno() as u16).wrapping_neg()
}

/// One record's fixed part (`struct blk_io_trace`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Header {
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

impl Header {
    /// Write the record, header then `pdu`, into `out`; its length.
    #[inline]
    pub(crate) fn encode(&self, pdu: &[u8], out: &mut [u8; RECORD_MAX]) -> usize {
        debug_assert!(pdu.len() <= PDU_MAX);
        debug_assert_eq!(usize::from(self.pdu_len), pdu.len());
        out[0..4].copy_from_slice(&MAGIC_VERSION.to_ne_bytes());
        out[4..8].copy_from_slice(&self.sequence.to_ne_bytes());
        out[8..16].copy_from_slice(&self.time_ns.to_ne_bytes());
        out[16..24].copy_from_slice(&self.sector.to_ne_bytes());
        out[24..28].copy_from_slice(&self.bytes.to_ne_bytes());
        out[28..32].copy_from_slice(&self.action.to_ne_bytes());
        out[32..36].copy_from_slice(&self.pid.to_ne_bytes());
        out[36..40].copy_from_slice(&self.device.to_ne_bytes());
        out[40..44].copy_from_slice(&self.cpu.to_ne_bytes());
        out[44..46].copy_from_slice(&self.error.to_ne_bytes());
        out[46..48].copy_from_slice(&self.pdu_len.to_ne_bytes());
        let n = pdu.len().min(PDU_MAX);
        out[HEADER_BYTES..HEADER_BYTES + n].copy_from_slice(&pdu[..n]);
        HEADER_BYTES + n
    }

    /// Read a record's header back (tests, and `mqblk`'s own checks).
    #[cfg(test)]
    pub(crate) fn decode(b: &[u8]) -> Option<Header> {
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
        let u16_at = |o: usize| u16::from_ne_bytes(b[o..o + 2].try_into().unwrap());
        if b.len() < HEADER_BYTES || u32_at(0) != MAGIC_VERSION {
            return None;
        }
        Some(Header {
            sequence: u32_at(4),
            time_ns: u64_at(8),
            sector: u64_at(16),
            bytes: u32_at(24),
            action: u32_at(28),
            pid: u32_at(32),
            device: u32_at(36),
            cpu: u32_at(40),
            error: u16_at(44),
            pdu_len: u16_at(46),
        })
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
        let h = Header {
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
        assert_eq!(Header::decode(&out), Some(h));
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
