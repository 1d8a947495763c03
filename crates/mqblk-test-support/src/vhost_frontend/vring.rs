//! The driver's side of one split virtqueue (virtio 1.x, 2.7): it lays
//! any chain of descriptors, good or not, into the queue's descriptor
//! table (or an indirect table), publishes its head in the avail ring,
//! kicks, and waits (bounded) for the used element. Below the blk layer,
//! above the guest memory.

use std::time::{Duration, Instant};

use virtio_queue::desc::split::Descriptor;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::error::FrontendError;
use super::memory::{GuestMem, INDIRECT_TABLES, INDIRECT_TABLE_BYTES};

/// One descriptor as the driver writes it: any address, length, flags
/// and next index.
pub type Desc = Descriptor;

/// A used element: the head it gives back and the bytes written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Used {
    /// The head of the chain given back.
    pub id: u32,
    /// The bytes the device says it wrote.
    pub len: u32,
}

/// The descriptor flags (virtio 1.x, 2.7.5).
pub mod flags {
    use virtio_bindings::virtio_ring::{
        VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
    };

    /// The chain goes on at `next`.
    pub const NEXT: u16 = VRING_DESC_F_NEXT as u16;
    /// The device writes this buffer (else it reads it).
    pub const WRITE: u16 = VRING_DESC_F_WRITE as u16;
    /// The buffer is a table of descriptors.
    pub const INDIRECT: u16 = VRING_DESC_F_INDIRECT as u16;
}

/// Chain `(addr, len, device_writes)` buffers through `NEXT`, numbered
/// from `first` on: what a well-behaved driver puts in a table.
pub fn linked(first: u16, bufs: &[(u64, u32, bool)]) -> Vec<Desc> {
    let n = bufs.len();
    bufs.iter()
        .enumerate()
        .map(|(i, &(addr, len, write))| {
            let mut f = if write { flags::WRITE } else { 0 };
            let mut next = 0;
            if i + 1 < n {
                f |= flags::NEXT;
                next = first.wrapping_add(i as u16 + 1);
            }
            Desc::new(addr, len, f, next)
        })
        .collect()
}

/// The driver's state of one queue.
pub struct SplitRing {
    /// Its index.
    pub index: u16,
    /// Its size (descriptors).
    pub size: u16,
    desc_gpa: u64,
    avail_gpa: u64,
    used_gpa: u64,
    /// The avail index this driver publishes next.
    next_avail: u16,
    /// The used index this driver reads next.
    next_used: u16,
    /// The fd the driver kicks.
    pub kick: EventFd,
    /// The fd the device calls (the waits poll the used ring instead).
    pub call: EventFd,
}

impl SplitRing {
    /// Queue `index` of `size` descriptors, its rings at these addresses
    /// (zeroed by the caller: a fresh memfd is).
    pub fn new(
        index: u16,
        size: u16,
        desc_gpa: u64,
        avail_gpa: u64,
        used_gpa: u64,
    ) -> Result<SplitRing, FrontendError> {
        let fd = |what| {
            EventFd::new(EFD_NONBLOCK).map_err(|source| FrontendError::Event {
                queue: index,
                what,
                source,
            })
        };
        Ok(SplitRing {
            index,
            size,
            desc_gpa,
            avail_gpa,
            used_gpa,
            next_avail: 0,
            next_used: 0,
            kick: fd("make the kick")?,
            call: fd("make the call")?,
        })
    }

    /// The addresses of its descriptor table, avail ring and used ring.
    pub fn addrs(&self) -> (u64, u64, u64) {
        (self.desc_gpa, self.avail_gpa, self.used_gpa)
    }

    /// Write `descs` into the descriptor table from slot `first` on.
    pub fn put_descs(
        &self,
        mem: &GuestMem,
        first: u16,
        descs: &[Desc],
    ) -> Result<(), FrontendError> {
        if usize::from(first) + descs.len() > usize::from(self.size) {
            return Err(FrontendError::ChainTooLong {
                queue: self.index,
                descs: descs.len(),
                room: usize::from(self.size - first.min(self.size)),
            });
        }
        for (i, d) in descs.iter().enumerate() {
            mem.put(self.desc_gpa + 16 * (u64::from(first) + i as u64), *d)?;
        }
        Ok(())
    }

    /// Write `descs` as indirect table `slot` of this queue (its room in
    /// the ring region starts at `table_gpa`): the address and the length
    /// (16 bytes per descriptor) an INDIRECT descriptor names.
    pub fn put_indirect(
        &self,
        mem: &GuestMem,
        table_gpa: u64,
        slot: u16,
        descs: &[Desc],
    ) -> Result<(u64, u32), FrontendError> {
        let room = (INDIRECT_TABLE_BYTES / 16) as usize;
        if slot >= INDIRECT_TABLES || descs.len() > room {
            return Err(FrontendError::ChainTooLong {
                queue: self.index,
                descs: descs.len(),
                room,
            });
        }
        for (i, d) in descs.iter().enumerate() {
            mem.put(table_gpa + 16 * i as u64, *d)?;
        }
        Ok((table_gpa, 16 * descs.len() as u32))
    }

    /// Put `head` in the avail ring's next entry and move the avail index
    /// on by `advance` (1 for a well-behaved driver; more lies about how
    /// many heads there are). With EVENT_IDX, `used_event` asks for a call
    /// at the next used element.
    pub fn publish(
        &mut self,
        mem: &GuestMem,
        head: u16,
        advance: u16,
    ) -> Result<(), FrontendError> {
        let slot = u64::from(self.next_avail % self.size);
        mem.put(self.avail_gpa + 4 + 2 * slot, head)?;
        // used_event, read by the device only with EVENT_IDX.
        mem.put(
            self.avail_gpa + 4 + 2 * u64::from(self.size),
            self.next_used,
        )?;
        self.next_avail = self.next_avail.wrapping_add(advance);
        mem.store_u16(self.avail_gpa + 2, self.next_avail)
    }

    /// Kick the device.
    pub fn kick(&self) -> Result<(), FrontendError> {
        self.kick.write(1).map_err(|source| FrontendError::Event {
            queue: self.index,
            what: "write the kick",
            source,
        })
    }

    /// The next used element if the device has put one.
    pub fn poll_used(&mut self, mem: &GuestMem) -> Result<Option<Used>, FrontendError> {
        let used_idx = mem.load_u16(self.used_gpa + 2)?;
        if used_idx == self.next_used {
            return Ok(None);
        }
        let slot = u64::from(self.next_used % self.size);
        let at = self.used_gpa + 4 + 8 * slot;
        let elem = Used {
            id: mem.get(at)?,
            len: mem.get(at + 4)?,
        };
        self.next_used = self.next_used.wrapping_add(1);
        Ok(Some(elem))
    }

    /// Wait at most `max` for the next used element: `None` if none came.
    pub fn wait_used(
        &mut self,
        mem: &GuestMem,
        max: Duration,
    ) -> Result<Option<Used>, FrontendError> {
        let start = Instant::now();
        loop {
            if let Some(u) = self.poll_used(mem)? {
                return Ok(Some(u));
            }
            if start.elapsed() >= max {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
