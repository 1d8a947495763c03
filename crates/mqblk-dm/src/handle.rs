//! A stacked device's control handle (its table, legs and targets, for
//! `mqblk dm status` and run-time changes) and the registry that finds an
//! open one by device name (Linux's lookup of a mapped device by name).

use std::sync::{Arc, Mutex, Weak};

use crate::legs::Legs;
use crate::table::Table;
use crate::target::target_type::Target;

/// A stacked device's control handle: its table, legs and targets, for
/// `mqblk dm status` and run-time changes. Found by device name with
/// [`find`].
pub struct Handle {
    pub(crate) name: String,
    pub(crate) table: Table,
    pub(crate) legs: Arc<Legs>,
    pub(crate) targets: Vec<Arc<dyn Target>>,
}

impl Handle {
    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table it was built from.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Its legs.
    pub fn legs(&self) -> &Arc<Legs> {
        &self.legs
    }

    /// The target of each line, in order.
    pub fn targets(&self) -> &[Arc<dyn Target>] {
        &self.targets
    }

    /// One line per table line, as `dmsetup status` prints:
    /// `START LENGTH TARGET STATUS`.
    pub fn status(&self) -> Vec<String> {
        self.table
            .lines
            .iter()
            .zip(&self.targets)
            .map(|(l, t)| {
                format!("{} {} {} {}", l.start, l.len, l.target, t.status())
                    .trim_end()
                    .to_string()
            })
            .collect()
    }
}

static REGISTRY: Mutex<Vec<(String, Weak<Handle>)>> = Mutex::new(Vec::new());

/// The handle of the stacked device named `name`, while it is open.
pub fn find(name: &str) -> Option<Arc<Handle>> {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    r.retain(|(_, w)| w.strong_count() > 0);
    r.iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, w)| w.upgrade())
}

/// Make `handle` findable by `name` while it lives.
pub(crate) fn register(name: &str, handle: &Arc<Handle>) {
    let mut r = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    r.retain(|(_, w)| w.strong_count() > 0);
    r.push((name.to_string(), Arc::downgrade(handle)));
}
