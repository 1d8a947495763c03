//! fio's `random_distribution=sequence` and `random_sequence_stride`, as
//! upstream fio's `examples/sequence-distribution.fio` runs them (the job
//! below has that file's keys; Debian's fio 3.33 source, which
//! tests/fio_examples.rs runs, predates it). Its comments state the order:
//! with the stride off, blocks 2, 0, 1, 2, 0, 1; with it on, 2, 0, 1, then
//! 5, 3, 4. The order is read from the jobs' latency logs with offsets
//! (`log_offset=1`, one line per I/O at depth 1).

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

/// The blocks (of 4 KiB) of a latency log's lines, in order.
fn blocks(log: &Path) -> Vec<u64> {
    std::fs::read_to_string(log)
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
        .lines()
        .map(|l| {
            let offset: u64 = l.split(',').nth(4).unwrap().trim().parse().unwrap();
            assert_eq!(offset % 4096, 0, "{l}");
            offset / 4096
        })
        .collect()
}

/// The example's jobs: 48 KiB of 4 KiB blocks, 24 KiB of reads each.
const EXAMPLE: &str = "[global]\nioengine=null\nrw=randread\nbs=4k\nsize=48k\nio_size=24k\n\
     write_lat_log=seq\nlog_offset=1\nlog_avg_msec=0\n\
     [repeating_sequence]\nrandom_distribution=sequence:2,0,1\nrandom_sequence_stride=0\n\
     [strided_sequence]\nstonewall\nrandom_distribution=sequence:2,0,1\n\
     random_sequence_stride=1\n";

#[test]
#[cfg_attr(miri, ignore)]
fn the_sequence_example_reads_the_blocks_its_comments_state() {
    let s = Scratch::new("fio-sequence");
    let job = s.path().join("sequence-distribution.fio");
    std::fs::write(&job, EXAMPLE).unwrap();
    let out = bench(s.path(), &["--device=null,size=1G", job.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let repeating = blocks(&s.path().join("seq_clat.1.log"));
    let strided = blocks(&s.path().join("seq_clat.2.log"));
    eprintln!("repeating: {repeating:?}; strided: {strided:?}");
    assert_eq!(repeating, [2, 0, 1, 2, 0, 1]);
    assert_eq!(strided, [2, 0, 1, 5, 3, 4]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for j in v["jobs"].as_array().unwrap() {
        assert_eq!(j["read"]["total_ios"], 6, "{j}");
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_sequence_past_the_region_is_refused_or_ends_the_job() {
    let s = Scratch::new("fio-sequence-end");
    let job = s.path().join("seq.fio");
    // 5 blocks: block 7 is past the last, 4, before any I/O.
    std::fs::write(
        &job,
        "[j]\nrw=randread\nbs=4k\nsize=20k\nrandom_distribution=sequence:3,7\n",
    )
    .unwrap();
    let out = bench(s.path(), &["--device=null,size=1G", job.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "job j: random_distribution=sequence: block 7 is past the region's last block 4 \
             (20480 bytes from offset 0 of nullb0 (null,size=1G), in blocks of 4096 bytes)"
        ),
        "{stderr}"
    );
    // With the stride the second cycle starts at block 5, past the end:
    // as in fio, the job's I/O ends there (two reads, not five).
    std::fs::write(
        &job,
        "[j]\nrw=randread\nbs=4k\nsize=20k\nrandom_distribution=sequence:3,0\n\
         random_sequence_stride=1\nwrite_lat_log=seq\nlog_offset=1\nlog_avg_msec=0\n",
    )
    .unwrap();
    let out = bench(s.path(), &["--device=null,size=1G", job.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(blocks(&s.path().join("seq_clat.1.log")), [3, 0]);
    // A value that is not a block index names the option.
    let out = bench(
        s.path(),
        &[
            "--device=null,size=1G",
            "--rw=randread",
            "--random_distribution=sequence:2,-1",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("sequence: \"-1\" is not a block index"),
        "{stderr}"
    );
}
