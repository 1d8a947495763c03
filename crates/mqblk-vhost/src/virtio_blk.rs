//! virtio-blk's wire format (virtio 1.2, section 5.2): request types and
//! statuses, the request header, discard and write-zeroes ranges, and the
//! configuration space. Protocol only: nothing here touches a device or
//! guest memory.

/// Bytes of the request header: type (le32), reserved (le32), sector (le64).
pub const HEADER_LEN: usize = 16;
/// Bytes of one discard / write-zeroes range: sector (le64), sectors (le32),
/// flags (le32).
pub const RANGE_LEN: usize = 16;
/// Bytes of a GET_ID answer.
pub const ID_LEN: usize = 20;
/// virtio-blk sectors are 512 bytes whatever the block size.
pub const SECTOR_SHIFT: u32 = 9;

/// Request types (`VIRTIO_BLK_T_*`).
pub mod req_type {
    /// Read (device writes the data).
    pub const IN: u32 = 0;
    /// Write (device reads the data).
    pub const OUT: u32 = 1;
    /// Flush the write cache.
    pub const FLUSH: u32 = 4;
    /// The device's serial, up to 20 bytes.
    pub const GET_ID: u32 = 8;
    /// Discard ranges.
    pub const DISCARD: u32 = 11;
    /// Zero ranges.
    pub const WRITE_ZEROES: u32 = 13;
}

/// The status byte the device writes last (`VIRTIO_BLK_S_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum BlkStatus {
    /// Done.
    Ok = 0,
    /// Failed: the request was bad, or the device failed it.
    IoErr = 1,
    /// The request type (or the operation on this device) is not supported.
    Unsupp = 2,
}

/// The write-zeroes range flag that allows deallocation.
pub const WRITE_ZEROES_FLAG_UNMAP: u32 = 1;

/// A request header, as the driver wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// `VIRTIO_BLK_T_*`.
    pub req_type: u32,
    /// Start, in 512-byte sectors.
    pub sector: u64,
}

impl Header {
    /// Decode the 16 header bytes.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Header {
        Header {
            req_type: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            sector: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        }
    }

    /// Encode (for tests and frontends).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&self.req_type.to_le_bytes());
        b[8..16].copy_from_slice(&self.sector.to_le_bytes());
        b
    }
}

/// One discard or write-zeroes range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Start, in 512-byte sectors.
    pub sector: u64,
    /// Length, in 512-byte sectors.
    pub sectors: u32,
    /// `VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP`, or 0.
    pub flags: u32,
}

impl Range {
    /// Decode 16 range bytes.
    pub fn parse(b: &[u8; RANGE_LEN]) -> Range {
        Range {
            sector: u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            sectors: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            flags: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
        }
    }

    /// Encode (for tests and frontends).
    pub fn encode(&self) -> [u8; RANGE_LEN] {
        let mut b = [0u8; RANGE_LEN];
        b[0..8].copy_from_slice(&self.sector.to_le_bytes());
        b[8..12].copy_from_slice(&self.sectors.to_le_bytes());
        b[12..16].copy_from_slice(&self.flags.to_le_bytes());
        b
    }
}

/// Feature bits (`VIRTIO_BLK_F_*`, `VIRTIO_RING_F_*`, `VIRTIO_F_*`).
pub mod feature {
    /// SIZE_MAX: `size_max` is valid.
    pub const SIZE_MAX: u64 = 1 << 1;
    /// SEG_MAX: `seg_max` is valid.
    pub const SEG_MAX: u64 = 1 << 2;
    /// RO: the device is read-only.
    pub const RO: u64 = 1 << 5;
    /// BLK_SIZE: `blk_size` is valid.
    pub const BLK_SIZE: u64 = 1 << 6;
    /// FLUSH: the device has a cache to flush.
    pub const FLUSH: u64 = 1 << 9;
    /// TOPOLOGY: physical block exponent and I/O sizes are valid.
    pub const TOPOLOGY: u64 = 1 << 10;
    /// CONFIG_WCE: the driver may switch writeback / writethrough.
    pub const CONFIG_WCE: u64 = 1 << 11;
    /// MQ: `num_queues` is valid.
    pub const MQ: u64 = 1 << 12;
    /// DISCARD.
    pub const DISCARD: u64 = 1 << 13;
    /// WRITE_ZEROES.
    pub const WRITE_ZEROES: u64 = 1 << 14;
    /// VIRTIO_RING_F_INDIRECT_DESC.
    pub const INDIRECT_DESC: u64 = 1 << 28;
    /// VIRTIO_RING_F_EVENT_IDX.
    pub const EVENT_IDX: u64 = 1 << 29;
    /// VIRTIO_F_VERSION_1.
    pub const VERSION_1: u64 = 1 << 32;
}

/// Offsets into `struct virtio_blk_config`.
mod off {
    pub const CAPACITY: usize = 0;
    pub const SIZE_MAX: usize = 8;
    pub const SEG_MAX: usize = 12;
    pub const BLK_SIZE: usize = 20;
    pub const PHYSICAL_BLOCK_EXP: usize = 24;
    pub const MIN_IO_SIZE: usize = 26;
    pub const OPT_IO_SIZE: usize = 28;
    pub const WCE: usize = 32;
    pub const NUM_QUEUES: usize = 34;
    pub const MAX_DISCARD_SECTORS: usize = 36;
    pub const MAX_DISCARD_SEG: usize = 40;
    pub const DISCARD_SECTOR_ALIGNMENT: usize = 44;
    pub const MAX_WRITE_ZEROES_SECTORS: usize = 48;
    pub const MAX_WRITE_ZEROES_SEG: usize = 52;
    pub const WRITE_ZEROES_MAY_UNMAP: usize = 56;
}

/// Bytes of the configuration space this device fills (up to the end of
/// the write-zeroes fields).
pub const CONFIG_LEN: usize = 60;

/// The device as a virtio-blk driver sees it: what fills the configuration
/// space, and what requests are checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Capacity in 512-byte sectors.
    pub capacity_sectors: u64,
    /// Logical block size in bytes.
    pub blk_size: u32,
    /// log2(physical block / logical block).
    pub physical_block_exp: u8,
    /// Minimum I/O size, in logical blocks.
    pub min_io_size: u16,
    /// Optimal I/O size, in logical blocks.
    pub opt_io_size: u32,
    /// Largest data segment (`size_max`), bytes.
    pub size_max: u32,
    /// Most data segments in one request (`seg_max`).
    pub seg_max: u32,
    /// Virtqueues.
    pub num_queues: u16,
    /// Largest discard, in sectors (0: no discard).
    pub max_discard_sectors: u32,
    /// Most ranges in one discard request.
    pub max_discard_seg: u32,
    /// Discard granularity, in sectors.
    pub discard_sector_alignment: u32,
    /// Largest write-zeroes, in sectors.
    pub max_write_zeroes_sectors: u32,
    /// Most ranges in one write-zeroes request.
    pub max_write_zeroes_seg: u32,
    /// The device has a volatile write cache.
    pub write_cache: bool,
    /// The device refuses writes.
    pub read_only: bool,
}

impl Shape {
    /// The feature bits this device offers.
    pub fn features(&self) -> u64 {
        use feature::*;
        let mut f = VERSION_1
            | EVENT_IDX
            | INDIRECT_DESC
            | SEG_MAX
            | SIZE_MAX
            | BLK_SIZE
            | TOPOLOGY
            | FLUSH
            | CONFIG_WCE
            | MQ
            | WRITE_ZEROES;
        if self.max_discard_sectors > 0 {
            f |= DISCARD;
        }
        if self.read_only {
            f |= RO;
        }
        f
    }

    /// The configuration space, with the write cache on (`wce`) or off.
    pub fn config(&self, wce: bool) -> [u8; CONFIG_LEN] {
        let mut c = [0u8; CONFIG_LEN];
        let mut put = |at: usize, b: &[u8]| c[at..at + b.len()].copy_from_slice(b);
        put(off::CAPACITY, &self.capacity_sectors.to_le_bytes());
        put(off::SIZE_MAX, &self.size_max.to_le_bytes());
        put(off::SEG_MAX, &self.seg_max.to_le_bytes());
        put(off::BLK_SIZE, &self.blk_size.to_le_bytes());
        put(off::PHYSICAL_BLOCK_EXP, &[self.physical_block_exp]);
        put(off::MIN_IO_SIZE, &self.min_io_size.to_le_bytes());
        put(off::OPT_IO_SIZE, &self.opt_io_size.to_le_bytes());
        put(off::WCE, &[u8::from(wce)]);
        put(off::NUM_QUEUES, &self.num_queues.to_le_bytes());
        put(
            off::MAX_DISCARD_SECTORS,
            &self.max_discard_sectors.to_le_bytes(),
        );
        put(off::MAX_DISCARD_SEG, &self.max_discard_seg.to_le_bytes());
        put(
            off::DISCARD_SECTOR_ALIGNMENT,
            &self.discard_sector_alignment.to_le_bytes(),
        );
        put(
            off::MAX_WRITE_ZEROES_SECTORS,
            &self.max_write_zeroes_sectors.to_le_bytes(),
        );
        put(
            off::MAX_WRITE_ZEROES_SEG,
            &self.max_write_zeroes_seg.to_le_bytes(),
        );
        put(
            off::WRITE_ZEROES_MAY_UNMAP,
            &[u8::from(self.max_discard_sectors > 0)],
        );
        c
    }

    /// The bytes `[offset, offset + size)` of the configuration space
    /// (VHOST_USER_GET_CONFIG): empty when the range is not inside it.
    pub fn config_range(&self, wce: bool, offset: u32, size: u32) -> Vec<u8> {
        let c = self.config(wce);
        let (o, s) = (offset as usize, size as usize);
        match o.checked_add(s) {
            Some(end) if end <= CONFIG_LEN => c[o..end].to_vec(),
            _ => Vec::new(),
        }
    }

    /// A driver's write to the configuration space (VHOST_USER_SET_CONFIG):
    /// only `wce` is writable. The new `wce`, or `None` for a write to
    /// anything else.
    pub fn config_write(offset: u32, buf: &[u8]) -> Option<bool> {
        (offset as usize == off::WCE && buf.len() == 1 && buf[0] <= 1).then(|| buf[0] == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            capacity_sectors: 2048,
            blk_size: 4096,
            physical_block_exp: 0,
            min_io_size: 1,
            opt_io_size: 32,
            size_max: 1 << 20,
            seg_max: 126,
            num_queues: 2,
            max_discard_sectors: 1 << 16,
            max_discard_seg: 1,
            discard_sector_alignment: 8,
            max_write_zeroes_sectors: 1 << 16,
            max_write_zeroes_seg: 1,
            write_cache: true,
            read_only: false,
        }
    }

    #[test]
    fn the_header_and_ranges_round_trip() {
        let h = Header {
            req_type: req_type::WRITE_ZEROES,
            sector: 0x0102_0304_0506_0708,
        };
        assert_eq!(Header::parse(&h.encode()), h);
        let r = Range {
            sector: u64::MAX,
            sectors: 7,
            flags: WRITE_ZEROES_FLAG_UNMAP,
        };
        assert_eq!(Range::parse(&r.encode()), r);
    }

    #[test]
    fn the_config_space_has_the_spec_layout() {
        let c = shape().config(true);
        assert_eq!(u64::from_le_bytes(c[0..8].try_into().unwrap()), 2048);
        assert_eq!(u32::from_le_bytes(c[12..16].try_into().unwrap()), 126);
        assert_eq!(u32::from_le_bytes(c[20..24].try_into().unwrap()), 4096);
        assert_eq!(c[32], 1);
        assert_eq!(u16::from_le_bytes(c[34..36].try_into().unwrap()), 2);
        assert_eq!(shape().config_range(false, 32, 1), vec![0]);
        assert!(shape().config_range(false, 59, 2).is_empty());
        assert!(shape().config_range(false, u32::MAX, 2).is_empty());
    }

    #[test]
    fn only_wce_is_writable() {
        assert_eq!(Shape::config_write(32, &[0]), Some(false));
        assert_eq!(Shape::config_write(32, &[1]), Some(true));
        assert_eq!(Shape::config_write(32, &[2]), None);
        assert_eq!(Shape::config_write(0, &[1; 8]), None);
    }

    #[test]
    fn features_follow_the_device() {
        let mut s = shape();
        assert_eq!(s.features() & feature::RO, 0);
        assert_ne!(s.features() & feature::DISCARD, 0);
        s.read_only = true;
        s.max_discard_sectors = 0;
        assert_ne!(s.features() & feature::RO, 0);
        assert_eq!(s.features() & feature::DISCARD, 0);
    }
}
