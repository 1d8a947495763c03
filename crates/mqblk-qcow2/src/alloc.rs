//! Cluster allocation and metadata write-back, in QEMU's order:
//!
//! - a new cluster's refcount is raised in memory before anything points
//!   to it, and written (then `fdatasync`) before any L2 or L1 table that
//!   points to it is written;
//! - an L2 table reaches the file only after the data it points to was
//!   written (allocating writes are synchronous) and synced with the
//!   refcounts;
//! - a refcount is lowered only after the table entry that used the
//!   cluster is gone from the file (durably): frees wait in
//!   `pending_free` until a write-back has synced the tables, and until
//!   the data I/O planned before them has ended (two epochs).
//!
//! Refcount blocks are read on demand and kept in memory; a new one is
//! placed inside the range it covers, so it counts itself. The refcount
//! table moves to a larger place when it is full. The L2 cache's dirty
//! tables leave it through [`ImageFile::make_room`] and the write-back.

use std::collections::HashMap;

use crate::check;
use crate::error::{Qcow2Error, Result};
use crate::file::ImageFile;
use crate::header::{self, field};
use crate::refcount;

/// The refcounts of an image, as far as read.
#[derive(Debug)]
pub struct Refcounts {
    /// The refcount table (offsets of blocks), maybe longer than on disk.
    pub(crate) table: Vec<u64>,
    pub(crate) table_dirty: bool,
    /// Where the table is in the file, and its clusters.
    pub(crate) table_offset: u64,
    pub(crate) table_clusters: u32,
    /// Blocks read or made, by index in the table: data, dirty.
    pub(crate) blocks: HashMap<u64, (Vec<u8>, bool)>,
    pub(crate) order: u32,
    pub(crate) cluster_bits: u32,
    /// Entries per block.
    pub(crate) per_block: u64,
    /// No free cluster below this one.
    pub(crate) free_hint: u64,
    /// Clusters being allocated (their refcounts not yet raised), which
    /// neither a new refcount block nor a nested allocation may take.
    pub(crate) reserved: Vec<(u64, u64)>,
}

impl Refcounts {
    fn is_reserved(&self, c: u64) -> bool {
        self.reserved.iter().any(|&(a, b)| (a..b).contains(&c))
    }
}

impl Refcounts {
    /// From the table as read at open.
    pub fn new(
        table: Vec<u64>,
        order: u32,
        cluster_bits: u32,
        table_offset: u64,
        table_clusters: u32,
    ) -> Self {
        Refcounts {
            table,
            table_dirty: false,
            table_offset,
            table_clusters,
            blocks: HashMap::new(),
            order,
            cluster_bits,
            per_block: refcount::entries_per_block(cluster_bits, order),
            free_hint: 0,
            reserved: Vec::new(),
        }
    }
}

/// The metadata of an open image, behind its lock.
#[derive(Debug)]
pub struct Meta {
    /// The active L1 table.
    pub(crate) l1: Vec<u64>,
    pub(crate) l1_dirty: bool,
    pub(crate) cache: crate::cache::L2Cache,
    pub(crate) rc: Refcounts,
    /// Byte ranges whose clusters lose a reference once the tables that
    /// no longer point to them are durable.
    pub(crate) pending_free: Vec<(u64, u64)>,
    /// Frees of the epoch before: given back once its I/O has ended.
    pub(crate) old_free: Vec<(u64, u64)>,
    /// The epoch data I/O is counted in now (0 or 1).
    pub(crate) epoch: usize,
    /// End of the last cluster in use.
    pub(crate) file_end: u64,
    /// From here on the file has never been written since it was opened:
    /// it reads as zeros (the file device extended it, sparse).
    pub(crate) fresh_from: u64,
    /// No cluster may end past this (the file device's capacity).
    pub(crate) limit: u64,
    /// The incompatible feature bits as in the file.
    pub(crate) incompatible: u64,
}

impl ImageFile {
    /// Bound of host offsets a read may touch.
    pub(crate) fn read_limit(&self, m: &Meta) -> u64 {
        m.limit.max(m.file_end)
    }

    /// Before a table comes into a full cache, write the victim back if
    /// it is dirty: the refcounts first (durably), then the table.
    pub(crate) fn make_room(&self, m: &mut Meta) -> Result<()> {
        if let Some(v) = m.cache.victim() {
            if m.cache.slot(v).dirty {
                self.flush_refcounts(m, true)?;
                let s = m.cache.slot(v);
                let (off, data) = (s.offset, std::mem::take(&mut s.data));
                let r = self.pwrite("write of an L2 table", off, &data);
                let s = m.cache.slot(v);
                s.data = data;
                r?;
                s.dirty = false;
            }
        }
        Ok(())
    }

    /// The refcount block of table index `b`, read if need be (`None`:
    /// not allocated, every refcount in its range is 0).
    fn block<'m>(&self, m: &'m mut Meta, b: u64) -> Result<Option<&'m mut (Vec<u8>, bool)>> {
        let off = match m.rc.table.get(b as usize) {
            Some(&o) if o != 0 => o,
            _ => return Ok(None),
        };
        if !m.rc.blocks.contains_key(&b) {
            let limit = self.read_limit(m);
            check::cluster_offset(
                &self.name,
                "refcount block",
                || format!("refcount table entry {b}"),
                off,
                self.cs,
                self.cs,
                limit,
            )?;
            let mut data = vec![0u8; self.cs as usize];
            self.pread("read of a refcount block", off, &mut data)?;
            m.rc.blocks.insert(b, (data, false));
        }
        Ok(m.rc.blocks.get_mut(&b))
    }

    /// The refcount of host cluster `c`.
    pub(crate) fn refcount(&self, m: &mut Meta, c: u64) -> Result<u64> {
        let (b, i) = (c / m.rc.per_block, c % m.rc.per_block);
        let order = m.rc.order;
        Ok(match self.block(m, b)? {
            Some((d, _)) => refcount::get(d, order, i),
            None => 0,
        })
    }

    /// Set the refcount of host cluster `c` to `v`, making its block (and
    /// growing the table) if need be. `avoid`: clusters being allocated,
    /// where a new block must not go.
    pub(crate) fn set_refcount(
        &self,
        m: &mut Meta,
        c: u64,
        v: u64,
        avoid: (u64, u64),
    ) -> Result<()> {
        let (b, i) = (c / m.rc.per_block, c % m.rc.per_block);
        if v > refcount::max_refcount(m.rc.order) {
            return Err(Qcow2Error::Unsupported {
                image: self.name.clone(),
                what: format!(
                    "the refcount of the cluster at file offset {} would pass the {}-bit limit of {}",
                    c << m.rc.cluster_bits,
                    1u32 << m.rc.order,
                    refcount::max_refcount(m.rc.order)
                ),
            });
        }
        if self.block(m, b)?.is_none() {
            self.new_block(m, b, c, avoid)?;
        }
        let order = m.rc.order;
        let (d, dirty) = self.block(m, b)?.expect("made above");
        refcount::set(d, order, i, v);
        *dirty = true;
        if v == 0 {
            m.rc.free_hint = m.rc.free_hint.min(c);
        }
        Ok(())
    }

    /// Make refcount block `b`, placed at a cluster of its own range
    /// (all free, since it had no block), not `c` and not in `avoid`.
    fn new_block(&self, m: &mut Meta, b: u64, c: u64, avoid: (u64, u64)) -> Result<()> {
        if b as usize >= m.rc.table.len() {
            let past = avoid.1.max(c + 1);
            self.grow_table(m, b, past)?;
            if m.rc.table[b as usize] != 0 {
                // Made for the new table's own clusters.
                return Ok(());
            }
        }
        let first = b * m.rc.per_block;
        let p = (first..first + m.rc.per_block)
            .find(|&p| p != c && !(avoid.0..avoid.1).contains(&p) && !m.rc.is_reserved(p))
            .ok_or_else(|| Qcow2Error::Unsupported {
                image: self.name.clone(),
                what: format!(
                    "no room for refcount block {b} outside the clusters being allocated"
                ),
            })?;
        let off = p << m.rc.cluster_bits;
        if off + self.cs > m.limit {
            return Err(Qcow2Error::NoSpace {
                image: self.name.clone(),
                offset: off,
                limit: m.limit,
            });
        }
        let mut data = vec![0u8; self.cs as usize];
        refcount::set(&mut data, m.rc.order, p - first, 1);
        m.rc.blocks.insert(b, (data, true));
        m.rc.table[b as usize] = off;
        m.rc.table_dirty = true;
        m.file_end = m.file_end.max(off + self.cs);
        m.fresh_from = m.fresh_from.max(off + self.cs);
        Ok(())
    }

    /// Move the refcount table to a place with room for block `b`, at or
    /// after cluster `past` and the end of the clusters in use.
    fn grow_table(&self, m: &mut Meta, b: u64, past: u64) -> Result<()> {
        let per_cluster = self.cs / 8;
        let entries = (m.rc.table.len() as u64 * 2)
            .max(b + 2)
            .next_multiple_of(per_cluster);
        let clusters = entries / per_cluster;
        if entries * 8 > header::MAX_REFTABLE_BYTES.max(self.cs) {
            return Err(Qcow2Error::NoSpace {
                image: self.name.clone(),
                offset: b * m.rc.per_block * self.cs,
                limit: header::MAX_REFTABLE_BYTES,
            });
        }
        m.rc.table.resize(entries as usize, 0);
        let from = past.max(m.file_end >> m.rc.cluster_bits);
        let start = self.alloc_from(m, clusters, from)?;
        let (old_off, old_clusters) = (m.rc.table_offset, m.rc.table_clusters);
        m.rc.table_offset = start;
        m.rc.table_clusters = clusters as u32;
        // The blocks and the new table, durably, before the header names it.
        m.rc.table_dirty = true;
        self.flush_refcounts(m, true)?;
        let mut h = [0u8; 12];
        h[..8].copy_from_slice(&start.to_be_bytes());
        h[8..].copy_from_slice(&(clusters as u32).to_be_bytes());
        self.pwrite(
            "write of the header's refcount table fields",
            field::REFCOUNT_TABLE_OFFSET,
            &h,
        )?;
        self.sync()?;
        // Nothing points to the old table any more.
        for k in 0..u64::from(old_clusters) {
            let c = (old_off >> m.rc.cluster_bits) + k;
            let r = self.refcount(m, c)?;
            self.set_refcount(m, c, r.saturating_sub(1), (0, 0))?;
        }
        Ok(())
    }

    /// Allocate `n` contiguous free clusters (refcount 1 each): the file
    /// offset of the first.
    pub(crate) fn alloc(&self, m: &mut Meta, n: u64) -> Result<u64> {
        let from = m.rc.free_hint;
        self.alloc_from(m, n, from)
    }

    /// As [`Image::alloc`], looking from cluster `from` on.
    fn alloc_from(&self, m: &mut Meta, n: u64, from: u64) -> Result<u64> {
        let mut c = from;
        let mut run = 0;
        loop {
            if self.refcount(m, c + run)? == 0 && !m.rc.is_reserved(c + run) {
                run += 1;
                if run == n {
                    break;
                }
            } else {
                c += run + 1;
                run = 0;
            }
        }
        let end = (c + n) << m.rc.cluster_bits;
        if end > m.limit {
            return Err(Qcow2Error::NoSpace {
                image: self.name.clone(),
                offset: c << m.rc.cluster_bits,
                limit: m.limit,
            });
        }
        m.rc.reserved.push((c, c + n));
        let mut r = Ok(());
        for k in 0..n {
            r = self.set_refcount(m, c + k, 1, (c, c + n));
            if r.is_err() {
                break;
            }
        }
        m.rc.reserved.pop();
        r?;
        if m.rc.free_hint == c || (n == 1 && from == m.rc.free_hint) {
            m.rc.free_hint = c + n;
        }
        m.file_end = m.file_end.max(end);
        m.fresh_from = m.fresh_from.max(end);
        Ok(c << m.rc.cluster_bits)
    }

    /// Allocate one cluster; if the file device has no room left, write
    /// back first (which frees what was waiting) and try again.
    pub(crate) fn alloc_cluster(&self, m: &mut Meta) -> Result<u64> {
        // (The frees that wait are applied by the write-back only when no
        // data I/O is in flight.)
        match self.alloc(m, 1) {
            Err(Qcow2Error::NoSpace { .. })
                if !m.pending_free.is_empty() || !m.old_free.is_empty() =>
            {
                // Twice: the second gives back what the first set aside.
                self.writeback(m)?;
                self.writeback(m)?;
                self.alloc(m, 1)
            }
            r => r,
        }
    }

    /// Drop one reference to every cluster of `[offset, offset + len)`,
    /// once the tables that pointed to them are durable.
    pub(crate) fn free_later(&self, m: &mut Meta, offset: u64, len: u64) {
        m.pending_free.push((offset, len));
    }

    /// Write the dirty refcount blocks and the table; then `fdatasync` if
    /// anything was written or `sync_anyway`.
    pub(crate) fn flush_refcounts(&self, m: &mut Meta, sync_anyway: bool) -> Result<()> {
        let mut wrote = false;
        let cbits = m.rc.cluster_bits;
        let mut dirty: Vec<u64> =
            m.rc.blocks
                .iter()
                .filter(|(_, (_, d))| *d)
                .map(|(&b, _)| b)
                .collect();
        dirty.sort_unstable();
        for b in dirty {
            let off = m.rc.table[b as usize];
            let (d, flag) = m.rc.blocks.get_mut(&b).expect("listed above");
            self.pwrite("write of a refcount block", off, d)?;
            *flag = false;
            wrote = true;
        }
        if m.rc.table_dirty {
            let len = (u64::from(m.rc.table_clusters) << cbits) as usize;
            let mut b = vec![0u8; len];
            for (k, e) in m.rc.table.iter().take(len / 8).enumerate() {
                b[8 * k..8 * k + 8].copy_from_slice(&e.to_be_bytes());
            }
            self.pwrite("write of the refcount table", m.rc.table_offset, &b)?;
            m.rc.table_dirty = false;
            wrote = true;
        }
        if wrote || sync_anyway {
            self.sync()?;
        }
        Ok(())
    }

    /// Make everything written so far durable, in order: refcounts (and
    /// the data before them), then L2 tables, then the L1 table, then the
    /// frees that waited for those tables.
    pub(crate) fn writeback(&self, m: &mut Meta) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        let l2_dirty = m.cache.slots_mut().any(|s| s.dirty);
        self.flush_refcounts(m, l2_dirty || m.l1_dirty)?;
        if l2_dirty {
            let mut err = None;
            for s in m.cache.slots_mut().filter(|s| s.dirty) {
                match self.pwrite("write of an L2 table", s.offset, &s.data) {
                    Ok(()) => s.dirty = false,
                    Err(e) => err = Some(e),
                }
            }
            if let Some(e) = err {
                return Err(e);
            }
        }
        if m.l1_dirty {
            // The L2 tables it points to are durable before it is written.
            self.sync()?;
            let mut b = vec![0u8; m.l1.len() * 8];
            for (k, e) in m.l1.iter().enumerate() {
                b[8 * k..8 * k + 8].copy_from_slice(&e.to_be_bytes());
            }
            self.pwrite("write of the L1 table", self.hdr.l1_table_offset, &b)?;
            m.l1_dirty = false;
        }
        self.sync()?;
        // A free waits until the I/O of its epoch has ended: it was mapped
        // before the entry changed, and may still be bound for the old
        // cluster. When the epoch before has no I/O left, its frees are
        // given back, and the epochs turn.
        let before = 1 - m.epoch;
        if self.mapped.in_flight(before) == 0 {
            let frees = std::mem::take(&mut m.old_free);
            m.old_free = std::mem::take(&mut m.pending_free);
            m.epoch = before;
            self.mapped
                .epoch
                .store(before, std::sync::atomic::Ordering::SeqCst);
            if frees.is_empty() {
                return Ok(());
            }
            let cbits = m.rc.cluster_bits;
            for (off, len) in frees {
                let first = off >> cbits;
                let last = (off + len.max(1) - 1) >> cbits;
                for c in first..=last {
                    let r = self.refcount(m, c)?;
                    if r > 0 {
                        self.set_refcount(m, c, r - 1, (0, 0))?;
                    }
                }
            }
            self.flush_refcounts(m, false)?;
        }
        Ok(())
    }

    /// Write the incompatible feature bits (the dirty bit), durably.
    pub(crate) fn set_incompatible(&self, m: &mut Meta, v: u64) -> Result<()> {
        self.pwrite(
            "write of the header's incompatible features",
            field::INCOMPATIBLE,
            &v.to_be_bytes(),
        )?;
        self.sync()?;
        m.incompatible = v;
        Ok(())
    }

    /// End of the last cluster whose refcount is not 0.
    pub(crate) fn highest_used(&self, m: &mut Meta) -> Result<u64> {
        let mut end = 0;
        for b in (0..m.rc.table.len() as u64).rev() {
            if m.rc.table[b as usize] == 0 {
                continue;
            }
            let per = m.rc.per_block;
            for i in (0..per).rev() {
                if self.refcount(m, b * per + i)? != 0 {
                    end = (b * per + i + 1) << m.rc.cluster_bits;
                    break;
                }
            }
            if end != 0 {
                break;
            }
        }
        Ok(end.max(self.cs))
    }
}
