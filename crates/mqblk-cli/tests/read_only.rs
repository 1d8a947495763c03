//! A device that is only read is opened read-only: a user who may only
//! read a file can measure it with `bench` and describe it with `info`,
//! as fio opens read-only jobs read-only. Tried as a real non-root user
//! (`nobody`, through runuser or setpriv) when the tests run as root.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A world-readable directory with a copy of the binary (the build tree
/// may not be reachable by another user) and a read-only 4 MiB file.
fn setup(tag: &str) -> (Scratch, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("mqblk-ro-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("mqblk");
    std::fs::copy(env!("CARGO_BIN_EXE_mqblk"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let img = dir.join("ro.img");
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&img, &data).unwrap();
    std::fs::set_permissions(&img, std::fs::Permissions::from_mode(0o444)).unwrap();
    (Scratch(dir), bin, img)
}

fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Run `bin args` as `nobody`, if this process can switch users.
fn as_nobody(bin: &Path, args: &[&str]) -> Option<Output> {
    let tries: [(&str, Vec<&str>); 2] = [
        ("runuser", vec!["-u", "nobody", "--"]),
        (
            "setpriv",
            vec![
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                "--reset-env",
                "--",
            ],
        ),
    ];
    for (tool, pre) in tries {
        let o = Command::new(tool)
            .args(&pre)
            .arg(bin)
            .args(args)
            .current_dir(bin.parent().unwrap())
            .output();
        if let Ok(o) = o {
            // 127/126: the tool could not run the program at all.
            if o.status.code() != Some(127) && o.status.code() != Some(126) {
                return Some(o);
            }
        }
    }
    None
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_non_root_user_reads_a_read_only_file() {
    if !is_root() {
        mqblk_test_support::skip_unless_ci("needs root to run as another user (nobody)");
        return;
    }
    let (_s, bin, img) = setup("nobody");
    let spec = format!("file:{}", img.display());
    let Some(o) = as_nobody(&bin, &["info", &spec]) else {
        mqblk_test_support::skip_unless_ci(
            "neither runuser nor setpriv can run a program as nobody",
        );
        return;
    };
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "info as nobody: {err}");
    assert!(
        out.contains("capacity:                   4194304 bytes"),
        "{out}"
    );
    assert!(out.contains("opened read-only by info"), "{out}");
    assert!(out.contains("alignment:"), "{out}");
    // Without CAP_IPC_LOCK the registered-buffer arena (64 MiB by default)
    // is fitted to RLIMIT_MEMLOCK, and info says so once.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one struct rlimit to a live local.
    let _ = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if lim.rlim_cur != libc::RLIM_INFINITY && lim.rlim_cur < 128 << 20 {
        assert!(
            out.contains("note:                     fixed_bufs="),
            "{out}"
        );
        assert_eq!(out.matches("fixed_bufs=").count(), 2, "said once: {out}");
    }

    for rw in ["read", "randread"] {
        let o = as_nobody(
            &bin,
            &[
                "bench",
                "--device",
                &spec,
                &format!("--rw={rw}"),
                "--size=1M",
                "--output-format=json",
            ],
        )
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "bench --rw={rw} as nobody: {err}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let read = v["jobs"][0]["read"]["io_bytes"].as_u64().unwrap();
        assert!(read >= 1 << 20, "{v}");
        assert_eq!(v["jobs"][0]["read"]["errors"], 0, "{v}");
        // The registered-buffer arena fits nobody's RLIMIT_MEMLOCK: no
        // warning on the run (info says it once).
        assert!(!err.contains("registered buffers not in use"), "{err}");
    }

    // fio's spelling works the same way.
    let name = format!("--filename={}", img.display());
    let o = as_nobody(&bin, &["bench", &name, "--rw=read", "--size=1M"]).unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // serve --read-only exports it to clients; setpriv runs the server
    // itself (no parent in between), so the pid signalled is the server's.
    // The socket goes in a directory nobody may write (as /tmp is).
    let sock_dir = bin.parent().unwrap().join("sock");
    std::fs::create_dir(&sock_dir).unwrap();
    std::fs::set_permissions(&sock_dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let sock = sock_dir.join("ro.sock");
    let mut server = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(&bin)
        .args(["serve", "--read-only", &spec, "--socket"])
        .arg(&sock)
        .current_dir(bin.parent().unwrap())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut greeting = [0u8; 8];
    let mut answered = false;
    for _ in 0..3000 {
        if let Some(st) = server.try_wait().unwrap() {
            let mut e = String::new();
            use std::io::Read;
            server
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut e)
                .unwrap();
            panic!("serve --read-only as nobody exited {st}: {e}");
        }
        if let Ok(mut c) = std::os::unix::net::UnixStream::connect(&sock) {
            use std::io::Read;
            c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
                .unwrap();
            if c.read_exact(&mut greeting).is_ok() {
                answered = true;
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let st = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = server.wait_with_output().unwrap();
    assert!(answered, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(&greeting, b"NBDMAGIC");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!sock.exists(), "the server removed its socket");

    // A write is refused before any I/O, saying how to only read.
    let o = as_nobody(
        &bin,
        &["bench", "--device", &spec, "--rw=write", "--size=1M"],
    )
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(o.stdout.is_empty(), "no banner before the error");
    assert!(
        err.contains("Permission denied") && err.contains("to only read it, add ro=1"),
        "{err}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn read_only_workloads_never_ask_for_write_access() {
    // As root, permissions do not stop a write open, so look at the
    // result: the device a read-only bench opens refuses writes.
    let (_s, bin, img) = setup("root");
    let spec = format!("file:{}", img.display());
    let o = Command::new(&bin).args(["info", &spec]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    assert!(out.contains("opened read-only by info"), "{out}");
    assert!(out.contains("discard:                  no"), "{out}");
    let o = Command::new(&bin)
        .args(["info", &format!("{spec},ro=0")])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("read_only:                no"), "{out}");
}
