//! What a job file that cannot be used is told: the line at fault and why.

use std::fmt;

/// A job file that cannot be used, with the line at fault (1-based; 0 when
/// the fault is the file as a whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFileError {
    /// 1-based line number, or 0 for the whole file.
    pub line: usize,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl fmt::Display for JobFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for JobFileError {}

pub(super) fn err(line: usize, message: impl Into<String>) -> JobFileError {
    JobFileError {
        line,
        message: message.into(),
    }
}
