//! Creating a bio-based device (see [`crate::bio_based`]): the control
//! plane's half of it, apart from the request queue's.

use std::sync::Arc;

use super::{Device, DeviceConfig};
use crate::error::Result;

impl Device {
    /// Create a bio-based device (see [`crate::bio_based`]): its bios go
    /// to `driver`'s `submit_bio` in the submitting context, once checked
    /// against its limits, admitted and counted. The configuration's queue
    /// options (depth, elevator, plug size) have nothing to act on; its
    /// name, capacity, timeout, throttle and trace apply.
    pub fn new_bio_based<B: crate::bio_based::BioDriver>(
        driver: B,
        cfg: DeviceConfig,
    ) -> Result<Device> {
        let driver = Arc::new(driver);
        let lines = driver.has_irq_lines();
        let opener: Box<dyn crate::bio_based::BioOpener> = Box::new(driver.clone());
        Self::build(
            crate::bio_based::NoRequests { driver },
            cfg,
            Some((opener, lines)),
        )
    }

    /// True if the device is bio-based (see [`crate::bio_based`]): its
    /// bios go to its driver in the submitting context, with no request
    /// queue of its own in the path. A remapped view says what the device
    /// under it is.
    pub fn is_bio_based(&self) -> bool {
        self.inner.bio.is_some()
    }
}
