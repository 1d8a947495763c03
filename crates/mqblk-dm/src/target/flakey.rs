//! `flakey DEV OFFSET UP DOWN`: a linear mapping that works for UP seconds,
//! then fails every I/O (flushes included) with an I/O error for DOWN
//! seconds, and so on, counted from when the table was loaded (Linux
//! dm-flakey without feature arguments).

use mqblk_core::driver::Status;

use super::ctor::Ctor;
use super::target_type::{Io, Route, Target};
use crate::legs::LegId;
use crate::table::TableError;

/// Longest interval accepted, in seconds (Linux: `UINT_MAX / HZ`; a day
/// here, ample for tests).
pub const MAX_INTERVAL_S: u64 = 86_400;

/// Up for `up_ns`, then down for `down_ns`, from `start_ns`.
#[derive(Debug)]
pub struct Flakey {
    leg: LegId,
    offset_bytes: u64,
    start_ns: u64,
    up_ns: u64,
    down_ns: u64,
    up_s: u64,
    down_s: u64,
}

impl Flakey {
    /// Build from `DEV OFFSET UP DOWN`.
    pub fn new(c: &mut Ctor<'_, '_>) -> Result<Flakey, TableError> {
        let offset = c.num(1, "offset")?;
        let up = c.num(2, "up interval")?;
        let down = c.num(3, "down interval")?;
        for (i, what, v) in [(2, "up interval", up), (3, "down interval", down)] {
            if v > MAX_INTERVAL_S {
                return Err(c.err(
                    i,
                    what,
                    format!("{v} seconds; expected at most {MAX_INTERVAL_S}"),
                ));
            }
        }
        if up + down == 0 {
            return Err(c.err(
                3,
                "down interval",
                "up and down are both 0 seconds; their sum must be above 0",
            ));
        }
        if c.line.args.len() > 4 {
            return Err(c.err(
                4,
                "argument",
                format!(
                    "`{}`: feature arguments (drop_writes, error_writes, corrupt_bio_byte, ...) are not supported; `flakey` takes {}",
                    c.line.args[4],
                    super::ctor::usage("flakey")
                ),
            ));
        }
        let leg = c.leg(0, offset, c.line.len)?;
        Ok(Flakey {
            leg,
            offset_bytes: offset << 9,
            start_ns: mqblk_core::clock::now_ns(),
            up_ns: up * 1_000_000_000,
            down_ns: down * 1_000_000_000,
            up_s: up,
            down_s: down,
        })
    }

    /// True while the device is in its down interval.
    #[inline]
    pub fn is_down(&self) -> bool {
        self.down_at(mqblk_core::clock::now_ns())
    }

    #[inline]
    fn down_at(&self, now_ns: u64) -> bool {
        if self.down_ns == 0 {
            return false;
        }
        let t = now_ns.saturating_sub(self.start_ns) % (self.up_ns + self.down_ns);
        t >= self.up_ns
    }
}

impl Target for Flakey {
    fn name(&self) -> &'static str {
        "flakey"
    }

    #[inline]
    fn map(&self, io: &Io, _hwq: u16, route: &mut Route) {
        if self.is_down() {
            route.fail(Status::IoError);
        } else {
            route.to_leg(self.leg, self.offset_bytes + io.offset_bytes);
        }
    }

    fn legs(&self) -> Vec<LegId> {
        vec![self.leg]
    }

    fn maps_flush(&self) -> bool {
        true
    }

    fn map_flush(&self, _hwq: u16, route: &mut Route) {
        if self.is_down() {
            route.fail(Status::IoError);
        }
    }

    fn status(&self) -> String {
        format!(
            "up {} s, down {} s, now {}",
            self.up_s,
            self.down_s,
            if self.is_down() { "down" } else { "up" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_then_down_then_up_again() {
        let f = Flakey {
            leg: 0,
            offset_bytes: 0,
            start_ns: 1_000,
            up_ns: 2_000,
            down_ns: 1_000,
            up_s: 2,
            down_s: 1,
        };
        assert!(!f.down_at(1_000));
        assert!(!f.down_at(2_999));
        assert!(f.down_at(3_000));
        assert!(f.down_at(3_999));
        assert!(!f.down_at(4_000));
        assert!(!f.down_at(0), "before the start counts as up");
    }
}
