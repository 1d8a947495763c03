//! Every key of mqblk bench, declared once (fio's `options.c` declares
//! each option once, in one table of `struct fio_option`): its name, what
//! it accepts, what it means written alone, and how its value is parsed
//! into the layer's fields. The key list, the parsing and the messages all
//! come from [`TABLE`], in the order the keys are listed to a user.

use std::time::Duration;

use mqblk::queue::QueueMode;
use mqblk::spec::parse_size;

use crate::bench::hist::COARSENESS_MAX;
use crate::bench::job::{BlockSizes, ContinueOnError, Distribution, ExitWhat, RwMode, VerifyKind};
use crate::bench::steadystate::SteadySpec;
use crate::bench::verify::pattern::VerifyPattern;
use crate::bench::zone::ZoneMode;

use super::fio::FIO_ENGINE_HINT;
use super::layer::JobOptions;
use super::values::{
    bad, int_in, is_block_size, BadValue, Value, DURATION_EXPECTED, HW_QUEUES_MAX, IODEPTH_MAX,
    JOBS_MAX, NAME_LEN_MAX,
};

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
const fn key(name: &'static str, expected: &'static str, set: Setter) -> Entry {
    Entry::Key(Key {
        name,
        expected,
        bare: None,
        set,
    })
}

/// An on/off key: written alone, it is on.
const fn on_off(name: &'static str, expected: &'static str, set: Setter) -> Entry {
    Entry::Key(Key {
        name,
        expected,
        bare: Some("1"),
        set,
    })
}

/// A log key: written alone, it logs under the default prefix.
const fn log(name: &'static str, expected: &'static str, set: Setter) -> Entry {
    Entry::Key(Key {
        name,
        expected,
        bare: Some(""),
        set,
    })
}

/// `name` is another name of the key `of`.
const fn alias(name: &'static str, of: &'static str) -> Entry {
    Entry::Alias { name, of }
}

/// `field` = the parsed value, unless it was refused.
fn put<T>(field: &mut Option<T>, value: Result<T, BadValue>) -> Result<(), BadValue> {
    *field = Some(value?);
    Ok(())
}

const ON_OFF: &str = "no value, 1 or 0";
const PERCENT: &str = "a percentage from 0 to 100";
const LOG_PREFIX: &str =
    "a file name prefix (PREFIX_bw.N.log, PREFIX_iops.N.log; PREFIX_lat.N.log, \
     PREFIX_slat.N.log and PREFIX_clat.N.log)";

/// Every key, in the order they are listed to a user (the command line
/// writes `queue_mode` as `--queue-mode` and `hw_queues` as `--hw-queues`).
pub const TABLE: &[Entry] = &[
    key(
        "name",
        "a job name of 1 to 256 printable characters",
        |o, v| {
            let t = v.text;
            if t.is_empty() || t.len() > NAME_LEN_MAX || t.chars().any(char::is_control) {
                return Err(v.bad());
            }
            put(&mut o.name, Ok(t.to_string()))
        },
    ),
    key(
        "rw",
        "one of read, write, randread, randwrite, rw (readwrite), randrw, trim, randtrim, \
         optionally with :N for a hole of N bytes after each sequential I/O (negative: \
         backwards)",
        |o, v| {
            let (mode, stride) = rw_and_stride(v)?;
            o.rw = Some(mode);
            o.seq_stride = Some(stride);
            Ok(())
        },
    ),
    key(
        "bs",
        "a block size from 512 to 64M that is a multiple of 512, such as 4k",
        |o, v| put(&mut o.bs, v.block_size()),
    ),
    key("iodepth", "an integer from 1 to 65536", |o, v| {
        put(&mut o.iodepth, v.int(1..=IODEPTH_MAX))
    }),
    key("numjobs", "an integer from 1 to 1024", |o, v| {
        put(&mut o.numjobs, v.int(1..=JOBS_MAX))
    }),
    key(
        "size",
        "a size above zero such as 1G or 512m (binary suffixes k, m, g, t, p), or N% of the \
         device",
        |o, v| {
            if let Some(p) = v.percent() {
                return put(&mut o.size_percent, p);
            }
            put(&mut o.size, v.size_above_zero())?;
            o.size_percent = Some(0);
            Ok(())
        },
    ),
    key("runtime", DURATION_EXPECTED, |o, v| {
        put(&mut o.runtime, v.duration_or_none())
    }),
    on_off("time_based", ON_OFF, |o, v| {
        put(&mut o.time_based, v.bool())
    }),
    key("ramp_time", DURATION_EXPECTED, |o, v| {
        put(&mut o.ramp_time, v.duration_or_none())
    }),
    key("rwmixread", PERCENT, |o, v| {
        put(&mut o.rwmixread, v.int(0..=100))
    }),
    key("randseed", "an unsigned 64-bit integer", |o, v| {
        put(&mut o.randseed, v.text.parse().map_err(|_| v.bad()))
    }),
    key(
        "device",
        "a device spec such as null, null,size=1G or ram,size=1G",
        |o, v| {
            // Syntax only here; the device kind checks its own options
            // when the device is opened.
            mqblk::spec::parse(v.text).map_err(|e| v.bad_because(e))?;
            o.devices
                .get_or_insert_with(Vec::new)
                .push(v.text.to_string());
            Ok(())
        },
    ),
    key("queue_mode", "mq, device-lock or global-lock", |o, v| {
        let mode = QueueMode::parse(v.text).ok_or_else(|| v.bad())?;
        put(&mut o.queue_mode, Ok(mode.name().to_string()))
    }),
    key("hw_queues", "an integer from 1 to 1024", |o, v| {
        put(&mut o.hw_queues, v.int(1..=HW_QUEUES_MAX))
    }),
    on_off("plug", "on or off (or 1/0)", |o, v| {
        put(&mut o.plug, v.bool())
    }),
    on_off("iostats", "1 or 0 (or on/off)", |o, v| {
        put(&mut o.iostats, v.bool())
    }),
    key(
        "verify",
        "crc32c (or crc32c-intel), md5, sha256, pattern (verify_pattern= alone), meta (checked \
         as crc32c), fio's other checksums (crc32, crc16, crc7, crc64 and xxhash are checked \
         with crc32c; sha1, sha512 and sha3-* with sha256), null or none",
        |o, v| {
            // fio's meta checks each block's header (offset, length,
            // sequence); mqblk's header carries those and a crc32c of the
            // block, so meta is checked as crc32c, a superset. Another
            // checksum detects the same corruption: the job file is told
            // which one is used (options::fio::value_note).
            let name = super::fio::verify_stand_in(v.text).unwrap_or(v.text);
            let kind = VerifyKind::parse(name).map_err(|()| {
                bad(
                    v.raw,
                    format!("{}; other checksums: {FIO_ENGINE_HINT}", v.expected),
                )
            })?;
            put(&mut o.verify, Ok(kind))
        },
    ),
    on_off(
        "do_verify",
        "1 or 0 (default 1: read back and check what was written)",
        |o, v| put(&mut o.do_verify, v.bool()),
    ),
    on_off(
        "verify_fatal",
        "1 or 0 (default 0: 1 stops the job at the first mismatch)",
        |o, v| put(&mut o.verify_fatal, v.bool()),
    ),
    key(
        "continue_on_error",
        "none, read, write, io, verify or all (default none: a job stops at its first I/O \
         error)",
        |o, v| {
            put(
                &mut o.continue_on_error,
                ContinueOnError::parse(v.text).ok_or_else(|| v.bad()),
            )
        },
    ),
    on_off(
        "allow_degraded",
        "1 or 0 (default 0: a run that ends with a mirror leg out of service fails; 1: it \
         may end degraded, as LVM's activation_mode=degraded lets a RAID run degraded)",
        |o, v| put(&mut o.allow_degraded, v.bool()),
    ),
    key(
        "trim_percentage",
        "a percentage from 0 to 100: the share of a verify job's writes that are discards",
        |o, v| put(&mut o.trim_percentage, v.int(0..=100)),
    ),
    on_off(
        "trim_verify_zero",
        "1 or 0 (default 0: a discarded block may read as zeros or as what it held; 1: zeros)",
        |o, v| put(&mut o.trim_verify_zero, v.bool()),
    ),
    key(
        "write_zeroes_percentage",
        "a percentage from 0 to 100: the share of a verify job's writes that are write-zeroes",
        |o, v| put(&mut o.write_zeroes_percentage, v.int(0..=100)),
    ),
    key(
        "segments",
        "1 to 256: buffer pieces per I/O (vectored bios)",
        |o, v| put(&mut o.segments, v.int(1..=256)),
    ),
    key(
        "stats_dir",
        "a directory to write diskstats and mqblk.json into",
        |o, v| put(&mut o.stats_dir, v.non_empty()),
    ),
    key(
        "trace",
        "a directory to write blktrace files into (NAME.blktrace.N, for blkparse and btt)",
        |o, v| put(&mut o.trace, v.non_empty()),
    ),
    key(
        "thinktime",
        "a pause after each completion, up to 10s: microseconds, or with a suffix (us, ms, s)",
        |o, v| {
            // fio's unit for a bare number is the microsecond.
            let us = format!("{}us", v.text);
            let text = if v.text.bytes().all(|b| b.is_ascii_digit()) {
                &us
            } else {
                v.text
            };
            let d = Value { text, ..*v }.duration()?;
            if d > Duration::from_secs(10) {
                return Err(v.bad());
            }
            put(&mut o.thinktime, Ok(d))
        },
    ),
    alias("blocksize", "bs"),
    alias("filesize", "size"),
    key(
        "offset",
        "a byte offset such as 0 or 1G, or N% of the device: where the job's region starts",
        |o, v| {
            if let Some(p) = v.percent() {
                return put(&mut o.offset_percent, p);
            }
            put(&mut o.offset, v.size())?;
            o.offset_percent = Some(0);
            Ok(())
        },
    ),
    key(
        "io_size",
        "bytes to transfer, above zero, such as 4G",
        |o, v| put(&mut o.io_size, v.size_above_zero()),
    ),
    alias("io_limit", "io_size"),
    key(
        "number_ios",
        "a number of I/Os to issue, at least 1",
        |o, v| put(&mut o.number_ios, v.int(1..=u64::MAX >> 32)),
    ),
    key(
        "loops",
        "an integer from 1 to 1000000: times to run the job's I/O",
        |o, v| put(&mut o.loops, v.int(1..=1_000_000)),
    ),
    key("rwmixwrite", PERCENT, |o, v| {
        put(&mut o.rwmixread, v.int(0..=100u32).map(|w| 100 - w))
    }),
    alias("readwrite", "rw"),
    // mqblk keeps no random map: every job is norandommap.
    on_off("norandommap", ON_OFF, |_, v| v.bool().map(drop)),
    on_off("randrepeat", ON_OFF, |o, v| {
        put(&mut o.randrepeat, v.bool())
    }),
    key(
        "random_distribution",
        "random, zipf:THETA[:CENTER] (THETA > 0, not 1), pareto:H[:CENTER] (0 < H < 1), \
         normal:DEV[:CENTER] (percent), zoned:A/S:... (percent of I/O to percent of the \
         region) or zoned_abs:A/SIZE:..., with up to three groups (reads, writes, trims)",
        |o, v| {
            let d = Distribution::parse(v.text).map_err(|why| v.bad_because(why));
            put(&mut o.distribution, d)
        },
    ),
    key(
        "fsync",
        "a number of writes after which to flush (0: never)",
        |o, v| put(&mut o.fsync_every, v.int(0..=u32::MAX)),
    ),
    alias("fdatasync", "fsync"),
    on_off("end_fsync", ON_OFF, |o, v| put(&mut o.end_fsync, v.bool())),
    key(
        "rate",
        "bytes per second such as 500m, or READ,WRITE (mqblk paces their sum)",
        |o, v| {
            o.rate_bps = rate(v, |part| parse_size(part).map_err(|why| v.bad_because(why)))?;
            Ok(())
        },
    ),
    key(
        "rate_iops",
        "I/Os per second, or READ,WRITE (mqblk paces their sum)",
        |o, v| {
            o.rate_iops = rate(v, |part| int_in(part, 0..=u64::MAX >> 8, v.expected))?;
            Ok(())
        },
    ),
    key(
        "cgroup",
        "a group name of 1 to 64 letters, digits, '-', '_' or '.' (jobs naming one group \
         share its weight and limits)",
        |o, v| {
            let t = v.text;
            let ok = !t.is_empty()
                && t.len() <= 64
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !ok {
                return Err(v.bad());
            }
            put(&mut o.cgroup, Ok(t.to_string()))
        },
    ),
    key(
        "cgroup_weight",
        "a weight from 1 to 1000 (default 100)",
        |o, v| put(&mut o.cgroup_weight, v.int(1..=1000)),
    ),
    key("prioclass", "rt, be or idle (or fio's 1, 2, 3)", |o, v| {
        let class = mqblk::IoPrioClass::parse(v.text).ok_or_else(|| v.bad());
        put(&mut o.prioclass, class)
    }),
    key(
        "prio",
        "a level from 0 (highest) to 7 within the class",
        |o, v| put(&mut o.prio, v.int(0..=7)),
    ),
    key(
        "startdelay",
        "a delay of up to 1h, seconds unless suffixed (us, ms, s, m)",
        |o, v| {
            let d = v.duration()?;
            if d > Duration::from_secs(3600) {
                return Err(v.bad());
            }
            put(&mut o.startdelay, Ok(d))
        },
    ),
    on_off("stonewall", ON_OFF, |o, v| put(&mut o.stonewall, v.bool())),
    key("wait_for", "the name of an earlier job", |o, v| {
        // Every job before this one finishes first (a stonewall), which
        // includes the one named.
        v.non_empty()?;
        put(&mut o.stonewall, Ok(true))
    }),
    alias("timeout", "runtime"),
    key(
        "offset_increment",
        "bytes such as 1G, or N% of the device: each numjobs copy starts this much further",
        |o, v| {
            if let Some(p) = v.percent() {
                return put(&mut o.offset_increment_percent, p);
            }
            put(&mut o.offset_increment, v.size())?;
            o.offset_increment_percent = Some(0);
            Ok(())
        },
    ),
    key(
        "bsrange",
        "MIN-MAX block sizes such as 4k-64k (multiples of 512, up to 64M)",
        |o, v| {
            let (a, b) = v.text.split_once('-').ok_or_else(|| v.bad())?;
            let size = |x: &str| {
                Value {
                    text: x.trim(),
                    ..*v
                }
                .block_size()
            };
            let (min, max) = (size(a)?, size(b)?);
            if min > max {
                return Err(v.bad());
            }
            o.block_sizes = Some(if min == max {
                o.bs = Some(min);
                BlockSizes::Fixed
            } else {
                BlockSizes::Range(min, max)
            });
            Ok(())
        },
    ),
    key(
        "bssplit",
        "SIZE/PERCENT:SIZE/PERCENT... such as 4k/10:64k/90, optionally ,WRITES the same way",
        |o, v| {
            let mut groups = v.text.split(',');
            let reads = groups.next().unwrap_or_default();
            let r = BlockSizes::parse_split(reads).map_err(|why| v.bad_because(why))?;
            let w = match groups.next().filter(|g| !g.trim().is_empty()) {
                Some(g) => BlockSizes::parse_split(g).map_err(|why| v.bad_because(why))?,
                None => r.clone(),
            };
            if !r.iter().chain(&w).all(|&(size, _)| is_block_size(size)) {
                return Err(v.bad());
            }
            put(&mut o.block_sizes, Ok(BlockSizes::Split(r, w)))
        },
    ),
    key(
        "blockalign",
        "an offset alignment such as 4k (a multiple of 512)",
        |o, v| put(&mut o.blockalign, v.block_size()),
    ),
    log("write_bw_log", LOG_PREFIX, |o, v| {
        put(&mut o.write_bw_log, v.log_prefix())
    }),
    log("write_iops_log", LOG_PREFIX, |o, v| {
        put(&mut o.write_iops_log, v.log_prefix())
    }),
    log("write_lat_log", LOG_PREFIX, |o, v| {
        put(&mut o.write_lat_log, v.log_prefix())
    }),
    key(
        "log_avg_msec",
        "the logs' window in milliseconds up to 3600000 (default 500), or 0 for a line per I/O",
        |o, v| put(&mut o.log_avg_msec, v.int(0..=3_600_000)),
    ),
    on_off(
        "log_offset",
        "1 (per-I/O log lines carry the I/O's offset) or 0",
        |o, v| put(&mut o.log_offset, v.bool()),
    ),
    on_off(
        "log_prio",
        "1 (log lines carry the I/O priority value) or 0 (1 only for real time)",
        |o, v| put(&mut o.log_prio, v.bool()),
    ),
    log(
        "write_hist_log",
        "a file name prefix (PREFIX_clat_hist.N.log)",
        |o, v| put(&mut o.write_hist_log, v.log_prefix()),
    ),
    key(
        "log_hist_msec",
        "the histogram log's window in milliseconds up to 3600000 (default 0, as fio: no lines)",
        |o, v| put(&mut o.log_hist_msec, v.int(0..=3_600_000)),
    ),
    key(
        "log_hist_coarseness",
        "0 to 6: each column of the histogram log sums 2^N of fio's 1856 latency bins",
        |o, v| put(&mut o.log_hist_coarseness, v.int(0..=COARSENESS_MAX)),
    ),
    on_off(
        "per_job_logs",
        "1 (a log file per job) or 0 (one file for all)",
        |o, v| put(&mut o.per_job_logs, v.bool()),
    ),
    on_off(
        "slat_percentiles",
        "1 (report submission latency percentiles) or 0",
        |o, v| put(&mut o.slat_percentiles, v.bool()),
    ),
    key(
        "percentage_random",
        "a percentage of random I/O, or READ,WRITE,TRIM percentages (the rest is sequential)",
        |o, v| {
            let mut p = [100u32; 3];
            let parts: Vec<&str> = v.text.split(',').map(str::trim).collect();
            if parts.len() > 3 {
                return Err(v.bad());
            }
            for (i, part) in parts.iter().enumerate() {
                p[i] = int_in(part, 0..=100, v.expected)? as u32;
            }
            // One value is every direction's, as fio's blocksize-style lists.
            if parts.len() == 1 {
                p = [p[0]; 3];
            }
            put(&mut o.percentage_random, Ok(p))
        },
    ),
    key(
        "rw_sequencer",
        "sequential or identical: what the I/Os between random ones of rw=randread:N do",
        |o, v| match v.text {
            "sequential" => put(&mut o.rw_sequencer_identical, Ok(false)),
            "identical" => put(&mut o.rw_sequencer_identical, Ok(true)),
            _ => Err(v.bad()),
        },
    ),
    key("zonemode", "none, strided or zbd", |o, v| {
        put(
            &mut o.zonemode,
            ZoneMode::parse(v.text).ok_or_else(|| v.bad()),
        )
    }),
    key(
        "zonesize",
        "bytes such as 256m: I/O per zone (strided) or the zone size (zbd)",
        |o, v| put(&mut o.zonesize, v.size()),
    ),
    key(
        "zonerange",
        "bytes such as 256m: a strided zone's size",
        |o, v| put(&mut o.zonerange, v.size()),
    ),
    key(
        "zoneskip",
        "bytes such as 2g: skipped after each zone",
        |o, v| put(&mut o.zoneskip, v.size()),
    ),
    key(
        "max_open_zones",
        "zones open for writes at once, 0 (no limit) to 4096",
        |o, v| put(&mut o.max_open_zones, v.int(0..=4096)),
    ),
    alias("job_max_open_zones", "max_open_zones"),
    on_off("read_beyond_wp", ON_OFF, |o, v| {
        put(&mut o.read_beyond_wp, v.bool())
    }),
    key(
        "flow",
        "a weight from 0 to 1000: jobs of one flow_id keep their I/O in these proportions",
        |o, v| put(&mut o.flow, v.int(0..=crate::bench::flow::WEIGHT_MAX)),
    ),
    key(
        "flow_id",
        "an integer: the flow a job's flow= weighs in",
        |o, v| put(&mut o.flow_id, v.int(0..=u32::MAX)),
    ),
    key(
        "flow_sleep",
        "a wait when a flow holds the job back, up to 1s: microseconds or with a suffix",
        |o, v| {
            let d = v.duration_us()?;
            if d > Duration::from_secs(1) {
                return Err(v.bad());
            }
            put(&mut o.flow_sleep, Ok(d))
        },
    ),
    key(
        "latency_target",
        "a latency such as 500ms (a bare number is microseconds): the queue depth is searched \
         for the deepest that meets it",
        |o, v| put(&mut o.latency_target, v.duration_us()),
    ),
    key(
        "latency_window",
        "a time such as 5s (a bare number is microseconds): each depth's trial",
        |o, v| put(&mut o.latency_window, v.duration_us()),
    ),
    key(
        "latency_percentile",
        "a percentage (0 to 100, decimals allowed) of I/Os that must meet latency_target",
        |o, v| put(&mut o.latency_percentile, v.float(0.0..=100.0)),
    ),
    on_off("latency_run", ON_OFF, |o, v| {
        put(&mut o.latency_run, v.bool())
    }),
    key(
        "max_latency",
        "a latency such as 10ms (a bare number is microseconds): a slower I/O fails the job",
        |o, v| put(&mut o.max_latency, v.duration_us()),
    ),
    key("rate_process", "linear or poisson", |o, v| match v.text {
        "linear" => put(&mut o.rate_poisson, Ok(false)),
        "poisson" => put(&mut o.rate_poisson, Ok(true)),
        _ => Err(v.bad()),
    }),
    key(
        "rate_min",
        "bytes per second such as 1m, or READ,WRITE (their sum): a job below it fails",
        |o, v| {
            o.rate_min_bps = rate(v, |part| parse_size(part).map_err(|why| v.bad_because(why)))?;
            Ok(())
        },
    ),
    alias("ratemin", "rate_min"),
    key(
        "rate_iops_min",
        "I/Os per second, or READ,WRITE (their sum): a job below it fails",
        |o, v| {
            o.rate_min_iops = rate(v, |part| int_in(part, 0..=u64::MAX >> 8, v.expected))?;
            Ok(())
        },
    ),
    key(
        "rate_cycle",
        "milliseconds over which rate_min is checked (default 1000)",
        |o, v| {
            let ms: u64 = v.int(1..=3_600_000)?;
            put(&mut o.rate_cycle, Ok(Duration::from_millis(ms)))
        },
    ),
    alias("ratecycle", "rate_cycle"),
    key(
        "steadystate",
        "iops, iops_slope, bw or bw_slope, a colon and a limit (N% of the mean, or a number): \
         such as iops:10% or bw_slope:1%",
        |o, v| {
            let s = SteadySpec::parse(v.text).map_err(|why| v.bad_because(why));
            put(&mut o.steadystate, s)
        },
    ),
    alias("ss", "steadystate"),
    key(
        "steadystate_duration",
        "the steady-state window, whole seconds such as 30s (a bare number is microseconds, \
         as fio's)",
        |o, v| put(&mut o.ss_dur, v.duration_us()),
    ),
    alias("ss_dur", "steadystate_duration"),
    key(
        "steadystate_ramp_time",
        "a time such as 10s before steady state is judged (a bare number is microseconds)",
        |o, v| put(&mut o.ss_ramp, v.duration_us()),
    ),
    alias("ss_ramp", "steadystate_ramp_time"),
    on_off(
        "group_reporting",
        "1 or 0 (mqblk reports every job; steady state judges a section's jobs together)",
        |o, v| put(&mut o.group_reporting, v.bool()),
    ),
    key(
        "verify_pattern",
        "a pattern: 0xHEX, decimal numbers, \"strings\" and %o (the offset), such as \
         0xaa555aa5 or 0xff%o\"abcd\"-12",
        |o, v| {
            let p = VerifyPattern::parse(v.text).map_err(|why| v.bad_because(why));
            put(&mut o.verify_pattern, p)
        },
    ),
    key(
        "verify_interval",
        "bytes such as 512: a header every this many bytes of a block (it divides bs)",
        |o, v| put(&mut o.verify_interval, v.size_above_zero()),
    ),
    key(
        "verify_backlog",
        "a number of blocks: read back and check them after this many writes (0: after the run)",
        |o, v| put(&mut o.verify_backlog, v.int(0..=1 << 24)),
    ),
    key(
        "verify_backlog_batch",
        "a number of blocks read back each time the backlog is full (default verify_backlog)",
        |o, v| put(&mut o.verify_backlog_batch, v.int(1..=1 << 24)),
    ),
    on_off("exitall", ON_OFF, |o, v| put(&mut o.exitall, v.bool())),
    key(
        "exit_what",
        "group (the job's reporting group), stonewall (every running job) or all (every \
         job): whom exitall ends",
        |o, v| {
            put(
                &mut o.exit_what,
                ExitWhat::parse(v.text).ok_or_else(|| v.bad()),
            )
        },
    ),
    on_off("new_group", ON_OFF, |o, v| put(&mut o.new_group, v.bool())),
    on_off(
        "fill_device",
        "1 or 0 (1: write to the end of the device, whatever size= says)",
        |o, v| put(&mut o.fill_device, v.bool()),
    ),
    alias("fill_fs", "fill_device"),
    key(
        "uri",
        "an NBD URI such as nbd+unix:///export?socket=PATH (fio's nbd engine): the device",
        |o, v| {
            mqblk::spec::parse(v.text).map_err(|e| v.bad_because(e))?;
            put(&mut o.nbd_uri, v.non_empty())
        },
    ),
    key("pool", "a Ceph pool (fio's rbd engine)", |o, v| {
        put(&mut o.rbd_pool, v.non_empty())
    }),
    key("rbdname", "a Ceph RBD image (fio's rbd engine)", |o, v| {
        put(&mut o.rbd_name, v.non_empty())
    }),
    key(
        "clientname",
        "a Ceph client id (fio's rbd engine)",
        |o, v| put(&mut o.rbd_client, v.non_empty()),
    ),
    key(
        "dedupe_percentage",
        "a percentage of writes whose buffer repeats an earlier one",
        |o, v| put(&mut o.dedupe_percentage, v.int(0..=100)),
    ),
    key(
        "dedupe_mode",
        "repeat (an earlier buffer of the job) or working_set (one of \
         dedupe_working_set_percentage of the region's blocks)",
        |o, v| match v.text {
            "repeat" => put(&mut o.dedupe_working_set, Ok(false)),
            "working_set" => put(&mut o.dedupe_working_set, Ok(true)),
            _ => Err(v.bad()),
        },
    ),
    key(
        "dedupe_working_set_percentage",
        "a percentage of the region's blocks that dedupe_mode=working_set repeats (default 5)",
        |o, v| put(&mut o.dedupe_working_set_percentage, v.int(0..=100)),
    ),
    on_off(
        "dedupe_global",
        "1 or 0 (1: jobs share the dedupe working set)",
        |o, v| put(&mut o.dedupe_global, v.bool()),
    ),
    key(
        "buffer_compress_percentage",
        "a percentage each write buffer compresses by (that share of zeros per chunk)",
        |o, v| put(&mut o.buffer_compress_percentage, v.int(0..=100)),
    ),
    key(
        "buffer_compress_chunk",
        "bytes such as 512 (default): the chunk buffer_compress_percentage applies to",
        |o, v| {
            let b = v.size_above_zero()?;
            put(
                &mut o.buffer_compress_chunk,
                u32::try_from(b).map_err(|_| v.bad()),
            )
        },
    ),
];

/// Every key's name, in [`TABLE`]'s order.
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

/// fio's `rw=TYPE:N`: the mode, and a hole of N bytes after each
/// sequential I/O (negative: backwards).
fn rw_and_stride(v: &Value<'_>) -> Result<(RwMode, i64), BadValue> {
    let (mode, stride) = match v.text.split_once(':') {
        Some((m, n)) => {
            let n = n.trim();
            let (neg, digits) = match n.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, n),
            };
            let b = parse_size(digits).map_err(|why| v.bad_because(why))?;
            let b = i64::try_from(b).map_err(|_| v.bad())?;
            (m.trim(), if neg { -b } else { b })
        }
        None => (v.text, 0),
    };
    Ok((RwMode::parse(mode).ok_or_else(|| v.bad())?, stride))
}

/// fio's `READ,WRITE` rates, each parsed by `part`: mqblk paces their sum;
/// `None` for no limit (a sum of 0).
fn rate(
    v: &Value<'_>,
    part: impl Fn(&str) -> Result<u64, BadValue>,
) -> Result<Option<u64>, BadValue> {
    let mut total = 0u64;
    for p in v.text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        total = total.saturating_add(part(p)?);
    }
    Ok((total > 0).then_some(total))
}
