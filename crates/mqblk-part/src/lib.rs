//! Partition tables: GPT (with its backup header and CRC32s) and MBR (with
//! extended partitions), as Linux's `block/partitions/` reads them.
//!
//! Where it sits: beside the layer, on the control plane. A device is
//! opened, its table read once ([`read_table`]), and then either its
//! partitions are registered for accounting
//! (`mqblk_core::Device::set_partitions`) or one partition is opened as a
//! device of its own (`SPEC,part=N`).
//!
//! The parsers do no I/O: they take the disk's geometry and a callback that
//! reads sectors, so that any bytes can be fed to them (proptest, cargo-fuzz,
//! Miri). Any input gives a table, `None` (no table), or a typed error that
//! names the device, the partition, the field or sector, and the limit; none
//! panics.

#![forbid(unsafe_code)]

pub mod error;
pub mod gpt;
pub mod mbr;
pub mod read;
pub mod table;

pub use error::{Error, GptProblem, Result, Warning};
pub use read::Read;
pub use table::{partition_name, Disk, Guid, Label, PartType, Partition, PartitionTable};

/// Parse the partition table of `disk`, reading sectors through `read`.
/// `Ok(None)`: sector 0 has no boot signature, so there is no table.
pub fn parse(disk: &Disk, read: &mut Read<'_>) -> Result<Option<PartitionTable>> {
    let ss = disk.sector_size;
    if !(512..=65536).contains(&ss) || !ss.is_power_of_two() {
        return Err(Error::SectorSize {
            device: disk.name.to_string(),
            sector_size: ss,
        });
    }
    if disk.nr_sectors == 0 {
        return Ok(None);
    }
    let mut mbr = vec![0u8; ss as usize];
    read(0, &mut mbr).map_err(|source| Error::Read {
        device: disk.name.to_string(),
        sector: 0,
        len_bytes: ss.into(),
        source,
    })?;
    if !mbr::signed(&mbr) {
        return Ok(None);
    }
    // A protective (or hybrid) MBR: an entry of type 0xEE says GPT.
    if mbr::entries(&mbr)
        .iter()
        .any(|e| e.type_ == mbr::GPT_PROTECTIVE)
    {
        return gpt::parse(disk, read).map(Some);
    }
    // A FAT or NTFS boot sector carries 0x55AA too: its "entries" have
    // boot bytes other than 0 and 0x80 (Linux's msdos check).
    if mbr::entries(&mbr).iter().any(|e| e.boot & 0x7f != 0) {
        return Ok(None);
    }
    mbr::parse(disk, read, &mbr).map(Some)
}

/// Parse a whole disk image held in memory (its size is the device's size,
/// rounded down to whole sectors).
pub fn parse_image(name: &str, sector_size: u32, image: &[u8]) -> Result<Option<PartitionTable>> {
    let nr_sectors = if sector_size == 0 {
        0
    } else {
        image.len() as u64 / u64::from(sector_size)
    };
    let disk = Disk {
        name,
        sector_size,
        nr_sectors,
    };
    let ss = u64::from(sector_size);
    let mut read = |lba: u64, buf: &mut [u8]| -> std::io::Result<()> {
        let start = lba
            .checked_mul(ss)
            .filter(|s| s.saturating_add(buf.len() as u64) <= nr_sectors * ss);
        match start {
            Some(s) => {
                buf.copy_from_slice(&image[s as usize..s as usize + buf.len()]);
                Ok(())
            }
            None => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{} bytes at LBA {lba} run past the image", buf.len()),
            )),
        }
    };
    parse(&disk, &mut read)
}

/// Read the partition table of `dev` with blocking reads through a context
/// of its own, in the device's logical blocks.
pub fn read_table(dev: &mqblk_core::Device) -> Result<Option<PartitionTable>> {
    let name = dev.name().to_string();
    let sector_size = dev.logical_block_size();
    let disk = Disk {
        name: &name,
        sector_size,
        nr_sectors: dev.capacity_bytes() / u64::from(sector_size.max(1)),
    };
    let mut ctx = dev.context().map_err(|source| Error::Device {
        device: name.clone(),
        source,
    })?;
    let mut read = |lba: u64, buf: &mut [u8]| -> std::io::Result<()> {
        let mut io = dev.alloc_buf(buf.len());
        ctx.read_at(io.as_mut_slice(), lba * u64::from(sector_size))?;
        buf.copy_from_slice(io.as_slice());
        Ok(())
    };
    parse(&disk, &mut read)
}
