//! Recovery (Linux `dm-raid1`'s `do_recovery` and kcopyd): copy the
//! regions marked out of sync from a live leg to the legs being rebuilt,
//! in the calling thread, with contexts of its own on the legs.
//!
//! Each region is locked while it is copied: the lock bit is set, then the
//! copier waits for the region's write children in flight to end; a write
//! that counts itself and then finds the bit set backs off and is requeued
//! (the two look in opposite orders, so one of them sees the other).
//! Writes to regions not yet copied skip the legs being rebuilt; once a
//! region is copied, its bit clears and writes reach every leg.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mqblk_core::Context;

use super::state::{Inner, LIVE, REBUILD, REBUILD_SHIFT};

/// How far a recovery has got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Regions copied.
    pub regions_done: u64,
    /// Regions to copy.
    pub regions_total: u64,
    /// Bytes copied (per target leg, counted once).
    pub bytes_done: u64,
    /// Bytes to copy.
    pub bytes_total: u64,
}

/// Longest wait for the writes in flight on a region to end.
const DRAIN_MAX: Duration = Duration::from_secs(60);
/// Largest single copy I/O.
const CHUNK_MAX: u64 = 1 << 20;

/// Copy every region marked in `nosync`, calling `progress` after each.
pub(crate) fn run(
    m: &Inner,
    progress: &mut dyn FnMut(&Progress),
) -> std::result::Result<Progress, String> {
    let mut p = Progress {
        regions_total: m.nosync.count(),
        ..Progress::default()
    };
    for r in 0..m.nr_regions {
        if m.nosync.test(r) {
            p.bytes_total += m.region_len(r);
        }
    }
    m.goal_bytes.store(p.bytes_total, Ordering::Relaxed);
    m.done_bytes.store(0, Ordering::Relaxed);
    let chunk = (1u64 << m.region_shift).min(CHUNK_MAX);
    let mut ctxs: Vec<Option<Context>> = (0..m.legs.len()).map(|_| None).collect();
    let mut buf = None;
    for r in 0..m.nr_regions {
        if m.stop.load(Ordering::Relaxed) {
            return Err("the mirror is closing".into());
        }
        if !m.nosync.test(r) {
            continue;
        }
        m.locked.set(r);
        let res = copy_region(m, r, chunk, &mut ctxs, &mut buf);
        if res.is_ok() {
            m.nosync.clear(r);
        }
        m.locked.clear(r);
        res?;
        let len = m.region_len(r);
        p.regions_done += 1;
        p.bytes_done += len;
        m.copied_bytes.fetch_add(len, Ordering::Relaxed);
        m.done_bytes.store(p.bytes_done, Ordering::Relaxed);
        progress(&p);
    }
    // The copies are durable before the legs count as in sync.
    let targets = (m.state.load(Ordering::SeqCst) & REBUILD) >> REBUILD_SHIFT;
    for (i, c) in ctxs.iter_mut().enumerate() {
        if targets & (1 << i) != 0 {
            if let Some(c) = c {
                if let Err(e) = c.flush() {
                    m.fail_leg(i, "flush", mqblk_core::driver::Status::IoError);
                    eprintln!("mqblk: mirror (table line {}): leg {i}: {e}", m.line);
                }
            }
        }
    }
    Ok(p)
}

fn ctx<'a>(
    m: &Inner,
    ctxs: &'a mut [Option<Context>],
    i: usize,
) -> std::result::Result<&'a mut Context, String> {
    if ctxs[i]
        .as_ref()
        .is_some_and(|c| m.all.get(m.legs[i].id).is_some_and(|d| c.device().same(&d)))
    {
        return Ok(ctxs[i].as_mut().expect("checked"));
    }
    let dev = m
        .all
        .get(m.legs[i].id)
        .ok_or_else(|| format!("leg {i} has no device"))?;
    ctxs[i] = Some(dev.context().map_err(|e| format!("leg {i}: {e}"))?);
    Ok(ctxs[i].as_mut().expect("just set"))
}

/// Copy region `r` (locked by the caller).
fn copy_region(
    m: &Inner,
    r: u64,
    chunk: u64,
    ctxs: &mut [Option<Context>],
    buf: &mut Option<mqblk_core::buf::IoBuf>,
) -> std::result::Result<(), String> {
    let start = Instant::now();
    while m.pending.get(r) != 0 {
        if m.stop.load(Ordering::Relaxed) {
            return Err("the mirror is closing".into());
        }
        if start.elapsed() > DRAIN_MAX {
            return Err(format!(
                "region {r}: writes in flight did not end within {} s",
                DRAIN_MAX.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_micros(20));
    }
    let base = r << m.region_shift;
    let end = base + m.region_len(r);
    let mut off = base;
    while off < end {
        let n = (end - off).min(chunk) as usize;
        // Read from a live leg (the first one that works).
        loop {
            let live = m.state.load(Ordering::SeqCst) & LIVE;
            if live == 0 {
                return Err("no live leg is left to copy from".into());
            }
            let src = live.trailing_zeros() as usize;
            let c = ctx(m, ctxs, src)?;
            let b = buf.get_or_insert_with(|| c.device().alloc_buf(chunk as usize));
            match c.read_at(&mut b.as_mut_slice()[..n], m.legs[src].offset_bytes + off) {
                Ok(()) => break,
                Err(e) => {
                    eprintln!("mqblk: mirror (table line {}): copy: {e}", m.line);
                    m.fail_leg(src, "read", mqblk_core::driver::Status::IoError);
                }
            }
        }
        let targets = (m.state.load(Ordering::SeqCst) & REBUILD) >> REBUILD_SHIFT;
        if targets == 0 {
            return Err("every leg being rebuilt has failed".into());
        }
        let b = buf.as_ref().expect("filled by the read");
        for i in 0..m.legs.len() {
            if targets & (1 << i) == 0 {
                continue;
            }
            let c = ctx(m, ctxs, i)?;
            if let Err(e) = c.write_at(&b.as_slice()[..n], m.legs[i].offset_bytes + off) {
                eprintln!("mqblk: mirror (table line {}): copy: {e}", m.line);
                m.fail_leg(i, "write", mqblk_core::driver::Status::IoError);
            }
        }
        off += n as u64;
    }
    Ok(())
}
