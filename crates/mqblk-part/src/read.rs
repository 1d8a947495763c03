//! How the parsers read the disk: a callback for whole sectors, so that they
//! do no I/O of their own and any bytes can be fed to them.

/// Reads `buf.len()` bytes (whole sectors) from logical sector `lba`.
pub type Read<'a> = dyn FnMut(u64, &mut [u8]) -> std::io::Result<()> + 'a;
