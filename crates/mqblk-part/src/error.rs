//! Errors and warnings of the partition parsers: each names the device,
//! the partition (by its Linux number), the field or sector, and the limit
//! it broke.

use std::fmt;

/// What is wrong with one GPT header (primary or backup).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GptProblem {
    /// No `EFI PART` signature.
    Signature,
    /// The header's CRC32 does not match its bytes.
    HeaderCrc {
        /// The CRC32 the header stores.
        stored: u32,
        /// The CRC32 of its bytes.
        computed: u32,
    },
    /// The partition entry array's CRC32 does not match the array.
    ArrayCrc {
        /// The CRC32 the header stores.
        stored: u32,
        /// The CRC32 of the array.
        computed: u32,
    },
    /// A header field is out of its range.
    Field {
        /// The field's name, as the UEFI specification names it.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What it should be.
        expected: String,
    },
    /// Reading the header or its array failed.
    Read {
        /// The first LBA that was being read.
        lba: u64,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for GptProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GptProblem::Signature => write!(f, "no `EFI PART` signature"),
            GptProblem::HeaderCrc { stored, computed } => write!(
                f,
                "header CRC32 is {stored:#010x} but the header's bytes give {computed:#010x}"
            ),
            GptProblem::ArrayCrc { stored, computed } => write!(
                f,
                "partition array CRC32 is {stored:#010x} but the array's bytes give {computed:#010x}"
            ),
            GptProblem::Field {
                field,
                value,
                expected,
            } => write!(f, "{field} is {value}, expected {expected}"),
            GptProblem::Read { lba, reason } => write!(f, "reading LBA {lba} failed: {reason}"),
        }
    }
}

/// Something wrong that the parser could work around: the table is still
/// usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// The primary GPT header (LBA 1) is bad; the backup was used.
    GptPrimaryBad {
        /// What is wrong with the primary.
        problem: GptProblem,
        /// The LBA of the backup header that was used.
        backup_lba: u64,
    },
    /// The primary GPT is good, the backup (at the last LBA) is not.
    GptBackupBad {
        /// What is wrong with the backup.
        problem: GptProblem,
        /// Where the backup header was looked for.
        backup_lba: u64,
    },
    /// An extended boot record without the 0x55AA signature ends the chain
    /// of logical partitions early.
    EbrSignature {
        /// The EBR's sector.
        sector: u64,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::GptPrimaryBad {
                problem,
                backup_lba,
            } => write!(
                f,
                "the primary GPT header at LBA 1 is bad ({problem}); using the backup header at \
                 LBA {backup_lba}"
            ),
            Warning::GptBackupBad {
                problem,
                backup_lba,
            } => write!(
                f,
                "the backup GPT header at LBA {backup_lba} is bad ({problem}); the primary is good"
            ),
            Warning::EbrSignature { sector } => write!(
                f,
                "the extended boot record at sector {sector} has no 0x55AA signature; the logical \
                 partitions end before it"
            ),
        }
    }
}

/// A partition table that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The sector size is not one a partition table can have.
    #[error("{device}: sector size {sector_size} is not a power of two from 512 to 65536")]
    SectorSize {
        /// The device.
        device: String,
        /// Its sector size.
        sector_size: u32,
    },
    /// Reading the device failed.
    #[error("{device}: reading {len_bytes} bytes at sector {sector} failed")]
    Read {
        /// The device.
        device: String,
        /// The first sector read.
        sector: u64,
        /// The bytes asked for.
        len_bytes: u64,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The device gave no context to read with.
    #[error("{device}: cannot read the partition table")]
    Device {
        /// The device.
        device: String,
        /// Why.
        #[source]
        source: mqblk_core::Error,
    },
    /// Both GPT headers are bad.
    #[error(
        "{device}: both GPT headers are bad: the primary at LBA 1 ({primary}), and the backup at \
         LBA {backup_lba} ({backup})"
    )]
    GptBothBad {
        /// The device.
        device: String,
        /// What is wrong with the primary.
        primary: Box<GptProblem>,
        /// What is wrong with the backup.
        backup: Box<GptProblem>,
        /// Where the backup was looked for.
        backup_lba: u64,
    },
    /// A partition's field is outside what its table allows.
    #[error("{device}: partition {number}: {field} is {value}, {limit}")]
    Entry {
        /// The device.
        device: String,
        /// The partition's number (Linux's: 1 to 4 primary, 5 on logical).
        number: u32,
        /// The field (`first_lba`, `last_lba`, `start`, `size`, ...).
        field: &'static str,
        /// Its value.
        value: u64,
        /// The limit it broke, in words.
        limit: String,
    },
    /// A partition runs past the end of the device.
    #[error(
        "{device}: partition {number} ends at sector {end_sector} (its {field}), past the \
         device's last sector {last_sector}"
    )]
    PastEnd {
        /// The device.
        device: String,
        /// The partition's number.
        number: u32,
        /// The field that is too large.
        field: &'static str,
        /// The partition's last sector.
        end_sector: u64,
        /// The device's last sector.
        last_sector: u64,
    },
    /// Two partitions share sectors.
    #[error(
        "{device}: partition {number} (sectors {start}..={end}) overlaps partition {other} \
         (sectors {other_start}..={other_end}) from sector {first_shared}"
    )]
    Overlap {
        /// The device.
        device: String,
        /// The later partition.
        number: u32,
        /// Its first sector.
        start: u64,
        /// Its last sector.
        end: u64,
        /// The partition it overlaps.
        other: u32,
        /// That partition's first sector.
        other_start: u64,
        /// That partition's last sector.
        other_end: u64,
        /// The first sector both hold.
        first_shared: u64,
    },
    /// The chain of extended boot records loops.
    #[error(
        "{device}: the extended partition's chain of boot records loops back to sector {sector} \
         after partition {number}"
    )]
    EbrLoop {
        /// The device.
        device: String,
        /// The sector of the EBR seen twice.
        sector: u64,
        /// The last logical partition's number before the loop.
        number: u32,
    },
    /// An extended boot record lies outside its extended partition.
    #[error(
        "{device}: the boot record of partition {number} is at sector {sector}, outside the \
         extended partition (sectors {start}..={end})"
    )]
    EbrOutside {
        /// The device.
        device: String,
        /// The logical partition's number it would describe.
        number: u32,
        /// The EBR's sector.
        sector: u64,
        /// The extended partition's first sector.
        start: u64,
        /// Its last sector.
        end: u64,
    },
    /// More logical partitions than the limit.
    #[error("{device}: more than {limit} logical partitions in the extended partition")]
    TooManyLogical {
        /// The device.
        device: String,
        /// The limit.
        limit: u32,
    },
    /// More than one extended partition in the MBR.
    #[error("{device}: partition {number} is a second extended partition (the first is {first})")]
    SecondExtended {
        /// The device.
        device: String,
        /// The second one.
        number: u32,
        /// The first one.
        first: u32,
    },
}

/// The parsers' result.
pub type Result<T> = std::result::Result<T, Error>;
