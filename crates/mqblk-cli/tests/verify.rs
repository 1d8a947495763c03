//! `mqblk bench --verify=crc32c` as a user runs it: writes carry headers,
//! read-back finds 0 mismatches on every device kind that keeps data, a
//! block corrupted behind the device's back is reported with its offset,
//! `--verify_fatal=1` stops at the first mismatch, and a device that keeps
//! no data is refused. No assertion depends on timing.

use std::path::Path;
use std::process::{Command, Output};

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .output()
        .expect("run the mqblk binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok_json(args: &[&str]) -> serde_json::Value {
    let o = mqblk(args);
    assert!(
        o.status.success(),
        "{args:?} failed: {}\n{}",
        text(&o.stderr),
        text(&o.stdout)
    );
    serde_json::from_slice(&o.stdout).expect("JSON output")
}

use mqblk_test_support::Scratch;

fn verify_of(v: &serde_json::Value) -> &serde_json::Value {
    &v["jobs"][0]["verify"]
}

fn assert_clean(v: &serde_json::Value) {
    for job in v["jobs"].as_array().unwrap() {
        assert_eq!(job["verify_errors"], 0, "{job:#}");
        assert_eq!(job["error"], 0, "{job:#}");
        assert!(
            job["verify"]["blocks_verified"].as_u64().unwrap() > 0,
            "{job:#}"
        );
    }
}

/// Write a whole region sequentially with headers, then read it back in a
/// second run that checks every header (data persisted across runs).
fn write_then_read(spec: &str, size: &str) {
    let v = ok_json(&[
        "bench",
        &format!("--device={spec}"),
        "--rw=write",
        "--bs=4k",
        "--iodepth=16",
        &format!("--size={size}"),
        "--verify=crc32c",
        "--output-format=json",
    ]);
    assert_clean(&v);
    let blocks = mqblk::spec::parse_size(size).unwrap() / 4096;
    assert_eq!(
        verify_of(&v)["blocks_verified"],
        blocks,
        "the verify phase reads back every block written, once: {v:#}"
    );
    assert!(verify_of(&v)["blocks_written"].as_u64().unwrap() >= blocks);
    let v = ok_json(&[
        "bench",
        &format!("--device={spec}"),
        "--rw=read",
        "--bs=4k",
        "--iodepth=16",
        &format!("--size={size}"),
        "--verify=crc32c",
        "--output-format=json",
    ]);
    assert_clean(&v);
}

#[test]
fn randwrite_then_verify_passes_on_memory_backed_null() {
    let v = ok_json(&[
        "bench",
        "--device=null,memory_backed=1,size=64M",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=32",
        "--size=16M",
        "--verify=crc32c",
        "--output-format=json",
    ]);
    assert_clean(&v);
    let opts = &v["jobs"][0]["job options"];
    assert_eq!(opts["verify"], "crc32c");
    assert_eq!(opts["do_verify"], "1");
}

#[test]
fn randrw_checks_reads_against_the_last_write_on_ram() {
    let v = ok_json(&[
        "bench",
        "--device=ram,size=32M",
        "--rw=randrw",
        "--bs=8k",
        "--iodepth=16",
        "--numjobs=2",
        "--runtime=300ms",
        "--time_based",
        "--verify=crc32c",
        "--output-format=json",
    ]);
    assert_clean(&v);
}

#[test]
fn verify_passes_on_a_regular_file_with_both_engines() {
    let s = Scratch::new("verify-file");
    let p = s.file("disk.img", 8 << 20);
    for engine in ["uring", "psync"] {
        write_then_read(&format!("file:{},engine={engine}", p.display()), "8M");
    }
    let v = ok_json(&[
        "bench",
        &format!("--device=file:{}", p.display()),
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=32",
        "--runtime=300ms",
        "--time_based",
        "--verify=crc32c",
        "--output-format=json",
    ]);
    assert_clean(&v);
}

#[test]
fn verify_passes_on_a_loop_device() {
    let s = Scratch::new("verify-loop");
    let p = s.file("backing.img", 16 << 20);
    let Some(lo) = mqblk_test_support::LoopDev::attach(&p) else {
        return;
    };
    let dev = lo.dev.clone();
    write_then_read(&format!("file:{dev},direct=1"), "16M");
}

/// Flip bytes of the block at `offset` in the backing file.
fn corrupt(path: &Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(b"corrupted by the test", offset + 1000)
        .unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_corrupted_block_fails_verify_naming_its_offset() {
    let s = Scratch::new("verify-corrupt");
    let p = s.file("disk.img", 1 << 20);
    let spec = format!("--device=file:{}", p.display());
    let write = [
        "bench",
        &spec,
        "--rw=write",
        "--bs=4k",
        "--iodepth=8",
        "--size=1M",
        "--verify=crc32c",
        "--output-format=json",
    ];
    assert_clean(&ok_json(&write));
    corrupt(&p, 40960);
    let read = |extra: &[&str]| {
        let mut a = vec![
            "bench",
            spec.as_str(),
            "--rw=read",
            "--bs=4k",
            "--iodepth=8",
            "--size=1M",
            "--verify=crc32c",
            "--output-format=json",
        ];
        a.extend_from_slice(extra);
        mqblk(&a)
    };
    let o = read(&[]);
    assert!(!o.status.success(), "a corrupted block must fail the run");
    let err = text(&o.stderr);
    assert!(err.contains("verify failed"), "{err}");
    assert!(err.contains("at offset 40960"), "{err}");
    assert!(err.contains("bad crc32c"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let job = &v["jobs"][0];
    // The read pass may read a block twice (the bench's ramp), so count
    // mismatches by offset: only the corrupted block.
    assert!(job["verify_errors"].as_u64().unwrap() >= 1, "{job:#}");
    assert_eq!(job["error"], 84, "EILSEQ, as fio reports it");
    for m in job["verify"]["mismatches"].as_array().unwrap() {
        assert_eq!(m["offset"], 40960, "{m:#}");
        let (want, got) = (
            m["expected"].as_str().unwrap(),
            m["actual"].as_str().unwrap(),
        );
        assert!(
            want.contains("offset=40960") && got.contains("offset=40960"),
            "{m:#}"
        );
        // Header intact, data not: the stored checksum is the expected one.
        let crc = |h: &str| h.split("crc32c=").nth(1).unwrap().to_string();
        assert_eq!(crc(want), crc(got), "{m:#}");
    }
    // Normal output names it too.
    let o = read(&["--output-format=normal"]);
    let out = text(&o.stdout);
    assert!(out.contains("verify       : crc32c"), "{out}");
    assert!(out.contains("at offset 40960"), "{out}");

    // A second corruption, and verify_fatal=1: the job stops at the first.
    corrupt(&p, 81920);
    let o = read(&["--verify_fatal=1"]);
    assert!(!o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let job = &v["jobs"][0];
    assert_eq!(job["verify"]["stopped"], true, "{job:#}");
    assert_eq!(job["verify_errors"], 1, "stops at the first: {job:#}");
    assert_eq!(job["verify"]["mismatches"][0]["offset"], 40960, "{job:#}");
}

#[test]
fn stale_data_is_caught_by_the_verify_phase() {
    // Overwrite a block behind the device's back with an older, valid
    // block of the same offset: the header is fine, but not the last write.
    let s = Scratch::new("verify-stale");
    let p = s.file("disk.img", 1 << 20);
    let spec = format!("--device=file:{}", p.display());
    let args = [
        "bench",
        &spec,
        "--rw=write",
        "--bs=4k",
        "--iodepth=1",
        "--size=64k",
        "--verify=crc32c",
        "--output-format=json",
    ];
    assert_clean(&ok_json(&args));
    // Everything read back fine; now a read-only pass over a block that
    // holds another offset's data: a misplaced write.
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    let mut b = vec![0u8; 4096];
    f.read_exact_at(&mut b, 0).unwrap();
    f.write_all_at(&b, 8192).unwrap();
    f.sync_all().unwrap();
    let o = mqblk(&[
        "bench",
        &spec,
        "--rw=read",
        "--bs=4k",
        "--size=64k",
        "--verify=crc32c",
    ]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("wrong offset") && err.contains("at offset 8192"),
        "{err}"
    );
}

#[test]
fn null_without_memory_is_refused_for_verify() {
    let o = mqblk(&[
        "bench",
        "--device=null",
        "--rw=write",
        "--size=1M",
        "--verify=crc32c",
    ]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("memory_backed=1") && err.contains("discards writes"),
        "{err}"
    );
}

#[test]
fn bad_verify_values_name_the_option() {
    for (arg, flag) in [
        ("--verify=md7", "--verify"),
        ("--do_verify=2", "--do_verify"),
        ("--verify_fatal=x", "--verify_fatal"),
    ] {
        let o = mqblk(&["bench", arg]);
        assert!(!o.status.success(), "{arg}");
        let err = text(&o.stderr);
        assert!(
            err.contains(flag) && err.contains("expected"),
            "{arg}: {err}"
        );
    }
}

#[test]
fn job_files_take_the_verify_keys() {
    let s = Scratch::new("verify-jobfile");
    let jf = s.0.join("v.fio");
    std::fs::write(
        &jf,
        "[global]\ndevice=null,memory_backed=1,size=8M\nbs=4k\nverify=crc32c\nverify_fatal=1\n\n[w]\nrw=randwrite\nsize=2M\n",
    )
    .unwrap();
    let v = ok_json(&["bench", jf.to_str().unwrap(), "--output-format=json"]);
    assert_clean(&v);
    assert_eq!(v["jobs"][0]["job options"]["verify_fatal"], "1");
}

#[test]
fn md5_and_sha256_verify_and_catch_a_corrupted_block() {
    for kind in ["md5", "sha256"] {
        let s = Scratch::new(&format!("verify-{kind}"));
        let p = s.file("disk.img", 1 << 20);
        let spec = format!("--device=file:{}", p.display());
        let verify = format!("--verify={kind}");
        let run = |rw: &str| {
            mqblk(&[
                "bench",
                &spec,
                rw,
                "--bs=4k",
                "--iodepth=8",
                "--size=1M",
                &verify,
                "--output-format=json",
            ])
        };
        let o = run("--rw=write");
        assert!(o.status.success(), "{kind}: {}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_clean(&v);
        assert_eq!(verify_of(&v)["type"], kind);
        assert_eq!(verify_of(&v)["blocks_verified"], 256, "{v:#}");
        corrupt(&p, 12288);
        let o = run("--rw=read");
        assert!(!o.status.success(), "{kind}: a corrupted block must fail");
        let err = text(&o.stderr);
        assert!(
            err.contains(&format!("bad {kind} (data corrupted)"))
                && err.contains("at offset 12288"),
            "{kind}: {err}"
        );
        assert!(err.contains(&format!("computed {kind} ")), "{kind}: {err}");
    }
}

/// A verify run whose writes are mixed with discards, write-zeroes and
/// flushes: a zeroed block must read back as zeros, a discarded one as
/// zeros or its last write, everything else as its last write.
fn mixed_verify(spec: &str) -> serde_json::Value {
    let v = ok_json(&[
        "bench",
        &format!("--device={spec}"),
        "--rw=randrw",
        "--bs=4k",
        "--iodepth=16",
        "--size=8M",
        "--io_size=64M",
        "--verify=crc32c",
        "--trim_percentage=15",
        "--write_zeroes_percentage=15",
        "--fsync=32",
        "--output-format=json",
    ]);
    assert_clean(&v);
    let r = verify_of(&v);
    assert!(r["blocks_trimmed"].as_u64().unwrap() > 100, "{v:#}");
    assert!(r["blocks_zeroed"].as_u64().unwrap() > 100, "{v:#}");
    assert!(r["blocks_written"].as_u64().unwrap() > 100, "{v:#}");
    assert!(
        v["jobs"][0]["trim"]["total_ios"].as_u64().unwrap() > 100,
        "{v:#}"
    );
    v
}

#[test]
fn a_verify_mix_of_discards_write_zeroes_and_flushes_passes() {
    mixed_verify("ram,size=8M");
    let s = Scratch::new("verify-mix");
    let p = s.file("disk.img", 8 << 20);
    mixed_verify(&format!("file:{}", p.display()));
    // Discarded blocks must read as zeros when asked, and ram's do.
    let v = ok_json(&[
        "bench",
        "--device=ram,size=4M",
        "--rw=randrw",
        "--bs=4k",
        "--size=4M",
        "--io_size=16M",
        "--verify=sha256",
        "--trim_percentage=30",
        "--trim_verify_zero=1",
        "--output-format=json",
    ]);
    assert_clean(&v);
}

#[test]
fn a_bad_verify_mix_is_refused_with_its_keys_named() {
    for (args, want) in [
        (
            vec![
                "--verify=crc32c",
                "--trim_percentage=60",
                "--write_zeroes_percentage=50",
            ],
            "add up to more than 100",
        ),
        (vec!["--trim_percentage=10"], "has no verify="),
        (
            vec!["--verify=crc32c", "--trim_percentage=101"],
            "--trim_percentage",
        ),
    ] {
        let mut a = vec![
            "bench",
            "--device=ram,size=4M",
            "--rw=randwrite",
            "--size=1M",
        ];
        a.extend_from_slice(&args);
        let o = mqblk(&a);
        assert!(!o.status.success(), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn a_mismatch_says_what_was_found_apart_from_what_was_expected() {
    // A block overwritten with random bytes holds no header: the report
    // shows those bytes as bytes, not decoded as a header, and the header
    // it expected without the writer's fields a read-only check cannot
    // know (seed, numberio, thread), rather than copying them from the
    // random bytes.
    let s = Scratch::new("verify-found");
    let p = s.file("disk.img", 1 << 20);
    let spec = format!("--device=file:{}", p.display());
    let args = |rw: &'static str| {
        [
            "bench",
            spec.as_str(),
            rw,
            "--bs=4k",
            "--size=64k",
            "--verify=crc32c",
            "--output-format=json",
        ]
    };
    assert_clean(&ok_json(&args("--rw=write")));
    let random: Vec<u8> = (0u32..4096)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
        .collect();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&random, 12288).unwrap();
        f.sync_all().unwrap();
    }
    let o = mqblk(&args("--rw=read"));
    assert!(!o.status.success(), "a block of random bytes must fail");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = &v["jobs"][0]["verify"]["mismatches"][0];
    eprintln!("{m:#}");
    assert_eq!(m["offset"], 12288, "{m:#}");
    assert_eq!(m["reason"], "bad magic (no verify header)", "{m:#}");
    let first: String = random[..16].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        m["actual"],
        format!("no verify header (the first 16 bytes: {first})"),
        "{m:#}"
    );
    let expected = m["expected"].as_str().unwrap();
    assert_eq!(
        expected, "a header {magic=0xacca type=5 len=4096 offset=12288} from any writer",
        "{m:#}"
    );
    // The text report says the same, in that order.
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!(
            "bad magic (no verify header) at offset 12288: found no verify header (the first \
             16 bytes: {first}); expected a header {{magic=0xacca type=5 len=4096 \
             offset=12288}} from any writer"
        )),
        "{err}"
    );
}
