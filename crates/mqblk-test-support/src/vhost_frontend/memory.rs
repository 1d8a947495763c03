//! The guest's memory, at the bottom of the test frontend: two memfd
//! regions with a hole between them (so that an address "outside guest
//! memory" can be one below the end as well as one past it), shared with
//! the backend by their fds in SET_MEM_TABLE, and mapped here through
//! vm-memory's safe API.
//!
//! ```text
//! gpa 0            ring region: one 64 KiB area per queue (descriptor
//!                  table, avail, used, header, status, discard segments,
//!                  two indirect tables)
//! hole_gpa()       1 MiB that no region maps
//! data_gpa(0)      data region: one data area per queue
//! end_gpa()        nothing from here on
//! ```

use std::fs::File;

use vhost::VhostUserMemoryRegionInfo;
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
};

use super::error::FrontendError;

/// The ring region's bytes for one queue.
const QUEUE_AREA_BYTES: u64 = 0x1_0000;
/// Offsets inside one queue's area of the ring region.
const DESC_OFFSET: u64 = 0;
const AVAIL_OFFSET: u64 = 0x1000;
const USED_OFFSET: u64 = 0x2000;
const HEADER_OFFSET: u64 = 0x3000;
const STATUS_OFFSET: u64 = 0x3800;
const SEGMENTS_OFFSET: u64 = 0x4000;
const INDIRECT_OFFSET: u64 = 0x8000;
/// One indirect table's room: 512 descriptors.
pub const INDIRECT_TABLE_BYTES: u64 = 0x2000;
/// How many indirect tables each queue has room for.
pub const INDIRECT_TABLES: u16 = 2;
/// The discard segments' room: 1024 segments of 16 bytes.
pub const SEGMENTS_BYTES: u64 = SEGMENTS_OFFSET;
/// The largest queue whose rings fit in a queue's area.
pub const QUEUE_SIZE_MAX: u16 = 256;
/// The hole between the two regions.
pub const HOLE_BYTES: u64 = 0x10_0000;

/// Where everything is, for `num_queues` queues of `data_bytes` each.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Queues laid out.
    pub num_queues: u16,
    /// Each queue's data area (in the data region), in bytes.
    pub data_bytes: u64,
}

impl Layout {
    fn queue_area(&self, q: u16) -> u64 {
        debug_assert!(q < self.num_queues, "queue {q} of {}", self.num_queues);
        u64::from(q) * QUEUE_AREA_BYTES
    }

    /// The ring region's length.
    pub fn ring_region_bytes(&self) -> u64 {
        u64::from(self.num_queues) * QUEUE_AREA_BYTES
    }

    /// The first address of the hole (no region maps it).
    pub fn hole_gpa(&self) -> u64 {
        self.ring_region_bytes()
    }

    /// The data region's first address.
    pub fn data_region_gpa(&self) -> u64 {
        self.hole_gpa() + HOLE_BYTES
    }

    /// The data region's length.
    pub fn data_region_bytes(&self) -> u64 {
        u64::from(self.num_queues) * self.data_bytes
    }

    /// The first address past guest memory.
    pub fn end_gpa(&self) -> u64 {
        self.data_region_gpa() + self.data_region_bytes()
    }

    /// Queue `q`'s descriptor table.
    pub fn desc_gpa(&self, q: u16) -> u64 {
        self.queue_area(q) + DESC_OFFSET
    }

    /// Queue `q`'s avail ring.
    pub fn avail_gpa(&self, q: u16) -> u64 {
        self.queue_area(q) + AVAIL_OFFSET
    }

    /// Queue `q`'s used ring.
    pub fn used_gpa(&self, q: u16) -> u64 {
        self.queue_area(q) + USED_OFFSET
    }

    /// Queue `q`'s request header (16 bytes, and room for a longer one).
    pub fn header_gpa(&self, q: u16) -> u64 {
        self.queue_area(q) + HEADER_OFFSET
    }

    /// Queue `q`'s status byte.
    pub fn status_gpa(&self, q: u16) -> u64 {
        self.queue_area(q) + STATUS_OFFSET
    }

    /// Queue `q`'s discard / write-zeroes segments.
    pub fn segments_gpa(&self, q: u16) -> u64 {
        self.queue_area(q) + SEGMENTS_OFFSET
    }

    /// Queue `q`'s indirect table `slot` (< [`INDIRECT_TABLES`]).
    pub fn indirect_gpa(&self, q: u16, slot: u16) -> u64 {
        debug_assert!(slot < INDIRECT_TABLES, "indirect slot {slot}");
        self.queue_area(q) + INDIRECT_OFFSET + u64::from(slot) * INDIRECT_TABLE_BYTES
    }

    /// Queue `q`'s data area (`data_bytes` long).
    pub fn data_gpa(&self, q: u16) -> u64 {
        debug_assert!(q < self.num_queues, "queue {q} of {}", self.num_queues);
        self.data_region_gpa() + u64::from(q) * self.data_bytes
    }
}

/// The guest memory itself: both regions, mapped shared from memfds.
pub struct GuestMem {
    /// Where everything is.
    pub layout: Layout,
    mem: GuestMemoryMmap,
}

/// A memfd of `len` bytes (sparse: pages come as they are touched).
fn memfd(name: &str, len: u64) -> Result<File, FrontendError> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| FrontendError::Memory(format!("memfd_create {name}: {e}")))?;
    let file = File::from(fd);
    file.set_len(len)
        .map_err(|e| FrontendError::Memory(format!("size memfd {name} to {len} bytes: {e}")))?;
    Ok(file)
}

impl GuestMem {
    /// Make and map both regions.
    pub fn new(layout: Layout) -> Result<GuestMem, FrontendError> {
        let ring = memfd("mqblk-vhost-rings", layout.ring_region_bytes())?;
        let data = memfd("mqblk-vhost-data", layout.data_region_bytes())?;
        let to_usize =
            |n: u64| usize::try_from(n).map_err(|_| FrontendError::Memory(format!("{n} bytes")));
        let ranges = [
            (
                GuestAddress(0),
                to_usize(layout.ring_region_bytes())?,
                Some(FileOffset::new(ring, 0)),
            ),
            (
                GuestAddress(layout.data_region_gpa()),
                to_usize(layout.data_region_bytes())?,
                Some(FileOffset::new(data, 0)),
            ),
        ];
        let mem = GuestMemoryMmap::from_ranges_with_files(ranges.iter())
            .map_err(|e| FrontendError::Memory(format!("map the regions: {e}")))?;
        Ok(GuestMem { layout, mem })
    }

    /// Both regions as SET_MEM_TABLE describes them (their fds, and the
    /// addresses they have in this process, which SET_VRING_ADDR uses).
    pub fn regions(&self) -> Result<Vec<VhostUserMemoryRegionInfo>, FrontendError> {
        self.mem
            .iter()
            .map(|r| {
                VhostUserMemoryRegionInfo::from_guest_region(r)
                    .map_err(|e| FrontendError::Memory(format!("describe a region: {e}")))
            })
            .collect()
    }

    /// The address in this process of guest address `gpa` (inside a
    /// region), as SET_VRING_ADDR wants it.
    pub fn user_addr(&self, gpa: u64) -> Result<u64, FrontendError> {
        for r in self.regions()? {
            if gpa >= r.guest_phys_addr && gpa - r.guest_phys_addr < r.memory_size {
                return Ok(r.userspace_addr + (gpa - r.guest_phys_addr));
            }
        }
        Err(FrontendError::Memory(format!(
            "guest address {gpa:#x} is in no region"
        )))
    }

    /// Write `obj` at `gpa`.
    pub fn put<T: vm_memory::ByteValued>(&self, gpa: u64, obj: T) -> Result<(), FrontendError> {
        self.mem
            .write_obj(obj, GuestAddress(gpa))
            .map_err(|e| FrontendError::Memory(format!("write at {gpa:#x}: {e}")))
    }

    /// Read a `T` at `gpa`.
    pub fn get<T: vm_memory::ByteValued>(&self, gpa: u64) -> Result<T, FrontendError> {
        self.mem
            .read_obj(GuestAddress(gpa))
            .map_err(|e| FrontendError::Memory(format!("read at {gpa:#x}: {e}")))
    }

    /// Write `bytes` at `gpa`.
    pub fn put_bytes(&self, gpa: u64, bytes: &[u8]) -> Result<(), FrontendError> {
        self.mem.write_slice(bytes, GuestAddress(gpa)).map_err(|e| {
            FrontendError::Memory(format!("write {} bytes at {gpa:#x}: {e}", bytes.len()))
        })
    }

    /// Read `len` bytes at `gpa`.
    pub fn get_bytes(&self, gpa: u64, len: usize) -> Result<Vec<u8>, FrontendError> {
        let mut v = vec![0u8; len];
        self.mem
            .read_slice(&mut v, GuestAddress(gpa))
            .map_err(|e| FrontendError::Memory(format!("read {len} bytes at {gpa:#x}: {e}")))?;
        Ok(v)
    }

    /// Store a ring index at `gpa` with release ordering (after the
    /// entries it publishes).
    pub fn store_u16(&self, gpa: u64, v: u16) -> Result<(), FrontendError> {
        self.mem
            .store(v, GuestAddress(gpa), std::sync::atomic::Ordering::Release)
            .map_err(|e| FrontendError::Memory(format!("store at {gpa:#x}: {e}")))
    }

    /// Load a ring index at `gpa` with acquire ordering (before the
    /// entries it publishes).
    pub fn load_u16(&self, gpa: u64) -> Result<u16, FrontendError> {
        self.mem
            .load(GuestAddress(gpa), std::sync::atomic::Ordering::Acquire)
            .map_err(|e| FrontendError::Memory(format!("load at {gpa:#x}: {e}")))
    }

    /// Whether `gpa` is inside a region (for the tests' own checks).
    pub fn contains(&self, gpa: u64) -> bool {
        self.mem
            .iter()
            .any(|r| gpa >= r.start_addr().0 && gpa - r.start_addr().0 < r.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)]
    fn the_hole_and_the_end_are_outside_guest_memory() {
        let layout = Layout {
            num_queues: 2,
            data_bytes: 0x10_0000,
        };
        let mem = GuestMem::new(layout).expect("map guest memory");
        for q in 0..2 {
            for gpa in [
                layout.desc_gpa(q),
                layout.used_gpa(q),
                layout.status_gpa(q),
                layout.indirect_gpa(q, INDIRECT_TABLES - 1),
                layout.data_gpa(q),
            ] {
                assert!(mem.contains(gpa), "{gpa:#x} of queue {q}");
            }
        }
        for gpa in [
            layout.hole_gpa(),
            layout.data_region_gpa() - 1,
            layout.end_gpa(),
        ] {
            assert!(!mem.contains(gpa), "{gpa:#x}");
            assert!(mem.user_addr(gpa).is_err(), "{gpa:#x}");
            assert!(mem.put(gpa, 0u8).is_err(), "{gpa:#x}");
        }
        mem.put_bytes(layout.data_gpa(1), b"abc").unwrap();
        assert_eq!(mem.get_bytes(layout.data_gpa(1), 3).unwrap(), b"abc");
        assert_eq!(mem.regions().unwrap().len(), 2);
    }
}
