//! A key's value: the bounds values are held to, the parsers the keys
//! share, and [`BadValue`], what a refused value is answered with. The
//! leaf under the key table.

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use mqblk::spec::{parse_bool, parse_size};

/// Smallest and largest `bs=` (a 512-byte sector up to 64 MiB).
pub const BS_MIN: u64 = 512;
/// Largest `bs=`.
pub const BS_MAX: u64 = 64 << 20;
/// Largest `iodepth=` (the largest tag depth a device takes).
pub const IODEPTH_MAX: u32 = 65536;
/// Largest `numjobs=`, and the most jobs one run may start in total.
pub const JOBS_MAX: u32 = 1024;
/// Largest `hw_queues=` (as the device specs accept).
pub const HW_QUEUES_MAX: u16 = 1024;
/// Longest `name=` or section name.
pub const NAME_LEN_MAX: usize = 256;

/// What `runtime=`, `ramp_time=` and `timeout=` accept.
pub const DURATION_EXPECTED: &str =
    "a time such as 10 (seconds), 500ms, 30s, 2m or 1h (suffixes us, ms, s, m, h, d); 0 means no limit";

/// A refused value: as given, and what its key accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue {
    /// The value as given.
    pub value: String,
    /// What the key accepts.
    pub expected: String,
}

/// `value`, refused: its key accepts `expected`.
pub fn bad(value: &str, expected: impl Into<String>) -> BadValue {
    BadValue {
        value: value.to_string(),
        expected: expected.into(),
    }
}

/// An integer in `range`, or `value` refused with `expected`.
pub fn int_in(value: &str, range: RangeInclusive<u64>, expected: &str) -> Result<u64, BadValue> {
    match value.parse::<u64>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(bad(value, expected)),
    }
}

/// Parse a time as fio does for `runtime=` and `ramp_time=`: a plain
/// number is seconds; the suffixes `us`, `ms`, `s`, `m`, `h` and `d` (and
/// their long forms `usec`, `msec`, `sec`, `min`) are accepted, in any case.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let s = value.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits_end == 0 {
        return Err("must start with a number".into());
    }
    let n: u64 = s[..digits_end]
        .parse()
        .map_err(|_| "number too large".to_string())?;
    let suffix = s[digits_end..].trim().to_ascii_lowercase();
    let nanos_per_unit: u64 = match suffix.as_str() {
        "us" | "usec" => 1_000,
        "ms" | "msec" => 1_000_000,
        "" | "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return Err(format!("unknown suffix `{suffix}`")),
    };
    n.checked_mul(nanos_per_unit)
        .map(Duration::from_nanos)
        .ok_or_else(|| "too long".to_string())
}

/// The value of one `key=value`, with what its key accepts.
#[derive(Clone, Copy, Debug)]
pub struct Value<'a> {
    /// As given: what an error quotes, unless it says otherwise.
    pub raw: &'a str,
    /// Trimmed: what is parsed.
    pub text: &'a str,
    /// What the key accepts.
    pub expected: &'static str,
}

impl<'a> Value<'a> {
    /// The value `raw` of a key that accepts `expected`.
    pub fn new(raw: &'a str, expected: &'static str) -> Value<'a> {
        Value {
            raw,
            text: raw.trim(),
            expected,
        }
    }

    /// This value, refused.
    pub fn bad(&self) -> BadValue {
        bad(self.raw, self.expected)
    }

    /// This value, refused with the reason the parser gave.
    pub fn bad_because(&self, why: impl fmt::Display) -> BadValue {
        bad(self.raw, format!("{} ({why})", self.expected))
    }

    /// An integer in `range` (an error quotes the trimmed value).
    pub fn int<T>(&self, range: RangeInclusive<T>) -> Result<T, BadValue>
    where
        T: Copy + Into<u64> + TryFrom<u64>,
    {
        let (lo, hi) = ((*range.start()).into(), (*range.end()).into());
        let n = int_in(self.text, lo..=hi, self.expected)?;
        T::try_from(n).map_err(|_| bad(self.text, self.expected))
    }

    /// 1/0, on/off and the like.
    pub fn bool(&self) -> Result<bool, BadValue> {
        parse_bool(self.text).ok_or_else(|| self.bad())
    }

    /// A byte count with an optional binary suffix (`4k`, `1G`).
    pub fn size(&self) -> Result<u64, BadValue> {
        parse_size(self.text).map_err(|why| self.bad_because(why))
    }

    /// A byte count above zero.
    pub fn size_above_zero(&self) -> Result<u64, BadValue> {
        match self.size()? {
            0 => Err(self.bad()),
            n => Ok(n),
        }
    }

    /// A block size (or alignment): a multiple of 512 from [`BS_MIN`] to
    /// [`BS_MAX`].
    pub fn block_size(&self) -> Result<u64, BadValue> {
        let n = self.size()?;
        if is_block_size(n) {
            Ok(n)
        } else {
            Err(self.bad())
        }
    }

    /// A time as [`parse_duration`] reads it.
    pub fn duration(&self) -> Result<Duration, BadValue> {
        parse_duration(self.text).map_err(|why| self.bad_because(why))
    }

    /// A time, 0 for none (`runtime=0`: no limit).
    pub fn duration_or_none(&self) -> Result<Option<Duration>, BadValue> {
        let d = self.duration()?;
        Ok((!d.is_zero()).then_some(d))
    }

    /// A time whose bare number is microseconds (fio's `is_time` options:
    /// `latency_target=`, `thinktime=`), or with a suffix.
    pub fn duration_us(&self) -> Result<Duration, BadValue> {
        let us = format!("{}us", self.text);
        let text = if !self.text.is_empty() && self.text.bytes().all(|b| b.is_ascii_digit()) {
            &us
        } else {
            self.text
        };
        Value { text, ..*self }.duration()
    }

    /// fio's `N%` (a share of the device, 1 to 100), if the value is one.
    pub fn percent(&self) -> Option<Result<u32, BadValue>> {
        let p = self.text.strip_suffix('%')?;
        Some(
            p.trim()
                .parse::<u32>()
                .ok()
                .filter(|p| (1..=100).contains(p))
                .ok_or_else(|| self.bad()),
        )
    }

    /// A floating-point number in `range`.
    pub fn float(&self, range: std::ops::RangeInclusive<f64>) -> Result<f64, BadValue> {
        self.text
            .parse::<f64>()
            .ok()
            .filter(|v| range.contains(v))
            .ok_or_else(|| self.bad())
    }

    /// Text that is not empty.
    pub fn non_empty(&self) -> Result<String, BadValue> {
        if self.text.is_empty() {
            return Err(self.bad());
        }
        Ok(self.text.to_string())
    }

    /// A log file prefix: fio's bare key (or an empty value) logs as the
    /// job name; mqblk takes the prefix `mqblk`.
    pub fn log_prefix(&self) -> Result<String, BadValue> {
        let prefix = if self.text.is_empty() {
            "mqblk"
        } else {
            self.text
        };
        if prefix.chars().any(char::is_control) {
            return Err(self.bad());
        }
        Ok(prefix.to_string())
    }
}

/// Whether `n` is a block size mqblk bench takes.
pub fn is_block_size(n: u64) -> bool {
    (BS_MIN..=BS_MAX).contains(&n) && n.is_multiple_of(512)
}
