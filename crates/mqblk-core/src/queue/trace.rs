//! Tracing a device (Linux `blk_trace_setup` / `blk_trace_remove` behind
//! `BLKTRACESETUP`): the control-plane calls that start and stop a
//! blktrace session; the recorder itself is `crate::blktrace`.

use super::Device;
use crate::error::{Error, Result};

impl Device {
    /// The device's number in blktrace records (Linux `disk_devt`): a
    /// view's own, which the remaps of its bios name.
    pub fn dev_number(&self) -> crate::blktrace::DevNum {
        match &self.view {
            None => self.inner.devnum,
            Some(v) => v.devnum,
        }
    }

    /// Start writing blktrace files of every I/O into `dir` (made if
    /// missing), as `blktrace -d DEV -D DIR` does: one file per context
    /// that does I/O from now on, `NAME.blktrace.N`, read with
    /// `blkparse -D DIR -i NAME` and `btt`. A view (a partition) is traced
    /// with its whole device, whose files name it: its bios show as A
    /// events from the view's number. Files of an earlier trace of this
    /// device in `dir` are replaced. Contexts start recording at their
    /// next bio; with tracing off the hot path pays nothing. Control plane.
    pub fn start_trace(&self, dir: impl AsRef<std::path::Path>) -> Result<()> {
        let inner = &self.inner;
        let dir = dir.as_ref();
        let mut ctl = inner.ctl();
        if let Some(t) = &ctl.trace {
            return Err(Error::Setup {
                device: inner.info.name.clone(),
                reason: format!(
                    "already traced into {}: stop that trace first",
                    t.dir().display()
                ),
            });
        }
        let t = inner.trace_into(dir)?;
        ctl.trace = Some(t);
        drop(ctl);
        self.stamp_completions(true);
        self.bump_gate();
        Ok(())
    }

    /// Stop the trace [`Device::start_trace`] started: every context's
    /// records so far are written out and the files closed before this
    /// returns (what a context records before it next submits is
    /// dropped). Control plane.
    pub fn stop_trace(&self) -> Result<crate::blktrace::TraceSummary> {
        let t = self.ctl().trace.take().ok_or_else(|| Error::Setup {
            device: self.inner.info.name.clone(),
            reason: "is not being traced".into(),
        })?;
        self.stamp_completions(false);
        self.bump_gate();
        Ok(t.stop())
    }

    /// Where the device is being traced to, if it is.
    pub fn trace_dir(&self) -> Option<std::path::PathBuf> {
        self.ctl().trace.as_ref().map(|t| t.dir().to_path_buf())
    }
}
