//! Futures over a context, built on std's `Waker`, with no runtime required
//! ([`block_on`] is enough to drive them).
//!
//! Front end, beside the blocking and callback APIs. An [`AsyncContext`]
//! wraps a context so several futures can share it; each future submits
//! its bio on first poll, then reaps the context when polled. A pending
//! future is woken by its completion: the waker stored in its bio slot is
//! woken by whichever future reaps it, and, on a driver that completes from
//! its own thread, the hardware queue's notify wakes it. Only a driver that
//! completes when polled (the null device, io_uring without a waiting
//! thread) makes a pending future ask to be polled again, because nothing
//! but a poll can finish its I/O (the SPDK reactor's way).
//!
//! Dropping a future before its bio completes is safe: the bio (and its
//! owned buffers) stays with the context until the device is done with it.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskCx, Poll, Wake, Waker};

use crate::bio::Bio;
use crate::buf::IoBuf;
use crate::context::Context;
use crate::error::Result;

/// A context that futures can share.
pub struct AsyncContext {
    ctx: RefCell<Context>,
}

impl AsyncContext {
    /// Wrap a context.
    pub fn new(ctx: Context) -> AsyncContext {
        AsyncContext {
            ctx: RefCell::new(ctx),
        }
    }

    /// Unwrap it.
    pub fn into_inner(self) -> Context {
        self.ctx.into_inner()
    }

    /// A future that submits `bio` and resolves to it with its result.
    pub fn submit(&self, bio: Bio) -> BioFuture<'_> {
        BioFuture {
            ctx: &self.ctx,
            state: State::Unsubmitted(Some(bio)),
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
    ctx: &'a RefCell<Context>,
    state: State,
}

impl Future for BioFuture<'_> {
    type Output = (Bio, Result<()>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskCx<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut ctx = this.ctx.borrow_mut();
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
        if ctx.check_waiter(idx, cx.waker()) {
            this.state = State::Done;
            return Poll::Ready(ctx.take_waiter(idx));
        }
        // check_waiter registered the waker: the completion wakes us.
        Poll::Pending
    }
}

impl Drop for BioFuture<'_> {
    fn drop(&mut self) {
        if let State::Submitted(idx) = self.state {
            if let Ok(mut ctx) = self.ctx.try_borrow_mut() {
                ctx.orphan_waiter(idx);
            }
        }
    }
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
