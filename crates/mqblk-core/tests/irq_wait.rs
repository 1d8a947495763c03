//! A context that waits for a tag on a driver with an interrupt line
//! (`Driver::irq_fd`) sleeps on the line: it does not spin through polls
//! while its own completion fd is still readable from an earlier
//! announcement. Counted in driver polls, not in time.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mqblk_core::{Bio, IoBuf, Op};

fn read_bio(offset: u64) -> Bio {
    let mut bio = Bio::at(Op::Read, offset);
    bio.push_segment(IoBuf::page_aligned(4096), 0, 4096);
    bio
}

#[test]
#[cfg_attr(miri, ignore = "a socket and a thread as the interrupt")]
fn a_bio_waiting_for_a_tag_sleeps_on_the_interrupt_line() {
    let polls = Arc::new(AtomicU32::new(0));
    let drv = common::Threaded {
        delay: Duration::from_millis(200),
        polls: polls.clone(),
        irq_line: true,
    };
    let mut cfg = common::config("irq0", 1 << 20);
    cfg.queue_depth = 1;
    let dev = mqblk_core::Device::new(drv, cfg).unwrap();
    let mut ctx = dev.context().unwrap();
    ctx.completion_fd().unwrap();
    // The first read holds the one tag; the second waits for it, and
    // leaves the first's completion for the caller: the completion fd
    // announces it, and nobody polls it away.
    ctx.submit(read_bio(0)).unwrap();
    ctx.submit(read_bio(65536)).unwrap();
    assert_eq!(ctx.ready(), 1, "the first read waits to be polled");
    // The third waits 200 ms for the second's tag, with the fd readable.
    let before = polls.load(Ordering::Relaxed);
    ctx.submit(read_bio(131072)).unwrap();
    let during = polls.load(Ordering::Relaxed) - before;
    assert!(
        during < 200,
        "{during} driver polls while waiting for one interrupt: the wait spins"
    );
    let mut n = 0;
    while n < 3 {
        n += ctx.poll_wait(1, |c| assert!(c.status().is_ok()));
    }
}
