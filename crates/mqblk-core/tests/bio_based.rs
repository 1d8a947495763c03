//! A bio-based device (`Device::new_bio_based`) over the public API: a toy
//! driver that concatenates two memory disks, cutting each bio at the
//! boundary into clones built in place in its lower contexts, ending the
//! bio when its last clone has, and asking for a requeue of every fifth
//! bio once; with routing on, a bio that lies in one half goes down itself
//! (`BioDriver::route`), no clone. Checked against a plain model: every
//! bio ends exactly once, with the right status and data, and the device's
//! stats count bios.
//! Runs under Miri (no syscall on this path but the futex of a wait).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use common::{mem_device, Order};
use mqblk_core::bio_based::{BioDriver, BioEnds, BioQueueSetup, BioRef, Lower, Routed};
use mqblk_core::driver::{Error, Features, Op, QueueLimits, Status};
use mqblk_core::{Bio, Context, Device, DeviceConfig};

const HALF: u64 = 64 << 10;

struct Concat {
    lower: [Device; 2],
    requeues: Arc<AtomicU32>,
    /// Route a bio that lies in one half (`None`: never route).
    routed: Option<Arc<AtomicU32>>,
}

struct Cut {
    tag: u32,
}

struct ConcatQueue {
    ctx: [Context; 2],
    devnum: mqblk_core::DevNum,
    /// By the bio's slot: clones in flight, and the first error.
    remaining: Vec<(u32, Status)>,
    cuts: Vec<Cut>,
    free: Vec<u32>,
    requeued: Vec<bool>,
}

fn finish(q_remaining: &mut [(u32, Status)], tag: u32, s: Status, ends: &mut BioEnds<'_>) {
    let r = &mut q_remaining[tag as usize];
    if !s.is_ok() && r.1.is_ok() {
        r.1 = s;
    }
    assert!(r.0 > 0, "a clone of bio {tag} ended twice");
    r.0 -= 1;
    if r.0 == 0 {
        ends.end(tag, r.1);
    }
}

impl BioDriver for Concat {
    type Queue = ConcatQueue;

    fn open_queue(&self, setup: BioQueueSetup) -> Result<ConcatQueue, Error> {
        let mut ctx = [self.lower[0].context()?, self.lower[1].context()?];
        for c in &mut ctx {
            c.forward_completions(&setup.notifier);
        }
        Ok(ConcatQueue {
            ctx,
            devnum: setup.devnum,
            remaining: vec![(0, Status::Ok); setup.slots as usize],
            cuts: Vec::new(),
            free: Vec::new(),
            requeued: vec![false; setup.slots as usize],
        })
    }

    fn submit_bio(&self, q: &mut ConcatQueue, bio: BioRef<'_>, ends: &mut BioEnds<'_>) {
        let tag = bio.tag();
        let (op, off, len) = (
            bio.bio().op(),
            bio.bio().offset_bytes(),
            bio.bio().len_bytes(),
        );
        if op != Op::Flush && off / 4096 % 5 == 0 && !q.requeued[tag as usize] {
            q.requeued[tag as usize] = true;
            self.requeues.fetch_add(1, Ordering::Relaxed);
            ends.requeue(tag);
            return;
        }
        q.requeued[tag as usize] = false;
        // (leg, offset in the bio, length, offset on the leg)
        let mut pieces = Vec::with_capacity(2);
        if op == Op::Flush {
            pieces.push((0, 0, 0, 0));
            pieces.push((1, 0, 0, 0));
        } else {
            let end = off + len;
            if off < HALF {
                pieces.push((0, 0, end.min(HALF) - off, off));
            }
            if end > HALF {
                let from = off.max(HALF);
                pieces.push((1, from - off, end - from, from - HALF));
            }
        }
        q.remaining[tag as usize] = (pieces.len() as u32 + 1, Status::Ok);
        for (leg, at, n, leg_off) in pieces {
            let slot = match q.free.pop() {
                Some(s) => {
                    q.cuts[s as usize] = Cut { tag };
                    s
                }
                None => {
                    q.cuts.push(Cut { tag });
                    q.cuts.len() as u32 - 1
                }
            };
            let fill = |b: &mut Bio| {
                // SAFETY: the bio ends (through `finish`) only after this
                // clone has been reaped; the two pieces are disjoint.
                unsafe { bio.clone_range_into(b, at, n, leg_off) };
                b.private = u64::from(slot);
            };
            if let Err(fill) = q.ctx[leg].submit_remapped_with(fill, q.devnum, 0) {
                // The toy's lower contexts are never full: it polls them
                // each time the core does.
                let mut b = Bio::at(Op::Read, 0);
                fill(&mut b);
                drop(b);
                q.free.push(slot);
                finish(&mut q.remaining, tag, Status::Resource, ends);
            }
        }
        finish(&mut q.remaining, tag, Status::Ok, ends);
    }

    fn routes(&self) -> bool {
        self.routed.is_some()
    }

    fn route<'q>(
        &self,
        q: &'q mut ConcatQueue,
        _op: Op,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Option<Routed<'q>> {
        let routed = self.routed.as_ref()?;
        let half = (offset_bytes / HALF) as usize;
        if (offset_bytes + len_bytes - 1) / HALF != half as u64 {
            return None;
        }
        routed.fetch_add(1, Ordering::Relaxed);
        Some(Routed {
            lower: &mut q.ctx[half] as &mut dyn Lower,
            offset_bytes: offset_bytes - half as u64 * HALF,
            cookie: half as u64,
        })
    }

    fn lower_contexts(&self, q: &mut ConcatQueue, f: &mut dyn FnMut(&mut dyn Lower)) {
        for c in &mut q.ctx {
            f(c);
        }
    }

    fn unplug(&self, q: &mut ConcatQueue) {
        for c in &mut q.ctx {
            c.unplug();
        }
    }

    fn poll(&self, q: &mut ConcatQueue, ends: &mut BioEnds<'_>) -> usize {
        let ConcatQueue {
            ctx,
            remaining,
            cuts,
            free,
            ..
        } = q;
        let mut n = 0;
        for c in ctx.iter_mut() {
            n += c.poll(|done| {
                let slot = done.private() as u32;
                free.push(slot);
                finish(remaining, cuts[slot as usize].tag, done.status(), ends);
            });
        }
        n
    }

    fn limits(&self) -> QueueLimits {
        QueueLimits::default()
    }

    fn features(&self) -> Features {
        Features::default()
    }
}

/// A lower disk's memory.
type Memory = Arc<Mutex<Vec<u8>>>;

fn concat(order: Order) -> (Device, [Memory; 2], Arc<AtomicU32>) {
    concat_routing(order, None)
}

fn concat_routing(
    order: Order,
    routed: Option<Arc<AtomicU32>>,
) -> (Device, [Memory; 2], Arc<AtomicU32>) {
    let (a, da, _) = mem_device(HALF as usize, order);
    let (b, db, _) = mem_device(HALF as usize, order);
    let requeues = Arc::new(AtomicU32::new(0));
    let dev = Device::new_bio_based(
        Concat {
            lower: [a, b],
            requeues: requeues.clone(),
            routed,
        },
        DeviceConfig::new("concat", 2 * HALF),
    )
    .unwrap();
    (dev, [da, db], requeues)
}

/// A small deterministic generator (no dependency for a test's offsets).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn bios_cut_across_two_devices_end_once_with_their_data() {
    cut_across(None);
}

/// The same with routing: a bio in one half goes down itself, into the
/// lower context's request (or a slot there, the first time the lower
/// context passes its gate), and comes back up through the reap.
#[test]
fn bios_routed_whole_end_once_with_their_data() {
    let routed = Arc::new(AtomicU32::new(0));
    cut_across(Some(routed.clone()));
    assert!(routed.load(Ordering::Relaxed) > 0, "no bio was routed");
}

fn cut_across(routed: Option<Arc<AtomicU32>>) {
    let rounds = if cfg!(miri) { 3 } else { 40 };
    for order in [Order::Inline, Order::Reversed] {
        let (dev, disks, requeues) = concat_routing(order, routed.clone());
        assert!(dev.is_bio_based());
        let mut model = vec![0u8; 2 * HALF as usize];
        let mut ctx = dev.context().unwrap();
        let mut rng = Lcg(7);
        for round in 0..rounds {
            // A batch of writes to distinct blocks, some across the cut.
            let mut ended: HashMap<u64, u32> = HashMap::new();
            let mut used = Vec::new();
            for i in 0..6u64 {
                let blocks = 1 + rng.next(4);
                let mut at = rng.next(2 * HALF / 4096 - blocks) * 4096;
                if i == 0 {
                    at = HALF - 4096; // always one across the cut
                }
                let span = at..at + blocks * 4096;
                if used
                    .iter()
                    .any(|u: &std::ops::Range<u64>| u.start < span.end && span.start < u.end)
                {
                    continue;
                }
                used.push(span.clone());
                let mut buf = dev.alloc_buf((blocks * 4096) as usize);
                // Each 512-byte sector one value, filled a sector at a time
                // (a byte loop is minutes under Miri).
                for (k, sector) in buf.as_mut_slice().chunks_mut(512).enumerate() {
                    sector.fill((round as u64 * 31 + i * 7 + k as u64) as u8);
                }
                model[span.start as usize..span.end as usize].copy_from_slice(buf.as_slice());
                let mut bio = Bio::write_at(at, buf);
                bio.private = i;
                ctx.submit(bio).unwrap();
            }
            ctx.submit({
                let mut f = Bio::flush();
                f.private = 100;
                f
            })
            .unwrap();
            let want = used.len() + 1;
            let mut got = 0;
            while got < want {
                got += ctx.poll_wait(1, |c| {
                    assert!(c.result().is_ok(), "{:?}", c.result());
                    *ended.entry(c.private()).or_default() += 1;
                });
            }
            assert!(ended.values().all(|&n| n == 1), "{ended:?}");
            assert_eq!(ended.len(), want);
            // Read back every block written, in one bio across the cut and
            // in blocks.
            let mut back = vec![0u8; 2 * HALF as usize];
            let step = 16 << 10;
            for at in (0..2 * HALF).step_by(step) {
                ctx.read_at(&mut back[at as usize..at as usize + step], at)
                    .unwrap();
            }
            assert!(back == model, "round {round}: data differ from the model");
        }
        // The lower devices hold the halves.
        assert!(disks[0].lock().unwrap()[..] == model[..HALF as usize]);
        assert!(disks[1].lock().unwrap()[..] == model[HALF as usize..]);
        assert!(requeues.load(Ordering::Relaxed) > 0, "no bio was requeued");
        // The device counted bios, and nothing is left in flight.
        let s = ctx.stats();
        assert_eq!(ctx.in_flight(), 0);
        assert!(s.bios > 0);
        assert_eq!(s.requests, 0, "a bio-based device builds no request");
    }
}

#[test]
fn a_bio_past_the_end_fails_typed_and_never_reaches_the_driver() {
    let (dev, _, _) = concat(Order::Inline);
    let mut ctx = dev.context().unwrap();
    let buf = vec![0u8; 4096];
    let e = ctx.write_at(&buf, 2 * HALF).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("concat"), "{msg}");
    assert!(msg.contains(&(2 * HALF).to_string()), "{msg}");
}
