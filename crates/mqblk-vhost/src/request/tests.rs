//! The parser against hand-made chains, and against any chain (proptest).

use super::*;
use crate::virtio_blk::{
    req_type, BlkStatus, Header, Range, Shape, SECTOR_SHIFT, WRITE_ZEROES_FLAG_UNMAP,
};

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
fn a_header_split_over_descriptors_is_read_whole() {
    // The header's 16 bytes in two descriptors of 8 (the slow path of
    // reading a span), and in one descriptor at an offset-free start
    // (the one-read path): the same request.
    let m = mem_with(req_type::IN, 8);
    let split = [
        d(HDR, 8, false),
        d(HDR + 8, 8, false),
        d(DATA, 4096, true),
        d(ST, 1, true),
    ];
    let whole = [d(HDR, 16, false), d(DATA, 4096, true), d(ST, 1, true)];
    let (Parsed::Submit(a), Parsed::Submit(b)) = (run(&m, &split), run(&m, &whole)) else {
        panic!("both should submit")
    };
    assert_eq!(a.status_at, b.status_at);
    let (Op::Read { offset: oa, .. }, Op::Read { offset: ob, .. }) = (a.op, b.op) else {
        panic!("both should read")
    };
    assert_eq!(oa, 4096);
    assert_eq!(ob, 4096);
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

    /// Chains of the common shape (header, data, status), each field
    /// now and then off: the one-pass parse must agree with the general
    /// one on every such chain.
    fn common_chain() -> impl Strategy<Value = Vec<Desc>> {
        let hdr = prop_oneof![
            4 => Just(Desc { addr: HDR, len: 16, writable: false }),
            1 => desc(),
        ];
        let data_len = prop_oneof![Just(4096u32), Just(512), 0u32..0x2000, Just(u32::MAX)];
        let data = (
            data_len,
            any::<bool>(),
            prop_oneof![
                Just(DATA),
                (BASE..BASE + 0x10000),
                (u64::MAX - 0x1000..=u64::MAX)
            ],
        )
            .prop_map(|(len, writable, addr)| Desc {
                addr,
                len,
                writable,
            });
        let st = prop_oneof![
            4 => Just(Desc { addr: ST, len: 1, writable: true }),
            1 => desc(),
        ];
        (hdr, data, st).prop_map(|(h, d, s)| vec![h, d, s])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 16 } else { 2000 }))]
        /// The one-pass parse of common chains answers as the general
        /// parse does.
        #[test]
        fn common_chains_parse_as_any_chain_does(
            descs in common_chain(),
            req_type in prop_oneof![Just(0u32), Just(1), Just(4), any::<u32>()],
            sector in prop_oneof![0u64..4096, Just(2047), any::<u64>()],
            read_only in any::<bool>(),
        ) {
            let m = mem_with(req_type, sector);
            let mut shape = shape();
            shape.read_only = read_only;
            prop_assert_eq!(
                parse(&shape, &descs, 0, None, &m),
                super::super::parse::parse_any(&shape, &descs, 0, None, &m)
            );
        }
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
