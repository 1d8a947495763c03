//! Backing files: read-only, raw or qcow2, chains of any depth. Each is
//! opened as a file device too, read-only, so it holds a shared lock as
//! QEMU's backing files do. A file already in the chain is refused (a
//! loop). Reads are synchronous. A qcow2 backing file is a [`Layer`]: an
//! image seen from above (the open image implements it).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mqblk_core::driver::Extent;
use mqblk_core::queue::Device;

use crate::error::{Qcow2Error, Result};
use crate::file::{open_file_device, pread};
use crate::header::MAGIC;

/// A qcow2 image as the image above it sees it.
pub trait Layer: Send + Sync + std::fmt::Debug {
    /// Its path.
    fn name(&self) -> &str;
    /// Read guest `[guest, guest + buf.len())`, through its own chain.
    fn read(&self, guest: u64, buf: &mut [u8]) -> Result<()>;
    /// Block status of `[offset, offset + len)`, through its own chain.
    fn extents(&self, offset: u64, len: u64, out: &mut Vec<Extent>) -> Result<()>;
    /// Its own backing file.
    fn backing(&self) -> Option<&Backing>;
    /// The file device that holds its lock.
    fn device(&self) -> &Device;
}

/// A backing file.
#[derive(Debug)]
pub enum Backing {
    /// A raw image.
    Raw {
        /// Its path, as errors name it.
        name: Arc<str>,
        /// For reading.
        file: File,
        /// Holds the shared lock.
        dev: Device,
    },
    /// A qcow2 image, with its own backing chain.
    Qcow2(Arc<dyn Layer>),
}

/// Refuse `path` if it is already in `chain` (a loop), else add it.
pub fn enter_chain(path: &Path, chain: &mut Vec<PathBuf>) -> Result<()> {
    let name: Arc<str> = path.display().to_string().into();
    let canon = std::fs::canonicalize(path).map_err(|source| Qcow2Error::Io {
        image: name,
        what: "open",
        offset: 0,
        len: 0,
        source,
    })?;
    if chain.contains(&canon) {
        return Err(Qcow2Error::BackingLoop {
            image: chain
                .last()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
                .into(),
            backing: canon.display().to_string(),
            chain: chain
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" -> "),
        });
    }
    chain.push(canon);
    Ok(())
}

/// `qcow2` if the file starts with the qcow2 magic, else `raw`.
pub fn probe(path: &Path) -> Result<&'static str> {
    let name: Arc<str> = path.display().to_string().into();
    let file = File::open(path).map_err(|source| Qcow2Error::Io {
        image: name.clone(),
        what: "open of a backing file",
        offset: 0,
        len: 0,
        source,
    })?;
    let mut m = [0u8; 4];
    pread(&file, &name, "read of a backing file's magic", 0, &mut m)?;
    Ok(if u32::from_be_bytes(m) == MAGIC {
        "qcow2"
    } else {
        "raw"
    })
}

impl Backing {
    /// Open `path` as a raw backing file; `chain`: the images above.
    pub fn open_raw(path: &Path, chain: &mut Vec<PathBuf>) -> Result<Backing> {
        let name: Arc<str> = path.display().to_string().into();
        enter_chain(path, chain)?;
        let file = File::open(path).map_err(|source| Qcow2Error::Io {
            image: name.clone(),
            what: "open of a backing file",
            offset: 0,
            len: 0,
            source,
        })?;
        let dev = open_file_device(path, false, 0).map_err(|e| Qcow2Error::Unsupported {
            image: name.clone(),
            what: e.to_string(),
        })?;
        Ok(Backing::Raw { name, file, dev })
    }

    /// Read `[guest, guest + buf.len())`; past its end it reads as zeros.
    pub fn read(&self, guest: u64, buf: &mut [u8]) -> Result<()> {
        match self {
            Backing::Raw { name, file, .. } => {
                pread(file, name, "read of a raw backing file", guest, buf)
            }
            Backing::Qcow2(img) => img.read(guest, buf),
        }
    }

    /// Its path.
    pub fn name(&self) -> &str {
        match self {
            Backing::Raw { name, .. } => name,
            Backing::Qcow2(img) => img.name(),
        }
    }

    /// Its format.
    pub fn format(&self) -> &'static str {
        match self {
            Backing::Raw { .. } => "raw",
            Backing::Qcow2(_) => "qcow2",
        }
    }

    /// The file device that holds its lock.
    pub fn device(&self) -> &Device {
        match self {
            Backing::Raw { dev, .. } => dev,
            Backing::Qcow2(img) => img.device(),
        }
    }
}
