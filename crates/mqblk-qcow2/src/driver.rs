//! The qcow2 driver (request-based, over the image's file device). A
//! read or a write whose clusters are all plain data written in place
//! (allocated, not compressed, not zero, COPIED) is planned from the
//! queue's L2 slices ([`crate::slice`]) without the image's lock; its
//! pieces go down as clones ([`crate::clone`]), contiguous ones as one.
//! Anything else is planned under the metadata lock: zeros, backing data
//! and compressed clusters are filled in synchronously first, and so are
//! writes that allocate (copy-on-write), write-zeroes, discards and
//! flushes; the slices the request went through are refreshed there.
//!
//! A request may cross clusters (no `chunk_sectors`): it is cut at
//! cluster boundaries only where the mapping is not contiguous.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mqblk_core::driver::{
    Completions, Driver, Error, Extent, Features, HwNotifier, HwQueueSetup, Op, QueueLimits,
    QueueRq, Request, RqRef, Status,
};

use crate::alloc::Meta;
use crate::clone::Clones;
use crate::error::Result;
use crate::image::Image;
use crate::slice::Slices;
use crate::table::{Cluster, L1Entry, Source};

/// The driver of a qcow2 device.
pub struct Qcow2Driver {
    pub(crate) img: Arc<Image>,
    pub(crate) read_only: bool,
}

/// Per hardware queue: its clones on the file device, its L2 slices,
/// and room for one cluster of data.
pub struct Qcow2Queue {
    clones: Clones,
    slices: Slices,
    scratch: Vec<u8>,
    /// For the figures, when the queue goes.
    img: Arc<Image>,
}

impl Drop for Qcow2Queue {
    fn drop(&mut self) {
        // The queue's figures go to the image's report.
        let s = &self.img.mapped;
        s.slice_hits.fetch_add(self.slices.hits, Ordering::Relaxed);
        s.slice_misses
            .fetch_add(self.slices.misses, Ordering::Relaxed);
        s.slice_bytes
            .fetch_add(self.slices.memory_bytes(), Ordering::Relaxed);
        s.clones_sent.fetch_add(self.clones.sent, Ordering::Relaxed);
    }
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

impl Image {
    /// The host offsets of guest clusters `[first, first + out.len())`
    /// (inside one L2 table) as the queues' L2 slices keep them
    /// ([`crate::slice`]): the offset of a plain data cluster written in
    /// place (allocated, not compressed, not zero, COPIED, inside the file
    /// device), else 0. Standard entries only.
    pub(crate) fn plain_hosts(&self, m: &mut Meta, first: u64, out: &mut [u64]) -> Result<()> {
        let i = (first >> self.l2_bits) as usize;
        let j0 = (first & ((1 << self.l2_bits) - 1)) as usize;
        debug_assert!(j0 + out.len() <= 1 << self.l2_bits);
        debug_assert!(!self.hdr.extended_l2());
        out.fill(0);
        if i >= m.l1.len() {
            return Ok(());
        }
        // The table the request just went through is in the cache: found
        // without counting a second lookup.
        let l2_offset = L1Entry::decode(m.l1[i]).map_or(0, |e| e.l2_offset);
        let slot = match m.cache.peek(l2_offset) {
            Some(s) => s,
            None => match self.l2_slot(m, i)? {
                Some((s, _)) => s,
                None => return Ok(()),
            },
        };
        let (cb, cs, limit) = (self.hdr.cluster_bits, self.cs, m.limit);
        let d = &m.cache.slot(slot).data;
        for (k, h) in out.iter_mut().enumerate() {
            let j = (j0 + k) * 8;
            let raw = u64::from_be_bytes(d[j..j + 8].try_into().expect("8 bytes"));
            if let Ok(Cluster::Normal { host, copied: true }) = Cluster::decode(raw, cb, false) {
                if host.checked_add(cs).is_some_and(|end| end <= limit) {
                    *h = host;
                }
            }
        }
        Ok(())
    }
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
                Source::Data(host) if host + n <= m.limit => hq.clones.push(done, n, host),
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
                    hq.clones.push(done, n, host + at)
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

    /// Bring the queue's slices of the clusters of `[start, start + len)`
    /// up to date (under the lock, after the request changed them).
    fn refresh(&self, hq: &mut Qcow2Queue, m: &mut Meta, start: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let img = &self.img;
        let gen = img.mapped.gen.load(Ordering::Relaxed);
        let cb = img.hdr.cluster_bits;
        for gc in start >> cb..=(start + len - 1) >> cb {
            if hq.slices.holds(gc, gen) {
                let mut one = [0u64];
                img.plain_hosts(m, gc, &mut one)?;
                hq.slices.patch(gc, gen, one[0]);
            } else {
                hq.slices
                    .fill(gc, gen, |first, out| img.plain_hosts(m, first, out))?;
            }
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

    /// Plan `rq` under the metadata lock, and count its clones.
    fn plan_locked(&self, hq: &mut Qcow2Queue, rq: &mut Request) -> Result<()> {
        let mut m = self.img.lock();
        let (start, len) = (rq.offset_bytes(), rq.len_bytes());
        let r = match rq.op() {
            Op::Flush => self.img.writeback(&mut m),
            Op::Read => self
                .plan_read(hq, rq, &mut m)
                .and_then(|()| self.refresh(hq, &mut m, start, len)),
            Op::Write => self
                .plan_write(hq, rq, &mut m)
                .and_then(|()| self.refresh(hq, &mut m, start, len)),
            Op::Discard | Op::WriteZeroes => self.zero(rq, &mut m),
        };
        // Counted while the mapping it was planned on still holds.
        if r.is_ok() && !hq.clones.is_empty() {
            hq.clones.count_locked(m.epoch);
        }
        r
    }
}

impl Driver for Qcow2Driver {
    type HwQueue = Qcow2Queue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> std::result::Result<Qcow2Queue, Error> {
        let depth = (setup.queue_depth + setup.reserved_tags) as usize;
        let img = &self.img;
        let mut ctx = img.data_device().context()?;
        let notifier: HwNotifier = setup.notifier;
        ctx.forward_completions(&notifier);
        if img.data_device().has_irq_lines() {
            ctx.forward_irq_lines(&setup.irq_lines)?;
        }
        let slice_bytes = img.lock().cache.capacity() as u64 * img.cs;
        Ok(Qcow2Queue {
            clones: Clones::new(ctx, depth, img.mapped.register()),
            slices: Slices::new(slice_bytes, img.l2_bits, !img.hdr.extended_l2()),
            scratch: vec![0u8; img.cs as usize],
            img: img.clone(),
        })
    }

    fn queue_rq(
        &self,
        hq: &mut Qcow2Queue,
        mut rq: RqRef,
        last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        hq.clones.clear();
        let mapped = matches!(rq.op(), Op::Read | Op::Write)
            && hq
                .clones
                .plan_mapped(&rq, &hq.slices, &self.img.mapped, self.img.hdr.cluster_bits);
        let r = if mapped {
            hq.slices.hits += 1;
            Ok(())
        } else {
            hq.slices.misses += 1;
            self.plan_locked(hq, &mut rq)
        };
        match r {
            Err(e) => {
                let s = self.failed(e);
                done.complete(rq, s);
            }
            Ok(()) if hq.clones.is_empty() => done.complete(rq, Status::Ok),
            Ok(()) => hq.clones.send(rq, done),
        }
        if last {
            hq.clones.ctx.unplug();
            self.poll(hq, done);
        }
        QueueRq::Issued
    }

    fn commit_rqs(&self, hq: &mut Qcow2Queue) {
        hq.clones.ctx.unplug();
    }

    fn poll(&self, hq: &mut Qcow2Queue, done: &mut Completions<'_>) -> usize {
        hq.clones.reap(done)
    }

    fn limits(&self) -> QueueLimits {
        let lower = self.img.data_device().limits();
        let chunk = (self.img.cs / 512) as u32;
        QueueLimits {
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
