//! fio's file layout: a job file's `filename=` that does not exist is
//! created at the job's `size=` (and `offset=`) before the run, with a
//! note; without `size=` the file driver's error says how to give one.

use std::path::Path;
use std::process::{Command, Output};

use mqblk_test_support::Scratch;

fn bench(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(dir)
        .arg("bench")
        .args(["--eta=never", "--output-format=json"])
        .args(args)
        .output()
        .expect("run mqblk")
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_missing_filename_is_laid_out_at_size_and_verifies() {
    let s = Scratch::new("fio-layout");
    let file = s.path().join("new.img");
    let job = s.path().join("layout.fio");
    std::fs::write(
        &job,
        format!(
            "[global]\nbs=4k\niodepth=8\n\
             [fill]\nfilename={}\nrw=randwrite\nsize=16M\nverify=crc32c\n",
            file.display()
        ),
    )
    .unwrap();
    assert!(!file.exists());
    let out = bench(s.path(), &[job.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "mqblk: note: job fill: filename={} did not exist: laid out at 16777216 bytes",
            file.display()
        )),
        "{stderr}"
    );
    let len = std::fs::metadata(&file).unwrap().len();
    eprintln!("laid out: {len} bytes");
    assert_eq!(len, 16 << 20);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["jobs"][0]["verify"];
    // Every block of the 16 MiB written (the random map) and checked.
    assert_eq!(r["errors"], 0, "{r}");
    assert_eq!(r["blocks_written"], 4096, "{r}");
    assert!(r["blocks_verified"].as_u64().unwrap() >= 4096, "{r}");

    // Run again: the file is there, nothing is laid out, and a read-only
    // job checks what the first run wrote.
    let out = bench(
        s.path(),
        &[job.to_str().unwrap(), "--rw=read", "--verify=crc32c"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("laid out"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &v["jobs"][0]["verify"];
    assert_eq!(r["errors"], 0, "{r}");
    assert_eq!(r["blocks_verified"], 4096, "{r}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_missing_filename_without_size_keeps_the_drivers_error() {
    let s = Scratch::new("fio-layout-nosize");
    let job = s.path().join("nosize.fio");
    std::fs::write(&job, "[j]\nfilename=missing.img\nrw=write\nbs=4k\n").unwrap();
    let out = bench(s.path(), &[job.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "missing.img does not exist; to create it, give its size, as in \
             file:missing.img,size=1G"
        ),
        "{stderr}"
    );
    assert!(!s.path().join("missing.img").exists());
    // A --device on the command line replaces the job file's file: nothing
    // is laid out for it.
    std::fs::write(&job, "[j]\nfilename=other.img\nsize=1M\nrw=write\nbs=4k\n").unwrap();
    let out = bench(s.path(), &["--device=null,size=1G", job.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!s.path().join("other.img").exists());
}
