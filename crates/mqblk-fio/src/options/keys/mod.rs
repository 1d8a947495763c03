//! Every key of mqblk bench, declared once (fio's `options.c` declares
//! each option once, in one table of `struct fio_option`): its name, what
//! it accepts, what it means written alone, and how its value is parsed
//! into the layer's fields. The key list, the parsing and the messages all
//! come from [`TABLE`], in the order the keys are listed to a user.
//!
//! The table is kept in groups, one file each, listed in this order: the
//! job ([`job`]), the shape of its I/O ([`shape`]), its pace ([`pace`]),
//! its checks ([`verify`]) and its output ([`report`]). [`entry`] is what
//! they are written with.

mod entry;
mod job;
mod pace;
mod report;
mod shape;
mod verify;

pub use entry::{Entry, Key};

/// The groups, in the order their keys are listed to a user.
const GROUPS: &[&[Entry]] = &[
    job::KEYS,
    shape::KEYS,
    pace::KEYS,
    verify::KEYS,
    report::KEYS,
];

/// How many entries the groups hold together.
const LEN: usize = {
    let (mut n, mut g) = (0, 0);
    while g < GROUPS.len() {
        n += GROUPS[g].len();
        g += 1;
    }
    n
};

/// The groups' entries in one array, in order.
const fn concat<const N: usize>(groups: &[&[Entry]]) -> [Entry; N] {
    let mut out = [groups[0][0]; N];
    let (mut n, mut g) = (0, 0);
    while g < groups.len() {
        let mut i = 0;
        while i < groups[g].len() {
            out[n] = groups[g][i];
            n += 1;
            i += 1;
        }
        g += 1;
    }
    out
}

/// Every key, in the order they are listed to a user (the command line
/// writes `queue_mode` as `--queue-mode` and `hw_queues` as `--hw-queues`).
pub const TABLE: &[Entry] = &concat::<LEN>(GROUPS);

/// Every key's name, in `TABLE`'s order.
pub const KEYS: &[&str] = &{
    let mut names = [""; TABLE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        names[i] = TABLE[i].name();
        i += 1;
    }
    names
};

/// The key `name` stands for (through an alias), if it is one.
pub fn find(name: &str) -> Option<&'static Key> {
    match TABLE.iter().find(|e| e.name() == name)? {
        Entry::Key(k) => Some(k),
        Entry::Alias { of, .. } => match TABLE.iter().find(|e| e.name() == *of)? {
            Entry::Key(k) => Some(k),
            Entry::Alias { .. } => None,
        },
    }
}
