//! The end of a run, after its report: the job threads finish draining,
//! then the devices close, within a bound when the run ended badly.
//!
//! A job stopped by a signal or an error hands over its figures first and
//! drains after, so the report never waits for a device that does not
//! answer. Its thread holds its bios (the memory the device may still
//! write) until they come back; nothing of them is freed while the process
//! lives. When the bound passes, the caller exits the process instead of
//! waiting: that returns the memory safely, whatever the backend holds.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use mqblk::Device;

/// The job threads and devices of a run, still running and open.
#[derive(Default)]
pub struct Teardown {
    /// Every job thread of the run.
    pub(super) handles: Vec<JoinHandle<()>>,
    devices: Vec<Device>,
}

impl Teardown {
    /// Keep `dev` open until [`Teardown::close`].
    pub(super) fn keep(&mut self, dev: &Device) {
        if !self.devices.iter().any(|d| d.name() == dev.name()) {
            self.devices.push(dev.clone());
        }
    }

    /// Wait for every job thread (a stonewall group's end, on a healthy
    /// run: they are done already).
    pub(super) fn join_jobs(&mut self) {
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }

    /// Let the job threads end, then close the devices. `bound`: at most
    /// this long, or `None` for as long as it takes. Returns the names of
    /// the devices that had not closed when the bound passed (empty when
    /// everything ended): the caller then exits without waiting for them.
    pub fn close(self, bound: Option<Duration>) -> Vec<String> {
        let names: Vec<String> = self.devices.iter().map(|d| d.name().to_string()).collect();
        let Some(bound) = bound else {
            let mut t = self;
            t.join_jobs();
            drop(t.devices);
            return Vec::new();
        };
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("teardown".into())
            .spawn(move || {
                let mut t = self;
                t.join_jobs();
                for d in t.devices.drain(..) {
                    let name = d.name().to_string();
                    drop(d);
                    let _ = tx.send(name);
                }
            });
        if spawned.is_err() {
            return names;
        }
        let deadline = std::time::Instant::now() + bound;
        let mut closed = Vec::new();
        while closed.len() < names.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(name) => closed.push(name),
                Err(_) => break,
            }
        }
        names.into_iter().filter(|n| !closed.contains(n)).collect()
    }
}
