//! A stacked device's interrupt lines stay one level deep however deep the
//! stack: a context's completion fd on top of three stacked levels over a
//! polled leaf (null with `completion=timer`, whose line is a timerfd) goes
//! into an event loop's epoll set, and wakes it for every completion, also
//! for legs opened after the fd was made. Nested epoll sets, one per level,
//! passed the kernel's limit (ELOOP) at this depth.

use std::time::{Duration, Instant};

use mqblk_core::spec::parse;
use mqblk_core::{Bio, Context, Device, Error, IoBuf, Result};
use rustix::event::epoll;
use rustix::fd::{BorrowedFd, OwnedFd};

/// The leaf's completion time: long enough that a fd which is readable
/// before it has passed was not woken by the leaf.
const COMPLETION_NS: u64 = 200_000_000;
/// A wait on the event loop's set that passes this failed (not a timing
/// claim: a completion is due within `COMPLETION_NS`).
const WAKE_MAX: Duration = Duration::from_secs(10);
const SIZE: u64 = 1 << 20;

/// Opens `null` specs and `deep:N`: N stacked levels (two linear lines
/// each, so that none is a mere remapped window) over a timer-completed
/// null device.
struct Opener;

impl Opener {
    fn open(&self, spec: &str) -> Result<Device> {
        let dev = match spec.strip_prefix("deep:") {
            Some("0") => self.open(&format!(
                "null,size={SIZE},completion=timer,completion_nsec={COMPLETION_NS}"
            ))?,
            Some(n) => {
                let n: u32 = n.parse().unwrap();
                let half = SIZE / 512 / 2;
                let table = format!(
                    "0 {half} linear deep:{} 0;{half} {half} linear deep:{} {half}",
                    n - 1,
                    n - 1
                );
                let dev = mqblk_dm::open_inline(
                    &table,
                    parse(&format!("dm-table:{table}")).unwrap().options,
                    &mqblk_dm::Nesting::default(),
                    &|s, _| self.open(s),
                )?;
                assert!(dev.has_irq_lines(), "level {n} hands its leaf's lines up");
                dev
            }
            None if spec.starts_with("null") => mqblk_null::open(parse(spec)?.options)?,
            None => return Err(Error::spec(spec, "not in this test")),
        };
        Ok(dev)
    }
}

/// An event loop's epoll set holding `ctx`'s completion fd.
fn event_loop(ctx: &mut Context) -> OwnedFd {
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).unwrap();
    let fd = ctx.completion_fd().unwrap();
    // SAFETY: the fd is the context's, open while it lives; the borrow
    // lasts for the call.
    let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
    epoll::add(
        &ep,
        bfd,
        epoll::EventData::new_u64(7),
        epoll::EventFlags::IN,
    )
    .expect("a completion fd three stacks deep goes in an epoll set");
    ep
}

fn readable(ep: &OwnedFd, max: Duration) -> bool {
    let mut events: Vec<epoll::Event> = Vec::with_capacity(1);
    let t = rustix::event::Timespec {
        tv_sec: max.as_secs() as i64,
        tv_nsec: i64::from(max.subsec_nanos()),
    };
    matches!(
        epoll::wait(ep, rustix::buffer::spare_capacity(&mut events), Some(&t)),
        Ok(n) if n > 0
    )
}

/// `n` reads, 8 at a time, each round slept for on the event loop's set
/// only. Returns how many completed.
fn reads_through_the_loop(ctx: &mut Context, ep: &OwnedFd, n: u64) -> u64 {
    let mut done = 0u64;
    let mut sent = 0u64;
    while done < n {
        let round_start = Instant::now();
        while sent < n && sent - done < 8 {
            ctx.submit(Bio::read_at((sent % 256) * 4096, IoBuf::page_aligned(4096)))
                .unwrap();
            sent += 1;
        }
        ctx.unplug();
        let mut got = ctx.poll(|c| c.result().unwrap()) as u64;
        if got == 0 && round_start.elapsed() < Duration::from_nanos(COMPLETION_NS / 2) {
            // In flight on a polled leaf that has not fired: the fd is
            // quiet (the loop sleeps), not kept readable as a poller's is.
            assert!(
                !readable(ep, Duration::ZERO),
                "the completion fd is readable with every line quiet"
            );
        }
        while got == 0 {
            assert!(
                readable(ep, WAKE_MAX),
                "no wake-up within {WAKE_MAX:?} with {} reads in flight",
                sent - done
            );
            got += ctx.poll(|c| c.result().unwrap()) as u64;
        }
        done += got;
    }
    done
}

#[test]
#[cfg_attr(miri, ignore = "epoll sets and timerfds")]
fn a_completion_fd_three_stacks_deep_wakes_an_event_loop_for_every_read() {
    let o = Opener;
    let top = o.open("deep:3").unwrap();
    assert!(!top.completes_async());
    let mut ctx = top.context().unwrap();
    let ep = event_loop(&mut ctx);
    let t = Instant::now();
    let n = reads_through_the_loop(&mut ctx, &ep, 32);
    eprintln!(
        "32 reads through 3 stacked levels: {n} answered in {:?}",
        t.elapsed()
    );
    assert_eq!(n, 32);
}

#[test]
#[cfg_attr(miri, ignore = "epoll sets and timerfds")]
fn a_leg_opened_after_the_completion_fd_was_made_wakes_it_too() {
    let o = Opener;
    let top = o.open("deep:3").unwrap();
    let mut ctx = top.context().unwrap();
    let ep = event_loop(&mut ctx);
    assert_eq!(reads_through_the_loop(&mut ctx, &ep, 8), 8);
    // A new two-level stack takes the place of the top's leg: the top's
    // hardware queue opens a context on it at its next I/O, after the
    // completion fd was made and put in the loop.
    let fresh = o.open("deep:2").unwrap();
    let handle = mqblk_dm::find(top.name()).expect("the top is a stacked device");
    handle.legs().replace(0, Some(fresh), "deep:2 (fresh)");
    let t = Instant::now();
    let n = reads_through_the_loop(&mut ctx, &ep, 16);
    eprintln!(
        "16 reads through a leg opened late: {n} answered in {:?}",
        t.elapsed()
    );
    assert_eq!(n, 16);
}
