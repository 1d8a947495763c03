//! Futures over a context, built on std's `Waker`, with no runtime required
//! ([`block_on`] is enough to drive them, and so is any executor).
//!
//! Front end, beside the blocking and callback APIs. An [`AsyncContext`]
//! wraps a context so several futures can share it; each future submits
//! its bio on first poll, then reaps the context when polled. A pending
//! future sleeps until something can finish its I/O:
//! - the waker stored in its bio slot is woken by whichever future reaps it;
//! - on a driver that completes from its own thread, the hardware queue's
//!   notify wakes it;
//! - on a driver that completes when polled, the context's completion fd
//!   does: the driver's interrupt line (a timer's timerfd, an NBD socket,
//!   an io_uring eventfd), a throttled bio's timer, or work ready to run.
//!   An executor has no reactor of ours to wait on that fd, so the
//!   `AsyncContext` keeps one small thread (started by the first future
//!   that has to sleep) that waits on it and wakes the waker.
//!
//! Only a polled driver with no interrupt line at all (null's inline and
//! deferred completions) makes a future ask to be polled again, and only
//! for a bounded number of polls before it sleeps on the fd.
//!
//! Dropping a future before its bio completes is safe: the bio (and its
//! owned buffers) stays with the context until the device is done with it.

use std::cell::RefCell;
use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskCx, Poll, Wake, Waker};
use std::time::Instant;

use crate::bio::Bio;
use crate::buf::IoBuf;
use crate::context::{Context, Waiting};
use crate::error::Result;
use crate::sync::EventFd;

/// A context that futures can share.
pub struct AsyncContext {
    // Declared first: it is dropped (its thread stopped) before the
    // context closes the fd it waits on.
    watch: RefCell<Option<FdWatch>>,
    ctx: RefCell<Context>,
}

impl AsyncContext {
    /// Wrap a context.
    pub fn new(ctx: Context) -> AsyncContext {
        AsyncContext {
            watch: RefCell::new(None),
            ctx: RefCell::new(ctx),
        }
    }

    /// Unwrap it.
    pub fn into_inner(self) -> Context {
        let AsyncContext { watch, ctx } = self;
        drop(watch);
        ctx.into_inner()
    }

    /// A future that submits `bio` and resolves to it with its result.
    pub fn submit(&self, bio: Bio) -> BioFuture<'_> {
        BioFuture {
            actx: self,
            state: State::Unsubmitted(Some(bio)),
            polls: 0,
        }
    }

    /// Have `waker` woken once `fd` (the context's completion fd) is
    /// readable, or at `deadline`, whichever comes first.
    fn sleep_on(&self, fd: Option<RawFd>, deadline: Option<Instant>, waker: &Waker) {
        let mut watch = self.watch.borrow_mut();
        if watch.is_none() {
            match FdWatch::start() {
                Ok(w) => *watch = Some(w),
                Err(_) => {
                    // No thread to be had: poll again rather than hang.
                    waker.wake_by_ref();
                    return;
                }
            }
        }
        if let Some(w) = watch.as_ref() {
            w.arm(fd, deadline, waker);
        }
    }

    /// Read `buf.len()` bytes at `offset_bytes` into `buf`.
    pub async fn read(&self, buf: IoBuf, offset_bytes: u64) -> (IoBuf, Result<()>) {
        let (bio, r) = self.submit(Bio::read_at(offset_bytes, buf)).await;
        (
            bio.into_buffers()
                .next()
                .expect("read bio keeps its buffer"),
            r,
        )
    }

    /// Write `buf` at `offset_bytes`.
    pub async fn write(&self, buf: IoBuf, offset_bytes: u64) -> (IoBuf, Result<()>) {
        let (bio, r) = self.submit(Bio::write_at(offset_bytes, buf)).await;
        (
            bio.into_buffers()
                .next()
                .expect("write bio keeps its buffer"),
            r,
        )
    }

    /// Flush the device's write cache.
    pub async fn flush(&self) -> Result<()> {
        self.submit(Bio::flush()).await.1
    }
}

enum State {
    Unsubmitted(Option<Bio>),
    Submitted(u32),
    Done,
}

/// The future of one bio.
pub struct BioFuture<'a> {
    actx: &'a AsyncContext,
    state: State,
    /// Pending polls so far (the spin budget of an interrupt-less driver).
    polls: u32,
}

impl Future for BioFuture<'_> {
    type Output = (Bio, Result<()>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut ctx = this.actx.ctx.borrow_mut();
        if let State::Unsubmitted(bio) = &mut this.state {
            let bio = bio.take().expect("unsubmitted future holds its bio");
            match ctx.submit_waiter(bio) {
                Ok(idx) => this.state = State::Submitted(idx),
                Err(bio) => {
                    // Back-pressure: try again on the next poll.
                    this.state = State::Unsubmitted(Some(bio));
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
        let State::Submitted(idx) = this.state else {
            panic!("BioFuture polled after completion");
        };
        match ctx.check_waiter(idx, cx.waker(), this.polls) {
            Waiting::Ready => {
                this.state = State::Done;
                Poll::Ready(ctx.take_waiter(idx))
            }
            // check_waiter handed the waker to what wakes it; a request
            // that can time out wakes it by then at the latest, since
            // only a poll notices a timeout.
            Waiting::Subscribed { recheck } => {
                this.polls = this.polls.saturating_add(1);
                drop(ctx);
                if let Some(after) = recheck {
                    this.actx
                        .sleep_on(None, Some(Instant::now() + after), cx.waker());
                }
                Poll::Pending
            }
            Waiting::OnFd(fd) => {
                this.polls = this.polls.saturating_add(1);
                drop(ctx);
                this.actx.sleep_on(Some(fd), None, cx.waker());
                Poll::Pending
            }
        }
    }
}

impl Drop for BioFuture<'_> {
    fn drop(&mut self) {
        if let State::Submitted(idx) = self.state {
            if let Ok(mut ctx) = self.actx.ctx.try_borrow_mut() {
                ctx.orphan_waiter(idx);
            }
        }
    }
}

/// A thread that wakes a future's waker when a completion fd becomes
/// readable, or when a deadline passes: the reactor an executor does not
/// have for our fds and timeouts. It sleeps on a condition variable until
/// a waker is armed, then in poll(2) on the fd (if any) and its own kick
/// eventfd, up to the deadline (if any); each arming wakes one waker once.
struct FdWatch {
    shared: Arc<WatchShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the watch thread waits for.
#[derive(Default)]
struct Armed {
    waker: Option<Waker>,
    fd: Option<RawFd>,
    deadline: Option<Instant>,
    quit: bool,
}

struct WatchShared {
    armed: std::sync::Mutex<Armed>,
    cv: std::sync::Condvar,
    /// Interrupts the thread's poll(2) when it is re-armed or stopped.
    kick: EventFd,
}

impl WatchShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Armed> {
        self.armed.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FdWatch {
    /// Start the thread. An fd it is armed with must stay open until this
    /// is dropped (the context outlives its watch: see `AsyncContext`).
    fn start() -> std::io::Result<FdWatch> {
        let shared = Arc::new(WatchShared {
            armed: std::sync::Mutex::new(Armed::default()),
            cv: std::sync::Condvar::new(),
            kick: EventFd::new()?,
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mqblk-fdwatch".into())
            .spawn(move || watch_loop(&s))?;
        Ok(FdWatch {
            shared,
            thread: Some(thread),
        })
    }

    /// Wake `waker` once `fd` is readable or `deadline` passes (replacing
    /// what was armed before).
    fn arm(&self, fd: Option<RawFd>, deadline: Option<Instant>, waker: &Waker) {
        let mut a = self.shared.lock();
        // An armed deadline that comes first stays (the future polls then
        // and arms again): re-arming costs the thread a wake-up.
        let deadline = match (a.waker.is_some(), a.deadline, deadline) {
            (true, Some(old), Some(new)) if a.fd == fd && old <= new => Some(old),
            _ => deadline,
        };
        let moved = a.fd != fd || a.deadline != deadline;
        if !a.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            a.waker = Some(waker.clone());
        }
        a.fd = fd;
        a.deadline = deadline;
        drop(a);
        self.shared.cv.notify_one();
        if moved {
            self.shared.kick.signal();
        }
    }
}

impl Drop for FdWatch {
    fn drop(&mut self) {
        self.shared.lock().quit = true;
        self.shared.cv.notify_one();
        self.shared.kick.signal();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch_loop(s: &WatchShared) {
    let mut a = s.lock();
    loop {
        if a.quit {
            return;
        }
        if a.waker.is_none() {
            a = s.cv.wait(a).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        let (fd, deadline) = (a.fd, a.deadline);
        let fired = match (fd, deadline) {
            (None, None) => true,
            (None, Some(d)) => {
                // Only a deadline: the condition variable's timed wait
                // (re-arming notifies it).
                let now = Instant::now();
                if now >= d {
                    true
                } else {
                    a =
                        s.cv.wait_timeout(a, d - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    continue;
                }
            }
            (Some(fd), deadline) => {
                drop(a);
                let ready = wait_readable(fd, &s.kick, deadline);
                a = s.lock();
                ready || deadline.is_some_and(|d| Instant::now() >= d)
            }
        };
        // Re-armed meanwhile: look again at what is armed now.
        if fired && a.fd == fd && a.deadline == deadline {
            if let Some(w) = a.waker.take() {
                drop(a);
                w.wake();
                a = s.lock();
            }
        }
    }
}

/// Wait until `fd` is readable (true), the kick fd is, or `deadline`
/// passes (false).
#[cfg(not(miri))]
fn wait_readable(fd: RawFd, kick: &EventFd, deadline: Option<Instant>) -> bool {
    let timeout_ms = match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            // Rounded up: never wake before the deadline.
            left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
        }
    };
    let mut fds = [
        libc::pollfd {
            fd: kick.raw(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` is a live array of two pollfds; the kick fd lives as
    // long as the watch, and the armed fd stays open until its thread is
    // joined.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) };
    if fds[0].revents != 0 {
        // Re-armed or stopped: the caller looks again.
        kick.drain();
    }
    rc > 0 && fds[1].revents != 0
}

/// Miri has no poll(2): say the fd is readable, so the future polls
/// again (it spins, as it would on a driver with no interrupt line).
#[cfg(miri)]
fn wait_readable(_fd: RawFd, _kick: &EventFd, _deadline: Option<Instant>) -> bool {
    std::thread::yield_now();
    true
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Wait for every future of `futs`, polling them together on the current
/// thread (what `futures::future::join_all` does), and return their outputs
/// in order. With [`block_on`], this runs a batch of I/Os at once:
/// `block_on(join_all(bufs.map(|b| actx.read(b, off))))`.
pub async fn join_all<F: Future>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    type Slot<F> = (Pin<Box<F>>, Option<<F as Future>::Output>);
    let mut slots: Vec<Slot<F>> = futs.into_iter().map(|f| (Box::pin(f), None)).collect();
    std::future::poll_fn(move |cx| {
        let mut pending = false;
        for (fut, out) in slots.iter_mut() {
            if out.is_none() {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(
            slots
                .iter_mut()
                .map(|(_, out)| out.take().expect("every future finished"))
                .collect(),
        )
    })
    .await
}

/// Run a future to completion on the current thread.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = TaskCx::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
