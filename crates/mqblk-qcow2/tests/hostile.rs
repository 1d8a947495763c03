//! Hostile images: tables that overlap, offsets past the end of the file,
//! misaligned or reserved-bit entries, backing chains that loop, and
//! hundreds of randomly corrupted images. Each is refused at open with an
//! error naming the image, the offset and the limit, or (for a bad entry
//! found only when a read reaches it) fails that read with an I/O error;
//! never a panic, never a hang.

mod common;

use std::os::unix::fs::FileExt;

use common::{create_qcow2, open, qemu_img, qemu_io, Dir};

fn patch(path: &str, at: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

fn be64_at(path: &str, at: u64) -> u64 {
    let b = std::fs::read(path).unwrap();
    u64::from_be_bytes(b[at as usize..at as usize + 8].try_into().unwrap())
}

/// A small image with data, on 4 KiB clusters.
fn image(dir: &Dir, name: &str) -> String {
    let img = dir.s(name);
    create_qcow2("cluster_size=4096", &img, "1M");
    qemu_io(&img, &["write -P 0x5a 0 8k", "write -P 0x6b 512k 4k"]);
    img
}

fn refused(img: &str, words: &[&str]) -> String {
    let e = open(&format!("qcow2:{img},ro=1"))
        .expect_err("a hostile image was opened")
        .to_string();
    assert!(e.contains(img), "the error does not name the image: {e}");
    for w in words {
        assert!(e.contains(w), "expected `{w}` in: {e}");
    }
    eprintln!("refused: {e}");
    e
}

#[test]
fn overlapping_tables_are_refused() {
    let dir = Dir::new("overlap");
    let img = image(&dir, "o.qcow2");
    let rt = be64_at(&img, 48);
    // The L1 table on top of the refcount table.
    patch(&img, 40, &rt.to_be_bytes());
    refused(&img, &["overlaps", "L1 table", "refcount table"]);
    // An L2 table on the header.
    let img = image(&dir, "o2.qcow2");
    let l1 = be64_at(&img, 40);
    patch(&img, l1, &(0x8000_0000_0000_0000u64 | 4096).to_be_bytes());
    refused(&img, &["overlaps"]);
}

#[test]
fn offsets_past_the_end_and_misaligned_are_refused() {
    let dir = Dir::new("bounds");
    let img = image(&dir, "e.qcow2");
    let l1 = be64_at(&img, 40);
    // L1 entry 0 points far past the file.
    patch(&img, l1, &(1u64 << 40).to_be_bytes());
    refused(&img, &["L2 table", "L1 entry 0", "past the limit"]);
    // A misaligned L2 table.
    let img = image(&dir, "m.qcow2");
    let l1 = be64_at(&img, 40);
    patch(
        &img,
        l1,
        &(0x8000_0000_0000_0000u64 | 0x10200).to_be_bytes(),
    );
    refused(&img, &["L2 table", "multiple of the cluster size"]);
    // The refcount table past the end.
    let img = image(&dir, "r.qcow2");
    patch(&img, 48, &(1u64 << 30).to_be_bytes());
    refused(&img, &["refcount table", "past the end"]);
    // A data cluster past the end: found when a read reaches it, and that
    // read fails (with the offset in the message on stderr).
    let img = image(&dir, "d.qcow2");
    let l1 = be64_at(&img, 40);
    let l2 = be64_at(&img, l1) & 0x00ff_ffff_ffff_fe00;
    patch(
        &img,
        l2,
        &(0x8000_0000_0000_0000u64 | (1 << 40)).to_be_bytes(),
    );
    let dev = open(&format!("qcow2:{img},ro=1")).unwrap();
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(4096);
    let e = ctx
        .read_at(buf.as_mut_slice(), 0)
        .expect_err("a read past the file");
    eprintln!("read of the bad cluster: {e}");
    // The cluster after it is fine.
    ctx.read_at(buf.as_mut_slice(), 4096).unwrap();
    assert!(buf.as_mut_slice().iter().all(|&x| x == 0x5a));
}

#[test]
fn backing_loops_are_refused() {
    let dir = Dir::new("loop");
    let a = dir.s("a.qcow2");
    let b = dir.s("b.qcow2");
    qemu_img(&["create", "-q", "-f", "qcow2", &a, "1M"]);
    qemu_img(&["create", "-q", "-f", "qcow2", "-b", &a, "-F", "qcow2", &b]);
    qemu_img(&["rebase", "-u", "-f", "qcow2", "-b", &b, "-F", "qcow2", &a]);
    refused(&b, &["loop", "a.qcow2"]);
    // An image that is its own backing file.
    let c = dir.s("c.qcow2");
    qemu_img(&["create", "-q", "-f", "qcow2", &c, "1M"]);
    qemu_img(&["rebase", "-u", "-f", "qcow2", "-b", &c, "-F", "qcow2", &c]);
    refused(&c, &["loop"]);
    // backing= naming the image itself.
    let d = dir.s("d.qcow2");
    qemu_img(&["create", "-q", "-f", "qcow2", &d, "1M"]);
    let e = open(&format!("qcow2:{d},ro=1,backing={d}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("loop"), "{e}");
}

#[test]
fn randomly_corrupted_images_never_panic() {
    let dir = Dir::new("corrupt");
    let good = image(&dir, "good.qcow2");
    let bytes = std::fs::read(&good).unwrap();
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut refused, mut opened, mut read_errors) = (0, 0, 0);
    let img = dir.s("bad.qcow2");
    for _ in 0..300 {
        let mut b = bytes.clone();
        // A few bytes in the header or the tables (the first 5 clusters).
        for _ in 0..1 + next() % 4 {
            let at = (next() % (5 * 4096).min(b.len() as u64)) as usize;
            b[at] = next() as u8;
        }
        std::fs::write(&img, &b).unwrap();
        match open(&format!("qcow2:{img},ro=1")) {
            Err(_) => refused += 1,
            Ok(dev) => {
                opened += 1;
                let mut ctx = dev.context().unwrap();
                let cap = dev.capacity_bytes().min(1 << 20);
                let mut buf = dev.alloc_buf(64 << 10);
                let mut at = 0;
                while at < cap {
                    let n = (64 << 10).min(cap - at) as usize;
                    if ctx.read_at(&mut buf.as_mut_slice()[..n], at).is_err() {
                        read_errors += 1;
                    }
                    at += n as u64;
                }
            }
        }
    }
    eprintln!("300 corrupted images: {refused} refused at open, {opened} opened ({read_errors} failed reads), no panic");
    assert_eq!(refused + opened, 300);
}
