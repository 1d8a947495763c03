//! What a verifying job reports: its counts, and its first mismatches in
//! detail.

use std::fmt::Write as _;

use super::header::Header;

/// Mismatches kept in detail per job (all are counted).
pub const MISMATCHES_KEPT: usize = 16;

/// Bytes of an interval shown when they hold no verify header.
pub const FOUND_BYTES_SHOWN: usize = 16;

/// What a mismatched interval held where its header goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A verify header (its magic is fio's).
    Header(Header),
    /// No verify header: the interval's first bytes, as read.
    Bytes([u8; FOUND_BYTES_SHOWN]),
    /// Data of a verify type without headers (`verify=pattern`), or
    /// anything where zeros were due: the reason says what differs.
    Data,
}

/// Who wrote the block the check expected, which decides the expected
/// header's seed, numberio, thread and header checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// This run's record of its last write.
    Recorded,
    /// A read-only check takes any writer's valid block: the one its
    /// found header names.
    AsFound,
    /// A read-only check, and no header was found: any writer would do.
    Any,
}

/// One mismatch, as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Device offset of the block.
    pub offset: u64,
    /// What is wrong.
    pub reason: &'static str,
    /// The header the block should carry (None: the reason says what was
    /// due, zeros or the pattern).
    pub expected: Option<Header>,
    /// Whose write the expected header is.
    pub writer: Writer,
    /// What was read.
    pub found: Found,
    /// The checksum computed over what was read: its name and hex value.
    pub computed: String,
}

impl Mismatch {
    /// What was read, in words: a header, or the bytes where it should be.
    pub fn found_text(&self) -> String {
        match &self.found {
            Found::Header(h) => format!("header {h}"),
            Found::Bytes(b) => format!(
                "no verify header (the first {FOUND_BYTES_SHOWN} bytes: {})",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            ),
            Found::Data => "data that differs".to_string(),
        }
    }

    /// What was due, in words (empty when the reason says it).
    pub fn expected_text(&self) -> String {
        let Some(h) = &self.expected else {
            return String::new();
        };
        match self.writer {
            Writer::Recorded => format!("header {h}"),
            Writer::AsFound => format!("header (of the writer the found header names) {h}"),
            // The seed, numberio, thread and so the header's checksum are
            // whatever the writer's were: only the placement is known.
            Writer::Any => format!(
                "a header {{magic={:#06x} type={} len={} offset={}}} from any writer",
                h.magic, h.kind, h.len, h.offset
            ),
        }
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "verify: {} at offset {}: found {}",
            self.reason,
            self.offset,
            self.found_text()
        )?;
        if self.expected.is_some() {
            write!(f, "; expected {}", self.expected_text())?;
        }
        write!(f, " (computed {})", self.computed)
    }
}

/// What a job's verification found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyResult {
    /// `verify=` name.
    pub kind: &'static str,
    /// Writes completed with a header (a block written twice counts twice).
    pub blocks_written: u64,
    /// Discards completed (`trim_percentage=`).
    pub blocks_trimmed: u64,
    /// Write-zeroes completed (`write_zeroes_percentage=`).
    pub blocks_zeroed: u64,
    /// Reads checked, during the run and in the verify phase (the verify
    /// phase reads each block written once).
    pub blocks_verified: u64,
    /// Mismatches found.
    pub errors: u64,
    /// The first `MISMATCHES_KEPT` (8) mismatches.
    pub mismatches: Vec<Mismatch>,
    /// `verify_fatal=1` stopped the job at the first mismatch.
    pub stopped: bool,
    /// A signal stopped the verify phase: `blocks_verified` is what was
    /// checked by then.
    pub interrupted: bool,
    /// Blocks a read-only check found never written (zeros).
    pub blocks_unwritten: u64,
    /// The record of what was written outgrew its budget: some blocks
    /// were checked for a valid header of their offset, not their exact
    /// generation.
    pub loose: bool,
}

impl VerifyResult {
    /// Add another job's verification (a group's report): counts summed,
    /// mismatches kept up to `MISMATCHES_KEPT`.
    pub fn fold(&mut self, other: &VerifyResult) {
        self.blocks_written += other.blocks_written;
        self.blocks_trimmed += other.blocks_trimmed;
        self.blocks_zeroed += other.blocks_zeroed;
        self.blocks_verified += other.blocks_verified;
        self.blocks_unwritten += other.blocks_unwritten;
        self.errors += other.errors;
        let room = MISMATCHES_KEPT.saturating_sub(self.mismatches.len());
        self.mismatches
            .extend(other.mismatches.iter().take(room).cloned());
        self.stopped |= other.stopped;
        self.interrupted |= other.interrupted;
        self.loose |= other.loose;
    }

    /// fio-style lines for the normal report.
    pub fn describe(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  verify       : {}, {} blocks written{}, {} verified{}{}{}, {} errors{}",
            self.kind,
            self.blocks_written,
            if self.blocks_trimmed + self.blocks_zeroed > 0 {
                format!(
                    " ({} trimmed, {} zeroed)",
                    self.blocks_trimmed, self.blocks_zeroed
                )
            } else {
                String::new()
            },
            self.blocks_verified,
            if self.blocks_unwritten > 0 {
                format!(" ({} never written)", self.blocks_unwritten)
            } else {
                String::new()
            },
            if self.loose {
                " (some by header only: the record reached its budget)"
            } else {
                ""
            },
            if self.interrupted {
                " (the verify phase was stopped by the signal: this is what it checked by then)"
            } else {
                ""
            },
            self.errors,
            if self.stopped {
                " (stopped at the first: verify_fatal=1)"
            } else {
                ""
            }
        );
        for m in &self.mismatches {
            let _ = writeln!(out, "    {m}");
        }
        if self.errors > self.mismatches.len() as u64 {
            let _ = writeln!(
                out,
                "    ... and {} more",
                self.errors - self.mismatches.len() as u64
            );
        }
    }
}
