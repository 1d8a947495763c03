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

// Unsafe code only in `slab` (raw page memory), each block argued.
#![deny(unsafe_code)]
#![warn(missing_docs)]

// Control plane: the options.
pub mod config;

// Data plane, in the order a request meets them.
pub mod driver;

pub mod store;

// Below the store: its page allocator, and its chunk index.
mod slab;
mod xarray;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
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
    let size_bytes = cfg.size_bytes;
    let driver = RamDriver::new(cfg, &dev);
    let store = driver.store().clone();
    let device = Device::new(driver, dev)?;
    warn_past_memory(device.name(), size_bytes);
    Ok((device, store))
}

/// Set once the warning of [`warn_past_memory`] was printed.
static WARNED_PAST_MEMORY: AtomicBool = AtomicBool::new(false);

/// Warn once per process, on stderr, when a ram device is larger than the
/// machine's memory: it opens, being sparse, and works until what is
/// written to it outgrows memory.
fn warn_past_memory(name: &str, size_bytes: u64) {
    let Some(memory_bytes) = memory_bytes() else {
        return;
    };
    if let Some(w) = past_memory_warning(name, size_bytes, memory_bytes) {
        if !WARNED_PAST_MEMORY.swap(true, Ordering::Relaxed) {
            eprintln!("mqblk: warning: {w}");
        }
    }
}

/// The warning for a device of `size_bytes` on a machine of
/// `memory_bytes`, if it is larger.
pub fn past_memory_warning(name: &str, size_bytes: u64, memory_bytes: u64) -> Option<String> {
    (size_bytes > memory_bytes).then(|| {
        format!(
            "{name} is {} ({size_bytes} bytes), more than this machine's memory of {} \
             ({memory_bytes} bytes): it opens, being sparse, but it cannot hold more data \
             than memory does (discard what is no longer needed, or make it smaller)",
            gib(size_bytes),
            gib(memory_bytes)
        )
    })
}

/// `bytes` in GiB, or in TiB from 1 TiB on.
fn gib(bytes: u64) -> String {
    if bytes >= 1 << 40 {
        format!("{:.1} TiB", bytes as f64 / (1u64 << 40) as f64)
    } else {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    }
}

/// Under Miri, whose isolation hides the host's files: not known (the
/// warning is tested through `past_memory_warning`).
#[cfg(miri)]
fn memory_bytes() -> Option<u64> {
    None
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), if known.
#[cfg(not(miri))]
fn memory_bytes() -> Option<u64> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open("/proc/meminfo")
        .ok()?
        .take(64 << 10)
        .read_to_string(&mut text)
        .ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_past_memory_is_warned_of_with_both_sizes() {
        let w = past_memory_warning("ram3", 100 << 40, 24 << 30).unwrap();
        assert!(w.starts_with("ram3 is 100.0 TiB (109951162777600 bytes), more than this machine's memory of 24.0 GiB (25769803776 bytes)"), "{w}");
        assert_eq!(past_memory_warning("ram3", 24 << 30, 24 << 30), None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc/meminfo, which Miri's isolation hides")]
    fn the_machine_s_memory_is_read() {
        assert!(memory_bytes().is_some_and(|m| m > 0));
    }
}
