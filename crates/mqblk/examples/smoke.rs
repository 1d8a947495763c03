fn main() {
    let dev = mqblk::open("null,size=1G,memory_backed=1").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut w = dev.alloc_buf(8192);
    w.as_mut_slice().fill(0xab);
    ctx.write_at(w.as_slice(), 4096).unwrap();
    let mut r = dev.alloc_buf(8192);
    ctx.read_at(r.as_mut_slice(), 4096).unwrap();
    assert_eq!(r.as_slice(), w.as_slice());
    println!(
        "roundtrip ok; descriptor_bytes={}",
        mqblk::descriptor_bytes()
    );
    let e = ctx.read_at(r.as_mut_slice(), 1 << 30).unwrap_err();
    println!("{e}");
    let t = std::time::Instant::now();
    let dev = mqblk::open("null,completion=inline").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut free: Vec<mqblk::Bio> = (0..32)
        .map(|_| mqblk::Bio::read(0, dev.alloc_buf(4096)))
        .collect();
    let mut n = 0u64;
    let mut s = 1u64;
    while n < 20_000_000 {
        while let Some(mut b) = free.pop() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            b.set_sector((s >> 20) % (1 << 20) * 8);
            ctx.submit(b).unwrap();
        }
        n += ctx.poll_wait(1, |mut c| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            c.bio_mut().set_sector((s >> 20) % (1 << 20) * 8);
            c.resubmit()
        }) as u64;
    }
    let el = t.elapsed();
    println!("{} IOPS", n as f64 / el.as_secs_f64());
}
