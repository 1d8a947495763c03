//! fio's options that change what a job does, run through `mqblk bench`
//! and checked by what the jobs did: flows, latency targets, Poisson
//! rates, steady state, exitall, verify on a terabyte device (with a
//! backlog, a pattern with %o and headers every 512 bytes), regions fitted
//! to the device, and job files' ${VAR} and --section.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mqblk_test_support::Scratch;

fn mqblk(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(dir)
        .arg("bench")
        .args(args)
        .output()
        .expect("run mqblk")
}

/// Run `args` (a job file or options) to JSON; panics with stderr on
/// failure.
fn json(dir: &Path, args: &[&str]) -> (serde_json::Value, String) {
    let mut all = vec!["--output-format=json"];
    all.extend(args);
    let out = mqblk(dir, &all);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{args:?}: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

fn job_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn ios(job: &serde_json::Value) -> u64 {
    ["read", "write", "trim"]
        .iter()
        .map(|d| job[d]["total_ios"].as_u64().unwrap())
        .sum()
}

#[test]
#[cfg_attr(miri, ignore)]
fn flows_keep_jobs_in_proportion_to_their_weights() {
    let s = Scratch::new("flow");
    let f = job_file(
        s.path(),
        "flow.fio",
        "[global]\ntime_based\nruntime=500ms\nbs=4k\niodepth=8\n\
         [one]\nrw=randread\nflow=1\n[eight]\nrw=randwrite\nflow=8\n",
    );
    let (v, _) = json(s.path(), &["--device=null,size=1G", f.to_str().unwrap()]);
    let (a, b) = (ios(&v["jobs"][0]), ios(&v["jobs"][1]));
    let ratio = b as f64 / a as f64;
    assert!((6.0..10.0).contains(&ratio), "{b} / {a} = {ratio}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn latency_target_searches_the_depth_and_fails_one_depth_one_cannot_meet() {
    let s = Scratch::new("lat-target");
    // Every I/O of this device takes 100 us, whatever the depth.
    let dev = "--device=null,size=1G,completion=timer,completion_nsec=100000";
    let f = job_file(
        s.path(),
        "lat.fio",
        "[lt]\nrw=randread\nbs=4k\niodepth=16\ntime_based\nruntime=20s\n\
         latency_target=50ms\nlatency_window=50ms\nlatency_percentile=50\n",
    );
    let (v, _) = json(s.path(), &[dev, f.to_str().unwrap()]);
    let job = &v["jobs"][0];
    // The whole depth meets 50 ms: the search doubles up to it, runs its
    // last window there and ends, long before the runtime. (Half a window's
    // I/Os must miss for it to fail: a loaded machine's stall of a few
    // milliseconds, which a p99 target would count, does not.)
    assert_eq!(job["latency_depth"], 16, "{job}");
    assert_eq!(job["latency_target"], 50_000);
    assert!(job["read"]["runtime"].as_u64().unwrap() < 5_000, "{job}");
    // 50 us cannot be met even at depth 1: the job fails, as fio's.
    let out = mqblk(
        s.path(),
        &[
            dev,
            "--latency_target=50",
            "--latency_percentile=100",
            f.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("latency_target=50 us not met at queue depth 1"),
        "{stderr}"
    );
}

/// I/Os completed in each 100 ms of the middle of a 3 s run at 2000 IOPS:
/// (mean, median absolute deviation). The median shrugs off the few
/// windows a busy machine stalls the job in.
fn per_10ms(dir: &Path, process: &str) -> (f64, f64) {
    let log = dir.join("r_iops.1.log");
    let _ = std::fs::remove_file(&log);
    json(
        dir,
        &[
            "--device=null,size=1G",
            "--rw=randread",
            "--iodepth=4",
            "--rate_iops=2000",
            &format!("--rate_process={process}"),
            "--time_based",
            "--runtime=3s",
            "--write_iops_log=r",
            "--log_avg_msec=0",
        ],
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let mut buckets = [0u32; 30];
    for line in text.lines() {
        let ms: usize = line.split(',').next().unwrap().trim().parse().unwrap();
        if let Some(b) = buckets.get_mut(ms / 100) {
            *b += 1;
        }
    }
    let mid = &buckets[2..28];
    let mean = mid.iter().sum::<u32>() as f64 / mid.len() as f64;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let m = median(&mut mid.iter().map(|&x| f64::from(x)).collect());
    let mad = median(&mut mid.iter().map(|&x| (f64::from(x) - m).abs()).collect());
    (mean, mad)
}

#[test]
#[cfg_attr(miri, ignore)]
fn rate_process_poisson_keeps_the_rate_and_varies_the_gaps() {
    let s = Scratch::new("poisson");
    let (lin_mean, lin_sd) = per_10ms(s.path(), "linear");
    let (poi_mean, poi_sd) = per_10ms(s.path(), "poisson");
    // 200 per 100 ms either way; evenly spaced, or as a Poisson count
    // (standard deviation the square root of the mean, about 14: a median
    // absolute deviation of about 9.5).
    assert!((170.0..230.0).contains(&lin_mean), "{lin_mean}");
    assert!((160.0..240.0).contains(&poi_mean), "{poi_mean}");
    assert!(
        poi_sd >= 5.0 && lin_sd <= 3.0,
        "median deviation: poisson {poi_sd}, linear {lin_sd}"
    );
}

#[test]
#[cfg_attr(miri, ignore)]
fn steady_state_ends_a_job_once_its_iops_settle() {
    let s = Scratch::new("steady");
    let (v, _) = json(
        s.path(),
        &[
            "--device=null,size=1G",
            "--rw=randread",
            "--time_based",
            "--runtime=30s",
            "--ss=iops:50%",
            "--ss_dur=2s",
        ],
    );
    let job = &v["jobs"][0];
    let ss = &job["steadystate"];
    assert_eq!(ss["attained"], 1, "{job}");
    assert_eq!(ss["ss"], "iops:50%");
    assert_eq!(ss["data"]["iops"].as_array().unwrap().len(), 2);
    // Judged once a second over 2 s windows: ended after about 3 s.
    assert!(job["read"]["runtime"].as_u64().unwrap() < 20_000, "{job}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn exitall_ends_the_other_jobs_when_one_ends() {
    let s = Scratch::new("exitall");
    let f = job_file(
        s.path(),
        "exit.fio",
        "[global]\nbs=4k\n[short]\nrw=read\nsize=16m\nexitall\n\
         [long]\nrw=randread\ntime_based\nruntime=60s\n",
    );
    let (v, _) = json(s.path(), &["--device=null,size=1G", f.to_str().unwrap()]);
    let long = &v["jobs"][1];
    assert!(long["read"]["runtime"].as_u64().unwrap() < 30_000, "{long}");
    // exit_what=all: no later group runs.
    let f = job_file(
        s.path(),
        "exit_all.fio",
        "[global]\nbs=4k\n[short]\nrw=read\nsize=16m\nexitall\nexit_what=all\n\
         [later]\nstonewall\nrw=read\nsize=16m\n",
    );
    let (v, _) = json(s.path(), &["--device=null,size=1G", f.to_str().unwrap()]);
    let jobs = v["jobs"].as_array().unwrap();
    assert!(jobs.len() == 1 || ios(&jobs[1]) == 0, "{v}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn verify_works_on_a_terabyte_device_with_a_backlog_a_pattern_and_intervals() {
    let s = Scratch::new("verify-1t");
    // 268 million blocks of 4 KiB: more than a table of every block takes.
    let (v, _) = json(
        s.path(),
        &[
            "--device=ram,size=1T",
            "--rw=randwrite",
            "--iodepth=8",
            "--verify=crc32c",
            "--verify_backlog=16",
            "--runtime=500ms",
        ],
    );
    let r = &v["jobs"][0]["verify"];
    assert_eq!(r["errors"], 0, "{r}");
    assert!(r["blocks_written"].as_u64().unwrap() > 0, "{r}");
    // Read back as it went, and once more after.
    assert!(
        r["blocks_verified"].as_u64().unwrap() > r["blocks_written"].as_u64().unwrap(),
        "{r}"
    );
    // fio's surface-scan: headers every 512 bytes, a pattern with the
    // offset, written by one job and checked by the next on the same file.
    let f = job_file(
        s.path(),
        "scan.fio",
        "[global]\nbs=64k\nverify=meta\nverify_pattern=0xaa555aa5%o\nverify_interval=512\n\
         filename=disk\n[write-phase]\nrw=write\nsize=64m\ndo_verify=0\n\
         [verify-phase]\nstonewall\nrw=read\nsize=64m\ndo_verify=1\n",
    );
    let (v, _) = json(s.path(), &["--device=ram,size=1T", f.to_str().unwrap()]);
    let (w, r) = (&v["jobs"][0]["verify"], &v["jobs"][1]["verify"]);
    // (A write or two more may go before the measured phase starts.)
    assert!(w["blocks_written"].as_u64().unwrap() >= 1024, "{w}");
    assert!(r["blocks_verified"].as_u64().unwrap() >= 1024, "{r}");
    assert_eq!(r["errors"], 0, "{r}");
    assert_eq!(r["blocks_unwritten"], 0, "{r}");
}

#[test]
#[cfg_attr(miri, ignore)]
fn a_region_past_the_device_is_fitted_and_said_once() {
    let s = Scratch::new("fitted");
    let f = job_file(
        s.path(),
        "past.fio",
        "[global]\nrw=write\nbs=64k\nruntime=300ms\n[big]\nsize=2T\n\
         [far]\nnumjobs=3\noffset=0\noffset_increment=600g\nsize=1m\n",
    );
    let (v, stderr) = json(s.path(), &["--device=ram,size=1T", f.to_str().unwrap()]);
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("fitted to the devices"))
        .collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(notes[0].contains("job big: size=2199023255552"), "{stderr}");
    assert!(
        notes[0].contains("offset=1288490188800 is past the end"),
        "{stderr}"
    );
    let jobs = v["jobs"].as_array().unwrap();
    assert!(ios(&jobs[1]) > 0 && ios(&jobs[2]) > 0);
    assert_eq!(ios(&jobs[3]), 0, "{}", jobs[3]);
}

#[test]
#[cfg_attr(miri, ignore)]
fn job_files_take_environment_variables_and_sections() {
    let s = Scratch::new("env-sections");
    let f = job_file(
        s.path(),
        "env.fio",
        "[global]\nsize=1m\n[default]\nrw=read\n[override]\nrw=${MQBLK_TEST_RW}\nbs=${MQBLK_TEST_BS}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(s.path())
        .env("MQBLK_TEST_RW", "randwrite")
        .env("MQBLK_TEST_BS", "8k")
        .args(["bench", "--device=null,size=1G", "--output-format=json"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let o = &v["jobs"][1]["job options"];
    assert_eq!(o["rw"], "randwrite", "{o}");
    assert_eq!(o["bs"], "8192", "{o}");
    // Only [default], as fio's --section; the unset variables of
    // [override] are not read.
    let (v, _) = json(
        s.path(),
        &[
            "--device=null,size=1G",
            "--section=default",
            f.to_str().unwrap(),
        ],
    );
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(v["jobs"][0]["jobname"], "default");
}

#[test]
#[cfg_attr(miri, ignore)]
fn dedupe_and_compress_options_shape_what_is_written() {
    let s = Scratch::new("content");
    let img = s.path().join("disk.img");
    std::fs::write(&img, vec![0u8; 4 << 20]).unwrap();
    let dev = format!("--device=file:{}", img.display());
    json(
        s.path(),
        &[
            &dev,
            "--rw=write",
            "--bs=4k",
            "--size=4m",
            "--dedupe_percentage=50",
            "--buffer_compress_percentage=75",
        ],
    );
    let data = std::fs::read(&img).unwrap();
    let blocks: Vec<&[u8]> = data.chunks(4096).collect();
    // Each 512-byte chunk: a quarter random, three quarters zeros.
    for b in &blocks {
        for c in b.chunks(512) {
            assert!(c[128..].iter().all(|&x| x == 0));
            assert!(c[..128].iter().any(|&x| x != 0));
        }
    }
    // About half the blocks repeat an earlier one.
    let unique: std::collections::HashSet<&[u8]> = blocks.iter().copied().collect();
    let repeats = blocks.len() - unique.len();
    assert!(
        (400..650).contains(&repeats),
        "{repeats} of {} repeat",
        blocks.len()
    );
}
