//! mqblk's rbd driver: Ceph RBD images through librbd's asynchronous API,
//! the road past one machine. The layer (queues, tags, schedulers, QoS,
//! stats, NBD export) sits in front of the image, as the kernel's `rbd`
//! driver and `rbd-nbd` do.
//!
//! Spec: `rbd:POOL/IMAGE[@SNAP][,conf=PATH][,id=NAME][,create=SIZE]
//! [,cache=on|off][,handles=shared|queue]` plus the common options. A
//! snapshot is opened read-only. `create=SIZE` creates the image if it
//! does not exist. `cache` overrides librbd's `rbd_cache`; the device
//! reports a volatile write cache exactly when librbd's cache acknowledges
//! writes before the OSDs have them, so flush and FUA keep their meaning.
//! `io_timeout_ms` also bounds librados (`rados_osd_op_timeout`), so a
//! dead OSD fails I/O with a timeout instead of hanging it.
//!
//! Modules, control plane first:
//! - `spec`: the spec's target and options (pure parsing).
//! - `cluster`: connection, pool, image handles, typed open errors.
//! - `driver`: the data plane, from `queue_rq` to completion.
//! - `ffi`: the librados/librbd declarations, checked against the headers
//!   by `tests/ffi_header.rs`.
//!
//! librbd is found at build time (`build.rs`); without its headers the
//! driver is built out ([`AVAILABLE`] is false) and [`open`] says which
//! package to install.

pub mod spec;

#[cfg(mqblk_librbd)]
mod cluster;
#[cfg(mqblk_librbd)]
pub mod driver;
/// Public only for `tests/ffi_header.rs`, which checks it against the
/// headers.
#[cfg(mqblk_librbd)]
#[doc(hidden)]
pub mod ffi;

use std::sync::atomic::{AtomicU32, Ordering};

use mqblk_core::error::{Error, Result};
use mqblk_core::queue::{Device, DeviceConfig};
use mqblk_core::spec::SpecOptions;

#[cfg(mqblk_librbd)]
pub use cluster::OpenError;

/// True if this build has the driver (librbd's headers were found).
pub const AVAILABLE: bool = cfg!(mqblk_librbd);

/// The Debian packages the driver builds against.
pub const PACKAGES: &str = "librbd-dev librados-dev";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Open `POOL/IMAGE[@SNAP]` (the spec's target) as a device.
pub fn open(target: &str, mut opts: SpecOptions) -> Result<Device> {
    let t = spec::parse_target(opts.spec(), target)?;
    let ro = spec::take_options(&mut opts)?;
    let name = format!("rbd{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let mut cfg = DeviceConfig::new(name.clone(), 0);
    cfg.take_common(&mut opts)?;
    opts.finish()?;
    open_image(name, t, ro, cfg)
}

#[cfg(not(mqblk_librbd))]
fn open_image(
    name: String,
    _t: spec::RbdTarget,
    _o: spec::RbdOptions,
    _cfg: DeviceConfig,
) -> Result<Device> {
    Err(Error::Setup {
        device: name.into(),
        reason: format!(
            "this mqblk was built without librbd (its headers were not found at build time); \
             install {PACKAGES} (apt-get install {PACKAGES}) and rebuild"
        ),
    })
}

#[cfg(mqblk_librbd)]
fn open_image(
    name: String,
    t: spec::RbdTarget,
    o: spec::RbdOptions,
    mut cfg: DeviceConfig,
) -> Result<Device> {
    use std::sync::Arc;
    let setup = |e: OpenError| Error::Setup {
        device: name.as_str().into(),
        reason: format!("rbd:{}/{}: {e}", t.pool, t.image),
    };
    let cluster = Arc::new(cluster::Cluster::connect(&o, cfg.timeout_ms).map_err(setup)?);
    let io = Arc::new(cluster::IoCtx::new(cluster, &t.pool).map_err(setup)?);
    if let (Some(size), None) = (o.create_bytes, &t.snap) {
        io.create_image(&t.image, size).map_err(setup)?;
    }
    let drv = driver::RbdDriver::new(
        name.clone(),
        io,
        t.clone(),
        o.handles,
        cfg.read_only,
        cfg.nr_hw_queues,
    )
    .map_err(setup)?;
    cfg.capacity_bytes = drv.size_bytes();
    Device::new(drv, cfg)
}
