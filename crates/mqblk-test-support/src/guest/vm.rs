//! One boot of the guest: qemu under TCG (a nested KVM guest hangs at
//! kernel entry), its memory a shared memfd so that a vhost-user backend
//! can map it, and its one disk a `vhost-user-blk-pci` device with two
//! queues on the backend's socket. Either the guest powers itself off
//! ([`boot`]: the boot is bounded), or the test gets control back once
//! the guest says a mark and the guest keeps running ([`start`]: a
//! [`Running`] guest). qemu, started by this module, is killed by its pid
//! if it outlives the bound, when a [`Running`] guest is dropped, or when
//! the test fails.

use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::initramfs::MARK;
use super::kernel::Kernel;
use crate::bound::time_bound;
use crate::child::{Line, Watched};
use crate::machine::require_tool;

/// The longest a boot may take, from qemu's start to its exit: TCG is
/// slow and CI is loaded (a boot that runs mkfs takes about 10 s alone).
pub const BOOT_MAX: Duration = Duration::from_secs(120);

/// The guest's queues: as many as its vCPUs, so that each is used.
pub const QUEUES: u32 = 2;

/// The guest's memory, in MiB.
const MEMORY_MIB: u32 = 512;

/// The console lines shown when a boot fails.
const TAIL_LINES: usize = 60;

/// One guest at a time in a test process: with 2 vCPUs under TCG, one
/// guest takes both of the machine's cores.
static ONE_GUEST: Mutex<()> = Mutex::new(());

/// What a boot does, named on the kernel command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// mkfs.ext4 on the disk, copy the files onto it, sync, unmount,
    /// `e2fsck -fn`.
    Write,
    /// `e2fsck -fn`, mount read-only, print the SHA-256 of each regular
    /// file in the file system's root.
    Check,
    /// Copy 1 MiB of the disk to another place with O_DIRECT once, say
    /// [`BUSY`], then copy on for ever in two loops at once (one per
    /// vCPU, so both queues carry requests), each saying `round L N`
    /// after its N-th copy. It never powers off: [`start`] it.
    Busy,
}

/// The mark a [`Phase::Busy`] guest says once its disk carries I/O and
/// its loops start.
pub const BUSY: &str = "busy";

impl Phase {
    fn arg(self) -> &'static str {
        match self {
            Phase::Write => "write",
            Phase::Check => "check",
            Phase::Busy => "busy",
        }
    }
}

/// A finished boot: what the guest printed on its serial console, and
/// what qemu printed and returned.
pub struct Boot {
    /// Which boot it was.
    pub phase: Phase,
    /// The serial console, whole.
    pub console: String,
    /// qemu's own stderr.
    pub qemu_stderr: String,
    /// qemu's exit status (killed if it outlived [`BOOT_MAX`]).
    pub status: ExitStatus,
    /// From qemu's start to its exit.
    pub elapsed: Duration,
}

impl Boot {
    /// The last lines of the console and qemu's stderr, for a failure
    /// message.
    pub fn tail(&self) -> String {
        let lines: Vec<&str> = self.console.lines().collect();
        let from = lines.len().saturating_sub(TAIL_LINES);
        format!(
            "--- the guest's console, its last {} lines:\n{}\n--- qemu's stderr:\n{}",
            lines.len() - from,
            lines[from..].join("\n"),
            self.qemu_stderr.trim_end()
        )
    }

    /// The text after `MARK` of each line the init script meant for the
    /// host.
    pub fn marks(&self) -> impl Iterator<Item = &str> {
        self.console
            .lines()
            .filter_map(|l| l.split_once(MARK).map(|(_, m)| m.trim()))
    }

    /// The value after `MARK what ` on the first line that has it.
    pub fn mark(&self, what: &str) -> Option<&str> {
        self.marks()
            .find_map(|m| m.strip_prefix(what).map(str::trim))
    }

    /// The exit code of the guest's `e2fsck -fn /dev/vda`.
    pub fn guest_e2fsck(&self) -> Option<i32> {
        self.mark("e2fsck ").and_then(|c| c.parse().ok())
    }

    /// The guest's disk: its sectors and its queues.
    pub fn disk(&self) -> Option<(u64, u32)> {
        parse_disk(self.mark("vda ")?)
    }

    /// The file names and SHA-256s the check phase printed, as
    /// `(name, sha256)`.
    pub fn sha256s(&self) -> Vec<(String, String)> {
        self.marks()
            .filter_map(|m| m.strip_prefix("sha256 "))
            .filter_map(|m| {
                let mut words = m.split_whitespace();
                let sum = words.next()?;
                let path = words.next()?;
                let name = path.rsplit('/').next()?;
                Some((name.to_string(), sum.to_string()))
            })
            .collect()
    }
}

/// Boot `kernel` with `initrd` for `phase`, its disk the vhost-user-blk
/// backend on `socket`; wait for qemu to exit, at most [`BOOT_MAX`], and
/// print the time against the bound.
pub(super) fn boot(kernel: &Kernel, initrd: &Path, socket: &Path, phase: Phase) -> Boot {
    let _one = one_guest();
    let start = Instant::now();
    let mut qemu = Watched::spawn(&mut qemu_command(kernel, initrd, socket, phase));
    while qemu.try_wait().is_none() && start.elapsed() < BOOT_MAX {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Past the bound it is still running: killed here, by its pid.
    qemu.kill();
    let elapsed = start.elapsed();
    let (status, console, qemu_stderr) = qemu.finish(Duration::from_secs(10));
    let within = time_bound(&format!("{} boot", phase.arg()), elapsed, BOOT_MAX);
    let boot = Boot {
        phase,
        console,
        qemu_stderr,
        status,
        elapsed,
    };
    assert!(
        within,
        "the {phase:?} boot did not power off within {BOOT_MAX:?}\n{}",
        boot.tail()
    );
    boot
}

/// The test's turn to run a guest: one at a time in the process.
fn one_guest() -> MutexGuard<'static, ()> {
    ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner())
}

/// qemu's command line: `kernel` with `initrd` for `phase`, its disk the
/// vhost-user-blk backend on `socket`.
fn qemu_command(kernel: &Kernel, initrd: &Path, socket: &Path, phase: Phase) -> Command {
    require_tool("qemu-system-x86_64");
    let mem = format!("memory-backend-memfd,id=mem,size={MEMORY_MIB}M,share=on");
    let chardev = format!("socket,id=vhost,path={}", socket.display());
    let disk = format!("vhost-user-blk-pci,chardev=vhost,num-queues={QUEUES}");
    let append = format!("console=ttyS0 panic=-1 mqblk.phase={}", phase.arg());
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-M", "q35,accel=tcg,memory-backend=mem", "-cpu", "max"])
        .args(["-smp", &QUEUES.to_string(), "-m", &format!("{MEMORY_MIB}M")])
        .args(["-object", &mem])
        .args(["-nodefaults", "-display", "none", "-serial", "stdio"])
        .args(["-no-reboot"])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &append])
        .args(["-chardev", &chardev, "-device", &disk]);
    cmd
}

/// A guest that keeps running while the test goes on: it owns qemu (a
/// [`Watched`] child), which is killed by its pid when it is dropped
/// (its console then shown if the test is failing) or [`Running::stop`]ped.
pub struct Running {
    phase: Phase,
    qemu: Option<Watched>,
    start: Instant,
    /// Its disk, as the guest saw it: (sectors, queues).
    disk: (u64, u32),
    _one: MutexGuard<'static, ()>,
}

/// Boot `kernel` with `initrd` for `phase`, its disk the vhost-user-blk
/// backend on `socket`, and return once the guest says `until` (at most
/// [`BOOT_MAX`] from qemu's start, the time printed against it), qemu
/// still running. The test fails, with the console, if the guest says
/// `FAILED` first, or powers off, or the bound passes.
pub(super) fn start(
    kernel: &Kernel,
    initrd: &Path,
    socket: &Path,
    phase: Phase,
    until: &str,
) -> Running {
    let one = one_guest();
    let start = Instant::now();
    let mut running = Running {
        phase,
        qemu: Some(Watched::spawn(&mut qemu_command(
            kernel, initrd, socket, phase,
        ))),
        start,
        disk: (0, 0),
        _one: one,
    };
    let mut disk = None;
    loop {
        let left = BOOT_MAX.saturating_sub(start.elapsed());
        // A guest that powers off closes the pipe: the wait fails then,
        // and dropping `running` shows the console.
        let line = running.wait_mark("", left);
        let mark = line.text.split_once(MARK).map_or("", |(_, m)| m.trim());
        assert!(
            !mark.starts_with("FAILED"),
            "the {phase:?} guest says {mark} before {until:?}"
        );
        if let Some(d) = mark.strip_prefix("vda ") {
            disk = parse_disk(d);
        }
        if mark == until {
            break;
        }
    }
    let within = time_bound(
        &format!("{} boot until {until}", phase.arg()),
        start.elapsed(),
        BOOT_MAX,
    );
    assert!(
        within,
        "the {phase:?} guest said {until:?} only after {BOOT_MAX:?}"
    );
    running.disk = disk.unwrap_or_else(|| {
        panic!("the {phase:?} guest said {until:?} but never which disk it has")
    });
    running
}

impl Running {
    /// qemu's pid.
    pub fn pid(&self) -> u32 {
        self.qemu().pid()
    }

    /// The guest's disk: its sectors and its queues.
    pub fn disk(&self) -> (u64, u32) {
        self.disk
    }

    /// The next console line, from now on, that is a mark starting with
    /// `what`, within `max`; the test fails if none comes (or qemu
    /// exits first).
    pub fn wait_mark(&self, what: &str, max: Duration) -> Line {
        self.qemu().wait_out(&format!("{MARK} {what}"), max)
    }

    /// qemu's exit status if it has exited, without waiting.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.qemu.as_mut().expect("running").try_wait()
    }

    /// Kill qemu by its pid unless it has exited, and what it printed:
    /// `status` is its own exit status if it had exited, a SIGKILL's if
    /// not; `elapsed` runs from its start to now.
    pub fn stop(mut self) -> Boot {
        let mut qemu = self.qemu.take().expect("stopped once");
        qemu.kill();
        let elapsed = self.start.elapsed();
        let (status, console, qemu_stderr) = qemu.finish(Duration::from_secs(10));
        Boot {
            phase: self.phase,
            console,
            qemu_stderr,
            status,
            elapsed,
        }
    }

    fn qemu(&self) -> &Watched {
        self.qemu.as_ref().expect("running")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut qemu) = self.qemu.take() {
            qemu.kill();
            let phase = self.phase;
            let (status, console, qemu_stderr) = qemu.finish(Duration::from_secs(10));
            if std::thread::panicking() {
                let boot = Boot {
                    phase,
                    console,
                    qemu_stderr,
                    status,
                    elapsed: self.start.elapsed(),
                };
                eprintln!("--- the {phase:?} guest (qemu {status}):\n{}", boot.tail());
            }
        }
    }
}

/// `S sectors, Q queues` as (S, Q).
fn parse_disk(m: &str) -> Option<(u64, u32)> {
    let (sectors, rest) = m.split_once(" sectors, ")?;
    let queues = rest.strip_suffix(" queues")?;
    Some((sectors.parse().ok()?, queues.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn boot_with(console: &str) -> Boot {
        Boot {
            phase: Phase::Check,
            console: console.to_string(),
            qemu_stderr: String::new(),
            status: ExitStatus::from_raw(0),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn marks_are_read_through_kernel_noise_and_carriage_returns() {
        let b = boot_with(
            "[    3.1] virtio_blk virtio0: [vda] 524288 512-byte logical blocks\r\n\
             mqblk-guest: vda 524288 sectors, 2 queues\r\n\
             mqblk-guest: e2fsck 0\r\n\
             mqblk-guest: sha256 95c6  /mnt/file-0.bin\r\n\
             [    3.3] EXT4-fs (vda): unmounting filesystem.\r\n\
             mqblk-guest: sha256 1f2e  /mnt/file-1.bin\r\n",
        );
        assert_eq!(b.disk(), Some((524_288, 2)));
        assert_eq!(b.guest_e2fsck(), Some(0));
        assert_eq!(
            b.sha256s(),
            [
                ("file-0.bin".to_string(), "95c6".to_string()),
                ("file-1.bin".to_string(), "1f2e".to_string())
            ]
        );
        assert_eq!(b.mark("nothing"), None);
    }

    #[test]
    fn the_tail_is_the_last_lines() {
        let console: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = boot_with(&console).tail();
        assert!(t.contains("its last 60 lines"), "{t}");
        assert!(t.contains("line 40\n") && t.contains("line 99"), "{t}");
        assert!(!t.contains("line 39\n"), "{t}");
    }
}
