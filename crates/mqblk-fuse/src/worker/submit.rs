//! A request's bio, built in place in the context's bio set over the
//! slot's buffer.

use std::time::Duration;

use mqblk_core::{Bio, IoBuf, Op as BioOp};

use super::state::{Pending, Slot, Worker};

impl Worker {
    /// One bio over the slot's data area.
    pub(super) fn submit_rw(&mut self, slot: u32, unique: u64, op: BioOp, offset: u64, len: u32) {
        let data = self.data_ptr(slot);
        let pending = if op == BioOp::Read {
            Pending::Read { len }
        } else {
            Pending::Write { len }
        };
        self.submit_slot(slot, unique, pending, |bio| {
            bio.set_op(op);
            bio.set_offset_bytes(offset);
            // SAFETY: the slot's data area holds at least `len` bytes
            // (len <= max_write) and belongs to this request until its
            // completion is reaped: the slot is in flight until then, and
            // a slot's buffer is freed only when the worker ends, after
            // the drain (or never, if the drain gave up).
            let buf = unsafe { IoBuf::from_raw(data, len as usize) };
            bio.push_segment(buf, 0, len);
        });
    }

    /// Submit the bio `fill` makes for the request in `slot`.
    pub(super) fn submit_slot(
        &mut self,
        slot: u32,
        unique: u64,
        pending: Pending,
        fill: impl Fn(&mut Bio),
    ) {
        let popped = self.free.pop();
        debug_assert_eq!(popped, Some(slot));
        debug_assert!(matches!(self.slots[slot as usize], Slot::Free));
        self.slots[slot as usize] = Slot::InFlight { unique, pending };
        self.in_flight += 1;
        let filled = |bio: &mut Bio| {
            fill(bio);
            bio.private = u64::from(slot);
        };
        let Err(e) = self.ctx.submit_with(filled) else {
            return;
        };
        let mut bio = e.into_bio();
        // Every bio slot of the context holds a completion nobody polled:
        // reap them, then submit the same bio again (bounded: each round
        // answers at least one, and there are at most `depth` of them).
        loop {
            let Worker { ctx, done, .. } = self;
            let n = ctx.poll(|c| done.push((c.private() as u32, c.status())));
            if n == 0 {
                ctx.poll_wait_for(1, Duration::from_millis(10), |c| {
                    done.push((c.private() as u32, c.status()))
                });
            }
            self.answer_done();
            match self.ctx.submit(bio) {
                Ok(()) => return,
                Err(e) => bio = e.into_bio(),
            }
        }
    }
}
