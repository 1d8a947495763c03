//! A job's thread: its bios aimed and submitted, completions reaped and
//! resubmitted in place, the stop (runtime, signal, first error, overdue
//! request), and the drain.

use crate::alloc_count;
use crate::pattern::{Offsets, Rng};
use crate::result::DirResult;
use crate::sample::Recorder;
use crate::verify::Hook;
use anyhow::Result;
use mqblk::{Bio, Device, Op};
use mqblk_fio::job::JobSpec;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::finish::{finish_job, FailedIo};
use super::prepare::region_bytes;
use super::shared::*;

/// Aim a slot's bio at its next I/O. A discard or write-zeroes carries no
/// data: it gets a bio of its own, and the slot's data bio waits in `spare`
/// until a data I/O takes it back (so a slot with a data-less bio always
/// has a data bio in `spare`). The common case, a data I/O of the job's one
/// size on a data bio, is two stores here; the rest is out of line.
#[inline(always)]
fn aim(
    bio: &mut Bio,
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
    variable: bool,
    spare: &mut Vec<Bio>,
) {
    if !variable && op.has_data() && bio.op().has_data() {
        bio.set_op(op);
        bio.set_offset_bytes(offset_bytes);
    } else {
        aim_other(bio, op, offset_bytes, len_bytes, variable, spare);
    }
}

/// [`aim`] for a data-less I/O, a data I/O on a data-less bio, or a job
/// of several block sizes.
#[inline(never)]
fn aim_other(
    bio: &mut Bio,
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
    variable: bool,
    spare: &mut Vec<Bio>,
) {
    if !op.has_data() {
        let dataless = match op {
            Op::WriteZeroes => Bio::write_zeroes_at(offset_bytes, len_bytes),
            _ => Bio::discard_at(offset_bytes, len_bytes),
        };
        let old = std::mem::replace(bio, dataless);
        if old.op().has_data() {
            spare.push(old);
        }
        return;
    }
    if !bio.op().has_data() {
        let Some(data) = spare.pop() else {
            debug_assert!(false, "a data-less slot without a spare data bio");
            // Fails at submit with a typed zero-length error, not silently.
            *bio = Bio::at(op, offset_bytes);
            return;
        };
        *bio = data;
    }
    if variable {
        let old = std::mem::replace(bio, Bio::at(Op::Read, 0));
        *bio = resized(old, op, offset_bytes, len_bytes);
    } else {
        bio.set_op(op);
        bio.set_offset_bytes(offset_bytes);
    }
}

fn resized(bio: Bio, op: Op, offset_bytes: u64, len_bytes: u64) -> Bio {
    let mut bufs = bio.into_buffers();
    let mut b = Bio::at(op, offset_bytes);
    if let Some(buf) = bufs.next() {
        let len = len_bytes.min(buf.len() as u64) as u32;
        b.push_segment(buf, 0, len);
    }
    b
}

/// Where a job's slot buffers come from. First the device's own pool,
/// while it carves them from its registered arena (a file device's
/// io_uring fixed buffers); then, for the rest, an arena of the job's own,
/// one allocation carved into the slots. A page-aligned buffer allocated
/// alone costs the heap two pages for one (glibc's `memalign` leaves the
/// page before it unused): 65536 slots of 4 KiB took 512 MiB, not 256.
struct SlotBuffers<'a> {
    dev: &'a Device,
    piece: usize,
    /// Buffers still to hand out.
    left: usize,
    own: Option<mqblk::BufPool>,
}

impl<'a> SlotBuffers<'a> {
    fn new(dev: &'a Device, piece: usize, count: usize) -> SlotBuffers<'a> {
        let mut b = SlotBuffers {
            dev,
            piece,
            left: count,
            own: None,
        };
        if dev.buf_pool().regions().is_empty() {
            b.own_arena();
        }
        b
    }

    /// An arena for the buffers left, carved as the pool's size classes
    /// carve it (what [`crate::memory`] counts).
    fn own_arena(&mut self) {
        let align = self.dev.buf_pool().align();
        let each = crate::memory::carved_bytes(self.piece.max(align) as u64) as usize;
        self.own = Some(mqblk::BufPool::with_arena(
            align,
            each.saturating_mul(self.left),
        ));
    }

    fn get(&mut self) -> mqblk::IoBuf {
        self.left = self.left.saturating_sub(1);
        match &self.own {
            Some(pool) => pool.get(self.piece),
            None => {
                let buf = self.dev.alloc_buf(self.piece);
                if buf.arena_id().is_none() && self.left > 0 {
                    // The device's arena is used up: the rest from ours.
                    self.own_arena();
                }
                buf
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn job_thread<V: Hook>(
    base: usize,
    index: usize,
    job: JobSpec,
    dev: Device,
    shared: Arc<Shared>,
    mut hook: V,
    mut gate: Option<crate::flow::Gate>,
    tx: Sender<JobMsg>,
) {
    // Set up everything before the start barrier: the measured phase
    // allocates nothing.
    let setup = (|| -> Result<_> {
        let mut ctx = shared.in_job_order(index, || match &job.cgroup {
            Some(name) => dev.context_in(&dev.group(name)?),
            None => dev.context(),
        })?;
        if let Some(p) = job.ioprio {
            ctx.set_ioprio(p);
        }
        let region = region_bytes(&job, &dev);
        let mut seed =
            job.randseed ^ ((base + index) as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        if !job.randrepeat {
            seed ^= mqblk::clock::now_ns();
        }
        let unit = crate::pattern::unit_bytes(&job);
        let offsets = Offsets::new(&job, hook.blocks(region / unit), seed);
        let mut free: Vec<Bio> = Vec::with_capacity(job.iodepth as usize);
        let mut fill = Rng(seed ^ 0x5555);
        // With --segments=N each bio gets N separately allocated (so
        // non-contiguous) pieces: a readv/writev-style bio.
        let piece = (job.block_sizes.max(job.bs) / u64::from(job.segments)) as usize;
        let mut bufs = SlotBuffers::new(&dev, piece, job.iodepth as usize * job.segments as usize);
        for _ in 0..job.iodepth {
            let mut bio = Bio::at(Op::Read, 0);
            for _ in 0..job.segments {
                let mut buf = bufs.get();
                for chunk in buf.as_mut_slice().chunks_mut(8) {
                    let v = fill.next().to_le_bytes();
                    chunk.copy_from_slice(&v[..chunk.len()]);
                }
                bio.push_segment(buf, 0, piece as u32);
            }
            free.push(bio);
        }
        Ok((ctx, offsets, free))
    })();
    // Per-I/O measurements, if a log or the report asks for them; a sized
    // job's sample log is sized to its I/Os.
    let expected_ios = (!job.time_based).then(|| {
        let bytes = job
            .io_size
            .unwrap_or(region_bytes(&job, &dev))
            .saturating_mul(u64::from(job.loops.max(1)));
        bytes / job.block_sizes.min(job.bs).max(1)
    });
    let mut rec = Recorder::for_job(&job, expected_ios);
    shared.start.wait();
    let (mut ctx, mut offsets, mut free) = match setup {
        Ok(s) => s,
        Err(e) => {
            shared.measuring.fetch_add(1, Relaxed);
            shared.finished.fetch_add(1, Relaxed);
            let _ = tx.send((index, Err(e)));
            return;
        }
    };
    if !job.startdelay.is_zero() {
        let t = Instant::now();
        while t.elapsed() < job.startdelay && shared.phase.load(Relaxed) < PHASE_STOP {
            std::thread::sleep(Duration::from_millis(1).min(job.startdelay));
        }
    }
    let bytes_limit = if job.time_based {
        u64::MAX
    } else {
        job.io_size
            .unwrap_or(region_bytes(&job, &dev))
            .saturating_mul(u64::from(job.loops.max(1)))
    };
    // rate= and rate_iops=: the time one I/O may take, for a paced job
    // (which reads the clock once per loop; other jobs never do).
    let pace_ns = {
        let by_iops = job.rate_iops.map(|r| 1_000_000_000 / r.max(1));
        let by_bytes = job
            .rate_bps
            .map(|r| job.bs.saturating_mul(1_000_000_000) / r.max(1));
        by_iops.into_iter().chain(by_bytes).max()
    };
    let mut pacer = pace_ns.map(|p| crate::rate::Pacer::new(p, job.rate_poisson, job.randseed));
    let mut min_rate =
        crate::rate::MinRate::new(job.rate_min_bps, job.rate_min_iops, job.rate_cycle);
    // latency_target=: the depth the search allows (and max_latency=).
    let mut target = job.latency_target.map(|t| {
        crate::latency_target::Target::new(crate::latency_target::TargetSpec {
            target: t,
            window: job.latency_window,
            percentile: job.latency_percentile,
            run: job.latency_run,
            iodepth: job.iodepth,
        })
    });
    let max_latency_ns = job.max_latency.map(|d| d.as_nanos() as u64);
    // Wait for the I/O in flight before issuing again (the target's depth
    // went down); the job ends (the search is over, or a latency failed).
    let mut quiesce = false;
    let mut ended: Option<String> = None;
    let mut final_window_reset = false;
    // A job whose region is past its device's end does no I/O (fio's
    // I/O beyond the end is not issued).
    let empty = region_bytes(&job, &dev) < job.bs;
    let zoned = job.zone.effective() == crate::zone::ZoneMode::Zbd;
    let stop_me = &shared.stop_job[index];
    let mut writes_since_flush = 0u32;
    let mut flushes_due = 0u32;
    let bs = job.bs;
    let thinktime = job.thinktime;
    let mut read = DirResult::default();
    let mut write = DirResult::default();
    let mut trim = DirResult::default();
    // Data bios set aside while their slot carries a discard or a
    // write-zeroes, to be taken back by the next data I/O.
    let mut spare: Vec<Bio> = Vec::new();
    let mut first_error: Option<FailedIo> = None;
    // continue_on_error=: an error it does not name stops the job.
    let keep_going = job.continue_on_error;
    let mut failed = false;
    let paced = pace_ns.is_some() || gate.is_some() || target.is_some() || zoned;
    let variable = job.block_sizes != mqblk_fio::job::BlockSizes::Fixed;
    let fsync_every = job.fsync_every;
    let mut issued_bytes = 0u64;
    let mut measuring = false;
    let mut t_start = 0u64;
    let mut cpu_start = (0, 0);
    let mut stats_start = mqblk::DiskStats::default();
    let progress = &shared.progress[index];
    let counters = &shared.counters[index];
    // Averaged bw and IOPS logs read these counts; per-I/O ones do not.
    let logs = (job.write_bw_log.is_some() || job.write_iops_log.is_some()) && job.log_avg_msec > 0
        || job.steadystate.is_some();

    loop {
        let phase = shared.phase.load(Relaxed);
        if phase >= PHASE_STOP || hook.stopped() || failed || stop_me.load(Relaxed) || empty {
            break;
        }
        // Idle: nothing in flight, and no completion waiting to be counted
        // (a bio can end inside its own submission: a `zero` line, a
        // refused range).
        let idle = ctx.in_flight() == 0 && ctx.ready() == 0;
        if (ended.is_some() || offsets.exhausted()) && idle {
            break;
        }
        if !measuring && phase == PHASE_MEASURE {
            // Start of the measured phase: forget the ramp.
            measuring = true;
            read = DirResult::default();
            write = DirResult::default();
            trim = DirResult::default();
            issued_bytes = 0;
            ctx.reset_histograms();
            stats_start = ctx.stats();
            cpu_start = mqblk::clock::thread_cpu_ns();
            t_start = mqblk::clock::now_ns();
            if let Some(r) = &mut rec {
                r.start_measuring(t_start);
            }
            shared.measuring.fetch_add(1, Relaxed);
        }
        if measuring && issued_bytes >= bytes_limit && idle {
            break;
        }
        // fsync=N: the flushes the writes since the last one call for.
        while flushes_due > 0 {
            if ctx.submit(Bio::flush()).is_err() {
                break;
            }
            flushes_due -= 1;
        }
        let mut allowed = u64::MAX;
        if let Some(p) = &mut pacer {
            let now = mqblk::clock::now_ns();
            allowed = p.allowed(now, issued_bytes / bs);
            if allowed == 0 && ctx.in_flight() == 0 && ctx.ready() == 0 {
                std::thread::sleep(p.wait(now));
                continue;
            }
        }
        if let Some(m) = &mut min_rate {
            let done = read.bytes + write.bytes + trim.bytes;
            let ios = read.ios + write.ios + trim.ios;
            if let Some(why) = m.check(mqblk::clock::now_ns(), done, ios) {
                ended.get_or_insert(why);
            }
        }
        if let Some(t) = &target {
            if quiesce && ctx.in_flight() == 0 {
                quiesce = false;
            }
            let depth = if quiesce { 0 } else { u64::from(t.depth()) };
            allowed = allowed.min(depth.saturating_sub(ctx.in_flight() as u64));
        }
        if ended.is_some() {
            allowed = 0;
        }
        let mut held = false;
        while issued_bytes < bytes_limit || !measuring {
            if allowed == 0 {
                break;
            }
            allowed -= 1;
            let Some(mut bio) = free.pop() else { break };
            if let Some(g) = &mut gate {
                if !g.admit() {
                    free.push(bio);
                    held = true;
                    break;
                }
            }
            let (op, sector, len) = offsets.next();
            if len == 0 {
                // A zoned job with nothing left to read.
                free.push(bio);
                break;
            }
            let op = hook.retarget(op);
            aim(&mut bio, op, sector * 512, len * 512, variable, &mut spare);
            hook.prepare(&mut bio);
            let pending = rec.as_mut().and_then(|r| r.before_submit(&mut bio));
            let submitted = ctx.submit(bio);
            if let (Some(r), Some(p)) = (&mut rec, pending) {
                r.after_submit(p, submitted.is_ok());
            }
            if let Err(e) = submitted {
                let bio = e.into_bio();
                hook.cancel(&bio);
                free.push(bio);
                break;
            }
            issued_bytes += len * 512;
        }
        // A measured job resubmits through the loop above, where its
        // stamps are taken, not in place.
        let in_place = !paced && !rec.as_ref().is_some_and(Recorder::stamping);
        if let Some(r) = &mut rec {
            r.begin_reap();
        }
        // Reap; a finished bio is aimed at its next offset and resubmitted in
        // place (no copy), unless this job has issued all it should.
        if held && ctx.in_flight() == 0 && ctx.ready() == 0 {
            // Ahead of its share of the flow: wait, as fio's flow_sleep.
            match gate.as_ref().map(|g| g.sleep()) {
                Some(d) if !d.is_zero() => std::thread::sleep(d),
                _ => std::thread::yield_now(),
            }
            continue;
        }
        let mut verdict = crate::latency_target::Verdict::Continue;
        ctx.poll_wait_for(1, STOP_CHECK, |mut c| {
            if c.bio().op() == Op::Flush {
                // fsync=N's flush: not an I/O of the mix.
                if !c.status().is_ok() && !keep_going.write {
                    failed = true;
                    first_error.get_or_insert(FailedIo::of(&c));
                }
                return;
            }
            if fsync_every > 0 && c.bio().op() == Op::Write {
                writes_since_flush += 1;
                if writes_since_flush >= fsync_every {
                    writes_since_flush = 0;
                    flushes_due += 1;
                }
            }
            let lat_ns = rec
                .as_mut()
                .and_then(|r| r.complete(c.bio(), c.status().is_ok()));
            if let Some(lat) = lat_ns {
                if let Some(t) = &mut target {
                    let v = t.complete(lat);
                    if v != crate::latency_target::Verdict::Continue {
                        verdict = v;
                    }
                }
                if max_latency_ns.is_some_and(|m| lat > m) && ended.is_none() {
                    ended = Some(format!(
                        "latency of {lat} ns exceeds max_latency ({} ns): {} at offset {}",
                        max_latency_ns.unwrap_or_default(),
                        if c.bio().op() == Op::Read {
                            "read"
                        } else {
                            "write"
                        },
                        c.bio().offset_bytes()
                    ));
                }
            }
            let dir = match c.bio().op() {
                Op::Read => &mut read,
                Op::Discard => &mut trim,
                _ => &mut write,
            };
            dir.ios += 1;
            if c.status().is_ok() {
                dir.bytes += c.bio().len_bytes();
            } else {
                dir.errors += 1;
                first_error.get_or_insert(FailedIo::of(&c));
                if !keep_going.goes_on_after(c.bio().op()) {
                    failed = true;
                }
            }
            hook.complete(&c);
            if !thinktime.is_zero() {
                std::thread::sleep(thinktime);
            }
            // (A length of 0: no I/O left, a zoned job's or a sequence's.)
            let next = ((issued_bytes < bytes_limit || !measuring)
                && !hook.stopped()
                && !failed
                && in_place)
                .then(|| offsets.next())
                .filter(|&(_, _, len)| len > 0);
            if let Some((op, sector, len)) = next {
                let op = hook.retarget(op);
                let bio = c.bio_mut();
                aim(bio, op, sector * 512, len * 512, variable, &mut spare);
                hook.prepare(bio);
                issued_bytes += len * 512;
                c.resubmit();
            } else {
                free.push(c.into_bio());
            }
        });
        if ctx.in_flight() > 0 {
            // Has the device held an I/O past its timeout (a backend that
            // died)? That is the job's error now, though the bio comes back
            // only when the driver lets go of its memory. (One load when
            // none is.)
            if let Some(o) = ctx.take_overdue() {
                match o.op {
                    Op::Read => read.errors += 1,
                    Op::Discard => trim.errors += 1,
                    _ => write.errors += 1,
                }
                first_error.get_or_insert(FailedIo {
                    op: o.op,
                    offset: o.offset_bytes,
                    len: o.len_bytes,
                    status: mqblk::Status::Timeout,
                });
                if !keep_going.goes_on_after(o.op) {
                    failed = true;
                }
            }
        }
        if let Some(t) = &mut target {
            if verdict == crate::latency_target::Verdict::Continue && measuring {
                verdict = t.check(mqblk::clock::now_ns());
            }
            match verdict {
                crate::latency_target::Verdict::Continue => {}
                crate::latency_target::Verdict::Quiesce => quiesce = true,
                crate::latency_target::Verdict::Done => {
                    ended.get_or_insert_with(String::new);
                }
                crate::latency_target::Verdict::Failed => {
                    ended.get_or_insert_with(|| {
                        format!(
                            "latency_target={} us not met at queue depth 1",
                            job.latency_target.unwrap_or_default().as_micros()
                        )
                    });
                }
            }
            // The search is over: the last window's figures are the job's.
            if t.final_window() && !final_window_reset && measuring {
                final_window_reset = true;
                read = DirResult::default();
                write = DirResult::default();
                trim = DirResult::default();
                ctx.reset_histograms();
                stats_start = ctx.stats();
                cpu_start = mqblk::clock::thread_cpu_ns();
                t_start = mqblk::clock::now_ns();
                if let Some(r) = &mut rec {
                    r.start_measuring(t_start);
                }
            }
        }
        progress.publish(read.ios, write.ios, ctx.histograms());
        if logs {
            counters.publish(
                [read.ios, write.ios, trim.ios],
                [read.bytes, write.bytes, trim.bytes],
            );
        }
        if let Some(r) = &rec {
            r.publish(counters);
        }
    }
    if !measuring {
        // Stopped during the ramp (size reached first): measure nothing.
        t_start = mqblk::clock::now_ns();
        cpu_start = mqblk::clock::thread_cpu_ns();
        stats_start = ctx.stats();
        shared.measuring.fetch_add(1, Relaxed);
    }
    let t_end = mqblk::clock::now_ns();
    let cpu_end = mqblk::clock::thread_cpu_ns();
    let stats_end = ctx.stats();
    if failed {
        if let Some(e) = &first_error {
            eprintln!(
                "mqblk: job {}: {}; the job stops (continue_on_error=none: fio's default)",
                job.name,
                e.describe(dev.name())
            );
        }
    }
    // The measured phase is over for this job: what it allocates from here
    // (its figures, the drain, the verify phase) is not the I/O path's.
    alloc_count::exclude_this_thread();
    shared.done[index].store(true, Relaxed);
    shared.finished.fetch_add(1, Relaxed);
    // The job is done with its flow: the others run on without it.
    drop(gate);
    let latency_depth = target.as_ref().map(|t| t.depth());
    let mut m = Measured {
        read,
        write,
        trim,
        runtime_ns: t_end.saturating_sub(t_start),
        usr_ns: cpu_end.0.saturating_sub(cpu_start.0),
        sys_ns: cpu_end.1.saturating_sub(cpu_start.1),
        stats: stats_end.since(&stats_start),
        first_error: first_error
            .map(|e| e.describe(dev.name()))
            .or(ended.filter(|e| !e.is_empty())),
        stopped_at: None,
    };
    if failed {
        m.stopped_at = m.first_error.clone();
    }
    // Stopped by a signal or an error: the figures go to the supervisor
    // before the drain, which waits for a device that may not answer (or
    // for a throttle to let the I/O go), and there is no verify phase. A
    // signal during the drain or the verify phase stops them, and the
    // figures go as they are then: the measured phase's, and the verify
    // done so far. The bios stay in this thread until they come back.
    let aborted = || shared.phase.load(Relaxed) == PHASE_ABORT;
    let held = &*shared.throttled[index];
    let early = failed || aborted();
    if !early {
        if drain(&mut ctx, &mut hook, &mut free, &aborted, held) {
            // Every slot holds a data bio again, for the verify phase.
            free.retain(|b| b.op().has_data());
            free.append(&mut spare);
            if job.end_fsync {
                if let Err(e) = ctx.flush() {
                    eprintln!("mqblk: job {}: end_fsync: {e}", job.name);
                }
            }
        }
        // fio's verify phase: read back what was written (not measured).
        hook.verify_phase(&mut ctx, &mut free, &aborted);
    }
    held.store(ctx.throttled(), Relaxed);
    let r = finish_job(
        base,
        index,
        &job,
        &dev,
        &ctx,
        &mut hook,
        m,
        rec,
        latency_depth,
    );
    let _ = tx.send((index, Ok(r)));
    drain(&mut ctx, &mut hook, &mut free, &|| false, held);
}

/// Wait for every bio in flight, without counting it; `held` says how
/// many the throttle holds as it goes. False if `aborted` stopped it
/// first.
fn drain<V: Hook>(
    ctx: &mut mqblk::Context,
    hook: &mut V,
    free: &mut Vec<Bio>,
    aborted: &dyn Fn() -> bool,
    held: &std::sync::atomic::AtomicU32,
) -> bool {
    while ctx.in_flight() > 0 || ctx.ready() > 0 {
        held.store(ctx.throttled(), Relaxed);
        if aborted() {
            return false;
        }
        ctx.poll_wait_for(1, STOP_CHECK, |c| {
            if c.bio().op() == Op::Flush {
                return;
            }
            hook.complete(&c);
            free.push(c.into_bio())
        });
    }
    held.store(0, Relaxed);
    true
}
