//! Refcounts: the refcount table (offsets of refcount blocks) and the
//! blocks (one entry per host cluster, `1 << refcount_order` bits wide,
//! big-endian, packed from the low bits of a byte for widths below 8, as
//! QEMU packs them). Pure: the blocks are byte slices; [`crate::alloc`]
//! reads and writes them.

/// Entries in one refcount block.
pub fn entries_per_block(cluster_bits: u32, order: u32) -> u64 {
    (1u64 << (cluster_bits + 3)) >> order
}

/// The largest refcount a `1 << order`-bit entry holds.
pub fn max_refcount(order: u32) -> u64 {
    if order == 6 {
        u64::MAX
    } else {
        (1u64 << (1u32 << order)) - 1
    }
}

/// Entry `i` of `block`.
pub fn get(block: &[u8], order: u32, i: u64) -> u64 {
    let i = i as usize;
    match order {
        0..=2 => {
            let bits = 1usize << order;
            let per_byte = 8 / bits;
            let shift = (i % per_byte) * bits;
            u64::from((block[i / per_byte] >> shift) & ((1u16 << bits) - 1) as u8)
        }
        3 => u64::from(block[i]),
        4 => u64::from(u16::from_be_bytes([block[2 * i], block[2 * i + 1]])),
        5 => u64::from(u32::from_be_bytes(
            block[4 * i..4 * i + 4].try_into().expect("4 bytes"),
        )),
        _ => u64::from_be_bytes(block[8 * i..8 * i + 8].try_into().expect("8 bytes")),
    }
}

/// Set entry `i` of `block` to `v` (which must fit the width).
pub fn set(block: &mut [u8], order: u32, i: u64, v: u64) {
    debug_assert!(v <= max_refcount(order));
    let i = i as usize;
    match order {
        0..=2 => {
            let bits = 1usize << order;
            let per_byte = 8 / bits;
            let shift = (i % per_byte) * bits;
            let mask = (((1u16 << bits) - 1) as u8) << shift;
            let b = &mut block[i / per_byte];
            *b = (*b & !mask) | (((v as u8) << shift) & mask);
        }
        3 => block[i] = v as u8,
        4 => block[2 * i..2 * i + 2].copy_from_slice(&(v as u16).to_be_bytes()),
        5 => block[4 * i..4 * i + 4].copy_from_slice(&(v as u32).to_be_bytes()),
        _ => block[8 * i..8 * i + 8].copy_from_slice(&v.to_be_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_width_round_trips_without_touching_neighbours() {
        for order in 0..=6u32 {
            let mut block = vec![0u8; 64];
            let n = entries_per_block(9, order).min((64 * 8) >> order);
            let max = max_refcount(order);
            for i in 0..n {
                set(&mut block, order, i, (i * 7 + 1) % (max.min(1000) + 1));
            }
            for i in 0..n {
                assert_eq!(
                    get(&block, order, i),
                    (i * 7 + 1) % (max.min(1000) + 1),
                    "order {order} entry {i}"
                );
            }
            set(&mut block, order, 1, max);
            assert_eq!(get(&block, order, 1), max);
            assert_eq!(get(&block, order, 0), 1, "order {order}");
        }
    }

    #[test]
    fn narrow_entries_pack_from_the_low_bits() {
        let mut block = [0u8; 1];
        set(&mut block, 0, 0, 1);
        assert_eq!(block[0], 1);
        set(&mut block, 1, 3, 2);
        assert_eq!(block[0], 0b1000_0001);
        assert_eq!(entries_per_block(16, 4), 32768);
    }
}
