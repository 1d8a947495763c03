//! The job file parser against fio's job files, and a property test
//! that it never panics.

use super::*;
use crate::job::RwMode;
use proptest::prelude::*;
use std::time::Duration;

fn parse_ok(text: &str) -> Vec<JobSpec> {
    parse(text, &JobOptions::default()).unwrap()
}

fn parse_err(text: &str) -> JobFileError {
    parse(text, &JobOptions::default()).unwrap_err()
}

#[test]
fn global_and_two_jobs() {
    let jobs = parse_ok(
        "; a comment\n\
         # another\n\
         [global]\n\
         rw=randread\n\
         bs = 8k   ; trailing comment\n\
         ioengine=libaio\n\
         direct=1\n\
         group_reporting\n\
         time_based\n\
         runtime=2s\n\
         device=null,size=1G\n\
         \n\
         [a]\n\
         iodepth=32\n\
         \r\n\
         [b]\r\n\
         rw=randwrite\r\n\
         numjobs=2\n\
         device=null\n\
         device=null,size=2G\n",
    );
    assert_eq!(jobs.len(), 2);
    let (a, b) = (&jobs[0], &jobs[1]);
    assert_eq!(a.name, "a");
    assert_eq!(a.rw, RwMode::RandRead);
    assert_eq!(a.bs, 8192);
    assert_eq!(a.iodepth, 32);
    assert!(a.time_based);
    assert_eq!(a.runtime, Some(Duration::from_secs(2)));
    assert_eq!(a.devices, vec!["null,size=1G"]);
    assert_eq!(b.name, "b");
    assert_eq!(b.rw, RwMode::RandWrite);
    assert_eq!(b.iodepth, 1);
    assert_eq!(b.numjobs, 2);
    assert_eq!(b.devices, vec!["null", "null,size=2G"]);
}

#[test]
fn fio_file_keys_are_taken_as_fio_means_them() {
    let jobs = parse_ok(
        "[global]\n\
         ioengine=io_uring\n\
         direct=0\n\
         [a]\n\
         filename=/data/disk.img\n\
         [b]\n\
         ioengine=psync\n\
         direct=1\n\
         device=file:/x,direct=0\n\
         device=null\n\
         [c]\n\
         ioengine=libaio\n\
         device=null\n",
    );
    assert_eq!(
        jobs[0].devices,
        vec!["file:/data/disk.img,direct=0,engine=uring"]
    );
    // A spec's own direct= wins; other kinds are left alone.
    assert_eq!(
        jobs[1].devices,
        vec!["file:/x,direct=0,engine=psync", "null"]
    );
    assert_eq!(jobs[2].devices, vec!["null"]);
    let e = parse_err("[a]\nioengine=spdk\ndevice=null\n");
    assert_eq!(e.line, 2);
    assert!(
        e.message
            .contains("ioengine=spdk: not an engine of block I/O")
            && e.message.contains("contrib/fio-engine"),
        "{e}"
    );
    let e = parse_err("[a]\ndirect=maybe\n");
    assert!(e.message.contains("direct=maybe: expected 1"), "{e}");
    let e = parse_err("[a]\niodeth=4\n");
    assert!(e.message.contains("(did you mean `iodepth`?)"), "{e}");
}

#[test]
fn a_global_applies_to_the_jobs_after_it() {
    let jobs = parse_ok("[a]\n[global]\nbs=16k\n[b]\n");
    assert_eq!(jobs[0].bs, 4096);
    assert_eq!(jobs[1].bs, 16384);
}

#[test]
fn command_line_overrides_the_file() {
    let mut cli = JobOptions::default();
    cli.set("bs", Some("64k")).unwrap();
    cli.set("name", Some("ignored")).unwrap();
    let jobs = parse("[global]\nbs=4k\n[a]\nbs=8k\n", &cli).unwrap();
    assert_eq!(jobs[0].bs, 65536);
    assert_eq!(jobs[0].name, "a");
}

#[test]
fn fio_workload_keys_and_notes() {
    let text = "[global]\n\
                ioengine=libaio\n\
                iodepth_batch=8\n\
                group_reporting\n\
                directory=/tmp\n\
                norandommap\n\
                [a]\n\
                rw=read:-8k\n\
                blocksize=4k\n\
                filesize=1m\n\
                offset=64k\n\
                number_ios=10\n\
                loops=2\n\
                fsync=4\n\
                end_fsync=1\n\
                rate_iops=100,50\n\
                startdelay=1\n\
                random_distribution=zipf:1.1\n\
                randrepeat=0\n\
                buffered=1\n\
                filename=/dev/null\n\
                [b]\n\
                rwmixwrite=30\n\
                rw=randrw\n\
                timeout=5\n\
                time_based\n\
                stonewall\n\
                rate=1m\n";
    let (jobs, notes) = parse_with_notes(text, &JobOptions::default()).unwrap();
    let a = &jobs[0];
    assert_eq!(a.seq_stride, -8192);
    assert_eq!(a.bs, 4096);
    assert_eq!(a.size, Some(1 << 20));
    assert_eq!(a.offset, 65536);
    assert_eq!(a.io_size, Some(40960));
    assert_eq!(a.loops, 2);
    assert_eq!(a.fsync_every, 4);
    assert!(a.end_fsync);
    assert_eq!(a.rate_iops, Some(150));
    assert_eq!(a.startdelay, Duration::from_secs(1));
    assert!(matches!(a.distribution, crate::job::Distribution::Zipf { theta, .. } if theta == 1.1));
    assert!(!a.randrepeat);
    assert_eq!(a.devices, vec!["file:/dev/null,direct=0"]);
    assert!(!a.stonewall);
    let b = &jobs[1];
    assert_eq!(b.rwmixread, 70);
    assert_eq!(b.runtime, Some(Duration::from_secs(5)));
    assert!(b.stonewall);
    assert_eq!(b.rate_bps, Some(1 << 20));
    let notes = notes.join("\n");
    assert!(
        notes.contains("2: ioengine=libaio: mqblk is the engine"),
        "{notes}"
    );
    assert!(
        notes.contains("3: iodepth_batch=8: ignored: mqblk batches"),
        "{notes}"
    );
    assert!(notes.contains("5: directory=/tmp: ignored"), "{notes}");
}

#[test]
fn errors_name_the_line_and_key() {
    let e = parse_err("[global]\nbs=4k\n\n[a]\nioscheduler=bfq\n");
    assert_eq!(e.line, 5);
    assert!(e.to_string().contains("line 5"), "{e}");
    assert!(e.message.contains("`ioscheduler`"), "{e}");
    assert!(e.message.contains("contrib/fio-engine"), "{e}");
    assert!(e.message.contains("device, "), "{e}");
    assert!(
        e.message.contains("filename, direct, buffered, ioengine"),
        "{e}"
    );

    let e = parse_err("[a]\niodepth=0\n");
    assert_eq!(e.line, 2);
    assert!(e.message.contains("iodepth=0"), "{e}");

    let e = parse_err("[a]\nrw=foo\n");
    assert!(e.message.contains("\"foo\""), "{e}");

    let e = parse_err("bs=4k\n[a]\n");
    assert_eq!(e.line, 1);

    let e = parse_err("[a\n");
    assert_eq!(e.line, 1);

    let e = parse_err("[]\n");
    assert_eq!(e.line, 1);

    let e = parse_err("[global]\nbs=4k\n");
    assert_eq!(e.line, 0);
    assert!(e.message.contains("no job sections"), "{e}");

    let e = parse_err("[a]\ntime_based\n");
    assert_eq!(e.line, 1);
    assert!(e.message.contains("runtime"), "{e}");

    let e = parse_err("[a]\nbs\n");
    assert_eq!(e.line, 2);
    assert!(e.message.contains("needs a value"), "{e}");
}

#[test]
fn bounds() {
    let long = format!("[a]\nrw={}\n", "r".repeat(LINE_CHARS_MAX + 1));
    assert_eq!(parse_err(&long).line, 2);
    let big = ";\n".repeat((FILE_BYTES_MAX as usize) / 2 + 1);
    assert_eq!(parse_err(&big).line, 0);
    // The size is checked before any pass over the text: a file too large
    // is refused as such, whatever engine its lines name.
    let big_net = format!("[a]\nioengine=net\n{big}");
    let e = parse_err(&big_net);
    assert_eq!(e.line, 0, "{e}");
    assert!(e.to_string().contains("larger than"), "{e}");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "1,025 job sections take most of an hour under Miri; safe code, checked natively"
)]
fn at_most_1024_job_sections() {
    let many: String = (0..=1024).map(|i| format!("[j{i}]\n")).collect();
    assert!(parse(&many, &JobOptions::default()).is_err());
}

#[test]
fn hash_inside_a_value_is_kept() {
    assert_eq!(strip_comment("device=a#b ; c"), "device=a#b ");
    assert_eq!(strip_comment("  # all"), "");
    assert_eq!(
        strip_comment("device=dm-table:0 8 zero ; 8 8 error ; c"),
        "device=dm-table:0 8 zero ; 8 8 error ; c"
    );
    assert_eq!(
        strip_comment("device=dm-table:0 8 zero # c"),
        "device=dm-table:0 8 zero "
    );
}

#[test]
fn keywords_take_this_machines_values() {
    let cpus = std::thread::available_parallelism().unwrap().get() as u32;
    let jobs = parse_ok("[j]\nnumjobs=$ncpus\nbs=$pagesize\n");
    assert_eq!(jobs[0].numjobs, cpus);
    assert!(jobs[0].bs >= 4096 && jobs[0].bs.is_power_of_two());
    // No keyword, no host query: the text is kept as it is.
    assert_eq!(substitute("size=$notakeyword"), "size=$notakeyword");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "sysconf(_SC_PHYS_PAGES) is a host query Miri does not model"
)]
fn mb_memory_is_the_machines_memory() {
    let jobs = parse_ok("[j]\nsize=$mb_memory\n");
    // At least 64 MiB of memory, in bytes after the `M`-less size parse.
    assert!(jobs[0].size.unwrap() >= 64, "{:?}", jobs[0].size);
}

fn ini_line() -> impl Strategy<Value = String> {
    // Every known key, plus keys that are ignored or unknown.
    let keys: Vec<&'static str> = KEYS
        .iter()
        .copied()
        .chain(["ioengine", "direct", "filename", ""])
        .collect();
    let key = prop::sample::select(keys);
    prop_oneof![
        (key, ".{0,12}").prop_map(|(k, v)| format!("{k}={v}")),
        ".{0,16}".prop_map(|s| format!("[{s}]")),
        Just("[global]".to_string()),
        "[;#\\[\\]= a-z0-9\u{0}-\u{1f}\u{80}-\u{10ffff}]{0,24}",
    ]
}

proptest! {
    #[test]
    fn never_panics_on_any_text(text in "(?s).{0,512}") {
        let _ = parse(&text, &JobOptions::default());
    }

    #[test]
    fn never_panics_on_ini_like_text(lines in prop::collection::vec(ini_line(), 0..24)) {
        let _ = parse(&lines.join("\n"), &JobOptions::default());
    }
}
