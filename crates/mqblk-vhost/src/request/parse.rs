//! The request a chain makes, checked against the device's shape.

use super::chain::{read_span, Desc, ReadGuest, Span};
use crate::virtio_blk::{
    req_type, BlkStatus, Header, Range, Shape, HEADER_LEN, ID_LEN, RANGE_LEN, SECTOR_SHIFT,
    WRITE_ZEROES_FLAG_UNMAP,
};

/// What the device is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read `len` bytes at `offset` into `data` (writable descriptors).
    Read { offset: u64, data: Span },
    /// Write `data` (readable descriptors) at `offset`.
    Write { offset: u64, data: Span },
    /// Flush the write cache.
    Flush,
    /// Write the serial into `id` (at most 20 bytes).
    GetId { id: Span },
    /// Discard `len` bytes at `offset`.
    Discard { offset: u64, len: u64 },
    /// Zero `len` bytes at `offset` (`unmap`: deallocation allowed).
    WriteZeroes { offset: u64, len: u64, unmap: bool },
}

/// A request that passed every check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// What to do.
    pub op: Op,
    /// Guest address of the status byte.
    pub status_at: u64,
    /// Bytes the device writes into the chain, the status byte included
    /// (the used element's `len`).
    pub used_len: u32,
}

/// What to do with a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Carry it out.
    Submit(Request),
    /// Answer at once with `status` at `status_at` (`used_len`: 1).
    Answer {
        status: BlkStatus,
        status_at: u64,
        why: &'static str,
    },
    /// No status byte can be written: the ring is broken.
    Broken(&'static str),
}

/// Parse a chain. `descs` holds the chain's descriptors in order, or its
/// first `descs.len()` when `more` more followed (then `last` is the chain's
/// final descriptor).
pub fn parse(
    shape: &Shape,
    descs: &[Desc],
    more: usize,
    last: Option<Desc>,
    mem: &impl ReadGuest,
) -> Parsed {
    if more == 0 {
        if let Some(p) = parse_common(shape, descs, mem) {
            return p;
        }
    }
    parse_any(shape, descs, more, last, mem)
}

/// The chain nearly every driver sends for a read or a write (a 16-byte
/// header, one data descriptor, a 1-byte status), when it passes every
/// check: the same request [`parse_any`] makes of it, in one pass. `None`
/// for any other chain, and for one with something to answer:
/// `parse_any` then decides, and says why.
#[inline]
fn parse_common(shape: &Shape, descs: &[Desc], mem: &impl ReadGuest) -> Option<Parsed> {
    let [h, d, s] = descs else {
        return None;
    };
    if h.writable || h.len != HEADER_LEN as u32 || !s.writable || s.len != 1 {
        return None;
    }
    if d.len == 0 || d.len > shape.size_max || shape.seg_max == 0 {
        return None;
    }
    h.addr.checked_add(u64::from(h.len))?;
    d.addr.checked_add(u64::from(d.len))?;
    s.addr.checked_add(1)?;
    let mut probe = [0u8; 1];
    let mut hb = [0u8; HEADER_LEN];
    if !mem.read(s.addr, &mut probe) || !mem.read(h.addr, &mut hb) {
        return None;
    }
    let header = Header::parse(&hb);
    let write = match (header.req_type, d.writable) {
        (req_type::IN, true) => false,
        (req_type::OUT, false) => true,
        _ => return None,
    };
    if write && shape.read_only {
        return None;
    }
    let len = u64::from(d.len);
    let bs_mask = u64::from(shape.blk_size) - 1;
    let offset = header.sector.checked_mul(1 << SECTOR_SHIFT)?;
    if offset & bs_mask != 0 || len & bs_mask != 0 {
        return None;
    }
    if offset.checked_add(len)? > shape.capacity_sectors << SECTOR_SHIFT {
        return None;
    }
    let data = Span {
        first: 1,
        skip: 0,
        len: d.len,
    };
    Some(Parsed::Submit(if write {
        Request {
            op: Op::Write { offset, data },
            status_at: s.addr,
            used_len: 1,
        }
    } else {
        Request {
            op: Op::Read { offset, data },
            status_at: s.addr,
            used_len: d.len + 1,
        }
    }))
}

/// [`parse`] for any chain, one check after another.
pub(super) fn parse_any(
    shape: &Shape,
    descs: &[Desc],
    more: usize,
    last: Option<Desc>,
    mem: &impl ReadGuest,
) -> Parsed {
    // The status byte: the last byte of the last descriptor, which must be
    // writable. Without one, nothing can be answered.
    let Some(tail) = (if more > 0 {
        last
    } else {
        descs.last().copied()
    }) else {
        return Parsed::Broken("an empty descriptor chain");
    };
    if !tail.writable || tail.len == 0 {
        return Parsed::Broken("the chain's last descriptor is no writable status byte");
    }
    let Some(status_at) = tail.addr.checked_add(u64::from(tail.len) - 1) else {
        return Parsed::Broken("the status byte's address overflows");
    };
    let mut probe = [0u8; 1];
    if !mem.read(status_at, &mut probe) {
        return Parsed::Broken("the status byte lies outside guest memory");
    }
    let answer = |status, why| Parsed::Answer {
        status,
        status_at,
        why,
    };
    if more > 0 {
        return answer(BlkStatus::IoErr, "more descriptors than seg_max allows");
    }
    // Readable descriptors first, then writable ones (2.7.4.2).
    let n_out = descs.iter().take_while(|d| !d.writable).count();
    if descs[n_out..].iter().any(|d| !d.writable) {
        return answer(
            BlkStatus::IoErr,
            "a readable descriptor after a writable one",
        );
    }
    for d in descs {
        if d.addr.checked_add(u64::from(d.len)).is_none() {
            return answer(
                BlkStatus::IoErr,
                "a descriptor's address plus length overflows",
            );
        }
    }
    let out_bytes: u64 = descs[..n_out].iter().map(|d| u64::from(d.len)).sum();
    let in_bytes: u64 = descs[n_out..].iter().map(|d| u64::from(d.len)).sum();
    if out_bytes < HEADER_LEN as u64 {
        return answer(BlkStatus::IoErr, "no 16-byte request header");
    }
    let mut hb = [0u8; HEADER_LEN];
    let head_span = Span {
        first: 0,
        skip: 0,
        len: HEADER_LEN as u32,
    };
    if !read_span(mem, descs, head_span, &mut hb) {
        return answer(BlkStatus::IoErr, "the header lies outside guest memory");
    }
    let h = Header::parse(&hb);
    // The run of bytes after the header in the readable part.
    let after_header = || {
        let mut skip = HEADER_LEN as u32;
        let mut first = 0;
        while first < n_out && descs[first].len <= skip {
            skip -= descs[first].len;
            first += 1;
        }
        Span {
            first,
            skip,
            len: (out_bytes - HEADER_LEN as u64) as u32,
        }
    };
    let in_span = |len: u32| Span {
        first: n_out,
        skip: 0,
        len,
    };
    let only_status = in_bytes == 1;
    let bare_header = out_bytes == HEADER_LEN as u64;
    let bs_mask = u64::from(shape.blk_size) - 1;
    let capacity = shape.capacity_sectors << SECTOR_SHIFT;
    // A byte range of the device, checked.
    let range = |sector: u64, len: u64| -> Result<u64, &'static str> {
        let offset = sector
            .checked_mul(1 << SECTOR_SHIFT)
            .ok_or("the sector overflows")?;
        if offset & bs_mask != 0 || len & bs_mask != 0 {
            return Err("not aligned to the block size");
        }
        match offset.checked_add(len) {
            Some(end) if end <= capacity => Ok(offset),
            _ => Err("past the end of the device"),
        }
    };
    let op = match h.req_type {
        req_type::IN | req_type::OUT => {
            let write = h.req_type == req_type::OUT;
            let data = if write {
                if !only_status {
                    return answer(BlkStatus::IoErr, "a write with writable data descriptors");
                }
                after_header()
            } else {
                if !bare_header {
                    return answer(BlkStatus::IoErr, "a read with readable data descriptors");
                }
                in_span((in_bytes - 1) as u32)
            };
            if data.len == 0 {
                return answer(BlkStatus::IoErr, "a read or write of no data");
            }
            // One walk of the segments for both limits.
            let (segments, longest) = data
                .pieces(descs)
                .fold((0u32, 0u32), |(k, m), (_, n)| (k + 1, m.max(n)));
            if segments > shape.seg_max {
                return answer(BlkStatus::IoErr, "more data segments than seg_max");
            }
            if longest > shape.size_max {
                return answer(BlkStatus::IoErr, "a data segment longer than size_max");
            }
            if write && shape.read_only {
                return answer(BlkStatus::IoErr, "a write to a read-only device");
            }
            let offset = match range(h.sector, u64::from(data.len)) {
                Ok(o) => o,
                Err(why) => return answer(BlkStatus::IoErr, why),
            };
            if write {
                Op::Write { offset, data }
            } else {
                Op::Read { offset, data }
            }
        }
        req_type::FLUSH => {
            if !only_status {
                return answer(BlkStatus::IoErr, "a flush with data descriptors");
            }
            Op::Flush
        }
        req_type::GET_ID => {
            if !bare_header {
                return answer(BlkStatus::IoErr, "GET_ID with readable data descriptors");
            }
            let len = ((in_bytes - 1) as u32).min(ID_LEN as u32);
            Op::GetId { id: in_span(len) }
        }
        req_type::DISCARD | req_type::WRITE_ZEROES => {
            let zeroes = h.req_type == req_type::WRITE_ZEROES;
            let (max_seg, max_sectors) = if zeroes {
                (shape.max_write_zeroes_seg, shape.max_write_zeroes_sectors)
            } else {
                (shape.max_discard_seg, shape.max_discard_sectors)
            };
            if max_sectors == 0 {
                return answer(BlkStatus::Unsupp, "discard is not offered by this device");
            }
            if !only_status {
                return answer(BlkStatus::IoErr, "a range request with writable data");
            }
            let body = out_bytes - HEADER_LEN as u64;
            if body == 0 || !body.is_multiple_of(RANGE_LEN as u64) {
                return answer(BlkStatus::IoErr, "range data not a whole number of ranges");
            }
            if body / RANGE_LEN as u64 > u64::from(max_seg) {
                return answer(BlkStatus::IoErr, "more ranges than max_*_seg");
            }
            let mut rb = [0u8; RANGE_LEN];
            let first = Span {
                len: RANGE_LEN as u32,
                ..after_header()
            };
            if !read_span(mem, descs, first, &mut rb) {
                return answer(BlkStatus::IoErr, "the range lies outside guest memory");
            }
            let r = Range::parse(&rb);
            let unmap = r.flags & WRITE_ZEROES_FLAG_UNMAP != 0;
            if r.flags & !WRITE_ZEROES_FLAG_UNMAP != 0 || (unmap && !zeroes) {
                return answer(BlkStatus::Unsupp, "unknown range flags");
            }
            if r.sectors == 0 || r.sectors > max_sectors {
                return answer(BlkStatus::IoErr, "a range of 0 sectors or over the maximum");
            }
            if shape.read_only {
                return answer(
                    BlkStatus::IoErr,
                    "a discard or write-zeroes to a read-only device",
                );
            }
            let len = u64::from(r.sectors) << SECTOR_SHIFT;
            let offset = match range(r.sector, len) {
                Ok(o) => o,
                Err(why) => return answer(BlkStatus::IoErr, why),
            };
            if zeroes {
                Op::WriteZeroes { offset, len, unmap }
            } else {
                Op::Discard { offset, len }
            }
        }
        _ => return answer(BlkStatus::Unsupp, "an unknown request type"),
    };
    let used_len = match op {
        Op::Read { data, .. } => data.len + 1,
        Op::GetId { id } => id.len + 1,
        _ => 1,
    };
    Parsed::Submit(Request {
        op,
        status_at,
        used_len,
    })
}
