//! Partitions of a whole disk, for accounting (Linux genhd's partition
//! table and `disk_map_sector_rcu`, with seed 003's one-hit cache).
//!
//! Where it sits: beside the stats. The control plane registers the
//! partitions ([`crate::Device::set_partitions`]) while the queue is
//! frozen; each context then keeps its own stats shard per partition and
//! its own cache of the last partition hit. When a request starts, its
//! first sector is mapped to a partition (the cached one if it still
//! holds the sector, else a scan, as Linux 2.6's `disk_map_sector_rcu`
//! did), and the request is counted there as well as on the disk, with the
//! same 17 diskstats fields. Nothing here is shared between contexts but
//! the table, which is read-only; a device with no partitions pays one
//! branch per request start and one per end.

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::error::{Error, Result};
use crate::stats::{bump, drop_by, DeviceStats, DiskStats, Histograms, StatGroup, StatShard};

/// One partition as the core sees it: a range of the disk in 512-byte
/// sectors, and the name its diskstats line carries (`disk0p1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRange {
    /// First sector (512 bytes).
    pub start_sector: u64,
    /// Length in 512-byte sectors.
    pub nr_sectors: u64,
    /// The name in the diskstats file.
    pub name: String,
}

/// The request was counted in no partition (Linux: `part0`, the disk).
pub(crate) const NO_PART: u16 = u16::MAX;

/// The most partitions a device can have registered (one index is
/// [`NO_PART`]).
pub const MAX_PARTITIONS: usize = NO_PART as usize;

/// A device's registered partitions: read-only once made, shared by every
/// context through an `Arc`.
pub(crate) struct PartTable {
    /// `[start, end)` of each partition in 512-byte sectors, in the order
    /// registered: what the lookup scans.
    bounds: Box<[(u64, u64)]>,
    ranges: Box<[PartitionRange]>,
    stats: Box<[DeviceStats]>,
}

impl PartTable {
    /// Check `ranges` against a disk of `capacity_sectors` and build the
    /// table.
    pub(crate) fn new(
        device: &Arc<str>,
        capacity_sectors: u64,
        ranges: &[PartitionRange],
    ) -> Result<PartTable> {
        let bad = |reason: String| Error::Setup {
            device: device.clone(),
            reason,
        };
        if ranges.len() > MAX_PARTITIONS {
            return Err(bad(format!(
                "{} partitions; at most {MAX_PARTITIONS}",
                ranges.len()
            )));
        }
        let mut bounds = Vec::with_capacity(ranges.len());
        for r in ranges {
            let end = r.start_sector.checked_add(r.nr_sectors);
            match end {
                _ if r.nr_sectors == 0 => {
                    return Err(bad(format!("partition {}: no sectors", r.name)))
                }
                Some(e) if e <= capacity_sectors => bounds.push((r.start_sector, e)),
                _ => {
                    return Err(bad(format!(
                        "partition {} (sectors {} + {}) runs past the capacity of {} sectors",
                        r.name, r.start_sector, r.nr_sectors, capacity_sectors
                    )))
                }
            }
        }
        for (i, a) in bounds.iter().enumerate() {
            if let Some((j, _)) = bounds[..i]
                .iter()
                .enumerate()
                .find(|(_, b)| a.0 < b.1 && b.0 < a.1)
            {
                return Err(bad(format!(
                    "partition {} overlaps partition {} from sector {}",
                    ranges[i].name,
                    ranges[j].name,
                    a.0.max(bounds[j].0)
                )));
            }
        }
        Ok(PartTable {
            bounds: bounds.into_boxed_slice(),
            ranges: ranges.to_vec().into_boxed_slice(),
            stats: ranges.iter().map(|_| DeviceStats::new()).collect(),
        })
    }

    /// Each partition with its counters summed over every context.
    pub(crate) fn snapshot(&self) -> Vec<(PartitionRange, DiskStats)> {
        self.ranges
            .iter()
            .cloned()
            .zip(self.stats.iter().map(DeviceStats::snapshot))
            .collect()
    }
}

/// Map `sector` to a partition: the last hit if `cache` and it still holds
/// the sector (seed 003's one-hit cache, Linux's `last_lookup`), else a
/// scan in table order, which becomes the last hit.
#[inline]
pub fn lookup(bounds: &[(u64, u64)], last: &mut usize, cache: bool, sector: u64) -> Option<usize> {
    if cache {
        if let Some(&(s, e)) = bounds.get(*last) {
            if s <= sector && sector < e {
                return Some(*last);
            }
        }
    }
    let i = bounds
        .iter()
        .position(|&(s, e)| s <= sector && sector < e)?;
    *last = i;
    Some(i)
}

/// One context's view of the partitions: its shards, and its last hit.
pub(crate) struct CtxParts {
    table: Arc<PartTable>,
    shards: Box<[Arc<CachePadded<StatShard>>]>,
    last: usize,
    cache: bool,
}

impl CtxParts {
    /// Register a shard in each partition of `table`.
    pub(crate) fn new(table: Arc<PartTable>, cache: bool) -> CtxParts {
        let shards = table.stats.iter().map(DeviceStats::register).collect();
        CtxParts {
            table,
            shards,
            last: 0,
            cache,
        }
    }

    /// Whether this view is of `table`.
    pub(crate) fn is_of(&self, table: &Arc<PartTable>) -> bool {
        Arc::ptr_eq(&self.table, table)
    }

    /// Give the shards back (their counts stay in the partitions' totals).
    pub(crate) fn retire(&self) {
        let hist = Histograms::new();
        for (s, sh) in self.table.stats.iter().zip(self.shards.iter()) {
            s.retire(sh, &hist);
        }
    }

    /// A request starts at `sector`: count it in flight in its partition
    /// and return the partition's index (or [`NO_PART`]).
    #[inline]
    pub(crate) fn start(&mut self, sector: u64, write: bool, now_ms: u64) -> u16 {
        match lookup(&self.table.bounds, &mut self.last, self.cache, sector) {
            Some(i) => {
                debug_assert!(i < self.shards.len());
                self.table.stats[i].update_io_ticks(now_ms, false);
                bump(&self.shards[i].in_flight[write as usize], 1);
                i as u16
            }
            None => NO_PART,
        }
    }

    /// A bio merged into a request counted in partition `part`.
    #[inline]
    pub(crate) fn merged(&self, part: u16, g: StatGroup) {
        if let Some(sh) = self.shards.get(part as usize) {
            bump(&sh.merges[g as usize], 1);
        }
    }

    /// A request counted in partition `part` (not [`NO_PART`]) ends.
    #[inline]
    pub(crate) fn end(
        &self,
        part: u16,
        g: StatGroup,
        sectors: u64,
        lat_ns: u64,
        write: bool,
        now_ns: u64,
    ) {
        let Some(sh) = self.shards.get(part as usize) else {
            return;
        };
        bump(&sh.ios[g as usize], 1);
        bump(&sh.sectors[g as usize], sectors);
        bump(&sh.nsecs[g as usize], lat_ns);
        drop_by(&sh.in_flight[write as usize], 1);
        self.table.stats[part as usize].update_io_ticks(now_ns / 1_000_000, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(n: u64) -> Vec<PartitionRange> {
        (0..n)
            .map(|i| PartitionRange {
                start_sector: 2048 + i * 100,
                nr_sectors: 100,
                name: format!("d{}", i + 1),
            })
            .collect()
    }

    #[test]
    fn lookup_with_and_without_the_cache_agree() {
        let t = PartTable::new(&Arc::from("d"), 1 << 20, &ranges(8)).unwrap();
        let mut a = 0;
        let mut b = 0;
        for sector in [0, 2048, 2147, 2148, 2900, 2500, 2501, 2048 + 800, 1 << 19] {
            assert_eq!(
                lookup(&t.bounds, &mut a, true, sector),
                lookup(&t.bounds, &mut b, false, sector),
                "sector {sector}"
            );
        }
        assert_eq!(lookup(&t.bounds, &mut a, true, 2500), Some(4));
        assert_eq!(a, 4, "the hit is remembered");
        assert_eq!(lookup(&t.bounds, &mut a, true, 2547), Some(4));
        assert_eq!(lookup(&t.bounds, &mut a, true, 100), None);
        assert_eq!(a, 4, "a miss keeps the last hit");
    }

    #[test]
    fn bad_tables_name_the_partition() {
        let d: Arc<str> = Arc::from("disk0");
        let mut r = ranges(3);
        r[2].start_sector = 2100;
        let e = PartTable::new(&d, 1 << 20, &r).err().unwrap().to_string();
        assert!(
            e.contains("d3 overlaps partition d1 from sector 2100"),
            "{e}"
        );
        let e = PartTable::new(&d, 2200, &ranges(3))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("disk0") && e.contains("d2") && e.contains("2200"),
            "{e}"
        );
        let mut r = ranges(1);
        r[0].nr_sectors = 0;
        assert!(PartTable::new(&d, 1 << 20, &r).is_err());
    }

    #[test]
    fn a_context_counts_in_its_own_shard_and_the_totals_survive_it() {
        let t = Arc::new(PartTable::new(&Arc::from("d"), 1 << 20, &ranges(4)).unwrap());
        let mut c = CtxParts::new(t.clone(), true);
        let p = c.start(2350, true, 10);
        assert_eq!(p, 3);
        c.merged(p, StatGroup::Write);
        assert_eq!(t.snapshot()[3].1.in_flight, 1);
        c.end(p, StatGroup::Write, 16, 1000, true, 12_000_000);
        assert_eq!(c.start(5, false, 12), NO_PART);
        c.retire();
        let s = t.snapshot();
        assert_eq!(s[3].1.ios[StatGroup::Write as usize], 1);
        assert_eq!(s[3].1.sectors[StatGroup::Write as usize], 16);
        assert_eq!(s[3].1.merges[StatGroup::Write as usize], 1);
        assert_eq!(s[3].1.in_flight, 0);
        assert_eq!(s[0].1, DiskStats::default());
    }
}
