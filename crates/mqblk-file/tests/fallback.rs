//! io_uring forced off (as `kernel.io_uring_disabled=2` or a seccomp
//! filter would): the device opens on the psync engine by itself, says so,
//! and works. `engine=uring` refuses rather than fall back silently. This
//! file is its own test binary, so the environment variable set here
//! reaches no other test.

mod common;

use common::{expect_pattern, open, pattern, Scratch};

fn uring_off() {
    // Every test in this binary sets the same value.
    std::env::set_var(mqblk_file::NO_IO_URING_ENV, "1");
}

#[test]
fn without_io_uring_the_psync_engine_takes_over_and_says_so() {
    uring_off();
    let s = Scratch::new("fallback");
    let p = s.file("disk.img", 16 << 20);
    let dev = open(&p, "").unwrap();
    let info = mqblk_file::info(dev.name()).unwrap();
    assert_eq!(info.engine, "psync", "{}", info.summary());
    assert!(
        info.notes
            .iter()
            .any(|n| n.contains("io_uring is unavailable") && n.contains("psync")),
        "{:?}",
        info.notes
    );
    let mut ctx = dev.context().unwrap();
    for i in 0..32u64 {
        let off = i * 65536;
        let mut w = dev.alloc_buf(65536);
        pattern(w.as_mut_slice(), off, 8);
        ctx.write_at(w.as_slice(), off).unwrap();
        let mut r = dev.alloc_buf(65536);
        ctx.read_at(r.as_mut_slice(), off).unwrap();
        expect_pattern(r.as_slice(), off, 8);
    }
}

#[test]
fn engine_uring_refuses_instead_of_falling_back() {
    uring_off();
    let s = Scratch::new("refuse");
    let p = s.file("disk.img", 1 << 20);
    let e = open(&p, "engine=uring").unwrap_err().to_string();
    assert!(
        e.contains("io_uring is unavailable") && e.contains("engine=psync"),
        "{e}"
    );
}
