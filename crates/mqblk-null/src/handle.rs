//! The test hooks of a running null device (control plane): cut its power,
//! and count what reached the driver.
//!
//! A [`NullHandle`] shares the driver's device-wide state (the write cache
//! and a few counters), so a test can hold it next to the
//! [`mqblk_core::queue::Device`] and act on the device from outside the
//! I/O path, as a power switch and a bus analyser would. Get one from
//! [`crate::open_with_handle`], [`crate::create_with_handle`] or
//! [`crate::NullDriver::handle`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::cache::WriteCache;

/// What the driver and its handles share: the write cache, if any, and
/// counters of what reached the driver.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) cache: Option<WriteCache>,
    /// Flush requests the driver served.
    pub(crate) flushes: AtomicU64,
    /// Write requests the driver served with the FUA flag.
    pub(crate) fua_writes: AtomicU64,
}

impl Shared {
    /// Count one event. Only the flush and FUA paths count, never the
    /// plain fast path.
    #[inline]
    pub(crate) fn count(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }
}

/// A handle on a null device's power and counters. Cheap to clone; every
/// clone acts on the same device, from any thread.
#[derive(Clone, Debug)]
pub struct NullHandle {
    shared: Arc<Shared>,
}

impl NullHandle {
    pub(crate) fn new(shared: Arc<Shared>) -> NullHandle {
        NullHandle { shared }
    }

    /// True if the device has a volatile write cache (`cache_size > 0`).
    pub fn has_write_cache(&self) -> bool {
        self.shared.cache.is_some()
    }

    /// Lose power: drop every cached block that no flush, FUA write or
    /// eviction has written back, as a drive's volatile cache loses its
    /// contents. Afterwards reads return the durable store's content.
    /// Returns the bytes lost; 0 on a device without a write cache.
    ///
    /// A request in flight at the cut may or may not be lost, whole blocks
    /// at a time.
    pub fn power_cut(&self) -> u64 {
        self.shared.cache.as_ref().map_or(0, WriteCache::power_cut)
    }

    /// Bytes in the write cache, not yet durable.
    pub fn cached_bytes(&self) -> u64 {
        self.shared
            .cache
            .as_ref()
            .map_or(0, WriteCache::cached_bytes)
    }

    /// Bytes the cache wrote back on its own because it was full, since
    /// the device was created.
    pub fn evicted_bytes(&self) -> u64 {
        self.shared
            .cache
            .as_ref()
            .map_or(0, WriteCache::evicted_bytes)
    }

    /// Flush requests the driver served since the device was created (a
    /// flush failed by error injection is not served: it writes nothing
    /// back). On a device without a write cache the core completes flushes
    /// itself, so this stays 0.
    pub fn flushes(&self) -> u64 {
        self.shared.flushes.load(Relaxed)
    }

    /// Write requests the driver served with the FUA flag. The core sends
    /// FUA only to a device that declares it (`fua=1` with a cache), so with
    /// `fua=0` this stays 0.
    pub fn fua_writes(&self) -> u64 {
        self.shared.fua_writes.load(Relaxed)
    }
}
