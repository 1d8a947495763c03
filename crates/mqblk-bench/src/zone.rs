//! fio's `zonemode=`: where in its region a job's I/O may go, zone by
//! zone. [`super::pattern`] draws an offset over the region; a zone mode
//! narrows or moves it.
//!
//! - `strided` (fio's older zone options, and what a bare `zonesize=`
//!   means): the job works in a window of `zonerange` bytes for `zonesize`
//!   bytes of I/O, then moves the window on by `zonerange` plus
//!   `zoneskip`, wrapping at the region's end.
//! - `zbd`: a zoned block device, emulated over a regular one as fio does
//!   for a file or a disk without zones (fio's `zbd.c`, `init_zone_info`):
//!   zones of `zonesize` bytes, each with a write pointer. A write goes to
//!   its zone's write pointer; a full zone chosen again is reset (emptied)
//!   first; at most `max_open_zones` zones take writes at once; with
//!   `read_beyond_wp=0` (the default) a read goes only where data was
//!   written, and a job with nothing written to read has no I/O left.

use mqblk::Op;

use super::distribution::Rng;

pub(crate) use mqblk_fio::zone::{ZoneMode, ZoneSpec, ZBD_DEFAULT_ZONE_BYTES, ZBD_ZONES_MAX};

/// `strided`: the window the job works in, in sectors from its region's
/// start.
pub struct Strided {
    range_sectors: u64,
    size_bytes: u64,
    skip_sectors: u64,
    region_sectors: u64,
    start_sector: u64,
    bytes_done: u64,
}

impl Strided {
    /// Windows of `spec` over a region of `region_sectors`.
    pub fn new(spec: &ZoneSpec, region_sectors: u64) -> Strided {
        let range = if spec.range > 0 {
            spec.range
        } else {
            spec.size
        };
        Strided {
            range_sectors: (range >> 9).clamp(1, region_sectors.max(1)),
            size_bytes: spec.size.max(512),
            skip_sectors: spec.skip >> 9,
            region_sectors: region_sectors.max(1),
            start_sector: 0,
            bytes_done: 0,
        }
    }

    /// Account an I/O of `len_bytes` and give the window it goes in:
    /// (first sector, sectors). Moves on once `zonesize` bytes are done.
    #[inline]
    pub fn window(&mut self, len_bytes: u64) -> (u64, u64) {
        if self.bytes_done >= self.size_bytes {
            self.bytes_done = 0;
            self.start_sector += self.range_sectors + self.skip_sectors;
            if self.start_sector >= self.region_sectors {
                self.start_sector = 0;
            }
        }
        self.bytes_done += len_bytes;
        let len = self
            .range_sectors
            .min(self.region_sectors - self.start_sector);
        (self.start_sector, len)
    }
}

/// `zbd`: emulated zones, each with its write pointer.
pub struct Zbd {
    zone_sectors: u64,
    /// Sectors written in each zone.
    wp: Vec<u64>,
    /// Zones open for writes (written, not full).
    open: Vec<u32>,
    max_open: usize,
    read_beyond_wp: bool,
    /// Zones with data.
    with_data: u64,
}

impl Zbd {
    /// Zones of `spec.size` bytes over a region of `region_sectors`
    /// (`ZBD_ZONES_MAX` at most: the caller checks).
    pub fn new(spec: &ZoneSpec, region_sectors: u64) -> Zbd {
        let zone_sectors = (spec.size >> 9).max(1);
        let zones = region_sectors.div_ceil(zone_sectors).max(1);
        Zbd {
            zone_sectors,
            wp: vec![0; zones as usize],
            open: Vec::with_capacity(spec.max_open as usize),
            max_open: spec.max_open as usize,
            read_beyond_wp: spec.read_beyond_wp,
            with_data: 0,
        }
    }

    /// Zones of `zone_bytes` over `region_bytes`.
    pub fn zones(region_bytes: u64, zone_bytes: u64) -> u64 {
        region_bytes.div_ceil(zone_bytes.max(512))
    }

    fn capacity(&self, zone: usize, region_sectors: u64) -> u64 {
        let start = zone as u64 * self.zone_sectors;
        self.zone_sectors.min(region_sectors - start)
    }

    /// Move the I/O drawn at `sector` (`len` sectors, region-relative)
    /// where a zoned device takes it. `None`: nothing can be read (no zone
    /// has data), so the job has no I/O left.
    pub fn place(
        &mut self,
        op: Op,
        sector: u64,
        len: u64,
        region_sectors: u64,
        rng: &mut Rng,
    ) -> Option<u64> {
        let zones = self.wp.len();
        let mut zone = ((sector / self.zone_sectors) as usize).min(zones - 1);
        if op == Op::Read {
            if self.read_beyond_wp {
                return Some(sector);
            }
            if self.with_data == 0 {
                return None;
            }
            // The next zone with data, from the one drawn.
            let mut tries = 0;
            while self.wp[zone] < len && tries < zones {
                zone = (zone + 1) % zones;
                tries += 1;
            }
            if self.wp[zone] < len {
                return None;
            }
            let start = zone as u64 * self.zone_sectors;
            let within = sector.saturating_sub(start);
            let room = self.wp[zone] - len;
            let at = if within <= room {
                within / len * len
            } else {
                rng.below(room / len + 1) * len
            };
            return Some(start + at);
        }
        if !op.has_data() && op != Op::Discard {
            return Some(sector);
        }
        if op == Op::Discard {
            // A trim resets its zone, as a zone reset does.
            if self.wp[zone] > 0 {
                self.with_data -= 1;
            }
            self.close(zone);
            self.wp[zone] = 0;
            return Some(zone as u64 * self.zone_sectors);
        }
        // A write: to an open zone when no more may open.
        let is_open = self.open.contains(&(zone as u32));
        if !is_open && self.max_open > 0 && self.open.len() >= self.max_open {
            zone = self.open[rng.below(self.open.len() as u64) as usize] as usize;
        }
        let cap = self.capacity(zone, region_sectors);
        if self.wp[zone] + len > cap {
            // Full: reset it, as fio resets a full zone it writes again.
            self.close(zone);
            if self.wp[zone] > 0 {
                self.with_data -= 1;
            }
            self.wp[zone] = 0;
        }
        if len > cap {
            return Some(zone as u64 * self.zone_sectors);
        }
        let at = zone as u64 * self.zone_sectors + self.wp[zone];
        if self.wp[zone] == 0 {
            self.with_data += 1;
        }
        self.wp[zone] += len;
        if self.wp[zone] + len > cap {
            self.close(zone);
        } else if !self.open.contains(&(zone as u32)) {
            self.open.push(zone as u32);
        }
        Some(at)
    }

    fn close(&mut self, zone: usize) {
        if let Some(i) = self.open.iter().position(|&z| z == zone as u32) {
            self.open.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_windows_move_on_and_wrap() {
        let spec = ZoneSpec {
            mode: ZoneMode::Strided,
            size: 8192,
            skip: 8192,
            ..ZoneSpec::default()
        };
        assert_eq!(spec.effective(), ZoneMode::Strided);
        let mut s = Strided::new(&spec, 64);
        let starts: Vec<u64> = (0..10).map(|_| s.window(4096).0).collect();
        assert_eq!(starts, [0, 0, 32, 32, 0, 0, 32, 32, 0, 0]);
    }

    #[test]
    fn zbd_writes_at_the_pointer_and_reads_only_what_was_written() {
        let spec = ZoneSpec {
            mode: ZoneMode::Zbd,
            size: 64 * 512,
            max_open: 1,
            ..ZoneSpec::default()
        };
        let mut z = Zbd::new(&spec, 256);
        let mut rng = Rng(5);
        assert_eq!(z.place(Op::Read, 10, 8, 256, &mut rng), None);
        assert_eq!(z.place(Op::Write, 70, 8, 256, &mut rng), Some(64));
        assert_eq!(z.place(Op::Write, 75, 8, 256, &mut rng), Some(72));
        // One zone open at most: a write drawn elsewhere joins it.
        assert_eq!(z.place(Op::Write, 200, 8, 256, &mut rng), Some(80));
        for _ in 0..100 {
            let at = z.place(Op::Read, rng.below(248), 8, 256, &mut rng).unwrap();
            assert!((64..88).contains(&at), "{at}");
        }
        // Filled, then written again: reset to its start.
        for _ in 0..5 {
            z.place(Op::Write, 64, 8, 256, &mut rng).unwrap();
        }
        assert_eq!(z.place(Op::Write, 64, 8, 256, &mut rng), Some(64));
    }
}
