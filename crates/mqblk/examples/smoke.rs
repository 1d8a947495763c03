//! A single-threaded loop through the layer on the null device, for
//! instruction counting (`valgrind --tool=callgrind`) and quick checks:
//! `cargo run --release -p mqblk --example smoke -- IOS SEGMENTS BS`.
//! QD32 random reads, completions resubmitted in place. `SMOKE_SPEC` in the
//! environment names another device (a stacked one, to cost a layer), and
//! `SMOKE_OP=write` makes the I/Os writes.

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("numbers"));
    let ios = args.next().unwrap_or(10_000_000);
    let segments = args.next().unwrap_or(1) as u32;
    let bs = args.next().unwrap_or(4096);
    let spec = std::env::var("SMOKE_SPEC").unwrap_or_else(|_| "null,size=64G,hw_queues=1".into());
    let op = match std::env::var("SMOKE_OP").as_deref() {
        Ok("write") => mqblk::Op::Write,
        _ => mqblk::Op::Read,
    };
    let dev = mqblk::open(&spec).unwrap();
    let mut ctx = dev.context().unwrap();
    let piece = (bs / u64::from(segments)) as u32;
    let blocks = dev.capacity_bytes() / bs;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % blocks) * (bs / 512)
    };
    for _ in 0..32 {
        let mut b = mqblk::Bio::at(op, next() * 512);
        for _ in 0..segments {
            b.push_segment(dev.alloc_buf(piece as usize), 0, piece);
        }
        ctx.submit(b).unwrap();
    }
    let t = std::time::Instant::now();
    let mut done = 0u64;
    while done < ios {
        done += ctx.poll_wait(1, |mut c| {
            c.bio_mut().set_offset_bytes(next() * 512);
            c.resubmit();
        }) as u64;
    }
    let el = t.elapsed();
    println!("{} I/Os, {:.0} IOPS", done, done as f64 / el.as_secs_f64());
}
