//! The store's unit tests: pages across index leaves and chunks, holes,
//! zeros kept as holes, discards, resident runs and shard counts.

use super::*;

const PAGE: u64 = PAGE_BYTES as u64;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

fn read(s: &Store, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0xAA; len];
    s.read(off, &mut v);
    v
}

#[test]
fn pages_far_apart_in_many_index_leaves_read_walk_and_discard() {
    // 16 shards, 256 chunks of 64 KiB per leaf: a leaf spans 256 MiB
    // of the device. Pages in many leaves of every shard, and far out.
    let s = Store::with_shards(16);
    let span = (crate::xarray::LEAF_CHUNKS * 16 * CHUNK_BYTES) as u64;
    // Fewer under Miri, which runs this about a thousand times slower.
    let n: u64 = if cfg!(miri) { 9 } else { 40 };
    let offs: Vec<u64> = (0..n)
        .map(|i| i * (span / 3 / PAGE * PAGE) + (i % 16) * CHUNK_BYTES as u64 + (i % 7) * PAGE)
        .chain([(1 << 44) - PAGE])
        .collect();
    for (i, &off) in offs.iter().enumerate() {
        s.write(off, &pattern(PAGE_BYTES, i as u8)).unwrap();
    }
    assert_eq!(s.resident_pages(), offs.len() as u64);
    for (i, &off) in offs.iter().enumerate() {
        assert_eq!(read(&s, off, PAGE_BYTES), pattern(PAGE_BYTES, i as u8));
        assert_eq!(read(&s, off + PAGE, 512), vec![0; 512]);
    }
    let runs = s.resident_runs(0, 1 << 32);
    let want: Vec<Range<u64>> = offs.iter().map(|o| o / PAGE..o / PAGE + 1).collect();
    assert_eq!(runs, want);
    // Discard the middle third of them, across leaves and shards.
    let (lo, hi) = (n as usize / 3, 2 * n as usize / 3);
    let (a, b) = (offs[lo], offs[hi]);
    s.discard(a, b - a);
    for (i, &off) in offs.iter().enumerate() {
        let gone = (lo..hi).contains(&i);
        let want = if gone {
            vec![0; PAGE_BYTES]
        } else {
            pattern(PAGE_BYTES, i as u8)
        };
        assert_eq!(read(&s, off, PAGE_BYTES), want, "page {i}");
    }
    assert_eq!(s.resident_pages(), (offs.len() - (hi - lo)) as u64);
    // And everything: nothing stays stored, index leaves included.
    s.discard(0, 1 << 44);
    assert_eq!(s.resident_pages(), 0);
    assert!(s.resident_runs(0, 1 << 32).is_empty());
}

#[test]
fn write_then_read_across_pages_and_chunks() {
    let s = Store::with_shards(16);
    // Unaligned, spanning a chunk boundary (64 KiB) and five pages.
    let off = CHUNK_BYTES as u64 - 3 * PAGE - 512;
    let data = pattern(4 * PAGE_BYTES, 7);
    s.write(off, &data).unwrap();
    assert_eq!(read(&s, off, data.len()), data);
    assert_eq!(s.resident_pages(), 5);
    assert_eq!(s.resident_bytes(), 5 * PAGE);
    // Bytes around it are zeros.
    assert_eq!(read(&s, off - 512, 512), vec![0; 512]);
    assert_eq!(read(&s, off + data.len() as u64, 512), vec![0; 512]);
    // Overwrite a piece: no new page.
    let patch = pattern(1024, 99);
    s.write(off + 3000, &patch).unwrap();
    let mut expect = data.clone();
    expect[3000..4024].copy_from_slice(&patch);
    assert_eq!(read(&s, off, data.len()), expect);
    assert_eq!(s.resident_pages(), 5);
}

#[test]
fn unwritten_reads_are_zeros_and_allocate_nothing() {
    let s = Store::with_shards(16);
    assert_eq!(read(&s, 0, 3 * PAGE_BYTES), vec![0; 3 * PAGE_BYTES]);
    assert_eq!(read(&s, (1 << 40) - 512, 512), vec![0; 512]);
    assert_eq!(s.resident_pages(), 0);
    // A read of a page next to a stored one, in the same chunk.
    s.write(0, &[1; 512]).unwrap();
    assert_eq!(read(&s, PAGE, PAGE_BYTES), vec![0; PAGE_BYTES]);
    assert_eq!(s.resident_pages(), 1);
}

#[test]
fn zeros_written_to_holes_stay_holes() {
    let s = Store::with_shards(16);
    s.write(0, &vec![0; 2 * CHUNK_BYTES]).unwrap();
    assert_eq!(s.resident_pages(), 0);
    assert!(s.resident_runs(0, 1 << 20).is_empty());
    // Zeros over a stored page do overwrite it.
    s.write(PAGE, &[9; 512]).unwrap();
    s.write(PAGE, &[0; 512]).unwrap();
    assert_eq!(read(&s, PAGE, 512), vec![0; 512]);
    // Mixed: only the page with data is allocated.
    let mut mixed = vec![0u8; 3 * PAGE_BYTES];
    mixed[2 * PAGE_BYTES + 10] = 5;
    s.write(8 * PAGE, &mixed).unwrap();
    assert_eq!(s.resident_runs(8, 11), vec![10..11]);
    assert_eq!(read(&s, 8 * PAGE, mixed.len()), mixed);
}

#[test]
fn discard_frees_whole_pages_and_zeroes_partial_ones() {
    let s = Store::with_shards(16);
    let data = pattern(8 * PAGE_BYTES, 3);
    s.write(0, &data).unwrap();
    assert_eq!(s.resident_pages(), 8);

    // Whole pages 2 and 3.
    s.discard(2 * PAGE, 2 * PAGE);
    assert_eq!(s.resident_pages(), 6);
    assert_eq!(read(&s, 2 * PAGE, 2 * PAGE_BYTES), vec![0; 2 * PAGE_BYTES]);
    assert_eq!(read(&s, PAGE, PAGE_BYTES), data[PAGE_BYTES..2 * PAGE_BYTES]);

    // 512-byte granular: partial head and tail zeroed in place, page 5
    // (fully inside) freed.
    s.discard(4 * PAGE + 512, 2 * PAGE + 512);
    assert_eq!(s.resident_pages(), 5);
    let at = |p: u64, o: u64| (p * PAGE + o) as usize;
    assert_eq!(read(&s, 4 * PAGE, 512), data[at(4, 0)..at(4, 512)]);
    assert_eq!(read(&s, 4 * PAGE + 512, 3584), vec![0; 3584]);
    assert_eq!(read(&s, 5 * PAGE, PAGE_BYTES), vec![0; PAGE_BYTES]);
    assert_eq!(read(&s, 6 * PAGE, 1024), vec![0; 1024]);
    assert_eq!(read(&s, 6 * PAGE + 1024, 3072), data[at(6, 1024)..at(7, 0)]);

    // Zeroing the rest of a page piecewise frees it too.
    s.discard(4 * PAGE, 512);
    assert_eq!(s.resident_pages(), 4, "page 4 is all zeros now");
}

#[test]
fn discard_of_a_huge_range_visits_only_what_is_stored() {
    let s = Store::with_shards(16);
    let tib = 1u64 << 40;
    s.write(0, &[1; 4096]).unwrap();
    s.write(tib / 2 + 12345 * 512, &[2; 8192]).unwrap();
    s.write(tib - 4096, &[3; 4096]).unwrap();
    assert_eq!(s.resident_pages(), 5);
    // If this walked every page number of the range, it would not end.
    s.discard(0, u64::MAX);
    assert_eq!(s.resident_pages(), 0);
    assert_eq!(read(&s, tib - 4096, 4096), vec![0; 4096]);
    // Huge but not everything: the bytes outside stay.
    s.write(0, &[1; 8192]).unwrap();
    s.write(tib - 8192, &[3; 8192]).unwrap();
    s.discard(4096, tib - 8192);
    assert_eq!(read(&s, 0, 4096), vec![1; 4096]);
    assert_eq!(read(&s, tib - 4096, 4096), vec![3; 4096]);
    assert_eq!(s.resident_pages(), 2);
}

#[test]
fn short_discards_reach_every_shard() {
    // Under Miri (a thousand times slower) a smaller store with the
    // same shape: a short discard spans fewer chunks than there are
    // shards, a long one more.
    let (shards, chunks, short_chunks) = if cfg!(miri) { (4, 8, 2) } else { (16, 64, 5) };
    let s = Store::with_shards(shards);
    let total = chunks * CHUNK_PAGES as u64;
    for page in 0..total {
        s.write(page * PAGE, &[1]).unwrap();
    }
    assert_eq!(s.resident_pages(), total);
    // `short_chunks` chunks and a bit, starting off a chunk boundary:
    // the chunk-by-chunk path.
    let (from, to) = (3u64, 3 + short_chunks * CHUNK_PAGES as u64 + 2);
    assert!(short_chunks + 1 < shards as u64);
    s.discard(from * PAGE, (to - from) * PAGE);
    assert_eq!(s.resident_pages(), total - (to - from));
    for page in 0..total {
        let expect = u8::from(!(from..to).contains(&page));
        assert_eq!(read(&s, page * PAGE, 1)[0], expect, "page {page}");
    }
    // Long enough for the shard scan path.
    s.discard(0, total * PAGE - PAGE);
    assert_eq!(s.resident_pages(), 1);
    assert_eq!(s.resident_runs(0, total), vec![total - 1..total]);
}

#[test]
fn resident_runs_merge_across_chunks_and_clip() {
    let s = Store::with_shards(16);
    // Pages 14..20 (crossing chunk 0 → 1), 40, 41 and 100.
    s.write(14 * PAGE, &pattern(6 * PAGE_BYTES, 1)).unwrap();
    s.write(40 * PAGE, &pattern(2 * PAGE_BYTES, 2)).unwrap();
    s.write(100 * PAGE + 4000, &[7; 10]).unwrap();
    assert_eq!(s.resident_runs(0, 1 << 30), vec![14..20, 40..42, 100..101]);
    assert_eq!(s.resident_runs(15, 41), vec![15..20, 40..41]);
    assert_eq!(s.resident_runs(20, 40), Vec::<Range<u64>>::new());
    assert_eq!(s.resident_runs(5, 5), Vec::<Range<u64>>::new());
}

#[test]
fn shard_counts_are_powers_of_two_in_bounds() {
    assert_eq!(Store::with_shards(0).nr_shards(), MIN_SHARDS);
    assert_eq!(Store::with_shards(17).nr_shards(), 32);
    assert_eq!(Store::with_shards(usize::MAX).nr_shards(), MAX_SHARDS);
    let s = Store::for_queues(3);
    assert!(s.nr_shards().is_power_of_two());
    assert!(s.nr_shards() >= 12);
}

#[test]
fn is_zero_checks_every_byte() {
    for len in [0, 1, 63, 64, 65, 4096, 4097] {
        let mut v = vec![0u8; len];
        assert!(is_zero(&v));
        for i in [0, len / 2, len.saturating_sub(1)] {
            if i < len {
                v[i] = 1;
                assert!(!is_zero(&v), "len {len} byte {i}");
                v[i] = 0;
            }
        }
    }
}

#[test]
fn chunk_bytes_clips_to_the_chunk() {
    let c = CHUNK_BYTES as u64;
    assert_eq!(chunk_bytes(0, 0, u64::MAX), 0..CHUNK_BYTES);
    assert_eq!(chunk_bytes(2, 2 * c + 512, 2 * c + 1024), 512..1024);
    assert_eq!(chunk_bytes(1, 0, c + 4096), 0..4096);
}
