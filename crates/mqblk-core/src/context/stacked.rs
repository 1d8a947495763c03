//! The face a stacked driver submits its children through (Linux's
//! `submit_bio_noacct` with `trace_block_bio_remap`): a child bio that
//! names the sector of the stacked device it came from, so a traced lower
//! device shows the remap.

use super::{state, Bio, Context, SubmitError};

impl Context {
    /// [`Context::submit`] for a stacked driver: `bio` is a child of
    /// sector `from_sector` of the device numbered `from` (the stacked
    /// device's own, from [`crate::driver::HwQueueSetup::devnum`]). When
    /// this context's device is traced, the trace shows the remap as an A
    /// event just before the child's Q (Linux `trace_block_bio_remap`).
    // Back-pressure hands the bio back by value, as `submit` does.
    #[inline]
    pub fn submit_remapped(
        &mut self,
        bio: Bio,
        from: crate::blktrace::DevNum,
        from_sector: u64,
    ) -> std::result::Result<(), SubmitError> {
        // Not traced, and the gate has not moved (a trace started since
        // would move it, and the submission's gate pass would see it).
        let gate = self.dev.gate.load(std::sync::atomic::Ordering::Relaxed);
        if !self.st.on(state::feat::TRACE) && gate == self.st.gate_seen {
            return self.submit(bio);
        }
        self.submit_noted(bio, from, from_sector)
    }

    /// `submit_remapped` when the trace may want the remap.
    #[cold]
    #[inline(never)]
    fn submit_noted(
        &mut self,
        bio: Bio,
        from: crate::blktrace::DevNum,
        from_sector: u64,
    ) -> std::result::Result<(), SubmitError> {
        self.st.remap_from = Some((from, from_sector));
        let r = self.submit(bio);
        self.st.remap_from = None;
        r
    }
}
