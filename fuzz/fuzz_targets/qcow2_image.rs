//! Fuzz the qcow2 format's parsing: the header (with its extensions and
//! backing file name), the L1 and L2 entries it leads to (standard and
//! extended, with subcluster runs), the refcount blocks at every width,
//! and the snapshot table. Any image either parses into values within
//! the format's limits or gives a typed error; nothing panics, and no
//! offset taken from the image is used before it is checked.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use mqblk_qcow2::header::Header;
use mqblk_qcow2::table::{self, Cluster, L1Entry};
use mqblk_qcow2::{check, refcount, snapshot};

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let name: Arc<str> = "fuzz.qcow2".into();
    let Ok(h) = Header::parse(&name, data, data.len() as u64) else {
        return;
    };
    let cs = h.cluster_size();
    assert!((512..=2 << 20).contains(&cs));
    assert!(h.refcount_order <= 6);
    let file = data.len() as u64;
    // The L1 table lies inside the file (the header checked it).
    let l1_end = h.l1_table_offset + u64::from(h.l1_size) * 8;
    assert!(h.l1_size == 0 || l1_end <= file);
    for i in 0..h.l1_size.min(64) as usize {
        let raw = be64(data, h.l1_table_offset as usize + 8 * i);
        let Ok(e) = L1Entry::decode(raw) else {
            continue;
        };
        if e.l2_offset == 0 {
            continue;
        }
        let Ok(l2) = check::cluster_offset(
            &name,
            "L2 table",
            || format!("L1 entry {i}"),
            e.l2_offset,
            cs,
            cs,
            file,
        ) else {
            continue;
        };
        let w = h.l2_entry_bytes() as usize;
        for j in 0..(cs as usize / w).min(64) {
            let at = l2 as usize + j * w;
            let raw = be64(data, at);
            let bm = (w == 16).then(|| be64(data, at + 8));
            let Ok(c) = Cluster::decode(raw, h.cluster_bits, h.extended_l2()) else {
                continue;
            };
            let mut off = 0;
            while off < cs {
                match table::run(c, bm, h.cluster_bits, off, cs - off) {
                    Ok((_, n)) => {
                        assert!(n > 0 && off + n <= cs);
                        off += n;
                    }
                    Err(_) => break,
                }
            }
        }
    }
    // Refcount blocks, at the image's width.
    let rt = h.refcount_table_offset as usize;
    for k in 0..(cs as usize / 8).min(8) {
        let off = be64(data, rt + 8 * k);
        if let Ok(b) = check::cluster_offset(
            &name,
            "refcount block",
            || format!("refcount table entry {k}"),
            off,
            cs,
            cs,
            file,
        ) {
            let block = &data[b as usize..(b + cs) as usize];
            for c in 0..refcount::entries_per_block(h.cluster_bits, h.refcount_order).min(256) {
                assert!(
                    refcount::get(block, h.refcount_order, c)
                        <= refcount::max_refcount(h.refcount_order)
                );
            }
        }
    }
    if h.nb_snapshots > 0 {
        let _ = snapshot::parse(&data[h.snapshots_offset as usize..], h.nb_snapshots);
    }
});
