//! A child forked after its parent opened (and locked) an image holds the
//! same open file, and so the same lock: its own open of the image is
//! covered by it, as fio's job processes open the device their parent
//! sized. Another process is still refused. One test alone in its binary:
//! it forks.

mod common;

use common::{open, Scratch};

#[test]
fn a_forked_child_opens_what_its_parent_locked() {
    let s = Scratch::new("lock-fork");
    let p = s.file("disk.img", 1 << 20);
    let parent = open(&p, "").unwrap();
    // SAFETY: the child only opens a device, writes a block and exits with
    // _exit; glibc keeps malloc usable after fork, and no other thread of
    // this binary holds a lock the child takes (one test, no I/O running).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = match open(&p, "") {
            Ok(dev) => {
                let buf = dev.alloc_buf(4096);
                match dev
                    .context()
                    .and_then(|mut c| c.write_at(buf.as_slice(), 0))
                {
                    Ok(()) => 0,
                    Err(_) => 2,
                }
            }
            Err(_) => 1,
        };
        // SAFETY: ends the child at once, running no destructor of the
        // parent's state.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above; `status` is a live local.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert!(libc::WIFEXITED(status), "{status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the child could not open or write"
    );
    // The parent's lock still stands against a second open of its own.
    let e = open(&p, "").unwrap_err().to_string();
    assert!(e.contains("is locked"), "{e}");
    drop(parent);
    open(&p, "").unwrap();
}
