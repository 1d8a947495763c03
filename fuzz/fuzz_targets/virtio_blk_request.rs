//! Fuzz the virtio-blk request parser (`mqblk_vhost::request::parse`):
//! any descriptor chain over any guest memory is submitted, answered or
//! marks the ring broken, never panics, and what it submits lies inside
//! the chain's descriptors and the device.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mqblk_vhost::request::{parse, Desc, Op, Parsed, ReadGuest};
use mqblk_vhost::virtio_blk::Shape;

/// Guest memory: the fuzzer's bytes at guest address 0x1000.
struct Mem<'a>(&'a [u8]);
const BASE: u64 = 0x1000;

impl ReadGuest for Mem<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(o) = addr.checked_sub(BASE) else {
            return false;
        };
        match (o as usize).checked_add(buf.len()) {
            Some(end) if end <= self.0.len() && o <= usize::MAX as u64 => {
                buf.copy_from_slice(&self.0[o as usize..end]);
                true
            }
            _ => false,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // First byte: how many 13-byte descriptors follow (addr, len, flags);
    // the rest is guest memory.
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 8);
    if rest.len() < n * 13 {
        return;
    }
    let (table, memory) = rest.split_at(n * 13);
    let descs: Vec<Desc> = table
        .chunks_exact(13)
        .map(|d| Desc {
            addr: u64::from_le_bytes(d[0..8].try_into().unwrap()),
            len: u32::from_le_bytes(d[8..12].try_into().unwrap()),
            writable: d[12] & 1 != 0,
        })
        .collect();
    let shape = Shape {
        capacity_sectors: 1 << 12,
        blk_size: if memory.first().is_some_and(|b| b & 1 != 0) { 4096 } else { 512 },
        physical_block_exp: 0,
        min_io_size: 1,
        opt_io_size: 0,
        size_max: 1 << 20,
        seg_max: 4,
        num_queues: 1,
        max_discard_sectors: 1 << 12,
        max_discard_seg: 1,
        discard_sector_alignment: 1,
        max_write_zeroes_sectors: 1 << 12,
        max_write_zeroes_seg: 1,
        write_cache: true,
        read_only: memory.get(1).is_some_and(|b| b & 1 != 0),
    };
    let cap = shape.capacity_sectors << 9;
    if let Parsed::Submit(r) = parse(&shape, &descs, 0, None, &Mem(memory)) {
        match r.op {
            Op::Read { offset, data } | Op::Write { offset, data } => {
                assert!(offset + u64::from(data.len) <= cap);
                let total: u64 = data.pieces(&descs).map(|(_, n)| u64::from(n)).sum();
                assert_eq!(total, u64::from(data.len));
            }
            Op::Discard { offset, len } | Op::WriteZeroes { offset, len, .. } => {
                assert!(offset + len <= cap);
            }
            Op::Flush | Op::GetId { .. } => {}
        }
    }
});
