//! The virtio-blk view of an mqblk device: its capacity, block sizes and
//! limits as the configuration space states them.

use mqblk_core::Device;

use crate::error::{Error, MAX_QUEUES};
use crate::virtio_blk::{Shape, SECTOR_SHIFT};

/// Data segments per request offered to the driver (`seg_max`): a ring of
/// 256 with indirect descriptors carries requests of up to 254 segments,
/// as QEMU offers for its default queue size; the layer splits what the
/// device cannot take in one piece.
pub(crate) const SEG_MAX: u32 = 254;

/// The largest data segment offered (`size_max`).
pub(crate) const SIZE_MAX_CAP: u32 = 4 << 20;

/// The shape of `dev` for a driver with `queues` virtqueues.
pub(crate) fn of(dev: &Device, queues: usize, read_only: bool) -> Result<Shape, Error> {
    let info = dev.info();
    let lim = dev.limits();
    let lbs = lim.logical_block_size.max(512);
    let pbs = lim.physical_block_size.max(lbs);
    let capacity_sectors = dev.capacity_bytes() >> SECTOR_SHIFT;
    let discard = info.features.discard && lim.max_discard_sectors > 0;
    // Write-zeroes is emulated with writes where the device has none.
    let max_wz = if lim.max_write_zeroes_sectors > 0 {
        lim.max_write_zeroes_sectors
    } else {
        lim.max_sectors.max(8)
    };
    // Drivers multiply size_max by seg_max into an i32 (libblkio's
    // max-transfer): 4 MiB segments keep it under 1 GiB.
    let size_max = match lim.max_segment_size {
        0 => SIZE_MAX_CAP,
        n => n.min(SIZE_MAX_CAP),
    };
    let queues = u16::try_from(queues).map_err(|_| Error::Queues {
        device: dev.name().to_string(),
        queues,
        max: MAX_QUEUES,
    })?;
    Ok(Shape {
        capacity_sectors,
        blk_size: lbs,
        physical_block_exp: (pbs / lbs).trailing_zeros() as u8,
        min_io_size: 1,
        opt_io_size: if lim.chunk_sectors > 0 {
            (u64::from(lim.chunk_sectors) << SECTOR_SHIFT).div_ceil(u64::from(lbs)) as u32
        } else {
            0
        },
        size_max,
        seg_max: SEG_MAX,
        num_queues: queues,
        max_discard_sectors: if discard { lim.max_discard_sectors } else { 0 },
        max_discard_seg: 1,
        discard_sector_alignment: lbs >> SECTOR_SHIFT,
        max_write_zeroes_sectors: max_wz,
        max_write_zeroes_seg: 1,
        write_cache: info.features.write_cache,
        read_only: read_only || info.features.read_only,
    })
}
