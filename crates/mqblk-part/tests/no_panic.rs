//! Any bytes give a table, no table, or a typed error: never a panic. The
//! same entry point as the cargo-fuzz target `fuzz/fuzz_targets/partition_table.rs`,
//! under proptest, on random bytes and on good images with random bytes
//! changed (which reach the entry and chain checks; a changed GPT is
//! resealed so that its CRCs still match).

mod common;

use common::*;
use mqblk_part::parse_image;
use proptest::prelude::*;

fn check(ss: u32, img: &[u8]) {
    match parse_image("fuzz", ss, img) {
        Ok(Some(t)) => {
            // Whatever was accepted passed the checks.
            let disk = mqblk_part::Disk {
                name: "fuzz",
                sector_size: ss,
                nr_sectors: img.len() as u64 / u64::from(ss),
            };
            t.validate(&disk).unwrap();
        }
        Ok(None) => {}
        Err(e) => {
            // Every error names the device.
            assert!(e.to_string().starts_with("fuzz: "), "{e}");
        }
    }
}

/// The largest random image. Under Miri, most of the time goes to drawing
/// the bytes: there the images reach past the GPT header of 512-byte
/// sectors, not further.
const RANDOM_IMAGE_BYTES: usize = if cfg!(miri) { 2048 } else { 8192 };

proptest! {
    #[test]
    fn random_bytes(mut img in proptest::collection::vec(any::<u8>(), 0..RANDOM_IMAGE_BYTES), mbr in any::<bool>(), ss in prop_oneof![Just(512u32), Just(4096)]) {
        if mbr && img.len() >= 512 {
            img[510] = 0x55;
            img[511] = 0xaa;
        }
        check(ss, &img);
    }

    #[test]
    #[cfg_attr(miri, ignore = "slow under Miri (each case CRCs a 32-256 KiB image); tests/parse.rs runs these paths under Miri")]
    fn changed_gpt(changes in proptest::collection::vec((0usize..64 * 512, any::<u8>()), 1..16), reseal in any::<bool>()) {
        let f = 2 + array_sectors(512);
        let mut img = gpt_image(512, 64, &[entry(1, f, f + 3, "a"), entry(2, f + 4, f + 7, "b")]);
        for (at, v) in changes {
            img[at] = v;
        }
        if reseal && img.len() == 64 * 512 {
            reseal_gpt(&mut img, 512);
        }
        check(512, &img);
    }

    #[test]
    #[cfg_attr(miri, ignore = "slow under Miri (each case CRCs a 32-256 KiB image); tests/parse.rs runs these paths under Miri")]
    fn changed_gpt_entries(slot in 0usize..4, first in any::<u64>(), last in any::<u64>(), ss in prop_oneof![Just(512u64), Just(4096)]) {
        let nr = 64;
        let f = 2 + array_sectors(ss);
        let mut img = gpt_image(ss, nr, &[entry(1, f, f + 3, "a"), entry(2, f + 4, f + 7, "b")]);
        write_entry(&mut img, ss, slot, &entry(9, first % (nr + 8), last % (nr + 8), "x"));
        reseal_gpt(&mut img, ss);
        check(ss as u32, &img);
        write_entry(&mut img, ss, slot, &entry(9, first, last, "x"));
        reseal_gpt(&mut img, ss);
        check(ss as u32, &img);
    }

    #[test]
    #[cfg_attr(miri, ignore = "slow under Miri (each case CRCs a 32-256 KiB image); tests/parse.rs runs these paths under Miri")]
    fn changed_dos_chain(changes in proptest::collection::vec((0usize..8, 0usize..2, any::<u8>(), any::<u32>(), any::<u32>()), 1..6)) {
        let mut img = dos_image(512, 1024, 6);
        for (rec, slot, t, start, size) in changes {
            let at = if rec == 0 { 0 } else { 128 + 64 * (rec as u64 - 1) };
            let t = [0u8, 0x05, 0x0f, 0x83, t][usize::from(t % 5)];
            mbr_entry(&mut img, 512, at, slot, t, start % 2048, size % 2048);
        }
        check(512, &img);
    }
}
