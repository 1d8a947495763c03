//! `mqblk bench --fsync=N` on a file on ext4 (issue 34, item 2): ext4 has
//! a volatile write cache, so each flush really goes through the layer's
//! flush machine (on tmpfs, ram and null it ends at once). Flushes that
//! pile up while one runs once took every bio slot and failed with "out
//! of bio slots or tags". Here every combination of fsync=1 and 8, depth
//! 1, 16 and 64, engine uring and psync, and direct=0 and 1 runs for one
//! second on an ext4 made on a loop device, and must end without error,
//! having flushed.

use std::process::Command;

use mqblk_test_support::Ext4;

/// One run, which must end well with no error in its job: its write
/// I/Os and its flushes (the bios that were not writes), from its JSON.
fn run(file: &str, fsync: u32, depth: u32, engine: &str, direct: u8) -> (u64, u64) {
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args([
            "bench",
            &format!("--device=file:{file},engine={engine},direct={direct}"),
            "--rw=randwrite",
            "--bs=4k",
            &format!("--fsync={fsync}"),
            &format!("--iodepth={depth}"),
            "--time_based",
            "--runtime=1",
            "--output-format=json",
        ])
        .output()
        .expect("run the mqblk binary");
    let what = format!("fsync={fsync} iodepth={depth} engine={engine} direct={direct}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{what}: JSON output: {e}: {err}"));
    let job = &v["jobs"][0];
    let writes = job["write"]["total_ios"].as_u64().unwrap();
    let bios = v["mqblk"]["bios"].as_u64().unwrap();
    let error = job["error"].as_u64().unwrap();
    let write_errors = job["write"]["errors"].as_u64().unwrap_or(0);
    assert_eq!(error, 0, "{what}: {err}");
    assert_eq!(write_errors, 0, "{what}: {err}");
    (writes, bios.saturating_sub(writes))
}

#[test]
fn fsync_on_ext4_never_fails_for_want_of_slots() {
    let Some(fs) = Ext4::new("fsync-ext4", 256 << 20) else {
        return;
    };
    let file = fs.file("F", 64 << 20);
    let file = file.to_str().unwrap();
    let mut runs = 0;
    for fsync in [1, 8] {
        for depth in [1, 16, 64] {
            for engine in ["uring", "psync"] {
                for direct in [0, 1] {
                    let (writes, flushes) = run(file, fsync, depth, engine, direct);
                    eprintln!(
                        "fsync={fsync} iodepth={depth} engine={engine} direct={direct}: \
                         {writes} writes, {flushes} flushes, no error"
                    );
                    assert!(writes > 0, "no write went through");
                    assert!(
                        flushes > 0,
                        "fsync={fsync}: {writes} writes and not one flush"
                    );
                    runs += 1;
                }
            }
        }
    }
    eprintln!("{runs} of 24 runs without error");
    assert_eq!(runs, 24);
}
