//! The machine an experiment ran on, as a report states it: processor,
//! cores this process may use, memory, kernel, system, mqblk's version and
//! the time, read from `/proc`, `/etc/os-release` and the C library.

/// What the report says about the machine.
#[derive(Clone, Debug)]
pub struct Machine {
    /// The processor's model name.
    pub cpu: String,
    /// CPUs this process may use.
    pub cores: usize,
    /// Memory, as `/proc/meminfo` gives it.
    pub memory: String,
    /// The kernel's release.
    pub kernel: String,
    /// The system's name.
    pub os: String,
    /// mqblk's version.
    pub mqblk: &'static str,
    /// When the report was written (UTC).
    pub date: String,
}

impl Machine {
    /// Describe this machine now; what cannot be read says so.
    pub fn now() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let field = |text: &str, key: &str| {
            text.lines().find_map(|l| {
                let (k, v) = l.split_once([':', '='])?;
                (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
            })
        };
        let unknown = || "unknown".to_string();
        Machine {
            cpu: field(&read("/proc/cpuinfo"), "model name").unwrap_or_else(unknown),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory: field(&read("/proc/meminfo"), "MemTotal").unwrap_or_else(unknown),
            kernel: Some(read("/proc/sys/kernel/osrelease").trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(unknown),
            os: field(&read("/etc/os-release"), "PRETTY_NAME").unwrap_or_else(unknown),
            mqblk: env!("CARGO_PKG_VERSION"),
            date: utc_now(),
        }
    }

    /// (what, value) lines, in the report's order.
    pub fn lines(&self) -> Vec<(&'static str, String)> {
        vec![
            ("processor", self.cpu.clone()),
            ("cores this process may use", self.cores.to_string()),
            ("memory", self.memory.clone()),
            ("kernel", self.kernel.clone()),
            ("system", self.os.clone()),
            ("mqblk", self.mqblk.to_string()),
            ("written", self.date.clone()),
        ]
    }
}

/// The time now, `2026-11-26 14:03 UTC`, through the C library.
fn utc_now() -> String {
    // SAFETY: time(NULL) only returns the time.
    let t = unsafe { libc::time(std::ptr::null_mut()) };
    // SAFETY: tm is plain old data; all zeros is a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: gmtime_r reads `t` and writes one tm through a pointer to our
    // local; it returns null only for a time it cannot represent.
    if unsafe { libc::gmtime_r(&t, &mut tm) }.is_null() {
        return "unknown".into();
    }
    let mut buf = [0u8; 64];
    // SAFETY: strftime writes at most buf.len() bytes, NUL included, into
    // our buffer, from a NUL-terminated format and the tm filled above.
    let n = unsafe {
        libc::strftime(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%Y-%m-%d %H:%M UTC".as_ptr(),
            &tm,
        )
    };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)]
    fn describes_this_machine() {
        let m = Machine::now();
        assert!(m.cores >= 1);
        assert!(m.date.ends_with(" UTC") && m.date.len() == 20, "{}", m.date);
        assert_eq!(m.lines().len(), 7);
    }
}
