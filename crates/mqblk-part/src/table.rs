//! The table both formats parse into (Linux's `struct parsed_partitions`,
//! shaped like `sfdisk --json`'s `partitiontable`), and the checks every
//! table passes: entries inside the device, and no two sharing a sector.

use std::fmt;

use crate::error::{Error, Result, Warning};

/// The geometry of the disk being parsed, and its name for errors.
#[derive(Debug, Clone, Copy)]
pub struct Disk<'a> {
    /// The device's name, for errors.
    pub name: &'a str,
    /// The logical sector size in bytes (512 or 4096 in practice).
    pub sector_size: u32,
    /// The device's size in logical sectors.
    pub nr_sectors: u64,
}

impl Disk<'_> {
    /// The device's last sector (0 on an empty device).
    pub fn last_sector(&self) -> u64 {
        self.nr_sectors.saturating_sub(1)
    }
}

/// The kind of partition table (`sfdisk --json`'s `label`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// GUID partition table.
    Gpt,
    /// MBR (DOS) table, with extended partitions.
    Dos,
}

impl Label {
    /// The name sfdisk gives it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Label::Gpt => "gpt",
            Label::Dos => "dos",
        }
    }
}

/// A partition's type: a GPT type GUID or an MBR system id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartType {
    /// A GPT partition type GUID.
    Gpt(Guid),
    /// An MBR system id (0x83 Linux, 0x05 extended, ...).
    Dos(u8),
}

impl PartType {
    /// Whether this is an MBR extended partition (0x05, 0x0f, 0x85).
    pub fn is_extended(&self) -> bool {
        matches!(self, PartType::Dos(0x05 | 0x0f | 0x85))
    }
}

impl fmt::Display for PartType {
    /// As sfdisk prints it: the GUID in capitals, or the id in lower-case
    /// hex without `0x` (`83`, `5`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartType::Gpt(g) => write!(f, "{g}"),
            PartType::Dos(t) => write!(f, "{t:x}"),
        }
    }
}

/// A GUID as stored on disk (the first three fields little-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    /// The all-zero GUID (an unused GPT entry's type).
    pub const ZERO: Guid = Guid([0; 16]);
}

impl fmt::Display for Guid {
    /// `XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX` in capitals, as sfdisk prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02X}{:02X}{:02X}{:02X}-{:02X}{:02X}-{:02X}{:02X}-{:02X}{:02X}-",
            b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9]
        )?;
        for x in &b[10..] {
            write!(f, "{x:02X}")?;
        }
        Ok(())
    }
}

/// One partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Linux's number: the GPT slot + 1; MBR primaries 1 to 4 by slot,
    /// logical partitions from 5 in chain order.
    pub number: u32,
    /// First sector, in the table's logical sectors.
    pub start_sector: u64,
    /// Length in the table's logical sectors.
    pub nr_sectors: u64,
    /// Type GUID or system id.
    pub type_: PartType,
    /// The GPT partition name (UTF-16LE on disk); `None` for MBR.
    pub name: Option<String>,
    /// The GPT unique partition GUID; `None` for MBR.
    pub uuid: Option<Guid>,
    /// The MBR boot flag (0x80).
    pub bootable: bool,
}

impl Partition {
    /// The last sector (inclusive).
    pub fn end_sector(&self) -> u64 {
        self.start_sector + self.nr_sectors.max(1) - 1
    }

    /// Whether this is an MBR extended partition (a container of logical
    /// partitions).
    pub fn is_extended(&self) -> bool {
        self.type_.is_extended()
    }
}

/// A parsed partition table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionTable {
    /// GPT or DOS.
    pub label: Label,
    /// The disk identifier: the GPT disk GUID, or the MBR disk signature as
    /// sfdisk prints it (`0x1234abcd`).
    pub id: String,
    /// The logical sector size the table's sectors are counted in.
    pub sector_size: u32,
    /// GPT: the first and last usable LBA.
    pub first_lba: Option<u64>,
    /// GPT: the last usable LBA.
    pub last_lba: Option<u64>,
    /// Partitions in number order.
    pub partitions: Vec<Partition>,
    /// What was wrong but worked around (a bad primary GPT header, ...).
    pub warnings: Vec<Warning>,
}

impl PartitionTable {
    /// Partition `number`, if the table has it.
    pub fn get(&self, number: u32) -> Option<&Partition> {
        self.partitions.iter().find(|p| p.number == number)
    }

    /// Check every partition against the device and against each other:
    /// inside the device, and no two sharing a sector (a logical partition
    /// lies inside its extended partition, which does not count).
    pub fn validate(&self, disk: &Disk) -> Result<()> {
        for p in &self.partitions {
            check_inside(disk, p)?;
        }
        // Pairs, in number order: n is at most 128 for GPT as sfdisk makes
        // it (the array is bounded by the parser), so n^2/2 comparisons.
        for (i, p) in self.partitions.iter().enumerate() {
            for q in &self.partitions[..i] {
                if nested(p, q) || nested(q, p) {
                    continue;
                }
                let lo = p.start_sector.max(q.start_sector);
                let hi = p.end_sector().min(q.end_sector());
                if lo <= hi {
                    return Err(Error::Overlap {
                        device: disk.name.to_string(),
                        number: p.number,
                        start: p.start_sector,
                        end: p.end_sector(),
                        other: q.number,
                        other_start: q.start_sector,
                        other_end: q.end_sector(),
                        first_shared: lo,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Whether `inner` is a logical partition inside the extended partition
/// `outer`.
fn nested(inner: &Partition, outer: &Partition) -> bool {
    outer.is_extended()
        && inner.number > 4
        && inner.start_sector >= outer.start_sector
        && inner.end_sector() <= outer.end_sector()
}

/// A partition must start and end inside the device.
pub(crate) fn check_inside(disk: &Disk, p: &Partition) -> Result<()> {
    let last = disk.last_sector();
    if disk.nr_sectors == 0 || p.start_sector > last {
        return Err(Error::PastEnd {
            device: disk.name.to_string(),
            number: p.number,
            field: "start",
            end_sector: p.start_sector,
            last_sector: last,
        });
    }
    let end = p.start_sector.checked_add(p.nr_sectors.max(1) - 1);
    match end {
        Some(e) if e <= last => Ok(()),
        _ => Err(Error::PastEnd {
            device: disk.name.to_string(),
            number: p.number,
            field: "size",
            end_sector: end.unwrap_or(u64::MAX),
            last_sector: last,
        }),
    }
}

/// The name Linux (and sfdisk) gives partition `number` of `disk`: `sda1`,
/// but `nvme0n1p1` and `loop0p1` when the disk's name ends in a digit.
pub fn partition_name(disk: &str, number: u32) -> String {
    if disk.ends_with(|c: char| c.is_ascii_digit()) {
        format!("{disk}p{number}")
    } else {
        format!("{disk}{number}")
    }
}
