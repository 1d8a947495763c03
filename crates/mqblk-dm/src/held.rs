//! Children held back in time (the `delay` target's, and a flush's to a
//! delayed leg), in order of when each is due, with the timer that wakes a
//! queue sleeping on its interrupt lines when the first is due.

use std::collections::VecDeque;

use mqblk_core::driver::{Error, IrqLines};
use mqblk_core::timer::IrqTimer;
use mqblk_core::Bio;

/// The held children of one queue: `(due_ns, child slot, bio)`.
#[derive(Default)]
pub(crate) struct Held {
    list: VecDeque<(u64, u32, Bio)>,
    /// Among the queue's interrupt lines, when a leg has some.
    timer: Option<IrqTimer>,
    /// The lines the timer is in, which it leaves when the queue goes.
    lines: Option<IrqLines>,
}

impl Held {
    /// A list whose timer, if `lines` are given, is one of them. Control
    /// plane.
    pub(crate) fn new(device: &str, lines: Option<&IrqLines>) -> Result<Held, Error> {
        let Some(lines) = lines else {
            return Ok(Held::default());
        };
        let t = IrqTimer::new().map_err(|e| Error::Setup {
            device: device.into(),
            reason: format!("cannot make the delay timer: {e}"),
        })?;
        lines.add(t.raw());
        Ok(Held {
            list: VecDeque::new(),
            timer: Some(t),
            lines: Some(lines.clone()),
        })
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Hold `bio` (child `slot`) until `due_ns`. Children of different
    /// delays (a `delay` line's reads and writes) interleave: the list
    /// stays sorted.
    pub(crate) fn hold(&mut self, due_ns: u64, slot: u32, bio: Bio) {
        let i = if self.list.back().is_none_or(|d| d.0 <= due_ns) {
            self.list.len()
        } else {
            self.list.partition_point(|d| d.0 <= due_ns)
        };
        self.list.insert(i, (due_ns, slot, bio));
        if i == 0 {
            if let Some(t) = &mut self.timer {
                t.set(due_ns);
            }
        }
    }

    /// The first child due by `now_ns`, if any; once none is left due, the
    /// timer is set for the next.
    pub(crate) fn take_due(&mut self, now_ns: u64) -> Option<(u32, Bio)> {
        if self.list.front().is_some_and(|d| d.0 <= now_ns) {
            let (_, slot, bio) = self.list.pop_front().expect("checked");
            return Some((slot, bio));
        }
        if let Some(t) = &mut self.timer {
            t.set(self.list.front().map_or(0, |d| d.0));
        }
        None
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let (Some(t), Some(lines)) = (&self.timer, &self.lines) {
            lines.remove(t.raw());
        }
    }
}
