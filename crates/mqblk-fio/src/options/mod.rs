//! The bench's option keys: every key is declared once, in the table of
//! `keys`, which knows its name, how its value is parsed and what it
//! accepts. The command line and job files both go through
//! [`JobOptions::set`], so `--bs=0` and a job file's `bs=0` fail with the
//! same words.
//!
//! A [`JobOptions`] (`layer`) is one layer of settings (the job file's
//! `[global]`, a job section, or the command line). Layers are stacked
//! with [`JobOptions::overlay`] and turned into a job with
//! [`JobOptions::build`]; the command line is the top layer, so it
//! overrides the job file.
//!
//! Below the table, `values` parses values; beside it, `fio` holds
//! what mqblk takes of fio's options without a key of its own.

use std::fmt;

pub(crate) mod fio;

pub(crate) mod values;

pub(crate) mod layer;

pub(crate) mod keys;

pub(crate) use fio::noted;
pub use fio::FIO_ENGINE_HINT;
pub use fio::{file_engine, value_note, ASYNC_ENGINE_NOTE};
pub use keys::KEYS;
pub use layer::{check_run, JobOptions};
pub use values::parse_duration;
pub(crate) use values::{JOBS_MAX, NAME_LEN_MAX};

use values::{BadValue, Value};

/// Why a key or its value was refused. The caller adds where it came from
/// (`--bs=0` or `job.fio:3: bs=0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionError {
    /// No such key.
    UnknownKey,
    /// The key needs a value and was given none.
    MissingValue {
        /// What it accepts.
        expected: String,
    },
    /// The value does not parse or is out of range.
    BadValue {
        /// The value as given.
        value: String,
        /// What the key accepts.
        expected: String,
    },
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::UnknownKey => write!(f, "unknown option; known: {}", KEYS.join(", ")),
            OptionError::MissingValue { expected } => {
                write!(f, "needs a value: expected {expected}")
            }
            OptionError::BadValue { value, expected } => {
                write!(f, "invalid value {value:?}: expected {expected}")
            }
        }
    }
}

impl std::error::Error for OptionError {}

impl From<BadValue> for OptionError {
    fn from(b: BadValue) -> OptionError {
        OptionError::BadValue {
            value: b.value,
            expected: b.expected,
        }
    }
}

impl JobOptions {
    /// Set `key` from `value` (`None` for a bare key, as `time_based` is
    /// written). Validates the value; on error nothing is changed.
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<(), OptionError> {
        let k = keys::find(key).ok_or(OptionError::UnknownKey)?;
        let raw = value.or(k.bare).ok_or_else(|| OptionError::MissingValue {
            expected: k.expected.to_string(),
        })?;
        (k.set)(self, &Value::new(raw, k.expected))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::job::{JobSpec, RwMode};

    fn set(key: &str, value: &str) -> Result<JobOptions, OptionError> {
        let mut o = JobOptions::default();
        o.set(key, Some(value))?;
        Ok(o)
    }

    #[test]
    fn thinktime_is_in_microseconds_unless_it_has_a_suffix() {
        let t = |v: &str| set("thinktime", v).map(|o| o.thinktime);
        assert_eq!(t("2000").unwrap(), Some(Duration::from_millis(2)));
        assert_eq!(t("2ms").unwrap(), Some(Duration::from_millis(2)));
        assert_eq!(t("0").unwrap(), Some(Duration::ZERO));
        assert!(t("11s").is_err(), "more than 10 s");
        assert!(t("x").is_err());
    }

    #[test]
    fn values_parse() {
        assert_eq!(set("bs", "4k").unwrap().bs, Some(4096));
        assert_eq!(set("rw", "randrw").unwrap().rw, Some(RwMode::RandRw));
        assert_eq!(set("iodepth", " 32 ").unwrap().iodepth, Some(32));
        assert_eq!(set("size", "1G").unwrap().size, Some(1 << 30));
        assert_eq!(
            set("runtime", "10").unwrap().runtime,
            Some(Some(Duration::from_secs(10)))
        );
        assert_eq!(set("runtime", "0").unwrap().runtime, Some(None));
        assert_eq!(
            set("ramp_time", "500ms").unwrap().ramp_time,
            Some(Some(Duration::from_millis(500)))
        );
        assert_eq!(
            set("queue_mode", "device_lock")
                .unwrap()
                .queue_mode
                .as_deref(),
            Some("device-lock")
        );
        assert_eq!(set("plug", "off").unwrap().plug, Some(false));
        assert_eq!(set("iostats", "0").unwrap().iostats, Some(false));
        let mut o = JobOptions::default();
        o.set("time_based", None).unwrap();
        assert_eq!(o.time_based, Some(true));
    }

    #[test]
    fn durations() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("3"), Duration::from_secs(3));
        assert_eq!(ok("3s"), Duration::from_secs(3));
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("7us"), Duration::from_micros(7));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("1H"), Duration::from_secs(3600));
        for bad in [
            "",
            "s",
            "-1",
            "1.5",
            "3x",
            "99999999999999999999",
            "18446744073709551615d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_values_name_what_is_accepted() {
        for (k, v) in [
            ("bs", "0"),
            ("bs", "1000"),
            ("bs", "1G"),
            ("bs", "4q"),
            ("iodepth", "0"),
            ("iodepth", "70000"),
            ("numjobs", "0"),
            ("rw", "foo"),
            ("rwmixread", "101"),
            ("size", "0"),
            ("size", "1x"),
            ("runtime", "5y"),
            ("hw_queues", "0"),
            ("plug", "maybe"),
            ("iostats", "2"),
            ("queue_mode", "lockless"),
            ("device", ""),
            ("device", "nu ll"),
            ("randseed", "-1"),
            ("name", ""),
            ("slat_percentiles", "2"),
            ("log_offset", "yes please"),
            ("log_prio", "-1"),
            ("log_avg_msec", "1h"),
            ("log_hist_msec", "-5"),
            ("log_hist_coarseness", "7"),
            ("write_hist_log", "a\u{7}b"),
        ] {
            let e = set(k, v).unwrap_err();
            assert!(matches!(e, OptionError::BadValue { .. }), "{k}={v}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(&format!("{v:?}")), "{k}={v}: {msg}");
            assert!(msg.contains("expected"), "{k}={v}: {msg}");
        }
        assert_eq!(
            set("ioengine", "null").unwrap_err(),
            OptionError::UnknownKey
        );
        let mut o = JobOptions::default();
        assert!(matches!(
            o.set("bs", None),
            Err(OptionError::MissingValue { .. })
        ));
        assert_eq!(o, JobOptions::default());
    }

    #[test]
    fn a_bare_on_off_or_log_key_is_taken_as_fio_takes_it() {
        let mut o = JobOptions::default();
        for k in [
            "slat_percentiles",
            "log_offset",
            "log_prio",
            "per_job_logs",
            "plug",
        ] {
            o.set(k, None).unwrap_or_else(|e| panic!("{k}: {e}"));
        }
        assert_eq!(o.slat_percentiles, Some(true));
        assert_eq!(o.log_offset, Some(true));
        assert_eq!(o.plug, Some(true));
        o.set("write_lat_log", None).unwrap();
        assert_eq!(o.write_lat_log.as_deref(), Some("mqblk"));
        // A key with a real value still needs one.
        assert!(matches!(
            o.set("log_avg_msec", None),
            Err(OptionError::MissingValue { .. })
        ));
    }

    #[test]
    fn every_key_is_listed_once_and_every_alias_names_a_key() {
        for (i, k) in KEYS.iter().enumerate() {
            assert!(!KEYS[..i].contains(k), "{k} twice");
            assert!(keys::find(k).is_some(), "{k}");
        }
        let mut o = JobOptions::default();
        o.set("blocksize", Some("8k")).unwrap();
        o.set("readwrite", Some("randread")).unwrap();
        o.set("timeout", Some("3s")).unwrap();
        assert_eq!(o.bs, Some(8192));
        assert_eq!(o.rw, Some(RwMode::RandRead));
        assert_eq!(o.runtime, Some(Some(Duration::from_secs(3))));
        assert_eq!(
            o.set("filesize", None).unwrap_err(),
            OptionError::MissingValue {
                expected: keys::find("size").unwrap().expected.to_string()
            }
        );
    }

    #[test]
    fn an_unknown_key_is_told_every_key_in_order() {
        let msg = OptionError::UnknownKey.to_string();
        assert!(
            msg.starts_with("unknown option; known: name, rw, readwrite, bs, blocksize, iodepth,"),
            "{msg}"
        );
        assert!(
            msg.ends_with("log_hist_msec, log_hist_coarseness, per_job_logs"),
            "{msg}"
        );
    }

    #[test]
    fn top_layer_wins_and_devices_replace() {
        let mut global = JobOptions::default();
        global.set("bs", Some("8k")).unwrap();
        global.set("iodepth", Some("4")).unwrap();
        global.set("device", Some("null")).unwrap();
        global.set("device", Some("null,size=1G")).unwrap();
        let mut cli = JobOptions::default();
        cli.set("iodepth", Some("16")).unwrap();
        let mut merged = global.clone();
        merged.overlay(&cli);
        let job = merged.build("job0").unwrap();
        assert_eq!(job.bs, 8192);
        assert_eq!(job.iodepth, 16);
        assert_eq!(job.devices, vec!["null", "null,size=1G"]);
        cli.set("device", Some("null,size=2G")).unwrap();
        merged.overlay(&cli);
        assert_eq!(merged.build("job0").unwrap().devices, vec!["null,size=2G"]);
    }

    #[test]
    fn whole_job_rules() {
        let mut o = JobOptions::default();
        o.set("time_based", None).unwrap();
        assert!(o.build("j").unwrap_err().contains("runtime"));
        o.set("runtime", Some("1")).unwrap();
        o.build("j").unwrap();
        o.set("size", Some("1k")).unwrap();
        o.set("bs", Some("4k")).unwrap();
        assert!(o.build("j").unwrap_err().contains("smaller than bs"));
        let many = vec![
            JobSpec {
                numjobs: 600,
                ..JobSpec::default()
            };
            2
        ];
        assert!(check_run(&many).is_err());
        assert!(check_run(&[]).is_err());
    }
}
