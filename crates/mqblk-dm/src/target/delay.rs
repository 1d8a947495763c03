//! `delay DEV OFFSET MS [DEV OFFSET MS [DEV OFFSET MS]]`: every I/O is held
//! back for a while before it goes to its leg (Linux dm-delay). With one
//! triple, everything goes to that device after MS milliseconds; with a
//! second, writes (and flushes) go to the second device after its delay;
//! a third gives flushes their own delay, as in Linux 6.x.
//!
//! The children wait in their hardware queue's delayed list, sent from
//! `poll` when due; a device with a `delay` line is polled, not slept on,
//! so a child goes out on time.

use mqblk_core::driver::Op;

use super::ctor::Ctor;
use super::target_type::{Io, Route, Target};
use crate::extent::Use;
use crate::legs::LegId;
use crate::table::TableError;

/// Longest delay accepted: an hour.
pub const MAX_DELAY_MS: u64 = 3_600_000;

/// One `DEV OFFSET MS` triple, built.
#[derive(Clone, Copy, Debug)]
struct Class {
    leg: LegId,
    offset_bytes: u64,
    delay_ns: u64,
    ms: u64,
}

/// Reads, writes and flushes, each to its leg after its delay.
#[derive(Debug)]
pub struct Delay {
    read: Class,
    write: Class,
    flush: Class,
    triples: usize,
}

impl Delay {
    /// Build from one, two or three `DEV OFFSET MS` triples.
    pub fn new(c: &mut Ctor<'_, '_>) -> Result<Delay, TableError> {
        let n = c.line.args.len();
        if n > 9 {
            return Err(c.err(
                9,
                "argument",
                format!(
                    "`{}` is one too many; `delay` takes {}",
                    c.line.args[9],
                    super::ctor::usage("delay")
                ),
            ));
        }
        if n == 0 || !n.is_multiple_of(3) {
            // The first field of the incomplete triple that is missing.
            return Err(c.err(
                n,
                ["device", "offset", "delay"][n % 3],
                format!("missing; `delay` takes {}", super::ctor::usage("delay")),
            ));
        }
        let mut classes = Vec::with_capacity(3);
        for t in 0..n / 3 {
            let offset = c.num(3 * t + 1, "offset")?;
            let ms = c.num(3 * t + 2, "delay")?;
            if ms > MAX_DELAY_MS {
                return Err(c.err(
                    3 * t + 2,
                    "delay",
                    format!("{ms} ms; expected at most {MAX_DELAY_MS} (an hour)"),
                ));
            }
            // Reads and writes of one block may go to one lower block (the
            // usual `delay DEV 0 R DEV 0 W`); a flush carries no data.
            let (what, use_) = match (n / 3, t) {
                (1, _) => ("device", Use::All),
                (_, 0) => ("read device", Use::Only("reads")),
                (_, 1) => ("write device", Use::Only("writes")),
                _ => ("flush device", Use::NoData),
            };
            let leg = c.leg_as(3 * t, offset, c.line.len, what, use_)?;
            classes.push(Class {
                leg,
                offset_bytes: offset << 9,
                delay_ns: ms * 1_000_000,
                ms,
            });
        }
        let read = classes[0];
        let write = classes.get(1).copied().unwrap_or(read);
        let flush = classes.get(2).copied().unwrap_or(write);
        Ok(Delay {
            read,
            write,
            flush,
            triples: classes.len(),
        })
    }

    fn class(&self, op: Op) -> &Class {
        match op {
            Op::Read => &self.read,
            Op::Flush => &self.flush,
            _ => &self.write,
        }
    }
}

impl Target for Delay {
    fn name(&self) -> &'static str {
        "delay"
    }

    #[inline]
    fn map(&self, io: &Io, _hwq: u16, route: &mut Route) {
        let c = self.class(io.op);
        route.to_leg_after(c.leg, c.offset_bytes + io.offset_bytes, c.delay_ns);
    }

    fn legs(&self) -> Vec<LegId> {
        let mut v = vec![self.read.leg, self.write.leg, self.flush.leg];
        v.sort_unstable();
        v.dedup();
        v
    }

    fn delays(&self) -> bool {
        [self.read, self.write, self.flush].iter().any(|c| c.ms > 0)
    }

    fn maps_flush(&self) -> bool {
        true
    }

    fn map_flush(&self, _hwq: u16, route: &mut Route) {
        route.to_leg_after(self.flush.leg, 0, self.flush.delay_ns);
    }

    fn status(&self) -> String {
        let (r, w, f) = (self.read.ms, self.write.ms, self.flush.ms);
        match self.triples {
            1 => format!("delay {r} ms"),
            2 => format!("read delay {r} ms, write delay {w} ms"),
            _ => format!("read delay {r} ms, write delay {w} ms, flush delay {f} ms"),
        }
    }
}
