//! The io_uring engine's interrupt line in its default `wait=poll` mode
//! (`uring.rs`): a context's completion fd becomes readable when a read
//! completes, is quiet again once `poll` took the completion, and stays
//! quiet while a read is in flight and nothing completes (a FUSE server
//! that holds the read, see `hang_fuse`), so a waiter on it sleeps instead
//! of spinning. Run with the default options (DEFER_TASKRUN, where the
//! kernel has it) and with no task-run flags (`taskrun=off`);
//! `taskrun=coop` has no line.
//!
//! No assertion depends on timing: a readable fd is waited for with a
//! bound that only proves nothing hangs, and the quiet windows hold only
//! because nothing can complete in them.

mod common;
mod hang_fuse;

use std::os::fd::RawFd;

use common::{open, pattern, Scratch};
use hang_fuse::Mount;
use mqblk_core::bio::Bio;
use mqblk_core::error::Status;
use mqblk_core::Context;

/// The options of the ring flavors that get a line: the default
/// (DEFER_TASKRUN, else no flags), and no flags.
const FLAVORS: [&str; 2] = ["", "taskrun=off"];

/// How long a readable fd is waited for: proves only that nothing hangs.
const BOUND_MS: i32 = 10_000;
/// Wake-ups allowed before a completion arrives: a guard against a loop
/// that never ends, not a measure of spinning.
const WAKEUPS_MAX: u32 = 1_000;

/// `poll(2)` on `fd` for input: 1 if readable, 0 if `timeout_ms` passed.
fn readable(fd: RawFd, timeout_ms: i32) -> i32 {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: pfd is one live pollfd, and the count says one.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r >= 0 {
            return r;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "poll: {e}");
    }
}

/// Sleep on the completion fd and poll until `want` completions came;
/// returns their statuses and private values.
fn take(ctx: &mut Context, fd: RawFd, want: usize) -> Vec<(u64, Status)> {
    let mut got = Vec::new();
    let mut wakeups = 0;
    loop {
        ctx.poll(|c| got.push((c.private(), c.status())));
        if got.len() >= want {
            return got;
        }
        assert_eq!(
            readable(fd, BOUND_MS),
            1,
            "the completion fd stayed quiet for {BOUND_MS} ms with {} of {want} reads \
             in flight",
            want - got.len()
        );
        wakeups += 1;
        assert!(wakeups < WAKEUPS_MAX, "{wakeups} wake-ups for {want} reads");
    }
}

fn reads_fire_the_line_and_taking_them_quiets_it(opts: &str) {
    let label = if opts.is_empty() { "defaults" } else { opts };
    let scratch = Scratch::new("irq-line");
    let path = scratch.path("f");
    let mut data = vec![0u8; 1 << 20];
    pattern(&mut data, 0, 5);
    std::fs::write(&path, &data).unwrap();
    let dev = open(&path, opts).unwrap();
    assert!(
        dev.has_irq_lines(),
        "{label}: the io_uring engine with wait=poll has no interrupt line"
    );
    let mut ctx = dev.context().unwrap();
    let fd = ctx.completion_fd().unwrap();
    assert_eq!(
        readable(fd, 0),
        0,
        "{label}: readable with nothing in flight"
    );

    // One read: the fd fires, then the completion is taken.
    ctx.submit(Bio::read_at(4096, dev.alloc_buf(4096))).unwrap();
    ctx.unplug();
    assert_eq!(
        readable(fd, BOUND_MS),
        1,
        "{label}: the completion fd did not fire within {BOUND_MS} ms of a read"
    );
    let got = take(&mut ctx, fd, 1);
    assert_eq!(got[0].1, Status::Ok, "{label}");
    assert_eq!(ctx.in_flight(), 0);
    assert_eq!(
        readable(fd, 0),
        0,
        "{label}: the completion fd is still readable after its completion was taken"
    );

    // A batch of reads, each checked, then quiet again.
    let mut bios = Vec::new();
    for i in 0..16u64 {
        let mut bio = Bio::read_at(i * 65536, dev.alloc_buf(4096));
        bio.private = i;
        bios.push(bio);
    }
    for bio in bios {
        ctx.submit(bio).unwrap();
    }
    ctx.unplug();
    let mut got = Vec::new();
    let mut bufs = Vec::new();
    let mut wakeups = 0;
    while got.len() < 16 {
        ctx.poll(|c| {
            got.push((c.private(), c.status()));
            bufs.push((c.private(), c.into_bio()));
        });
        if got.len() < 16 {
            assert_eq!(readable(fd, BOUND_MS), 1, "{label}: no wake-up for a batch");
            wakeups += 1;
            assert!(wakeups < WAKEUPS_MAX, "{label}: {wakeups} wake-ups");
        }
    }
    assert!(
        got.iter().all(|&(_, s)| s == Status::Ok),
        "{label}: {got:?}"
    );
    for (i, bio) in bufs {
        let b = bio.into_buffers().next().unwrap();
        let off = (i * 65536) as usize;
        assert_eq!(
            b.as_slice()[..4096],
            data[off..off + 4096],
            "{label}: read {i}"
        );
    }
    assert_eq!(ctx.in_flight(), 0);
    assert_eq!(
        readable(fd, 0),
        0,
        "{label}: readable after a batch was taken"
    );
    // Nothing in flight: a blocking wait sleeps through its timeout.
    assert_eq!(readable(fd, 200), 0, "{label}: readable while idle");
}

#[test]
fn default_reads_fire_the_line_and_taking_them_quiets_it() {
    reads_fire_the_line_and_taking_them_quiets_it(FLAVORS[0]);
}

#[test]
fn plain_reads_fire_the_line_and_taking_them_quiets_it() {
    reads_fire_the_line_and_taking_them_quiets_it(FLAVORS[1]);
}

#[test]
fn the_default_engine_has_the_line() {
    let scratch = Scratch::new("irq-default");
    let dev = open(&scratch.file("f", 1 << 20), "").unwrap();
    assert!(dev.has_irq_lines());
    // Polled completions and COOP_TASKRUN get none (see `uring.rs`).
    let dev = open(&scratch.file("g", 1 << 20), "taskrun=coop").unwrap();
    assert!(!dev.has_irq_lines());
}

/// Not a test: the FUSE server, when the test binary runs itself as it
/// (see `hang_fuse::Mount::start`). Returns at once otherwise.
#[test]
fn fuse_server() {
    hang_fuse::serve_if_helper();
}

/// Reads at or past this offset are never answered while the server runs.
const HANG_FROM: u64 = 512 << 10;

fn a_held_read_leaves_the_line_quiet(opts: &str) {
    let m = match Mount::start(&format!("irq-{}", opts.replace('=', "-")), HANG_FROM) {
        Ok(m) => m,
        Err(why) => {
            mqblk_test_support::skip_unless_ci(&why);
            return;
        }
    };
    let opts = ["direct=1", opts].join(",");
    let opts = opts.trim_end_matches(',');
    let dev = open(&m.disk(), opts).expect("open the FUSE file");
    assert!(dev.has_irq_lines(), "{opts}");
    let mut ctx = dev.context().unwrap();
    let fd = ctx.completion_fd().unwrap();
    // An answered read first: the line fires and quiets as on any file.
    ctx.submit(Bio::read_at(0, dev.alloc_buf(4096))).unwrap();
    ctx.unplug();
    assert_eq!(take(&mut ctx, fd, 1)[0].1, Status::Ok);
    assert_eq!(
        readable(fd, 0),
        0,
        "{opts}: readable after the answered read"
    );

    // A read the server holds: in flight, and nothing completes, so the fd
    // must stay quiet (a waiter sleeps, where it used to spin).
    ctx.submit(Bio::read_at(HANG_FROM, dev.alloc_buf(4096)))
        .unwrap();
    ctx.unplug();
    assert_eq!(ctx.poll(|_| {}), 0, "{opts}: the held read completed");
    assert_eq!(ctx.in_flight(), 1);
    assert_eq!(
        readable(fd, 300),
        0,
        "{opts}: the completion fd is readable while the only read in flight is held; server \
         events:\n{}",
        m.events()
    );

    // The server dies: the read ends with an error, which fires the line;
    // once taken, the fd is quiet.
    m.signal(libc::SIGKILL);
    let got = take(&mut ctx, fd, 1);
    assert_ne!(got[0].1, Status::Ok, "{opts}: the held read succeeded");
    assert_eq!(ctx.in_flight(), 0);
    assert_eq!(readable(fd, 0), 0, "{opts}: readable after the failed read");
    drop(ctx);
    drop(dev);
}

#[test]
fn default_a_held_read_leaves_the_line_quiet() {
    a_held_read_leaves_the_line_quiet(FLAVORS[0]);
}

#[test]
fn plain_a_held_read_leaves_the_line_quiet() {
    a_held_read_leaves_the_line_quiet(FLAVORS[1]);
}
