//! Remapped views of a device (Linux `blk_partition_remap`): a partition,
//! or a one-line linear table, is a window of a lower device that shares
//! its queues, tags, scheduler and limits. A bio on the view is checked
//! against the window and shifted by its start in the submitting context,
//! then goes down the lower device's pipeline as its own: no second queue,
//! request or completion. The caller sees the bio back at the offset it
//! gave. For the common bio the window costs what Linux's remap costs: the
//! fused check compares it with the window's capacity, and the shift is
//! one add at submit and one subtract where it ends.
//!
//! The view has its own name, capacity and stats (its contexts' shards),
//! and the lower device's stats include them, as a disk's include its
//! partitions'.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::limits::{QueueInfo, SECTOR_SHIFT};
use crate::stats::DeviceStats;

/// A window of a device.
pub(crate) struct View {
    /// Where the window starts on the lower device, in bytes.
    pub(crate) start_bytes: u64,
    /// The view's identity for validation and errors: its name and
    /// capacity, with the lower device's limits and features.
    pub(crate) info: QueueInfo,
    /// Counters of the contexts opened on the view.
    pub(crate) stats: Arc<DeviceStats>,
    /// Whatever the view's creator keeps alive with it (a table's handle).
    pub(crate) _owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// The view's own device number: blktrace's remaps name it as the
    /// device a bio came from.
    pub(crate) devnum: crate::blktrace::event::DevNum,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("name", &self.info.name)
            .field("start_bytes", &self.start_bytes)
            .field("capacity_sectors", &self.info.capacity_sectors)
            .finish()
    }
}

impl View {
    /// A window of `len_bytes` from `start_bytes` of the device `lower`
    /// (whose window, if it is a view itself, is `base`), named `name`.
    pub(crate) fn new(
        lower: &QueueInfo,
        base: u64,
        start_bytes: u64,
        len_bytes: u64,
        name: &str,
        owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Result<View> {
        let lbs = u64::from(lower.limits.logical_block_size);
        let bad = |reason: String| Error::Setup {
            device: Arc::from(name),
            reason,
        };
        if len_bytes == 0 || !start_bytes.is_multiple_of(lbs) || !len_bytes.is_multiple_of(lbs) {
            return Err(bad(format!(
                "a window of {len_bytes} bytes at {start_bytes} of {}: start and length must be whole logical blocks of {lbs} bytes, the length above 0",
                lower.name
            )));
        }
        let cap = lower.capacity_bytes();
        if start_bytes.checked_add(len_bytes).is_none_or(|e| e > cap) {
            return Err(bad(format!(
                "a window of {len_bytes} bytes at {start_bytes} runs past {}, which has {cap} bytes",
                lower.name
            )));
        }
        let mut info = lower.clone();
        info.name = Arc::from(name);
        info.capacity_sectors = len_bytes >> SECTOR_SHIFT;
        Ok(View {
            start_bytes: base + start_bytes,
            info,
            stats: Arc::new(DeviceStats::new()),
            _owner: owner,
            devnum: crate::blktrace::event::DevNum::next(),
        })
    }
}
