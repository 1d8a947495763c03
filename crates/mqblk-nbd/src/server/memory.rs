//! The server's memory budget: one counter of the bytes every connection
//! holds in data buffers (in flight, queued as replies, and cached for
//! reuse) and in queued replies without data (errors, block status),
//! shared by every I/O thread. Each connection also keeps its own
//! bound (`ConnLimits::max_bytes`, counted in `conn/state.rs`); this one
//! bounds their sum, so that many clients that queue reads and never read
//! the replies cannot make the server allocate a per-connection bound
//! each. It sits below the shared state (`shared.rs`), which holds one.
//!
//! The budget has a reserve: above `soft` (three quarters of it), only a
//! connection that holds less than its share of the reserve
//! (`reserve / max_connections`) may take more, and only up to that share.
//! So the connections that hold the most stop taking requests, and a
//! polite client with small requests is still served. Why buffers never
//! take it past the budget: memory taken above `soft` is taken within a
//! share, so at most `max_connections` shares are out above `soft`. Replies
//! without data are charged as they are queued (each is small, at most
//! one block status of 512 KiB), and a connection past its share takes no
//! request that would queue another. Every charge is a
//! compare-and-swap on one atomic: no lock, and not on the device's I/O
//! path (a connection takes memory per request only when its cache has no
//! buffer of the size).

use std::sync::atomic::{AtomicU64, Ordering};

/// The memory every connection's buffers may hold together.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    max: u64,
    /// Above this, only connections under `share` take memory.
    soft: u64,
    /// A connection's share of the reserve (`max - soft`).
    share: u64,
    used: AtomicU64,
    /// Bytes given back since the server started: the I/O threads retry
    /// their waiting connections when it moves.
    freed: AtomicU64,
}

impl MemoryBudget {
    /// `max` bytes for every connection's buffers together; `connections`
    /// is the most that are served at once.
    pub(crate) fn new(max: u64, connections: usize) -> MemoryBudget {
        let reserve = max / 4;
        MemoryBudget {
            max,
            soft: max - reserve,
            share: reserve / connections.max(1) as u64,
            used: AtomicU64::new(0),
            freed: AtomicU64::new(0),
        }
    }

    /// The budget, in bytes.
    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    /// What a connection may hold once the budget is past its soft mark.
    pub(crate) fn share(&self) -> u64 {
        self.share
    }

    /// Bytes held now.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Bytes given back so far (a count that only grows).
    pub(crate) fn freed(&self) -> u64 {
        self.freed.load(Ordering::Relaxed)
    }

    /// Take `need` bytes for a connection that holds `mine`, if the budget
    /// allows: below the soft mark anyone may, above it only a connection
    /// that stays within its share.
    pub(crate) fn try_charge(&self, mine: u64, need: u64) -> bool {
        let within_share = mine + need <= self.share;
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            if used + need > self.soft && !within_share {
                return false;
            }
            match self.used.compare_exchange_weak(
                used,
                used + need,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
    }

    /// May a connection holding `mine` take another request? Not past the
    /// soft mark if it holds more than its share.
    pub(crate) fn admits(&self, mine: u64) -> bool {
        mine <= self.share || self.used() <= self.soft
    }

    /// Count `n` bytes already taken (replies without data, which are not
    /// asked for: see [`MemoryBudget::admits`]).
    pub(crate) fn charge(&self, n: u64) {
        self.used.fetch_add(n, Ordering::Relaxed);
    }

    /// Give back `n` bytes counted with [`MemoryBudget::try_charge`] or
    /// [`MemoryBudget::charge`].
    pub(crate) fn credit(&self, n: u64) {
        if n == 0 {
            return;
        }
        let before = self.used.fetch_sub(n, Ordering::Relaxed);
        debug_assert!(before >= n, "credited more than was charged");
        self.freed.fetch_add(n, Ordering::Relaxed);
    }

    /// True while a freed buffer may stay in its connection's cache: the
    /// budget is not under pressure (below half its soft mark).
    pub(crate) fn may_cache(&self, size: u64) -> bool {
        self.used() + size <= self.soft / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_soft_mark_only_connections_within_their_share_take_memory() {
        // 1 GiB for 1024 connections: soft 768 MiB, share 256 KiB.
        let b = MemoryBudget::new(1 << 30, 1024);
        assert_eq!(b.share(), 256 << 10);
        // 24 requests of 32 MiB take the budget to its soft mark.
        for _ in 0..24 {
            assert!(b.try_charge(0, 32 << 20));
        }
        assert_eq!(b.used(), 768 << 20);
        // A big request waits, even from a connection that holds nothing.
        assert!(!b.try_charge(0, 32 << 20));
        // Small requests within a share are served, from every connection.
        for _ in 0..1024 {
            assert!(b.try_charge(0, 128 << 10));
            assert!(b.try_charge(128 << 10, 128 << 10));
            assert!(!b.try_charge(256 << 10, 4096));
        }
        assert_eq!(b.used(), 1 << 30);
        let freed = b.freed();
        b.credit(32 << 20);
        assert_eq!(b.freed(), freed + (32 << 20));
        assert!(!b.may_cache(4096));
        // A connection past its share takes no request at all.
        assert!(!b.admits((256 << 10) + 1));
        assert!(b.admits(256 << 10));
        b.charge(100);
        b.credit(100);
        b.credit(992 << 20);
        assert!(b.admits(u64::MAX));
    }
}
