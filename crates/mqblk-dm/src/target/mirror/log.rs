//! The dirty-region log of a mirror (Linux `dm-log`): `core` keeps it in
//! memory only; `disk` keeps it on a metadata device (any mqblk spec), so
//! that after an unclean stop only the regions marked dirty are resynced.
//!
//! On-disk layout, little endian: a 4096-byte header (magic, version,
//! region size, number of regions, length of the mirror) and then the
//! bitmap, one bit per region, in 4096-byte blocks. A bit is written out
//! and made durable (write, then flush) before the in-memory bit that
//! lets writes to its region pass is set; it is cleared later, written
//! out by the cleaner. Every write-out happens under [`Log::lock`].

use std::sync::{Mutex, MutexGuard};

use mqblk_core::buf::IoBuf;
use mqblk_core::{Context, Device};

const MAGIC: &[u8; 8] = b"MQBKMIRR";
const VERSION: u32 = 1;
/// The header's size, and the unit the bitmap is written in.
pub(crate) const BLOCK: usize = 4096;

/// What a log knows about the mirror it serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) region_bytes: u64,
    pub(crate) nr_regions: u64,
    pub(crate) len_bytes: u64,
}

/// A log device's I/O state: one context, one aligned image of the bitmap.
pub(crate) struct DiskIo {
    ctx: Context,
    /// Header block then the bitmap blocks.
    image: IoBuf,
}

/// The log.
pub(crate) enum Log {
    /// In memory: nothing survives the process.
    Core,
    /// On a metadata device.
    Disk {
        /// The device's spec, for messages and status.
        spec: String,
        /// Serialises write-outs, so that an older image never lands after
        /// a newer one. Taken only on a clean→dirty transition and by the
        /// cleaner, never on the common path.
        io: Box<Mutex<DiskIo>>,
    },
}

/// What opening a disk log found.
pub(crate) enum Found {
    /// A log written for this mirror: its dirty bits (words).
    Formatted(Vec<u64>),
    /// No log (or one of another kind): formatted now, all clean.
    Fresh,
}

impl Log {
    /// Bytes the disk log needs for `nr_regions`.
    pub(crate) fn disk_bytes(nr_regions: u64) -> u64 {
        BLOCK as u64 + nr_regions.div_ceil(8).next_multiple_of(BLOCK as u64)
    }

    /// Open the log on `dev`: read its header and bitmap, or format it.
    /// On a read-only table (`read_only`) a log found unformatted is left
    /// so: nothing is written.
    pub(crate) fn open_disk(
        dev: Device,
        spec: &str,
        g: Geometry,
        read_only: bool,
    ) -> Result<(Log, Found), String> {
        let need = Log::disk_bytes(g.nr_regions);
        if dev.capacity_bytes() < need {
            return Err(format!(
                "`{spec}` has {} bytes; a log of {} regions needs {need}",
                dev.capacity_bytes(),
                g.nr_regions
            ));
        }
        if dev.logical_block_size() as usize > BLOCK {
            return Err(format!(
                "`{spec}` has {}-byte blocks; the log is written in {BLOCK}-byte blocks",
                dev.logical_block_size()
            ));
        }
        let mut ctx = dev.context().map_err(|e| format!("`{spec}`: {e}"))?;
        let mut image = dev.alloc_buf(need as usize);
        ctx.read_at(image.as_mut_slice(), 0)
            .map_err(|e| format!("`{spec}`: reading the log: {e}"))?;
        let b = image.as_slice();
        let found = if &b[..8] == MAGIC {
            let num = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
            let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
            let on_disk = Geometry {
                region_bytes: num(16),
                nr_regions: num(24),
                len_bytes: num(32),
            };
            if version != VERSION || on_disk != g {
                return Err(format!(
                    "`{spec}` holds a mirror log (version {version}) for {} bytes in regions of {} sectors; \
                     this table has {} bytes in regions of {} sectors. Use the same table, or zero the log \
                     device to start a new log (then every region is resynced unless `nosync` is given)",
                    on_disk.len_bytes,
                    on_disk.region_bytes >> 9,
                    g.len_bytes,
                    g.region_bytes >> 9
                ));
            }
            let words = (0..g.nr_regions.div_ceil(64) as usize)
                .map(|w| {
                    let at = BLOCK + w * 8;
                    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
                })
                .collect();
            Found::Formatted(words)
        } else {
            Found::Fresh
        };
        let log = Log::Disk {
            spec: spec.to_string(),
            io: Box::new(Mutex::new(DiskIo { ctx, image })),
        };
        if matches!(found, Found::Fresh) && !read_only {
            log.format(g)?;
        }
        Ok((log, found))
    }

    /// Write a header and an all-clean bitmap.
    fn format(&self, g: Geometry) -> Result<(), String> {
        let Log::Disk { spec, io } = self else {
            return Ok(());
        };
        let mut d = io.lock().unwrap_or_else(|e| e.into_inner());
        let DiskIo { ctx, image } = &mut *d;
        let b = image.as_mut_slice();
        b.fill(0);
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&g.region_bytes.to_le_bytes());
        b[24..32].copy_from_slice(&g.nr_regions.to_le_bytes());
        b[32..40].copy_from_slice(&g.len_bytes.to_le_bytes());
        ctx.write_at(image.as_slice(), 0)
            .and_then(|()| ctx.flush())
            .map_err(|e| format!("`{spec}`: formatting the log: {e}"))
    }

    /// True for a log that keeps nothing.
    #[inline]
    pub(crate) fn is_core(&self) -> bool {
        matches!(self, Log::Core)
    }

    /// Hold the write-out lock (nothing for a core log).
    pub(crate) fn lock(&self) -> Option<MutexGuard<'_, DiskIo>> {
        match self {
            Log::Core => None,
            Log::Disk { io, .. } => Some(io.lock().unwrap_or_else(|e| e.into_inner())),
        }
    }

    /// Write words `first..=last` of the bitmap to the log (the blocks
    /// holding them), then flush. `word(n)` gives word `n` of the image to
    /// write, for every word of those blocks (`nr_words` in all): the
    /// caller's bitmap, with the bits it is about to set. The caller holds
    /// [`Log::lock`]'s guard, passed in.
    pub(crate) fn write_out(
        &self,
        guard: &mut Option<MutexGuard<'_, DiskIo>>,
        nr_words: usize,
        first: usize,
        last: usize,
        word: impl Fn(usize) -> u64,
    ) -> Result<(), String> {
        let Log::Disk { spec, .. } = self else {
            return Ok(());
        };
        let Some(g) = guard.as_mut() else {
            return Ok(());
        };
        let d: &mut DiskIo = g;
        let words_per_block = BLOCK / 8;
        let b0 = first / words_per_block;
        let b1 = last / words_per_block;
        let w0 = b0 * words_per_block;
        let w1 = ((b1 + 1) * words_per_block).min(nr_words);
        let img = d.image.as_mut_slice();
        for w in w0..w1 {
            let at = BLOCK + w * 8;
            img[at..at + 8].copy_from_slice(&word(w).to_le_bytes());
        }
        let from = BLOCK + b0 * BLOCK;
        let to = (BLOCK + (b1 + 1) * BLOCK).min(d.image.len());
        let DiskIo { ctx, image } = d;
        ctx.write_at(&image.as_slice()[from..to], from as u64)
            .and_then(|()| ctx.flush())
            .map_err(|e| format!("`{spec}`: writing the log: {e}"))
    }

    /// The log's spec (`core` for a core log).
    pub(crate) fn describe(&self) -> String {
        match self {
            Log::Core => "core".into(),
            Log::Disk { spec, .. } => format!("disk {spec}"),
        }
    }
}
