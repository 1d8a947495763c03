//! No table maps two upper ranges onto one lower range: random tables of
//! linear, striped and zero lines over a few ram specs are either refused,
//! and then two of their lower ranges do overlap, or accepted, and then
//! every upper sector holds its own data.

use mqblk_core::spec::parse;
use mqblk_core::{Device, Error, Result};
use proptest::prelude::*;

fn opener(spec: &str) -> Result<Device> {
    let s = parse(spec)?;
    match s.kind.as_str() {
        "ram" => mqblk_ram::open(s.options),
        "null" => mqblk_null::open(s.options),
        other => Err(Error::spec(spec, format!("no `{other}` in this test"))),
    }
}

fn open(table: &str) -> Result<Device> {
    mqblk_dm::open_inline(
        table,
        parse("dm-table:x").unwrap().options,
        &mqblk_dm::Nesting::default(),
        &|spec, _| opener(spec),
    )
}

/// The lower devices: specs and sizes in sectors. The same spec twice in a
/// table is one device.
const LEGS: [(&str, u64); 3] = [
    ("ram,size=32k", 64),
    ("ram,size=48k,hw_queues=1", 96),
    ("ram,size=32k,hw_queues=2", 64),
];

#[derive(Clone, Debug)]
enum Line {
    Linear {
        leg: usize,
        offset: u64,
        len: u64,
    },
    /// `(leg, offset)` per stripe; each stripe is `chunks * chunk` long.
    Striped {
        chunk: u64,
        chunks: u64,
        stripes: Vec<(usize, u64)>,
    },
    Zero {
        len: u64,
    },
}

impl Line {
    fn len(&self) -> u64 {
        match self {
            Line::Linear { len, .. } | Line::Zero { len } => *len,
            Line::Striped {
                chunk,
                chunks,
                stripes,
            } => chunk * chunks * stripes.len() as u64,
        }
    }

    /// The lower ranges it maps onto: `(leg, start, end)` in sectors.
    fn lower(&self) -> Vec<(usize, u64, u64)> {
        match self {
            Line::Linear { leg, offset, len } => vec![(*leg, *offset, offset + len)],
            Line::Striped {
                chunk,
                chunks,
                stripes,
            } => stripes
                .iter()
                .map(|&(leg, off)| (leg, off, off + chunk * chunks))
                .collect(),
            Line::Zero { .. } => Vec::new(),
        }
    }

    /// The lower `(leg, sector)` of sector `s` of the line, if any.
    fn map(&self, s: u64) -> Option<(usize, u64)> {
        match self {
            Line::Linear { leg, offset, .. } => Some((*leg, offset + s)),
            Line::Striped { chunk, stripes, .. } => {
                let (c, n) = (s / chunk, stripes.len() as u64);
                let (leg, off) = stripes[(c % n) as usize];
                Some((leg, off + (c / n) * chunk + s % chunk))
            }
            Line::Zero { .. } => None,
        }
    }
}

/// A stretch of `width` sectors that fits in a leg.
fn placed(width: u64) -> impl Strategy<Value = (usize, u64)> {
    (0..LEGS.len()).prop_flat_map(move |leg| {
        let max = LEGS[leg].1.saturating_sub(width);
        (Just(leg), 0..=max)
    })
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        (1u64..=32)
            .prop_flat_map(|len| (placed(len), Just(len)))
            .prop_map(|((leg, offset), len)| Line::Linear { leg, offset, len }),
        (prop_oneof![Just(4u64), Just(8)], 1u64..=3, 1usize..=3)
            .prop_flat_map(|(chunk, chunks, n)| {
                (
                    Just(chunk),
                    Just(chunks),
                    proptest::collection::vec(placed(chunk * chunks), n),
                )
            })
            .prop_map(|(chunk, chunks, stripes)| Line::Striped {
                chunk,
                chunks,
                stripes,
            }),
        (1u64..=16).prop_map(|len| Line::Zero { len }),
    ]
}

fn table(lines: &[Line]) -> String {
    let mut start = 0;
    let mut out = Vec::new();
    for l in lines {
        let body = match l {
            Line::Linear { leg, offset, .. } => format!("linear {} {offset}", LEGS[*leg].0),
            Line::Striped { chunk, stripes, .. } => {
                let s: Vec<String> = stripes
                    .iter()
                    .map(|(leg, off)| format!("{} {off}", LEGS[*leg].0))
                    .collect();
                format!("striped {} {chunk} {}", stripes.len(), s.join(" "))
            }
            Line::Zero { .. } => "zero".to_string(),
        };
        out.push(format!("{start} {} {body}", l.len()));
        start += l.len();
    }
    out.join(";")
}

fn overlaps(lines: &[Line]) -> bool {
    let all: Vec<_> = lines.iter().flat_map(Line::lower).collect();
    all.iter().enumerate().any(|(i, a)| {
        all[..i]
            .iter()
            .any(|b| a.0 == b.0 && a.1 < b.2 && b.1 < a.2)
    })
}

proptest! {
    // Under Miri 8 cases: the checks are safe code, which the native run
    // covers with 256.
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 8 } else { 256 },
        ..ProptestConfig::default()
    })]
    #[test]
    fn refused_tables_overlap_and_accepted_ones_never_alias(
        lines in proptest::collection::vec(line(), 1..5)
    ) {
        let text = table(&lines);
        let model_overlaps = overlaps(&lines);
        match open(&text) {
            Err(e) => {
                prop_assert!(model_overlaps, "{text}: refused without an overlap: {e}");
                prop_assert!(e.to_string().contains("overlap"), "{text}: {e}");
            }
            Ok(dev) => {
                prop_assert!(!model_overlaps, "{text}: accepted with an overlap");
                // The model's map is one to one...
                let mut seen = std::collections::HashSet::new();
                for l in &lines {
                    for s in 0..l.len() {
                        if let Some(lower) = l.map(s) {
                            prop_assert!(seen.insert(lower), "{text}: {lower:?} twice");
                        }
                    }
                }
                // ...and so is the device's: each upper sector keeps its own
                // stamp, and zero lines read zeros.
                let sectors = dev.capacity_bytes() / 512;
                let mut ctx = dev.context().unwrap();
                let stamp = |s: u64| {
                    let mut b = vec![0u8; 512];
                    for (i, w) in b.chunks_mut(8).enumerate() {
                        w.copy_from_slice(&(s * 64 + i as u64 + 1).to_le_bytes());
                    }
                    b
                };
                for s in 0..sectors {
                    ctx.write_at(&stamp(s), s * 512).unwrap();
                }
                let mut back = vec![0u8; sectors as usize * 512];
                ctx.read_at(&mut back, 0).unwrap();
                let mut start = 0;
                for l in &lines {
                    for s in start..start + l.len() {
                        let got = &back[s as usize * 512..][..512];
                        if matches!(l, Line::Zero { .. }) {
                            prop_assert!(got == vec![0; got.len()], "{text}: sector {s}");
                        } else {
                            prop_assert_eq!(got, &stamp(s)[..], "{}: sector {}", text, s);
                        }
                    }
                    start += l.len();
                }
            }
        }
    }
}

#[test]
fn the_same_spec_twice_in_a_stripe_is_refused_with_both_legs_and_the_range() {
    let e = open("0 262144 striped 2 128 ram,size=64M 0 ram,size=64M 0").unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("line 1, field 8 (device): stripe 1 `ram,size=64M` sectors 0..131072 overlap stripe 0 (field 6)"),
        "{text}"
    );
    assert!(text.contains("its sectors 0..131072"), "{text}");
}

#[test]
fn overlapping_lines_on_one_device_are_refused_naming_both() {
    let e = open("0 64 linear ram,size=64k 0;64 64 linear ram,size=64k 32").unwrap_err();
    let text = e.to_string();
    assert!(text.contains("line 2, field 4 (device)"), "{text}");
    assert!(
        text.contains("sectors 32..96 overlap line 1's device (field 4)"),
        "{text}"
    );
    assert!(text.contains("its sectors 32..64"), "{text}");
    // Side by side on one device: accepted.
    open("0 64 linear ram,size=64k 0;64 64 linear ram,size=64k 64").unwrap();
}

#[test]
fn a_mirror_leg_on_another_line_s_sectors_is_refused() {
    let e =
        open("0 64 linear ram,size=64k 0;64 64 mirror core 1 8 2 ram,size=32k 0 ram,size=64k 32")
            .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("leg 1 `ram,size=64k` sectors 32..96 overlap line 1's device"),
        "{text}"
    );
}

#[test]
fn a_delay_may_read_and_write_one_range_but_not_overlap_another_line() {
    open("0 64 delay ram,size=64k 0 0 ram,size=64k 0 0").unwrap();
    let e = open("0 64 delay ram,size=64k 0 0 ram,size=64k 8 0").unwrap_err();
    assert!(e.to_string().contains("write device"), "{e}");
    let e = open("0 64 linear ram,size=64k 0;64 64 delay ram,size=64k 64 0 ram,size=64k 0 0")
        .unwrap_err();
    assert!(e.to_string().contains("overlap line 1's device"), "{e}");
}

#[test]
fn a_mirror_leg_is_not_replaced_by_a_device_the_table_already_maps() {
    let dev =
        open("0 64 mirror core 1 8 2 ram,size=32k 0 ram,size=64k 0;64 64 linear ram,size=64k 64")
            .unwrap();
    let h = mqblk_dm::find(dev.name()).unwrap();
    let other_line = h.legs().get(1).unwrap();
    assert_eq!(h.legs().specs()[1], "ram,size=64k");
    let window = other_line.remap(0, 32 << 10, "w", false, None).unwrap();
    for new in [other_line, window] {
        let e = mqblk_dm::mirror::replace(&dev, 0, new, "again", &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`again` is the device of the table's leg 1 (ram,size=64k)"),
            "{e}"
        );
    }
}
