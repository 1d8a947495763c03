//! Every kind of bad input gets a typed error naming the device, the offset
//! and the limit broken. Nothing panics, and the context stays usable.

use mqblk::{Bio, Error, IoBuf};

#[test]
fn out_of_range_names_capacity() {
    let dev = mqblk::open("null,size=1M").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(4096);
    let e = ctx.read_at(buf.as_mut_slice(), 1 << 20).unwrap_err();
    match &e {
        Error::OutOfRange {
            offset_bytes,
            len_bytes,
            capacity_bytes,
            ..
        } => {
            assert_eq!(
                (*offset_bytes, *len_bytes, *capacity_bytes),
                (1 << 20, 4096, 1 << 20)
            );
        }
        other => panic!("wrong error {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with(dev.name()) && msg.contains("1048576"),
        "{msg}"
    );
    // Straddling the end is out of range too; the last block is fine.
    assert!(matches!(
        ctx.read_at(buf.as_mut_slice(), (1 << 20) - 2048),
        Err(Error::OutOfRange { .. })
    ));
    ctx.read_at(buf.as_mut_slice(), (1 << 20) - 4096).unwrap();
    // Sector arithmetic that would overflow is out of range, not a panic.
    let bio = Bio::read_at(u64::MAX - 511, dev.alloc_buf(4096));
    let (_, r) = ctx.submit_wait(bio);
    assert!(matches!(r, Err(Error::OutOfRange { .. })));
}

#[test]
fn length_not_a_multiple_of_the_block_size() {
    let dev = mqblk::open("null,size=1M,block_size=4096").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(8192);
    let e = ctx.read_at(&mut buf.as_mut_slice()[..512], 0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadLength {
                len_bytes: 512,
                logical_block_size: 4096,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("4096"), "{e}");
    let e = ctx
        .read_at(&mut buf.as_mut_slice()[..4096], 512)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadLength {
                offset_bytes: 512,
                ..
            }
        ),
        "{e:?}"
    );
    let e = ctx
        .read_at(&mut buf.as_mut_slice()[..4096], 100)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadLength {
                offset_bytes: 100,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn zero_length() {
    let dev = mqblk::open("null,size=1M").unwrap();
    let mut ctx = dev.context().unwrap();
    let e = ctx.read_at(&mut [], 4096).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ZeroLength {
                offset_bytes: 4096,
                logical_block_size: 512,
                ..
            }
        ),
        "{e:?}"
    );
    let e = ctx.discard(0, 0).unwrap_err();
    assert!(matches!(e, Error::ZeroLength { .. }), "{e:?}");
}

#[test]
fn misaligned_buffer_names_the_segment_and_alignment() {
    // With bouncing off, the device's alignment is a hard requirement.
    let dev = mqblk::open("null,size=1M,bounce=0").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(8192);
    let e = ctx.read_at(&mut buf.as_mut_slice()[1..513], 0).unwrap_err();
    match &e {
        Error::Misaligned {
            segment,
            alignment,
            addr,
            ..
        } => {
            assert_eq!((*segment, *alignment), (0, 512));
            assert_eq!(*addr % 512, 1);
        }
        other => panic!("wrong error {other:?}"),
    }
    // A vectored bio names the offending segment.
    let mut bio = Bio::at(mqblk::Op::Write, 0);
    bio.push_segment(dev.alloc_buf(4096), 0, 4096);
    bio.push_segment(IoBuf::page_aligned(4096), 8, 512);
    let (_, r) = ctx.submit_wait(bio);
    assert!(
        matches!(r, Err(Error::Misaligned { segment: 1, .. })),
        "{r:?}"
    );
}

#[test]
fn write_to_read_only_device() {
    let dev = mqblk::open("null,size=1M,ro=1").unwrap();
    let mut ctx = dev.context().unwrap();
    let buf = dev.alloc_buf(4096);
    let e = ctx.write_at(buf.as_slice(), 8192).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ReadOnly {
                offset_bytes: 8192,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("read-only"), "{e}");
    assert!(matches!(ctx.discard(0, 4096), Err(Error::ReadOnly { .. })));
    let mut r = dev.alloc_buf(4096);
    ctx.read_at(r.as_mut_slice(), 8192).unwrap();
}

#[test]
fn malformed_specs_and_options() {
    for (spec, needle) in [
        ("", "empty"),
        ("nul", "unknown device kind `nul`"),
        ("null,sise=1G", "unknown option `sise`"),
        ("null,size=1Q", "size"),
        ("null,size=0", "size"),
        ("null,block_size=1000", "block_size"),
        ("null,completion=soon", "completion"),
        ("null,queue_mode=fast", "queue_mode"),
        ("null,hw_queues=0", "hw_queues"),
        ("null,queue_depth=0", "queue_depth"),
        ("null,plug=maybe", "plug"),
        ("null,nomerges=3", "nomerges"),
        ("null,bounce=perhaps", "bounce"),
        ("null,error_probability=101", "error_probability"),
        ("null:/dev/x", "target"),
    ] {
        let e = mqblk::open(spec).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(needle), "{spec:?}: {msg}");
    }
}

#[test]
fn bad_bios_through_the_callback_api_complete_once_with_their_error() {
    let dev = mqblk::open("null,size=1M").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut bad = Bio::read_at((1 << 20) * 512, dev.alloc_buf(4096));
    bad.private = 1;
    ctx.submit(bad).unwrap();
    let mut good = Bio::read_at(0, dev.alloc_buf(4096));
    good.private = 2;
    ctx.submit(good).unwrap();
    let mut got = Vec::new();
    ctx.poll_wait(2, |c| {
        got.push((c.private(), c.result().map_err(|e| e.to_string())))
    });
    got.sort_by_key(|g| g.0);
    assert_eq!(got.len(), 2);
    assert!(
        got[0].1.as_ref().unwrap_err().contains("capacity"),
        "{got:?}"
    );
    assert!(got[1].1.is_ok());
}
