//! The lower devices of a stacked device (dm's `dm_dev` list).
//!
//! A table names each lower device by its mqblk spec; the same spec twice is
//! the same device, opened once. The set can change at run time (a mirror
//! leg replaced): each change bumps a generation that every hardware queue
//! checks with one relaxed load before it touches its lower contexts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use mqblk_core::{Device, Result};

/// Index of a lower device in its stacked device.
pub type LegId = u16;

/// Opens a lower device from its spec (`mqblk::open`).
pub type Opener<'a> = &'a dyn Fn(&str) -> Result<Device>;

/// The lower devices of one stacked device.
#[derive(Debug, Default)]
pub struct Legs {
    devices: RwLock<Vec<Option<Device>>>,
    specs: RwLock<Vec<String>>,
    generation: AtomicU64,
}

impl Legs {
    /// The lower device `leg`, if it is present.
    pub fn get(&self, leg: LegId) -> Option<Device> {
        self.read().get(leg as usize).cloned().flatten()
    }

    /// Every lower device, by id (`None`: a leg taken out).
    pub fn all(&self) -> Vec<Option<Device>> {
        self.read().clone()
    }

    /// The spec each leg was opened from.
    pub fn specs(&self) -> Vec<String> {
        self.specs.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Number of leg ids handed out.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// True before any leg was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Current generation: changes whenever a leg is added, replaced or
    /// taken out.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Put `dev` (opened from `spec`) in place of leg `leg` (`None` takes
    /// the leg out). Hardware queues pick the change up at their next I/O.
    pub fn replace(&self, leg: LegId, dev: Option<Device>, spec: &str) {
        let mut d = self.devices.write().unwrap_or_else(|e| e.into_inner());
        let mut s = self.specs.write().unwrap_or_else(|e| e.into_inner());
        let i = leg as usize;
        if d.len() <= i {
            d.resize(i + 1, None);
            s.resize(i + 1, String::new());
        }
        d[i] = dev;
        s[i] = spec.to_string();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Add a new device, returning its id.
    pub fn push(&self, dev: Device, spec: &str) -> LegId {
        let id = self.len() as LegId;
        self.replace(id, Some(dev), spec);
        id
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Option<Device>>> {
        self.devices.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// Opens the lower devices a table names, once per distinct spec, while the
/// table is built.
pub struct LegSet<'a> {
    opener: Opener<'a>,
    legs: std::sync::Arc<Legs>,
    pub(crate) claims: crate::extent::Claims,
    /// The stacked device is opened read-only: so is every device below
    /// it (Linux opens a read-only table's devices `FMODE_READ`), and its
    /// targets write nothing of their own (no resync, no log writes).
    read_only: bool,
}

impl<'a> LegSet<'a> {
    pub(crate) fn new(
        opener: Opener<'a>,
        legs: std::sync::Arc<Legs>,
        read_only: bool,
    ) -> LegSet<'a> {
        LegSet {
            opener,
            legs,
            claims: crate::extent::Claims::default(),
            read_only,
        }
    }

    /// True if the stacked device is read-only: its targets must not
    /// write (see the field).
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Open `spec`, read-only if the stacked device is.
    fn open_spec(&self, spec: &str) -> Result<Device> {
        if self.read_only && !mqblk_core::spec::parse(spec).is_ok_and(|s| s.options.contains("ro"))
        {
            (self.opener)(&format!("{spec},ro=1"))
        } else {
            (self.opener)(spec)
        }
    }

    /// The leg for `spec`, opened now unless the table named it before.
    pub fn open(&mut self, spec: &str) -> Result<(LegId, Device)> {
        if let Some(i) = self.legs.specs().iter().position(|s| s == spec) {
            if let Some(d) = self.legs.get(i as LegId) {
                return Ok((i as LegId, d));
            }
        }
        let dev = self.open_spec(spec)?;
        Ok((self.legs.push(dev.clone(), spec), dev))
    }

    /// Open `spec` without making it a leg: a target's metadata device (a
    /// mirror's log), which gets no data I/O, flushes or stacked limits.
    pub fn open_unlisted(&mut self, spec: &str) -> Result<Device> {
        self.open_spec(spec)
    }

    /// A device opened by the caller (not from a spec), as a new leg.
    pub fn add(&mut self, dev: Device) -> LegId {
        let name = dev.name().to_string();
        self.legs.push(dev, &name)
    }

    /// All legs, shared with the stacked device.
    pub fn legs(&self) -> &std::sync::Arc<Legs> {
        &self.legs
    }
}
