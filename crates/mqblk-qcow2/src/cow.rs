//! Writes that change the mapping (synchronous, under the metadata lock):
//! allocation on first write with copy-on-write of the rest of the
//! cluster (from the backing file, a zero cluster, a compressed cluster
//! or a cluster shared with a snapshot), copy-on-write of an L2 table
//! shared with a snapshot, and zeroing or discarding clusters. The data
//! is written before the L2 entry that points to it changes; the old
//! cluster is freed only after the new entry is durable
//! ([`Image::free_later`]).

use crate::alloc::Meta;
use crate::error::Result;
use crate::image::{DiscardMode, Image};
use crate::table::{Cluster, L1Entry};

impl Image {
    /// The cache slot of the L2 table of L1 entry `i`, ready to be
    /// changed: allocated if missing, copied if shared with a snapshot.
    fn l2_for_write(&self, m: &mut Meta, i: usize) -> Result<usize> {
        match self.l2_slot(m, i)? {
            Some((slot, e)) if e.copied => Ok(slot),
            Some((slot, e)) => {
                // The table moves: the queues' slices of it are not trusted.
                self.mapped.bump();
                let data = m.cache.slot(slot).data.clone();
                let new = self.alloc_cluster(m)?;
                self.make_room(m)?;
                let s = m.cache.insert(new, data, true);
                m.l1[i] = L1Entry {
                    l2_offset: new,
                    copied: true,
                }
                .encode();
                m.l1_dirty = true;
                self.free_later(m, e.l2_offset, self.cs);
                Ok(s)
            }
            None => {
                let new = self.alloc_cluster(m)?;
                self.make_room(m)?;
                let s = m.cache.insert(new, vec![0u8; self.cs as usize], true);
                m.l1[i] = L1Entry {
                    l2_offset: new,
                    copied: true,
                }
                .encode();
                m.l1_dirty = true;
                Ok(s)
            }
        }
    }

    /// Set the L2 entry of guest offset `guest`, freeing what the old one
    /// held once the change is durable.
    fn set_entry(&self, m: &mut Meta, guest: u64, old: Cluster, new: Cluster) -> Result<()> {
        if let Cluster::Normal { copied: true, .. } = old {
            // A queue's slice may hold it as data to write in place.
            self.mapped.bump();
        }
        let (i, j) = self.indices(guest);
        let slot = self.l2_for_write(m, i)?;
        let w = self.hdr.l2_entry_bytes() as usize;
        let s = m.cache.slot(slot);
        s.data[j * w..j * w + 8].copy_from_slice(&new.encode().to_be_bytes());
        s.dirty = true;
        match old {
            Cluster::Compressed { host, sectors } => {
                let start = host & !511;
                self.free_later(m, start, sectors * 512);
            }
            o => {
                if let Some(h) = o.host() {
                    if new.host() != Some(h) {
                        self.free_later(m, h, self.cs);
                    }
                }
            }
        }
        Ok(())
    }

    /// Write `data` at guest offset `guest` (inside one cluster): in place
    /// if the cluster is allocated and not shared, else into a new cluster
    /// holding the old contents around it.
    pub(crate) fn write_sync(&self, m: &mut Meta, guest: u64, data: &[u8]) -> Result<()> {
        let (old, _) = self.map(m, guest)?;
        let at = guest & (self.cs - 1);
        if let Cluster::Normal { host, copied: true } = old {
            return self.pwrite("write of data", host + at, data);
        }
        let reads_zero = match old {
            Cluster::Zero { .. } => true,
            Cluster::Unallocated => self.backing.is_none(),
            _ => false,
        };
        let fresh_from = m.fresh_from;
        if reads_zero {
            let host = self.alloc_cluster(m)?;
            if host >= fresh_from {
                // A cluster the file never held reads as zeros already:
                // only the data is written (QEMU skips zero copy-on-write
                // the same way). The data first; the entry after.
                self.pwrite("write of a new cluster", host + at, data)?;
                return self.set_entry(m, guest, old, Cluster::Normal { host, copied: true });
            }
            let mut buf = vec![0u8; self.cs as usize];
            buf[at as usize..at as usize + data.len()].copy_from_slice(data);
            self.pwrite("write of a new cluster", host, &buf)?;
            return self.set_entry(m, guest, old, Cluster::Normal { host, copied: true });
        }
        let start = guest - at;
        let mut buf = vec![0u8; self.cs as usize];
        if at != 0 || data.len() as u64 != self.cs {
            let n = self.cs.min(self.hdr.size - start) as usize;
            self.read_guest(m, start, &mut buf[..n])?;
        }
        buf[at as usize..at as usize + data.len()].copy_from_slice(data);
        let host = self.alloc_cluster(m)?;
        // The data first; the entry after.
        self.pwrite("write of a new cluster", host, &buf)?;
        self.set_entry(m, guest, old, Cluster::Normal { host, copied: true })
    }

    /// Make `[guest, guest + len)` (inside one cluster) read as zeros: a
    /// whole cluster by its entry (a discard may free it), a part by
    /// writing zeros.
    pub(crate) fn zero_sync(
        &self,
        m: &mut Meta,
        guest: u64,
        len: u64,
        discard: bool,
    ) -> Result<()> {
        let (old, _) = self.map(m, guest)?;
        let whole =
            guest.is_multiple_of(self.cs) && (len == self.cs || guest + len == self.hdr.size);
        let backing = self.backing.is_some();
        if !whole {
            let reads_zero = match old {
                Cluster::Zero { .. } => true,
                Cluster::Unallocated => !backing,
                _ => false,
            };
            if reads_zero {
                return Ok(());
            }
            return self.write_sync(m, guest, &vec![0u8; len as usize]);
        }
        let new = if self.hdr.version >= 3 {
            match (discard, self.discard, old) {
                (true, DiscardMode::Unmap, _) if !backing => Cluster::Unallocated,
                (
                    true,
                    DiscardMode::Zero,
                    Cluster::Normal { host, copied: true } | Cluster::Zero { host, copied: true },
                ) => Cluster::Zero { host, copied: true },
                _ => Cluster::Zero {
                    host: 0,
                    copied: false,
                },
            }
        } else if !backing {
            Cluster::Unallocated
        } else {
            return self.write_sync(m, guest, &vec![0u8; len as usize]);
        };
        if new == old {
            return Ok(());
        }
        if new == Cluster::Unallocated
            && self.indices(guest).0 < m.l1.len()
            && m.l1[self.indices(guest).0] == 0
        {
            return Ok(());
        }
        self.set_entry(m, guest, old, new)
    }
}
