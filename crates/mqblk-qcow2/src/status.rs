//! Block status: which guest ranges are data, zeros, or unallocated
//! through the whole backing chain (NBD `base:allocation`, `qemu-img
//! map`). Control plane: it takes the metadata lock and may read tables.

use mqblk_core::driver::{Extent, ExtentBuilder};

use crate::backing::Backing;
use crate::error::Result;
use crate::image::Image;
use crate::table::Source;

impl Image {
    /// Describe `[offset, offset + len)` into `out` (in order, no gaps).
    pub fn extents(&self, offset: u64, len: u64, out: &mut Vec<Extent>) -> Result<()> {
        let mut b = ExtentBuilder::new(out, offset, len);
        let end = offset.saturating_add(len).min(self.hdr.size);
        let mut at = offset;
        while at < end {
            let (src, n) = {
                let mut m = self.lock();
                self.source(&mut m, at, end - at)?
            };
            match src {
                Source::Data(_) | Source::Compressed { .. } => b.push(at, n, false, false),
                // A zero cluster takes no data (as qemu-nbd reports it).
                Source::Zero => b.push(at, n, true, true),
                Source::Backing => match &self.backing {
                    None => b.push(at, n, true, true),
                    Some(Backing::Raw { .. }) => b.push(at, n, false, false),
                    Some(Backing::Qcow2(img)) => {
                        let mut below = Vec::new();
                        img.extents(at, n, &mut below)?;
                        for e in below {
                            b.push(e.offset_bytes, e.len_bytes, e.hole, e.zero);
                        }
                        // Past the backing image's end: zeros.
                        b.push_until(at + n, true, true);
                    }
                },
            }
            at += n;
        }
        b.fill_rest(true, true);
        Ok(())
    }
}
