//! Partitions of any device: `SPEC,part=N` opens partition N as a device
//! of its own (a linear mapping over the whole disk, bounded by the
//! partition's end), and [`register_partitions`] registers a disk's
//! partitions for accounting.

use mqblk_core::spec::DeviceSpec;
use mqblk_core::{Device, Error, PartitionRange, Result};
use mqblk_part::{partition_name, Partition, PartitionTable};

/// How long registering partitions may wait for the queue to freeze.
const FREEZE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The bytes of `p` a partition device covers: the whole partition, but
/// only one logical sector of an MBR extended partition, as Linux exposes
/// it (so that nothing written to it reaches the logical partitions).
fn extent_bytes(table: &PartitionTable, p: &Partition) -> (u64, u64) {
    let ss = u64::from(table.sector_size);
    let sectors = if p.is_extended() { 1 } else { p.nr_sectors };
    (p.start_sector * ss, sectors * ss)
}

/// `SPEC,part=N`: open the disk `s` names (without `part`) with
/// `open_disk`, read its table, and open partition `number` over it, named
/// as Linux names it (`nullb0p3`, `sda3`).
pub(crate) fn open_partition(
    s: DeviceSpec,
    number: &str,
    open_disk: &dyn Fn(DeviceSpec) -> Result<Device>,
) -> Result<Device> {
    let spec = s.options.spec().to_string();
    let n: u32 = match number.parse() {
        Ok(n) if n >= 1 => n,
        _ => {
            return Err(Error::spec(
                &spec,
                format!("option part={number:?}: expected a partition number from 1"),
            ))
        }
    };
    let disk = open_disk(s)?;
    let table = match mqblk_part::read_table(&disk) {
        Ok(Some(t)) => t,
        Ok(None) => {
            return Err(Error::spec(
                &spec,
                format!("part={n}: {} has no partition table", disk.name()),
            ))
        }
        Err(e) => return Err(Error::spec(&spec, format!("part={n}: {e}"))),
    };
    let Some(p) = table.get(n) else {
        let have: Vec<String> = table
            .partitions
            .iter()
            .map(|p| p.number.to_string())
            .collect();
        return Err(Error::spec(
            &spec,
            format!(
                "part={n}: {} has no partition {n} (its {} table has {})",
                disk.name(),
                table.label.as_str(),
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            ),
        ));
    };
    let (offset_bytes, len_bytes) = extent_bytes(&table, p);
    let name = partition_name(disk.name(), n);
    // The disk counts every partition's I/O, as Linux's diskstats shows a
    // disk with all its partitions whichever one is open.
    register_partitions(&disk)?;
    mqblk_dm::linear(disk, offset_bytes, len_bytes, &name)
}

/// Read `dev`'s partition table and register its partitions for
/// accounting ([`Device::set_partitions`]), named as Linux names them.
/// `Ok(None)`: no table. A table that cannot be read is an error that
/// names the device and what is wrong; nothing is registered then.
pub fn register_partitions(dev: &Device) -> Result<Option<PartitionTable>> {
    let table = match mqblk_part::read_table(dev) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(Error::Setup {
                device: dev.name().into(),
                reason: format!("partition table: {e}"),
            })
        }
    };
    let ranges: Vec<PartitionRange> = table
        .partitions
        .iter()
        .map(|p| {
            let (off, len) = extent_bytes(&table, p);
            PartitionRange {
                start_sector: off >> 9,
                nr_sectors: len >> 9,
                name: partition_name(dev.name(), p.number),
            }
        })
        .collect();
    dev.set_partitions(&ranges, FREEZE_TIMEOUT)?;
    Ok(Some(table))
}
