//! The qcow2 driver (request-based, over the image's file device): each
//! request is cut at cluster runs. Runs that map to allocated data go to
//! the file as clone bios that view the request's memory (zero copy),
//! submitted to this hardware queue's own context on the file device and
//! reaped in `poll`; the request completes when its last clone has ended.
//! Zeros, backing data and compressed clusters are filled in
//! synchronously first, and so are writes that allocate (copy-on-write),
//! write-zeroes, discards and flushes, under the metadata lock.
//!
//! Requests never cross a cluster (`chunk_sectors` is the cluster), so a
//! request is at most one lookup.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mqblk_core::driver::{
    Completions, Driver, Error, Extent, Features, HwNotifier, HwQueueSetup, Op, QueueLimits,
    QueueRq, Request, RqRef, Status,
};
use mqblk_core::{Bio, Context};

use crate::alloc::Meta;
use crate::error::Result;
use crate::image::Image;
use crate::table::{Cluster, Source};

/// The driver of a qcow2 device.
pub struct Qcow2Driver {
    pub(crate) img: Arc<Image>,
    pub(crate) read_only: bool,
}

/// A request waiting for its clones.
struct Parent {
    rq: RqRef,
    pending: u32,
    status: Status,
}

/// Per hardware queue: a context on the file device, the requests in
/// flight by tag, and the plan of one request.
pub struct Qcow2Queue {
    ctx: Context,
    parents: Vec<Option<Parent>>,
    /// (offset in the request, length, file offset) of each clone.
    plan: Vec<(u64, u64, u64)>,
    scratch: Vec<u8>,
    /// The epoch the planned clones are counted in.
    epoch: usize,
}

/// Copy `data` into a read request's buffers at `at`.
fn copy_to(rq: &mut Request, at: u64, data: &[u8]) {
    let (start, end) = (at, at + data.len() as u64);
    let mut pos = 0u64;
    for buf in rq.read_bufs() {
        let (b0, b1) = (pos, pos + buf.len() as u64);
        pos = b1;
        let (lo, hi) = (start.max(b0), end.min(b1));
        if lo < hi {
            buf[(lo - b0) as usize..(hi - b0) as usize]
                .copy_from_slice(&data[(lo - start) as usize..(hi - start) as usize]);
        }
        if pos >= end {
            break;
        }
    }
}

/// Copy a write request's data at `at` into `out`.
fn copy_from(rq: &Request, at: u64, out: &mut [u8]) {
    let (start, end) = (at, at + out.len() as u64);
    let mut pos = 0u64;
    for buf in rq.write_bufs() {
        let (b0, b1) = (pos, pos + buf.len() as u64);
        pos = b1;
        let (lo, hi) = (start.max(b0), end.min(b1));
        if lo < hi {
            out[(lo - start) as usize..(hi - start) as usize]
                .copy_from_slice(&buf[(lo - b0) as usize..(hi - b0) as usize]);
        }
        if pos >= end {
            break;
        }
    }
}

fn fold(s: &mut Status, n: Status) {
    if *s == Status::Ok {
        *s = n;
    }
}

/// One clone of parent `tag` ended.
fn finish(
    parents: &mut [Option<Parent>],
    tag: u32,
    status: Status,
    done: &mut Completions<'_>,
) -> usize {
    let Some(p) = parents[tag as usize].as_mut() else {
        return 0;
    };
    fold(&mut p.status, status);
    p.pending -= 1;
    if p.pending > 0 {
        return 0;
    }
    let p = parents[tag as usize].take().expect("checked above");
    done.complete(p.rq, p.status);
    1
}

impl Qcow2Driver {
    /// Report a metadata error on the data path (naming image and offset)
    /// and turn it into an I/O status.
    fn failed(&self, e: crate::error::Qcow2Error) -> Status {
        eprintln!("mqblk: {e}");
        match e {
            crate::error::Qcow2Error::NoSpace { .. } => Status::NoSpace,
            _ => Status::IoError,
        }
    }

    /// Plan a read: fill what is not plain data now, list the clones.
    fn plan_read(&self, hq: &mut Qcow2Queue, rq: &mut Request, m: &mut Meta) -> Result<()> {
        let img = &self.img;
        let (start, len) = (rq.offset_bytes(), rq.len_bytes());
        let mut done = 0;
        while done < len {
            let off = start + done;
            let (src, n) = img.source(m, off, len - done)?;
            let scratch = &mut hq.scratch[..n as usize];
            match src {
                Source::Data(host) if host + n <= m.limit => hq.plan.push((done, n, host)),
                Source::Data(host) => {
                    img.pread("read of data", host, scratch)?;
                    copy_to(rq, done, scratch);
                }
                Source::Zero => {
                    rq.zero_range(done, n);
                }
                Source::Backing => match img.backing() {
                    Some(b) => {
                        b.read(off, scratch)?;
                        copy_to(rq, done, scratch);
                    }
                    None => {
                        rq.zero_range(done, n);
                    }
                },
                Source::Compressed { host, sectors } => {
                    let mut c = vec![0u8; img.cs as usize];
                    img.decompress(m, off, host, sectors, &mut c)?;
                    let at = (off & (img.cs - 1)) as usize;
                    copy_to(rq, done, &c[at..at + n as usize]);
                }
            }
            done += n;
        }
        Ok(())
    }

    /// Plan a write: in place where the cluster is ours alone, else
    /// allocate (copy-on-write) now.
    fn plan_write(&self, hq: &mut Qcow2Queue, rq: &Request, m: &mut Meta) -> Result<()> {
        let img = &self.img;
        let (start, len) = (rq.offset_bytes(), rq.len_bytes());
        let mut done = 0;
        while done < len {
            let off = start + done;
            let at = off & (img.cs - 1);
            let n = (len - done).min(img.cs - at);
            match img.map(m, off)?.0 {
                Cluster::Normal { host, copied: true } if host + img.cs <= m.limit => {
                    hq.plan.push((done, n, host + at))
                }
                _ => {
                    let buf = &mut hq.scratch[..n as usize];
                    copy_from(rq, done, buf);
                    img.write_sync(m, off, buf)?;
                }
            }
            done += n;
        }
        Ok(())
    }

    /// Write-zeroes or discard, cluster by cluster.
    fn zero(&self, rq: &Request, m: &mut Meta) -> Result<()> {
        let img = &self.img;
        let (start, len) = (rq.offset_bytes(), rq.len_bytes());
        let mut done = 0;
        while done < len {
            let off = start + done;
            let n = (len - done).min(img.cs - (off & (img.cs - 1)));
            img.zero_sync(m, off, n, rq.op() == Op::Discard)?;
            done += n;
        }
        Ok(())
    }

    /// Send the planned clones of `rq`; complete it when they end.
    fn send(&self, hq: &mut Qcow2Queue, rq: RqRef, done: &mut Completions<'_>) {
        let tag = rq.tag();
        let req: *const Request = &*rq;
        hq.parents[tag as usize] = Some(Parent {
            rq,
            pending: hq.plan.len() as u32 + 1,
            status: Status::Ok,
        });
        for k in 0..hq.plan.len() {
            let (at, n, host) = hq.plan[k];
            // SAFETY: `req` points at the request `parents[tag]` owns, which
            // stays there (not given back) until its last reference is
            // dropped, and this loop holds one. Each clone ends before the
            // parent is given back: `finish` runs from the file context's
            // poll, which drops the clone right after, and `done.complete`
            // hands the parent to the core only when this driver's
            // `poll` or `queue_rq` returns. The planned ranges are disjoint
            // pieces of the request, and every fill of its buffers
            // (zeros, backing data) happened in the plan, before this.
            let mut bio: Bio = unsafe { (*req).clone_bio_range(at, n, host) };
            bio.private = u64::from(tag) | (hq.epoch as u64) << 32;
            let bio = match hq.ctx.submit(bio) {
                Ok(()) => continue,
                Err(e) => e.into_bio(),
            };
            // The file context holds completions nobody polled: reap them
            // and try once more.
            let Qcow2Queue { ctx, parents, .. } = hq;
            let in_flight = &self.img.in_flight;
            ctx.poll(|c| {
                in_flight[(c.private() >> 32) as usize].fetch_sub(1, Ordering::Release);
                finish(parents, c.private() as u32, c.status(), done);
            });
            if let Err(e) = hq.ctx.submit(bio) {
                drop(e);
                self.img.in_flight[hq.epoch].fetch_sub(1, Ordering::Release);
                finish(&mut hq.parents, tag, Status::IoError, done);
            }
        }
        finish(&mut hq.parents, tag, Status::Ok, done);
    }
}

impl Driver for Qcow2Driver {
    type HwQueue = Qcow2Queue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> std::result::Result<Qcow2Queue, Error> {
        let depth = (setup.queue_depth + setup.reserved_tags) as usize;
        let mut ctx = self.img.data_device().context()?;
        let notifier: HwNotifier = setup.notifier;
        ctx.forward_completions(&notifier);
        if self.img.data_device().has_irq_lines() {
            ctx.forward_irq_lines(&setup.irq_lines)?;
        }
        Ok(Qcow2Queue {
            ctx,
            parents: (0..depth).map(|_| None).collect(),
            plan: Vec::with_capacity(4),
            scratch: vec![0u8; self.img.cs as usize],
            epoch: 0,
        })
    }

    fn queue_rq(
        &self,
        hq: &mut Qcow2Queue,
        mut rq: RqRef,
        last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        hq.plan.clear();
        let r = {
            let mut m = self.img.lock();
            let r = match rq.op() {
                Op::Flush => self.img.writeback(&mut m),
                Op::Read => self.plan_read(hq, &mut rq, &mut m),
                Op::Write => self.plan_write(hq, &rq, &mut m),
                Op::Discard | Op::WriteZeroes => self.zero(&rq, &mut m),
            };
            // Counted while the mapping it was planned on still holds.
            if r.is_ok() && !hq.plan.is_empty() {
                let n = hq.plan.len() as u64;
                hq.epoch = m.epoch;
                self.img.in_flight[m.epoch].fetch_add(n, Ordering::AcqRel);
            }
            r
        };
        match r {
            Err(e) => {
                let s = self.failed(e);
                done.complete(rq, s);
            }
            Ok(()) if hq.plan.is_empty() => done.complete(rq, Status::Ok),
            Ok(()) => self.send(hq, rq, done),
        }
        if last {
            hq.ctx.unplug();
            self.poll(hq, done);
        }
        QueueRq::Issued
    }

    fn commit_rqs(&self, hq: &mut Qcow2Queue) {
        hq.ctx.unplug();
    }

    fn poll(&self, hq: &mut Qcow2Queue, done: &mut Completions<'_>) -> usize {
        let Qcow2Queue { ctx, parents, .. } = hq;
        let mut n = 0;
        let in_flight = &self.img.in_flight;
        ctx.poll(|c| {
            in_flight[(c.private() >> 32) as usize].fetch_sub(1, Ordering::Release);
            n += finish(parents, c.private() as u32, c.status(), done)
        });
        n
    }

    fn limits(&self) -> QueueLimits {
        let lower = self.img.data_device().limits();
        let chunk = (self.img.cs / 512) as u32;
        QueueLimits {
            chunk_sectors: chunk,
            max_discard_sectors: chunk,
            max_write_zeroes_sectors: chunk,
            dma_alignment: lower.dma_alignment.max(511),
            ..QueueLimits::default()
        }
    }

    fn features(&self) -> Features {
        Features {
            write_cache: true,
            fua: false,
            discard: !self.read_only,
            write_zeroes: !self.read_only,
            read_only: self.read_only,
            rotational: false,
        }
    }

    fn completes_async(&self) -> bool {
        self.img.data_device().completes_async()
    }

    fn extents(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        out: &mut Vec<Extent>,
    ) -> std::result::Result<bool, Error> {
        self.img
            .extents(offset_bytes, len_bytes, out)
            .map_err(|e| e.into_setup(&self.img.name))?;
        Ok(true)
    }
}
