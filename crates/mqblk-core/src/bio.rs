//! The bio: one block I/O as the caller describes it (Linux `struct bio`).
//!
//! First stage of the pipeline: `caller → Bio → plug → software queue →
//! scheduler → hardware queue → driver → completion`. A bio names an
//! operation, a start offset in bytes, flags, and a vector of segments, each a
//! (buffer, offset, length) view. Up to four segments are stored inline, so
//! a typical bio needs no heap memory; the bio is moved into the layer on
//! submit and handed back, with its buffers, on completion.

use smallvec::SmallVec;

use crate::buf::IoBuf;
use crate::error::{Error, InvalidKind, Status};
use crate::limits::QueueInfo;
use crate::op::{SECTOR_SHIFT, SECTOR_SIZE};

pub use crate::op::Op;

/// Bio and request flags (Linux `REQ_FUA`, `REQ_PREFLUSH`, `REQ_NOMERGE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BioFlags(u8);

impl BioFlags {
    /// No flags.
    pub const NONE: BioFlags = BioFlags(0);
    /// Force unit access: the write is durable when it completes.
    pub const FUA: BioFlags = BioFlags(1);
    /// Flush the write cache before this bio.
    pub const PREFLUSH: BioFlags = BioFlags(2);
    /// Never merge this bio with another.
    pub const NOMERGE: BioFlags = BioFlags(4);

    /// True if every flag in `other` is set.
    #[inline]
    pub fn contains(self, other: BioFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    #[inline]
    pub fn bits(self) -> u8 {
        self.0
    }
}

impl std::ops::BitOr for BioFlags {
    type Output = BioFlags;
    fn bitor(self, rhs: BioFlags) -> BioFlags {
        BioFlags(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for BioFlags {
    fn bitor_assign(&mut self, rhs: BioFlags) {
        self.0 |= rhs.0;
    }
}

/// One contiguous piece of a bio's memory: `len` bytes at `offset` in `buf`.
#[derive(Debug)]
pub struct Segment {
    buf: IoBuf,
    offset: u32,
    len: u32,
}

impl Segment {
    /// The segment's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.buf.as_slice()[self.offset as usize..][..self.len as usize]
    }

    /// The segment's bytes, mutably (filling a write before submission).
    ///
    /// # Panics
    ///
    /// On a read-only segment; see [`IoBuf::as_mut_slice`]. Drivers never
    /// get `&mut Segment`: they fill reads through `Request::read_bufs`.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let (off, len) = (self.offset as usize, self.len as usize);
        &mut self.buf.as_mut_slice()[off..][..len]
    }

    /// Start address of the segment's bytes.
    #[inline]
    pub fn addr(&self) -> usize {
        self.buf.as_ptr() as usize + self.offset as usize
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True for a zero-length segment.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the segment within its buffer.
    #[inline]
    pub fn offset(&self) -> u32 {
        self.offset
    }

    /// The buffer this segment views.
    #[inline]
    pub fn buf(&self) -> &IoBuf {
        &self.buf
    }

    /// The segment's bytes as a mutable slice, made from the raw pointer
    /// alone (no reference to the rest of the buffer).
    ///
    /// # Safety
    ///
    /// The segment's buffer must be writable, and the caller must have
    /// exclusive use of these bytes for `'a` (a driver filling the read
    /// request it owns).
    #[inline]
    pub(crate) unsafe fn raw_mut_slice<'a>(&self) -> &'a mut [u8] {
        debug_assert!(self.buf.is_writable());
        // SAFETY: the range lies inside the buffer (push_segment checked),
        // and the caller promises writability and exclusivity.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.buf.as_ptr().add(self.offset as usize),
                self.len as usize,
            )
        }
    }
}

/// Inline capacity of a bio's segment vector.
pub const BIO_INLINE_SEGMENTS: usize = 4;

/// One finished bio, as the caller sees it. The bio stays in its context
/// slot while the callback runs: take it with [`Completion::into_bio`], or
/// send it again with [`Completion::resubmit`] (no copy, and the submission
/// happens after the reap, so a callback never recurses into the layer).
pub struct Completion<'a> {
    pub(crate) slot: &'a mut Option<Bio>,
    pub(crate) resubmit: &'a mut bool,
    pub(crate) info: &'a QueueInfo,
}

impl Completion<'_> {
    #[inline]
    fn bio_ref(&self) -> &Bio {
        self.slot
            .as_ref()
            .expect("a completion always holds its bio")
    }

    /// The outcome, as a typed error naming device, offset and limit.
    pub fn result(&self) -> Result<(), Error> {
        let bio = self.bio_ref();
        match bio.status() {
            Status::Ok => Ok(()),
            s => Err(bio.error(self.info, s)),
        }
    }

    /// The one-byte status.
    #[inline]
    pub fn status(&self) -> Status {
        self.bio_ref().status()
    }

    /// The finished bio.
    #[inline]
    pub fn bio(&self) -> &Bio {
        self.bio_ref()
    }

    /// The finished bio, mutably (to aim it elsewhere before resubmitting).
    #[inline]
    pub fn bio_mut(&mut self) -> &mut Bio {
        self.slot
            .as_mut()
            .expect("a completion always holds its bio")
    }

    /// Take the bio back (with its buffers).
    #[inline]
    pub fn into_bio(self) -> Bio {
        self.slot.take().expect("a completion always holds its bio")
    }

    /// Submit the bio again, as it is now, once the current reap is over.
    #[inline]
    pub fn resubmit(self) {
        *self.resubmit = true;
    }

    /// The caller's cookie.
    #[inline]
    pub fn private(&self) -> u64 {
        self.bio_ref().private
    }
}

/// A stateful completion handler (Linux `bi_end_io` with `bi_private`):
/// called once per submission, after the reap, never recursively, on the
/// submitting context's thread. One handler is shared by many bios (an
/// `Arc` clone per bio, no allocation per I/O); the bio's `private` word
/// tells it which I/O ended. A stacked driver completes its parent
/// requests from here, so it never blocks waiting for its children.
///
/// Closures are handlers: `Arc::new(|c: Completion<'_>| ...)`.
pub trait EndIo: Send + Sync {
    /// The bio ended: inspect, take, or resubmit it through `c`.
    fn end_io(&self, c: Completion<'_>);
}

impl std::fmt::Debug for dyn EndIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EndIo")
    }
}

impl<F: Fn(Completion<'_>) + Send + Sync> EndIo for F {
    #[inline]
    fn end_io(&self, c: Completion<'_>) {
        self(c)
    }
}

/// One block I/O.
#[derive(Debug)]
pub struct Bio {
    op: Op,
    flags: BioFlags,
    pub(crate) status: Status,
    /// OR of every segment's address and length (low 32 bits), kept as
    /// segments are added, so the alignment check is one AND, not a walk
    /// (Linux checks a bvec when it is added to the bio).
    align_or: u32,
    offset_bytes: u64,
    size_bytes: u64,
    segs: SmallVec<[Segment; BIO_INLINE_SEGMENTS]>,
    end_io: Option<std::sync::Arc<dyn EndIo>>,
    /// Caller's cookie, returned untouched on completion (io_uring `user_data`).
    pub private: u64,
}

/// [`Bio::push_segment`]'s refusal, out of line so that the push itself
/// inlines where a buffer is made (and stays in registers).
#[cold]
#[inline(never)]
fn segment_past_buffer(offset: u32, len: u32, buf_len: usize) -> ! {
    panic!("segment {offset}+{len} runs past its {buf_len}-byte buffer")
}

impl Bio {
    /// An empty bio of `op` at `offset_bytes`; add segments with
    /// [`Bio::push_segment`]. Offsets and lengths are bytes, and must be
    /// multiples of the device's logical block size (checked at submit).
    pub fn at(op: Op, offset_bytes: u64) -> Bio {
        Bio {
            op,
            flags: BioFlags::NONE,
            status: Status::Ok,
            align_or: 0,
            offset_bytes,
            size_bytes: 0,
            segs: SmallVec::new(),
            end_io: None,
            private: 0,
        }
    }

    /// Make this bio what [`Bio::at`] would give, keeping the room its
    /// segment list has grown to: a driver that sends many clones reuses
    /// their bios, so a clone of many segments allocates once, not each
    /// time. The old segments (and any views they hold) are dropped now.
    pub fn reuse_at(&mut self, op: Op, offset_bytes: u64) {
        self.blank();
        self.op = op;
        self.offset_bytes = offset_bytes;
    }

    /// A read of `buf.len()` bytes at `offset_bytes`.
    pub fn read_at(offset_bytes: u64, buf: IoBuf) -> Bio {
        let mut bio = Bio::at(Op::Read, offset_bytes);
        let len = buf.len() as u32;
        bio.push_segment(buf, 0, len);
        bio
    }

    /// A write of `buf` at `offset_bytes`.
    pub fn write_at(offset_bytes: u64, buf: IoBuf) -> Bio {
        let mut bio = Bio::at(Op::Write, offset_bytes);
        let len = buf.len() as u32;
        bio.push_segment(buf, 0, len);
        bio
    }

    /// A cache flush.
    pub fn flush() -> Bio {
        Bio::at(Op::Flush, 0)
    }

    /// Discard `len_bytes` at `offset_bytes`.
    pub fn discard_at(offset_bytes: u64, len_bytes: u64) -> Bio {
        let mut bio = Bio::at(Op::Discard, offset_bytes);
        bio.size_bytes = len_bytes;
        bio
    }

    /// Zero `len_bytes` at `offset_bytes`.
    pub fn write_zeroes_at(offset_bytes: u64, len_bytes: u64) -> Bio {
        let mut bio = Bio::at(Op::WriteZeroes, offset_bytes);
        bio.size_bytes = len_bytes;
        bio
    }

    /// Append a segment: `len` bytes at `offset` within `buf`.
    ///
    /// # Panics
    ///
    /// If `offset + len` runs past the buffer: that would let the device
    /// touch memory the bio does not own.
    // Always inline: a buffer made just before (the C API builds one per
    // request) then stays in registers, instead of being stored in pieces
    // and reloaded whole, which stalls the store buffer.
    #[inline(always)]
    pub fn push_segment(&mut self, buf: IoBuf, offset: u32, len: u32) {
        let end = u64::from(offset) + u64::from(len);
        if end > buf.len() as u64 {
            segment_past_buffer(offset, len, buf.len());
        }
        self.size_bytes += u64::from(len);
        self.align_or |= (buf.as_ptr() as usize + offset as usize) as u32 | len;
        self.segs.push(Segment { buf, offset, len });
    }

    /// Make a finished bio blank for its slot's next submission (see
    /// [`crate::Context::submit_with`]): its buffers (and their memory, if
    /// owned) and its handler are let go, so a kept bio points at nothing.
    #[inline]
    pub(crate) fn blank(&mut self) {
        self.segs.clear();
        self.op = Op::Read;
        self.flags = BioFlags::NONE;
        self.status = Status::Ok;
        self.align_or = 0;
        self.offset_bytes = 0;
        self.size_bytes = 0;
        self.end_io = None;
        self.private = 0;
    }

    /// The operation.
    #[inline]
    pub fn op(&self) -> Op {
        self.op
    }

    /// Change the operation, keeping the segments (to reuse a bio).
    #[inline]
    pub fn set_op(&mut self, op: Op) {
        self.op = op;
    }

    /// The flags.
    #[inline]
    pub fn flags(&self) -> BioFlags {
        self.flags
    }

    /// Replace the flags.
    #[inline]
    pub fn set_flags(&mut self, flags: BioFlags) {
        self.flags = flags;
    }

    /// First 512-byte sector (inside the layer; callers speak bytes).
    #[inline]
    pub(crate) fn sector(&self) -> u64 {
        self.offset_bytes >> SECTOR_SHIFT
    }

    /// Move the bio to another offset (to reuse it).
    #[inline]
    pub fn set_offset_bytes(&mut self, offset_bytes: u64) {
        self.offset_bytes = offset_bytes;
    }

    /// Byte offset on the device.
    #[inline]
    pub fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }

    /// Length in bytes (the segments' total, or the range of a discard).
    #[inline]
    pub fn len_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Set the length of a data-less bio (discard, write-zeroes, a bounce
    /// piece before its buffer is attached).
    #[inline]
    pub(crate) fn set_len_bytes(&mut self, len: u64) {
        self.size_bytes = len;
    }

    /// Length in 512-byte sectors, rounded up (inside the layer).
    #[inline]
    pub(crate) fn len_sectors(&self) -> u64 {
        self.size_bytes.div_ceil(SECTOR_SIZE)
    }

    /// The segments.
    #[inline]
    pub fn segments(&self) -> &[Segment] {
        &self.segs
    }

    /// OR of the segments' addresses and lengths: `align_or() & mask == 0`
    /// means every segment is aligned to `mask + 1`.
    #[inline]
    pub fn align_or(&self) -> u32 {
        self.align_or
    }

    /// The segments, mutably.
    #[inline]
    pub fn segments_mut(&mut self) -> &mut [Segment] {
        &mut self.segs
    }

    /// The status set at completion.
    #[inline]
    pub fn status(&self) -> Status {
        self.status
    }

    /// Set the completion handler. Without one, the completion goes to the
    /// closure given to `Context::poll`.
    #[inline]
    pub fn set_end_io(&mut self, end_io: Option<std::sync::Arc<dyn EndIo>>) {
        self.end_io = end_io;
    }

    /// The completion handler.
    #[inline]
    pub fn end_io(&self) -> Option<&std::sync::Arc<dyn EndIo>> {
        self.end_io.as_ref()
    }

    /// Take the bio apart into its buffers (to return them to a pool).
    pub fn into_buffers(self) -> impl Iterator<Item = IoBuf> {
        self.segs.into_iter().map(|s| s.buf)
    }

    /// Copy of the first buffer's bytes of segment `i` (tests and verify).
    pub fn segment(&self, i: usize) -> Option<&Segment> {
        self.segs.get(i)
    }

    /// The typed error for this bio, ended with `status` on the queue
    /// `info`: it names the device, the offset and the limit broken.
    pub fn error(&self, info: &QueueInfo, status: Status) -> Error {
        let bio = self;
        let device = info.name.clone();
        let op = bio.op();
        let offset_bytes = bio.offset_bytes();
        let lim = &info.limits;
        match status {
            Status::Invalid(InvalidKind::OutOfRange) => Error::OutOfRange {
                device,
                op,
                offset_bytes,
                len_bytes: bio.len_bytes(),
                capacity_bytes: info.capacity_bytes(),
            },
            Status::Invalid(InvalidKind::BadLength) => Error::BadLength {
                device,
                op,
                offset_bytes,
                len_bytes: bio.len_bytes(),
                logical_block_size: lim.logical_block_size,
            },
            Status::Invalid(InvalidKind::ZeroLength) => Error::ZeroLength {
                device,
                op,
                offset_bytes,
                logical_block_size: lim.logical_block_size,
            },
            Status::Invalid(InvalidKind::Misaligned) => {
                let dma = lim.dma_alignment as usize;
                let (segment, s) = bio
                    .segments()
                    .iter()
                    .enumerate()
                    .find(|(_, s)| (s.addr() | s.len() as usize) & dma != 0)
                    .map_or((0, None), |(i, s)| (i, Some(s)));
                Error::Misaligned {
                    device,
                    op,
                    offset_bytes,
                    segment,
                    addr: s.map_or(0, |s| s.addr()),
                    len_bytes: s.map_or(0, |s| s.len()),
                    alignment: lim.dma_alignment + 1,
                }
            }
            Status::Invalid(InvalidKind::ReadOnly) => Error::ReadOnly {
                device,
                op,
                offset_bytes,
            },
            Status::Invalid(InvalidKind::TooManySegments) => Error::TooManySegments {
                device,
                op,
                offset_bytes,
                segments: bio.segments().len(),
                max_segments: lim.max_segments,
            },
            Status::Invalid(InvalidKind::Unsupported) => Error::Unsupported {
                device,
                op,
                offset_bytes,
            },
            status => Error::Io {
                device,
                op,
                offset_bytes,
                len_bytes: bio.len_bytes(),
                status,
            },
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn four_segments_stay_inline() {
        let mut bio = Bio::at(Op::Write, 4096);
        for _ in 0..BIO_INLINE_SEGMENTS {
            bio.push_segment(IoBuf::page_aligned(4096), 0, 4096);
        }
        assert!(!bio.segs.spilled());
        assert_eq!(bio.len_bytes(), 4 * 4096);
        assert_eq!(bio.len_sectors(), 32);
        bio.push_segment(IoBuf::page_aligned(4096), 512, 512);
        assert!(bio.segs.spilled());
    }

    #[test]
    fn a_reused_bio_is_a_fresh_one_that_keeps_its_room() {
        let mut bio = Bio::at(Op::Write, 4096);
        for _ in 0..BIO_INLINE_SEGMENTS + 2 {
            bio.push_segment(IoBuf::page_aligned(4096), 0, 4096);
        }
        bio.set_flags(BioFlags::FUA);
        bio.status = Status::IoError;
        bio.private = 7;
        let room = bio.segs.capacity();
        bio.reuse_at(Op::Read, 8192);
        assert_eq!(bio.op(), Op::Read);
        assert_eq!(bio.offset_bytes(), 8192);
        assert_eq!(bio.len_bytes(), 0);
        assert_eq!(bio.segments().len(), 0);
        assert_eq!(bio.flags(), BioFlags::NONE);
        assert_eq!(bio.status(), Status::Ok);
        assert_eq!(bio.private, 0);
        assert_eq!(bio.align_or, 0);
        assert!(bio.end_io.is_none());
        assert_eq!(bio.segs.capacity(), room);
    }

    #[test]
    fn op_classes() {
        assert!(Op::Write.is_write());
        assert!(Op::Discard.is_write());
        assert!(Op::WriteZeroes.is_write());
        assert!(!Op::Read.is_write());
        assert!(!Op::Flush.is_write());
        assert!(Op::Read.has_data());
        assert!(Op::Write.has_data());
        assert!(!Op::Flush.has_data());
        assert!(!Op::Discard.has_data());
        assert!(!Op::WriteZeroes.has_data());
    }

    #[test]
    #[should_panic(expected = "runs past")]
    fn segment_past_buffer_is_refused() {
        let mut bio = Bio::at(Op::Read, 0);
        bio.push_segment(IoBuf::page_aligned(512), 256, 512);
    }
}

/// A bio [`crate::Context::submit`] could not accept, handed back with
/// the reason, so `?` works and the bio (with its buffers) is not lost.
#[derive(Debug)]
pub struct SubmitError {
    error: Error,
    bio: Box<Bio>,
}

impl SubmitError {
    /// Boxed on the error path only: the common path returns `Ok(())`.
    pub(crate) fn new(error: Error, bio: Bio) -> SubmitError {
        SubmitError {
            error,
            bio: Box::new(bio),
        }
    }

    /// Why the bio was refused.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The bio, to submit again after polling.
    pub fn into_bio(self) -> Bio {
        *self.bio
    }
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for SubmitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<SubmitError> for Error {
    fn from(e: SubmitError) -> Error {
        e.error
    }
}

impl From<SubmitError> for std::io::Error {
    fn from(e: SubmitError) -> std::io::Error {
        e.error.into()
    }
}
