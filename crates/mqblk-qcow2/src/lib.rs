//! mqblk's qcow2 driver: thin images (QEMU's format, versions 2 and 3)
//! over the file driver, with an L2 cache, refcounts of any width, zero
//! and compressed clusters, subclusters (read), internal snapshots (kept)
//! and backing chains, written in QEMU's order so that `qemu-img check`
//! finds at most leaked clusters after a crash.
//!
//! ```text
//! qcow2:PATH[,create=SIZE[,cluster_size=SIZE][,backing=PATH]]
//!           [,backing=PATH][,l2_cache_size=SIZE][,discard=unmap|zero][,ro=1]
//! ```
//!
//! plus the options every device takes. Guest data goes to the image file
//! through a file device (`file:PATH,direct=0`): a request's buffers go
//! straight to the file at the host offsets, pieces contiguous in the file
//! as one. A read or an overwrite of allocated clusters finds its host
//! offsets in its hardware queue's L2 slices, without a lock ([`slice`]).
//! Metadata (tables, refcounts, copy-on-write, compressed and backing
//! reads) is read and written synchronously, under one lock per image,
//! with pread/pwrite on a second descriptor of the same file.
//!
//! Not done: writing images with extended L2 entries (they open with
//! `ro=1`), external data files, encryption, keeping persistent bitmaps
//! (their autoclear bit is cleared on a writable open, as the format asks
//! of a writer that does not keep them), creating or reverting snapshots,
//! and resizing. A request that allocates, or reads anything but data
//! (zeros, backing data, compressed clusters), takes the image's metadata
//! lock.
//!
//! With `MQBLK_QCOW2_STATS=1` in the environment, an image prints its L2
//! cache's figures (memory, hits, misses) on stderr when it closes, for
//! benchmarks of a device whose process ends (`mqblk bench`, `serve`).
//!
//! Modules, in the order an open and a request meet them: the format
//! ([`header`], [`table`], [`refcount`], [`snapshot`], [`compress`]), the
//! checks ([`check`]), making images ([`create`]), the open image
//! ([`image`] on its [`file`], with its [`cache`] and [`backing`] chain),
//! metadata updates ([`cow`] over [`alloc`]), block status ([`status`]),
//! then the data path: the queues' L2 [`slice`]s, the [`clone`]s sent to
//! the file, and the [`driver`].

#![warn(missing_docs)]

// The format: pure parsing and encoding.
pub mod error;

pub mod header;

pub mod table;

pub mod refcount;

pub mod snapshot;

pub mod compress;

pub mod check;

pub mod create;

// The open image: its file and metadata I/O, the L2 cache, the backing
// chain, the image itself, then what changes its metadata.
pub mod file;

pub mod cache;

pub mod backing;

pub mod alloc;

pub mod repair;

pub mod image;

pub mod cow;

pub mod status;

// The data path: the queues' lookup, the clones, the driver.
pub mod slice;

pub mod clone;

pub mod driver;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use mqblk_core::error::{Error, Result};
use mqblk_core::queue::{Device, DeviceConfig};
use mqblk_core::spec::SpecOptions;

pub use crate::backing::Layer;
pub use crate::create::CreateOptions;
pub use crate::error::Qcow2Error;
pub use crate::image::{DiscardMode, Image, OpenOptions};

/// Open images by device name, for `mqblk info`.
static OPEN: Mutex<Vec<(String, Weak<Image>)>> = Mutex::new(Vec::new());

/// The number of the next qcow2 device.
static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Open `qcow2:PATH` with its options (see the crate docs).
pub fn open(target: &str, mut opts: SpecOptions) -> Result<Device> {
    let name = format!(
        "qcow2{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let path = PathBuf::from(target);
    let create = opts.take_size("create")?;
    let cluster_size = opts.take_size("cluster_size")?;
    let backing = opts.take_str("backing");
    let l2 = opts.take_size("l2_cache_size")?;
    let discard = match opts.take_str("discard").as_deref() {
        None | Some("unmap") => DiscardMode::Unmap,
        Some("zero") => DiscardMode::Zero,
        Some(v) => return Err(opts.error("discard", v, "unmap or zero")),
    };
    if cluster_size.is_some() && create.is_none() {
        return Err(opts.error(
            "cluster_size",
            "",
            "cluster_size= together with create=SIZE",
        ));
    }
    let mut dev = DeviceConfig::new(name.clone(), 0);
    dev.take_common(&mut opts)?;
    opts.finish()?;
    if let Some(size) = create {
        let cs = cluster_size.unwrap_or(65536);
        if !cs.is_power_of_two() {
            return Err(Error::Setup {
                device: name.as_str().into(),
                reason: format!("cluster_size={cs}: must be a power of two from 512 to 2M"),
            });
        }
        let b = backing
            .as_ref()
            .map(|b| (b.clone(), probe_format(&path, b)));
        let co = CreateOptions {
            size,
            cluster_bits: cs.trailing_zeros(),
            backing: b,
        };
        create::create(&path, &co).map_err(|e| e.into_setup(&name))?;
    }
    let o = OpenOptions {
        writable: !dev.read_only,
        // After create=, the header names the backing file.
        backing: if create.is_some() {
            None
        } else {
            backing.map(PathBuf::from)
        },
        l2_cache_bytes: l2.unwrap_or(cache::DEFAULT_BYTES),
        discard,
    };
    let img = Image::open(&path, &o, &mut Vec::new()).map_err(|e| e.into_setup(&name))?;
    dev.capacity_bytes = img.hdr.size / 512 * 512;
    let driver = driver::Qcow2Driver {
        img: img.clone(),
        read_only: dev.read_only,
    };
    let device = Device::new(driver, dev)?;
    let mut all = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(_, w)| w.strong_count() > 0);
    all.push((device.name().to_string(), Arc::downgrade(&img)));
    Ok(device)
}

/// The format of backing file `b` named from image `path` (its directory
/// for a relative name): `qcow2` by its magic, else `raw`.
fn probe_format(path: &Path, b: &str) -> String {
    let p = Path::new(b);
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        path.parent().unwrap_or(Path::new(".")).join(p)
    };
    let mut m = [0u8; 4];
    let is_qcow2 = std::fs::File::open(p)
        .and_then(|f| {
            use std::os::unix::fs::FileExt;
            f.read_exact_at(&mut m, 0)
        })
        .is_ok()
        && u32::from_be_bytes(m) == header::MAGIC;
    if is_qcow2 { "qcow2" } else { "raw" }.to_string()
}

/// What `mqblk info` prints for a qcow2 device: `(key, value)` lines.
/// `None` if `device` is not an open qcow2 device.
pub fn info(device: &str) -> Option<Vec<(String, String)>> {
    let img = {
        let all = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().find(|(n, _)| n == device)?.1.upgrade()?
    };
    let h = &img.hdr;
    let mut out = vec![
        ("image".to_string(), img.name.to_string()),
        ("format".to_string(), format!("qcow2 version {}", h.version)),
        ("cluster size".to_string(), img.cs.to_string()),
        ("refcount bits".to_string(), h.refcount_bits().to_string()),
        (
            "compression".to_string(),
            format!("{:?}", h.compression).to_lowercase(),
        ),
        ("extended l2".to_string(), h.extended_l2().to_string()),
    ];
    let (hits, misses, mem, cap) = img.cache_stats();
    out.push((
        "l2 cache".to_string(),
        format!(
            "{mem} of {cap} bytes, {hits} hits, {misses} misses ({:.1}% hits)",
            100.0 * hits as f64 / (hits + misses).max(1) as f64
        ),
    ));
    let mut b = img.backing();
    while let Some(x) = b {
        out.push((
            "backing".to_string(),
            format!("{} ({})", x.name(), x.format()),
        ));
        b = match x {
            backing::Backing::Qcow2(i) => i.backing(),
            backing::Backing::Raw { .. } => None,
        };
    }
    for s in &img.snapshots {
        out.push((
            "snapshot".to_string(),
            format!(
                "id {} name {} vm state {} bytes date {} vm clock {} ns",
                s.id, s.name, s.vm_state_size, s.date_sec, s.vm_clock_nsec
            ),
        ));
    }
    Some(out)
}
