//! At most one log line a second for what a flood can cause.

use std::time::{Duration, Instant};

/// At most one line a second for what a flood can cause (refusals,
/// deadlines), with a count of the lines held back.
#[derive(Default)]
pub(crate) struct LogLimit {
    last: Option<Instant>,
    held: u64,
}

impl LogLimit {
    pub(crate) fn line(&mut self, now: Instant, msg: std::fmt::Arguments<'_>) {
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.held += 1;
            return;
        }
        if self.held > 0 {
            eprintln!(
                "mqblk serve: {msg} (and {} more such lines in the last second)",
                self.held
            );
        } else {
            eprintln!("mqblk serve: {msg}");
        }
        self.last = Some(now);
        self.held = 0;
    }
}
