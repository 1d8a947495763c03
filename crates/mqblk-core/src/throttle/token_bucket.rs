//! A token bucket shared by many contexts without a lock: the generic cell
//! rate algorithm (GCRA), one atomic compare-and-swap per charge.
//!
//! The bucket keeps a theoretical arrival time (`tat`): the moment up to
//! which the rate has been spent. Charging `units` at `now` moves it to
//! `max(tat, now) + units / rate`, and the work may go once `tat` is at
//! most one burst window ahead of the clock. An idle bucket therefore lets
//! a burst of one window's worth through at once, and after that exactly
//! the rate. The rate and the window are atomics: a new limit applies to
//! the next charge, under load, with nothing frozen.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// One rate limit (I/Os or bytes per second).
#[derive(Debug, Default)]
pub struct TokenBucket {
    /// Units per second; 0 is unlimited.
    rate: AtomicU64,
    /// How far ahead of the clock the spent rate may run: the burst.
    burst_ns: AtomicU64,
    /// Theoretical arrival time, in the clock's nanoseconds.
    tat: AtomicU64,
}

impl TokenBucket {
    /// A bucket of `rate` units per second (0: unlimited) that lets a
    /// burst of `burst_ns` worth through.
    pub fn new(rate: u64, burst_ns: u64) -> TokenBucket {
        TokenBucket {
            rate: AtomicU64::new(rate),
            burst_ns: AtomicU64::new(burst_ns),
            tat: AtomicU64::new(0),
        }
    }

    /// Units per second (0: unlimited).
    pub fn rate(&self) -> u64 {
        self.rate.load(Relaxed)
    }

    /// Change the rate (0: unlimited). Work already charged keeps its time.
    pub fn set_rate(&self, rate: u64) {
        self.rate.store(rate, Relaxed);
    }

    /// Change the burst window.
    pub fn set_burst_ns(&self, burst_ns: u64) {
        self.burst_ns.store(burst_ns, Relaxed);
    }

    /// Charge `units` at `now_ns`; returns when the work may go (`now_ns`
    /// or later).
    #[inline]
    pub fn charge(&self, units: u64, now_ns: u64) -> u64 {
        let rate = self.rate.load(Relaxed);
        if rate == 0 || units == 0 {
            return now_ns;
        }
        let cost = (u128::from(units) * 1_000_000_000 / u128::from(rate)).min(u64::MAX as u128);
        let cost = (cost as u64).max(1);
        let burst = self.burst_ns.load(Relaxed);
        let mut old = self.tat.load(Relaxed);
        loop {
            let new = old.max(now_ns).saturating_add(cost);
            match self.tat.compare_exchange_weak(old, new, Relaxed, Relaxed) {
                Ok(_) => return old.saturating_sub(burst).max(now_ns),
                Err(cur) => old = cur,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Charge one unit every `gap_ns` from `start` for `n` units, sending
    /// each when the bucket says; returns the send times.
    fn drive(b: &TokenBucket, start: u64, n: u64, gap_ns: u64) -> Vec<u64> {
        (0..n).map(|i| b.charge(1, start + i * gap_ns)).collect()
    }

    #[test]
    fn an_idle_bucket_passes_one_window_then_the_rate() {
        // 1000/s with a 10 ms window: 11 at once (the window's 10, plus the
        // one that starts it), then one each millisecond.
        let b = TokenBucket::new(1000, 10 * MS);
        let t0 = 1_000 * MS;
        let at = drive(&b, t0, 30, 0);
        assert!(at[..11].iter().all(|&t| t == t0), "{at:?}");
        for (i, &t) in at.iter().enumerate().skip(11) {
            assert_eq!(t, t0 + (i as u64 - 10) * MS);
        }
    }

    #[test]
    fn a_saturated_bucket_holds_the_rate_over_a_long_run() {
        // Offer far more than the rate for 5 simulated seconds: what goes
        // within the run is the rate times the run, plus one window.
        let b = TokenBucket::new(10_000, 10 * MS);
        let t0 = 5_000 * MS;
        let mut sent = 0u64;
        let mut now = t0;
        let end = t0 + 5_000 * MS;
        // A client with 32 in flight: each I/O is charged when the previous
        // one in its slot went.
        let mut slots = vec![t0; 32];
        while now < end {
            let i = (sent % 32) as usize;
            now = slots[i];
            let go = b.charge(1, now);
            if go < end {
                sent += 1;
            }
            slots[i] = go;
            if go >= end {
                break;
            }
        }
        let expected = 10_000 * 5 + 100;
        assert!(
            sent.abs_diff(expected) <= 32,
            "sent {sent}, expected {expected}"
        );
    }

    #[test]
    fn bytes_are_charged_by_size() {
        // 1 MiB/s, no burst: a 4 KiB charge costs 1/256 s.
        let b = TokenBucket::new(1 << 20, 0);
        let t0 = 1_000 * MS;
        assert_eq!(b.charge(4096, t0), t0);
        assert_eq!(b.charge(4096, t0), t0 + 1_000_000_000 / 256);
    }

    #[test]
    fn a_new_rate_applies_to_the_next_charge() {
        let b = TokenBucket::new(100, 0);
        let t0 = 1_000 * MS;
        assert_eq!(b.charge(1, t0), t0);
        assert_eq!(b.charge(1, t0), t0 + 10 * MS);
        b.set_rate(1000);
        // The charge already made holds; the next costs 1 ms.
        assert_eq!(b.charge(1, t0), t0 + 20 * MS);
        assert_eq!(b.charge(1, t0), t0 + 21 * MS);
        b.set_rate(0);
        assert_eq!(b.charge(1, t0), t0, "unlimited");
    }

    #[test]
    fn contexts_sharing_a_bucket_share_its_rate() {
        use std::sync::Arc;
        let b = Arc::new(TokenBucket::new(1000, 0));
        let t0 = 1_000 * MS;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || (0..250).map(|_| b.charge(1, t0)).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.sort_unstable();
        // 1000 charges at 1000/s: one per millisecond, none twice.
        for (i, &t) in all.iter().enumerate() {
            assert_eq!(t, t0 + i as u64 * MS);
        }
    }
}
