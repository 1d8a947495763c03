//! Where each I/O goes and what it carries: offsets, sizes and their mix,
//! random distributions, zones, trims and write-zeroes, syncs, think time, and
//! the content of written buffers.

use std::time::Duration;

use crate::job::{BlockSizes, Distribution};
use crate::random_generator::RandomGenerator;
use crate::zone::ZoneMode;

use super::entry::{alias, key, on_off, put, Entry, ON_OFF};
use crate::options::values::{int_in, is_block_size, Value};

/// The keys of this group, in the order they are listed.
pub(super) const KEYS: &[Entry] = &[
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
    on_off(
        "norandommap",
        "1 or 0 (1: a random job may hit a block twice in a pass)",
        |o, v| put(&mut o.norandommap, v.bool()),
    ),
    key(
        "random_generator",
        "tausworthe, tausworthe64 or lfsr",
        |o, v| {
            put(
                &mut o.random_generator,
                RandomGenerator::parse(v.text).ok_or_else(|| v.bad()),
            )
        },
    ),
    on_off("randrepeat", ON_OFF, |o, v| {
        put(&mut o.randrepeat, v.bool())
    }),
    key(
        "random_distribution",
        "random, zipf:THETA[:CENTER] (THETA > 0, not 1), pareto:H[:CENTER] (0 < H < 1), \
         normal:DEV[:CENTER] (percent), zoned:A/S:... (percent of I/O to percent of the \
         region) or zoned_abs:A/SIZE:..., with up to three groups (reads, writes, trims), or \
         sequence:B,B,... (up to 64 block indices, taken in that order)",
        |o, v| {
            let d = Distribution::parse(v.text).map_err(|why| v.bad_because(why));
            put(&mut o.distribution, d)
        },
    ),
    on_off(
        "random_sequence_stride",
        "1 or 0 (1: a sequence's blocks are relative to a group that moves on by the \
         sequence's length each cycle; 0: absolute, repeated)",
        |o, v| put(&mut o.random_sequence_stride, v.bool()),
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
    key(
        "trim_percentage",
        "a percentage from 0 to 100: the share of a verify job's writes that are discards",
        |o, v| put(&mut o.trim_percentage, v.int(0..=100)),
    ),
    key(
        "write_zeroes_percentage",
        "a percentage from 0 to 100: the share of a verify job's writes that are write-zeroes",
        |o, v| put(&mut o.write_zeroes_percentage, v.int(0..=100)),
    ),
    key(
        "fsync",
        "a number of writes after which to flush (0: never)",
        |o, v| put(&mut o.fsync_every, v.int(0..=u32::MAX)),
    ),
    alias("fdatasync", "fsync"),
    on_off("end_fsync", ON_OFF, |o, v| put(&mut o.end_fsync, v.bool())),
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
