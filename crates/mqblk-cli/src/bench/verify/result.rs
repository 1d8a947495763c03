//! What a verifying job reports: its counts, and its first mismatches in
//! detail.

use std::fmt::Write as _;

use super::header::Header;

/// Mismatches kept in detail per job (all are counted).
pub const MISMATCHES_KEPT: usize = 16;

/// One mismatch, as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Device offset of the block.
    pub offset: u64,
    /// What is wrong.
    pub reason: &'static str,
    /// The header the block should carry (generation and seed are 0 when
    /// the job did not write the block itself: a read-only check).
    pub expected: Header,
    /// The header read.
    pub actual: Header,
    /// The checksum computed over what was read: its name and hex value.
    pub computed: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "verify: {} at offset {}: expected {}, got {} (computed {})",
            self.reason, self.offset, self.expected, self.actual, self.computed
        )
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
    /// The first [`MISMATCHES_KEPT`] mismatches.
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
    /// mismatches kept up to [`MISMATCHES_KEPT`].
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
