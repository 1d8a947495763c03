//! The split virtqueue (virtio 1.2, 2.7) as the device walks it: the
//! descriptor table, the available ring and the used ring, each found in
//! guest memory once per batch, then read and written through host
//! pointers. The queue's own state (the next available and used indexes,
//! where the rings are) stays in virtio-queue's `Queue`, which the backend
//! crate keeps for `SET/GET_VRING_BASE`; a batch reads it at the start and
//! gives it back at the end.
//!
//! A chain is walked as virtio-queue's `DescriptorChain` walks one: at
//! most as many descriptors as the table holds (a loop ends there), one
//! level of indirect table, and a stop at a descriptor it cannot read, at
//! a next index past the table, or at lengths that overflow; the caller
//! sees a chain that does not end and breaks the ring.
//!
//! Used elements are written as requests complete and published with one
//! release store of the used index per batch; the driver is interrupted
//! per batch too, as EVENT_IDX asks (Linux `vring_need_event`).

use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU16, Ordering};

use crate::guest::Guest;
use crate::request::Desc;

/// `VIRTQ_DESC_F_NEXT`: the chain goes on at `next`.
const DESC_F_NEXT: u16 = 1;
/// `VIRTQ_DESC_F_WRITE`: the device writes this buffer.
const DESC_F_WRITE: u16 = 2;
/// `VIRTQ_DESC_F_INDIRECT`: the buffer is a table of descriptors.
const DESC_F_INDIRECT: u16 = 4;
/// Bytes of one descriptor.
const DESC_LEN: u64 = 16;

/// Where the driver put a ring's parts, as the queue says.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// Guest address of the descriptor table.
    pub(crate) desc: u64,
    /// Guest address of the available ring.
    pub(crate) avail: u64,
    /// Guest address of the used ring.
    pub(crate) used: u64,
    /// Entries in each (not 0).
    pub(crate) size: u16,
    /// VIRTIO_F_EVENT_IDX was negotiated: `used_event` and `avail_event`
    /// follow the rings.
    pub(crate) event_idx: bool,
}

/// A ring's parts in guest memory, resolved; valid while the memory
/// table it was found in lives.
pub(crate) struct SplitRing<'g> {
    guest: &'g Guest,
    desc: NonNull<u8>,
    avail: NonNull<u8>,
    used: NonNull<u8>,
    size: u16,
    event_idx: bool,
}

/// How a chain's walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Walked {
    /// Descriptors past the `cap` the caller kept.
    pub(crate) more: usize,
    /// The chain's last descriptor, when `more` > 0.
    pub(crate) last: Option<Desc>,
    /// The last descriptor read still says NEXT: the walk stopped at a
    /// loop, a next index past the table, a descriptor outside memory, a
    /// second level of indirection or an overflowing length.
    pub(crate) open_end: bool,
}

/// One descriptor as laid out in a table (little-endian).
#[derive(Clone, Copy)]
struct RawDesc {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

impl<'g> SplitRing<'g> {
    /// Find `layout`'s parts in `guest`; none if a part is not inside one
    /// region, the size is 0, or an index field would be misaligned.
    pub(crate) fn map(guest: &'g Guest, layout: Layout) -> Option<SplitRing<'g>> {
        let size = u64::from(layout.size);
        if size == 0 {
            return None;
        }
        let event = if layout.event_idx { 2 } else { 0 };
        let desc = guest.resolve(layout.desc, DESC_LEN * size)?;
        let avail = guest.resolve(layout.avail, 4 + 2 * size + event)?;
        let used = guest.resolve(layout.used, 4 + 8 * size + event)?;
        if !(avail.as_ptr() as usize).is_multiple_of(2)
            || !(used.as_ptr() as usize).is_multiple_of(2)
        {
            return None;
        }
        Some(SplitRing {
            guest,
            desc,
            avail,
            used,
            size: layout.size,
            event_idx: layout.event_idx,
        })
    }

    /// Entries in the ring.
    pub(crate) fn size(&self) -> u16 {
        self.size
    }

    /// The index field at byte `off` of a part, as an atomic.
    #[inline]
    fn index_at(&self, part: NonNull<u8>, off: usize) -> &AtomicU16 {
        debug_assert!(off.is_multiple_of(2));
        // SAFETY: 1. `off` is inside the part (its length was resolved in
        // `map`: the header's index, or the event field past the ring).
        // 2. The part is 2-aligned (checked in `map`) and `off` is even.
        // 3. The mapping lives as long as `'g`, which outlives `&self`.
        // 4. This process only touches the field atomically; the driver
        // is another process, outside Rust's model.
        unsafe { AtomicU16::from_ptr(part.as_ptr().add(off).cast::<u16>()) }
    }

    /// The driver's available index (acquire: the ring entries and
    /// descriptors it published before are visible after).
    #[inline]
    pub(crate) fn avail_idx(&self) -> u16 {
        u16::from_le(self.index_at(self.avail, 2).load(Ordering::Acquire))
    }

    /// The head of available entry `i` (counted without wrap).
    #[inline]
    pub(crate) fn avail_head(&self, i: u16) -> u16 {
        let off = 4 + 2 * usize::from(i % self.size);
        // SAFETY: `off + 2` is within the available ring resolved in
        // `map`; `[u8; 2]` needs no alignment.
        let b = unsafe { self.avail.add(off).cast::<[u8; 2]>().read_volatile() };
        u16::from_le_bytes(b)
    }

    /// Descriptor `i` of the table at `table` (with `entries` entries).
    #[inline]
    fn desc_at(table: NonNull<u8>, entries: u16, i: u16) -> RawDesc {
        debug_assert!(i < entries);
        // SAFETY: `i < entries`, and the table's `entries * 16` bytes were
        // resolved inside one region.
        let p = unsafe { table.add(usize::from(i) * DESC_LEN as usize) };
        let (lo, hi) = if (p.as_ptr() as usize).is_multiple_of(8) {
            // SAFETY: 16 bytes at `p`, as above, and `p` is 8-aligned (a
            // table as the spec lays it, 16-aligned): two word loads.
            unsafe {
                (
                    p.cast::<u64>().read_volatile(),
                    p.add(8).cast::<u64>().read_volatile(),
                )
            }
        } else {
            // SAFETY: 16 bytes at `p`, as above; `[u8; 8]` needs no
            // alignment.
            unsafe {
                (
                    u64::from_ne_bytes(p.cast::<[u8; 8]>().read_volatile()),
                    u64::from_ne_bytes(p.add(8).cast::<[u8; 8]>().read_volatile()),
                )
            }
        };
        let (addr, hi) = (u64::from_le(lo), u64::from_le(hi));
        RawDesc {
            addr,
            len: hi as u32,
            flags: (hi >> 32) as u16,
            next: (hi >> 48) as u16,
        }
    }

    /// Walk the chain at `head` into `descs` (cleared first), keeping at
    /// most `cap` descriptors and counting those past it.
    pub(crate) fn walk(&self, head: u16, cap: usize, descs: &mut Vec<Desc>) -> Walked {
        descs.clear();
        let mut walked = Walked {
            more: 0,
            last: None,
            open_end: false,
        };
        let mut table = self.desc;
        let mut entries = self.size;
        let mut next = head;
        let mut ttl = self.size;
        let mut indirect = false;
        let mut bytes = 0u32;
        while ttl > 0 && next < entries {
            let d = Self::desc_at(table, entries, next);
            if d.flags & DESC_F_INDIRECT != 0 {
                let Some((t, n)) = self.indirect(indirect, d) else {
                    break;
                };
                (table, entries, next, ttl, indirect) = (t, n, 0, n, true);
                continue;
            }
            let Some(b) = bytes.checked_add(d.len) else {
                break;
            };
            bytes = b;
            let has_next = d.flags & DESC_F_NEXT != 0;
            if has_next {
                next = d.next;
                ttl -= 1;
            } else {
                ttl = 0;
            }
            walked.open_end = has_next;
            let desc = Desc {
                addr: d.addr,
                len: d.len,
                writable: d.flags & DESC_F_WRITE != 0,
            };
            if descs.len() < cap {
                descs.push(desc);
            } else {
                walked.more += 1;
                walked.last = Some(desc);
            }
        }
        walked
    }

    /// The indirect table `d` points to, as (host address, entries); none
    /// for a second level, a length that is no whole number of
    /// descriptors (or more than 65535 of them), or a table outside one
    /// region.
    fn indirect(&self, already: bool, d: RawDesc) -> Option<(NonNull<u8>, u16)> {
        if already || !u64::from(d.len).is_multiple_of(DESC_LEN) {
            return None;
        }
        let n = u16::try_from(u64::from(d.len) / DESC_LEN).ok()?;
        let t = self.guest.resolve(d.addr, u64::from(d.len))?;
        Some((t, n))
    }

    /// Write used entry `i` (counted without wrap); the driver sees it
    /// once [`SplitRing::publish_used`] moves the index past it.
    #[inline]
    pub(crate) fn put_used(&self, i: u16, head: u16, len: u32) {
        let off = 4 + 8 * usize::from(i % self.size);
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&u32::from(head).to_le_bytes());
        b[4..].copy_from_slice(&len.to_le_bytes());
        // SAFETY: `off + 8` is within the used ring resolved in `map`;
        // `[u8; 8]` needs no alignment.
        unsafe { self.used.add(off).cast::<[u8; 8]>().write_volatile(b) };
    }

    /// Publish the used entries before `idx` (release: the entries, and
    /// the status bytes and data written before, are visible first).
    #[inline]
    pub(crate) fn publish_used(&self, idx: u16) {
        self.index_at(self.used, 2)
            .store(idx.to_le(), Ordering::Release);
    }

    /// True if the driver wants an interrupt for the used entries from
    /// `old` up to `new` (`vring_need_event`); always without EVENT_IDX.
    #[inline]
    pub(crate) fn needs_interrupt(&self, old: u16, new: u16) -> bool {
        if !self.event_idx {
            return true;
        }
        // The used index's store before the read of used_event: a driver
        // that moves used_event after reading the old index is seen.
        fence(Ordering::SeqCst);
        let off = 4 + 2 * usize::from(self.size);
        let event = u16::from_le(self.index_at(self.avail, off).load(Ordering::Relaxed));
        new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
    }

    /// Ask for a kick once the driver makes entry `next_avail` available
    /// (EVENT_IDX's `avail_event`); true if entries are available already
    /// (taken after the ask, so none can be missed). Without EVENT_IDX
    /// kicks are never suppressed: false.
    pub(crate) fn arm_kick(&self, next_avail: u16) -> bool {
        if !self.event_idx {
            return false;
        }
        let off = 4 + 8 * usize::from(self.size);
        self.index_at(self.used, off)
            .store(next_avail.to_le(), Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.avail_idx() != next_avail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::tests::guest;
    use crate::request::ReadGuest;

    const DESC: u64 = 0x10000;
    const AVAIL: u64 = 0x11000;
    const USED: u64 = 0x12000;
    const IND: u64 = 0x13000;
    const SIZE: u16 = 8;

    fn layout(event_idx: bool) -> Layout {
        Layout {
            desc: DESC,
            avail: AVAIL,
            used: USED,
            size: SIZE,
            event_idx,
        }
    }

    fn put_desc(g: &Guest, table: u64, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&addr.to_le_bytes());
        b[8..12].copy_from_slice(&len.to_le_bytes());
        b[12..14].copy_from_slice(&flags.to_le_bytes());
        b[14..].copy_from_slice(&next.to_le_bytes());
        assert!(g.write(table + 16 * u64::from(i), &b));
    }

    fn u16_at(g: &Guest, addr: u64) -> u16 {
        let mut b = [0u8; 2];
        assert!(g.read(addr, &mut b));
        u16::from_le_bytes(b)
    }

    #[test]
    fn rings_outside_memory_or_empty_are_not_mapped() {
        let g = guest(&[(0x10000, 0x4000)]);
        assert!(SplitRing::map(&g, layout(true)).is_some());
        let mut l = layout(true);
        l.used = 0x14000 - 16;
        assert!(SplitRing::map(&g, l).is_none());
        l = layout(true);
        l.size = 0;
        assert!(SplitRing::map(&g, l).is_none());
        l = layout(true);
        l.avail += 1;
        assert!(SplitRing::map(&g, l).is_none());
    }

    #[test]
    fn chains_are_walked_as_laid_out() {
        let g = guest(&[(0x10000, 0x4000), (0x100000, 0x10000)]);
        let r = SplitRing::map(&g, layout(true)).expect("mapped");
        let mut descs = Vec::new();
        // head 3 -> 5 -> 1 (end): header, data, status.
        put_desc(&g, DESC, 3, 0x100000, 16, DESC_F_NEXT, 5);
        put_desc(&g, DESC, 5, 0x101000, 4096, DESC_F_NEXT | DESC_F_WRITE, 1);
        put_desc(&g, DESC, 1, 0x102000, 1, DESC_F_WRITE, 0);
        let w = r.walk(3, 8, &mut descs);
        assert!(!w.open_end);
        assert_eq!(w.more, 0);
        assert_eq!(
            descs,
            vec![
                Desc {
                    addr: 0x100000,
                    len: 16,
                    writable: false
                },
                Desc {
                    addr: 0x101000,
                    len: 4096,
                    writable: true
                },
                Desc {
                    addr: 0x102000,
                    len: 1,
                    writable: true
                },
            ]
        );
        // Kept up to the cap; the rest counted, the last one given.
        let w = r.walk(3, 1, &mut descs);
        assert_eq!(descs.len(), 1);
        assert_eq!(w.more, 2);
        assert_eq!(w.last.map(|d| d.addr), Some(0x102000));
        // A loop: 0 -> 0 ends after the table's size, still open.
        put_desc(&g, DESC, 0, 0x100000, 16, DESC_F_NEXT, 0);
        let w = r.walk(0, 100, &mut descs);
        assert!(w.open_end);
        assert_eq!(descs.len(), usize::from(SIZE));
        // A next index past the table; a head past it.
        put_desc(&g, DESC, 2, 0x100000, 16, DESC_F_NEXT, SIZE);
        assert!(r.walk(2, 8, &mut descs).open_end);
        let w = r.walk(SIZE, 8, &mut descs);
        assert!(descs.is_empty());
        assert!(!w.open_end);
        // Lengths that overflow.
        put_desc(&g, DESC, 4, 0x100000, u32::MAX, DESC_F_NEXT, 6);
        put_desc(&g, DESC, 6, 0x100000, 2, 0, 0);
        assert!(r.walk(4, 8, &mut descs).open_end);
    }

    #[test]
    fn indirect_tables_are_followed_one_level() {
        let g = guest(&[(0x10000, 0x4000), (0x100000, 0x10000)]);
        let r = SplitRing::map(&g, layout(false)).expect("mapped");
        let mut descs = Vec::new();
        put_desc(&g, IND, 0, 0x100000, 16, DESC_F_NEXT, 1);
        put_desc(&g, IND, 1, 0x100100, 1, DESC_F_WRITE, 0);
        put_desc(&g, DESC, 2, IND, 32, DESC_F_INDIRECT, 0);
        let w = r.walk(2, 8, &mut descs);
        assert!(!w.open_end);
        assert_eq!(descs.len(), 2);
        assert!(descs[1].writable);
        // A table of half a descriptor, one outside memory, and a second
        // level: the walk stops with nothing.
        put_desc(&g, DESC, 2, IND, 24, DESC_F_INDIRECT, 0);
        assert!(r.walk(2, 8, &mut descs).last.is_none());
        assert!(descs.is_empty());
        put_desc(&g, DESC, 2, 0x200000, 32, DESC_F_INDIRECT, 0);
        r.walk(2, 8, &mut descs);
        assert!(descs.is_empty());
        put_desc(&g, IND, 0, IND, 32, DESC_F_INDIRECT, 0);
        put_desc(&g, DESC, 2, IND, 32, DESC_F_INDIRECT, 0);
        r.walk(2, 8, &mut descs);
        assert!(descs.is_empty());
    }

    #[test]
    fn avail_used_and_events_are_where_the_spec_puts_them() {
        let g = guest(&[(0x10000, 0x4000)]);
        let r = SplitRing::map(&g, layout(true)).expect("mapped");
        // avail: flags, idx, ring[SIZE], used_event.
        assert!(g.write(AVAIL + 2, &3u16.to_le_bytes()));
        assert!(g.write(AVAIL + 4 + 2, &7u16.to_le_bytes()));
        assert_eq!(r.avail_idx(), 3);
        assert_eq!(r.avail_head(1), 7);
        assert_eq!(r.avail_head(1 + SIZE), 7);
        // used: flags, idx, ring[SIZE] of (id, len), avail_event.
        r.put_used(SIZE + 2, 5, 4097);
        let mut e = [0u8; 8];
        assert!(g.read(USED + 4 + 8 * 2, &mut e));
        assert_eq!(e, [5, 0, 0, 0, 1, 0x10, 0, 0]);
        assert_eq!(u16_at(&g, USED + 2), 0);
        r.publish_used(SIZE + 3);
        assert_eq!(u16_at(&g, USED + 2), SIZE + 3);
        // avail_event armed at next_avail; entries already there say so.
        assert!(r.arm_kick(2));
        assert_eq!(u16_at(&g, USED + 4 + 8 * u64::from(SIZE)), 2);
        assert!(!r.arm_kick(3));
        // used_event: interrupt only when the batch passes it.
        let used_event = AVAIL + 4 + 2 * u64::from(SIZE);
        assert!(g.write(used_event, &10u16.to_le_bytes()));
        assert!(!r.needs_interrupt(5, 10));
        assert!(r.needs_interrupt(5, 11));
        assert!(r.needs_interrupt(10, 12));
        assert!(!r.needs_interrupt(11, 12));
        // Wrapping.
        assert!(g.write(used_event, &u16::MAX.to_le_bytes()));
        assert!(r.needs_interrupt(u16::MAX - 1, 1));
        // Without EVENT_IDX: always, and kicks are never suppressed.
        let r = SplitRing::map(&g, layout(false)).expect("mapped");
        assert!(r.needs_interrupt(11, 12));
        assert!(!r.arm_kick(0));
    }
}
