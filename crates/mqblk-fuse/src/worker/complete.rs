//! Completions reaped from the context and answered, in the order the
//! device finishes them; and the drain at the end.

use std::time::Duration;

use super::batch::Body;
use super::state::{Pending, Slot, Worker};

impl Worker {
    /// Poll the context and answer what completed; how many.
    pub(super) fn reap(&mut self) -> usize {
        if self.in_flight == 0 {
            return 0;
        }
        let Worker { ctx, done, .. } = self;
        ctx.poll(|c| done.push((c.private() as u32, c.status())));
        self.answer_done()
    }

    /// Wait (10 ms at most) for a completion and answer what completed.
    pub(super) fn reap_wait(&mut self) -> usize {
        let Worker { ctx, done, .. } = self;
        ctx.poll_wait_for(1, Duration::from_millis(10), |c| {
            done.push((c.private() as u32, c.status()))
        });
        self.answer_done()
    }

    pub(super) fn answer_done(&mut self) -> usize {
        let mut done = std::mem::take(&mut self.done);
        let n = done.len();
        for &(slot, status) in &done {
            let Some(s) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            let Slot::InFlight { unique, pending } = std::mem::replace(s, Slot::Free) else {
                continue;
            };
            self.free.push(slot);
            self.in_flight -= 1;
            if let Pending::Write { .. } = pending {
                self.shared.end_aligned_write(self.id);
            }
            if !status.is_ok() {
                self.reply_err(unique, status.errno());
                continue;
            }
            match pending {
                Pending::Read { len } => self.reply_data(slot, unique, Body::Data(len)),
                Pending::Write { len } => self.reply_data(slot, unique, Body::Written(len)),
                Pending::Done => self.reply_err(unique, 0),
            }
        }
        // Before any slot freed above is used again.
        self.flush_replies();
        done.clear();
        self.done = done;
        n
    }

    /// Wait for the requests in flight, up to `max`; how many are left.
    pub(super) fn drain(&mut self, max: Duration) -> u32 {
        let deadline = std::time::Instant::now() + max;
        while self.in_flight > 0 && std::time::Instant::now() < deadline {
            self.reap_wait();
        }
        self.in_flight
    }
}
