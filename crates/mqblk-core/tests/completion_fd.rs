//! The completion fd's signals (`Context::set_completion_fd_enabled`,
//! libblkio's `blkioq_set_completion_fd_enabled`): with them off, what
//! completes inside the caller's own calls does not make the fd readable
//! (the caller polls before it waits), turning them on again shows what
//! waits, and completions from a driver's thread still wake the fd.

mod common;

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use common::readable;
use common::Order;
use mqblk_core::{Bio, IoBuf, Op};

/// How long a test waits for the fd to turn readable before it fails (a
/// hang guard, not a timing claim).
const WAIT_MAX_MS: i32 = 10_000;

fn read_bio(offset: u64) -> Bio {
    let mut bio = Bio::at(Op::Read, offset);
    bio.push_segment(IoBuf::page_aligned(4096), 0, 4096);
    bio
}

#[test]
#[cfg_attr(miri, ignore = "an eventfd in an epoll set")]
fn with_signals_on_an_inline_completion_makes_the_fd_readable_until_polled() {
    let (dev, _, _) = common::mem_device(1 << 20, Order::Inline);
    let mut ctx = dev.context().unwrap();
    let fd = ctx.completion_fd().unwrap();
    assert!(!readable(fd, 0), "a new context has nothing to poll");
    ctx.submit(read_bio(0)).unwrap();
    ctx.unplug();
    assert!(readable(fd, 0), "a completion waits for the caller");
    assert_eq!(ctx.poll(|c| assert!(c.status().is_ok())), 1);
    assert!(!readable(fd, 0), "the poll took it");
    // A poll with nothing new leaves it quiet (and reads nothing).
    assert_eq!(ctx.poll(|_| {}), 0);
    assert!(!readable(fd, 0));
}

#[test]
#[cfg_attr(miri, ignore = "an eventfd in an epoll set")]
fn with_signals_off_the_caller_polls_and_turning_them_on_shows_what_waits() {
    let (dev, _, _) = common::mem_device(1 << 20, Order::Inline);
    let mut ctx = dev.context().unwrap();
    let fd = ctx.completion_fd().unwrap();
    ctx.set_completion_fd_enabled(false);
    for i in 0..4 {
        ctx.submit(read_bio(i * 4096)).unwrap();
    }
    ctx.unplug();
    assert!(!readable(fd, 0), "signals off: the fd stays quiet");
    assert_eq!(ctx.poll(|c| assert!(c.status().is_ok())), 4);
    // Something left for the caller when signals come back on: the fd
    // shows it at once.
    ctx.submit(read_bio(0)).unwrap();
    ctx.unplug();
    assert!(!readable(fd, 0));
    ctx.set_completion_fd_enabled(true);
    assert!(readable(fd, 0), "turned on with a completion waiting");
    assert_eq!(ctx.poll(|_| {}), 1);
    assert!(!readable(fd, 0));
}

#[test]
#[cfg_attr(miri, ignore = "a driver thread and an eventfd")]
fn with_signals_off_a_driver_threads_completion_still_wakes_the_fd() {
    let drv = common::Threaded {
        delay: Duration::from_millis(20),
        polls: Arc::new(AtomicU32::new(0)),
        irq_line: false,
    };
    let dev = mqblk_core::Device::new(drv, common::config("threaded0", 1 << 20)).unwrap();
    let mut ctx = dev.context().unwrap();
    let fd = ctx.completion_fd().unwrap();
    ctx.set_completion_fd_enabled(false);
    ctx.submit(read_bio(0)).unwrap();
    ctx.unplug();
    assert!(
        readable(fd, WAIT_MAX_MS),
        "the driver's thread completed the read: the fd must wake within {WAIT_MAX_MS} ms"
    );
    let mut n = 0;
    while n < 1 {
        n += ctx.poll(|c| assert!(c.status().is_ok()));
    }
    // The thread marks the fd written just after its write: a poll between
    // the two leaves it readable once more, and the next poll clears it
    // (one spurious wake, never a fd that stays readable).
    let deadline = std::time::Instant::now() + Duration::from_millis(WAIT_MAX_MS as u64);
    while readable(fd, 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "polls did not clear the fd within {WAIT_MAX_MS} ms"
        );
        assert_eq!(ctx.poll(|_| {}), 0, "nothing more to deliver");
        std::thread::yield_now();
    }
}
