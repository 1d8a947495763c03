//! Queue limits and device features (Linux `struct queue_limits` and the
//! queue's feature flags). A driver declares them; the core validates and,
//! from the services layer on, splits bios to fit them.

use std::sync::Arc;

use crate::bio::{Bio, Op};
use crate::error::{Error, InvalidKind, Status};

/// A sector is always 512 bytes, whatever the logical block size.
pub const SECTOR_SIZE: u64 = 512;
/// log2 of [`SECTOR_SIZE`].
pub const SECTOR_SHIFT: u32 = 9;

/// The limits of one request queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Smallest unit the device can address, in bytes (power of two, >= 512).
    pub logical_block_size: u32,
    /// Smallest unit the device writes without read-modify-write, in bytes.
    pub physical_block_size: u32,
    /// Largest request, in 512-byte sectors.
    pub max_sectors: u32,
    /// Largest number of segments in one request.
    pub max_segments: u32,
    /// Largest single segment in bytes.
    pub max_segment_size: u32,
    /// A segment may not cross an address boundary of `mask + 1` bytes.
    pub seg_boundary_mask: u64,
    /// Requests may not cross a multiple of this many sectors (0: no boundary).
    pub chunk_sectors: u32,
    /// Buffer addresses and lengths must be multiples of `dma_alignment + 1`.
    pub dma_alignment: u32,
    /// Largest discard, in sectors (0: discard not supported).
    pub max_discard_sectors: u32,
    /// Largest write-zeroes, in sectors (0: emulate or refuse).
    pub max_write_zeroes_sectors: u32,
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits {
            logical_block_size: 512,
            physical_block_size: 512,
            max_sectors: u32::MAX,
            max_segments: 1024,
            max_segment_size: u32::MAX,
            seg_boundary_mask: u64::MAX,
            chunk_sectors: 0,
            dma_alignment: 511,
            max_discard_sectors: 0,
            max_write_zeroes_sectors: 0,
        }
    }
}

impl QueueLimits {
    /// Limits for a device with the given logical block size: DMA alignment
    /// follows the block size, as it does for O_DIRECT.
    pub fn with_block_size(logical_block_size: u32) -> Self {
        QueueLimits {
            logical_block_size,
            physical_block_size: logical_block_size,
            dma_alignment: logical_block_size - 1,
            ..QueueLimits::default()
        }
    }

    /// Check internal consistency; returns a description of the first problem.
    pub fn check(&self) -> Result<(), String> {
        let lbs = self.logical_block_size;
        if lbs < 512 || !lbs.is_power_of_two() || lbs > 65536 {
            return Err(format!(
                "logical_block_size {lbs} must be a power of two from 512 to 65536"
            ));
        }
        if self.physical_block_size < lbs || !self.physical_block_size.is_power_of_two() {
            return Err(format!(
                "physical_block_size {} must be a power of two >= logical_block_size {lbs}",
                self.physical_block_size
            ));
        }
        if u64::from(self.max_sectors) * SECTOR_SIZE < u64::from(lbs) {
            return Err(format!(
                "max_sectors {} is smaller than one logical block",
                self.max_sectors
            ));
        }
        if !(u64::from(self.max_sectors) * SECTOR_SIZE).is_multiple_of(u64::from(lbs))
            && self.max_sectors != u32::MAX
        {
            return Err(format!(
                "max_sectors {} is not a whole number of {lbs}-byte blocks",
                self.max_sectors
            ));
        }
        if self.max_segment_size < lbs.min(4096) && self.max_segment_size < 512 {
            return Err(format!(
                "max_segment_size {} is below 512",
                self.max_segment_size
            ));
        }
        if self.max_segments == 0 {
            return Err("max_segments must be at least 1".into());
        }
        if !(u64::from(self.dma_alignment) + 1).is_power_of_two() {
            return Err(format!(
                "dma_alignment {} must be one less than a power of two",
                self.dma_alignment
            ));
        }
        Ok(())
    }
}

/// What a device offers beyond plain reads and writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// The device has a volatile write cache: flushes are meaningful.
    pub write_cache: bool,
    /// The device implements FUA natively.
    pub fua: bool,
    /// The device implements discard.
    pub discard: bool,
    /// The device implements write-zeroes.
    pub write_zeroes: bool,
    /// The device refuses writes.
    pub read_only: bool,
    /// The device is rotational (affects nothing in the core yet; reported).
    pub rotational: bool,
}

/// How submitting contexts share the queue (see DESIGN: queue modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QueueMode {
    /// blk-mq: a software queue per context mapped onto hardware queues; no
    /// shared lock on the hot path when there are enough hardware queues.
    #[default]
    Mq,
    /// One request queue per device under its own lock (Linux 2.6–3.x legacy).
    DeviceLock,
    /// One lock over every device in the process (Linux 2.4 `io_request_lock`).
    GlobalLock,
}

impl QueueMode {
    /// Parse `mq`, `device-lock` or `global-lock`.
    pub fn parse(s: &str) -> Option<QueueMode> {
        match s {
            "mq" => Some(QueueMode::Mq),
            "device-lock" | "device_lock" => Some(QueueMode::DeviceLock),
            "global-lock" | "global_lock" => Some(QueueMode::GlobalLock),
            _ => None,
        }
    }

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            QueueMode::Mq => "mq",
            QueueMode::DeviceLock => "device-lock",
            QueueMode::GlobalLock => "global-lock",
        }
    }
}

/// The read-mostly facts about a device that the per-I/O path consults.
#[derive(Clone, Debug)]
pub struct QueueInfo {
    /// Device name.
    pub name: Arc<str>,
    /// Capacity in 512-byte sectors (callers use `capacity_bytes`).
    pub(crate) capacity_sectors: u64,
    /// Limits.
    pub limits: QueueLimits,
    /// Features.
    pub features: Features,
    /// Mode.
    pub mode: QueueMode,
}

impl QueueInfo {
    /// Capacity in bytes.
    #[inline]
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_sectors << SECTOR_SHIFT
    }

    /// Check a bio against capacity, limits and features. Returns the
    /// status to complete it with; the typed error is built from it later.
    #[inline]
    pub(crate) fn validate(&self, bio: &Bio, bounce: bool) -> Status {
        let op = bio.op();
        if op == Op::Flush {
            return Status::Ok;
        }
        let lim = &self.limits;
        let len = bio.len_bytes();
        if len == 0 {
            return Status::Invalid(InvalidKind::ZeroLength);
        }
        let lbs_mask = u64::from(lim.logical_block_size) - 1;
        if (bio.offset_bytes() | len) & lbs_mask != 0 {
            return Status::Invalid(InvalidKind::BadLength);
        }
        let end = bio.sector().checked_add(len >> SECTOR_SHIFT);
        if end.is_none_or(|e| e > self.capacity_sectors) {
            return Status::Invalid(InvalidKind::OutOfRange);
        }
        if op.is_write() && self.features.read_only {
            return Status::Invalid(InvalidKind::ReadOnly);
        }
        match op {
            // Misaligned segments are bounced; refused only with bounce off.
            Op::Read | Op::Write if !bounce => {
                let dma = lim.dma_alignment as usize;
                for s in bio.segments() {
                    if (s.addr() | s.len() as usize) & dma != 0 {
                        return Status::Invalid(InvalidKind::Misaligned);
                    }
                }
            }
            Op::Discard if !self.features.discard || lim.max_discard_sectors == 0 => {
                return Status::Invalid(InvalidKind::Unsupported);
            }
            // Write-zeroes without device support is emulated with writes.
            _ => {}
        }
        Status::Ok
    }

    /// Build the typed error for a bio that ended with `status`.
    pub fn error_for(&self, bio: &Bio, status: Status) -> Error {
        let device = self.name.clone();
        let op = bio.op();
        let offset_bytes = bio.offset_bytes();
        let lim = &self.limits;
        match status {
            Status::Invalid(InvalidKind::OutOfRange) => Error::OutOfRange {
                device,
                op,
                offset_bytes,
                len_bytes: bio.len_bytes(),
                capacity_bytes: self.capacity_bytes(),
            },
            Status::Invalid(InvalidKind::BadLength) => Error::BadLength {
                device,
                op,
                offset_bytes,
                len_bytes: bio.len_bytes(),
                logical_block_size: lim.logical_block_size,
            },
            Status::Invalid(InvalidKind::ZeroLength) => Error::ZeroLength {
                device,
                op,
                offset_bytes,
                logical_block_size: lim.logical_block_size,
            },
            Status::Invalid(InvalidKind::Misaligned) => {
                let dma = lim.dma_alignment as usize;
                let (segment, s) = bio
                    .segments()
                    .iter()
                    .enumerate()
                    .find(|(_, s)| (s.addr() | s.len() as usize) & dma != 0)
                    .map_or((0, None), |(i, s)| (i, Some(s)));
                Error::Misaligned {
                    device,
                    op,
                    offset_bytes,
                    segment,
                    addr: s.map_or(0, |s| s.addr()),
                    len_bytes: s.map_or(0, |s| s.len()),
                    alignment: lim.dma_alignment + 1,
                }
            }
            Status::Invalid(InvalidKind::ReadOnly) => Error::ReadOnly {
                device,
                op,
                offset_bytes,
            },
            Status::Invalid(InvalidKind::TooManySegments) => Error::TooManySegments {
                device,
                op,
                offset_bytes,
                segments: bio.segments().len(),
                max_segments: lim.max_segments,
            },
            Status::Invalid(InvalidKind::Unsupported) => Error::Unsupported {
                device,
                op,
                offset_bytes,
            },
            status => Error::Io {
                device,
                op,
                offset_bytes,
                len_bytes: bio.len_bytes(),
                status,
            },
        }
    }
}
