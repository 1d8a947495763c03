//! The layer's clocks. A clock read costs tens of nanoseconds, so the per-I/O
//! path reads one at most once per batch (the plug's cached time, as Linux's
//! `plug->cur_ktime`), and not at all when stats are off. Timeouts use the
//! coarse clock (Linux jiffies), which the vDSO answers from memory.

/// Monotonic nanoseconds (CLOCK_MONOTONIC via the vDSO).
#[inline]
pub fn now_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// Coarse monotonic milliseconds (CLOCK_MONOTONIC_COARSE: a few ms of
/// resolution, a memory read in the vDSO).
#[inline]
pub fn coarse_ms() -> u64 {
    read(libc::CLOCK_MONOTONIC_COARSE) / 1_000_000
}

#[inline]
fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the pointer we own; both
    // clock ids exist on every Linux this builds for.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Thread CPU time (user, system) in nanoseconds, from getrusage.
pub fn thread_cpu_ns() -> (u64, u64) {
    // SAFETY: rusage is plain old data; zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage to the pointer we own.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (tv(ru.ru_utime), tv(ru.ru_stime))
}
