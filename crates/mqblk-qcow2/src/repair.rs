//! Refcounts after a crash with lazy refcounts: an image opened for
//! writing with the dirty bit set may have refcounts below what its tables
//! use (QEMU skips their updates until a clean close). Every cluster the
//! header, the tables, the active L1 and every snapshot's L1 reach is
//! counted, and any refcount below its count is raised, before anything
//! is allocated. Refcounts above it (leaks) are left: harmless.

use std::collections::HashMap;

use crate::alloc::Meta;
use crate::check;
use crate::error::{Qcow2Error, Result};
use crate::file::ImageFile;
use crate::snapshot::Snapshot;
use crate::table::{Cluster, L1Entry};

impl ImageFile {
    /// Raise refcounts to the references; returns how many were raised.
    /// `snapshot_table_len`: bytes of the snapshot table.
    pub(crate) fn repair_refcounts(
        &self,
        m: &mut Meta,
        snapshots: &[Snapshot],
        snapshot_table_len: u64,
    ) -> Result<u64> {
        let cb = self.hdr.cluster_bits;
        let cs = self.cs;
        let mut refs: HashMap<u64, u64> = HashMap::new();
        let mut add = |off: u64, len: u64| {
            if len == 0 {
                return;
            }
            for c in off >> cb..=(off + len - 1) >> cb {
                *refs.entry(c).or_default() += 1;
            }
        };
        add(0, cs);
        add(m.rc.table_offset, u64::from(m.rc.table_clusters) * cs);
        for &b in m.rc.table.iter().filter(|&&b| b != 0) {
            add(b, cs);
        }
        if !snapshots.is_empty() {
            add(self.hdr.snapshots_offset, snapshot_table_len);
        }
        let mut l1s = vec![(m.l1.clone(), self.hdr.l1_table_offset)];
        for s in snapshots {
            let mut b = vec![0u8; s.l1_size as usize * 8];
            self.pread("read of a snapshot's L1 table", s.l1_table_offset, &mut b)?;
            let l1 = b
                .chunks_exact(8)
                .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
                .collect();
            l1s.push((l1, s.l1_table_offset));
        }
        let limit = self.read_limit(m);
        let w = self.hdr.l2_entry_bytes() as usize;
        let mut l2 = vec![0u8; cs as usize];
        for (l1, l1_off) in &l1s {
            add(*l1_off, l1.len() as u64 * 8);
            for (i, &raw) in l1.iter().enumerate() {
                let bad = |limit: String| Qcow2Error::Offset {
                    image: self.name.clone(),
                    what: "L1 entry",
                    offset: l1_off + 8 * i as u64,
                    from: format!("L1 entry {i} of the table at {l1_off}"),
                    limit,
                };
                let e = L1Entry::decode(raw).map_err(bad)?;
                if e.l2_offset == 0 {
                    continue;
                }
                check::cluster_offset(
                    &self.name,
                    "L2 table",
                    || format!("L1 entry {i}"),
                    e.l2_offset,
                    cs,
                    cs,
                    limit,
                )?;
                add(e.l2_offset, cs);
                self.pread("read of an L2 table", e.l2_offset, &mut l2)?;
                for j in 0..cs as usize / w {
                    let raw = u64::from_be_bytes(l2[j * w..j * w + 8].try_into().expect("8 bytes"));
                    let c = Cluster::decode(raw, cb, self.hdr.extended_l2()).map_err(|limit| {
                        Qcow2Error::Offset {
                            image: self.name.clone(),
                            what: "L2 entry",
                            offset: e.l2_offset + (j * w) as u64,
                            from: format!("L2 entry {j} of the table at {}", e.l2_offset),
                            limit,
                        }
                    })?;
                    match c {
                        Cluster::Compressed { host, sectors } => add(host & !511, sectors * 512),
                        c => {
                            if let Some(h) = c.host() {
                                add(h, cs);
                            }
                        }
                    }
                }
            }
        }
        let mut raised = 0;
        let mut all: Vec<(u64, u64)> = refs.into_iter().collect();
        all.sort_unstable();
        for (c, n) in all {
            if self.refcount(m, c)? < n {
                self.set_refcount(m, c, n, (0, 0))?;
                raised += 1;
            }
        }
        self.flush_refcounts(m, true)?;
        Ok(raised)
    }
}
