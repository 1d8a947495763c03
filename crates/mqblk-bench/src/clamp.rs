//! Where a job's region lies on its device, as fio places it: `size=N%`,
//! `offset=N%` and `offset_increment=N%` of the device, each `numjobs`
//! copy `offset_increment` further, and a region that runs past the
//! device's end cut at it (fio issues no I/O beyond the end: a size
//! larger than the device covers the device, an offset past the end does
//! nothing). What was cut is said once, in one note.

use mqblk::Device;

use super::zone::{ZoneMode, ZBD_DEFAULT_ZONE_BYTES};
use mqblk_fio::job::JobSpec;

/// Copy `k` of `job` (its `numjobs` index) on a device of `cap` bytes,
/// with its percentages turned into bytes and its offset moved on.
pub fn place(job: &JobSpec, k: u32, cap: u64) -> JobSpec {
    let mut copy = job.clone();
    let align = super::pattern::unit_bytes(job).max(512);
    let share = |p: u32| (u128::from(cap) * u128::from(p) / 100) as u64;
    if let Some(p) = job.size_percent {
        copy.size = Some((share(p) / align * align).max(align));
    }
    if let Some(p) = job.offset_percent {
        copy.offset = share(p) / align * align;
    }
    let increment = match job.offset_increment_percent {
        Some(p) => share(p) / align * align,
        None => job.offset_increment,
    };
    copy.offset = copy
        .offset
        .saturating_add(u64::from(k).saturating_mul(increment));
    if job.fill_device {
        copy.size = None;
    }
    copy
}

/// Cut every job's region at its device's end; say once what was cut.
pub fn fit_to_devices(plan: &mut [(JobSpec, Device)]) {
    let mut said = Vec::new();
    for (job, dev) in plan.iter_mut() {
        let cap = dev.capacity_bytes();
        if job.zone.mode == ZoneMode::Zbd && job.zone.size == 0 {
            // fio needs zonesize= on a device without zones; mqblk's
            // devices have none, so it takes fio's examples' size.
            job.zone.size = ZBD_DEFAULT_ZONE_BYTES;
            said.push(format!(
                "job {}: zonemode=zbd without zonesize= on {}, which has no zones: zones of \
                 {ZBD_DEFAULT_ZONE_BYTES} bytes",
                job.name,
                dev.name()
            ));
        }
        if job.offset >= cap {
            said.push(format!(
                "job {}: offset={} is past the end of {} ({cap} bytes): no I/O",
                job.name,
                job.offset,
                dev.name()
            ));
            continue;
        }
        let room = cap - job.offset;
        if let Some(size) = job.size.filter(|&s| s > room) {
            said.push(format!(
                "job {}: size={size} from offset={} runs past the end of {} ({cap} bytes): \
                 {room} bytes",
                job.name,
                job.offset,
                dev.name()
            ));
            job.size = Some(room);
        }
    }
    if !said.is_empty() {
        eprintln!("mqblk: note: fitted to the devices: {}", said.join("; "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_and_increments_are_placed_on_the_device() {
        let job = JobSpec {
            size_percent: Some(25),
            offset_percent: Some(50),
            offset_increment_percent: Some(10),
            ..JobSpec::default()
        };
        let c = place(&job, 2, 1 << 30);
        assert_eq!(c.size, Some(1 << 28));
        assert_eq!(c.offset, (1 << 29) + 2 * ((1u64 << 30) / 10 / 4096 * 4096));
        let bytes = JobSpec {
            offset: 4096,
            offset_increment: 1 << 20,
            ..JobSpec::default()
        };
        assert_eq!(place(&bytes, 3, 1 << 30).offset, 4096 + (3 << 20));
    }
}
