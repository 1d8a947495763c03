//! The read-modify-write exclusion: an unaligned write (or a fallocate)
//! reads whole blocks, patches them and writes them back; an aligned
//! write to the same block landing between its read and its write would
//! be lost (the write-back restores the old bytes). So the two exclude
//! each other, as a reader-writer lock whose readers are the aligned
//! writes, without a lock on their path:
//!
//! - an aligned write counts itself in its thread's own counter, then
//!   looks at `rmw_active` (both sequentially consistent: a write that
//!   missed the flag is seen in the count, Dekker's argument); if an RMW
//!   holds the device, it uncounts itself and is parked in its slot,
//!   submitted once the RMW ends (the thread keeps reaping meanwhile);
//! - an RMW first waits for its own thread's aligned writes (it will block,
//!   and nobody else polls its context), then takes the one RMW mutex,
//!   raises `rmw_active`, and waits until no thread has an aligned write
//!   in flight; new ones park, so the counts only fall. Its guard lowers
//!   the flag.
//!
//! RMWs are rare (bytes off the device's logical blocks), and every
//! aligned write waits for one in progress, not only an overlapping one:
//! a per-range table would put a shared write on every request's path.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use super::state::{Parked, Shared, Worker};

/// How long an RMW waits for the aligned writes in flight (its own, then
/// every thread's) before it fails with EIO: a device that does not
/// complete them.
pub(crate) const RMW_WAIT: Duration = Duration::from_secs(10);

/// How long a thread with parked writes naps before it looks again.
pub(super) const PARKED_NAP: Duration = Duration::from_micros(50);

/// The device held for one read-modify-write; dropped, aligned writes go
/// on.
pub(super) struct Exclusive<'a> {
    shared: &'a Shared,
    _one: MutexGuard<'a, ()>,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.shared.rmw_active.store(false, Ordering::SeqCst);
    }
}

impl Worker {
    /// Submit an aligned write, or park it while an RMW holds the device.
    pub(super) fn aligned_write(&mut self, slot: u32, unique: u64, offset: u64, len: u32) {
        if !self.parked.is_empty() || !self.shared.start_aligned_write(self.id) {
            // Behind the parked ones: writes of one thread keep their
            // order.
            debug_assert!(self.parked.len() < self.slots.len());
            let claimed = self.free.pop();
            debug_assert_eq!(claimed, Some(slot));
            self.parked.push(Parked {
                slot,
                unique,
                offset,
                len,
            });
            return;
        }
        self.submit_rw(slot, unique, mqblk_core::Op::Write, offset, len);
    }

    /// Submit the parked writes if no RMW holds the device any more; how
    /// many.
    pub(super) fn unpark(&mut self) -> usize {
        let mut n = 0;
        while let Some(&p) = self.parked.first() {
            if !self.shared.start_aligned_write(self.id) {
                break;
            }
            self.parked.remove(0);
            // Back on top of the free list, where `submit_slot` takes it.
            self.free.push(p.slot);
            self.submit_rw(p.slot, p.unique, mqblk_core::Op::Write, p.offset, p.len);
            n += 1;
        }
        n
    }

    /// Hold the device for one read-modify-write: every aligned write in
    /// flight finished, new ones parked until the guard drops. EIO if
    /// they do not finish within [`RMW_WAIT`].
    pub(super) fn exclusive<'a>(&mut self, shared: &'a Shared) -> Result<Exclusive<'a>, i32> {
        let deadline = Instant::now() + RMW_WAIT;
        // Our own first: once blocked on the mutex, nobody polls our
        // context.
        while shared.writes_in_flight[self.id].load(Ordering::Acquire) > 0 {
            if Instant::now() >= deadline {
                return Err(self.rmw_timed_out("its own"));
            }
            self.reap_wait();
        }
        let one = shared.rmw.lock().unwrap_or_else(|e| e.into_inner());
        shared.rmw_active.store(true, Ordering::SeqCst);
        let held = Exclusive { shared, _one: one };
        let deadline = Instant::now() + RMW_WAIT;
        while shared
            .writes_in_flight
            .iter()
            .any(|c| c.load(Ordering::SeqCst) > 0)
        {
            if Instant::now() >= deadline {
                drop(held);
                return Err(self.rmw_timed_out("other threads'"));
            }
            std::thread::sleep(PARKED_NAP);
        }
        Ok(held)
    }

    fn rmw_timed_out(&self, whose: &str) -> i32 {
        eprintln!(
            "mqblk serve: FUSE thread {}: device {}: {whose} aligned writes did not complete \
             within {RMW_WAIT:?}; a read-modify-write fails with EIO",
            self.id,
            self.shared.dev.name()
        );
        libc::EIO
    }
}
