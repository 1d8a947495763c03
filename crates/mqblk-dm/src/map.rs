//! Mapping (Linux dm core's `__split_and_process_bio` and `__map_bio`),
//! shared by both drivers: an I/O of the stacked device is cut at target
//! boundaries and each target's `max_io_len`, each piece is routed by its
//! target, and the children that result are planned before any is sent
//! (zeros are filled first: a child may write into the same memory once
//! it is sent). A child's end goes back to its target.

use mqblk_core::driver::{BioFlags, Op, Status};

use crate::legs::LegId;
use crate::target::target_type::{EndAction, Io, Route, Target};

/// One line of the table, built.
pub(crate) struct Line {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) target: std::sync::Arc<dyn Target>,
}

/// A child planned while an I/O is mapped, before any is sent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) line: u32,
    pub(crate) leg: LegId,
    pub(crate) leg_offset: u64,
    /// Where the child starts within the I/O, in bytes.
    pub(crate) io_offset: u64,
    pub(crate) io: Io,
    pub(crate) delay_ns: u64,
}

/// Scratch space of a mapping, kept by each queue so that nothing is
/// allocated once warm.
#[derive(Default)]
pub(crate) struct Mapper {
    pub(crate) route: Route,
    pub(crate) plan: Vec<Plan>,
}

impl Mapper {
    pub(crate) fn with_capacity(n: usize) -> Mapper {
        Mapper {
            route: Route::default(),
            plan: Vec::with_capacity(n),
        }
    }

    /// Plan the children of `len` bytes of `op` at `offset` of the device.
    /// `zero(io_offset, len)` fills a piece a target ends with zeros.
    /// Returns the status of the pieces that failed, or `None` when a
    /// target asked for the I/O to be mapped again later (nothing is then
    /// planned, and the targets of what was planned heard of it).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn map(
        &mut self,
        lines: &[Line],
        op: Op,
        flags: BioFlags,
        offset: u64,
        len: u64,
        who: u16,
        mut zero: impl FnMut(u64, u64),
    ) -> Option<Status> {
        self.plan.clear();
        let mut status = Status::Ok;
        let mut off = offset;
        let end = offset + len;
        let mut io_off = 0u64;
        let mut i = if lines.len() == 1 {
            0
        } else {
            lines.partition_point(|l| l.end <= off)
        };
        while off < end && i < lines.len() {
            let line = &lines[i];
            let t_off = off - line.start;
            let n = (end.min(line.end) - off).min(line.target.max_io_len(t_off));
            let io = Io {
                op,
                flags,
                offset_bytes: t_off,
                len_bytes: n,
            };
            self.route.clear();
            line.target.map(&io, who, &mut self.route);
            if self.route.requeue {
                self.unmap(lines);
                return None;
            }
            if let Some(s) = self.route.fail {
                if status.is_ok() {
                    status = s;
                }
            } else if self.route.zero {
                zero(io_off, n);
            } else {
                for s in &self.route.sends {
                    self.plan.push(Plan {
                        line: i as u32,
                        leg: s.leg,
                        leg_offset: s.offset_bytes,
                        io_offset: io_off,
                        io,
                        delay_ns: s.delay_ns,
                    });
                }
            }
            off += n;
            io_off += n;
            if off >= line.end {
                i += 1;
            }
        }
        Some(status)
    }

    /// Plan a flush of the device: a child to each leg in `legs`, unless a
    /// target with a say in flushes (`flush_lines`) fails it; a target may
    /// hold back its child to a leg (`delay`). Returns the flush's status.
    pub(crate) fn map_flush(
        &mut self,
        lines: &[Line],
        flush_lines: &[u32],
        flags: BioFlags,
        who: u16,
        legs: impl Iterator<Item = LegId>,
    ) -> Status {
        self.plan.clear();
        self.route.clear();
        for &l in flush_lines {
            lines[l as usize].target.map_flush(who, &mut self.route);
        }
        if let Some(s) = self.route.fail {
            return s;
        }
        for leg in legs {
            let delay_ns = self
                .route
                .sends
                .iter()
                .filter(|s| s.leg == leg)
                .map(|s| s.delay_ns)
                .max()
                .unwrap_or(0);
            self.plan.push(Plan {
                line: 0,
                leg,
                leg_offset: 0,
                io_offset: 0,
                io: Io {
                    op: Op::Flush,
                    flags,
                    offset_bytes: 0,
                    len_bytes: 0,
                },
                delay_ns,
            });
        }
        Status::Ok
    }

    /// Drop the children planned so far, telling their targets.
    #[cold]
    fn unmap(&mut self, lines: &[Line]) {
        for p in self.plan.drain(..) {
            lines[p.line as usize].target.unmap(&p.io, p.leg);
        }
    }
}

/// What the target says of a child (of `line`, sent to `leg`) that ended
/// with `status`. A failed flush is asked of every target on its leg (a
/// mirror absorbs the flush error of a leg it drops).
#[inline]
pub(crate) fn end_action(
    lines: &[Line],
    line: u32,
    leg: LegId,
    io: &Io,
    status: Status,
) -> EndAction {
    if io.op != Op::Flush {
        return lines[line as usize].target.end_io(io, leg, status);
    }
    if status.is_ok() {
        return EndAction::Done(status);
    }
    let mut s = Status::Ok;
    let mut asked = false;
    for l in lines {
        if l.target.legs().contains(&leg) {
            asked = true;
            let t = l.target.end_flush(leg, status);
            if !t.is_ok() {
                s = t;
            }
        }
    }
    EndAction::Done(if asked { s } else { status })
}

/// The first of two statuses that is an error.
#[inline]
pub(crate) fn fold(into: &mut Status, status: Status) {
    if !status.is_ok() && into.is_ok() {
        *into = status;
    }
}
