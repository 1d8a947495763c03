//! Stacking over stacking (issue 36, item 3): a stripe of mirrors, and a
//! partition of a stripe (a window, or a table of one linear line over
//! the stripe's table), are bio-based at every stacked level, so that no
//! request queue sits between them and requests form only on the ram legs
//! at the bottom; random bios submitted several at a time complete exactly
//! once and read back what the in-memory model holds.

mod bio_harness;

use bio_harness::model::check_device;
use bio_harness::submit::{place, steps};
use bio_harness::table::{Opener, RamSpecs, Role};
use bio_harness::{CASES, CHUNK_MAX};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// A stripe of two mirrors, each a table over two ram legs: bio-based
    /// at both stacked levels (no request queue between them), requests
    /// only on the ram legs, and the data the model holds.
    #[test]
    fn a_stripe_of_mirrors_is_bio_based_down_to_its_legs(
        chunk in 8u64..=CHUNK_MAX,
        chunks in 1u64..=2,
        region in prop_oneof![Just(8u64), Just(16)],
        steps in steps(),
        batch in 1usize..=6,
    ) {
        let m = chunk * chunks;
        let mut ram = RamSpecs::default();
        let mut mirror = || {
            let (a, b) = (ram.next(m), ram.next(m));
            format!("0 {m} mirror core 2 {region} nosync 2 {a} 0 {b} 0")
        };
        let tables = [("m0".to_string(), mirror()), ("m1".to_string(), mirror())];
        let opener = Opener::new(&tables, true);
        let dev = opener.open(&format!("0 {} striped 2 {chunk} table:m0 0 table:m1 0", 2 * m));
        prop_assert!(dev.is_bio_based());
        for name in ["m0", "m1"] {
            let mirror = opener.opened(name);
            prop_assert!(mirror.is_bio_based(), "{}", name);
            let h = mqblk_dm::find(mirror.name()).expect("an open stacked device");
            for leg in h.legs().all().into_iter().flatten() {
                prop_assert!(!leg.is_bio_based(), "{} is a ram leg", leg.name());
            }
        }
        let ios = place(&steps, 2 * m);
        check_device(&dev, &[(0, 2 * m, Role::Data)], &ios, batch)?;
    }

    /// A partition of a stripe (a window made with `mqblk_dm::linear`, or a
    /// table of one linear line over the stripe's table): a window of the
    /// stripe, so bio-based with no request queue of its own; what is
    /// written through it is in the stripe at its offset, and nothing
    /// outside it changes.
    #[test]
    fn a_partition_of_a_stripe_is_a_bio_based_window_of_it(
        chunk in 8u64..=CHUNK_MAX,
        chunks in 1u64..=2,
        start in 0u64..16,
        short in 0u64..16,
        as_table in any::<bool>(),
        steps in steps(),
        batch in 1usize..=6,
    ) {
        let width = chunk * chunks * 2;
        let len = width - start - short.min(width - start - 1);
        let mut ram = RamSpecs::default();
        let (a, b) = (ram.next(width / 2), ram.next(width / 2));
        let stripe_text = format!("0 {width} striped 2 {chunk} {a} 0 {b} 0");
        let tables = [("s".to_string(), stripe_text.clone())];
        let opener = Opener::new(&tables, true);
        let (part, stripe) = if as_table {
            let part = opener.open(&format!("0 {len} linear table:s {start}"));
            (part, opener.opened("s"))
        } else {
            let stripe = opener.open(&stripe_text);
            let name = format!("stripe-p{}", PART.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            (mqblk_dm::linear(stripe.clone(), start * 512, len * 512, &name).unwrap(), stripe)
        };
        prop_assert!(stripe.is_bio_based());
        prop_assert!(part.is_bio_based());
        let (disk, at) = part.remapped_from().expect("a window");
        prop_assert!(disk.same(&stripe));
        prop_assert_eq!(at, start * 512);
        let ios = place(&steps, len);
        let model = check_device(&part, &[(0, len, Role::Data)], &ios, batch)?;
        let mut whole = vec![0xa5u8; width as usize * 512];
        stripe.context().unwrap().read_at(&mut whole, 0).unwrap();
        let (s, e) = (start as usize * 512, (start + len) as usize * 512);
        prop_assert!(whole[s..e] == model.data[..], "the stripe holds other data");
        let zeros = vec![0u8; whole.len()];
        prop_assert!(
            whole[..s] == zeros[..s] && whole[e..] == zeros[e..],
            "written outside the window"
        );
    }
}

/// Numbers the partitions, whose names must differ.
static PART: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
