//! The command line's parsing: option forms, fio file flags, job-file keys
//! given as flags, and the messages for bad values.

#[test]
fn a_split_dm_table_is_put_back_together_and_quoted() {
    let args = |s: &str| -> Vec<String> { s.split(' ').map(str::to_string).collect() };
    assert_eq!(
        super::split_dm_table(&args(
            "mqblk bench --device dm-table:0 8 linear ram,size=1M 0 --runtime=1"
        ))
        .as_deref(),
        Some("--device 'dm-table:0 8 linear ram,size=1M 0'")
    );
    assert_eq!(
        super::split_dm_table(&args("mqblk info --device=dm-table:0 8 zero")).as_deref(),
        Some("--device='dm-table:0 8 zero'")
    );
    assert_eq!(
        super::split_dm_table(&args("mqblk info dm-table:0 8 zero")).as_deref(),
        Some("'dm-table:0 8 zero'")
    );
    assert_eq!(super::split_dm_table(&args("mqblk info null x")), None);
    let quoted = vec![
        "mqblk".to_string(),
        "bench".into(),
        "--device".into(),
        "dm-table:0 8 zero".into(),
        "job.fio".into(),
    ];
    assert_eq!(super::split_dm_table(&quoted), None);
}

use super::*;
use clap::CommandFactory;

#[test]
fn cli_is_well_formed() {
    Cli::command().debug_assert();
}

fn bench(argv: &[&str]) -> BenchArgs {
    let mut full = vec!["mqblk".to_string(), "bench".to_string()];
    full.extend(argv.iter().map(|a| a.to_string()));
    match try_parse_from(full).unwrap().command {
        Command::Bench(b) => *b,
        _ => unreachable!(),
    }
}

#[test]
fn both_value_forms_and_flags() {
    let b = bench(&[
        "--bs=8k",
        "--iodepth",
        "4",
        "--time_based",
        "--runtime=1",
        "jobs.fio",
        "--device",
        "null",
        "--device=null,size=1G",
        "--bs=16k",
    ]);
    assert_eq!(b.bs.as_deref(), Some("16k"));
    assert_eq!(b.iodepth.as_deref(), Some("4"));
    assert_eq!(b.time_based.as_deref(), Some("1"));
    assert_eq!(b.jobfile, Some(PathBuf::from("jobs.fio")));
    assert_eq!(b.device, vec!["null", "null,size=1G"]);
    let o = b.job_options().unwrap();
    assert_eq!(o.bs, Some(16384));
    assert_eq!(o.time_based, Some(true));
    assert_eq!(o.devices.as_ref().map(Vec::len), Some(2));
    let b = bench(&[
        "--time_based=0",
        "--queue_mode=global-lock",
        "--hw-queues",
        "2",
    ]);
    let o = b.job_options().unwrap();
    assert_eq!(o.time_based, Some(false));
    assert_eq!(o.queue_mode.as_deref(), Some("global-lock"));
    assert_eq!(o.hw_queues, Some(2));
}

#[test]
fn fio_file_flags_set_the_file_devices() {
    let o = bench(&[
        "--filename=/data/a.img",
        "--device=null",
        "--direct=0",
        "--ioengine=psync",
    ])
    .job_options()
    .unwrap();
    let job = o.build("job0").unwrap();
    assert_eq!(
        job.devices,
        vec!["null", "file:/data/a.img,direct=0,engine=psync"]
    );
    let e = bench(&["--direct=1"])
        .job_options()
        .unwrap_err()
        .to_string();
    assert!(e.contains("--direct applies to file devices"), "{e}");
}

#[test]
fn job_file_keys_without_a_flag_are_taken_from_the_command_line() {
    let b = bench(&[
        "--slat_percentiles",
        "--write_lat_log=lat",
        "--log_avg_msec=0",
        "--bs=8k",
        "jobs.fio",
        "--log_offset",
    ]);
    // Flags and the job file stay clap's.
    assert_eq!(b.bs.as_deref(), Some("8k"));
    assert_eq!(b.jobfile, Some(PathBuf::from("jobs.fio")));
    let o = b.job_options().unwrap();
    assert_eq!(o.slat_percentiles, Some(true));
    assert_eq!(o.write_lat_log.as_deref(), Some("lat"));
    assert_eq!(o.log_avg_msec, Some(0));
    assert_eq!(o.log_offset, Some(true));
    let e = bench(&["--log_hist_coarseness=99"])
        .job_options()
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--log_hist_coarseness: "), "{e}");
    // Not a key: clap refuses it.
    let args = ["mqblk", "bench", "--log_offsets=1"].map(String::from);
    assert!(try_parse_from(args.to_vec()).is_err());
}

#[test]
fn bad_values_name_the_option() {
    for (arg, flag) in [
        ("--bs=0", "--bs"),
        ("--iodepth=0", "--iodepth"),
        ("--rw=foo", "--rw"),
        ("--rwmixread=101", "--rwmixread"),
        ("--size=12q", "--size"),
        ("--plug=maybe", "--plug"),
        ("--queue-mode=none", "--queue-mode"),
        ("--device=nu ll", "--device"),
    ] {
        let e = bench(&[arg]).job_options().unwrap_err().to_string();
        assert!(e.starts_with(flag), "{arg}: {e}");
        assert!(e.contains("expected"), "{arg}: {e}");
    }
}
