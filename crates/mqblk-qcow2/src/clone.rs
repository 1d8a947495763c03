//! A request's clones (Linux `bio_split` of a clone, as dm does): the
//! pieces of a request that map to data in the file go down to the file
//! device as clone bios that view the request's memory (zero copy), on
//! this hardware queue's own context; the request completes when its last
//! clone has ended. Pieces that are contiguous in the file as in the
//! request go down as one clone. Also the lock-free plan of a request
//! whose clusters the queue's L2 slices ([`crate::slice`]) all hold as
//! data written in place.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mqblk_core::driver::{Completions, Request, RqRef, Status};
use mqblk_core::{Bio, Context};

use crate::file::{InFlight, Mapped};
use crate::slice::Slices;

/// A request waiting for its clones.
struct Parent {
    rq: RqRef,
    pending: u32,
    status: Status,
}

/// One hardware queue's clones: a context on the file device, the
/// requests in flight by tag, the plan of one request, and the queue's
/// counts of I/O in flight.
pub struct Clones {
    pub(crate) ctx: Context,
    parents: Vec<Option<Parent>>,
    /// (offset in the request, length, file offset) of each clone.
    plan: Vec<(u64, u64, u64)>,
    /// The epoch the planned clones are counted in.
    epoch: usize,
    in_flight: Arc<InFlight>,
    /// Clones sent.
    pub sent: u64,
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
    let Some(p) = parents.get_mut(tag as usize).and_then(Option::as_mut) else {
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

impl Clones {
    /// For a queue of `depth` tags, sending on `ctx`, counting in
    /// `in_flight`.
    pub(crate) fn new(ctx: Context, depth: usize, in_flight: Arc<InFlight>) -> Self {
        Clones {
            ctx,
            parents: (0..depth).map(|_| None).collect(),
            // Sized so that a request of up to 64 discontiguous pieces
            // never grows it on the data path.
            plan: Vec::with_capacity(64),
            epoch: 0,
            in_flight,
            sent: 0,
        }
    }

    /// Forget the plan.
    pub(crate) fn clear(&mut self) {
        self.plan.clear();
    }

    /// Whether nothing is planned.
    pub(crate) fn is_empty(&self) -> bool {
        self.plan.is_empty()
    }

    /// Plan `len` bytes at `at` in the request to go to file offset
    /// `host`: onto the piece before it if both are contiguous.
    pub(crate) fn push(&mut self, at: u64, len: u64, host: u64) {
        if let Some(last) = self.plan.last_mut() {
            if last.0 + last.1 == at && last.2 + last.1 == host {
                last.1 += len;
                return;
            }
        }
        self.plan.push((at, len, host));
    }

    /// Count the planned clones in `epoch` (under the metadata lock).
    pub(crate) fn count_locked(&mut self, epoch: usize) {
        self.epoch = epoch;
        self.in_flight.0[epoch].fetch_add(self.plan.len() as u64, Ordering::SeqCst);
    }

    /// Plan the read or write `rq` without the metadata lock, if every
    /// cluster it touches is held by `slices` as data written in place
    /// (clusters of `1 << cluster_bits` bytes), and count its clones.
    /// `false`: plan it under the lock (nothing is planned or counted).
    pub(crate) fn plan_mapped(
        &mut self,
        rq: &Request,
        slices: &Slices,
        mapped: &Mapped,
        cluster_bits: u32,
    ) -> bool {
        let gen = mapped.gen.load(Ordering::Acquire);
        let cs = 1u64 << cluster_bits;
        let (start, len) = (rq.offset_bytes(), rq.len_bytes());
        let mut done = 0;
        while done < len {
            let off = start + done;
            let at = off & (cs - 1);
            let n = (len - done).min(cs - at);
            let Some(host) = slices.host(off >> cluster_bits, gen) else {
                self.plan.clear();
                return false;
            };
            self.push(done, n, host + at);
            done += n;
        }
        // Counted, then checked: see `Mapped`.
        let epoch = mapped.epoch.load(Ordering::Relaxed);
        let n = self.plan.len() as u64;
        self.in_flight.0[epoch].fetch_add(n, Ordering::SeqCst);
        if mapped.gen.load(Ordering::SeqCst) != gen {
            self.in_flight.0[epoch].fetch_sub(n, Ordering::SeqCst);
            self.plan.clear();
            return false;
        }
        self.epoch = epoch;
        true
    }

    /// Send the planned clones of `rq` (counted); complete it when they end.
    pub(crate) fn send(&mut self, rq: RqRef, done: &mut Completions<'_>) {
        let tag = rq.tag();
        let req: *const Request = &*rq;
        debug_assert!((tag as usize) < self.parents.len());
        debug_assert!(self.parents[tag as usize].is_none());
        self.sent += self.plan.len() as u64;
        self.parents[tag as usize] = Some(Parent {
            rq,
            pending: self.plan.len() as u32 + 1,
            status: Status::Ok,
        });
        for k in 0..self.plan.len() {
            let (at, n, host) = self.plan[k];
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
            bio.private = u64::from(tag) | (self.epoch as u64) << 32;
            let bio = match self.ctx.submit(bio) {
                Ok(()) => continue,
                Err(e) => e.into_bio(),
            };
            // The file context holds completions nobody polled: reap them
            // and try once more.
            self.reap(done);
            if let Err(e) = self.ctx.submit(bio) {
                drop(e);
                self.in_flight.0[self.epoch].fetch_sub(1, Ordering::Release);
                finish(&mut self.parents, tag, Status::IoError, done);
            }
        }
        finish(&mut self.parents, tag, Status::Ok, done);
    }

    /// Reap the file context's completions; the number of requests
    /// completed.
    pub(crate) fn reap(&mut self, done: &mut Completions<'_>) -> usize {
        let Clones {
            ctx,
            parents,
            in_flight,
            ..
        } = self;
        let mut n = 0;
        ctx.poll(|c| {
            in_flight.0[(c.private() >> 32) as usize & 1].fetch_sub(1, Ordering::Release);
            n += finish(parents, c.private() as u32, c.status(), done)
        });
        n
    }
}

#[cfg(test)]
mod tests {
    //! The clones' unsafe block and the lock-free plan, driven through
    //! the core over an in-memory lower device (the ram driver: no
    //! io_uring, no files), so that Miri runs them:
    //! `cargo +nightly miri test -p mqblk-qcow2 --lib clone`.

    use std::io::{IoSlice, IoSliceMut};

    use mqblk_core::driver::{Driver, Error, HwQueueSetup, QueueRq};
    use mqblk_core::queue::{Device, DeviceConfig};

    use super::*;

    /// 4 KiB clusters.
    const CLUSTER_BITS: u32 = 12;
    const CS: usize = 1 << CLUSTER_BITS;
    /// Host cluster of each guest cluster: 0 and 1 contiguous, 2 apart,
    /// 3 right after 2.
    const MAP: [u64; 4] = [2, 3, 7, 8];

    /// A driver with a fixed mapping: every request is planned from the
    /// queue's slices, as the qcow2 driver's read or overwrite of plain
    /// data clusters is; a request it cannot plan that way fails.
    struct Mapper {
        lower: Device,
        mapped: Arc<Mapped>,
    }

    struct MapperQueue {
        clones: Clones,
        slices: Slices,
        mapped: Arc<Mapped>,
    }

    impl Drop for MapperQueue {
        fn drop(&mut self) {
            self.mapped
                .clones_sent
                .fetch_add(self.clones.sent, Ordering::Relaxed);
        }
    }

    impl Driver for Mapper {
        type HwQueue = MapperQueue;

        fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<MapperQueue, Error> {
            let depth = (setup.queue_depth + setup.reserved_tags) as usize;
            let mut ctx = self.lower.context()?;
            ctx.forward_completions(&setup.notifier);
            let mut slices = Slices::new(16 << 10, 9, true);
            slices
                .fill(0, 0, |first, out| {
                    assert_eq!(first, 0);
                    out.fill(0);
                    for (h, &m) in out.iter_mut().zip(MAP.iter()) {
                        *h = m << CLUSTER_BITS;
                    }
                    Ok::<(), ()>(())
                })
                .expect("filled");
            Ok(MapperQueue {
                clones: Clones::new(ctx, depth, self.mapped.register()),
                slices,
                mapped: self.mapped.clone(),
            })
        }

        fn queue_rq(
            &self,
            hq: &mut MapperQueue,
            rq: RqRef,
            last: bool,
            done: &mut Completions<'_>,
        ) -> QueueRq {
            hq.clones.clear();
            if hq
                .clones
                .plan_mapped(&rq, &hq.slices, &self.mapped, CLUSTER_BITS)
            {
                hq.clones.send(rq, done);
            } else {
                done.complete(rq, Status::IoError);
            }
            if last {
                hq.clones.ctx.unplug();
                hq.clones.reap(done);
            }
            QueueRq::Issued
        }

        fn commit_rqs(&self, hq: &mut MapperQueue) {
            hq.clones.ctx.unplug();
        }

        fn poll(&self, hq: &mut MapperQueue, done: &mut Completions<'_>) -> usize {
            hq.clones.reap(done)
        }
    }

    fn ram(spec: &str) -> Device {
        let s = mqblk_core::spec::parse(spec).expect("spec");
        mqblk_ram::open(s.options).expect("ram device")
    }

    fn mapper() -> (Device, Device, Arc<Mapped>) {
        let lower = ram("ram,size=64k,hw_queues=1");
        let mapped = Arc::new(Mapped::default());
        let mut cfg = DeviceConfig::new("mapper", MAP.len() as u64 * CS as u64);
        cfg.nr_hw_queues = 1;
        let dev = Device::new(
            Mapper {
                lower: lower.clone(),
                mapped: mapped.clone(),
            },
            cfg,
        )
        .expect("mapper device");
        (dev, lower, mapped)
    }

    #[test]
    fn a_write_and_a_read_across_clusters_go_down_as_clones_of_contiguous_runs() {
        let (dev, lower, mapped) = mapper();
        let mut ctx = dev.context().expect("context");
        // Two segments, each crossing a cluster: 2 KiB to 14 KiB of the
        // guest, over guest clusters 0 to 3.
        let a: Vec<u8> = (0..6 * 1024).map(|k| (k % 251) as u8).collect();
        let b: Vec<u8> = (0..6 * 1024).map(|k| (k % 241) as u8 ^ 0x5a).collect();
        ctx.writev_at(&[IoSlice::new(&a), IoSlice::new(&b)], 2048)
            .expect("write across clusters");
        let want: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        // The data landed where the map says, cluster by cluster.
        let mut lctx = lower.context().expect("lower context");
        for (gc, &hc) in MAP.iter().enumerate() {
            let (lo, hi) = ((gc * CS).max(2048), ((gc + 1) * CS).min(2048 + want.len()));
            let mut host = vec![0u8; hi - lo];
            let at = (hc << CLUSTER_BITS) + (lo - gc * CS) as u64;
            lctx.read_at(&mut host, at).expect("lower read");
            assert_eq!(host, want[lo - 2048..hi - 2048], "guest cluster {gc}");
        }
        // A read across the same clusters, into two buffers that split
        // elsewhere, reads it back.
        let (mut x, mut y) = (vec![0u8; 5000], vec![0u8; want.len() - 5000]);
        ctx.readv_at(
            &mut [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)],
            2048,
        )
        .expect("read across clusters");
        assert_eq!(x, want[..5000]);
        assert_eq!(y, want[5000..]);
        // Every clone was counted and has ended.
        assert_eq!(mapped.in_flight(0) + mapped.in_flight(1), 0);
        // Each request went down as two clones: guest clusters 0 and 1
        // are contiguous in the file, and so are 2 and 3.
        drop(ctx);
        drop(dev);
        assert_eq!(mapped.clones_sent.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn pieces_merge_only_where_contiguous_in_the_file_and_the_request() {
        let lower = ram("ram,size=4k,hw_queues=1");
        let mut c = Clones::new(
            lower.context().expect("context"),
            1,
            Arc::new(InFlight::default()),
        );
        c.push(0, 4096, 8192);
        c.push(4096, 4096, 12288);
        c.push(8192, 4096, 28672);
        c.push(12288, 512, 32768);
        c.push(16384, 512, 33280);
        assert_eq!(
            c.plan,
            vec![(0, 8192, 8192), (8192, 4608, 28672), (16384, 512, 33280)]
        );
    }

    #[test]
    fn a_newer_generation_sends_the_request_the_locked_way() {
        let (dev, _lower, mapped) = mapper();
        let mut ctx = dev.context().expect("context");
        let mut buf = vec![0u8; 8192];
        ctx.read_at(&mut buf, 0).expect("planned from the slices");
        // A discard of a data cluster raises the generation: the slices
        // copied before it are not trusted (the mapper fails the request
        // where the qcow2 driver plans it under the lock).
        mapped.bump();
        assert!(ctx.read_at(&mut buf, 0).is_err());
        assert_eq!(mapped.in_flight(0) + mapped.in_flight(1), 0);
    }
}
