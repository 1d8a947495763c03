//! The verifier's unit tests: headers, checks, intervals, patterns, the
//! backlog and the trim and write-zeroes mix.

use super::*;
use crate::verify::setup::refuse_device;

fn spec(kind: VerifyKind, blocks: u64) -> VerifySpec {
    VerifySpec {
        kind,
        bs: 4096,
        interval: 4096,
        pattern: None,
        draw_base: 0,
        slice_base: 0,
        blocks,
        job: 3,
        job_seed: 42,
        do_verify: true,
        fatal: false,
        read_only: false,
        backlog: 0,
        backlog_batch: 0,
        record_entries_max: 1 << 10,
    }
}

fn verifier(kind: VerifyKind) -> Verifier {
    Verifier::new(spec(kind, 16))
}

fn written(v: &mut Verifier, block: u64) -> (Bio, u32) {
    let mut bio = Bio::write_at(0, mqblk::IoBuf::page_aligned(4096));
    bio.set_offset_bytes(block * 4096);
    v.prepare(&mut bio);
    let g = Verifier::generation_of(&bio);
    v.set_busy(block, false);
    v.record.record(block, Event::Write(g));
    (bio, g)
}

#[test]
fn header_round_trip_and_crc() {
    let mut v = verifier(VerifyKind::Crc32c);
    let mut bio = Bio::write_at(0, mqblk::IoBuf::page_aligned(4096));
    bio.set_offset_bytes(5 * 4096);
    v.prepare(&mut bio);
    let block = v.block_of(&bio);
    assert_eq!(block, 5);
    let data = bio.segments()[0].as_slice();
    let h = Header::decode(data);
    assert_eq!(h.magic, MAGIC);
    assert_eq!(h.offset, 5 * 4096);
    assert_eq!(h.len, 4096);
    assert_eq!(h.job, 3);
    // fio's layout: its crc32c type after the header, the data's crc32c
    // after that, and the header's own crc32c.
    assert_eq!(h.kind, 5);
    assert!(super::header_crc_ok(data, &h));
    let mut sum = [0u8; DIGEST_MAX];
    assert_eq!(VerifyKind::Crc32c.sum(data, &mut sum), 4);
    assert_eq!(VerifyKind::Crc32c.stored(data), &sum[..4]);
    assert_eq!(VerifyKind::Crc32c.data_start(), HEADER_BYTES + 4);
    // A second prepare on the same block moves to the next free one.
    let mut other = Bio::write_at(0, mqblk::IoBuf::page_aligned(4096));
    other.set_offset_bytes(5 * 4096);
    v.prepare(&mut other);
    assert_eq!(v.block_of(&other), 6);
    // The engine's half of `private` is left as it was.
    let mut third = Bio::write_at(0, mqblk::IoBuf::page_aligned(4096));
    third.private = 0xdead << 32;
    v.prepare(&mut third);
    assert_eq!(third.private >> 32, 0xdead);
    assert_eq!(v.block_of(&third), 0);
    assert_ne!(Verifier::generation_of(&third), 0);
}

#[test]
fn checks_catch_corruption_staleness_and_misplacement() {
    let mut v = verifier(VerifyKind::Crc32c);
    let (mut bio, g) = written(&mut v, 1);
    v.check(&bio, 1, Expect::Generation(g));
    assert_eq!(v.result.errors, 0);
    v.check(&bio, 1, Expect::Generation(g + 1));
    assert_eq!(
        v.result.mismatches[0].reason,
        "stale data (not the last write)"
    );
    v.check(&bio, 2, Expect::Generation(g));
    assert!(v.result.mismatches[1].reason.starts_with("wrong offset"));
    bio.segments_mut()[0].as_mut_slice()[100] ^= 1;
    v.check(&bio, 1, Expect::Generation(g));
    let m = &v.result.mismatches[2];
    assert!(m.reason.starts_with("bad crc32c"));
    assert!(m.to_string().contains("at offset 4096"), "{m}");
    assert_eq!(v.result.errors, 3);
}

#[test]
fn md5_and_sha256_blocks_check_and_catch_corruption() {
    for kind in [VerifyKind::Md5, VerifyKind::Sha256] {
        let mut v = verifier(kind);
        let (mut bio, g) = written(&mut v, 2);
        let data = bio.segments()[0].as_slice();
        assert_eq!(Header::decode(data).kind, kind.code());
        v.check(&bio, 2, Expect::Generation(g));
        assert_eq!(v.result.errors, 0, "{kind:?}: {:?}", v.result.mismatches);
        bio.segments_mut()[0].as_mut_slice()[4000] ^= 0x80;
        v.check(&bio, 2, Expect::Generation(g));
        let m = &v.result.mismatches[0];
        assert_eq!(m.reason, format!("bad {} (data corrupted)", kind.name()));
        bio.segments_mut()[0].as_mut_slice()[4000] ^= 0x80;
        bio.segments_mut()[0].as_mut_slice()[HEADER_BYTES] ^= 1;
        v.check(&bio, 2, Expect::Generation(g));
        assert_eq!(v.result.errors, 2);
    }
}

#[test]
fn zeroed_and_discarded_blocks_are_checked_by_what_they_may_hold() {
    let mut v = verifier(VerifyKind::Crc32c);
    let (bio, g) = written(&mut v, 3);
    let zeros = Bio::read_at(3 * 4096, mqblk::IoBuf::page_aligned(4096));
    v.check(&bio, 3, Expect::ZerosOr(g));
    v.check(&zeros, 3, Expect::ZerosOr(g));
    assert_eq!(v.result.errors, 0, "{:?}", v.result.mismatches);
    v.check(&zeros, 3, Expect::Zeros);
    assert_eq!(v.result.errors, 0);
    v.check(&bio, 3, Expect::Zeros);
    assert!(v.result.mismatches[0].reason.starts_with("not zeros"));
    let mut v = v.with_mix(10, 10, true);
    v.check(&bio, 3, Expect::ZerosOr(g));
    assert_eq!(v.result.errors, 2);
    assert!(v.result.mismatches[1].reason.contains("trim_verify_zero"));
    v.trim_verify_zero = false;
    v.check(&bio, 3, Expect::ZerosOr(g + 1));
    assert_eq!(
        v.result.mismatches[2].reason,
        "stale data (not the last write)"
    );
}

#[test]
fn intervals_and_patterns_are_written_and_checked() {
    let mut s = spec(VerifyKind::Crc32c, 16);
    s.interval = 512;
    s.pattern = Some(VerifyPattern::parse("0xaa555aa5").unwrap());
    let mut v = Verifier::new(s.clone());
    let (mut bio, g) = written(&mut v, 4);
    let data = bio.segments()[0].as_slice();
    for i in 0..8 {
        let h = Header::decode(&data[i * 512..]);
        assert_eq!(h.offset, 4 * 4096 + i as u64 * 512);
        assert_eq!(h.len, 512);
    }
    let at = VerifyKind::Crc32c.data_start();
    assert_eq!(&data[at..at + 4], &[0xaa, 0x55, 0x5a, 0xa5]);
    v.check(&bio, 4, Expect::Generation(g));
    assert_eq!(v.result.errors, 0, "{:?}", v.result.mismatches);
    // A read-only job takes any valid header for the offset.
    s.read_only = true;
    let mut r = Verifier::new(s.clone());
    r.check(&bio, 4, Expect::AnyOrZeros);
    assert_eq!(r.result.errors, 0, "{:?}", r.result.mismatches);
    bio.segments_mut()[0].as_mut_slice()[1024 + 100] ^= 1;
    r.check(&bio, 4, Expect::AnyOrZeros);
    assert_eq!(r.result.mismatches[0].offset, 4 * 4096 + 1024);
    // verify=pattern: the pattern alone, with %o.
    s.kind = VerifyKind::Pattern;
    s.read_only = false;
    s.pattern = Some(VerifyPattern::parse("%o").unwrap());
    let mut p = Verifier::new(s);
    let (bio, g) = written(&mut p, 2);
    assert_eq!(
        &bio.segments()[0].as_slice()[8..16],
        &(2u64 * 4096).to_le_bytes()
    );
    p.check(&bio, 2, Expect::Generation(g));
    p.check(&bio, 3, Expect::Generation(g));
    assert_eq!(p.result.errors, 1);
    assert!(p.result.mismatches[0].reason.starts_with("pattern"));
}

#[test]
fn a_backlog_reads_back_what_was_written_as_it_goes() {
    let mut s = spec(VerifyKind::Crc32c, 16);
    s.backlog = 2;
    s.backlog_batch = 2;
    let mut v = Verifier::new(s);
    for b in [5, 9] {
        let (_, g) = written(&mut v, b);
        // As a completion would.
        v.written.push_back(b);
        v.record.record(b, Event::Write(g));
    }
    // The engine's completion path fills to_read; do it by hand.
    v.to_read.extend(v.written.drain(..));
    assert_eq!(v.retarget(Op::Write), Op::Read);
    let mut bio = Bio::read_at(0, mqblk::IoBuf::page_aligned(4096));
    v.prepare(&mut bio);
    assert_eq!(bio.offset_bytes(), 5 * 4096);
}

#[test]
fn the_mix_turns_writes_into_discards_and_write_zeroes_in_their_shares() {
    let mut v = verifier(VerifyKind::Crc32c).with_mix(20, 30, false);
    let mut n = [0u32; 3];
    for _ in 0..10_000 {
        match v.retarget(Op::Write) {
            Op::Write => n[0] += 1,
            Op::Discard => n[1] += 1,
            Op::WriteZeroes => n[2] += 1,
            op => panic!("{op:?}"),
        }
        assert_eq!(v.retarget(Op::Read), Op::Read);
    }
    assert!((4500..5500).contains(&n[0]), "{n:?}");
    assert!((1700..2300).contains(&n[1]), "{n:?}");
    assert!((2700..3300).contains(&n[2]), "{n:?}");
}

#[test]
fn null_without_memory_is_refused() {
    assert!(refuse_device("null").is_some());
    assert!(refuse_device("null,size=1G").is_some());
    assert!(refuse_device("null,memory_backed=1").is_none());
    assert!(refuse_device("ram,size=1G").is_none());
}
