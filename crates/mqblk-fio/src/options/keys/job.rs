//! The job itself: its name, its device and layer, what it reads and writes,
//! how much, how deep and for how long.

use mqblk::queue::QueueMode;
use mqblk::spec::parse_size;

use crate::job::RwMode;

use super::entry::{alias, key, on_off, put, Entry, ON_OFF, PERCENT};
use crate::options::values::{
    BadValue, Value, DURATION_EXPECTED, HW_QUEUES_MAX, IODEPTH_MAX, JOBS_MAX, NAME_LEN_MAX,
};

/// The keys of this group, in the order they are listed.
pub(super) const KEYS: &[Entry] = &[
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
    alias("readwrite", "rw"),
    key(
        "bs",
        "a block size from 512 to 64M that is a multiple of 512, such as 4k",
        |o, v| put(&mut o.bs, v.block_size()),
    ),
    alias("blocksize", "bs"),
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
    alias("filesize", "size"),
    key("runtime", DURATION_EXPECTED, |o, v| {
        put(&mut o.runtime, v.duration_or_none())
    }),
    alias("timeout", "runtime"),
    on_off("time_based", ON_OFF, |o, v| {
        put(&mut o.time_based, v.bool())
    }),
    key("ramp_time", DURATION_EXPECTED, |o, v| {
        put(&mut o.ramp_time, v.duration_or_none())
    }),
    key("rwmixread", PERCENT, |o, v| {
        put(&mut o.rwmixread, v.int(0..=100))
    }),
    key("rwmixwrite", PERCENT, |o, v| {
        put(&mut o.rwmixread, v.int(0..=100u32).map(|w| 100 - w))
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
        "segments",
        "1 to 256: buffer pieces per I/O (vectored bios)",
        |o, v| put(&mut o.segments, v.int(1..=256)),
    ),
    on_off(
        "fill_device",
        "1 or 0 (1: write to the end of the device, whatever size= says)",
        |o, v| put(&mut o.fill_device, v.bool()),
    ),
    alias("fill_fs", "fill_device"),
];

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
