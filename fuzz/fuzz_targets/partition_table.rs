//! Fuzz the partition table parsers (GPT and MBR with extended
//! partitions): any disk image parses, gives no table, or gives a typed
//! error, and never panics. The first byte picks the sector size.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, image)) = data.split_first() else {
        return;
    };
    let sector_size = if pick & 1 == 0 { 512 } else { 4096 };
    if let Ok(Some(t)) = mqblk_part::parse_image("fuzz", sector_size, image) {
        let disk = mqblk_part::Disk {
            name: "fuzz",
            sector_size,
            nr_sectors: image.len() as u64 / u64::from(sector_size),
        };
        assert!(t.validate(&disk).is_ok());
    }
});
