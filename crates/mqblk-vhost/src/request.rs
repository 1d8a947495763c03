//! A descriptor chain read as a virtio-blk request, and every check a
//! request gets before it becomes a bio (virtio 1.2, 5.2.6): the header and
//! the status byte where the spec puts them, data of the right direction,
//! ranges inside the device. Protocol only: the caller lends a reader of
//! guest memory, and gets back what to submit, what to answer at once, or
//! that the chain cannot be answered at all (the ring is broken).

use crate::virtio_blk::{
    req_type, BlkStatus, Header, Range, Shape, HEADER_LEN, ID_LEN, RANGE_LEN, SECTOR_SHIFT,
    WRITE_ZEROES_FLAG_UNMAP,
};

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

/// Guest memory as the parser reads it.
pub trait ReadGuest {
    /// Fill `buf` from guest address `addr`; false if any byte of it lies
    /// outside guest memory.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

/// Read `buf.len()` bytes of a span, descriptor by descriptor.
fn read_span(mem: &impl ReadGuest, descs: &[Desc], span: Span, buf: &mut [u8]) -> bool {
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

/// Parse a chain. `descs` holds the chain's descriptors in order, or its
/// first `descs.len()` when `more` more followed (then `last` is the chain's
/// final descriptor); `serial_len` is the length of the GET_ID answer.
pub fn parse(
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
    let seg_count = |span: Span| span.pieces(descs).count() as u32;
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
            if seg_count(data) > shape.seg_max {
                return answer(BlkStatus::IoErr, "more data segments than seg_max");
            }
            if data.pieces(descs).any(|(_, n)| n > shape.size_max) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::virtio_blk::Range;

    /// Guest memory for the tests: 64 KiB at 0x10000, a hole below.
    struct Mem(Vec<u8>);
    const BASE: u64 = 0x10000;
    impl ReadGuest for Mem {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            let Some(o) = addr.checked_sub(BASE) else {
                return false;
            };
            let o = o as usize;
            match o.checked_add(buf.len()) {
                Some(end) if end <= self.0.len() => {
                    buf.copy_from_slice(&self.0[o..end]);
                    true
                }
                _ => false,
            }
        }
    }
    impl Mem {
        fn put(&mut self, addr: u64, b: &[u8]) {
            let o = (addr - BASE) as usize;
            self.0[o..o + b.len()].copy_from_slice(b);
        }
    }

    fn shape() -> Shape {
        Shape {
            capacity_sectors: 1 << 11,
            blk_size: 512,
            physical_block_exp: 0,
            min_io_size: 1,
            opt_io_size: 0,
            size_max: 1 << 20,
            seg_max: 4,
            num_queues: 1,
            max_discard_sectors: 1 << 11,
            max_discard_seg: 1,
            discard_sector_alignment: 1,
            max_write_zeroes_sectors: 1 << 11,
            max_write_zeroes_seg: 1,
            write_cache: true,
            read_only: false,
        }
    }

    const HDR: u64 = BASE;
    const DATA: u64 = BASE + 0x1000;
    const ST: u64 = BASE + 0x8000;

    fn mem_with(req_type: u32, sector: u64) -> Mem {
        let mut m = Mem(vec![0; 0x10000]);
        m.put(HDR, &Header { req_type, sector }.encode());
        m
    }
    fn d(addr: u64, len: u32, writable: bool) -> Desc {
        Desc {
            addr,
            len,
            writable,
        }
    }
    fn run(m: &Mem, descs: &[Desc]) -> Parsed {
        parse(&shape(), descs, 0, None, m)
    }
    fn status_of(p: Parsed) -> BlkStatus {
        match p {
            Parsed::Answer { status, .. } => status,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn a_read_becomes_a_read_of_its_writable_data() {
        let m = mem_with(req_type::IN, 8);
        let p = run(
            &m,
            &[d(HDR, 16, false), d(DATA, 4096, true), d(ST, 1, true)],
        );
        let Parsed::Submit(r) = p else {
            panic!("{p:?}")
        };
        assert_eq!(r.status_at, ST);
        assert_eq!(r.used_len, 4097);
        let Op::Read { offset, data } = r.op else {
            panic!()
        };
        assert_eq!(offset, 4096);
        let descs = [d(HDR, 16, false), d(DATA, 4096, true), d(ST, 1, true)];
        assert_eq!(data.pieces(&descs).collect::<Vec<_>>(), vec![(DATA, 4096)]);
    }

    #[test]
    fn header_data_and_status_may_share_descriptors() {
        // A write whose header and data are one descriptor; a read whose
        // data and status are one.
        let mut m = mem_with(req_type::OUT, 0);
        m.put(
            HDR,
            &Header {
                req_type: req_type::OUT,
                sector: 0,
            }
            .encode(),
        );
        let descs = [d(HDR, 16 + 512, false), d(ST, 1, true)];
        let Parsed::Submit(r) = run(&m, &descs) else {
            panic!()
        };
        let Op::Write { data, .. } = r.op else {
            panic!()
        };
        assert_eq!(
            data.pieces(&descs).collect::<Vec<_>>(),
            vec![(HDR + 16, 512)]
        );
        let m = mem_with(req_type::IN, 0);
        let descs = [d(HDR, 16, false), d(DATA, 513, true)];
        let Parsed::Submit(r) = run(&m, &descs) else {
            panic!()
        };
        assert_eq!(r.status_at, DATA + 512);
        let Op::Read { data, .. } = r.op else {
            panic!()
        };
        assert_eq!(data.pieces(&descs).collect::<Vec<_>>(), vec![(DATA, 512)]);
    }

    #[test]
    fn chains_without_a_status_byte_break_the_ring() {
        let m = mem_with(req_type::IN, 0);
        assert!(matches!(run(&m, &[]), Parsed::Broken(_)));
        assert!(matches!(run(&m, &[d(HDR, 16, false)]), Parsed::Broken(_)));
        assert!(matches!(
            run(&m, &[d(HDR, 16, false), d(0x100, 1, true)]),
            Parsed::Broken(_)
        ));
        assert!(matches!(
            run(&m, &[d(HDR, 16, false), d(u64::MAX - 1, 4, true)]),
            Parsed::Broken(_)
        ));
    }

    #[test]
    fn bad_requests_get_their_status() {
        use BlkStatus::*;
        let m = mem_with(req_type::IN, 0);
        // A short header.
        assert_eq!(
            status_of(run(&m, &[d(HDR, 8, false), d(ST, 1, true)])),
            IoErr
        );
        // A header outside memory.
        assert_eq!(
            status_of(run(&m, &[d(0x100, 16, false), d(ST, 1, true)])),
            IoErr
        );
        // A read into a readable buffer.
        assert_eq!(
            status_of(run(
                &m,
                &[d(HDR, 16, false), d(DATA, 512, false), d(ST, 1, true)]
            )),
            IoErr
        );
        // A readable descriptor after a writable one.
        assert_eq!(
            status_of(run(
                &m,
                &[
                    d(HDR, 16, false),
                    d(DATA, 512, true),
                    d(DATA, 512, false),
                    d(ST, 1, true)
                ]
            )),
            IoErr
        );
        // An overflowing length.
        assert_eq!(
            status_of(run(
                &m,
                &[
                    d(HDR, 16, false),
                    d(u64::MAX - 8, 512, true),
                    d(ST, 1, true)
                ]
            )),
            IoErr
        );
        // Past the end, and a sector that overflows.
        let m = mem_with(req_type::IN, 2048);
        assert_eq!(
            status_of(run(
                &m,
                &[d(HDR, 16, false), d(DATA, 512, true), d(ST, 1, true)]
            )),
            IoErr
        );
        let m = mem_with(req_type::IN, u64::MAX / 2);
        assert_eq!(
            status_of(run(
                &m,
                &[d(HDR, 16, false), d(DATA, 512, true), d(ST, 1, true)]
            )),
            IoErr
        );
        // Not whole sectors.
        let m = mem_with(req_type::IN, 0);
        assert_eq!(
            status_of(run(
                &m,
                &[d(HDR, 16, false), d(DATA, 100, true), d(ST, 1, true)]
            )),
            IoErr
        );
        // More segments than seg_max (4).
        let descs: Vec<Desc> = std::iter::once(d(HDR, 16, false))
            .chain((0..5).map(|i| d(DATA + i * 512, 512, true)))
            .chain(std::iter::once(d(ST, 1, true)))
            .collect();
        assert_eq!(status_of(run(&m, &descs)), IoErr);
        // A segment longer than size_max (1 MiB), inside the device.
        let descs = [
            d(HDR, 16, false),
            d(DATA, (1 << 20) + 4096, true),
            d(ST, 1, true),
        ];
        match run(&m, &descs) {
            Parsed::Answer { status, why, .. } => {
                assert_eq!(status, IoErr);
                assert_eq!(why, "a data segment longer than size_max");
            }
            other => panic!("expected an answer, got {other:?}"),
        }
        // More descriptors than were kept.
        assert_eq!(
            status_of(parse(
                &shape(),
                &[d(HDR, 16, false)],
                300,
                Some(d(ST, 1, true)),
                &m
            )),
            IoErr
        );
        // An unknown type.
        let m = mem_with(99, 0);
        assert_eq!(
            status_of(run(&m, &[d(HDR, 16, false), d(ST, 1, true)])),
            Unsupp
        );
    }

    #[test]
    fn ranges_are_checked() {
        use BlkStatus::*;
        let with_range = |t, r: Range| {
            let mut m = mem_with(t, 0);
            m.put(DATA, &r.encode());
            m
        };
        let descs = [d(HDR, 16, false), d(DATA, 16, false), d(ST, 1, true)];
        let ok = with_range(
            req_type::DISCARD,
            Range {
                sector: 8,
                sectors: 8,
                flags: 0,
            },
        );
        assert_eq!(
            run(&ok, &descs),
            Parsed::Submit(Request {
                op: Op::Discard {
                    offset: 4096,
                    len: 4096
                },
                status_at: ST,
                used_len: 1
            })
        );
        let past = with_range(
            req_type::DISCARD,
            Range {
                sector: 2040,
                sectors: 16,
                flags: 0,
            },
        );
        assert_eq!(status_of(run(&past, &descs)), IoErr);
        let unmap_discard = with_range(
            req_type::DISCARD,
            Range {
                sector: 0,
                sectors: 1,
                flags: WRITE_ZEROES_FLAG_UNMAP,
            },
        );
        assert_eq!(status_of(run(&unmap_discard, &descs)), Unsupp);
        let zero = with_range(
            req_type::WRITE_ZEROES,
            Range {
                sector: 0,
                sectors: 1,
                flags: WRITE_ZEROES_FLAG_UNMAP,
            },
        );
        assert!(matches!(
            run(&zero, &descs),
            Parsed::Submit(Request {
                op: Op::WriteZeroes { unmap: true, .. },
                ..
            })
        ));
        // Two ranges where one is allowed; half a range.
        let two = [d(HDR, 16, false), d(DATA, 32, false), d(ST, 1, true)];
        assert_eq!(status_of(run(&ok, &two)), IoErr);
        let half = [d(HDR, 16, false), d(DATA, 8, false), d(ST, 1, true)];
        assert_eq!(status_of(run(&ok, &half)), IoErr);
        // A read-only device refuses them, and writes.
        let mut ro = shape();
        ro.read_only = true;
        assert_eq!(status_of(parse(&ro, &descs, 0, None, &ok)), IoErr);
        let w = mem_with(req_type::OUT, 0);
        assert_eq!(
            status_of(parse(
                &ro,
                &[d(HDR, 16, false), d(DATA, 512, false), d(ST, 1, true)],
                0,
                None,
                &w
            )),
            IoErr
        );
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        fn desc() -> impl Strategy<Value = Desc> {
            // Addresses in and around the test memory (and at the top of
            // the address space), lengths small and huge.
            let addr = prop_oneof![
                (BASE..BASE + 0x10000),
                (0u64..0x20000),
                (u64::MAX - 0x1000..=u64::MAX),
            ];
            let len = prop_oneof![0u32..64, 0u32..0x2000, Just(u32::MAX)];
            (addr, len, any::<bool>()).prop_map(|(addr, len, writable)| Desc {
                addr,
                len,
                writable,
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 16 } else { 2000 }))]
            /// Whatever the chain, parsing answers without panicking, and
            /// what it submits stays inside the chain and the device.
            #[test]
            fn any_chain_is_answered_and_submissions_stay_inside(
                descs in proptest::collection::vec(desc(), 0..8),
                req_type in prop_oneof![Just(0u32), Just(1), Just(4), Just(8), Just(11), Just(13), any::<u32>()],
                sector in prop_oneof![0u64..4096, any::<u64>()],
                range in (any::<u64>(), any::<u32>(), 0u32..4),
            ) {
                let mut m = mem_with(req_type, sector);
                m.put(DATA, &Range { sector: range.0 % 4096, sectors: range.1 % 64, flags: range.2 }.encode());
                let shape = shape();
                match parse(&shape, &descs, 0, None, &m) {
                    Parsed::Submit(r) => {
                        let cap = shape.capacity_sectors << SECTOR_SHIFT;
                        match r.op {
                            Op::Read { offset, data } | Op::Write { offset, data } => {
                                prop_assert!(offset + u64::from(data.len) <= cap);
                                let total: u64 = data.pieces(&descs).map(|(_, n)| u64::from(n)).sum();
                                prop_assert_eq!(total, u64::from(data.len));
                                for (a, n) in data.pieces(&descs) {
                                    prop_assert!(descs.iter().any(|d| a >= d.addr
                                        && a + u64::from(n) <= d.addr + u64::from(d.len)));
                                }
                            }
                            Op::Discard { offset, len } | Op::WriteZeroes { offset, len, .. } => {
                                prop_assert!(offset + len <= cap);
                            }
                            Op::Flush | Op::GetId { .. } => {}
                        }
                        let last = descs.last().unwrap();
                        prop_assert!(last.writable);
                        prop_assert_eq!(r.status_at, last.addr + (u64::from(last.len) - 1));
                    }
                    Parsed::Answer { status_at, .. } => {
                        let last = descs.last().unwrap();
                        prop_assert_eq!(status_at, last.addr + (u64::from(last.len) - 1));
                    }
                    Parsed::Broken(_) => {}
                }
            }
        }
    }
}
