//! The bio throttle (Linux `blk-throttle` and the `rq_qos` `throttle`
//! hook): decides, for each bio before it takes a request, whether it may
//! go now or must wait until a later time.
//!
//! Front of the pipeline: `caller → Bio → throttle → split → plug`. Each
//! context gets its own [`Throttle`] from the device's [`ThrottleType`], so
//! the hook is called without a lock; limits shared between contexts (a
//! group's token bucket) are the implementation's to share, with atomics.
//! A bio told to wait is parked in its context and released by the
//! context's own polling when its time comes: it waits on a clock, not on
//! a thread, and nothing else in the context is held up behind it.

use crate::bio::Bio;

/// The throttle's answer for one bio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Issue it now.
    Now,
    /// Issue it once the monotonic clock ([`crate::clock::now_ns`]) reaches
    /// this many nanoseconds. The throttle has already charged the bio: it
    /// is not asked again.
    At(u64),
}

/// One context's throttle.
pub trait Throttle: Send {
    /// `bio` (read, write, discard or write-zeroes; flushes are never
    /// throttled) is about to be issued at `now_ns`.
    fn admit(&mut self, bio: &Bio, now_ns: u64) -> Admit;
}

/// A kind of throttle: makes one per context.
pub trait ThrottleType: Send + Sync {
    /// Its name, as `info` shows it.
    fn name(&self) -> &str;

    /// The throttle of context `ctx_id`.
    fn for_context(&self, ctx_id: u32) -> Box<dyn Throttle>;
}

impl std::fmt::Debug for dyn ThrottleType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

mod io_max;
mod token_bucket;

pub(crate) use io_max::QosWatch;
pub use io_max::{IoMax, IoMaxLimits, DEFAULT_BURST_MS};
pub use token_bucket::TokenBucket;
