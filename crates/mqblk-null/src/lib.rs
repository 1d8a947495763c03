//! mqblk's null block driver, modelled on Linux's null_blk
//! (drivers/block/null_blk).
//!
//! A driver sits at the end of the pipeline: `caller → Bio → plug →
//! software queue → scheduler → hardware queue → driver → completion`. This
//! one completes requests without touching their data, so that a
//! benchmark on it measures the cost of the layer itself. Like null_blk, it
//! can also complete later (at the next poll, or after a delay), keep its
//! data in memory, fail ranges as bad blocks, limit its bandwidth, and
//! inject errors, timeouts and requeues from a seed, to drive the layer's
//! error paths deterministically. With `memory_backed=1,cache_size=N` it
//! models a volatile write cache, and a [`NullHandle`] can cut its power:
//! the crash-consistency test bed for the layer's flush and FUA ordering.
//!
//! It uses only the public driver API of [`mqblk_core`].
//!
//! A device is named by a spec string such as
//! `null,size=1T,completion=timer,completion_nsec=10000`; [`open`] takes
//! the options after `null,`. See [`NullConfig`] for every option and its
//! default, and [`mqblk_core::queue::DeviceConfig::take_common`] for the
//! options every device kind accepts (`hw_queues`, `queue_depth`, ...).
//!
//! ```no_run
//! let spec = mqblk_core::spec::parse("null,size=1G,memory_backed=1").unwrap();
//! let dev = mqblk_null::open(spec.options).unwrap();
//! assert!(dev.name().starts_with("nullb"));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Control plane: the options.
pub mod config;

// Data plane, in the order a request meets them (one group per stage, so
// that rustfmt keeps this order).
pub mod driver;

mod throttle;

pub mod fault;

pub mod bad_blocks;

mod cache;

pub mod store;

pub mod hw_queue;

// Control plane again: test hooks on a running device.
pub mod handle;

use std::sync::atomic::{AtomicU32, Ordering};

use mqblk_core::error::Result;
use mqblk_core::queue::{Device, DeviceConfig};
use mqblk_core::spec::SpecOptions;

pub use crate::bad_blocks::{BadBlocks, SectorRange};
pub use crate::config::{CompletionMode, NullConfig};
pub use crate::driver::NullDriver;
pub use crate::fault::{Fault, FaultAttr, FaultInjector};
pub use crate::handle::NullHandle;
pub use crate::hw_queue::NullQueue;
pub use crate::store::Store;

/// The number of the next null device (`nullb0`, `nullb1`, ...).
static NEXT_DEVICE: AtomicU32 = AtomicU32::new(0);

/// A fresh device name: `nullb0`, `nullb1`, ... in creation order.
pub fn next_device_name() -> String {
    format!("nullb{}", NEXT_DEVICE.fetch_add(1, Ordering::Relaxed))
}

/// Open a null device from spec options (the part after `null,`, the
/// `options` of a parsed [`mqblk_core::spec::DeviceSpec`]).
///
/// Takes the null options ([`NullConfig::from_options`]) and the common
/// ones ([`DeviceConfig::take_common`]); any other key is an error naming
/// it. The device is named `nullbN`.
pub fn open(opts: SpecOptions) -> Result<Device> {
    open_with_handle(opts).map(|(dev, _)| dev)
}

/// Like [`open`], and also return a [`NullHandle`] on the device: its
/// power switch ([`NullHandle::power_cut`]) and counters.
///
/// ```
/// let spec = mqblk_core::spec::parse("null,size=1M,memory_backed=1,cache_size=64k").unwrap();
/// let (dev, power) = mqblk_null::open_with_handle(spec.options).unwrap();
/// let mut ctx = dev.context().unwrap();
/// ctx.write_at(&[7u8; 512], 0).unwrap();
/// power.power_cut(); // never flushed: lost
/// let mut back = [1u8; 512];
/// ctx.read_at(&mut back, 0).unwrap();
/// assert_eq!(back, [0u8; 512]);
/// ```
pub fn open_with_handle(mut opts: SpecOptions) -> Result<(Device, NullHandle)> {
    let cfg = NullConfig::from_options(&mut opts)?;
    let mut dev = DeviceConfig::new(String::new(), cfg.size_bytes);
    dev.take_common(&mut opts)?;
    opts.finish()?;
    dev.name = next_device_name();
    create_with_handle(cfg, dev)
}

/// Create a null device from a configuration built in code.
///
/// The capacity is `cfg.size_bytes` (it replaces `dev.capacity_bytes`);
/// `dev` supplies the name and the common settings: hardware queues, tag
/// depth, queue mode, timeout, and so on.
pub fn create(cfg: NullConfig, dev: DeviceConfig) -> Result<Device> {
    create_with_handle(cfg, dev).map(|(dev, _)| dev)
}

/// Like [`create`], and also return a [`NullHandle`] on the device.
pub fn create_with_handle(cfg: NullConfig, mut dev: DeviceConfig) -> Result<(Device, NullHandle)> {
    dev.capacity_bytes = cfg.size_bytes;
    let driver = NullDriver::new(cfg, &dev)?;
    let handle = driver.handle();
    Ok((Device::new(driver, dev)?, handle))
}
