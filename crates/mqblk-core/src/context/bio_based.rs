//! The bio-based stage (Linux `__submit_bio` calling a disk's
//! `fops->submit_bio`): a bio checked, admitted and sequenced goes to the
//! device's bio-based driver in the submitting context, instead of the
//! data stage. No request, tag or software queue of this device is used:
//! the driver sends clones to lower devices, whose own pipelines make the
//! requests.
//!
//! Below submission, which sends bios here; above the end, where the
//! bios the driver ends are ended.

use super::state::{feat, CtxState};
use crate::bio_based::{BioEnds, BioRef};
use crate::queue::DeviceInner;
use crate::stats::bump;

impl CtxState {
    /// Hand bio `idx` to the bio-based driver. It stays in its slot until
    /// the driver ends it.
    #[inline]
    pub(super) fn submit_bio_based(&mut self, dev: &DeviceInner, idx: u32) {
        self.start_bio_based(dev, idx);
        self.hand_bio_based(dev, idx);
    }

    /// Count bio `idx` in flight, from now.
    #[inline]
    fn start_bio_based(&mut self, dev: &DeviceInner, idx: u32) {
        if self.on(feat::IOSTATS) {
            let now = self.batch_start(dev);
            self.bio_start[idx as usize] = now;
            let write = self.bioset.bio(idx).op().is_write();
            bump(&self.stats.in_flight[write as usize], 1);
        }
        self.in_flight += 1;
        self.shared
            .in_flight
            .store(self.in_flight, std::sync::atomic::Ordering::Relaxed);
    }

    /// Hand bio `idx`, in flight, to the driver.
    #[inline]
    fn hand_bio_based(&mut self, dev: &DeviceInner, idx: u32) {
        let plug = self.on(feat::PLUG);
        let CtxState {
            bio_q,
            bioset,
            bio_ended,
            bio_requeued,
            ..
        } = self;
        let q = bio_q.as_mut().expect("a bio-based context has its queue");
        let bio = bioset
            .node_mut(idx)
            .bio
            .as_mut()
            .expect("a submitted slot holds its bio");
        q.submit_bio(
            BioRef::new(bio, idx),
            &mut BioEnds::new(bio_ended, bio_requeued),
        );
        if plug {
            self.bio_plugged = true;
        } else {
            q.unplug();
            self.batch_ns = 0;
        }
        if !self.bio_ended.is_empty() {
            self.end_bio_based(dev);
        }
    }

    /// Hand the bios the driver requeued to it again (from a poll or a
    /// wait, never from its own call).
    pub(super) fn requeue_bio_based(&mut self, dev: &DeviceInner) {
        // Those requeued anew while these are handed wait for the next
        // pass (the list holds each slot once, so it never grows).
        let n = self.bio_requeued.len();
        for i in 0..n {
            let idx = self.bio_requeued[i];
            self.hand_bio_based(dev, idx);
        }
        self.bio_requeued.drain(..n);
        // Handed from a poll or a wait: nobody may be left to unplug them.
        self.flush_plug(dev);
    }
}
