//! MBR (DOS) partition tables (Linux `block/partitions/msdos.c`): four
//! primary entries in sector 0, and an extended partition (0x05, 0x0f,
//! 0x85) holding a chain of extended boot records, one logical partition
//! each. Numbering is Linux's and sfdisk's: primaries 1 to 4 by slot,
//! logical partitions from 5 in chain order.

use crate::error::{Error, Result, Warning};
use crate::read::Read;
use crate::table::{Disk, Label, PartType, Partition, PartitionTable};

/// The boot signature at bytes 510 and 511.
pub(crate) const BOOT_SIGNATURE: [u8; 2] = [0x55, 0xaa];
/// The first of the four 16-byte entries.
const ENTRIES_AT: usize = 446;
/// The protective MBR's system id: the disk is GPT.
pub(crate) const GPT_PROTECTIVE: u8 = 0xee;
/// The most logical partitions followed (Linux's `DISK_MAX_PARTS` is 256
/// partitions in all).
pub const MAX_LOGICAL: u32 = 252;

/// One 16-byte MBR entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub(crate) boot: u8,
    pub(crate) type_: u8,
    pub(crate) start: u32,
    pub(crate) size: u32,
}

/// The four entries of a boot record (`sector` is at least 512 bytes).
pub(crate) fn entries(sector: &[u8]) -> [Entry; 4] {
    std::array::from_fn(|i| {
        let e = &sector[ENTRIES_AT + 16 * i..ENTRIES_AT + 16 * (i + 1)];
        Entry {
            boot: e[0],
            type_: e[4],
            start: u32::from_le_bytes([e[8], e[9], e[10], e[11]]),
            size: u32::from_le_bytes([e[12], e[13], e[14], e[15]]),
        }
    })
}

/// Whether a boot record carries the 0x55AA signature.
pub(crate) fn signed(sector: &[u8]) -> bool {
    sector[510..512] == BOOT_SIGNATURE
}

fn is_extended(t: u8) -> bool {
    PartType::Dos(t).is_extended()
}

/// Parse the DOS table whose sector 0 is `mbr` (signed, not protective).
pub(crate) fn parse(disk: &Disk, read: &mut Read<'_>, mbr: &[u8]) -> Result<PartitionTable> {
    let id = u32::from_le_bytes([mbr[440], mbr[441], mbr[442], mbr[443]]);
    let mut partitions = Vec::new();
    let mut warnings = Vec::new();
    let mut extended: Option<Partition> = None;
    for (i, e) in entries(mbr).iter().enumerate() {
        if e.type_ == 0 || e.size == 0 {
            continue;
        }
        let p = Partition {
            number: i as u32 + 1,
            start_sector: e.start.into(),
            nr_sectors: e.size.into(),
            type_: PartType::Dos(e.type_),
            name: None,
            uuid: None,
            bootable: e.boot & 0x80 != 0,
        };
        crate::table::check_inside(disk, &p)?;
        if is_extended(e.type_) {
            if let Some(first) = &extended {
                return Err(Error::SecondExtended {
                    device: disk.name.to_string(),
                    number: p.number,
                    first: first.number,
                });
            }
            extended = Some(p.clone());
        }
        partitions.push(p);
    }
    if let Some(ext) = extended {
        logical(disk, read, &ext, &mut partitions, &mut warnings)?;
    }
    let table = PartitionTable {
        label: Label::Dos,
        id: format!("{id:#010x}"),
        sector_size: disk.sector_size,
        first_lba: None,
        last_lba: None,
        partitions,
        warnings,
    };
    table.validate(disk)?;
    Ok(table)
}

/// Follow the chain of extended boot records in `ext`: each holds a
/// logical partition (its start relative to that record) and a link to the
/// next record (relative to the extended partition's start).
fn logical(
    disk: &Disk,
    read: &mut Read<'_>,
    ext: &Partition,
    out: &mut Vec<Partition>,
    warnings: &mut Vec<Warning>,
) -> Result<()> {
    let ss = disk.sector_size as usize;
    let mut sector = vec![0u8; ss];
    let mut seen: Vec<u64> = Vec::new();
    let mut number = 5u32;
    let mut ebr = ext.start_sector;
    loop {
        if ebr < ext.start_sector || ebr > ext.end_sector() {
            return Err(Error::EbrOutside {
                device: disk.name.to_string(),
                number,
                sector: ebr,
                start: ext.start_sector,
                end: ext.end_sector(),
            });
        }
        if seen.contains(&ebr) {
            return Err(Error::EbrLoop {
                device: disk.name.to_string(),
                sector: ebr,
                number: number - 1,
            });
        }
        if seen.len() as u32 >= MAX_LOGICAL {
            return Err(Error::TooManyLogical {
                device: disk.name.to_string(),
                limit: MAX_LOGICAL,
            });
        }
        seen.push(ebr);
        read(ebr, &mut sector).map_err(|source| Error::Read {
            device: disk.name.to_string(),
            sector: ebr,
            len_bytes: ss as u64,
            source,
        })?;
        if !signed(&sector) {
            warnings.push(Warning::EbrSignature { sector: ebr });
            return Ok(());
        }
        let [data, link, ..] = entries(&sector);
        if data.type_ != 0 && data.size != 0 && !is_extended(data.type_) {
            let p = Partition {
                number,
                start_sector: ebr + u64::from(data.start),
                nr_sectors: data.size.into(),
                type_: PartType::Dos(data.type_),
                name: None,
                uuid: None,
                bootable: data.boot & 0x80 != 0,
            };
            crate::table::check_inside(disk, &p)?;
            out.push(p);
            number += 1;
        }
        if !is_extended(link.type_) || link.size == 0 {
            return Ok(());
        }
        ebr = ext.start_sector + u64::from(link.start);
    }
}
