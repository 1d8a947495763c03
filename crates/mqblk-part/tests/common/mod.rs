//! Disk images built in memory, with the same layout sfdisk writes: a
//! protective MBR, the primary GPT header at LBA 1 and its array at LBA 2,
//! the backup array and header at the end; or an MBR with an extended
//! partition and its chain of boot records.

#![allow(dead_code)]

/// A GPT entry: (type GUID bytes, unique GUID bytes, first LBA, last LBA, name).
pub struct GptEntry {
    pub type_: [u8; 16],
    pub uuid: [u8; 16],
    pub first: u64,
    pub last: u64,
    pub name: &'static str,
}

pub const LINUX: [u8; 16] = [
    0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4,
];

pub fn entry(n: u8, first: u64, last: u64, name: &'static str) -> GptEntry {
    GptEntry {
        type_: LINUX,
        uuid: [n; 16],
        first,
        last,
        name,
    }
}

pub const NR_ENTRIES: u64 = 128;

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Sectors the 128-entry array takes.
pub fn array_sectors(ss: u64) -> u64 {
    (NR_ENTRIES * 128).div_ceil(ss)
}

/// Fill in the GPT header at `lba` (its array at `array_lba`) with both CRCs.
pub fn write_header(img: &mut [u8], ss: u64, lba: u64, alt: u64, array_lba: u64, nr: u64) {
    let last_usable = nr - 1 - array_sectors(ss) - 1;
    let first_usable = 2 + array_sectors(ss);
    let a = (array_lba * ss) as usize;
    let array_crc = crc32fast::hash(&img[a..a + (NR_ENTRIES * 128) as usize]);
    let h = (lba * ss) as usize;
    let hdr = &mut img[h..h + 92];
    hdr[..8].copy_from_slice(b"EFI PART");
    put32(hdr, 8, 0x0001_0000);
    put32(hdr, 12, 92);
    put32(hdr, 16, 0);
    put64(hdr, 24, lba);
    put64(hdr, 32, alt);
    put64(hdr, 40, first_usable);
    put64(hdr, 48, last_usable);
    hdr[56..72].copy_from_slice(&[0x42; 16]);
    put64(hdr, 72, array_lba);
    put32(hdr, 80, NR_ENTRIES as u32);
    put32(hdr, 84, 128);
    put32(hdr, 88, array_crc);
    let crc = crc32fast::hash(hdr);
    put32(hdr, 16, crc);
}

/// Recompute both headers' CRCs after the arrays were changed.
pub fn reseal_gpt(img: &mut [u8], ss: u64) {
    let nr = img.len() as u64 / ss;
    write_header(img, ss, 1, nr - 1, 2, nr);
    write_header(img, ss, nr - 1, 1, nr - 1 - array_sectors(ss), nr);
}

/// Write entry `slot` (0-based) into both arrays.
pub fn write_entry(img: &mut [u8], ss: u64, slot: usize, e: &GptEntry) {
    let nr = img.len() as u64 / ss;
    for array_lba in [2, nr - 1 - array_sectors(ss)] {
        let at = (array_lba * ss) as usize + slot * 128;
        let b = &mut img[at..at + 128];
        b.fill(0);
        b[..16].copy_from_slice(&e.type_);
        b[16..32].copy_from_slice(&e.uuid);
        put64(b, 32, e.first);
        put64(b, 40, e.last);
        for (i, u) in e.name.encode_utf16().take(36).enumerate() {
            b[56 + 2 * i..58 + 2 * i].copy_from_slice(&u.to_le_bytes());
        }
    }
}

/// A GPT disk of `nr` sectors of `ss` bytes with `entries` in slots 0...
pub fn gpt_image(ss: u64, nr: u64, entries: &[GptEntry]) -> Vec<u8> {
    let mut img = vec![0u8; (ss * nr) as usize];
    // Protective MBR: one 0xEE entry over the disk.
    img[446 + 4] = 0xee;
    put32(&mut img, 446 + 8, 1);
    put32(&mut img, 446 + 12, (nr - 1).min(u64::from(u32::MAX)) as u32);
    img[510] = 0x55;
    img[511] = 0xaa;
    for (i, e) in entries.iter().enumerate() {
        write_entry(&mut img, ss, i, e);
    }
    reseal_gpt(&mut img, ss);
    img
}

/// Write MBR-style entry `slot` of the boot record at sector `at_sector`.
pub fn mbr_entry(
    img: &mut [u8],
    ss: u64,
    at_sector: u64,
    slot: usize,
    type_: u8,
    start: u32,
    size: u32,
) {
    let b = (at_sector * ss) as usize;
    let e = b + 446 + 16 * slot;
    img[e + 4] = type_;
    put32(img, e + 8, start);
    put32(img, e + 12, size);
    img[b + 510] = 0x55;
    img[b + 511] = 0xaa;
}

/// A DOS disk of `nr` sectors: primary 1 at 64 (64 sectors), the extended
/// partition 2 from 128 to the end, and `logical` logical partitions of 32
/// sectors, each after its boot record, 64 sectors apart.
pub fn dos_image(ss: u64, nr: u64, logical: u32) -> Vec<u8> {
    let mut img = vec![0u8; (ss * nr) as usize];
    put32(&mut img, 440, 0x1234_abcd);
    mbr_entry(&mut img, ss, 0, 0, 0x83, 64, 64);
    mbr_entry(&mut img, ss, 0, 1, 0x05, 128, (nr - 128) as u32);
    for i in 0..logical {
        let ebr = 128 + 64 * u64::from(i);
        mbr_entry(&mut img, ss, ebr, 0, 0x83, 1, 32);
        if i + 1 < logical {
            mbr_entry(&mut img, ss, ebr, 1, 0x05, 64 * (i + 1), 64);
        }
    }
    img
}
