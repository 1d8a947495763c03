//! A pending future sleeps: it asks to be polled again only when its I/O
//! can progress, whatever executor drives it. Each case waits about 1 s
//! for one read and must use under 50 ms of CPU for it (a future that
//! asks to be polled again whenever its driver polls burns the whole
//! second): the null device's timer completion, whose interrupt line is a
//! timerfd, and the NBD client against nbdkit's delay filter, whose line
//! is the socket.
//!
//! The CPU is the process's (getrusage), which counts the thread that
//! watches the completion fd for the executor: this binary holds this one
//! test, so nothing else runs beside it.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::*;
use mqblk::{block_on, AsyncContext};

/// The most CPU a 1 s wait may take: a correctness bound (the future
/// sleeps), not a speed claim; a spinning future takes about the wait.
const CPU_BOUND: Duration = Duration::from_millis(50);

fn cpu() -> Duration {
    // SAFETY: getrusage fills the live struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One read through a future on `spec`, driven by `drive`; returns the
/// wall time and the CPU time it took.
fn one_read(spec: &str, drive: fn(&AsyncContext, mqblk::IoBuf)) -> (Duration, Duration) {
    let dev = mqblk::open(spec).unwrap();
    let actx = AsyncContext::new(dev.context().unwrap());
    // Warm up: the first future starts the fd's watcher thread.
    drive(&actx, dev.alloc_buf(4096));
    let (t, c) = (Instant::now(), cpu());
    drive(&actx, dev.alloc_buf(4096));
    (t.elapsed(), cpu() - c)
}

fn with_mqblk_block_on(actx: &AsyncContext, buf: mqblk::IoBuf) {
    let (_, r) = block_on(actx.read(buf, 0));
    r.unwrap();
}

/// Another executor: a plain thread-parking loop that knows nothing of
/// mqblk (what `futures::executor::block_on` does).
fn with_a_foreign_executor(actx: &AsyncContext, buf: mqblk::IoBuf) {
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(actx.read(buf, 0));
    loop {
        if let Poll::Ready((_, r)) = fut.as_mut().poll(&mut cx) {
            r.unwrap();
            return;
        }
        std::thread::park();
    }
}

fn check(what: &str, (wall, cpu): (Duration, Duration)) {
    println!("{what}: waited {wall:?}, CPU {cpu:?}");
    assert!(
        wall >= Duration::from_millis(900),
        "{what}: the read came back after {wall:?}, before the device's 1 s delay"
    );
    assert!(
        cpu < CPU_BOUND,
        "{what}: a 1 s wait used {cpu:?} of CPU (bound {CPU_BOUND:?}): the future spins"
    );
}

#[test]
fn a_pending_future_sleeps_until_its_io_can_progress() {
    let null = "null,size=1G,completion=timer,completion_nsec=1000000000";
    check(
        "null timer, mqblk::block_on",
        one_read(null, with_mqblk_block_on),
    );
    check(
        "null timer, a foreign executor",
        one_read(null, with_a_foreign_executor),
    );

    // Every read takes 1 s at the server.
    let kit = Nbdkit::start(&["--filter=delay", "memory", "16M", "rdelay=1"]);
    let spec = kit.spec_with("io_timeout_ms=10000");
    check(
        "NBD client, mqblk::block_on",
        one_read(&spec, with_mqblk_block_on),
    );
    check(
        "NBD client, a foreign executor",
        one_read(&spec, with_a_foreign_executor),
    );
}
