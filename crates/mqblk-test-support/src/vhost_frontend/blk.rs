//! virtio-blk on top of the rings (virtio 1.x, 5.2): the config space,
//! the request header, the status byte, discard / write-zeroes segments,
//! and the chains a well-behaved driver builds for each request type.

use virtio_bindings::virtio_blk::{self as vb, virtio_blk_discard_write_zeroes};

use super::memory::Layout;
use super::vring::{linked, Desc};

/// Bytes per virtio-blk sector, whatever the device's block size.
pub const SECTOR_BYTES: u64 = 512;

/// Request types (the header's `type`).
pub mod req {
    use virtio_bindings::virtio_blk as vb;
    /// Read.
    pub const IN: u32 = vb::VIRTIO_BLK_T_IN;
    /// Write.
    pub const OUT: u32 = vb::VIRTIO_BLK_T_OUT;
    /// Flush.
    pub const FLUSH: u32 = vb::VIRTIO_BLK_T_FLUSH;
    /// Get the device's id string (20 bytes).
    pub const GET_ID: u32 = vb::VIRTIO_BLK_T_GET_ID;
    /// Discard.
    pub const DISCARD: u32 = vb::VIRTIO_BLK_T_DISCARD;
    /// Write zeroes.
    pub const WRITE_ZEROES: u32 = vb::VIRTIO_BLK_T_WRITE_ZEROES;
}

/// Status bytes.
pub mod status {
    use virtio_bindings::virtio_blk as vb;
    /// Done.
    pub const OK: u8 = vb::VIRTIO_BLK_S_OK as u8;
    /// Failed.
    pub const IOERR: u8 = vb::VIRTIO_BLK_S_IOERR as u8;
    /// Not supported.
    pub const UNSUPP: u8 = vb::VIRTIO_BLK_S_UNSUPP as u8;
    /// What the frontend puts in a status byte before a request, to see
    /// whether the device wrote it.
    pub const UNWRITTEN: u8 = 0xee;

    /// A status byte's name.
    pub fn name(s: u8) -> String {
        match s {
            OK => "OK".into(),
            IOERR => "IOERR".into(),
            UNSUPP => "UNSUPP".into(),
            UNWRITTEN => "unwritten".into(),
            s => format!("status {s}"),
        }
    }
}

/// virtio-blk feature bits this frontend acks when offered.
pub const BLK_FEATURES: &[u32] = &[
    vb::VIRTIO_BLK_F_SIZE_MAX,
    vb::VIRTIO_BLK_F_SEG_MAX,
    vb::VIRTIO_BLK_F_RO,
    vb::VIRTIO_BLK_F_BLK_SIZE,
    vb::VIRTIO_BLK_F_FLUSH,
    vb::VIRTIO_BLK_F_TOPOLOGY,
    vb::VIRTIO_BLK_F_CONFIG_WCE,
    vb::VIRTIO_BLK_F_MQ,
    vb::VIRTIO_BLK_F_DISCARD,
    vb::VIRTIO_BLK_F_WRITE_ZEROES,
];

/// The config space's first bytes that this frontend reads (up to
/// `write_zeroes_may_unmap` and its padding).
pub const CONFIG_BYTES: u32 = 60;

/// The device's config space, as far as the tests use it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlkConfig {
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// The largest segment (SIZE_MAX).
    pub size_max: u32,
    /// The most data segments in a request (SEG_MAX).
    pub seg_max: u32,
    /// The block size (BLK_SIZE).
    pub blk_size: u32,
    /// The write cache is on (CONFIG_WCE).
    pub wce: u8,
    /// Queues (MQ).
    pub num_queues: u16,
    /// The largest discard, in sectors.
    pub max_discard_sectors: u32,
    /// The most segments in a discard.
    pub max_discard_seg: u32,
    /// The discard alignment, in sectors.
    pub discard_sector_alignment: u32,
    /// The largest write-zeroes, in sectors.
    pub max_write_zeroes_sectors: u32,
    /// The most segments in a write-zeroes.
    pub max_write_zeroes_seg: u32,
    /// Write-zeroes may unmap.
    pub write_zeroes_may_unmap: u8,
}

impl BlkConfig {
    /// Parse the config space's first [`CONFIG_BYTES`] bytes.
    pub fn parse(b: &[u8]) -> Option<BlkConfig> {
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
        Some(BlkConfig {
            capacity_sectors: u64::from_le_bytes(b.get(0..8)?.try_into().ok()?),
            size_max: u32_at(8)?,
            seg_max: u32_at(12)?,
            blk_size: u32_at(20)?,
            wce: *b.get(32)?,
            num_queues: u16_at(34)?,
            max_discard_sectors: u32_at(36)?,
            max_discard_seg: u32_at(40)?,
            discard_sector_alignment: u32_at(44)?,
            max_write_zeroes_sectors: u32_at(48)?,
            max_write_zeroes_seg: u32_at(52)?,
            write_zeroes_may_unmap: *b.get(56)?,
        })
    }

    /// The capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_sectors * SECTOR_BYTES
    }
}

/// The 16-byte request header: type, reserved, sector.
pub fn header(req_type: u32, sector: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&req_type.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    h
}

/// A discard / write-zeroes segment.
pub fn segment(sector: u64, num_sectors: u32, flags: u32) -> virtio_blk_discard_write_zeroes {
    virtio_blk_discard_write_zeroes {
        sector,
        num_sectors,
        flags,
    }
}

/// Segments as the device reads them (16 bytes each, little-endian).
pub fn segment_bytes(segs: &[virtio_blk_discard_write_zeroes]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 * segs.len());
    for s in segs {
        v.extend_from_slice(&s.sector.to_le_bytes());
        v.extend_from_slice(&s.num_sectors.to_le_bytes());
        v.extend_from_slice(&s.flags.to_le_bytes());
    }
    v
}

/// The segment flag that lets write-zeroes unmap.
pub const SEGMENT_UNMAP: u32 = 1;

/// What a well-behaved driver puts on queue `q` for a request whose
/// header is at the queue's header address and status at its status
/// address: header, then `data` (`(len, device_writes)` at the queue's
/// data area, or the segments' area when `data_at_segments`), then the
/// status byte.
pub fn good_chain(
    layout: &Layout,
    q: u16,
    data: Option<(u32, bool)>,
    data_at_segments: bool,
) -> Vec<Desc> {
    let mut bufs = vec![(layout.header_gpa(q), 16, false)];
    if let Some((len, write)) = data {
        let at = if data_at_segments {
            layout.segments_gpa(q)
        } else {
            layout.data_gpa(q)
        };
        bufs.push((at, len, write));
    }
    bufs.push((layout.status_gpa(q), 1, true));
    linked(0, &bufs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_and_a_segment_are_little_endian_at_their_offsets() {
        let h = header(req::DISCARD, 0x0102_0304_0506_0708);
        assert_eq!(h[0..4], [11, 0, 0, 0]);
        assert_eq!(h[4..8], [0; 4]);
        assert_eq!(h[8..16], [8, 7, 6, 5, 4, 3, 2, 1]);
        let b = segment_bytes(&[segment(9, 8, SEGMENT_UNMAP)]);
        assert_eq!(b.len(), 16);
        assert_eq!(b[0..8], 9u64.to_le_bytes());
        assert_eq!(b[8..12], 8u32.to_le_bytes());
        assert_eq!(b[12..16], 1u32.to_le_bytes());
    }

    #[test]
    fn the_config_space_is_read_at_virtio_offsets() {
        let mut b = [0u8; CONFIG_BYTES as usize];
        b[0..8].copy_from_slice(&131072u64.to_le_bytes());
        b[12..16].copy_from_slice(&126u32.to_le_bytes());
        b[20..24].copy_from_slice(&4096u32.to_le_bytes());
        b[34..36].copy_from_slice(&2u16.to_le_bytes());
        b[40..44].copy_from_slice(&1u32.to_le_bytes());
        let c = BlkConfig::parse(&b).unwrap();
        assert_eq!(c.capacity_bytes(), 64 << 20);
        assert_eq!(
            (c.seg_max, c.blk_size, c.num_queues, c.max_discard_seg),
            (126, 4096, 2, 1)
        );
        assert_eq!(BlkConfig::parse(&b[..40]), None);
    }
}
