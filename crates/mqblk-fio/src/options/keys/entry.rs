//! A key's declaration: its name, what it accepts, what it means written
//! alone, and its parser; and the helpers each group's table is written
//! with.

use crate::options::layer::JobOptions;
use crate::options::values::{BadValue, Value};

/// How a key's value is parsed into a layer: it sets its fields, or
/// refuses the value and changes nothing.
pub type Setter = fn(&mut JobOptions, &Value<'_>) -> Result<(), BadValue>;

/// One key.
#[derive(Clone, Copy)]
pub struct Key {
    /// As a job file writes it.
    pub name: &'static str,
    /// What it accepts (error messages quote it).
    pub expected: &'static str,
    /// What the key written alone stands for, as in fio (an on/off key is
    /// on, a log key takes the default prefix); `None`: it needs a value.
    pub bare: Option<&'static str>,
    /// Its parser.
    pub set: Setter,
}

/// An entry of [`TABLE`].
#[derive(Clone, Copy)]
pub enum Entry {
    /// A key.
    Key(Key),
    /// Another name of a key (fio's `alias`), listed where it is listed.
    Alias {
        /// The other name.
        name: &'static str,
        /// The key it names.
        of: &'static str,
    },
}

impl Entry {
    /// The name a job file writes.
    pub const fn name(&self) -> &'static str {
        match self {
            Entry::Key(k) => k.name,
            Entry::Alias { name, .. } => name,
        }
    }
}

/// A key that needs a value.
pub(super) const fn key(name: &'static str, expected: &'static str, set: Setter) -> Entry {
    Entry::Key(Key {
        name,
        expected,
        bare: None,
        set,
    })
}

/// An on/off key: written alone, it is on.
pub(super) const fn on_off(name: &'static str, expected: &'static str, set: Setter) -> Entry {
    Entry::Key(Key {
        name,
        expected,
        bare: Some("1"),
        set,
    })
}

/// A log key: written alone, it logs under the default prefix.
pub(super) const fn log(name: &'static str, expected: &'static str, set: Setter) -> Entry {
    Entry::Key(Key {
        name,
        expected,
        bare: Some(""),
        set,
    })
}

/// `name` is another name of the key `of`.
pub(super) const fn alias(name: &'static str, of: &'static str) -> Entry {
    Entry::Alias { name, of }
}

/// `field` = the parsed value, unless it was refused.
pub(super) fn put<T>(field: &mut Option<T>, value: Result<T, BadValue>) -> Result<(), BadValue> {
    *field = Some(value?);
    Ok(())
}

pub(super) const ON_OFF: &str = "no value, 1 or 0";
pub(super) const PERCENT: &str = "a percentage from 0 to 100";
pub(super) const LOG_PREFIX: &str =
    "a file name prefix (PREFIX_bw.N.log, PREFIX_iops.N.log; PREFIX_lat.N.log, \
     PREFIX_slat.N.log and PREFIX_clat.N.log)";
