//! The parsers on images built in memory: good tables in both sector
//! sizes, and each kind of corruption the issue names, with the error or
//! warning it must give. Pure: runs under Miri.

mod common;

use common::*;
use mqblk_part::{parse_image, Error, GptProblem, Label, PartType, Warning};

#[test]
fn gpt_lists_entries_by_slot_in_both_sector_sizes() {
    for ss in [512u64, 4096] {
        let nr = if ss == 512 { 2048 } else { 256 };
        let first = 2 + array_sectors(ss);
        let entries = [
            entry(1, first, first + 9, "root fs"),
            entry(2, first + 10, first + 19, "données"),
            entry(3, first + 30, first + 39, ""),
        ];
        let img = gpt_image(ss, nr, &entries);
        let t = parse_image("img", ss as u32, &img).unwrap().unwrap();
        assert_eq!(t.label, Label::Gpt);
        assert_eq!(t.sector_size, ss as u32);
        assert_eq!(t.id, "42424242-4242-4242-4242-424242424242");
        assert!(t.warnings.is_empty(), "{:?}", t.warnings);
        assert_eq!(t.first_lba, Some(first));
        assert_eq!(t.last_lba, Some(nr - 2 - array_sectors(ss)));
        let numbers: Vec<u32> = t.partitions.iter().map(|p| p.number).collect();
        assert_eq!(numbers, [1, 2, 3]);
        let p = &t.partitions[1];
        assert_eq!((p.start_sector, p.nr_sectors), (first + 10, 10));
        assert_eq!(p.name.as_deref(), Some("données"));
        assert_eq!(
            p.type_.to_string(),
            "0FC63DAF-8483-4772-8E79-3D69D8477DE4",
            "the Linux filesystem type, printed as sfdisk does"
        );
        assert_eq!(
            p.uuid.unwrap().to_string(),
            "02020202-0202-0202-0202-020202020202"
        );
        assert_eq!(t.partitions[2].name.as_deref(), Some(""));
    }
}

#[test]
fn gpt_slots_keep_their_numbers_across_holes() {
    let ss = 512;
    let f = 2 + array_sectors(ss);
    let mut img = gpt_image(ss, 1024, &[entry(1, f, f + 9, "a")]);
    write_entry(&mut img, ss, 5, &entry(6, f + 100, f + 109, "six"));
    reseal_gpt(&mut img, ss);
    let t = parse_image("img", 512, &img).unwrap().unwrap();
    let numbers: Vec<u32> = t.partitions.iter().map(|p| p.number).collect();
    assert_eq!(numbers, [1, 6]);
}

#[test]
fn a_bad_primary_header_falls_back_to_the_backup_with_a_warning() {
    let ss = 512;
    let f = 2 + array_sectors(ss);
    let good = gpt_image(ss, 1024, &[entry(1, f, f + 9, "a")]);
    // A flipped byte in the header: its CRC no longer matches.
    let mut img = good.clone();
    img[512 + 60] ^= 1;
    let t = parse_image("disk0", 512, &img).unwrap().unwrap();
    assert_eq!(t.partitions.len(), 1);
    match &t.warnings[..] {
        [Warning::GptPrimaryBad {
            problem: GptProblem::HeaderCrc { .. },
            backup_lba: 1023,
        }] => {}
        w => panic!("{w:?}"),
    }
    let msg = t.warnings[0].to_string();
    assert!(msg.contains("LBA 1023") && msg.contains("CRC32"), "{msg}");
    // A flipped byte in the primary array: the array CRC catches it.
    let mut img = good.clone();
    img[2 * 512 + 40] ^= 1;
    let t = parse_image("disk0", 512, &img).unwrap().unwrap();
    assert!(matches!(
        t.warnings[..],
        [Warning::GptPrimaryBad {
            problem: GptProblem::ArrayCrc { .. },
            ..
        }]
    ));
    // A bad backup is only a warning.
    let mut img = good;
    let last = img.len() - 512;
    img[last] = b'X';
    let t = parse_image("disk0", 512, &img).unwrap().unwrap();
    assert!(matches!(
        t.warnings[..],
        [Warning::GptBackupBad {
            problem: GptProblem::Signature,
            backup_lba: 1023
        }]
    ));
}

#[test]
fn both_headers_bad_is_an_error_naming_each_problem() {
    let ss = 512;
    let f = 2 + array_sectors(ss);
    let mut img = gpt_image(ss, 1024, &[entry(1, f, f + 9, "a")]);
    img[512 + 60] ^= 1;
    let last = img.len() - 512;
    img[last + 88] ^= 1; // the backup's array CRC field
    let e = parse_image("disk0", 512, &img).unwrap_err();
    match &e {
        Error::GptBothBad {
            primary,
            backup,
            backup_lba: 1023,
            ..
        } => {
            assert!(matches!(**primary, GptProblem::HeaderCrc { .. }), "{e:?}");
            assert!(matches!(**backup, GptProblem::HeaderCrc { .. }), "{e:?}");
        }
        e => panic!("{e:?}"),
    }
    let msg = e.to_string();
    assert!(msg.starts_with("disk0: both GPT headers are bad"), "{msg}");
    assert!(
        msg.contains("LBA 1 (") && msg.contains("LBA 1023 ("),
        "{msg}"
    );
}

#[test]
fn overlapping_gpt_entries_name_both_partitions_and_the_sector() {
    let ss = 512;
    let f = 2 + array_sectors(ss);
    let img = gpt_image(
        ss,
        1024,
        &[entry(1, f, f + 99, "a"), entry(2, f + 50, f + 199, "b")],
    );
    let e = parse_image("disk0", 512, &img).unwrap_err();
    match &e {
        Error::Overlap {
            number: 2,
            other: 1,
            first_shared,
            ..
        } => assert_eq!(*first_shared, f + 50),
        e => panic!("{e:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("partition 2") && msg.contains("partition 1"),
        "{msg}"
    );
    assert!(msg.contains(&format!("from sector {}", f + 50)), "{msg}");
}

#[test]
fn gpt_entries_past_the_device_or_the_usable_area_are_refused() {
    let ss = 512;
    let f = 2 + array_sectors(ss);
    let img = gpt_image(ss, 1024, &[entry(1, f, 5000, "big")]);
    let e = parse_image("disk0", 512, &img).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PastEnd {
                number: 1,
                end_sector: 5000,
                last_sector: 1023,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("past the device's last sector 1023"),
        "{e}"
    );
    // Inside the device, but over the backup array.
    let img = gpt_image(ss, 1024, &[entry(1, f, 1020, "over")]);
    let e = parse_image("disk0", 512, &img).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Entry {
                number: 1,
                field: "last_lba",
                value: 1020,
                ..
            }
        ),
        "{e:?}"
    );
    // Backwards.
    let img = gpt_image(ss, 1024, &[entry(1, f + 10, f, "back")]);
    let e = parse_image("disk0", 512, &img).unwrap_err();
    assert!(matches!(e, Error::Entry { number: 1, .. }), "{e:?}");
}

#[test]
fn dos_numbers_logical_partitions_from_five() {
    for ss in [512u64, 4096] {
        let img = dos_image(ss, 1024, 3);
        let t = parse_image("img", ss as u32, &img).unwrap().unwrap();
        assert_eq!(t.label, Label::Dos);
        assert_eq!(t.id, "0x1234abcd");
        let got: Vec<(u32, u64, u64, PartType)> = t
            .partitions
            .iter()
            .map(|p| (p.number, p.start_sector, p.nr_sectors, p.type_))
            .collect();
        assert_eq!(
            got,
            [
                (1, 64, 64, PartType::Dos(0x83)),
                (2, 128, 1024 - 128, PartType::Dos(0x05)),
                (5, 129, 32, PartType::Dos(0x83)),
                (6, 193, 32, PartType::Dos(0x83)),
                (7, 257, 32, PartType::Dos(0x83)),
            ]
        );
        assert_eq!(t.partitions[1].type_.to_string(), "5");
        assert_eq!(t.partitions[0].type_.to_string(), "83");
    }
}

#[test]
fn an_ebr_chain_that_loops_is_an_error() {
    let ss = 512;
    let mut img = dos_image(ss, 1024, 3);
    // The third record links back to the second.
    mbr_entry(&mut img, ss, 128 + 128, 1, 0x05, 64, 64);
    let e = parse_image("disk0", 512, &img).unwrap_err();
    assert!(
        matches!(
            e,
            Error::EbrLoop {
                sector: 192,
                number: 7,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("loops back to sector 192"), "{e}");
    // A record linking to itself.
    let mut img = dos_image(ss, 1024, 1);
    mbr_entry(&mut img, ss, 128, 1, 0x05, 0, 64);
    assert!(matches!(
        parse_image("disk0", 512, &img),
        Err(Error::EbrLoop { sector: 128, .. })
    ));
}

#[test]
fn an_ebr_outside_the_extended_partition_is_an_error() {
    let ss = 512;
    let mut img = dos_image(ss, 1024, 2);
    mbr_entry(&mut img, ss, 0, 1, 0x05, 128, 200);
    mbr_entry(&mut img, ss, 128, 1, 0x05, 500, 64);
    let e = parse_image("disk0", 512, &img).unwrap_err();
    assert!(
        matches!(
            e,
            Error::EbrOutside {
                number: 6,
                sector: 628,
                start: 128,
                end: 327,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn dos_entries_past_the_device_and_overlaps_are_refused() {
    let ss = 512;
    let mut img = dos_image(ss, 1024, 0);
    mbr_entry(&mut img, ss, 0, 2, 0x83, 900, 200);
    let e = parse_image("disk0", 512, &img).unwrap_err();
    assert!(
        matches!(
            e,
            Error::PastEnd {
                number: 3,
                field: "size",
                end_sector: 1099,
                last_sector: 1023,
                ..
            }
        ),
        "{e:?}"
    );
    let mut img = dos_image(ss, 1024, 1);
    mbr_entry(&mut img, ss, 0, 2, 0x83, 100, 40);
    let e = parse_image("disk0", 512, &img).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Overlap {
                number: 3,
                other: 1,
                first_shared: 100,
                ..
            }
        ),
        "{e:?}"
    );
    // Logical partitions inside their extended partition are no overlap,
    // but one crossing another logical one is.
    let mut img = dos_image(ss, 1024, 2);
    mbr_entry(&mut img, ss, 128, 0, 0x83, 1, 100);
    let e = parse_image("disk0", 512, &img).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Overlap {
                number: 6,
                other: 5,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn no_signature_is_no_table_and_odd_sector_sizes_are_refused() {
    assert!(parse_image("d", 512, &[0u8; 4096]).unwrap().is_none());
    assert!(parse_image("d", 512, &[]).unwrap().is_none());
    // A boot sector (boot bytes other than 0 and 0x80) is no table.
    let mut img = dos_image(512, 1024, 1);
    img[446 + 16] = 0x12;
    assert!(parse_image("d", 512, &img).unwrap().is_none());
    assert!(matches!(
        parse_image("d", 520, &[0u8; 4096]),
        Err(Error::SectorSize {
            sector_size: 520,
            ..
        })
    ));
    assert!(matches!(
        parse_image("d", 0, &[0u8; 4096]),
        Err(Error::SectorSize { .. })
    ));
}

#[test]
fn a_second_extended_partition_is_refused() {
    let ss = 512;
    let mut img = dos_image(ss, 1024, 1);
    mbr_entry(&mut img, ss, 0, 3, 0x0f, 64, 32);
    let e = parse_image("d", 512, &img).unwrap_err();
    assert!(
        matches!(
            e,
            Error::SecondExtended {
                number: 4,
                first: 2,
                ..
            }
        ),
        "{e:?}"
    );
}
