//! The operation of a bio and the sector unit: the leaf every other
//! module of the core builds on (Linux `enum req_op` and `SECTOR_SHIFT` in
//! `blk_types.h`). It imports nothing of the crate.

/// A sector is always 512 bytes, whatever the logical block size.
pub const SECTOR_SIZE: u64 = 512;
/// log2 of [`SECTOR_SIZE`].
pub const SECTOR_SHIFT: u32 = 9;

/// The operation of a bio or request (Linux `enum req_op`). As in Linux,
/// the operations that write have odd numbers, so [`Op::is_write`] is one
/// bit test (`op_is_write`), and the data operations come first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Read data into the segments.
    Read = 0,
    /// Write the segments' data.
    Write = 1,
    /// Make previously completed writes durable.
    Flush = 2,
    /// The range's contents are no longer needed.
    Discard = 3,
    /// Make the range read back as zeros.
    WriteZeroes = 5,
}

impl Op {
    /// True for operations that modify the device.
    #[inline]
    pub const fn is_write(self) -> bool {
        self as u8 & 1 != 0
    }

    /// True for operations that carry data segments.
    #[inline]
    pub fn has_data(self) -> bool {
        (self as u8) < 2
    }

    /// Lower-case name, as diskstats and fio print it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "discard",
            Op::WriteZeroes => "write-zeroes",
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
