//! The guest's initramfs: an uncompressed newc cpio archive (the format
//! of the kernel's `Documentation/driver-api/early-userspace/
//! buffer-format.rst`) that holds the static busybox, mke2fs and e2fsck
//! with the shared libraries `ldd` names, the kernel's modules in load
//! order, the files to write, and the `/init` script, which the kernel
//! command line (`mqblk.phase=`) drives.

use std::collections::BTreeSet;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::files::GuestFile;
use super::kernel::Kernel;
use crate::child::{run_ok_within, Watched};
use crate::machine::{require_tool, tool_path};

/// The longest `ldd` may take.
const LDD_MAX: Duration = Duration::from_secs(60);

/// What the guest loads: the virtio PCI transport and block driver, and
/// ext4 with the crc32c it checksums metadata with (a soft dependency,
/// which modules.dep does not list, so it is named here).
const MODULES: &[&str] = &["virtio_pci", "virtio_blk", "crc32c_generic", "ext4"];

/// The start of every console line the init script means for the host.
pub(super) const MARK: &str = "mqblk-guest:";

/// The init script; `@MODULES@` becomes the module files in load order.
const INIT: &str = r#"#!/bin/busybox sh
# /init of mqblk-test-support's guest. mqblk.phase=write on the kernel
# command line makes ext4 on /dev/vda and copies /data onto it;
# mqblk.phase=check checks it and prints the files' SHA-256;
# mqblk.phase=busy copies parts of /dev/vda onto itself for ever. Every
# line meant for the host starts with "mqblk-guest:".
# busybox has applets named mke2fs and e2fsck too: the real ones are
# called by their /sbin paths.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "mqblk-guest: $*"; }
fail() { say "FAILED: $*"; poweroff -f; exit 1; }
say "init at $(cut -d' ' -f1 /proc/uptime) s"
for m in @MODULES@; do insmod "/lib/modules/$m" || fail "insmod $m"; done
phase=$(sed -n 's/.*mqblk\.phase=\([a-z]*\).*/\1/p' /proc/cmdline)
say "phase $phase"
n=0
while [ ! -b /dev/vda ]; do
  n=$((n + 1))
  [ $n -le 30 ] || fail "no /dev/vda after 30 s"
  sleep 1
done
say "vda $(cat /sys/block/vda/size) sectors, $(ls /sys/block/vda/mq | wc -l) queues"
case "$phase" in
write)
  /sbin/mke2fs -t ext4 -F -q /dev/vda || fail "mke2fs /dev/vda"
  mount -t ext4 /dev/vda /mnt || fail "mount /dev/vda"
  cp /data/* /mnt/ || fail "cp /data/* /mnt/"
  sync
  umount /mnt || fail "umount /mnt"
  say written
  /sbin/e2fsck -fn /dev/vda
  say "e2fsck $?"
  ;;
check)
  /sbin/e2fsck -fn /dev/vda
  say "e2fsck $?"
  mount -t ext4 -o ro /dev/vda /mnt || fail "mount -o ro /dev/vda"
  for f in /mnt/*; do
    [ -f "$f" ] && say "sha256 $(sha256sum "$f")"
  done
  umount /mnt || fail "umount /mnt"
  ;;
busy)
  # Copy 1 MiB at $1 MiB to $2 MiB, both with O_DIRECT.
  copy() {
    dd if=/dev/vda of=/dev/vda bs=64k count=16 skip=$(($1 * 16)) seek=$(($2 * 16)) \
      iflag=direct oflag=direct conv=notrunc 2>/dev/null
  }
  copy 0 64 || fail "dd on /dev/vda"
  # Two loops at once, for the two vCPUs and so the two queues.
  for l in 0 1; do
    (
      n=0
      while :; do
        copy $l $((128 + l)) || fail "dd on /dev/vda in loop $l"
        n=$((n + 1))
        say "round $l $n"
      done
    ) &
  done
  say busy
  wait
  fail "the busy loops ended"
  ;;
*)
  fail "no mqblk.phase=write, check or busy on the command line"
  ;;
esac
say "done at $(cut -d' ' -f1 /proc/uptime) s"
poweroff -f
"#;

/// Write the initramfs for `kernel` and `files` to `out`.
pub(super) fn build(kernel: &Kernel, files: &[GuestFile], out: &Path) {
    let file =
        std::fs::File::create(out).unwrap_or_else(|e| panic!("create {}: {e}", out.display()));
    let mut cpio = Cpio::new(BufWriter::new(file));
    for dir in ["dev", "proc", "sys", "mnt", "data", "lib/modules"] {
        cpio.dir(dir);
    }
    // The kernel opens it for /init's standard streams, before devtmpfs.
    cpio.char_dev("dev/console", 0o600, 5, 1);
    cpio.file(
        "bin/busybox",
        0o755,
        &std::fs::read(static_busybox()).expect("read busybox"),
    );
    let mut names = Vec::new();
    for module in kernel.modules_for(MODULES) {
        let name = module_file_name(&module);
        cpio.file(
            &format!("lib/modules/{name}"),
            0o644,
            &module_bytes(&module),
        );
        names.push(name);
    }
    let mut libraries = BTreeSet::new();
    for tool in ["mke2fs", "e2fsck"] {
        require_tool(tool);
        let path = tool_path(tool).expect("a required tool has a path");
        cpio.file(&format!("sbin/{tool}"), 0o755, &read(&path));
        libraries.extend(shared_libraries(&path));
    }
    for lib in libraries {
        let name = lib.to_string_lossy();
        cpio.file(name.trim_start_matches('/'), 0o755, &read(&lib));
    }
    let conf = Path::new("/etc/mke2fs.conf");
    if conf.is_file() {
        cpio.file("etc/mke2fs.conf", 0o644, &read(conf));
    }
    for f in files {
        cpio.file(&format!("data/{}", f.name), 0o644, &f.bytes);
    }
    let init = INIT.replace("@MODULES@", &names.join(" "));
    cpio.file("init", 0o755, init.as_bytes());
    cpio.finish()
        .into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .unwrap_or_else(|e| panic!("write {}: {e}", out.display()));
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// busybox, which must be statically linked: the guest has no other
/// libc for it (Debian's `busybox` package has a dynamic one).
fn static_busybox() -> PathBuf {
    require_tool("busybox");
    let path = tool_path("busybox").expect("busybox is on PATH");
    let (_, out, err) = Watched::spawn(Command::new("ldd").arg(&path)).finish(LDD_MAX);
    let text = out + &err;
    assert!(
        text.contains("not a dynamic executable") || text.contains("statically linked"),
        "{} is dynamically linked; the guest needs busybox-static (scripts/test installs \
         it): {text}",
        path.display()
    );
    path
}

/// The shared libraries (and the dynamic loader) that `ldd` names for
/// `binary`, by the paths the binary asks for.
fn shared_libraries(binary: &Path) -> Vec<PathBuf> {
    run_ok_within(Command::new("ldd").arg(binary), LDD_MAX)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let target = l.split_once("=>").map_or(l, |(_, t)| t);
            target.split_whitespace().next()
        })
        .filter(|p| p.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

/// A module's file name in the guest: always a plain `.ko`, since it is
/// decompressed here (busybox's insmod may not read `.ko.xz`/`.ko.zst`).
fn module_file_name(module: &Path) -> String {
    let name = module
        .file_name()
        .expect("a module path ends in a file name")
        .to_string_lossy();
    match name.split_once(".ko") {
        Some((stem, _)) => format!("{stem}.ko"),
        None => name.into_owned(),
    }
}

/// A module's bytes, decompressed if the kernel package compresses them.
fn module_bytes(module: &Path) -> Vec<u8> {
    let name = module.to_string_lossy();
    let tool = if name.ends_with(".ko.xz") {
        "xz"
    } else if name.ends_with(".ko.zst") {
        "zstd"
    } else {
        return read(module);
    };
    require_tool(tool);
    let out = Command::new(tool)
        .args(["-dc"])
        .arg(module)
        .output()
        .unwrap_or_else(|e| panic!("run {tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} -dc {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A newc cpio archive being written: each entry is a 110-byte ASCII
/// header, its name with a NUL, and its data, each padded to 4 bytes;
/// the directories that hold a file come before it, once each.
struct Cpio<W: Write> {
    out: W,
    next_ino: u32,
    dirs: BTreeSet<String>,
}

impl<W: Write> Cpio<W> {
    fn new(out: W) -> Cpio<W> {
        Cpio {
            out,
            next_ino: 1,
            dirs: BTreeSet::new(),
        }
    }

    /// A directory, and the directories above it.
    fn dir(&mut self, name: &str) {
        if name.is_empty() || self.dirs.contains(name) {
            return;
        }
        if let Some((parent, _)) = name.rsplit_once('/') {
            self.dir(parent);
        }
        self.dirs.insert(name.to_string());
        self.entry(name, 0o040_755, 2, (0, 0), b"");
    }

    /// A regular file with permissions `perm`.
    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        if let Some((parent, _)) = name.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(name, 0o100_000 | perm, 1, (0, 0), data);
    }

    /// A character device node.
    fn char_dev(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        if let Some((parent, _)) = name.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(name, 0o020_000 | perm, 1, (major, minor), b"");
    }

    fn entry(&mut self, name: &str, mode: u32, nlink: u32, rdev: (u32, u32), data: &[u8]) {
        let ino = self.next_ino;
        self.next_ino += 1;
        let name_bytes = name.len() + 1;
        let len = u32::try_from(data.len()).expect("a cpio entry is under 4 GiB");
        let fields = [
            ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            len,
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            u32::try_from(name_bytes).expect("a short name"),
            0, // check
        ];
        let mut head = String::from("070701");
        for f in fields {
            head.push_str(&format!("{f:08X}"));
        }
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        self.out.write_all(&bytes).expect("write the initramfs");
        self.out.write_all(data).expect("write the initramfs");
        let pad = [0u8; 3];
        self.out
            .write_all(&pad[..data.len().next_multiple_of(4) - data.len()])
            .expect("write the initramfs");
    }

    /// The trailer entry; the writer.
    fn finish(mut self) -> W {
        self.entry("TRAILER!!!", 0, 1, (0, 0), b"");
        self.out.flush().expect("write the initramfs");
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_aligned_and_parents_come_first_once() {
        let mut c = Cpio::new(Vec::new());
        c.file("a/b/c", 0o644, b"hello");
        c.file("a/b/d", 0o600, b"");
        let out = c.finish();
        // Walk the archive back: each header, its name and its data.
        let mut at = 0;
        let mut names = Vec::new();
        while at < out.len() {
            assert_eq!(at % 4, 0, "entry at {at} is aligned");
            assert_eq!(&out[at..at + 6], b"070701");
            let field = |i: usize| {
                let s = std::str::from_utf8(&out[at + 6 + 8 * i..at + 14 + 8 * i]).unwrap();
                u32::from_str_radix(s, 16).unwrap() as usize
            };
            let (len, name_bytes) = (field(6), field(11));
            let name = &out[at + 110..at + 110 + name_bytes - 1];
            names.push(String::from_utf8(name.to_vec()).unwrap());
            let data = (at + 110 + name_bytes).next_multiple_of(4);
            if names.last().unwrap() == "a/b/c" {
                assert_eq!(&out[data..data + len], b"hello");
            }
            at = (data + len).next_multiple_of(4);
        }
        assert_eq!(names, ["a", "a/b", "a/b/c", "a/b/d", "TRAILER!!!"]);
    }

    #[test]
    fn module_files_in_the_guest_are_plain_ko() {
        assert_eq!(module_file_name(Path::new("x/ext4.ko")), "ext4.ko");
        assert_eq!(
            module_file_name(Path::new("x/crc32c-intel.ko.xz")),
            "crc32c-intel.ko"
        );
    }
}
