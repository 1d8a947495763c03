//! Queue limits and device features (Linux `struct queue_limits` and the
//! queue's feature flags). A driver declares them; the core validates and,
//! from the services layer on, splits bios to fit them.

use std::sync::Arc;

pub use crate::op::{SECTOR_SHIFT, SECTOR_SIZE};

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
}
