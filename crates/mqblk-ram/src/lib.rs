//! mqblk's ram block driver, modelled on Linux's brd
//! (drivers/block/brd.c, `/dev/ramN`): a memory-backed, sparse disk.
//!
//! A driver sits at the end of the pipeline: `caller → Bio → plug →
//! software queue → scheduler → hardware queue → driver → completion`. This
//! one keeps the device's data in 4 KiB pages in process memory, allocated
//! on first write and shared by every hardware queue (behind sharded locks,
//! so queues rarely contend). A range never written is a hole: it reads as
//! zeros and takes no memory. Discard and write-zeroes free whole pages
//! again, so a device can be far larger than the machine's memory, and what
//! it holds is observable ([`Store::resident_bytes`]). Every request is
//! done and completed inside `queue_rq`.
//!
//! It uses only the public driver API of [`mqblk_core`].
//!
//! A device is named by a spec string such as `ram,size=1G,block_size=4k`;
//! [`open`] takes the options after `ram,`. See [`RamConfig`] for the ram
//! options, and [`mqblk_core::queue::DeviceConfig::take_common`] for the
//! options every device kind accepts (`hw_queues`, `queue_depth`, ...).
//!
//! ```
//! let spec = mqblk_core::spec::parse("ram,size=1G").unwrap();
//! let (dev, store) = mqblk_ram::open_with_store(spec.options).unwrap();
//! assert!(dev.name().starts_with("ram"));
//! let mut ctx = dev.context().unwrap();
//! let mut buf = dev.alloc_buf(4096);
//! buf.as_mut_slice().fill(7);
//! ctx.write_at(buf.as_slice(), 1 << 20).unwrap();
//! assert_eq!(store.resident_bytes(), 4096);
//! ctx.discard(0, 1 << 30).unwrap();
//! assert_eq!(store.resident_bytes(), 0);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Control plane: the options.
pub mod config;

// Data plane, in the order a request meets them.
pub mod driver;

pub mod store;
mod xarray;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use mqblk_core::error::{Error, Result};
use mqblk_core::queue::{Device, DeviceConfig};
use mqblk_core::spec::SpecOptions;

pub use crate::config::RamConfig;
pub use crate::driver::RamDriver;
pub use crate::store::{OutOfMemory, Store};

/// The number of the next ram device (`ram0`, `ram1`, ...).
static NEXT_DEVICE: AtomicU32 = AtomicU32::new(0);

/// A fresh device name: `ram0`, `ram1`, ... in creation order.
pub fn next_device_name() -> String {
    format!("ram{}", NEXT_DEVICE.fetch_add(1, Ordering::Relaxed))
}

/// Open a ram device from spec options (the part after `ram,`, the
/// `options` of a parsed [`mqblk_core::spec::DeviceSpec`]).
///
/// Takes the ram options ([`RamConfig::from_options`]: `size`, required,
/// and `block_size`) and the common ones ([`DeviceConfig::take_common`]);
/// any other key is an error naming it. The device is named `ramN`.
pub fn open(opts: SpecOptions) -> Result<Device> {
    open_with_store(opts).map(|(dev, _)| dev)
}

/// As [`open`], and also hand back the device's [`Store`], to watch the
/// memory it holds ([`Store::resident_bytes`]).
pub fn open_with_store(mut opts: SpecOptions) -> Result<(Device, Arc<Store>)> {
    let cfg = RamConfig::from_options(&mut opts)?;
    let mut dev = DeviceConfig::new(String::new(), cfg.size_bytes);
    dev.take_common(&mut opts)?;
    opts.finish()?;
    dev.name = next_device_name();
    create(cfg, dev)
}

/// Create a ram device from a configuration built in code, and hand back
/// its [`Store`].
///
/// The capacity is `cfg.size_bytes` (it replaces `dev.capacity_bytes`);
/// `dev` supplies the name and the common settings: hardware queues, tag
/// depth, queue mode, and so on. A `cfg` that [`RamConfig::check`] rejects
/// is a setup error.
pub fn create(cfg: RamConfig, mut dev: DeviceConfig) -> Result<(Device, Arc<Store>)> {
    cfg.check().map_err(|reason| Error::Setup {
        device: dev.name.as_str().into(),
        reason,
    })?;
    dev.capacity_bytes = cfg.size_bytes;
    let driver = RamDriver::new(cfg, &dev);
    let store = driver.store().clone();
    Ok((Device::new(driver, dev)?, store))
}
