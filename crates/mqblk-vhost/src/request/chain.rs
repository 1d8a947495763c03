//! A chain's descriptors as the driver laid them out, runs of bytes
//! through them, and guest memory read through them.

/// One descriptor of a chain, as the driver wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    /// Guest physical address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// The device writes it (`VIRTQ_DESC_F_WRITE`).
    pub writable: bool,
}

/// Where in a chain a run of bytes lies: `len` bytes from byte `skip` of
/// descriptor `first`, through the descriptors that follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Index of the descriptor the run starts in.
    pub first: usize,
    /// Bytes of that descriptor before the run.
    pub skip: u32,
    /// Bytes in the run.
    pub len: u32,
}

impl Span {
    /// The run's pieces as (guest address, length), in order.
    pub fn pieces<'a>(&self, descs: &'a [Desc]) -> impl Iterator<Item = (u64, u32)> + 'a {
        let mut skip = self.skip;
        let mut left = self.len;
        descs[self.first..]
            .iter()
            .map_while(move |d| {
                if left == 0 {
                    return None;
                }
                let avail = d.len - skip;
                let take = avail.min(left);
                let at = d.addr + u64::from(skip);
                skip = 0;
                left -= take;
                Some((at, take))
            })
            .filter(|&(_, n)| n > 0)
    }
}

/// Guest memory as the parser reads it.
pub trait ReadGuest {
    /// Fill `buf` from guest address `addr`; false if any byte of it lies
    /// outside guest memory.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

/// Read `buf.len()` bytes of a span, descriptor by descriptor.
pub(super) fn read_span(mem: &impl ReadGuest, descs: &[Desc], span: Span, buf: &mut [u8]) -> bool {
    // Nearly always the whole run is in its first descriptor: one read.
    if let Some(d) = descs.get(span.first) {
        if span.len > 0
            && span.len as usize == buf.len()
            && u64::from(span.skip) + u64::from(span.len) <= u64::from(d.len)
        {
            return mem.read(d.addr.wrapping_add(u64::from(span.skip)), buf);
        }
    }
    let mut at = 0usize;
    for (addr, n) in span.pieces(descs) {
        let n = n as usize;
        if !mem.read(addr, &mut buf[at..at + n]) {
            return false;
        }
        at += n;
    }
    at == buf.len()
}
