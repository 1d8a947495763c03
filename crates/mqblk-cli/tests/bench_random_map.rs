//! fio's random map through `mqblk bench`: a sized random job touches
//! every block of its region once (a file's allocated bytes, as `du`
//! counts them; every block written is verified), `norandommap` opts
//! out, and `randseed`/`randrepeat` fix or vary the order.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

use mqblk_test_support::Scratch;

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .output()
        .expect("run the mqblk binary")
}

fn ok(args: &[&str]) -> String {
    let o = mqblk(args);
    assert!(
        o.status.success(),
        "{args:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Bytes of data the file holds: the bytes before each hole, as
/// SEEK_DATA and SEEK_HOLE find them (`du` also counts the file system's
/// extent blocks).
fn allocated(path: &Path) -> u64 {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).expect("open the file");
    let len = f.metadata().expect("stat the file").len() as i64;
    let (mut at, mut data) = (0i64, 0u64);
    while at < len {
        // SAFETY: lseek on a descriptor this function owns; no memory.
        let start = unsafe { libc::lseek(f.as_raw_fd(), at, libc::SEEK_DATA) };
        if start < 0 {
            break;
        }
        // SAFETY: as above.
        let end = unsafe { libc::lseek(f.as_raw_fd(), start, libc::SEEK_HOLE) };
        assert!(end >= start, "SEEK_HOLE after {start}");
        data += (end - start) as u64;
        at = end;
    }
    data
}

fn randwrite_file(path: &Path, extra: &[&str]) -> u64 {
    let spec = format!("--device=file:{},size=64M", path.display());
    let mut args = vec![
        "bench",
        &spec,
        "--rw=randwrite",
        "--bs=16k",
        "--iodepth=8",
        "--output-format=json",
    ];
    args.extend_from_slice(extra);
    ok(&args);
    allocated(path)
}

#[test]
fn a_64m_randwrite_touches_the_whole_file_and_norandommap_does_not() {
    let dir = Scratch::new("random-map-file");
    let full = dir.path().join("map.img");
    let bytes = randwrite_file(&full, &[]);
    let du = std::fs::metadata(&full).unwrap().blocks() * 512;
    eprintln!(
        "random map: {bytes} of {} bytes hold data (du: {du})",
        64u64 << 20
    );
    assert!(du >= 64 << 20, "du counts {du} bytes");
    assert_eq!(bytes, 64 << 20, "the random map writes every block once");
    let sparse = dir.path().join("nomap.img");
    let bytes = randwrite_file(&sparse, &["--norandommap=1"]);
    eprintln!("norandommap: {bytes} of {} bytes hold data", 64u64 << 20);
    // Without the map about 1/e of the blocks are never drawn.
    assert!(
        bytes < 56 << 20,
        "norandommap=1 drew every block: {bytes} bytes allocated"
    );
}

#[test]
fn every_block_a_random_job_writes_is_verified() {
    let out = ok(&[
        "bench",
        "--device=ram,size=64M",
        "--rw=randwrite",
        "--bs=16k",
        "--iodepth=8",
        "--verify=crc32c",
        "--output-format=json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON output");
    let verify = &v["jobs"][0]["verify"];
    eprintln!(
        "written {}, verified {} of 4096 blocks",
        verify["blocks_written"], verify["blocks_verified"]
    );
    assert_eq!(verify["blocks_written"], 4096, "{verify:#}");
    assert_eq!(verify["blocks_verified"], 4096, "{verify:#}");
    assert_eq!(v["jobs"][0]["verify_errors"], 0, "{verify:#}");
}

/// The offsets of a 16-block random write, from its per-I/O log.
fn offsets(dir: &Path, name: &str, extra: &[&str]) -> Vec<u64> {
    let log = dir.join(name);
    let log_arg = format!("--write_lat_log={}", log.display());
    let mut args = vec![
        "bench",
        "--device=ram,size=1M",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=1",
        "--size=64k",
        &log_arg,
        "--log_offset=1",
        "--log_avg_msec=0",
    ];
    args.extend_from_slice(extra);
    ok(&args);
    let text = std::fs::read_to_string(dir.join(format!("{name}_clat.1.log"))).expect("the log");
    text.lines()
        .map(|l| l.split(',').nth(4).unwrap().trim().parse().unwrap())
        .collect()
}

#[test]
fn randseed_repeats_the_order_and_randrepeat_0_changes_it() {
    let dir = Scratch::new("random-map-seed");
    let a = offsets(dir.path(), "a", &["--randseed=5"]);
    let b = offsets(dir.path(), "b", &["--randseed=5"]);
    let c = offsets(dir.path(), "c", &["--randseed=6"]);
    let d = offsets(dir.path(), "d", &["--randrepeat=0"]);
    let e = offsets(dir.path(), "e", &["--randrepeat=0"]);
    eprintln!("randseed=5: {a:?}\nrandseed=6: {c:?}\nrandrepeat=0: {d:?} then {e:?}");
    for run in [&a, &c, &d, &e] {
        let mut sorted = run.clone();
        sorted.sort_unstable();
        let every: Vec<u64> = (0..16).map(|b| b * 4096).collect();
        assert_eq!(sorted, every, "each block once: {run:?}");
    }
    assert_eq!(a, b, "the same seed, the same order");
    assert_ne!(a, c, "another seed, another order");
    assert_ne!(d, e, "randrepeat=0 seeds from the clock");
}

#[test]
fn random_generator_takes_fios_names_and_refuses_others() {
    for g in ["tausworthe", "tausworthe64", "lfsr"] {
        let o = mqblk(&[
            "bench",
            "--device=ram,size=1M",
            "--rw=randread",
            "--bs=4k",
            "--size=64k",
            &format!("--random_generator={g}"),
        ]);
        assert!(o.status.success());
        // Each name says which generator it maps to.
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!(
                "note: --random_generator={g}: offsets are drawn with xorshift64*"
            )),
            "{err}"
        );
    }
    let o = mqblk(&[
        "bench",
        "--device=ram,size=1M",
        "--rw=randread",
        "--random_generator=mt",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("random_generator") && err.contains("lfsr"),
        "{err}"
    );
}
