//! Writes through the qcow2 driver, judged by qemu-img: a seeded random
//! workload of writes, write-zeroes, discards and flushes (across cluster
//! boundaries, on fresh, backed, compressed, version 2 and snapshotted
//! images, at refcount widths 1 to 64 bits, with refcount table growth),
//! then `qemu-img check` finds no error and no leak, and `qemu-img
//! compare` against a raw image holding the same writes finds them
//! identical. Snapshots keep their contents; the dirty bit is set while
//! an image with lazy refcounts is open.

mod common;

use common::{
    create_qcow2, first_diff, open, pattern_file, qemu_img, qemu_io, qemu_raw, read_all, Dir, Rng,
};
use mqblk_test_support::run_ok;

/// What the workload did, by kind.
#[derive(Default, Debug)]
struct Counts {
    writes: u32,
    zeroes: u32,
    discards: u32,
    flushes: u32,
}

/// Run `ops` random operations on `spec`, applying each to `model` too.
fn workload(spec: &str, model: &mut [u8], ops: u32, seed: u64, max_len: u64) -> Counts {
    let dev = open(spec).unwrap();
    let mut ctx = dev.context().unwrap();
    let size = model.len() as u64;
    let mut rng = Rng(seed | 1);
    let mut buf = dev.alloc_buf(max_len as usize);
    let mut c = Counts::default();
    for i in 0..ops {
        let len = (1 + rng.below(max_len / 512)) * 512;
        let off = rng.below((size - len) / 512 + 1) * 512;
        let r = off as usize..(off + len) as usize;
        match rng.below(20) {
            0..=11 => {
                let b = &mut buf.as_mut_slice()[..len as usize];
                let v = rng.next();
                for (k, x) in b.iter_mut().enumerate() {
                    *x = (v >> (k % 57)) as u8 ^ (k / 512) as u8 ^ i as u8;
                }
                ctx.write_at(b, off).unwrap();
                model[r].copy_from_slice(b);
                c.writes += 1;
            }
            12..=14 => {
                ctx.write_zeroes(off, len).unwrap();
                model[r].fill(0);
                c.zeroes += 1;
            }
            15..=17 => {
                ctx.discard(off, len).unwrap();
                model[r].fill(0);
                c.discards += 1;
            }
            _ => {
                ctx.flush().unwrap();
                c.flushes += 1;
            }
        }
        if i % 50 == 49 {
            // Read a range back now and then.
            let b = &mut buf.as_mut_slice()[..len as usize];
            ctx.read_at(b, off).unwrap();
            assert_eq!(
                first_diff(b, &model[off as usize..(off + len) as usize]),
                None,
                "read back at {off}+{len} after op {i}"
            );
        }
    }
    let all = read_all(&dev);
    assert_eq!(
        first_diff(&all, model),
        None,
        "{spec}: the device differs from the model"
    );
    c
}

/// `qemu-img check` finds no error and no leak (it fails on either), and
/// `qemu-img compare` finds the image equal to the model.
fn judge(dir: &Dir, img: &str, model: &[u8]) {
    let out = qemu_img(&["check", img]);
    assert!(out.contains("No errors were found"), "{img}: {out}");
    assert!(!out.contains("leaked"), "{img}: {out}");
    let raw = dir.s("model.raw");
    std::fs::write(&raw, model).unwrap();
    let cmp = run_ok(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "qcow2", &raw, img],
    );
    assert!(cmp.contains("identical"), "{cmp}");
    eprintln!(
        "{img}: qemu-img check: no errors, no leaks; compare: {}",
        cmp.trim()
    );
}

#[test]
fn random_workloads_pass_qemu_img_check_and_compare() {
    let dir = Dir::new("workload");
    let cases = [
        (
            "v3-4k",
            "compat=1.1,cluster_size=4096",
            8u64 << 20,
            16384u64,
        ),
        (
            "v2-64k",
            "compat=0.10,cluster_size=65536",
            8 << 20,
            200 << 10,
        ),
        (
            "v3-512-rc64",
            "compat=1.1,cluster_size=512,refcount_bits=64",
            6 << 20,
            4096,
        ),
        (
            "v3-4k-rc1",
            "compat=1.1,cluster_size=4096,refcount_bits=1",
            4 << 20,
            16384,
        ),
        (
            "v3-2m-rc8",
            "compat=1.1,cluster_size=2M,refcount_bits=8",
            8 << 20,
            1 << 20,
        ),
    ];
    for (i, (name, o, size, max_len)) in cases.iter().enumerate() {
        let img = dir.s(&format!("{name}.qcow2"));
        create_qcow2(o, &img, &size.to_string());
        let mut model = vec![0u8; *size as usize];
        let c = workload(
            &format!("qcow2:{img}"),
            &mut model,
            300,
            7 + i as u64,
            *max_len,
        );
        judge(&dir, &img, &model);
        // Reopened, it reads the same.
        let dev = open(&format!("qcow2:{img},ro=1")).unwrap();
        assert_eq!(first_diff(&read_all(&dev), &model), None, "{name} reopened");
        eprintln!("{name}: {c:?}");
    }
}

#[test]
fn writes_over_backing_files_and_compressed_clusters() {
    let dir = Dir::new("cow");
    let base = dir.s("base.raw");
    pattern_file(dir.path("base.raw").as_path(), 4 << 20, 5);
    for (name, o) in [
        ("b64k", "cluster_size=65536"),
        ("b4k-v2", "cluster_size=4096,compat=0.10"),
    ] {
        let img = dir.s(&format!("{name}.qcow2"));
        qemu_img(&[
            "create", "-q", "-f", "qcow2", "-b", &base, "-F", "raw", "-o", o, &img,
        ]);
        let mut model = std::fs::read(&base).unwrap();
        workload(&format!("qcow2:{img}"), &mut model, 300, 11, 100 << 10);
        judge(&dir, &img, &model);
    }
    // discard=zero keeps clusters allocated.
    let img = dir.s("dz.qcow2");
    qemu_img(&[
        "create", "-q", "-f", "qcow2", "-b", &base, "-F", "raw", &img,
    ]);
    let mut model = std::fs::read(&base).unwrap();
    workload(
        &format!("qcow2:{img},discard=zero"),
        &mut model,
        200,
        12,
        200 << 10,
    );
    judge(&dir, &img, &model);
    // A compressed image, rewritten.
    for (name, o) in [
        ("cz", "compression_type=zstd,cluster_size=4096"),
        ("cd", "cluster_size=65536"),
    ] {
        let img = dir.s(&format!("{name}.qcow2"));
        qemu_img(&["convert", "-c", "-O", "qcow2", "-o", o, &base, &img]);
        let mut model = std::fs::read(&base).unwrap();
        workload(&format!("qcow2:{img}"), &mut model, 300, 13, 100 << 10);
        judge(&dir, &img, &model);
    }
}

#[test]
fn snapshots_keep_their_contents_through_writes() {
    let dir = Dir::new("snapw");
    let img = dir.s("s.qcow2");
    create_qcow2("cluster_size=4096", &img, "4M");
    qemu_io(&img, &["write -P 0x61 0 1M", "write -P 0x62 2M 64k"]);
    qemu_img(&["snapshot", "-c", "before", &img]);
    let before = qemu_raw(&dir, &img);
    let mut model = before.clone();
    workload(&format!("qcow2:{img}"), &mut model, 300, 21, 64 << 10);
    judge(&dir, &img, &model);
    let list = qemu_img(&["snapshot", "-l", &img]);
    assert!(list.contains("before"), "{list}");
    // The snapshot reads as it did.
    let snap = dir.s("snap.raw");
    qemu_img(&[
        "convert",
        "-l",
        "snapshot.name=before",
        "-O",
        "raw",
        &img,
        &snap,
    ]);
    assert_eq!(
        first_diff(&std::fs::read(&snap).unwrap(), &before),
        None,
        "snapshot changed"
    );
}

#[test]
fn the_dirty_bit_is_set_while_open_with_lazy_refcounts() {
    let dir = Dir::new("dirty");
    let img = dir.s("l.qcow2");
    create_qcow2("lazy_refcounts=on", &img, "4M");
    let incompat = || {
        let b = std::fs::read(&img).unwrap();
        u64::from_be_bytes(b[72..80].try_into().unwrap())
    };
    assert_eq!(incompat() & 1, 0);
    let dev = open(&format!("qcow2:{img}")).unwrap();
    assert_eq!(incompat() & 1, 1, "dirty while open");
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(4096);
    buf.as_mut_slice().fill(9);
    ctx.write_at(buf.as_mut_slice(), 8192).unwrap();
    drop(ctx);
    drop(dev);
    assert_eq!(incompat() & 1, 0, "clean after close");
    let out = qemu_img(&["check", &img]);
    assert!(out.contains("No errors"), "{out}");
}

#[test]
fn the_refcount_table_grows_when_full() {
    let dir = Dir::new("grow");
    let img = dir.s("g.qcow2");
    // 512-byte clusters, 64-bit refcounts: a block covers 64 clusters
    // (32 KiB), the one-cluster table 64 blocks (2 MiB of file).
    create_qcow2("cluster_size=512,refcount_bits=64", &img, "4M");
    let field = |at: usize| {
        let b = std::fs::read(&img).unwrap();
        u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
    };
    let table_before = field(48);
    let mut model = vec![0u8; 4 << 20];
    {
        let dev = open(&format!("qcow2:{img}")).unwrap();
        let mut ctx = dev.context().unwrap();
        let mut buf = dev.alloc_buf(64 << 10);
        for (i, off) in (0..3u64 << 20).step_by(64 << 10).enumerate() {
            buf.as_mut_slice().fill(i as u8 + 1);
            ctx.write_at(buf.as_mut_slice(), off).unwrap();
            model[off as usize..off as usize + (64 << 10)].fill(i as u8 + 1);
        }
    }
    let table_after = field(48);
    assert_ne!(table_before, table_after, "the refcount table did not move");
    eprintln!("refcount table moved from {table_before} to {table_after}");
    judge(&dir, &img, &model);
}

#[test]
fn a_dirty_image_with_stale_refcounts_is_repaired_before_any_allocation() {
    use std::os::unix::fs::FileExt;
    let dir = Dir::new("repair");
    let img = dir.s("r.qcow2");
    create_qcow2("lazy_refcounts=on,cluster_size=4096", &img, "4M");
    qemu_io(&img, &["write -P 0x33 0 256k"]);
    // What a crash with lazy refcounts leaves: the dirty bit set, and the
    // refcounts of the L2 table and the data (clusters 4 on) never written.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&img)
        .unwrap();
    let mut h = [0u8; 8];
    f.read_exact_at(&mut h, 72).unwrap();
    f.write_all_at(&(u64::from_be_bytes(h) | 1).to_be_bytes(), 72)
        .unwrap();
    let mut rt = [0u8; 8];
    f.read_exact_at(&mut rt, 4096).unwrap();
    let block = u64::from_be_bytes(rt);
    f.write_all_at(&[0u8; 4096 - 8], block + 8).unwrap();
    drop(f);
    let mut model = vec![0u8; 4 << 20];
    model[..256 << 10].fill(0x33);
    {
        let dev = open(&format!("qcow2:{img}")).unwrap();
        let mut ctx = dev.context().unwrap();
        let mut buf = dev.alloc_buf(256 << 10);
        buf.as_mut_slice().fill(0x44);
        ctx.write_at(buf.as_mut_slice(), 1 << 20).unwrap();
        model[1 << 20..(1 << 20) + (256 << 10)].fill(0x44);
    }
    judge(&dir, &img, &model);
}

#[test]
fn writing_clears_the_autoclear_bits_it_does_not_keep() {
    let dir = Dir::new("autoclear");
    let img = dir.s("bm.qcow2");
    qemu_img(&["create", "-q", "-f", "qcow2", &img, "4M"]);
    qemu_img(&["bitmap", "--add", &img, "b0"]);
    let autoclear = || {
        let b = std::fs::read(&img).unwrap();
        u64::from_be_bytes(b[88..96].try_into().unwrap())
    };
    assert_eq!(autoclear(), 1, "qemu-img set the bitmaps bit");
    {
        let dev = open(&format!("qcow2:{img}")).unwrap();
        let mut ctx = dev.context().unwrap();
        let mut buf = dev.alloc_buf(4096);
        ctx.write_at(buf.as_mut_slice(), 0).unwrap();
    }
    assert_eq!(
        autoclear(),
        0,
        "the bitmaps are no longer in step with the data"
    );
    // qemu now ignores the bitmaps (their clusters show as leaked, as
    // after any writer that lacks bitmap support), and finds no error.
    let o = std::process::Command::new("qemu-img")
        .args(["check", &img])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    assert!(matches!(o.status.code(), Some(0) | Some(3)), "{text}");
    assert!(text.contains("lacking bitmap support"), "{text}");
}
