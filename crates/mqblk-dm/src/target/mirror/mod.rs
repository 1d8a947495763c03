//! `mirror LOG_TYPE #LOG_ARGS LOG_ARGS... #DEVS (DEV OFFSET)... [#FEATURES
//! FEATURES...]`: RAID 1 over 2 to 4 legs (Linux dm-raid1), with a
//! dirty-region log.
//!
//! - Log types: `core REGION_SIZE [sync|nosync]` (in memory) and
//!   `disk LOGDEV REGION_SIZE [sync|nosync]` (a bitmap on `LOGDEV`, any
//!   mqblk spec). `REGION_SIZE` is in sectors, a power of two. Regions the
//!   log has no record of (a core log; a new disk log) are copied from the
//!   first leg to the others at open, unless `nosync` says the legs are
//!   already the same. The one feature is `handle_errors`, which is always
//!   on.
//! - Reads go to one live leg, round robin per hardware queue; a read that
//!   fails is retried on another leg, and the leg is marked failed.
//! - Writes (and discards, write-zeroes) go to every live leg and complete
//!   when all have; a leg that fails one is marked failed and the write
//!   succeeds if a live leg remains. Flushes reach every leg (the stacked
//!   driver sends them), and a failed leg's flush error is absorbed.
//!   Each failed leg keeps what took it out (the I/O, its error, when),
//!   for [`degraded_legs`] and the reports built on it.
//! - Before the first write to a clean region is sent, the region's bit is
//!   written to a `disk` log (one blocking write and flush, under the log's
//!   lock: the rare path), and only then set in memory: a set bit is a
//!   durable bit, for the write that set it and for every write on another
//!   queue that finds it set. A write to a dirty region costs a bit test
//!   and a count of its children in flight. A cleaner thread clears the
//!   bits of regions idle for a period and writes them out.
//! - Recovery (resync after an unclean stop, or [`replace`]) copies the
//!   regions marked out of sync from a live leg to the legs being rebuilt
//!   in a thread of its own, region by region: a region being copied is
//!   locked (writes to it are requeued until it is done), and writes to
//!   regions not copied yet skip the legs being rebuilt.

#[cfg(test)]
mod crash_model;
mod log;
mod recovery;
mod region;
mod route;
mod state;
mod write;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use mqblk_core::driver::{Op, Status};
use mqblk_core::{Device, Error, Result};

use crate::extent::Use;
use crate::handle::Handle;
use crate::legs::LegId;
use crate::table::TableError;
use crate::target::ctor::Ctor;
use crate::target::target_type::{EndAction, Io, Route, Target};
use log::{Found, Geometry, Log};
use region::{Bits, Pending};

pub use recovery::Progress;
pub use route::MirrorReads;
use route::{region_left, route_read_whole};
use state::{Inner, Leg, Turn, LIVE, REBUILD_SHIFT, RECOVERING, TURNS};
pub use state::{LegFailure, LegState, CLEAN_PERIOD, MAX_LEGS};
pub use write::{MirrorWrites, WriteLegs};

/// Most regions (the region size must grow with the device past this).
pub const MAX_REGIONS: u64 = 1 << 24;

/// A failed leg of a mirror in an open stacked device, as
/// [`degraded_legs`] lists it: which device, which leg, why and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DegradedLeg {
    /// The stacked device whose table holds the mirror.
    pub device: String,
    /// The mirror's line in that table (from 1).
    pub line: usize,
    /// The leg, from 0 in table order.
    pub leg: usize,
    /// The leg's device spec.
    pub spec: String,
    /// The failure that took it out (`None`: taken out to be replaced).
    pub failure: Option<LegFailure>,
}

impl std::fmt::Display for DegradedLeg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (table line {}): mirror leg {} ({}) is out",
            self.device, self.line, self.leg, self.spec
        )?;
        match &self.failure {
            Some(x) => write!(f, ": a {} failed ({})", x.op, x.status),
            None => write!(f, ": being replaced"),
        }
    }
}

/// The mirror target.
pub struct Mirror {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Mirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mirror")
            .field("line", &self.inner.line)
            .field("legs", &self.inner.legs)
            .finish()
    }
}

impl Mirror {
    /// Its routed reads, for the bio-based driver of a one-line table to
    /// route inline.
    pub fn reads(&self) -> MirrorReads {
        MirrorReads {
            inner: self.inner.clone(),
        }
    }

    /// Its plain writes, for the bio-based driver of a one-line table to
    /// map inline.
    pub fn writes(&self) -> MirrorWrites {
        MirrorWrites {
            inner: self.inner.clone(),
        }
    }

    /// Build from the table line's arguments.
    pub fn new(c: &mut Ctor<'_, '_>) -> std::result::Result<Mirror, TableError> {
        let len_bytes = c.line.len << 9;
        let kind = c.arg(0, "log type")?.to_string();
        let nargs = c.num(1, "number of log arguments")? as usize;
        let (min, max) = match kind.as_str() {
            "core" => (1, 2),
            "disk" => (2, 3),
            other => {
                return Err(c.err(
                    0,
                    "log type",
                    format!("`{other}`; expected `core` or `disk`"),
                ))
            }
        };
        if nargs < min || nargs > max {
            return Err(c.err(
                1,
                "number of log arguments",
                format!("{nargs}; a `{kind}` log takes {min} to {max}"),
            ));
        }
        let region_at = if kind == "disk" { 3 } else { 2 };
        let region_sectors = c.num(region_at, "region size")?;
        if !region_sectors.is_power_of_two() || !(8..=1 << 21).contains(&region_sectors) {
            return Err(c.err(
                region_at,
                "region size",
                format!("{region_sectors} sectors; expected a power of two from 8 to 2097152"),
            ));
        }
        let region_bytes = region_sectors << 9;
        let nr_regions = len_bytes.div_ceil(region_bytes);
        if nr_regions > MAX_REGIONS {
            return Err(c.err(
                region_at,
                "region size",
                format!(
                    "{region_sectors} sectors makes {nr_regions} regions, over {MAX_REGIONS}; use a larger region"
                ),
            ));
        }
        let mut assume_sync = false;
        if nargs == max {
            let at = 2 + nargs - 1;
            match c.arg(at, "sync mode")? {
                "sync" => {}
                "nosync" => assume_sync = true,
                other => {
                    return Err(c.err(
                        at,
                        "sync mode",
                        format!("`{other}`; expected `sync` or `nosync`"),
                    ))
                }
            }
        }
        let devs_at = 2 + nargs;
        let ndevs = c.num(devs_at, "number of devices")? as usize;
        if !(2..=MAX_LEGS).contains(&ndevs) {
            return Err(c.err(
                devs_at,
                "number of devices",
                format!("{ndevs}; a mirror has 2 to {MAX_LEGS} legs"),
            ));
        }
        let mut legs: Vec<Leg> = Vec::with_capacity(ndevs);
        for i in 0..ndevs {
            let at = devs_at + 1 + 2 * i;
            let offset = c.num(at + 1, "offset")?;
            let id = c.leg_as(at, offset, c.line.len, &format!("leg {i}"), Use::All)?;
            if let Some(j) = legs.iter().position(|l| l.id == id) {
                return Err(c.err(
                    at,
                    "device",
                    format!("leg {i} is the same device as leg {j}; a mirror's legs must differ"),
                ));
            }
            legs.push(Leg {
                id,
                offset_bytes: offset << 9,
            });
        }
        let feat_at = devs_at + 1 + 2 * ndevs;
        if c.line.args.len() > feat_at {
            let nfeat = c.num(feat_at, "number of features")? as usize;
            for f in 0..nfeat {
                match c.arg(feat_at + 1 + f, "feature")? {
                    "handle_errors" => {}
                    other => {
                        return Err(c.err(
                            feat_at + 1 + f,
                            "feature",
                            format!("`{other}`; the one feature is `handle_errors` (always on)"),
                        ))
                    }
                }
            }
            c.no_more(feat_at + 1 + nfeat)?;
        }
        let g = Geometry {
            region_bytes,
            nr_regions,
            len_bytes,
        };
        // A read-only mirror writes nothing: no log format or marks, no
        // log cleaner, no resync. Regions out of sync stay so (reads come
        // from the first leg, the resync's source) until a read-write open.
        let read_only = c.legs.read_only();
        let (log, found) = if kind == "disk" {
            let spec = c.arg(2, "log device")?.to_string();
            let dev = c
                .legs
                .open_unlisted(&spec)
                .map_err(|e| c.err(2, "log device", format!("`{spec}` does not open: {e}")))?;
            Log::open_disk(dev, &spec, g, read_only).map_err(|e| c.err(2, "log device", e))?
        } else {
            (Log::Core, Found::Fresh)
        };
        let inner = Inner {
            line: c.line.line,
            len_bytes,
            region_shift: region_bytes.trailing_zeros(),
            nr_regions,
            all: c.legs.legs().clone(),
            state: AtomicU32::new((1u32 << ndevs) - 1),
            dirty: Bits::new(nr_regions),
            nosync: Bits::new(nr_regions),
            locked: Bits::new(nr_regions),
            recent: Bits::new(nr_regions),
            pending: Pending::new(nr_regions),
            turns: (0..TURNS).map(|_| Turn::default()).collect(),
            legs,
            log,
            stop: AtomicBool::new(false),
            recovery: Mutex::new(()),
            copied_bytes: AtomicU64::new(0),
            goal_bytes: AtomicU64::new(0),
            done_bytes: AtomicU64::new(0),
            failures: (0..ndevs).map(|_| Mutex::new(None)).collect(),
        };
        // What must be copied: the dirty bits of a log that was not closed
        // cleanly, or everything the log has no record of.
        match found {
            Found::Formatted(words) => {
                for (n, w) in words.into_iter().enumerate() {
                    let w = w & inner.dirty.mask(n);
                    inner.dirty.word(n).store(w, Ordering::Relaxed);
                    inner.nosync.word(n).store(w, Ordering::Relaxed);
                }
            }
            Found::Fresh if !assume_sync => {
                inner.nosync.set_all();
                // Until copied, a crash must copy them again.
                if !read_only {
                    inner
                        .mark_all_dirty()
                        .map_err(|e| c.err(2, "log device", e))?;
                }
            }
            Found::Fresh => {}
        }
        let inner = Arc::new(inner);
        let mut threads = Vec::new();
        if !inner.log.is_core() && !read_only {
            let i = inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("mqblk-mirror-log".into())
                    .spawn(move || i.clean_loop())
                    .map_err(|e| {
                        c.err(
                            2,
                            "log device",
                            format!("cannot start the log cleaner: {e}"),
                        )
                    })?,
            );
        }
        if inner.nosync.count() > 0 {
            // Legs other than the first are rebuilt from it.
            let others = (((1u32 << ndevs) - 1) & !1) << REBUILD_SHIFT;
            inner.state.store(1 | others | RECOVERING, Ordering::SeqCst);
        }
        if inner.nosync.count() > 0 && !read_only {
            let i = inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("mqblk-mirror-resync".into())
                    .spawn(move || i.resync_at_open())
                    .map_err(|e| c.err(0, "log type", format!("cannot start the resync: {e}")))?,
            );
        }
        Ok(Mirror {
            inner,
            threads: Mutex::new(threads),
        })
    }

    /// Each leg's state.
    pub fn leg_states(&self) -> Vec<LegState> {
        self.inner.leg_states()
    }

    /// True while a leg is failed.
    pub fn degraded(&self) -> bool {
        self.inner.leg_states().contains(&LegState::Failed)
    }

    /// Each failed leg: its index (from 0, in table order), its spec, and
    /// the failure that took it out (`None`: taken out to be replaced).
    pub fn failed_legs(&self) -> Vec<(usize, String, Option<LegFailure>)> {
        let m = &self.inner;
        m.leg_states()
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == LegState::Failed)
            .map(|(i, _)| {
                let f = *m.failures[i].lock().unwrap_or_else(|e| e.into_inner());
                (i, m.spec_of(i), f)
            })
            .collect()
    }

    /// Regions in sync on every leg that is not failed, and all regions.
    pub fn regions_in_sync(&self) -> (u64, u64) {
        (
            self.inner.nr_regions - self.inner.nosync.count(),
            self.inner.nr_regions,
        )
    }

    /// Bytes copied by recoveries (resync and replace) since open.
    pub fn resynced_bytes(&self) -> u64 {
        self.inner.copied_bytes.load(Ordering::Relaxed)
    }

    /// The mirror's length in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.inner.len_bytes
    }

    /// True while a recovery (resync or rebuild) runs.
    pub fn recovering(&self) -> bool {
        self.inner.state.load(Ordering::SeqCst) & RECOVERING != 0
    }

    /// Wait up to `max` for a running recovery to end; true if none runs.
    pub fn wait_recovery(&self, max: Duration) -> bool {
        let end = std::time::Instant::now() + max;
        while self.recovering() {
            if std::time::Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

impl Inner {
    fn resync_at_open(self: Arc<Self>) {
        let _running = self.recovery.lock().unwrap_or_else(|e| e.into_inner());
        let regions = self.nosync.count();
        eprintln!(
            "mqblk: mirror (table line {}): resyncing {regions} of {} regions from leg 0",
            self.line, self.nr_regions
        );
        let res = recovery::run(&self, &mut |_| {});
        let state_after = self.finish_recovery();
        match res {
            Ok(p) => eprintln!(
                "mqblk: mirror (table line {}): resync copied {} of {} bytes ({} of {} regions) from leg 0; legs: {}",
                self.line,
                p.bytes_done,
                self.len_bytes,
                regions,
                self.nr_regions,
                state_after
            ),
            Err(e) => eprintln!(
                "mqblk: mirror (table line {}): resync stopped: {e}; legs: {state_after}",
                self.line
            ),
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
        // Closed with nothing in flight: every region copied and written
        // on every leg is clean.
        if !self.inner.log.is_core() {
            if let Err(e) = self.inner.clean(true) {
                eprintln!(
                    "mqblk: mirror (table line {}): closing the log: {e}",
                    self.inner.line
                );
            }
        }
    }
}

impl Target for Mirror {
    fn name(&self) -> &'static str {
        "mirror"
    }

    #[inline]
    fn max_io_len(&self, offset_bytes: u64) -> u64 {
        region_left(&self.inner, offset_bytes)
    }

    fn routes(&self) -> bool {
        true
    }

    /// A write goes to every live leg: mapped and cloned.
    fn routes_writes(&self) -> bool {
        false
    }

    /// A read that stays in one region goes to one live leg whole, as
    /// [`Target::map`] would send it; should it fail there, `end_io`
    /// marks the leg and the bio is mapped again, to another.
    #[inline]
    fn route(&self, op: Op, offset_bytes: u64, len_bytes: u64, hwq: u16) -> Option<(LegId, u64)> {
        route_read_whole(&self.inner, op, offset_bytes, len_bytes, hwq)
    }

    #[inline]
    fn map(&self, io: &Io, hwq: u16, route: &mut Route) {
        match io.op {
            Op::Read => self.inner.map_read(io, hwq, route),
            _ => self.inner.map_write(io, route),
        }
    }

    fn end_io(&self, io: &Io, leg: LegId, status: Status) -> EndAction {
        let m = &self.inner;
        if io.op != Op::Read {
            return EndAction::Done(m.write_child_ended(io.offset_bytes, leg, status));
        }
        if status.is_ok() {
            return EndAction::Done(status);
        }
        let Some(i) = m.index_of(leg) else {
            return EndAction::Done(status);
        };
        m.fail_leg(i, "read", status);
        let live = m.state.load(Ordering::SeqCst) & LIVE & !(1 << i);
        if live == 0 {
            return EndAction::Done(status);
        }
        let l = m.legs[live.trailing_zeros() as usize];
        EndAction::Retry {
            leg: l.id,
            offset_bytes: l.offset_bytes + io.offset_bytes,
        }
    }

    fn unmap(&self, io: &Io, _leg: LegId) {
        if io.op != Op::Read {
            self.inner
                .pending
                .sub(self.inner.region(io.offset_bytes), 1);
        }
    }

    fn end_flush(&self, leg: LegId, status: Status) -> Status {
        self.inner.child_failed(leg, "flush", status)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn legs(&self) -> Vec<LegId> {
        self.inner.legs.iter().map(|l| l.id).collect()
    }

    /// dmsetup's shape: `#DEVS DEV... IN_SYNC/REGIONS 1 HEALTH #LOG_ARGS
    /// LOG...`, then `resync COPIED/LENGTH` (bytes).
    fn status(&self) -> String {
        let m = &self.inner;
        let specs = self.inner.all.specs();
        let devs: Vec<&str> = m
            .legs
            .iter()
            .map(|l| specs.get(l.id as usize).map_or("-", String::as_str))
            .collect();
        let (sync, total) = self.regions_in_sync();
        let log = m.log.describe();
        format!(
            "{} {} {sync}/{total} 1 {} {} {log} resync {}/{}",
            m.legs.len(),
            devs.join(" "),
            m.health(),
            log.split(' ').count(),
            self.resynced_bytes(),
            m.len_bytes
        )
    }
}

/// The failed legs of every mirror in the table of the stacked device
/// `handle`, in table order: the device runs degraded while this is not
/// empty.
pub fn degraded_legs(handle: &Handle) -> Vec<DegradedLeg> {
    let mut out = Vec::new();
    for (l, t) in handle.table().lines.iter().zip(handle.targets()) {
        let Some(m) = t.as_any().and_then(|a| a.downcast_ref::<Mirror>()) else {
            continue;
        };
        for (leg, spec, failure) in m.failed_legs() {
            out.push(DegradedLeg {
                device: handle.name().to_string(),
                line: l.line,
                leg,
                spec,
                failure,
            });
        }
    }
    out
}

/// Rebuild leg `leg` (0-based, in table order) of the mirror in stacked
/// device `dev` onto `new` (opened from `new_spec`), online: the new device
/// is put in with [`Legs::replace`](crate::legs::Legs::replace), every
/// region is marked out of sync, and the regions are copied from a live leg
/// while I/O goes on. Blocks the calling thread until the copy is done,
/// calling `progress` after each region. The device's first mirror line is
/// the one rebuilt.
pub fn replace(
    dev: &Device,
    leg: usize,
    new: Device,
    new_spec: &str,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Progress> {
    let name = dev.name().to_string();
    let bad = |why: String| Error::spec(format!("{name} (mirror replace)"), why);
    let handle =
        crate::handle::find(&name).ok_or_else(|| bad("not an open stacked device".into()))?;
    let (ti, mirror) = handle
        .targets()
        .iter()
        .enumerate()
        .find_map(|(i, t)| {
            t.as_any()
                .and_then(|a| a.downcast_ref::<Mirror>())
                .map(|m| (i, m))
        })
        .ok_or_else(|| bad("the table has no mirror line".into()))?;
    let m = &mirror.inner;
    if leg >= m.legs.len() {
        return Err(bad(format!(
            "leg {leg}: the mirror has legs 0 to {}",
            m.legs.len() - 1
        )));
    }
    let l = m.legs[leg];
    let shared = handle
        .targets()
        .iter()
        .enumerate()
        .any(|(i, t)| i != ti && t.legs().contains(&l.id));
    if shared {
        return Err(bad(format!(
            "leg {leg} ({}) is also used by another line of the table",
            m.spec_of(leg)
        )));
    }
    // The new leg must not be, or be a window of, a device the table
    // already maps onto: its sectors would hold two ranges.
    let base = |d: &Device| d.remapped_from().map_or_else(|| d.clone(), |(b, _)| b);
    let new_base = base(&new);
    if let Some(i) = m
        .all
        .all()
        .iter()
        .position(|d| d.as_ref().is_some_and(|d| base(d).same(&new_base)))
    {
        return Err(bad(format!(
            "`{new_spec}` is the device of the table's leg {i} ({}), or a window of it: \
             its sectors would hold two ranges of the table; give a device of its own",
            m.all.specs()[i]
        )));
    }
    if new.capacity_bytes() < l.offset_bytes + m.len_bytes {
        return Err(bad(format!(
            "`{new_spec}` has {} bytes; the leg needs {} from offset {}",
            new.capacity_bytes(),
            m.len_bytes,
            l.offset_bytes
        )));
    }
    let _running = m.recovery.lock().unwrap_or_else(|e| e.into_inner());
    let others = m.state.load(Ordering::SeqCst) & LIVE & !(1 << leg);
    if others == 0 {
        return Err(bad(format!(
            "no other leg is live to copy from (health {})",
            m.health()
        )));
    }
    // 1. The old device gets no new I/O, and what it has drains.
    m.state.fetch_and(
        !((1 << leg) | (1 << (leg as u32 + REBUILD_SHIFT))),
        Ordering::SeqCst,
    );
    let freeze = Duration::from_secs(60);
    drop(dev.freeze(freeze)?);
    // 2. Every region is out of sync on the new leg (and dirty on a disk
    //    log, so that a crash copies again); then it goes in.
    m.nosync.set_all();
    m.mark_all_dirty().map_err(bad)?;
    m.all.replace(l.id, Some(new), new_spec);
    *m.failures[leg].lock().unwrap_or_else(|e| e.into_inner()) = None;
    m.state.fetch_or(
        (1 << (leg as u32 + REBUILD_SHIFT)) | RECOVERING,
        Ordering::SeqCst,
    );
    // 3. Every queue has picked up the new device before any region is
    //    copied (a queue maps only after it looks at the legs' generation).
    drop(dev.freeze(freeze)?);
    eprintln!(
        "mqblk: {name}: mirror leg {leg} replaced by {new_spec}; copying {} bytes",
        m.len_bytes
    );
    let res = recovery::run(m, progress);
    let health = m.finish_recovery();
    match res {
        Ok(p) => {
            eprintln!(
                "mqblk: {name}: mirror leg {leg} rebuilt: {} bytes copied; legs: {health}",
                p.bytes_done
            );
            Ok(p)
        }
        Err(e) => Err(bad(format!("rebuild stopped: {e}; legs: {health}"))),
    }
}
