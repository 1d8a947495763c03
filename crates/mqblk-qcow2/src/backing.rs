//! Backing files: read-only, raw or qcow2, chains of any depth. Each is
//! opened as a file device too, read-only, so it holds a shared lock as
//! QEMU's backing files do. A file already in the chain is refused (a
//! loop). Reads are synchronous.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mqblk_core::queue::Device;

use crate::error::{Qcow2Error, Result};
use crate::header::MAGIC;
use crate::image::{open_file_device, pread, Image, OpenOptions};

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
    Qcow2(Arc<Image>),
}

impl Backing {
    /// Open `path` as a backing file of format `format` (`raw`, `qcow2`;
    /// probed from its first bytes if `None`). `chain`: the images above.
    pub fn open(
        path: &Path,
        format: Option<&str>,
        opts: &OpenOptions,
        chain: &mut Vec<PathBuf>,
    ) -> Result<Backing> {
        let name: Arc<str> = path.display().to_string().into();
        let io = |source| Qcow2Error::Io {
            image: name.clone(),
            what: "open of a backing file",
            offset: 0,
            len: 0,
            source,
        };
        let file = File::open(path).map_err(io)?;
        let format = match format {
            Some(f) => f.to_string(),
            None => {
                let mut m = [0u8; 4];
                pread(&file, &name, "read of a backing file's magic", 0, &mut m)?;
                if u32::from_be_bytes(m) == MAGIC {
                    "qcow2"
                } else {
                    "raw"
                }
                .to_string()
            }
        };
        match format.as_str() {
            "qcow2" => {
                let o = OpenOptions {
                    writable: false,
                    backing: None,
                    ..opts.clone()
                };
                Ok(Backing::Qcow2(Image::open(path, &o, chain)?))
            }
            "raw" => {
                let canon = std::fs::canonicalize(path).map_err(|source| Qcow2Error::Io {
                    image: name.clone(),
                    what: "open of a backing file",
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
                let dev =
                    open_file_device(path, false, 0).map_err(|e| Qcow2Error::Unsupported {
                        image: name.clone(),
                        what: e.to_string(),
                    })?;
                Ok(Backing::Raw { name, file, dev })
            }
            other => Err(Qcow2Error::Unsupported {
                image: name,
                what: format!("backing file format `{other}` is not supported (raw or qcow2)"),
            }),
        }
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
            Backing::Qcow2(img) => &img.name,
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
            Backing::Qcow2(img) => img.data_device(),
        }
    }
}
