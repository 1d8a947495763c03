//! Reading the files mqblk is pointed at (a stats directory's JSON, dm
//! tables, TLS certificates and keys; plot inputs and fonts are
//! `mqblk_plot`'s): each kind has a size cap,
//! and at most one byte past it is read, so that `/dev/zero` or a runaway
//! log is refused at once instead of filling memory. The reader is
//! `mqblk_core::input`'s (so that the crates below this one use the same);
//! the caps of the command line's own files are here, and the TLS files'
//! cap is `mqblk_nbd`'s.

pub use mqblk_core::input::{read_capped, read_text_capped, InputError};
pub use mqblk_nbd::tls::PEM_FILE_BYTES_MAX;

/// A bench's `--stats-dir` JSON (`mqblk stat`): a few hundred bytes a device.
pub const STATS_JSON_BYTES_MAX: u64 = 16 << 20;
