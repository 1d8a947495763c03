//! The image file: its path, header and geometry, and the synchronous
//! metadata I/O on it (pread/pwrite on a descriptor of its own, which
//! shares the page cache with the file device that carries the data,
//! opened with `direct=0`). The file device is opened here too: it holds
//! the image's lock, exclusive to write and shared to read.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Data I/Os sent to the file device and not yet ended, by the epoch
    /// they were planned in (raised under the metadata lock). A cluster
    /// freed in an epoch is given back only once every I/O of that epoch
    /// has ended: one planned on the old mapping may still be bound for it.
    pub(crate) in_flight: [std::sync::atomic::AtomicU64; 2],
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
