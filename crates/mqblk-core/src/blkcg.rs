//! Groups (Linux `blk-cgroup`): who shares the device, and on what terms.
//!
//! Every context belongs to one group: the device's `default` group, or a
//! group it names when it is created ([`Device::context_in`]). A group has
//! a weight (1 to 1000, default 100) for proportional schedulers (bfq), an
//! I/O priority class and level, and `io.max` limits that all its contexts
//! share. Groups are created, changed and removed while I/O runs (through
//! [`crate::Device::create_group`] and its neighbours): the settings are
//! atomics that the per-I/O path reads, and the table of groups is control
//! plane only (a context holds its group directly).

use std::sync::atomic::{AtomicU16, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::ioprio::{IoPrio, IoPrioClass};
use crate::throttle::{IoMax, IoMaxLimits, DEFAULT_BURST_MS};

/// The name of the group every context joins unless told otherwise.
pub const DEFAULT_GROUP: &str = "default";

/// The weight a group gets unless told otherwise (Linux `io.weight`).
pub const DEFAULT_WEIGHT: u32 = 100;

/// A group's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupConfig {
    /// Share of the device under a proportional scheduler: 1 to 1000.
    pub weight: u32,
    /// The priority of its contexts' requests.
    pub ioprio: IoPrio,
    /// Its `io.max` limits, shared by all its contexts (0: none).
    pub limits: IoMaxLimits,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            weight: DEFAULT_WEIGHT,
            ioprio: IoPrio::default(),
            limits: IoMaxLimits::default(),
        }
    }
}

/// One group.
#[derive(Debug)]
pub struct Group {
    id: u16,
    name: Box<str>,
    device: Arc<str>,
    weight: AtomicU32,
    /// Class in the high byte, level in the low byte.
    ioprio: AtomicU16,
    io_max: IoMax,
    /// Contexts in the group now.
    pub(crate) members: AtomicU32,
}

fn pack(p: IoPrio) -> u16 {
    (p.class as u16) << 8 | u16::from(p.level)
}

fn unpack(v: u16) -> IoPrio {
    IoPrio {
        class: IoPrioClass::ALL[usize::from(v >> 8).min(2)],
        level: v as u8,
    }
}

impl Group {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its number on this device (0 is the default group).
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Its weight.
    #[inline]
    pub fn weight(&self) -> u32 {
        self.weight.load(Relaxed)
    }

    /// Its I/O priority.
    #[inline]
    pub fn ioprio(&self) -> IoPrio {
        unpack(self.ioprio.load(Relaxed))
    }

    /// Its limits.
    pub fn limits(&self) -> IoMaxLimits {
        self.io_max.limits()
    }

    /// Its token buckets.
    #[inline]
    pub(crate) fn io_max(&self) -> &IoMax {
        &self.io_max
    }

    /// Contexts in the group now.
    pub fn members(&self) -> u32 {
        self.members.load(Relaxed)
    }

    fn error(&self, key: &'static str, reason: impl Into<String>) -> Error {
        Error::Group {
            device: self.device.clone(),
            group: self.name.to_string(),
            key,
            reason: reason.into(),
        }
    }

    /// Change its weight (1 to 1000); the next request carries it.
    pub fn set_weight(&self, weight: u32) -> Result<()> {
        check_weight(weight).map_err(|r| self.error("weight", r))?;
        self.weight.store(weight, Relaxed);
        Ok(())
    }

    /// Change its priority (level 0 to 7).
    pub fn set_ioprio(&self, prio: IoPrio) -> Result<()> {
        if prio.level > 7 {
            return Err(self.error("prio", format!("level {} is not 0 to 7", prio.level)));
        }
        self.ioprio.store(pack(prio), Relaxed);
        Ok(())
    }

    /// Change its limits, under load: the next bio is charged at the new
    /// rates.
    pub fn set_limits(&self, limits: IoMaxLimits) {
        self.io_max.set_limits(limits);
    }

    /// Change how much an idle group may burst: `burst_ms` of its rates
    /// (default 10).
    pub fn set_burst_ms(&self, burst_ms: u64) {
        self.io_max.set_burst_ms(burst_ms);
    }
}

fn check_weight(w: u32) -> std::result::Result<(), String> {
    if (1..=1000).contains(&w) {
        Ok(())
    } else {
        Err(format!("{w} is not 1 to 1000"))
    }
}

/// A context's place in its group: counted while it lasts.
#[derive(Debug)]
pub(crate) struct Membership(pub(crate) Arc<Group>);

impl Membership {
    pub(crate) fn join(g: Arc<Group>) -> Membership {
        g.members.fetch_add(1, Relaxed);
        Membership(g)
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.0.members.fetch_sub(1, Relaxed);
    }
}

/// A device's groups (control plane).
#[derive(Debug)]
pub(crate) struct Groups {
    table: Mutex<Vec<Arc<Group>>>,
    /// The device's count of limited buckets (see `IoMax::attach`).
    qos_active: crate::throttle::QosWatch,
}

impl Groups {
    pub(crate) fn new(device: &Arc<str>, qos_active: crate::throttle::QosWatch) -> Groups {
        let default = Arc::new(Group {
            id: 0,
            name: DEFAULT_GROUP.into(),
            device: device.clone(),
            weight: AtomicU32::new(DEFAULT_WEIGHT),
            ioprio: AtomicU16::new(pack(IoPrio::default())),
            io_max: IoMax::unshared(IoMaxLimits::default(), DEFAULT_BURST_MS),
            members: AtomicU32::new(0),
        });
        default.io_max.attach(&qos_active);
        Groups {
            table: Mutex::new(vec![default]),
            qos_active,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Group>>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn default_group(&self) -> Arc<Group> {
        self.table()[0].clone()
    }
}

fn group_error(
    device: &Arc<str>,
    group: &str,
    key: &'static str,
    reason: impl Into<String>,
) -> Error {
    Error::Group {
        device: device.clone(),
        group: group.to_string(),
        key,
        reason: reason.into(),
    }
}

impl Groups {
    pub(crate) fn create(
        &self,
        device: &Arc<str>,
        name: &str,
        cfg: GroupConfig,
    ) -> Result<Arc<Group>> {
        let ok_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok_name {
            return Err(group_error(
                device,
                name,
                "name",
                "use 1 to 64 letters, digits, '-', '_' or '.'",
            ));
        }
        check_weight(cfg.weight).map_err(|r| group_error(device, name, "weight", r))?;
        if cfg.ioprio.level > 7 {
            return Err(group_error(
                device,
                name,
                "prio",
                format!("level {} is not 0 to 7", cfg.ioprio.level),
            ));
        }
        let mut t = self.table();
        if t.iter().any(|g| &*g.name == name) {
            return Err(group_error(
                device,
                name,
                "name",
                "a group of that name exists",
            ));
        }
        let id = (0..=u16::MAX)
            .find(|id| t.iter().all(|g| g.id != *id))
            .ok_or_else(|| group_error(device, name, "name", "65536 groups exist already"))?;
        let g = Arc::new(Group {
            id,
            name: name.into(),
            device: device.clone(),
            weight: AtomicU32::new(cfg.weight),
            ioprio: AtomicU16::new(pack(cfg.ioprio)),
            io_max: IoMax::unshared(cfg.limits, DEFAULT_BURST_MS),
            members: AtomicU32::new(0),
        });
        g.io_max.attach(&self.qos_active);
        t.push(g.clone());
        Ok(g)
    }

    pub(crate) fn find(&self, device: &Arc<str>, name: &str) -> Result<Arc<Group>> {
        let found = self.table().iter().find(|g| &*g.name == name).cloned();
        found.ok_or_else(|| {
            group_error(
                device,
                name,
                "name",
                format!("no such group; groups: {}", self.names().join(", ")),
            )
        })
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.table().iter().map(|g| g.name.to_string()).collect()
    }

    pub(crate) fn remove(&self, device: &Arc<str>, name: &str) -> Result<()> {
        if name == DEFAULT_GROUP {
            return Err(group_error(
                device,
                name,
                "name",
                "the default group cannot be removed",
            ));
        }
        let mut t = self.table();
        let Some(i) = t.iter().position(|g| &*g.name == name) else {
            return Err(group_error(device, name, "name", "no such group"));
        };
        let n = t[i].members();
        if n > 0 {
            return Err(group_error(
                device,
                name,
                "name",
                format!("{n} contexts are in it; drop them first"),
            ));
        }
        // Its limits stop counting on the device.
        t.remove(i).set_limits(IoMaxLimits::default());
        Ok(())
    }
}
