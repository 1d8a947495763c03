//! Bounce buffers (Linux `block/bounce.c`, and the unaligned-DIO copy).
//!
//! The only copy the layer ever makes: a piece of a bio whose segments break
//! the device's DMA alignment gets an aligned buffer; a write copies the
//! caller's bytes in before dispatch, a read copies them out after
//! completion. Every copied byte is counted (`bytes_copied`). Buffers are
//! kept per context and reused, so steady bouncing allocates nothing.

use crate::bio::Bio;
use crate::buf::IoBuf;

/// Most bounce buffers a context keeps for reuse.
const KEEP: usize = 32;

/// A context's reusable bounce buffers.
#[derive(Debug)]
pub(crate) struct BouncePool {
    align: usize,
    free: Vec<IoBuf>,
}

impl BouncePool {
    pub(crate) fn new(align: usize) -> BouncePool {
        BouncePool {
            align,
            free: Vec::with_capacity(KEEP),
        }
    }

    /// A buffer of at least `len` bytes, aligned for the device.
    pub(crate) fn get(&mut self, len: usize) -> IoBuf {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= len)
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        match best {
            Some(i) => self.free.swap_remove(i),
            None => IoBuf::new(len.max(4096).next_power_of_two(), self.align),
        }
    }

    /// Keep a buffer for the next bounce.
    pub(crate) fn put(&mut self, buf: IoBuf) {
        if self.free.len() < KEEP && buf.is_owned() {
            self.free.push(buf);
        }
    }
}

/// Copy `dst.len()` bytes of `parent`'s data, starting `offset` bytes in,
/// into `dst` (a bounced write). Returns the bytes copied.
pub(crate) fn copy_from_bio(parent: &Bio, offset: u64, dst: &mut [u8]) -> u64 {
    let mut skip = offset;
    let mut done = 0usize;
    for s in parent.segments() {
        if done == dst.len() {
            break;
        }
        let src = s.as_slice();
        if skip >= src.len() as u64 {
            skip -= src.len() as u64;
            continue;
        }
        let src = &src[skip as usize..];
        skip = 0;
        let n = src.len().min(dst.len() - done);
        dst[done..done + n].copy_from_slice(&src[..n]);
        done += n;
    }
    done as u64
}

/// Copy `src` into `parent`'s data, starting `offset` bytes in (a bounced
/// read). Returns the bytes copied.
///
/// Takes the parent by shared reference and writes through raw pointers
/// into exactly the bytes this piece covers: sibling pieces of the same
/// parent may still be in flight in the bytes around them, so no `&mut`
/// over a whole segment is ever made.
pub(crate) fn copy_to_bio(parent: &Bio, offset: u64, src: &[u8]) -> u64 {
    let mut skip = offset;
    let mut done = 0usize;
    for s in parent.segments() {
        if done == src.len() {
            break;
        }
        let seg_len = s.len() as u64;
        if skip >= seg_len {
            skip -= seg_len;
            continue;
        }
        let n = ((seg_len - skip) as usize).min(src.len() - done);
        s.buf()
            .write_at(s.offset() as usize + skip as usize, &src[done..done + n]);
        skip = 0;
        done += n;
    }
    done as u64
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::bio::Op;

    #[test]
    fn copies_cross_segments_both_ways() {
        let mut bio = Bio::at(Op::Write, 0);
        for i in 0..3u8 {
            let mut b = IoBuf::page_aligned(1024);
            b.as_mut_slice().fill(i + 1);
            bio.push_segment(b, 512, 512);
        }
        let mut out = vec![0u8; 1024];
        assert_eq!(copy_from_bio(&bio, 256, &mut out), 1024);
        assert!(out[..256].iter().all(|&x| x == 1));
        assert!(out[256..768].iter().all(|&x| x == 2));
        assert!(out[768..].iter().all(|&x| x == 3));
        assert_eq!(copy_to_bio(&bio, 512, &[9u8; 512]), 512);
        assert!(bio.segments()[1].as_slice().iter().all(|&x| x == 9));
        assert!(bio.segments()[0].as_slice().iter().all(|&x| x == 1));
    }

    #[test]
    fn pool_reuses_buffers() {
        let mut p = BouncePool::new(4096);
        let b = p.get(3000);
        assert!(b.len() >= 3000);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        let addr = b.as_ptr();
        p.put(b);
        assert_eq!(p.get(2000).as_ptr(), addr);
    }
}
