//! Soundness of the data path under Miri (Stacked Borrows and Tree
//! Borrows): the calls a user makes first, on the ram driver, which makes
//! no syscalls. `cargo +nightly miri test -p mqblk-ram --test soundness`.

use std::io::{IoSlice, IoSliceMut};

fn ram(spec: &str) -> mqblk_core::Device {
    let opts = mqblk_core::spec::parse(spec).unwrap().options;
    mqblk_ram::open(opts).unwrap()
}

#[test]
fn first_io_write_shared_slice_read_back_drop() {
    let dev = ram("ram,size=1M,hw_queues=1");
    let mut ctx = dev.context().unwrap();
    let data = vec![0x5au8; 4096];
    // A second shared borrow of the write data stays live across the write.
    let also = &data[..];
    ctx.write_at(&data, 8192).unwrap();
    assert_eq!(also[0], 0x5a);
    let mut back = vec![0u8; 4096];
    ctx.read_at(&mut back, 8192).unwrap();
    assert_eq!(back, data);
    drop(ctx);
    drop(dev);
}

#[test]
fn vectored_write_and_read_cross_segments() {
    let dev = ram("ram,size=1M,hw_queues=1");
    let mut ctx = dev.context().unwrap();
    let a = vec![1u8; 1024];
    let b = vec![2u8; 3072];
    ctx.writev_at(&[IoSlice::new(&a), IoSlice::new(&b)], 0)
        .unwrap();
    let (mut x, mut y) = (vec![0u8; 2048], vec![0u8; 2048]);
    ctx.readv_at(&mut [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)], 0)
        .unwrap();
    assert!(x[..1024].iter().all(|&v| v == 1));
    assert!(x[1024..].iter().all(|&v| v == 2));
    assert!(y.iter().all(|&v| v == 2));
}

#[test]
fn write_zeroes_between_writes_reads_back_zeros() {
    // The ram driver zeroes natively (the core's emulation through its
    // read-only zero page is tested with a toy driver in mqblk-core's
    // tests/soundness.rs); a small max_sectors splits the data around it.
    let dev = ram("ram,size=1M,hw_queues=1,max_sectors=8");
    let mut ctx = dev.context().unwrap();
    ctx.write_at(&[7u8; 65536], 0).unwrap();
    ctx.write_zeroes(4096, 32768).unwrap();
    let mut back = vec![1u8; 65536];
    ctx.read_at(&mut back, 0).unwrap();
    assert!(back[..4096].iter().all(|&v| v == 7));
    assert!(back[4096..36864].iter().all(|&v| v == 0));
    assert!(back[36864..].iter().all(|&v| v == 7));
}

#[test]
fn split_misaligned_read_bounces_pieces_out_of_order() {
    // max_sectors=8 cuts a 64 KiB read into 16 pieces; an odd address
    // makes each piece a bounce piece whose copy lands while siblings are
    // still in flight in the same caller buffer.
    let dev = ram("ram,size=1M,hw_queues=1,max_sectors=8");
    let mut ctx = dev.context().unwrap();
    let pattern: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
    ctx.write_at(&pattern, 0).unwrap();
    let mut raw = vec![0u8; 65536 + 1];
    let misaligned = &mut raw[1..];
    ctx.read_at(misaligned, 0).unwrap();
    assert_eq!(&raw[1..], &pattern[..]);
}

#[test]
fn context_moved_with_requests_in_flight() {
    use mqblk_core::{Bio, IoBuf};
    let dev = ram("ram,size=1M,hw_queues=1");
    let mut ctx = dev.context().unwrap();
    for i in 0..4u64 {
        let mut b = IoBuf::page_aligned(4096);
        b.as_mut_slice().fill(i as u8 + 1);
        ctx.submit(Bio::write_at(i * 4096, b)).unwrap();
    }
    // Moving the context (into a box, onto another thread) while its bios
    // are plugged must not invalidate the pointers requests hold.
    let mut boxed = Box::new(ctx);
    let ctx2 = std::thread::spawn(move || {
        let mut n = 0;
        while n < 4 {
            n += boxed.poll_wait(1, |c| c.result().unwrap());
        }
        boxed
    })
    .join()
    .unwrap();
    let mut ctx = *ctx2;
    let mut back = vec![0u8; 4096];
    ctx.read_at(&mut back, 3 * 4096).unwrap();
    assert!(back.iter().all(|&v| v == 4));
}
