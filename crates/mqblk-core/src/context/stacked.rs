//! The face a stacked driver submits its children through (Linux's
//! `submit_bio_noacct` with `trace_block_bio_remap`): a child bio that
//! names the sector of the stacked device it came from, so a traced lower
//! device shows the remap; and the interrupt lines it hands up
//! ([`Context::forward_irq_lines`]), so a completion fd on top holds the
//! legs' leaf fds directly.

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

    /// [`Context::submit_remapped`] of a bio built in place, as
    /// [`Context::submit_with`] builds it: `fill` sets up a blank bio in a
    /// free slot (a stacked driver's clone,
    /// [`crate::bio_based::BioRef::clone_range_into`]), so the clone is
    /// never moved. When every slot holds a completion the caller has not
    /// polled, `fill` comes back unused.
    #[inline]
    pub fn submit_remapped_with<F: FnOnce(&mut Bio)>(
        &mut self,
        fill: F,
        from: crate::blktrace::DevNum,
        from_sector: u64,
    ) -> std::result::Result<(), F> {
        let gate = self.dev.gate.load(std::sync::atomic::Ordering::Relaxed);
        let noted = self.st.on(state::feat::TRACE) || gate != self.st.gate_seen;
        if noted {
            self.st.remap_from = Some((from, from_sector));
        }
        let r = self.st.submit_with(&self.dev, fill);
        if noted {
            self.st.remap_from = None;
        }
        if r.is_ok() {
            self.st.kick_fd(&self.dev);
        }
        r
    }

    /// Put the fds that make this context's completion fd readable (its
    /// eventfd, its throttle timer, and every interrupt line of its
    /// hardware queue, as they are now and as they change) into `up`: the
    /// lines of a stacked driver's hardware queue, from
    /// [`crate::driver::HwQueueSetup::irq_lines`]. A context on top of the
    /// stack then watches every leaf in one epoll set, however deep the
    /// stack, instead of an epoll set per level, which the kernel refuses
    /// past four (ELOOP). The fds leave `up` when this context is dropped.
    /// Control plane.
    pub fn forward_irq_lines(&mut self, up: &crate::driver::IrqLines) -> crate::Result<()> {
        self.st
            .forward_irq_lines(&self.dev, up)
            .map_err(|e| crate::Error::Setup {
                device: self.dev.info.name.clone(),
                reason: format!("cannot make the fds of its interrupt lines: {e}"),
            })
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

impl crate::bio_based::sealed::Sealed for Context {}

impl crate::bio_based::Lower for Context {
    unsafe fn route_bio(
        &mut self,
        mut node: std::ptr::NonNull<crate::bioset::BioNode>,
        up: u32,
        up_slots: usize,
        offset_bytes: u64,
        above: crate::blktrace::DevNum,
    ) -> bool {
        // SAFETY: the caller's promise, passed on.
        if unsafe {
            self.st
                .take_routed_node::<false>(&self.dev, node, offset_bytes, up_slots)
        } {
            return true;
        }
        // SAFETY: the caller's promise: the slot is ours to use until it
        // goes back up, and nothing else touches it (the node path above
        // left it untouched, and holds no reference into it).
        let bio = unsafe { &mut node.as_mut().bio };
        self.st
            .take_routed_in(&self.dev, bio, up, offset_bytes, above)
    }

    #[inline]
    fn take_up(&mut self, up: &mut crate::bio_based::RoutedUp<'_>) {
        self.st.give_routed_up(up);
    }

    unsafe fn route_clone(
        &mut self,
        node: std::ptr::NonNull<crate::bioset::BioNode>,
        offset_bytes: u64,
        slots: usize,
    ) -> bool {
        // SAFETY: the caller's promise, passed on (a clone slot is lent as
        // a slot above is).
        unsafe {
            self.st
                .take_routed_node::<true>(&self.dev, node, offset_bytes, slots)
        }
    }

    #[inline]
    fn take_clones(
        &mut self,
        out: &mut Vec<(
            std::ptr::NonNull<crate::bioset::BioNode>,
            crate::error::Status,
        )>,
    ) {
        if !self.st.clone_ends.is_empty() {
            debug_assert!(out.len() + self.st.clone_ends.len() <= out.capacity());
            out.append(&mut self.st.clone_ends);
        }
    }
}
