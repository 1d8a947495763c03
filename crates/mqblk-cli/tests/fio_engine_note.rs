//! fio's `ioengine=libaio` (and `posixaio`), which mqblk takes the place
//! of: the command line's `--ioengine` is told what a job file's line is.

use std::process::Command;

use mqblk_test_support::Scratch;

const NOTE: &str = "ioengine=libaio: mqblk is the engine (file devices use io_uring)";

#[test]
#[cfg_attr(miri, ignore)]
fn libaio_gets_the_same_note_on_the_command_line_as_in_a_job_file() {
    let s = Scratch::new("engine-note");
    let img = s.file("f.img", 1 << 20);
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .current_dir(s.path())
            .args([
                "bench",
                "--eta=never",
                "--output-format=json",
                "--number_ios=4",
            ])
            .args(args)
            .output()
            .expect("run mqblk");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{args:?}: {stderr}");
        stderr
    };
    let cli = run(&["--filename=f.img", "--ioengine=libaio"]);
    assert!(
        cli.lines().any(|l| l == format!("mqblk: note: --{NOTE}")),
        "{cli}"
    );
    let job = s.path().join("j.fio");
    std::fs::write(
        &job,
        format!("[j]\nfilename={}\nioengine=libaio\n", img.display()),
    )
    .unwrap();
    let file = run(&[job.to_str().unwrap()]);
    assert!(
        file.lines()
            .any(|l| l == format!("mqblk: {}:3: {NOTE}", job.display())),
        "{file}"
    );
    // An engine that picks the file device's engine says nothing.
    let psync = run(&["--filename=f.img", "--ioengine=psync"]);
    assert!(!psync.contains("ioengine"), "{psync}");
}
