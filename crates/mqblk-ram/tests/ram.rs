//! End-to-end tests of the ram driver through a device and a context: data
//! round trips with vectored bios, holes, discard and write-zeroes freeing
//! memory, extents, a 1 TiB device, option errors, two hardware queues at
//! once, and a property test against a plain byte-vector model.

use std::io::{IoSlice, IoSliceMut};
use std::sync::Arc;

use mqblk_core::buf::IoBuf;
use mqblk_core::context::Context;
use mqblk_core::driver::Extent;
use mqblk_core::error::Error;
use mqblk_core::queue::Device;
use mqblk_core::spec;
use mqblk_ram::Store;
use proptest::prelude::*;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;
const PAGE: u64 = 4096;

fn open(s: &str) -> (Device, Arc<Store>) {
    let spec = spec::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    assert_eq!(spec.kind, "ram");
    mqblk_ram::open_with_store(spec.options).unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn ctx(dev: &Device) -> Context {
    dev.context().expect("context")
}

/// The byte a writer with `seed` puts at device offset `pos`: never zero,
/// and different for neighbouring offsets and seeds.
/// The 8 bytes a writer with `seed` puts at word `w` (bytes `8w..8w+8`),
/// none of them zero (a hole reads as zeros).
fn word_at(w: u64, seed: u64) -> [u8; 8] {
    let x = w
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(seed.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .rotate_left(17)
        .wrapping_add(w);
    (x | 0x0101_0101_0101_0101).to_le_bytes()
}

/// What a writer with `seed` puts at `offset`, into `out`: a word at a
/// time (a byte loop costs Miri about a thousand times more).
fn fill(out: &mut [u8], offset: u64, seed: u64) {
    let mut pos = offset;
    let mut rest = out;
    while !rest.is_empty() {
        let word = word_at(pos / 8, seed);
        let from = (pos % 8) as usize;
        let n = (8 - from).min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&word[from..from + n]);
        rest = tail;
        pos += n as u64;
    }
}

/// An aligned buffer holding what a writer with `seed` puts at `offset`.
fn pattern(offset: u64, len: usize, seed: u64) -> IoBuf {
    let mut b = IoBuf::page_aligned(len);
    fill(b.as_mut_slice(), offset, seed);
    b
}

fn expected(offset: u64, len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(&mut v, offset, seed);
    v
}

fn read(c: &mut Context, offset: u64, len: usize) -> Vec<u8> {
    let mut b = IoBuf::page_aligned(len);
    b.as_mut_slice().fill(0x55);
    c.read_at(b.as_mut_slice(), offset).expect("read");
    b.as_slice().to_vec()
}

fn write(c: &mut Context, offset: u64, len: usize, seed: u64) {
    let b = pattern(offset, len, seed);
    c.write_at(b.as_slice(), offset).expect("write");
}

fn hole(offset_bytes: u64, len_bytes: u64) -> Extent {
    Extent {
        offset_bytes,
        len_bytes,
        hole: true,
        zero: true,
    }
}

fn data(offset_bytes: u64, len_bytes: u64) -> Extent {
    Extent {
        offset_bytes,
        len_bytes,
        hole: false,
        zero: false,
    }
}

#[test]
fn names_count_up_and_options_are_taken() {
    let (a, _) = open("ram,size=1M");
    let (b, _) = open("ram,size=1M");
    let na: u32 = a.name().strip_prefix("ram").unwrap().parse().unwrap();
    let nb: u32 = b.name().strip_prefix("ram").unwrap().parse().unwrap();
    assert!(nb > na, "{} then {}", a.name(), b.name());

    let (d, _) = open(
        "ram,size=1G,block_size=4k,hw_queues=3,queue_depth=16,queue_mode=device-lock,\
         plug=off,iostats=0",
    );
    assert_eq!(d.capacity_bytes(), GIB);
    assert_eq!(d.logical_block_size(), 4096);
    assert_eq!(d.nr_hw_queues(), 3);
    assert_eq!(d.config().queue_depth, 16);
    assert!(!d.config().plug);
    assert!(!d.config().iostats);
    let f = d.info().features;
    assert!(f.discard && f.write_zeroes && !f.write_cache && !f.fua && !f.read_only);
    let l = d.info().limits;
    assert_eq!(l.logical_block_size, 4096);
    assert_eq!(l.dma_alignment, 4095);
    assert_eq!(l.max_discard_sectors, u32::MAX / 8 * 8);
    assert_eq!(l.max_write_zeroes_sectors, u32::MAX / 8 * 8);

    let (d, _) = open("ram,size=64k");
    assert_eq!(d.logical_block_size(), 512, "brd's default block size");
    assert_eq!(d.info().limits.max_discard_sectors, u32::MAX);
    // The facade's `mqblk::open("ram,...")` goes through the same `open`.
    assert!(mqblk_ram::open(spec::parse("ram,size=8k").unwrap().options).is_ok());
}

#[test]
fn bad_options_are_rejected_naming_the_key() {
    for (s, key) in [
        ("ram", "size"),
        ("ram,block_size=4k", "size"),
        ("ram,size=huge", "size"),
        ("ram,size=0", "size"),
        ("ram,size=1000", "size"),
        ("ram,size=6k,block_size=4k", "size"),
        ("ram,size=1M,block_size=3k", "block_size"),
        ("ram,size=1M,block_size=8k", "block_size"),
        ("ram,size=1M,sise=2M", "sise"),
        ("ram,size=1M,memory_backed=1", "memory_backed"),
        ("ram,size=1M,queue_depth=0", "queue_depth"),
        ("ram,size=1M,hw_queues=x", "hw_queues"),
        ("ram,size=1M,queue_mode=fast", "queue_mode"),
        ("ram,size=1M,ro=maybe", "ro"),
    ] {
        let opts = spec::parse(s).unwrap().options;
        match mqblk_ram::open(opts) {
            Err(e @ Error::Spec { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(key), "{s}: {msg}");
            }
            other => panic!("{s}: expected a spec error naming {key}, got {other:?}"),
        }
    }
}

#[test]
fn read_only_refuses_writes() {
    let (dev, store) = open("ram,size=1M,ro=1");
    let mut c = ctx(&dev);
    let b = pattern(0, 4096, 1);
    assert!(matches!(
        c.write_at(b.as_slice(), 0),
        Err(Error::ReadOnly { .. })
    ));
    assert!(matches!(c.discard(0, 4096), Err(Error::ReadOnly { .. })));
    assert_eq!(read(&mut c, 0, 4096), vec![0; 4096]);
    assert_eq!(store.resident_bytes(), 0);
}

#[test]
fn vectored_round_trips_split_differently() {
    for bs in [512u64, 4096] {
        let (dev, _) = open(&format!("ram,size=4M,block_size={bs}"));
        let mut c = ctx(&dev);
        // One bio of three segments, unequal, crossing pages and a 64 KiB
        // chunk boundary.
        let offset = 64 * KIB - 3 * bs;
        let sizes = [bs as usize, 5 * bs as usize, 12 * KIB as usize];
        let total: usize = sizes.iter().sum();
        let mut at = offset;
        let bufs: Vec<IoBuf> = sizes
            .iter()
            .map(|&n| {
                let b = pattern(at, n, 9);
                at += n as u64;
                b
            })
            .collect();
        let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b.as_slice())).collect();
        c.writev_at(&slices, offset).expect("writev");

        // Read it back as four segments cut elsewhere.
        let cuts = [2 * bs as usize, bs as usize, 4 * KIB as usize];
        let last = total - cuts.iter().sum::<usize>();
        let mut out: Vec<IoBuf> = cuts
            .iter()
            .chain([&last])
            .map(|&n| IoBuf::page_aligned(n))
            .collect();
        for b in &mut out {
            b.as_mut_slice().fill(0xEE);
        }
        let mut slices: Vec<IoSliceMut<'_>> = out
            .iter_mut()
            .map(|b| IoSliceMut::new(b.as_mut_slice()))
            .collect();
        c.readv_at(&mut slices, offset).expect("readv");
        let got: Vec<u8> = out
            .iter()
            .map(|b| b.as_slice())
            .collect::<Vec<_>>()
            .concat();
        assert_eq!(got, expected(offset, total, 9), "block size {bs}");
        // Single-buffer read of the same range, and the edges around it.
        assert_eq!(read(&mut c, offset, total), expected(offset, total, 9));
        assert_eq!(read(&mut c, offset - bs, bs as usize), vec![0; bs as usize]);
        let end = offset + total as u64;
        assert_eq!(read(&mut c, end, bs as usize), vec![0; bs as usize]);
        c.flush().expect("flush");
    }
}

#[test]
fn unwritten_reads_are_zeros_and_take_no_memory() {
    let (dev, store) = open("ram,size=1G");
    let mut c = ctx(&dev);
    assert_eq!(read(&mut c, 0, 128 * 1024), vec![0; 128 * 1024]);
    assert_eq!(read(&mut c, GIB - 512, 512), vec![0; 512]);
    assert_eq!(store.resident_bytes(), 0);
    assert_eq!(dev.extents(0, GIB).unwrap(), vec![hole(0, GIB)]);
}

#[test]
fn discard_and_write_zeroes_zero_the_data_and_free_the_memory() {
    let (dev, store) = open("ram,size=64M");
    let mut c = ctx(&dev);
    // The data written: 1 MiB, or 64 KiB under Miri, which spends minutes
    // on each MiB of patterns.
    let unit = if cfg!(miri) { 64 * KIB } else { MIB };
    let (quarter, half) = (unit / 4, unit / 2);
    write(&mut c, 8 * MIB, unit as usize, 3);
    assert_eq!(store.resident_bytes(), unit, "what is written is taken");
    // Overwriting takes nothing more.
    write(&mut c, 8 * MIB, unit as usize, 4);
    assert_eq!(store.resident_bytes(), unit);

    c.discard(8 * MIB, unit).expect("discard");
    assert_eq!(store.resident_bytes(), 0);
    assert_eq!(read(&mut c, 8 * MIB, unit as usize), vec![0; unit as usize]);

    write(&mut c, 0, unit as usize, 5);
    c.write_zeroes(quarter, half).expect("write-zeroes");
    assert_eq!(store.resident_bytes(), unit - half);
    assert_eq!(read(&mut c, quarter, half as usize), vec![0; half as usize]);
    assert_eq!(
        read(&mut c, 0, quarter as usize),
        expected(0, quarter as usize, 5)
    );
    let tail = quarter + half;
    assert_eq!(
        read(&mut c, tail, quarter as usize),
        expected(tail, quarter as usize, 5)
    );

    // Sector-granular ranges: partial pages are zeroed in place and kept.
    c.discard(512, 1024).expect("discard");
    c.write_zeroes(PAGE + 3 * 512, 2 * 512)
        .expect("write-zeroes");
    let mut want = expected(0, 2 * PAGE as usize, 5);
    want[512..1536].fill(0);
    want[(PAGE as usize + 1536)..(PAGE as usize + 2560)].fill(0);
    assert_eq!(read(&mut c, 0, 2 * PAGE as usize), want);
    assert_eq!(store.resident_bytes(), unit - half);

    // A discard of the whole device frees everything.
    c.discard(0, 64 * MIB).expect("discard all");
    assert_eq!(store.resident_bytes(), 0);
}

#[test]
fn extents_report_holes_and_data() {
    let (dev, store) = open("ram,size=1M");
    let mut c = ctx(&dev);
    write(&mut c, 8 * KIB, 8 * KIB as usize, 1); // pages 2, 3
    write(&mut c, 16 * KIB, 512, 1); // page 4 (adjacent: merges)
    write(&mut c, 64 * KIB + 1024, 1024, 1); // page 16, across a chunk start
    write(&mut c, MIB - PAGE, PAGE as usize, 1); // the last page
    assert_eq!(store.resident_bytes(), 5 * PAGE);
    assert_eq!(
        dev.extents(0, MIB).unwrap(),
        vec![
            hole(0, 8 * KIB),
            data(8 * KIB, 12 * KIB),
            hole(20 * KIB, 44 * KIB),
            data(64 * KIB, 4 * KIB),
            hole(68 * KIB, MIB - PAGE - 68 * KIB),
            data(MIB - PAGE, PAGE),
        ]
    );
    // A window that starts and ends inside extents is clipped to itself.
    assert_eq!(
        dev.extents(10 * KIB, 56 * KIB).unwrap(),
        vec![
            data(10 * KIB, 10 * KIB),
            hole(20 * KIB, 44 * KIB),
            data(64 * KIB, 2 * KIB)
        ]
    );
    // Past the end is clipped to the device.
    assert_eq!(
        dev.extents(MIB - 512, 10 * MIB).unwrap(),
        vec![data(MIB - 512, 512)]
    );

    // Discarding page 3 splits the data; a partial discard of page 16
    // keeps it as data (it still holds bytes).
    c.discard(12 * KIB, PAGE).expect("discard");
    c.discard(64 * KIB, 1024).expect("discard");
    assert_eq!(
        dev.extents(0, 128 * KIB).unwrap(),
        vec![
            hole(0, 8 * KIB),
            data(8 * KIB, PAGE),
            hole(12 * KIB, PAGE),
            data(16 * KIB, PAGE),
            hole(20 * KIB, 44 * KIB),
            data(64 * KIB, PAGE),
            hole(68 * KIB, 60 * KIB),
        ]
    );
    // Zeroing the rest of page 16 frees it, and the holes merge.
    c.write_zeroes(64 * KIB + 1024, 1024).expect("write-zeroes");
    assert_eq!(
        dev.extents(16 * KIB, 112 * KIB).unwrap(),
        vec![data(16 * KIB, PAGE), hole(20 * KIB, 108 * KIB)]
    );
    c.discard(0, MIB).expect("discard all");
    assert_eq!(dev.extents(0, MIB).unwrap(), vec![hole(0, MIB)]);
}

#[test]
fn a_one_tib_device_writes_at_the_end_and_discards_everything() {
    let (dev, store) = open("ram,size=1T,block_size=4k");
    assert_eq!(dev.capacity_bytes(), TIB);
    let mut c = ctx(&dev);
    write(&mut c, TIB - 64 * KIB, 64 * KIB as usize, 7);
    write(&mut c, TIB / 2, PAGE as usize, 8);
    assert_eq!(store.resident_bytes(), 64 * KIB + PAGE);
    assert_eq!(
        read(&mut c, TIB - 64 * KIB, 64 * KIB as usize),
        expected(TIB - 64 * KIB, 64 * KIB as usize, 7)
    );
    assert_eq!(
        dev.extents(0, TIB).unwrap(),
        vec![
            hole(0, TIB / 2),
            data(TIB / 2, PAGE),
            hole(TIB / 2 + PAGE, TIB / 2 - PAGE - 64 * KIB),
            data(TIB - 64 * KIB, 64 * KIB),
        ]
    );
    // Past the end is refused, not wrapped.
    let b = pattern(0, PAGE as usize, 1);
    assert!(matches!(
        c.write_at(b.as_slice(), TIB),
        Err(Error::OutOfRange { .. })
    ));

    c.discard(0, TIB).expect("discard the whole device");
    assert_eq!(store.resident_bytes(), 0);
    assert_eq!(
        read(&mut c, TIB - PAGE, PAGE as usize),
        vec![0; PAGE as usize]
    );
    assert_eq!(dev.extents(0, TIB).unwrap(), vec![hole(0, TIB)]);
    c.write_zeroes(0, TIB)
        .expect("write-zeroes the whole device");
}

#[test]
fn two_hw_queues_write_disjoint_ranges_at_once() {
    // Under Miri, a thousand times slower, a few small slices.
    const SLICE: u64 = if cfg!(miri) { 4 * KIB } else { 16 * KIB };
    const ROUNDS: u64 = if cfg!(miri) { 8 } else { 256 };
    let (dev, store) = open("ram,size=64M,hw_queues=2");
    let contexts = [ctx(&dev), ctx(&dev)];
    assert_ne!(contexts[0].hw_queue(), contexts[1].hw_queue());

    // Thread t owns every other 16 KiB slice: the two interleave through
    // the same pages' neighbours and the same chunks, never the same bytes.
    let handles: Vec<_> = contexts
        .into_iter()
        .enumerate()
        .map(|(t, mut c)| {
            std::thread::spawn(move || {
                let t = t as u64;
                for pass in 0..2u64 {
                    for i in 0..ROUNDS {
                        let off = (2 * i + t) * SLICE;
                        write(&mut c, off, SLICE as usize, 10 * t + pass);
                    }
                }
                for i in 0..ROUNDS {
                    let off = (2 * i + t) * SLICE;
                    let got = read(&mut c, off, SLICE as usize);
                    assert!(
                        got == expected(off, SLICE as usize, 10 * t + 1),
                        "thread {t} slice {i}"
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer thread");
    }

    let mut c = ctx(&dev);
    let len = (2 * ROUNDS * SLICE) as usize;
    let got = read(&mut c, 0, len);
    for s in 0..2 * ROUNDS {
        let (off, t) = (s * SLICE, s % 2);
        let range = off as usize..(off + SLICE) as usize;
        assert!(
            got[range] == expected(off, SLICE as usize, 10 * t + 1)[..],
            "slice {s}"
        );
    }
    assert_eq!(store.resident_bytes(), 2 * ROUNDS * SLICE);
}

// ---- the model test ----

/// Device size of the model test, in 512-byte blocks (256 KiB: four
/// chunks, so ranges overlap often). Under Miri, where most of a case goes
/// to checking the whole device byte by byte, two chunks.
const MODEL_BLOCKS: u64 = if cfg!(miri) { 256 } else { 512 };
const BLOCK: u64 = 512;

#[derive(Clone, Debug)]
enum Cmd {
    Write {
        block: u64,
        blocks: u64,
        cuts: Vec<u64>,
        seed: u64,
    },
    Read {
        block: u64,
        blocks: u64,
        cuts: Vec<u64>,
    },
    Discard {
        block: u64,
        blocks: u64,
    },
    WriteZeroes {
        block: u64,
        blocks: u64,
    },
}

/// A range within the device: a start block and a length of 1 to 160
/// blocks (up to 80 KiB, so some cross two chunk boundaries).
/// Under Miri, which interprets every byte compared, up to 16 blocks.
fn range() -> impl Strategy<Value = (u64, u64)> {
    let most = if cfg!(miri) { 16 } else { 160u64 };
    (0..MODEL_BLOCKS, 1..=most).prop_map(|(b, n)| (b, n.min(MODEL_BLOCKS - b)))
}

/// Up to five cut points: one to six segments.
fn cuts() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(any::<u64>(), 0..=5)
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        4 => (range(), cuts(), any::<u64>()).prop_map(|((block, blocks), cuts, seed)| Cmd::Write {
            block,
            blocks,
            cuts,
            seed
        }),
        3 => (range(), cuts()).prop_map(|((block, blocks), cuts)| Cmd::Read {
            block,
            blocks,
            cuts
        }),
        1 => range().prop_map(|(block, blocks)| Cmd::Discard { block, blocks }),
        1 => range().prop_map(|(block, blocks)| Cmd::WriteZeroes { block, blocks }),
    ]
}

/// Segment lengths in bytes: `blocks` cut at the (deduplicated) points.
fn segment_lens(blocks: u64, cuts: &[u64]) -> Vec<usize> {
    let mut at: Vec<u64> = cuts.iter().map(|c| c % blocks).filter(|&c| c > 0).collect();
    at.sort_unstable();
    at.dedup();
    at.push(blocks);
    let mut prev = 0;
    at.into_iter()
        .map(|c| {
            let n = ((c - prev) * BLOCK) as usize;
            prev = c;
            n
        })
        .collect()
}

fn run_model(cmds: &[Cmd]) -> Result<(), TestCaseError> {
    let (dev, store) = open(&format!("ram,size={}", MODEL_BLOCKS * BLOCK));
    let mut c = ctx(&dev);
    let mut model = vec![0u8; (MODEL_BLOCKS * BLOCK) as usize];
    for cmd in cmds {
        match cmd {
            Cmd::Write {
                block,
                blocks,
                cuts,
                seed,
            } => {
                let off = block * BLOCK;
                let mut at = off;
                let bufs: Vec<IoBuf> = segment_lens(*blocks, cuts)
                    .into_iter()
                    .map(|n| {
                        // One write in eight is all zeros: holes stay holes.
                        let b = if seed % 8 == 0 {
                            IoBuf::page_aligned(n)
                        } else {
                            pattern(at, n, *seed)
                        };
                        at += n as u64;
                        b
                    })
                    .collect();
                let slices: Vec<IoSlice<'_>> =
                    bufs.iter().map(|b| IoSlice::new(b.as_slice())).collect();
                c.writev_at(&slices, off).expect("writev");
                let mut at = off as usize;
                for b in &bufs {
                    model[at..at + b.len()].copy_from_slice(b.as_slice());
                    at += b.len();
                }
            }
            Cmd::Read {
                block,
                blocks,
                cuts,
            } => {
                let off = block * BLOCK;
                let mut bufs: Vec<IoBuf> = segment_lens(*blocks, cuts)
                    .into_iter()
                    .map(|n| {
                        let mut b = IoBuf::page_aligned(n);
                        b.as_mut_slice().fill(0xEE);
                        b
                    })
                    .collect();
                let mut slices: Vec<IoSliceMut<'_>> = bufs
                    .iter_mut()
                    .map(|b| IoSliceMut::new(b.as_mut_slice()))
                    .collect();
                c.readv_at(&mut slices, off).expect("readv");
                let got: Vec<u8> = bufs
                    .iter()
                    .map(|b| b.as_slice())
                    .collect::<Vec<_>>()
                    .concat();
                let want = &model[off as usize..][..(blocks * BLOCK) as usize];
                prop_assert!(got == want, "read at block {} of {} blocks", block, blocks);
            }
            Cmd::Discard { block, blocks } => {
                c.discard(block * BLOCK, blocks * BLOCK).expect("discard");
                model[(block * BLOCK) as usize..][..(blocks * BLOCK) as usize].fill(0);
            }
            Cmd::WriteZeroes { block, blocks } => {
                c.write_zeroes(block * BLOCK, blocks * BLOCK)
                    .expect("write-zeroes");
                model[(block * BLOCK) as usize..][..(blocks * BLOCK) as usize].fill(0);
            }
        }
    }
    // The whole device, byte for byte.
    let got = read(&mut c, 0, model.len());
    prop_assert!(got == model, "final contents differ");
    // Holes read as zeros, every page holding a non-zero byte is stored,
    // and nothing else can be: memory is bounded by the pages touched.
    let extents = dev.extents(0, model.len() as u64).expect("extents");
    let mut at = 0;
    for e in &extents {
        prop_assert_eq!(e.offset_bytes, at);
        at += e.len_bytes;
        let bytes = &model[e.offset_bytes as usize..(e.offset_bytes + e.len_bytes) as usize];
        if e.hole {
            prop_assert!(
                bytes == vec![0u8; bytes.len()],
                "hole at {}",
                e.offset_bytes
            );
        }
    }
    prop_assert_eq!(at, model.len() as u64);
    let nonzero_pages = model
        .chunks(PAGE as usize)
        .filter(|p| *p != vec![0u8; p.len()].as_slice())
        .count() as u64;
    prop_assert!(store.resident_bytes() >= nonzero_pages * PAGE);
    Ok(())
}

/// Longest command sequence of the model test (shorter under Miri).
const MAX_CMDS: usize = if cfg!(miri) { 12 } else { 40 };

proptest! {
    // Miri runs each case about a thousand times slower.
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 128 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_sequence_matches_a_byte_vector(cmds in prop::collection::vec(cmd(), 1..MAX_CMDS)) {
        run_model(&cmds)?;
    }
}

#[test]
fn segment_lens_cover_the_range() {
    assert_eq!(segment_lens(1, &[5, 9]), vec![512]);
    assert_eq!(segment_lens(4, &[2, 2, 6, 0]), vec![1024, 1024]);
    assert_eq!(segment_lens(10, &[1, 2, 3, 4, 5]).len(), 6);
}
