//! The engine's calls around every I/O ([`Hook`]), and the hook of a job
//! that does not verify ([`NoVerify`]): it only stamps write buffers.

use mqblk::{Bio, Completion, Context, Op};

use crate::content::Content;

use super::result::VerifyResult;

/// The bits of [`Bio::private`] a [`Hook`] may use. The engine keeps its
/// own word for the I/O (a timing slot) in the high half, and sets it after
/// [`Hook::prepare`].
pub const HOOK_PRIVATE_MASK: u64 = 0xffff_ffff;

/// What the bench engine calls around every I/O. [`NoVerify`] stamps
/// write buffers; [`Verifier`] writes and checks headers.
pub trait Hook {
    /// Restrict the job to its slice of `blocks`: returns how many blocks
    /// the offset generator should draw from.
    fn blocks(&self, blocks: u64) -> u64 {
        blocks
    }
    /// The generator drew `op`: the op to issue instead (a verify job turns
    /// some writes into discards or write-zeroes).
    fn retarget(&mut self, op: Op) -> Op {
        op
    }
    /// The bio has its op and sector for the next I/O: move it off a busy
    /// block, into the job's slice, and write the header of a write. Only
    /// the [`HOOK_PRIVATE_MASK`] bits of `private` are the hook's.
    fn prepare(&mut self, _bio: &mut Bio) {}
    /// The bio could not be submitted after `prepare`.
    fn cancel(&mut self, _bio: &Bio) {}
    /// The bio completed: record a write, check a read.
    fn complete(&mut self, _c: &Completion<'_>) {}
    /// `verify_fatal=1` hit a mismatch: the job should stop.
    fn stopped(&self) -> bool {
        false
    }
    /// After the measured phase, with nothing in flight: read back and
    /// check what was written (`do_verify=1`). Once `aborted` says so (a
    /// signal), it issues no more and returns at once, its reads still in
    /// flight: the job reports what was checked by then, and drains after.
    fn verify_phase(
        &mut self,
        _ctx: &mut Context,
        _free: &mut Vec<Bio>,
        _aborted: &dyn Fn() -> bool,
    ) {
    }
    /// The result, if verifying.
    fn result(&mut self) -> Option<VerifyResult> {
        None
    }
}

/// Verify off. As fio's default `scramble_buffers=1` does, every write
/// buffer gets a fresh stamp (8 bytes at the start of every 4 KiB), so a
/// device that keeps all-zero or repeated blocks specially (ram keeps
/// all-zero writes as holes) stores real data and reads copy real data.
/// A job with fio's dedupe or compress options gets its buffers from
/// [`Content`] instead.
#[derive(Default)]
pub struct NoVerify {
    stamp: u64,
    content: Option<Content>,
}

impl NoVerify {
    /// Write buffers made by `content` (fio's dedupe and compress
    /// options), not stamped.
    pub fn with_content(content: Content) -> NoVerify {
        NoVerify {
            stamp: 0,
            content: Some(content),
        }
    }
}

impl Hook for NoVerify {
    #[inline]
    fn prepare(&mut self, bio: &mut Bio) {
        if bio.op() == mqblk::Op::Write {
            if let Some(c) = &mut self.content {
                c.fill(bio);
                return;
            }
            self.stamp = self.stamp.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let v = (self.stamp | 1).to_le_bytes();
            for s in bio.segments_mut() {
                for page in s.as_mut_slice().chunks_mut(4096) {
                    let n = page.len().min(8);
                    page[..n].copy_from_slice(&v[..n]);
                }
            }
        }
    }
}
