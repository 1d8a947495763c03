//! What the bio-based stacked driver keeps: the driver (its table, legs
//! and the routes it runs inline) and each context's queue (its leg
//! contexts, opened here on first use, the remaining count of each bio,
//! the clones in flight). The bottom of `bio_based/`: submission and
//! completion both work on these.

use crate::held::Held;
use crate::legs::LegId;
use crate::map::Mapper;
use crate::stacked::Stacked;
use crate::target::target_type::{Io, Target};
use crate::target::{Mirror, MirrorReads, MirrorWrites, StripeMap, Striped};
use mqblk_core::clone_set::CloneSet;
use mqblk_core::driver::{Error, HwNotifier, IrqLines, Op, Status};
use mqblk_core::{Bio, Context};

/// The bio-based driver of a stacked device: the table, legs and limits
/// the request-based driver has, mapped per bio instead of per request.
pub(crate) struct BioStacked {
    pub(crate) stack: Stacked,
    /// A leg has interrupt lines (a polled device a context sleeps on).
    pub(crate) lines_below: bool,
    /// A line may route a write ([`Target::route`]: not a mirror's).
    pub(crate) routes_writes: bool,
    /// The table is one line from sector 0 whose target routes by
    /// arithmetic on data it can hand out (a stripe's geometry, a
    /// mirror's read turns): kept here, so a bio is routed inline, with
    /// no call through the target.
    pub(crate) fast: Option<FastRoute>,
    /// The table is one mirror line from sector 0: its writes are mapped
    /// inline, and its write children ended inline.
    pub(crate) fast_writes: Option<MirrorWrites>,
}

/// The route of a one-line table whose target routes by arithmetic on
/// data it can hand out, kept by the driver to route inline, with no call
/// through the target: the same code the target's own
/// [`Target::route`](crate::target::Target::route) runs.
#[derive(Clone, Debug)]
pub(crate) enum FastRoute {
    /// A stripe's chunks (`striped`).
    Stripe(StripeMap),
    /// A mirror's reads, each to one live leg in turn (`mirror`).
    MirrorRead(MirrorReads),
}

impl FastRoute {
    /// The inline writes of `target`, if it is a mirror.
    pub(crate) fn writes_of(target: &dyn Target) -> Option<MirrorWrites> {
        let m = target.as_any()?.downcast_ref::<Mirror>()?;
        Some(m.writes())
    }

    /// The fast route of `target`, if it has one.
    pub(crate) fn of(target: &dyn Target) -> Option<FastRoute> {
        let any = target.as_any()?;
        if let Some(s) = any.downcast_ref::<Striped>() {
            return Some(FastRoute::Stripe(s.geometry().clone()));
        }
        any.downcast_ref::<Mirror>()
            .map(|m| FastRoute::MirrorRead(m.reads()))
    }

    /// As [`Target::route`](crate::target::Target::route).
    #[inline(always)]
    pub(super) fn route(
        &self,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
        hwq: u16,
    ) -> Option<(LegId, u64)> {
        match self {
            FastRoute::Stripe(m) => m.route(offset_bytes, len_bytes),
            FastRoute::MirrorRead(m) => m.route(op, offset_bytes, len_bytes, hwq),
        }
    }
}

/// A context on a leg, opened on first use.
// One per leg, in a vector: a box would cost an indirection per clone.
#[allow(clippy::large_enum_variant)]
pub(super) enum LegCtx {
    /// Not sent to yet from this context.
    Closed,
    Open(Context),
    /// The leg is out of the table, or its context could not be opened.
    Out,
}

/// What a bio waits for: its clones in flight (plus one while they are
/// being sent), and the first error among them.
#[derive(Clone, Copy)]
pub(super) struct Remaining {
    pub(super) pending: u32,
    pub(super) status: Status,
}

/// A clone in flight.
#[derive(Clone, Copy)]
pub(super) struct ClonedIo {
    /// The bio's slot on the stacked device.
    pub(super) tag: u32,
    pub(super) line: u32,
    pub(super) leg: LegId,
    pub(super) io: Io,
}

/// One context's state on a bio-based stacked device.
pub(crate) struct DmQueue {
    /// The hardware queue of the context, which targets that balance
    /// (a mirror's reads) are told.
    pub(super) who: u16,
    /// The stacked device's number, which the legs' traces name as where
    /// a clone came from.
    pub(super) devnum: mqblk_core::DevNum,
    pub(super) notifier: HwNotifier,
    /// The lines the context's completion fd watches: a leg context on a
    /// polled device forwards its own here.
    pub(super) irq: IrqLines,
    pub(super) generation: u64,
    pub(super) legs: Vec<LegCtx>,
    /// Legs sent to since the last unplug.
    pub(super) touched: Vec<bool>,
    /// By the bio's slot.
    pub(super) remaining: Box<[Remaining]>,
    pub(super) clones: Vec<ClonedIo>,
    pub(super) free: Vec<u32>,
    pub(super) mapper: Mapper,
    /// Clones to send again, to another leg.
    pub(super) retry: Vec<(u32, Bio)>,
    pub(super) held: Held,
    /// Leg contexts taken out of the table (a leg replaced) that still
    /// hold routed bios the context above has not taken back up.
    pub(super) retired: Vec<Context>,
    /// Slots for clones put into the legs' requests themselves (a
    /// mirror's writes), each naming its entry in `clones`. After the
    /// leg contexts: dropped once they have drained.
    pub(super) clone_set: CloneSet,
}

impl BioStacked {
    /// The context on `leg`, opened now if this is the first use.
    #[inline(always)]
    pub(super) fn leg_ctx<'q>(&self, q: &'q mut DmQueue, leg: usize) -> Option<&'q mut Context> {
        if !matches!(q.legs.get(leg), Some(LegCtx::Open(_))) {
            self.open_closed_leg(q, leg);
        }
        match q.legs.get_mut(leg) {
            Some(LegCtx::Open(c)) => Some(c),
            _ => None,
        }
    }

    /// Open the context on `leg` if this context has not sent to it yet.
    #[cold]
    #[inline(never)]
    pub(super) fn open_closed_leg(&self, q: &mut DmQueue, leg: usize) {
        if matches!(q.legs.get(leg), Some(LegCtx::Closed)) {
            q.legs[leg] = self.open_leg(leg, &q.notifier, &q.irq);
        }
    }

    #[cold]
    pub(super) fn open_leg(&self, leg: usize, notifier: &HwNotifier, irq: &IrqLines) -> LegCtx {
        let Some(dev) = self.stack.legs.get(leg as LegId) else {
            return LegCtx::Out;
        };
        let open = || -> Result<Context, Error> {
            let mut ctx = dev.context()?;
            ctx.forward_completions(notifier);
            if dev.has_irq_lines() {
                ctx.forward_irq_lines(irq)?;
            }
            Ok(ctx)
        };
        match open() {
            Ok(c) => LegCtx::Open(c),
            Err(e) => {
                eprintln!("mqblk: {}: leg {leg}: {e}", self.stack.name);
                LegCtx::Out
            }
        }
    }
}
