//! What the kernel counts for an experiment, read around each point: this
//! process's CPU time (every thread, io_uring's workers and the psync
//! engine's threads included), the TLB shootdowns of the whole machine
//! (`/proc/interrupts`, line `TLB`) and the user pages pinned for I/O
//! (`/proc/vmstat`, `nr_foll_pin_acquired`: what a direct read into an
//! unregistered buffer costs per page).
//!
//! The last two are machine-wide: another process's work shows in them
//! too. A counter this kernel does not have reads as `None`.

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    /// CPU time of this process, user and system, ns.
    pub cpu_ns: u64,
    /// TLB shootdown interrupts taken, summed over every CPU.
    pub tlb_shootdowns: Option<u64>,
    /// User pages pinned for I/O since boot.
    pub pages_pinned: Option<u64>,
}

/// What changed between two snapshots.
#[derive(Clone, Copy, Debug, Default)]
pub struct Delta {
    /// CPU time of this process, ns.
    pub cpu_ns: u64,
    /// TLB shootdowns (machine-wide).
    pub tlb_shootdowns: Option<u64>,
    /// Pages pinned for I/O (machine-wide).
    pub pages_pinned: Option<u64>,
}

impl Snapshot {
    /// Read every counter now.
    pub fn now() -> Snapshot {
        Snapshot {
            cpu_ns: process_cpu_ns(),
            tlb_shootdowns: std::fs::read_to_string("/proc/interrupts")
                .ok()
                .and_then(|t| tlb_shootdowns(&t)),
            pages_pinned: std::fs::read_to_string("/proc/vmstat")
                .ok()
                .and_then(|t| vmstat(&t, "nr_foll_pin_acquired")),
        }
    }

    /// What changed from `self` to `later`.
    pub fn until(&self, later: &Snapshot) -> Delta {
        let diff = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        Delta {
            cpu_ns: later.cpu_ns.saturating_sub(self.cpu_ns),
            tlb_shootdowns: diff(self.tlb_shootdowns, later.tlb_shootdowns),
            pages_pinned: diff(self.pages_pinned, later.pages_pinned),
        }
    }
}

/// CPU time of every thread of this process so far, user and system, ns.
pub fn process_cpu_ns() -> u64 {
    // SAFETY: rusage is plain old data; all zeros is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage through a pointer to our local;
    // RUSAGE_SELF is always a valid target.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

/// The sum of the per-CPU counts on `/proc/interrupts`' `TLB:` line.
fn tlb_shootdowns(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.trim_start().starts_with("TLB:"))?;
    let counts = line.trim_start()["TLB:".len()..]
        .split_whitespace()
        .map_while(|w| w.parse::<u64>().ok());
    Some(counts.sum())
}

/// The value of `key` in `/proc/vmstat`'s text.
fn vmstat(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        if k == key {
            v.trim().parse().ok()
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_tlb_line_and_vmstat() {
        let interrupts = concat!(
            "           CPU0       CPU1\n",
            "  0:         33          0   IO-APIC    2-edge      timer\n",
            " TLB:     464447     469953   TLB shootdowns\n"
        );
        assert_eq!(tlb_shootdowns(interrupts), Some(934_400));
        assert_eq!(tlb_shootdowns("  0: 1 2 timer\n"), None);
        let vm = "nr_free_pages 10\nnr_foll_pin_acquired 63776259\nnr_foll_pin_released 63776259\n";
        assert_eq!(vmstat(vm, "nr_foll_pin_acquired"), Some(63_776_259));
        assert_eq!(vmstat(vm, "nr_missing"), None);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn cpu_time_grows() {
        let a = Snapshot::now();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let d = a.until(&Snapshot::now());
        assert!(d.cpu_ns > 0);
    }
}
