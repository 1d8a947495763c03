//! Reads through the qcow2 driver equal `qemu-img convert -O raw` of the
//! same image, byte for byte: images made by `qemu-img create` (versions 2
//! and 3, clusters of 512 B to 2 MiB, refcounts 1 to 64 bits) and written
//! by qemu-io (data and zero clusters), compressed images (deflate and
//! zstd), backing chains three deep (raw and qcow2), a `backing=`
//! override, and extended L2 entries (subclusters).

mod common;

use common::{
    create_qcow2, first_diff, open, pattern_file, qemu_img, qemu_io, qemu_raw, read_all, Dir,
};

fn assert_same(dir: &Dir, img: &str, spec_extra: &str) {
    let want = qemu_raw(dir, img);
    let dev = open(&format!("qcow2:{img},ro=1{spec_extra}")).unwrap();
    let got = read_all(&dev);
    assert_eq!(
        first_diff(&got, &want),
        None,
        "{img}: differs from qemu-img convert"
    );
    eprintln!(
        "{img}: {} bytes equal to qemu-img convert -O raw",
        got.len()
    );
}

/// A workload of qemu-io writes (data, zeros, unaligned ends) on `img`.
fn scribble(img: &str, size_k: u64) {
    let end = size_k * 1024;
    let cmds = [
        "write -P 0x5a 0 64k".to_string(),
        "write -P 0x33 1M 4k".to_string(),
        format!("write -P 0x7 {} 100k", end / 3 / 512 * 512),
        format!("write -z {} 128k", end / 2 / 512 * 512),
        format!("write -P 0x11 {} 512", end - 512),
        "write -z 0 4k".to_string(),
    ];
    let c: Vec<&str> = cmds.iter().map(String::as_str).collect();
    qemu_io(img, &c);
}

#[test]
fn created_images_of_every_version_cluster_size_and_refcount_width() {
    let dir = Dir::new("created");
    let cases = [
        ("compat=0.10,cluster_size=4096", 8192u64),
        ("compat=1.1,cluster_size=4096", 8192),
        ("compat=1.1,cluster_size=65536", 8192),
        ("compat=1.1,cluster_size=2M", 16384),
        ("compat=1.1,cluster_size=512,refcount_bits=1", 2048),
        ("compat=1.1,cluster_size=4096,refcount_bits=64", 4096),
        ("compat=0.10,cluster_size=65536", 4096),
    ];
    for (i, (o, size_k)) in cases.iter().enumerate() {
        let img = dir.s(&format!("c{i}.qcow2"));
        create_qcow2(o, &img, &format!("{size_k}K"));
        scribble(&img, *size_k);
        assert_same(&dir, &img, "");
    }
}

#[test]
fn converted_images_with_data_in_every_cluster() {
    let dir = Dir::new("converted");
    let raw = dir.path("src.raw");
    pattern_file(&raw, 3 << 20, 1);
    for cs in ["4096", "65536", "2M"] {
        let img = dir.s(&format!("conv-{cs}.qcow2"));
        qemu_img(&[
            "convert",
            "-O",
            "qcow2",
            "-o",
            &format!("cluster_size={cs}"),
            raw.to_str().unwrap(),
            &img,
        ]);
        assert_same(&dir, &img, "");
    }
}

#[test]
fn compressed_images_deflate_and_zstd() {
    let dir = Dir::new("compressed");
    let raw = dir.path("src.raw");
    pattern_file(&raw, 2 << 20, 2);
    for (name, o) in [
        ("deflate", "cluster_size=65536"),
        ("zstd", "cluster_size=4096,compression_type=zstd"),
        ("deflate512", "cluster_size=512"),
    ] {
        let img = dir.s(&format!("{name}.qcow2"));
        qemu_img(&[
            "convert",
            "-c",
            "-O",
            "qcow2",
            "-o",
            o,
            raw.to_str().unwrap(),
            &img,
        ]);
        assert_same(&dir, &img, "");
    }
}

#[test]
fn backing_chains_three_deep_and_an_override() {
    let dir = Dir::new("chain");
    let base = dir.s("base.raw");
    pattern_file(dir.path("base.raw").as_path(), 4 << 20, 3);
    let mid = dir.s("mid.qcow2");
    let top = dir.s("top.qcow2");
    qemu_img(&[
        "create",
        "-q",
        "-f",
        "qcow2",
        "-b",
        &base,
        "-F",
        "raw",
        "-o",
        "cluster_size=4096",
        &mid,
    ]);
    qemu_io(
        &mid,
        &[
            "write -P 0x21 8k 8k",
            "write -z 1M 64k",
            "write -P 0x22 2047k 3k",
        ],
    );
    qemu_img(&[
        "create",
        "-q",
        "-f",
        "qcow2",
        "-b",
        &mid,
        "-F",
        "qcow2",
        "-o",
        "cluster_size=65536",
        &top,
    ]);
    qemu_io(
        &top,
        &[
            "write -P 0x31 12k 4k",
            "write -z 3M 64k",
            "write -P 0x32 1000k 10k",
        ],
    );
    assert_same(&dir, &top, "");
    // A 3-deep qcow2 chain.
    let top2 = dir.s("top2.qcow2");
    qemu_img(&[
        "create", "-q", "-f", "qcow2", "-b", &top, "-F", "qcow2", &top2,
    ]);
    qemu_io(&top2, &["write -P 0x41 0 1k"]);
    assert_same(&dir, &top2, "");
    // backing= replaces the header's backing file: the judge is a copy of
    // the image rebased (unsafely, header only) onto the other file.
    let other = dir.s("other.raw");
    pattern_file(dir.path("other.raw").as_path(), 4 << 20, 9);
    let copy = dir.s("rebased.qcow2");
    std::fs::copy(&top, &copy).unwrap();
    qemu_img(&[
        "rebase", "-u", "-b", &other, "-F", "raw", "-f", "qcow2", &copy,
    ]);
    let want = qemu_raw(&dir, &copy);
    let dev = open(&format!("qcow2:{top},ro=1,backing={other}")).unwrap();
    let got = read_all(&dev);
    assert_eq!(first_diff(&got, &want), None, "backing= override");
}

#[test]
fn extended_l2_subclusters_read() {
    let dir = Dir::new("extl2");
    let base = dir.s("base.raw");
    pattern_file(dir.path("base.raw").as_path(), 2 << 20, 4);
    let img = dir.s("ext.qcow2");
    qemu_img(&[
        "create",
        "-q",
        "-f",
        "qcow2",
        "-b",
        &base,
        "-F",
        "raw",
        "-o",
        "extended_l2=on,cluster_size=65536",
        &img,
    ]);
    qemu_io(
        &img,
        &[
            "write -P 0x51 2k 2k",
            "write -z 8k 4k",
            "write -P 0x52 70k 6k",
            "write -z 128k 64k",
        ],
    );
    assert_same(&dir, &img, "");
    // Writing such an image is refused, with a reason.
    let e = open(&format!("qcow2:{img}")).unwrap_err().to_string();
    assert!(e.contains("extended L2") && e.contains(&img), "{e}");
}

#[test]
fn internal_snapshots_are_listed() {
    let dir = Dir::new("snaps");
    let img = dir.s("snap.qcow2");
    qemu_img(&["create", "-q", "-f", "qcow2", &img, "4M"]);
    qemu_io(&img, &["write -P 0x61 0 64k"]);
    qemu_img(&["snapshot", "-c", "first", &img]);
    qemu_io(&img, &["write -P 0x62 0 4k"]);
    qemu_img(&["snapshot", "-c", "second", &img]);
    assert_same(&dir, &img, "");
    let dev = open(&format!("qcow2:{img},ro=1")).unwrap();
    let info = mqblk_qcow2::info(dev.name()).unwrap();
    let snaps: Vec<&String> = info
        .iter()
        .filter(|(k, _)| k == "snapshot")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(snaps.len(), 2, "{info:?}");
    assert!(
        snaps[0].contains("name first") && snaps[1].contains("name second"),
        "{snaps:?}"
    );
    eprintln!("listed: {snaps:?}");
}

#[test]
fn the_l2_cache_holds_what_l2_cache_size_says() {
    let dir = Dir::new("cache");
    let raw = dir.path("src.raw");
    pattern_file(&raw, 16 << 20, 6);
    // 4 KiB clusters: 512 entries (2 MiB of guest) per L2 table, so 8
    // tables for 16 MiB; a cache of 4 tables holds half of them.
    let img = dir.s("c.qcow2");
    qemu_img(&[
        "convert",
        "-O",
        "qcow2",
        "-o",
        "cluster_size=4096",
        raw.to_str().unwrap(),
        &img,
    ]);
    let want = std::fs::read(&raw).unwrap();
    for (cache, tables) in [(16384u64, 4u64), (1 << 20, 8)] {
        let dev = open(&format!("qcow2:{img},ro=1,l2_cache_size={cache}")).unwrap();
        let mut ctx = dev.context().unwrap();
        let mut buf = dev.alloc_buf(4096);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = x % (16 << 20) / 4096 * 4096;
            ctx.read_at(buf.as_mut_slice(), off).unwrap();
            assert_eq!(buf.as_mut_slice(), &want[off as usize..off as usize + 4096]);
        }
        let info = mqblk_qcow2::info(dev.name()).unwrap();
        let line = &info.iter().find(|(k, _)| k == "l2 cache").unwrap().1;
        eprintln!("l2_cache_size={cache}: {line}");
        let held: u64 = line.split(' ').next().unwrap().parse().unwrap();
        assert!(held <= cache, "{line}");
        assert_eq!(held, tables * 4096, "{line}");
    }
}
