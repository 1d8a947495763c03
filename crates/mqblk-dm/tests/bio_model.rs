//! No lost or doubled completion (issue 36, item 4): random tables of
//! `linear`, `striped`, `zero`, `error` and `mirror` lines over ram legs,
//! and random bios (reads, writes, flushes, discards, write-zeroes) at
//! sector offsets that cross line and chunk boundaries, submitted several
//! at a time with [`Context::submit`] and reaped with
//! [`Context::poll_wait`]. Every bio completes exactly once, with the
//! status and the data of a plain in-memory model: the device as one array
//! of bytes, where an `error` line fails what touches it and a `zero` line
//! reads zeros and drops writes. Mirrors may have a failing leg (an
//! `error` table or a `flakey` one that is always down): reads that meet
//! it are retried on the other leg. The same tables and bios give the same
//! statuses and data on the bio-based driver and the request-based one
//! (`bio_remap=0`); and stacks of stacks (a stripe of mirrors, a partition
//! of a stripe) are bio-based at every level above the ram legs.
//!
//! A table line's fields are split on whitespace, so a table cannot name
//! an inline table (which has spaces) as its leg; `mqblk` does it with
//! `dm:FILE`, which Miri's isolation hides. Here a leg spec
//! `table:NAME` names a table that the test's opener holds.
//!
//! Only ram legs and in-memory tables: no syscall, so Miri runs all of it
//! (fewer cases and smaller devices under `cfg(miri)`).

use std::cell::RefCell;

use mqblk_core::spec::{parse, SpecOptions};
use mqblk_core::{Bio, Context, Device, Error, IoBuf, Op, Result, Status};
use mqblk_dm::Nesting;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Cases per property: Miri is about a thousand times slower.
const CASES: u32 = if cfg!(miri) { 4 } else { 128 };
/// Largest chunk, line and bio, in sectors.
const CHUNK_MAX: u64 = if cfg!(miri) { 16 } else { 64 };
const LINE_MAX: u64 = if cfg!(miri) { 16 } else { 64 };
const BIO_MAX: u64 = if cfg!(miri) { 24 } else { 96 };
/// Most bios per case.
const STEPS_MAX: usize = if cfg!(miri) { 8 } else { 32 };

// ---------------------------------------------------------------- tables

/// How a mirror's bad leg fails.
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// A table of one `error` line.
    Error,
    /// A `flakey` table over ram that is down from the start.
    Flakey,
}

#[derive(Clone, Debug)]
enum Kind {
    Linear,
    Striped {
        stripes: u64,
        chunk: u64,
    },
    Zero,
    Error,
    /// Over two legs, `nosync` (fresh ram legs are the same); leg `bad.0`
    /// fails, if `bad` is set.
    Mirror {
        region: u64,
        bad: Option<(usize, Bad)>,
    },
}

/// One line: its target and length, and where its legs' ranges start.
#[derive(Clone, Debug)]
struct LineSpec {
    kind: Kind,
    sectors: u64,
    pad: u64,
}

fn line_spec(bad_mirrors: bool) -> impl Strategy<Value = LineSpec> {
    let bad = if bad_mirrors {
        prop_oneof![
            2 => Just(None),
            1 => (0usize..2, prop_oneof![Just(Bad::Error), Just(Bad::Flakey)]).prop_map(Some),
        ]
        .boxed()
    } else {
        Just(None).boxed()
    };
    let kind = prop_oneof![
        (1u64..=LINE_MAX).prop_map(|n| (Kind::Linear, n)),
        (2u64..=3, 8u64..=CHUNK_MAX, 1u64..=2).prop_map(|(stripes, chunk, k)| (
            Kind::Striped { stripes, chunk },
            stripes * chunk * k
        )),
        (1u64..=LINE_MAX).prop_map(|n| (Kind::Zero, n)),
        (1u64..=LINE_MAX / 2).prop_map(|n| (Kind::Error, n)),
        (prop_oneof![Just(8u64), Just(16)], 1u64..=3, bad)
            .prop_map(|(region, k, bad)| (Kind::Mirror { region, bad }, region * k)),
    ];
    (kind, 0u64..=8).prop_map(|((kind, sectors), pad)| LineSpec { kind, sectors, pad })
}

/// What the model does with a range of the device.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Role {
    /// Mapped onto legs: holds what was written.
    Data,
    /// Reads zeros, drops writes.
    Zero,
    /// Fails every I/O that touches it.
    Error,
}

/// A table built from its lines: its text, the tables its legs name, and
/// the role of each range of sectors.
#[derive(Clone, Debug, Default)]
struct Built {
    text: String,
    tables: Vec<(String, String)>,
    roles: Vec<(u64, u64, Role)>,
    /// The bad legs of mirrors: `(table name, line start, line sectors)`.
    bad: Vec<(String, u64, u64)>,
}

impl Built {
    fn sectors(&self) -> u64 {
        self.roles.last().map_or(0, |r| r.1)
    }
}

/// Hands out ram specs that differ (the same spec twice in a table is one
/// device), with one or two hardware queues.
#[derive(Default)]
struct RamSpecs {
    last: u64,
}

impl RamSpecs {
    fn next(&mut self, sectors: u64) -> String {
        self.last = sectors.max(self.last + 1);
        format!(
            "ram,size={},hw_queues={}",
            self.last * 512,
            1 + self.last % 2
        )
    }
}

fn build(lines: &[LineSpec]) -> Built {
    let mut b = Built::default();
    let mut ram = RamSpecs::default();
    let mut start = 0u64;
    let mut text = Vec::new();
    for l in lines {
        let (n, pad) = (l.sectors, l.pad);
        let (role, body) = match &l.kind {
            Kind::Linear => (Role::Data, format!("linear {} {pad}", ram.next(n + pad))),
            Kind::Striped { stripes, chunk } => {
                let legs: Vec<String> = (0..*stripes)
                    .map(|_| format!("{} {pad}", ram.next(n / stripes + pad)))
                    .collect();
                (
                    Role::Data,
                    format!("striped {stripes} {chunk} {}", legs.join(" ")),
                )
            }
            Kind::Zero => (Role::Zero, "zero".to_string()),
            Kind::Error => (Role::Error, "error".to_string()),
            Kind::Mirror { region, bad } => {
                let mut legs = [ram.next(n + pad), ram.next(n + pad)];
                if let Some((which, how)) = bad {
                    let name = format!("bad{}", b.tables.len());
                    let inner = match how {
                        Bad::Error => format!("0 {} error", n + pad),
                        Bad::Flakey => {
                            format!("0 {} flakey {} 0 0 86400", n + pad, ram.next(n + pad))
                        }
                    };
                    b.tables.push((name.clone(), inner));
                    b.bad.push((name.clone(), start, n));
                    legs[*which] = format!("table:{name}");
                }
                (
                    Role::Data,
                    format!(
                        "mirror core 2 {region} nosync 2 {} {pad} {} {pad}",
                        legs[0], legs[1]
                    ),
                )
            }
        };
        text.push(format!("{start} {n} {body}"));
        b.roles.push((start, start + n, role));
        start += n;
    }
    b.text = text.join(";");
    b
}

fn table(bad_mirrors: bool) -> impl Strategy<Value = Built> {
    proptest::collection::vec(line_spec(bad_mirrors), 1..=4).prop_map(|l| build(&l))
}

/// Opens legs for the tables of one test: ram specs, and `table:NAME`
/// (a table it holds), each table bio-based or not as `bio_remap` says.
struct Opener {
    tables: Vec<(String, String)>,
    bio_remap: bool,
    opened: RefCell<Vec<(String, Device)>>,
}

impl Opener {
    fn new(tables: &[(String, String)], bio_remap: bool) -> Opener {
        Opener {
            tables: tables.to_vec(),
            bio_remap,
            opened: RefCell::new(Vec::new()),
        }
    }

    fn open_spec(&self, spec: &str, nesting: &Nesting) -> Result<Device> {
        let s = parse(spec)?;
        match (s.kind.as_str(), s.target) {
            ("ram", None) => mqblk_ram::open(s.options),
            ("table", Some(name)) => {
                let Some((_, text)) = self.tables.iter().find(|(n, _)| *n == name) else {
                    return Err(Error::spec(spec, "no such table in this test"));
                };
                let dev = self.open_table(text, nesting)?;
                self.opened.borrow_mut().push((name, dev.clone()));
                Ok(dev)
            }
            (other, _) => Err(Error::spec(spec, format!("no `{other}` in this test"))),
        }
    }

    fn open_table(&self, text: &str, nesting: &Nesting) -> Result<Device> {
        let mut opts = SpecOptions::empty(&format!("dm-table:{text}"));
        if !self.bio_remap {
            opts.set("bio_remap", "0");
        }
        mqblk_dm::open_inline(text, opts, nesting, &|spec, n| self.open_spec(spec, n))
    }

    fn open(&self, text: &str) -> Device {
        self.open_table(text, &Nesting::default())
            .unwrap_or_else(|e| panic!("table `{text}`: {e}"))
    }

    /// The table named `name`, once opened as a leg.
    fn opened(&self, name: &str) -> Device {
        let o = self.opened.borrow();
        o.iter().find(|(n, _)| n == name).expect("opened").1.clone()
    }
}

// ------------------------------------------------------------------ bios

#[derive(Clone, Debug)]
enum Step {
    Read {
        at: u64,
        len: u64,
        segs: u64,
    },
    Write {
        at: u64,
        len: u64,
        segs: u64,
        seed: u8,
    },
    Flush,
    Discard {
        at: u64,
        len: u64,
    },
    WriteZeroes {
        at: u64,
        len: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let at = 0u64..4096;
    let len = 1u64..=BIO_MAX;
    prop_oneof![
        4 => (at.clone(), len.clone(), 1u64..=3).prop_map(|(at, len, segs)| Step::Read { at, len, segs }),
        4 => (at.clone(), len.clone(), 1u64..=3, any::<u8>())
            .prop_map(|(at, len, segs, seed)| Step::Write { at, len, segs, seed }),
        1 => Just(Step::Flush),
        1 => (at.clone(), len.clone()).prop_map(|(at, len)| Step::Discard { at, len }),
        1 => (at, len).prop_map(|(at, len)| Step::WriteZeroes { at, len }),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step(), 1..=STEPS_MAX)
}

/// A bio, placed on a device of `cap` sectors: `sector..sector + sectors`
/// (both 0 for a flush), in `segs` segments.
#[derive(Clone, Copy, Debug)]
struct Io {
    op: Op,
    sector: u64,
    sectors: u64,
    segs: u64,
    seed: u8,
}

impl Io {
    fn place(step: &Step, cap: u64) -> Io {
        let (op, at, len, segs, seed) = match *step {
            Step::Read { at, len, segs } => (Op::Read, at, len, segs, 0),
            Step::Write {
                at,
                len,
                segs,
                seed,
            } => (Op::Write, at, len, segs, seed),
            Step::Flush => {
                return Io {
                    op: Op::Flush,
                    sector: 0,
                    sectors: 0,
                    segs: 0,
                    seed: 0,
                }
            }
            Step::Discard { at, len } => (Op::Discard, at, len, 0, 0),
            Step::WriteZeroes { at, len } => (Op::WriteZeroes, at, len, 0, 0),
        };
        let sector = at % cap;
        Io {
            op,
            sector,
            sectors: 1 + (len - 1) % (cap - sector),
            segs,
            seed,
        }
    }

    fn read(sector: u64, sectors: u64) -> Io {
        Io {
            op: Op::Read,
            sector,
            sectors,
            segs: 1,
            seed: 0,
        }
    }

    fn modifies(&self) -> bool {
        matches!(self.op, Op::Write | Op::Discard | Op::WriteZeroes)
    }

    fn range(&self) -> (usize, usize) {
        (
            self.sector as usize * 512,
            (self.sector + self.sectors) as usize * 512,
        )
    }

    /// Two bios whose order would change the outcome.
    fn conflicts(&self, o: &Io) -> bool {
        (self.modifies() || o.modifies())
            && self.sector < o.sector + o.sectors
            && o.sector < self.sector + self.sectors
    }

    /// The bytes a write carries: different in every sector and every
    /// write, so that a piece that lands in the wrong place shows.
    fn data(&self) -> Vec<u8> {
        let (start, end) = self.range();
        (start..end)
            .map(|b| ((b / 512) as u8).wrapping_mul(37) ^ (b as u8) ^ self.seed)
            .collect()
    }

    /// Byte lengths of its segments: whole sectors, the last takes the rest.
    fn seg_lens(&self) -> Vec<usize> {
        let segs = self.segs.clamp(1, self.sectors);
        let each = self.sectors / segs;
        (0..segs)
            .map(|i| {
                let n = if i + 1 == segs {
                    self.sectors - each * (segs - 1)
                } else {
                    each
                };
                n as usize * 512
            })
            .collect()
    }

    fn bio(&self, id: u64) -> Bio {
        let off = self.sector * 512;
        let mut bio = match self.op {
            Op::Read => {
                let mut bio = Bio::at(Op::Read, off);
                for n in self.seg_lens() {
                    let mut buf = IoBuf::new(n, 512);
                    // Not zeros: a zero line must fill them.
                    buf.as_mut_slice().fill(0xa5);
                    bio.push_segment(buf, 0, n as u32);
                }
                bio
            }
            Op::Write => {
                let mut bio = Bio::at(Op::Write, off);
                let data = self.data();
                let mut at = 0;
                for n in self.seg_lens() {
                    let mut buf = IoBuf::new(n, 512);
                    buf.as_mut_slice().copy_from_slice(&data[at..at + n]);
                    at += n;
                    bio.push_segment(buf, 0, n as u32);
                }
                bio
            }
            Op::Flush => Bio::flush(),
            Op::Discard => Bio::discard_at(off, self.sectors * 512),
            Op::WriteZeroes => Bio::write_zeroes_at(off, self.sectors * 512),
        };
        bio.private = id;
        bio
    }
}

/// Cut the bios into batches of at most `max` that may be in flight
/// together: none of a batch overlaps a write, discard or write-zeroes of
/// the same batch, so the model need not guess an order. With `apart`,
/// no two bios of a batch touch end to end either (so that none merge).
fn batches(ios: &[Io], max: usize, apart: bool) -> Vec<std::ops::Range<usize>> {
    let touch = |a: &Io, b: &Io| {
        a.op != Op::Flush
            && b.op != Op::Flush
            && (a.sector + a.sectors == b.sector || b.sector + b.sectors == a.sector)
    };
    let mut out = Vec::new();
    let mut start = 0;
    for i in 0..ios.len() {
        let clash = |o: &Io| o.conflicts(&ios[i]) || (apart && touch(o, &ios[i]));
        if i - start == max || ios[start..i].iter().any(clash) {
            out.push(start..i);
            start = i;
        }
    }
    if start < ios.len() {
        out.push(start..ios.len());
    }
    out
}

/// How one bio ended: its status, and for a read that succeeded, its data.
#[derive(Clone, Debug, PartialEq)]
struct Outcome {
    status: Status,
    data: Option<Vec<u8>>,
}

/// Submit `ios` on `ctx` in batches of at most `max` ([`batches`]).
fn run(
    ctx: &mut Context,
    ios: &[Io],
    max: usize,
) -> std::result::Result<Vec<Outcome>, TestCaseError> {
    run_in(ctx, ios, batches(ios, max, false))
}

/// Submit `ios` on `ctx`, a batch at a time, and reap each batch with
/// `poll_wait`. Fails unless every bio completed exactly once, and
/// nothing more was delivered after.
fn run_in(
    ctx: &mut Context,
    ios: &[Io],
    batches: Vec<std::ops::Range<usize>>,
) -> std::result::Result<Vec<Outcome>, TestCaseError> {
    let mut seen = vec![0u32; ios.len()];
    let mut out: Vec<Option<Outcome>> = vec![None; ios.len()];
    for batch in batches {
        for id in batch.clone() {
            if let Err(e) = ctx.submit(ios[id].bio(id as u64)) {
                return Err(TestCaseError::fail(format!(
                    "bio {id} not taken: {}",
                    e.error()
                )));
            }
        }
        let mut rounds = 0;
        loop {
            let left = batch.clone().filter(|&i| seen[i] == 0).count();
            if left == 0 {
                break;
            }
            rounds += 1;
            let n = ctx.poll_wait(left, |c| {
                let id = c.private() as usize;
                seen[id] += 1;
                let status = c.status();
                let data = (ios[id].op == Op::Read && status.is_ok()).then(|| {
                    c.into_bio()
                        .into_buffers()
                        .flat_map(|b| b.as_slice().to_vec())
                        .collect()
                });
                out[id] = Some(Outcome { status, data });
            });
            // Nothing came and nothing is in flight: a bio was lost.
            prop_assert!(
                (n > 0 || ctx.in_flight() > 0) && rounds < 1000,
                "batch {batch:?}: {left} bios never completed (in flight {}, {rounds} waits)",
                ctx.in_flight()
            );
        }
        for i in batch {
            prop_assert_eq!(
                seen[i],
                1,
                "bio {} ({:?}) completed {} times",
                i,
                ios[i],
                seen[i]
            );
        }
    }
    let late = ctx.poll(|c| seen[c.private() as usize] += 1);
    prop_assert_eq!(late, 0, "completions after every bio had ended: {:?}", seen);
    prop_assert_eq!(ctx.in_flight(), 0);
    Ok(out.into_iter().map(|o| o.expect("seen once")).collect())
}

// ----------------------------------------------------------------- model

/// The device as a plain array of bytes, and what each range does.
struct Model {
    data: Vec<u8>,
    roles: Vec<(u64, u64, Role)>,
}

impl Model {
    fn new(roles: &[(u64, u64, Role)]) -> Model {
        let sectors = roles.last().map_or(0, |r| r.1);
        Model {
            data: vec![0; sectors as usize * 512],
            roles: roles.to_vec(),
        }
    }

    fn touches(&self, io: &Io, role: Role) -> bool {
        self.roles
            .iter()
            .any(|&(s, e, r)| r == role && io.sector < e && s < io.sector + io.sectors)
    }

    fn status(&self, io: &Io) -> Status {
        if io.op != Op::Flush && self.touches(io, Role::Error) {
            Status::IoError
        } else {
            Status::Ok
        }
    }

    /// Apply a bio: its pieces on data lines land even when another piece
    /// failed on an error line (each clone ends on its own, as in Linux).
    fn apply(&mut self, io: &Io) {
        let data = match io.op {
            Op::Write => io.data(),
            Op::Discard | Op::WriteZeroes => vec![0; io.sectors as usize * 512],
            _ => return,
        };
        let (start, _) = io.range();
        for &(s, e, r) in &self.roles {
            if r != Role::Data {
                continue;
            }
            let lo = (s * 512).max(start as u64) as usize;
            let hi = (e * 512).min(start as u64 + data.len() as u64) as usize;
            if lo < hi {
                self.data[lo..hi].copy_from_slice(&data[lo - start..hi - start]);
            }
        }
    }

    /// Check each bio's outcome, in order, and apply it.
    fn check(&mut self, ios: &[Io], got: &[Outcome]) -> std::result::Result<(), TestCaseError> {
        for (i, (io, o)) in ios.iter().zip(got).enumerate() {
            prop_assert_eq!(o.status, self.status(io), "bio {} {:?}", i, io);
            if let Some(d) = &o.data {
                let (s, e) = io.range();
                prop_assert!(
                    d[..] == self.data[s..e],
                    "bio {} {:?} read other data",
                    i,
                    io
                );
            }
            self.apply(io);
        }
        Ok(())
    }

    /// Every range that reads, in one read each.
    fn readable(&self) -> impl Iterator<Item = Io> + '_ {
        self.roles
            .iter()
            .filter(|r| r.2 != Role::Error)
            .map(|&(s, e, _)| Io::read(s, e - s))
    }
}

/// Read back every range that reads, in one bio each.
fn read_all(ctx: &mut Context, model: &Model) -> std::result::Result<Vec<Outcome>, TestCaseError> {
    let ios: Vec<Io> = model.readable().collect();
    run(ctx, &ios, 1)
}

fn place(steps: &[Step], cap: u64) -> Vec<Io> {
    steps.iter().map(|s| Io::place(s, cap)).collect()
}

/// As [`place`], without discards when no line has legs: such a table
/// refuses them (see `a_table_without_legs_discards_what_its_lines_say`).
fn place_on(t: &Built, steps: &[Step]) -> Vec<Io> {
    let legs = t.roles.iter().any(|r| r.2 == Role::Data);
    place(steps, t.sectors())
        .into_iter()
        .filter(|io| legs || io.op != Op::Discard)
        .collect()
}

/// Run `ios` on `dev` against the model of `roles`, then read it all back.
fn check_device(
    dev: &Device,
    roles: &[(u64, u64, Role)],
    ios: &[Io],
    batch: usize,
) -> std::result::Result<Model, TestCaseError> {
    let mut model = Model::new(roles);
    prop_assert_eq!(dev.capacity_bytes(), model.data.len() as u64);
    let mut ctx = dev.context().unwrap();
    let got = run(&mut ctx, ios, batch)?;
    model.check(ios, &got)?;
    let all: Vec<Io> = model.readable().collect();
    let back = read_all(&mut ctx, &model)?;
    model.check(&all, &back)?;
    Ok(model)
}

// ------------------------------------------------------------ properties

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// Random tables over ram legs (mirrors with a failing leg among them)
    /// and random bios, several in flight: each completes once, with the
    /// model's status and data.
    #[test]
    fn every_bio_completes_once_as_the_model_says(
        t in table(true),
        steps in steps(),
        batch in 1usize..=6,
    ) {
        let opener = Opener::new(&t.tables, true);
        let dev = opener.open(&t.text);
        let one_linear = t.roles.len() == 1 && dev.remapped_from().is_some();
        prop_assert!(dev.is_bio_based() || one_linear, "{}", t.text);
        let ios = place_on(&t, &steps);
        check_device(&dev, &t.roles, &ios, batch)?;
    }

    /// A mirror with a failing leg, first read twice (the reads alternate
    /// between the legs, so one meets the bad leg), then random bios: the
    /// read that met the bad leg was retried on the other and returned the
    /// data; the bad leg is out, named with the read that took it out.
    #[test]
    fn a_mirror_read_that_meets_a_failing_leg_is_retried_on_the_other(
        region in prop_oneof![Just(8u64), Just(16)],
        regions in 1u64..=3,
        which in 0usize..2,
        how in prop_oneof![Just(Bad::Error), Just(Bad::Flakey)],
        before in proptest::option::of(line_spec(false)),
        steps in steps(),
        batch in 1usize..=6,
    ) {
        let mirror = LineSpec {
            kind: Kind::Mirror { region, bad: Some((which, how)) },
            sectors: region * regions,
            pad: 0,
        };
        let lines: Vec<LineSpec> = before.into_iter().chain([mirror]).collect();
        let t = build(&lines);
        let (bad, start, sectors) = t.bad[0].clone();
        let opener = Opener::new(&t.tables, true);
        let dev = opener.open(&t.text);
        prop_assert!(dev.is_bio_based());
        let first = [Io::read(start, 1), Io::read(start + sectors - 1, 1)];
        let ios: Vec<Io> = first.into_iter().chain(place(&steps, t.sectors())).collect();
        check_device(&dev, &t.roles, &ios, batch)?;
        let h = mqblk_dm::find(dev.name()).expect("an open stacked device");
        let out = mqblk_dm::mirror::degraded_legs(&h);
        prop_assert_eq!(out.len(), 1, "{:?}", out);
        prop_assert_eq!(out[0].leg, which);
        prop_assert_eq!(out[0].failure.map(|f| f.op), Some("read"));
        prop_assert!(opener.opened(&bad).is_bio_based());
    }

    /// The same table and bios on the bio-based driver and the
    /// request-based one (`bio_remap=0`): the same statuses, the same data.
    /// With an error line in the table, bios that touch end to end are not
    /// in flight together: the request-based driver fails a request as a
    /// whole, and one merged across an error line's edge fails a bio that
    /// only touched the line next to it
    /// (`a_request_merged_across_an_error_line_fails_only_its_bio_there`).
    #[test]
    fn the_bio_based_and_request_based_drivers_agree(
        t in table(true),
        steps in steps(),
        batch in 1usize..=6,
    ) {
        let bio = Opener::new(&t.tables, true).open(&t.text);
        let rq = Opener::new(&t.tables, false).open(&t.text);
        prop_assert!(!rq.is_bio_based());
        let ios = place_on(&t, &steps);
        let errors = t.roles.iter().any(|r| r.2 == Role::Error);
        let model = Model::new(&t.roles);
        let mut results = Vec::new();
        for dev in [&bio, &rq] {
            let mut ctx = dev.context().unwrap();
            let got = run_in(&mut ctx, &ios, batches(&ios, batch, errors))?;
            let back = read_all(&mut ctx, &model)?;
            results.push((got, back));
        }
        let (a, b) = (&results[0], &results[1]);
        for (i, io) in ios.iter().enumerate() {
            prop_assert_eq!(&a.0[i], &b.0[i], "bio {} {:?}", i, io);
        }
        prop_assert!(a.1 == b.1, "the devices hold other data after");
    }

    /// A stripe of two mirrors, each a table over two ram legs: bio-based
    /// at both stacked levels (no request queue between them), requests
    /// only on the ram legs, and the data the model holds.
    #[test]
    fn a_stripe_of_mirrors_is_bio_based_down_to_its_legs(
        chunk in 8u64..=CHUNK_MAX,
        chunks in 1u64..=2,
        region in prop_oneof![Just(8u64), Just(16)],
        steps in steps(),
        batch in 1usize..=6,
    ) {
        let m = chunk * chunks;
        let mut ram = RamSpecs::default();
        let mut mirror = || {
            let (a, b) = (ram.next(m), ram.next(m));
            format!("0 {m} mirror core 2 {region} nosync 2 {a} 0 {b} 0")
        };
        let tables = [("m0".to_string(), mirror()), ("m1".to_string(), mirror())];
        let opener = Opener::new(&tables, true);
        let dev = opener.open(&format!("0 {} striped 2 {chunk} table:m0 0 table:m1 0", 2 * m));
        prop_assert!(dev.is_bio_based());
        for name in ["m0", "m1"] {
            let mirror = opener.opened(name);
            prop_assert!(mirror.is_bio_based(), "{}", name);
            let h = mqblk_dm::find(mirror.name()).expect("an open stacked device");
            for leg in h.legs().all().into_iter().flatten() {
                prop_assert!(!leg.is_bio_based(), "{} is a ram leg", leg.name());
            }
        }
        let ios = place(&steps, 2 * m);
        check_device(&dev, &[(0, 2 * m, Role::Data)], &ios, batch)?;
    }

    /// A partition of a stripe (a window made with `mqblk_dm::linear`, or a
    /// table of one linear line over the stripe's table): a window of the
    /// stripe, so bio-based with no request queue of its own; what is
    /// written through it is in the stripe at its offset, and nothing
    /// outside it changes.
    #[test]
    fn a_partition_of_a_stripe_is_a_bio_based_window_of_it(
        chunk in 8u64..=CHUNK_MAX,
        chunks in 1u64..=2,
        start in 0u64..16,
        short in 0u64..16,
        as_table in any::<bool>(),
        steps in steps(),
        batch in 1usize..=6,
    ) {
        let width = chunk * chunks * 2;
        let len = width - start - short.min(width - start - 1);
        let mut ram = RamSpecs::default();
        let (a, b) = (ram.next(width / 2), ram.next(width / 2));
        let stripe_text = format!("0 {width} striped 2 {chunk} {a} 0 {b} 0");
        let tables = [("s".to_string(), stripe_text.clone())];
        let opener = Opener::new(&tables, true);
        let (part, stripe) = if as_table {
            let part = opener.open(&format!("0 {len} linear table:s {start}"));
            (part, opener.opened("s"))
        } else {
            let stripe = opener.open(&stripe_text);
            let name = format!("stripe-p{}", PART.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            (mqblk_dm::linear(stripe.clone(), start * 512, len * 512, &name).unwrap(), stripe)
        };
        prop_assert!(stripe.is_bio_based());
        prop_assert!(part.is_bio_based());
        let (disk, at) = part.remapped_from().expect("a window");
        prop_assert!(disk.same(&stripe));
        prop_assert_eq!(at, start * 512);
        let ios = place(&steps, len);
        let model = check_device(&part, &[(0, len, Role::Data)], &ios, batch)?;
        let mut whole = vec![0xa5u8; width as usize * 512];
        stripe.context().unwrap().read_at(&mut whole, 0).unwrap();
        let (s, e) = (start as usize * 512, (start + len) as usize * 512);
        prop_assert!(whole[s..e] == model.data[..], "the stripe holds other data");
        prop_assert!(whole[..s].iter().chain(&whole[e..]).all(|&x| x == 0), "written outside the window");
    }
}

/// A table of only `zero` and `error` lines has no leg to limit it, and
/// says it discards; a discard of its zero line succeeds and one of its
/// error line fails with an I/O error, as a write-zeroes does.
#[test]
#[ignore = "bug: limits::stack gives a table without legs the discard feature but max_discard_sectors 0, so the core refuses every discard as unsupported"]
fn a_table_without_legs_discards_what_its_lines_say() {
    let t = build(&[
        LineSpec {
            kind: Kind::Zero,
            sectors: 8,
            pad: 0,
        },
        LineSpec {
            kind: Kind::Error,
            sectors: 8,
            pad: 0,
        },
    ]);
    let dev = Opener::new(&t.tables, true).open(&t.text);
    let io = |op, sector| Io {
        op,
        sector,
        sectors: 8,
        segs: 0,
        seed: 0,
    };
    let ios = [
        io(Op::WriteZeroes, 0),
        io(Op::WriteZeroes, 8),
        io(Op::Discard, 0),
        io(Op::Discard, 8),
    ];
    let got = run(&mut dev.context().unwrap(), &ios, 1).unwrap();
    let want = [Status::Ok, Status::IoError, Status::Ok, Status::IoError];
    let statuses: Vec<Status> = got.iter().map(|o| o.status).collect();
    assert_eq!(statuses, want);
}

/// On the request-based driver, two reads in flight together, one of an
/// error line and one of the zero line after it, end end to end: merged
/// into one request, which the error line fails. Each bio should still end
/// with its own lines' status, as it does on the bio-based driver.
#[test]
#[ignore = "bug: the request-based stacked driver fails a request merged across an error line's edge as a whole, and with it a bio that only touched the next line"]
fn a_request_merged_across_an_error_line_fails_only_its_bio_there() {
    let t = build(&[
        LineSpec {
            kind: Kind::Error,
            sectors: 8,
            pad: 0,
        },
        LineSpec {
            kind: Kind::Zero,
            sectors: 8,
            pad: 0,
        },
    ]);
    let ios = [Io::read(0, 8), Io::read(8, 8)];
    for bio_remap in [true, false] {
        let dev = Opener::new(&t.tables, bio_remap).open(&t.text);
        let got = run(&mut dev.context().unwrap(), &ios, 2).unwrap();
        let statuses: Vec<Status> = got.iter().map(|o| o.status).collect();
        assert_eq!(
            statuses,
            [Status::IoError, Status::Ok],
            "bio_remap={bio_remap}"
        );
    }
}

/// Numbers the partitions, whose names must differ.
static PART: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
