//! What a job checks, and what it does on an error.

use crate::job::{ContinueOnError, VerifyKind};
use crate::verify_pattern::VerifyPattern;

use super::entry::{key, on_off, put, Entry};
use crate::options::fio::FIO_ENGINE_HINT;
use crate::options::values::bad;

/// The keys of this group, in the order they are listed.
pub(super) const KEYS: &[Entry] = &[
    key(
        "verify",
        "crc32c (or crc32c-intel), crc32, crc64, crc16, crc7, md5, sha1, sha3-224, sha3-256, \
         sha3-384, sha3-512, xxhash, sha256, pattern (verify_pattern= alone), meta (checked as \
         crc32c), sha512 (checked with sha256), null or none",
        |o, v| {
            // fio's meta checks each block's header (offset, length,
            // sequence); mqblk's header carries those and a crc32c of the
            // block, so meta is checked as crc32c, a superset. Another
            // checksum detects the same corruption: the job file is told
            // which one is used (options::fio::value_note).
            let name = crate::options::fio::verify_stand_in(v.text).unwrap_or(v.text);
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
    on_off(
        "trim_verify_zero",
        "1 or 0 (default 0: a discarded block may read as zeros or as what it held; 1: zeros)",
        |o, v| put(&mut o.trim_verify_zero, v.bool()),
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
];
