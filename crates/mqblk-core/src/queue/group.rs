//! A device's groups (Linux's blkcg on a disk) and its own `io.max`: the
//! control plane's calls, on [`Device`].

use std::sync::Arc;

use super::Device;
use crate::error::Result;
use crate::throttle::IoMax;

impl Device {
    /// Create a group (see [`crate::blkcg`]). Its name must be new, 1 to
    /// 64 characters of letters, digits, `-`, `_` and `.`.
    pub fn create_group(
        &self,
        name: &str,
        cfg: crate::blkcg::GroupConfig,
    ) -> Result<Arc<crate::blkcg::Group>> {
        self.inner.groups.create(&self.inner.info.name, name, cfg)
    }

    /// The group called `name`.
    pub fn group(&self, name: &str) -> Result<Arc<crate::blkcg::Group>> {
        self.inner.groups.find(&self.inner.info.name, name)
    }

    /// Every group's name, the default group first.
    pub fn group_names(&self) -> Vec<String> {
        self.inner.groups.names()
    }

    /// Remove a group that no context is in. The default group stays.
    pub fn remove_group(&self, name: &str) -> Result<()> {
        self.inner.groups.remove(&self.inner.info.name, name)
    }

    /// The device's `io.max` limits (none unless set): change them with
    /// [`IoMax::set_limits`] while I/O runs.
    pub fn io_max(&self) -> &Arc<IoMax> {
        &self.inner.io_max
    }
}
