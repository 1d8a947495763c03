//! The end of a run, after its report: the job threads finish draining,
//! then the devices close, within a bound when the run ended badly.
//!
//! A job stopped by a signal or an error hands over its figures first and
//! drains after, so the report never waits for a device that does not
//! answer. Its thread holds its bios (the memory the device may still
//! write) until they come back; nothing of them is freed while the process
//! lives. When the bound passes, the caller exits the process instead of
//! waiting: that returns the memory safely, whatever the backend holds.
//! A device that has not closed because the job's own `io.max` limits
//! still hold its I/O is said to be waiting on them, not blamed.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use mqblk::Device;

/// The job threads and devices of a run, still running and open.
#[derive(Default)]
pub struct Teardown {
    /// Every job thread of the run.
    pub(super) handles: Vec<JoinHandle<()>>,
    devices: Vec<Device>,
    /// Per job: its device's name, and the bios the throttle held for it
    /// when it last looked (at its stop, and while it drains).
    throttled: Vec<(String, Arc<AtomicU32>)>,
}

/// A device that had not closed when the bound passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unclosed {
    /// Its name.
    pub device: String,
    /// Bios its jobs' throttle still held (0: the device holds them).
    pub throttled: u32,
    /// Its `io.max` limits (`riops=20`), empty if it has none.
    pub limits: String,
}

impl std::fmt::Display for Unclosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.throttled > 0 {
            let limits = if self.limits.is_empty() {
                "its group's limits".to_string()
            } else {
                self.limits.clone()
            };
            write!(
                f,
                "{} ({} I/Os still held by the io.max throttle, {limits}: waiting on the \
                 limit, not on the device)",
                self.device, self.throttled
            )
        } else {
            write!(f, "{} (its backend does not answer)", self.device)
        }
    }
}

/// A device's `io.max` limits as its spec sets them (`riops=20,wbps=1048576`).
fn limits_text(dev: &Device) -> String {
    let l = dev.io_max().limits();
    [
        ("riops", l.riops),
        ("wiops", l.wiops),
        ("rbps", l.rbps),
        ("wbps", l.wbps),
    ]
    .iter()
    .filter(|(_, v)| *v != 0)
    .map(|(k, v)| format!("{k}={v}"))
    .collect::<Vec<_>>()
    .join(",")
}

impl Teardown {
    /// Keep `dev` open until [`Teardown::close`].
    pub(super) fn keep(&mut self, dev: &Device) {
        if !self.devices.iter().any(|d| d.name() == dev.name()) {
            self.devices.push(dev.clone());
        }
    }

    /// Watch a job's count of bios held by the throttle, on `device`.
    pub(super) fn watch_throttled(&mut self, device: &str, held: Arc<AtomicU32>) {
        self.throttled.push((device.to_string(), held));
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
    pub fn close(self, bound: Option<Duration>) -> Vec<Unclosed> {
        let names: Vec<String> = self.devices.iter().map(|d| d.name().to_string()).collect();
        let limits: Vec<String> = self.devices.iter().map(limits_text).collect();
        let throttled = self.throttled.clone();
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
        let unclosed = |closed: &[String]| -> Vec<Unclosed> {
            names
                .iter()
                .zip(&limits)
                .filter(|(n, _)| !closed.contains(n))
                .map(|(n, l)| Unclosed {
                    device: n.clone(),
                    throttled: throttled
                        .iter()
                        .filter(|(d, _)| d == n)
                        .map(|(_, h)| h.load(Relaxed))
                        .sum(),
                    limits: l.clone(),
                })
                .collect()
        };
        if spawned.is_err() {
            return unclosed(&[]);
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
        unclosed(&closed)
    }
}
