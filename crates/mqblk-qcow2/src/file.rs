//! The image file: its path, header and geometry, and the synchronous
//! metadata I/O on it (pread/pwrite on a descriptor of its own, which
//! shares the page cache with the file device that carries the data,
//! opened with `direct=0`). The file device is opened here too: it holds
//! the image's lock, exclusive to write and shared to read.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mqblk_core::queue::{Device, DeviceConfig};

use crate::error::{Qcow2Error, Result};
use crate::header::Header;

/// An image file open for metadata I/O.
#[derive(Debug)]
pub struct ImageFile {
    /// The path, as errors name it.
    pub name: Arc<str>,
    /// The path it was opened by.
    pub path: PathBuf,
    pub(crate) file: File,
    /// The header as read at open.
    pub hdr: Header,
    pub(crate) writable: bool,
    /// Cluster size.
    pub(crate) cs: u64,
    /// log2 of the entries of an L2 table.
    pub(crate) l2_bits: u32,
    /// What the data path shares with the metadata: the mapping's
    /// generation, the epoch, and each hardware queue's I/O in flight.
    pub(crate) mapped: Mapped,
}

/// Data I/Os one hardware queue sent to the file device and that have not
/// ended yet, by the epoch they were counted in. On a cache line of its
/// own: only its queue writes it; the write-back (under the metadata lock)
/// reads it.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct InFlight(pub(crate) [AtomicU64; 2]);

/// The data path's view of the mapping, without the metadata lock.
///
/// - `gen` rises (under the lock) whenever an L2 entry that reads as a
///   plain data cluster written in place (allocated, not compressed, not
///   zero, COPIED) stops being one, or an L2 table moves: a queue's L2
///   slices ([`crate::slice`]) of an older generation are not trusted.
///   An allocation (unallocated to data) does not raise it: a stale slice
///   then only sends the request the locked way once.
/// - A cluster freed in an epoch is given back only once every I/O
///   counted before the free has ended (one planned on the old mapping
///   may still be bound for it): the write-back turns the epoch only when
///   no queue has I/O left in the epoch before ([`Mapped::in_flight`]).
///   A queue counts its I/O (SeqCst), then reads `gen` again (SeqCst);
///   the free raises `gen` (SeqCst) before the write-back reads the
///   counts (SeqCst): either the queue sees the new generation and plans
///   again under the lock, or the write-back sees its count.
#[derive(Debug, Default)]
pub struct Mapped {
    pub(crate) gen: AtomicU64,
    /// The epoch new I/O is counted in (a copy of the metadata's).
    pub(crate) epoch: AtomicUsize,
    /// Every hardware queue's counts (taken when a queue is set up and by
    /// the write-back, never on the data path).
    pub(crate) queues: Mutex<Vec<Arc<InFlight>>>,
    /// Requests the queues planned from their slices, over the queues
    /// that have gone.
    pub(crate) slice_hits: AtomicU64,
    /// Requests they planned under the lock.
    pub(crate) slice_misses: AtomicU64,
    /// Bytes their slices took.
    pub(crate) slice_bytes: AtomicU64,
    /// Clones they sent to the file device.
    pub(crate) clones_sent: AtomicU64,
}

impl Mapped {
    /// A new queue's counts.
    pub(crate) fn register(&self) -> Arc<InFlight> {
        let c = Arc::new(InFlight::default());
        self.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c.clone());
        c
    }

    /// I/O in flight in `epoch`, over every queue.
    pub(crate) fn in_flight(&self, epoch: usize) -> u64 {
        let q = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().map(|c| c.0[epoch].load(Ordering::SeqCst)).sum()
    }

    /// The mapping changed in a way a queue's slices may hold.
    pub(crate) fn bump(&self) {
        self.gen.fetch_add(1, Ordering::SeqCst);
    }
}

pub(crate) fn io_err(
    image: &Arc<str>,
    what: &'static str,
    offset: u64,
    len: u64,
) -> impl FnOnce(std::io::Error) -> Qcow2Error {
    let image = image.clone();
    move |source| Qcow2Error::Io {
        image,
        what,
        offset,
        len,
        source,
    }
}

/// Read `buf.len()` bytes at `offset`; bytes past the end of the file
/// read as zeros.
pub(crate) fn pread(
    file: &File,
    image: &Arc<str>,
    what: &'static str,
    offset: u64,
    buf: &mut [u8],
) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                buf[done..].fill(0);
                return Ok(());
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(image, what, offset, buf.len() as u64)(e)),
        }
    }
    Ok(())
}

impl ImageFile {
    pub(crate) fn pread(&self, what: &'static str, offset: u64, buf: &mut [u8]) -> Result<()> {
        pread(&self.file, &self.name, what, offset, buf)
    }

    pub(crate) fn pwrite(&self, what: &'static str, offset: u64, buf: &[u8]) -> Result<()> {
        self.file.write_all_at(buf, offset).map_err(io_err(
            &self.name,
            what,
            offset,
            buf.len() as u64,
        ))
    }

    pub(crate) fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(io_err(&self.name, "fdatasync", 0, 0))
    }
}

/// Open the image file as a file device: the data path, and the lock
/// (exclusive to write, shared to read). A writable image gets room to
/// grow to `limit` bytes (the file is extended, sparse, and trimmed back
/// to its last cluster at close).
pub(crate) fn open_file_device(
    path: &Path,
    writable: bool,
    limit: u64,
) -> mqblk_core::Result<Device> {
    let mut cfg = mqblk_file::FileConfig::new(path);
    cfg.direct = false;
    cfg.fixed_bufs_bytes = 0;
    cfg.read_only = !writable;
    if writable {
        cfg.size_bytes = Some(limit);
        cfg.create = true;
    }
    let mut dev = DeviceConfig::new(format!("{}-file", path.display()), 0);
    dev.nr_hw_queues = 1;
    dev.read_only = !writable;
    mqblk_file::create(cfg, dev)
}
