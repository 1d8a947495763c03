//! fio's content options of a job (`dedupe_percentage=`, `dedupe_mode=`,
//! `buffer_compress_percentage=` and the rest): what the engine's buffer
//! maker (mqblk-bench's `content`) is asked for.

/// fio's content options of one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ContentSpec {
    /// `dedupe_percentage=`.
    pub dedupe_pct: u8,
    /// `dedupe_mode=working_set` (else repeat).
    pub working_set: bool,
    /// `dedupe_working_set_percentage=` (fio's default 5).
    pub working_set_pct: u8,
    /// `dedupe_global=1`.
    pub global: bool,
    /// `buffer_compress_percentage=`.
    pub compress_pct: u8,
    /// `buffer_compress_chunk=` (fio's default 512).
    pub compress_chunk: u32,
}

impl ContentSpec {
    /// Whether the job asks for any of it.
    pub fn any(&self) -> bool {
        self.dedupe_pct > 0 || self.compress_pct > 0
    }
}
