//! Tables: random lines of every target the model knows, built into a
//! table's text over ram legs, and the opener that opens their legs.

use std::cell::RefCell;

use mqblk_core::spec::{parse, SpecOptions};
use mqblk_core::{Device, Error, Result};
use mqblk_dm::Nesting;
use proptest::prelude::*;

use super::{CHUNK_MAX, LINE_MAX};

/// How a mirror's bad leg fails.
#[derive(Clone, Copy, Debug)]
pub enum Bad {
    /// A table of one `error` line.
    Error,
    /// A `flakey` table over ram that is down from the start.
    Flakey,
}

#[derive(Clone, Debug)]
pub enum Kind {
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
pub struct LineSpec {
    pub kind: Kind,
    pub sectors: u64,
    pub pad: u64,
}

pub fn line_spec(bad_mirrors: bool) -> impl Strategy<Value = LineSpec> {
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
pub enum Role {
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
pub struct Built {
    pub text: String,
    pub tables: Vec<(String, String)>,
    pub roles: Vec<(u64, u64, Role)>,
    /// The bad legs of mirrors: `(table name, line start, line sectors)`.
    pub bad: Vec<(String, u64, u64)>,
}

impl Built {
    pub fn sectors(&self) -> u64 {
        self.roles.last().map_or(0, |r| r.1)
    }
}

/// Hands out ram specs that differ (the same spec twice in a table is one
/// device), with one or two hardware queues.
#[derive(Default)]
pub struct RamSpecs {
    last: u64,
}

impl RamSpecs {
    pub fn next(&mut self, sectors: u64) -> String {
        self.last = sectors.max(self.last + 1);
        format!(
            "ram,size={},hw_queues={}",
            self.last * 512,
            1 + self.last % 2
        )
    }
}

pub fn build(lines: &[LineSpec]) -> Built {
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

pub fn table(bad_mirrors: bool) -> impl Strategy<Value = Built> {
    proptest::collection::vec(line_spec(bad_mirrors), 1..=4).prop_map(|l| build(&l))
}

/// Opens legs for the tables of one test: ram specs, and `table:NAME`
/// (a table it holds), each table bio-based or not as `bio_remap` says.
pub struct Opener {
    pub tables: Vec<(String, String)>,
    bio_remap: bool,
    opened: RefCell<Vec<(String, Device)>>,
}

impl Opener {
    pub fn new(tables: &[(String, String)], bio_remap: bool) -> Opener {
        Opener {
            tables: tables.to_vec(),
            bio_remap,
            opened: RefCell::new(Vec::new()),
        }
    }

    pub fn open_spec(&self, spec: &str, nesting: &Nesting) -> Result<Device> {
        let s = parse(spec)?;
        match (s.kind.as_str(), s.target) {
            ("ram", None) => {
                let dev = mqblk_ram::open(s.options)?;
                self.opened
                    .borrow_mut()
                    .push((spec.to_string(), dev.clone()));
                Ok(dev)
            }
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

    pub fn open_table(&self, text: &str, nesting: &Nesting) -> Result<Device> {
        let mut opts = SpecOptions::empty(&format!("dm-table:{text}"));
        if !self.bio_remap {
            opts.set("bio_remap", "0");
        }
        mqblk_dm::open_inline(text, opts, nesting, &|spec, n| self.open_spec(spec, n))
    }

    pub fn open(&self, text: &str) -> Device {
        self.open_table(text, &Nesting::default())
            .unwrap_or_else(|e| panic!("table `{text}`: {e}"))
    }

    /// The table named `name`, or the ram device of spec `name`, once
    /// opened as a leg.
    pub fn opened(&self, name: &str) -> Device {
        let o = self.opened.borrow();
        o.iter().find(|(n, _)| n == name).expect("opened").1.clone()
    }
}
