//! GUID partition tables (UEFI 2.x, chapter 5; Linux `block/partitions/efi.c`):
//! the primary header at LBA 1 and the backup at the last LBA, each with a
//! CRC32 of itself and of its partition entry array. A bad primary with a
//! good backup is used with a warning; both bad is an error that says what
//! is wrong with each.

use crate::error::{Error, GptProblem, Result, Warning};
use crate::read::Read;
use crate::table::{Disk, Guid, Label, PartType, Partition, PartitionTable};

/// `EFI PART`.
const SIGNATURE: &[u8; 8] = b"EFI PART";
/// The header fields end here (UEFI's `HeaderSize` minimum).
const HEADER_MIN_BYTES: usize = 92;
/// The smallest entry (UEFI's `SizeOfPartitionEntry` minimum).
const ENTRY_MIN_BYTES: u32 = 128;
/// The largest entry array read (a bound on what a corrupt header can
/// make us allocate): 64 Ki entries of 128 bytes.
pub const MAX_ARRAY_BYTES: u64 = 8 << 20;

/// A header's fields that the entries need.
#[derive(Debug, Clone)]
struct Header {
    lba: u64,
    first_usable: u64,
    last_usable: u64,
    disk_guid: Guid,
    entry_lba: u64,
    nr_entries: u32,
    entry_bytes: u32,
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn guid(b: &[u8], at: usize) -> Guid {
    let mut g = [0u8; 16];
    g.copy_from_slice(&b[at..at + 16]);
    Guid(g)
}

fn field(field: &'static str, value: u64, expected: String) -> GptProblem {
    GptProblem::Field {
        field,
        value,
        expected,
    }
}

/// Read `len` bytes from `lba`, as a problem of the header being read.
fn read_bytes(
    disk: &Disk,
    read: &mut Read<'_>,
    lba: u64,
    len: u64,
) -> std::result::Result<Vec<u8>, GptProblem> {
    let ss = u64::from(disk.sector_size);
    let sectors = len.div_ceil(ss).max(1);
    if lba
        .checked_add(sectors)
        .is_none_or(|end| end > disk.nr_sectors)
    {
        return Err(GptProblem::Read {
            lba,
            reason: format!(
                "{sectors} sectors from LBA {lba} run past the device's {} sectors",
                disk.nr_sectors
            ),
        });
    }
    let mut buf = vec![0u8; (sectors * ss) as usize];
    read(lba, &mut buf).map_err(|e| GptProblem::Read {
        lba,
        reason: e.to_string(),
    })?;
    buf.truncate(len as usize);
    Ok(buf)
}

/// Read and check the header at `lba` and its entry array.
fn load(
    disk: &Disk,
    read: &mut Read<'_>,
    lba: u64,
) -> std::result::Result<(Header, Vec<u8>), GptProblem> {
    let ss = disk.sector_size as usize;
    let sector = read_bytes(disk, read, lba, ss as u64)?;
    if &sector[..8] != SIGNATURE {
        return Err(GptProblem::Signature);
    }
    let header_bytes = le32(&sector, 12);
    if (header_bytes as usize) < HEADER_MIN_BYTES || header_bytes as usize > ss {
        return Err(field(
            "HeaderSize",
            header_bytes.into(),
            format!("{HEADER_MIN_BYTES} to the sector size, {ss}"),
        ));
    }
    let stored = le32(&sector, 16);
    let mut h = sector[..header_bytes as usize].to_vec();
    h[16..20].fill(0);
    let computed = crc32fast::hash(&h);
    if stored != computed {
        return Err(GptProblem::HeaderCrc { stored, computed });
    }
    let hdr = Header {
        lba: le64(&sector, 24),
        first_usable: le64(&sector, 40),
        last_usable: le64(&sector, 48),
        disk_guid: guid(&sector, 56),
        entry_lba: le64(&sector, 72),
        nr_entries: le32(&sector, 80),
        entry_bytes: le32(&sector, 84),
    };
    if hdr.lba != lba {
        return Err(field("MyLBA", hdr.lba, format!("{lba}, where it was read")));
    }
    let last = disk.last_sector();
    if hdr.last_usable > last {
        return Err(field(
            "LastUsableLBA",
            hdr.last_usable,
            format!("at most the device's last sector, {last}"),
        ));
    }
    if hdr.first_usable > hdr.last_usable {
        return Err(field(
            "FirstUsableLBA",
            hdr.first_usable,
            format!("at most LastUsableLBA, {}", hdr.last_usable),
        ));
    }
    let eb = hdr.entry_bytes;
    if eb < ENTRY_MIN_BYTES || !eb.is_power_of_two() || eb > disk.sector_size {
        return Err(field(
            "SizeOfPartitionEntry",
            eb.into(),
            format!("128 times a power of two, at most the sector size {ss}"),
        ));
    }
    let array_bytes = u64::from(hdr.nr_entries) * u64::from(eb);
    if array_bytes > MAX_ARRAY_BYTES {
        return Err(field(
            "NumberOfPartitionEntries",
            hdr.nr_entries.into(),
            format!(
                "at most {} entries of {eb} bytes",
                MAX_ARRAY_BYTES / u64::from(eb)
            ),
        ));
    }
    let array_sectors = array_bytes.div_ceil(ss as u64);
    let array_end = hdr.entry_lba.saturating_add(array_sectors);
    // The array is outside the usable area, and not on the header itself.
    let clear_of_header = array_end <= lba || hdr.entry_lba > lba;
    if hdr.entry_lba < 2 || array_end > disk.nr_sectors || !clear_of_header {
        return Err(field(
            "PartitionEntryLBA",
            hdr.entry_lba,
            format!(
                "an LBA from 2 where its {array_sectors} sectors fit in the device's {} sectors \
                 and miss the header at LBA {lba}",
                disk.nr_sectors
            ),
        ));
    }
    let array = if array_bytes == 0 {
        Vec::new()
    } else {
        read_bytes(disk, read, hdr.entry_lba, array_bytes)?
    };
    let stored = le32(&sector, 88);
    let computed = crc32fast::hash(&array);
    if stored != computed {
        return Err(GptProblem::ArrayCrc { stored, computed });
    }
    Ok((hdr, array))
}

/// Decode a GPT partition name: UTF-16LE, up to 36 code units, ending at
/// the first NUL.
fn name(raw: &[u8]) -> String {
    let units = raw
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|&u| u != 0);
    char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// Parse the GPT of `disk` (the caller has seen a protective MBR).
pub(crate) fn parse(disk: &Disk, read: &mut Read<'_>) -> Result<PartitionTable> {
    let backup_lba = disk.last_sector();
    let mut warnings = Vec::new();
    let (hdr, array) = match load(disk, read, 1) {
        Ok(good) => {
            if backup_lba <= 1 {
                warnings.push(Warning::GptBackupBad {
                    problem: field("AlternateLBA", backup_lba, "a sector after LBA 1".into()),
                    backup_lba,
                });
            } else if let Err(problem) = load(disk, read, backup_lba) {
                warnings.push(Warning::GptBackupBad {
                    problem,
                    backup_lba,
                });
            }
            good
        }
        Err(primary) => {
            let backup = if backup_lba <= 1 {
                Err(field(
                    "AlternateLBA",
                    backup_lba,
                    "a sector after LBA 1".into(),
                ))
            } else {
                load(disk, read, backup_lba)
            };
            match backup {
                Ok(good) => {
                    warnings.push(Warning::GptPrimaryBad {
                        problem: primary,
                        backup_lba,
                    });
                    good
                }
                Err(backup) => {
                    return Err(Error::GptBothBad {
                        device: disk.name.to_string(),
                        primary: Box::new(primary),
                        backup: Box::new(backup),
                        backup_lba,
                    })
                }
            }
        }
    };
    let mut partitions = Vec::new();
    for (i, e) in array.chunks_exact(hdr.entry_bytes as usize).enumerate() {
        let type_guid = guid(e, 0);
        if type_guid == Guid::ZERO {
            continue;
        }
        let number = i as u32 + 1;
        let first = le64(e, 32);
        let last = le64(e, 40);
        let entry_err = |field: &'static str, value: u64, limit: String| Error::Entry {
            device: disk.name.to_string(),
            number,
            field,
            value,
            limit,
        };
        if last < first {
            return Err(entry_err(
                "last_lba",
                last,
                format!("before its first_lba {first}"),
            ));
        }
        let p = Partition {
            number,
            start_sector: first,
            nr_sectors: last - first + 1,
            type_: PartType::Gpt(type_guid),
            name: Some(name(&e[56..128])),
            uuid: Some(guid(e, 16)),
            bootable: false,
        };
        crate::table::check_inside(disk, &p)?;
        if first < hdr.first_usable {
            return Err(entry_err(
                "first_lba",
                first,
                format!("before the first usable LBA {}", hdr.first_usable),
            ));
        }
        if last > hdr.last_usable {
            return Err(entry_err(
                "last_lba",
                last,
                format!("after the last usable LBA {}", hdr.last_usable),
            ));
        }
        partitions.push(p);
    }
    let table = PartitionTable {
        label: Label::Gpt,
        id: hdr.disk_guid.to_string(),
        sector_size: disk.sector_size,
        first_lba: Some(hdr.first_usable),
        last_lba: Some(hdr.last_usable),
        partitions,
        warnings,
    };
    table.validate(disk)?;
    Ok(table)
}
