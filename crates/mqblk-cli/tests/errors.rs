//! Bad invocations and the first line of what `mqblk` answers, as a table.
//!
//! Each error names the thing, the value, what was expected and the fix.
//! A change that rewords one of them changes this table with it, on
//! purpose. Every row runs in a fresh temporary directory holding
//! `d/f.img` (16 MiB), so paths in the table are relative and the same on
//! every machine; after the table, `d/f.img` must still be 16 MiB and
//! nothing else may have appeared in `d`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `(arguments, first line of stderr)`.
const TABLE: &[(&[&str], &str)] = &[
    // info: the device is positional or --device, and required.
    (
        &["info"],
        "mqblk: error: info needs a device: `mqblk info SPEC` or `mqblk info --device SPEC`, as in `mqblk info null,size=1G` or `mqblk info file:/dev/sdb`",
    ),
    // Spec syntax.
    (
        &["info", "null,,,"],
        "mqblk: error: invalid device spec \"null,,,\": option 1 is empty (two commas in a row, or a comma at the end); expected key=value between commas",
    ),
    (
        &["info", "null,"],
        "mqblk: error: invalid device spec \"null,\": option 1 is empty (two commas in a row, or a comma at the end); expected key=value between commas",
    ),
    (
        &["info", "ram,sise=1G"],
        "mqblk: error: invalid device spec \"ram,sise=1G\": unknown option `sise`; did you mean `size`? (`size` is required, as in `ram,size=1G`)",
    ),
    (
        &["info", "ram"],
        "mqblk: error: invalid device spec \"ram\": option `size` is required, as in `ram,size=1G`",
    ),
    (
        &["info", "ram,size=1G,blocksize=4k"],
        "mqblk: error: invalid device spec \"ram,size=1G,blocksize=4k\": unknown option `blocksize` for this device kind; did you mean `block_size`? Valid options: bioset_size, block_size, bounce, chunk_sectors, hw_queues, instance, io_timeout_ms, iostats, max_sectors, max_segment_size, max_segments, nomerges, part, part_cache, plug, queue_depth, queue_depth_max, queue_mode, rbps, reserved_tags, riops, ro, scheduler, shared_tags, size, throttle_burst_ms, trace, wbps, wiops",
    ),
    (
        &["info", "nul"],
        "mqblk: error: invalid device spec \"nul\": unknown device kind `nul` (did you mean `null`?); built in: null, ram,size=SIZE, file:PATH, nbd://HOST:PORT/EXPORT, nbds://HOST:PORT/EXPORT, rbd:POOL/IMAGE, qcow2:PATH, dm:TABLE_FILE, dm-table:LINE;LINE...",
    ),
    // Files: what is wrong, and what to do.
    (
        &["info", "file:d/f.img,size=1G"],
        "mqblk: error: device \"file:d/f.img,size=1G\": file0: size=1073741824 is larger than d/f.img (16777216 bytes); add create=1 to grow the file to 1073741824 bytes, or drop size= to use its 16777216 bytes",
    ),
    (
        &["info", "file:d/f.img,size=1000,direct=0"],
        "mqblk: error: device \"file:d/f.img,size=1000,direct=0\": file0: size=1000 is not a multiple of d/f.img's 512-byte logical block size (buffered I/O (no alignment)); use size=512 or size=1024",
    ),
    (
        &["info", "file:nodir/x.img,size=64M"],
        "mqblk: error: device \"file:nodir/x.img,size=64M\": file0: nodir/x.img cannot be created: the directory nodir does not exist; create it first",
    ),
    (
        &["info", "file:/dev/null"],
        "mqblk: error: device \"file:/dev/null\": file0: /dev/null is a character device; expected a regular file or a block device",
    ),
    (
        &["info", "file:d"],
        "mqblk: error: device \"file:d\": file0: d is a directory; expected a regular file or a block device",
    ),
    (
        &["info", "file:d/missing.img"],
        "mqblk: error: device \"file:d/missing.img\": file0: d/missing.img does not exist; to create it, give its size, as in file:d/missing.img,size=1G",
    ),
    (
        &["info", "/dev/mqblk-no-such-disk"],
        "mqblk: note: reading the bare path /dev/mqblk-no-such-disk as the file device file:/dev/mqblk-no-such-disk",
    ),
    (
        &["info", "file:/dev/mqblk-no-such-disk"],
        "mqblk: error: device \"file:/dev/mqblk-no-such-disk\": file0: /dev/mqblk-no-such-disk does not exist: there is no such device (`lsblk` lists the block devices); mqblk creates no files under /dev",
    ),
    (
        &["info", "file:d/new.img,size=1M"],
        "mqblk: error: device \"file:d/new.img,size=1M\": file0: d/new.img does not exist, and a read-only open (ro=1, which `mqblk info` and read-only workloads use) creates nothing; create it with a writable open (file:d/new.img,size=1048576) or `truncate -s SIZE d/new.img`",
    ),
    (
        &["info", "d/missing.img"],
        "mqblk: note: reading the bare path d/missing.img as the file device file:d/missing.img",
    ),
    (
        // (bench: info never creates, so it drops create=.)
        &["bench", "--device", "file:d/f.img,create=1", "--number_ios=1"],
        "mqblk: error: invalid device spec \"file:d/f.img,create=1\": option create=\"1\": expected create=1 together with size=, as in file:/data/disk.img,create=1,size=1G",
    ),
    // bench: checked before the banner, before any I/O.
    // (A size past the device is fitted to it, as fio does: a note, no
    // error.)
    (
        &["bench", "--device", "null,size=1G", "--offset=1000"],
        "mqblk: error: job job0: offset=1000 must be a multiple of nullb0's logical block size 512 (null,size=1G)",
    ),
    (
        &["bench", "--device", "null,ro=1", "--rw=write"],
        "mqblk: error: job job0: rw=write writes, but device nullb0 (null,ro=1) is read-only; use rw=read or rw=randread, or open it writable (drop ro=1)",
    ),
    (
        &["bench", "--device", "file:d/f.img,ro=1", "--rw=randrw"],
        "mqblk: error: job job0: rw=randrw writes, but device file0 (file:d/f.img,ro=1) is read-only; use rw=read or rw=randread, or open it writable (drop ro=1)",
    ),
    (
        &["info", "nbd+unix:///x"],
        "mqblk: error: invalid device spec \"nbd+unix:///x\": nbd+unix:// needs ?socket=PATH",
    ),
    (
        &["bench", "--device", "null,block_size=4096", "--bs=2k"],
        "mqblk: error: job job0: bs=2048 is not a multiple of nullb0's logical block size 4096 (null,block_size=4096); use bs=4096",
    ),
    (
        &["bench", "--device", "nul"],
        "mqblk: error: invalid device spec \"nul\": unknown device kind `nul` (did you mean `null`?); built in: null, ram,size=SIZE, file:PATH, nbd://HOST:PORT/EXPORT, nbds://HOST:PORT/EXPORT, rbd:POOL/IMAGE, qcow2:PATH, dm:TABLE_FILE, dm-table:LINE;LINE...",
    ),
    (
        &["bench", "--filename=d/missing.img"],
        "mqblk: error: device \"file:d/missing.img\": file0: d/missing.img does not exist; to create it, give its size, as in file:d/missing.img,size=1G",
    ),
    (
        &["bench", "--ioengine=spdk"],
        "mqblk: error: --ioengine=spdk: mqblk is itself the I/O engine; file devices take io_uring or psync (engine=uring|psync in a file: spec), and the device is chosen with --device SPEC (device= in a job file)",
    ),
    (
        &["bench", "--ioengine=null"],
        "mqblk: error: --ioengine=null: fio's null engine is mqblk's null device: --device null (device=null in a job file)",
    ),
    (
        &["bench", "--ioengine=io_uring", "--device", "null"],
        "mqblk: error: --ioengine applies to file devices, and none is given: name one with --filename PATH or --device file:PATH",
    ),
    (
        &["bench", "--direct=1"],
        "mqblk: error: --direct applies to file devices, and none is given: name one with --filename PATH or --device file:PATH",
    ),
    (
        &["bench", "--direct=2", "--filename=d/f.img"],
        "mqblk: error: --direct=2: expected 0 (page cache) or 1 (O_DIRECT)",
    ),
    (
        &["bench", "--iodeth=4"],
        "mqblk: error: unknown option --iodeth for `mqblk bench`; did you mean --iodepth? (`mqblk bench --help` lists every option)",
    ),
    // serve: an address, a device, limits that mean something.
    (
        &["serve", "ram,size=1M"],
        "mqblk: error: serve needs an address: --listen HOST:PORT (TCP, as in --listen 127.0.0.1:10809), --socket PATH (a unix socket), --vhost-user-blk PATH (for virtual machines) or --fuse FILE (a regular file the device is mounted over)",
    ),
    (
        &["serve", "ram,size=1M", "--vhost-user-blk", "v.sock", "--num-queues", "0"],
        "mqblk: error: --num-queues 0: expected 1 to 64 virtqueues",
    ),
    (
        &["serve", "ram,size=1M", "--vhost-user-blk", "v.sock", "--poll-us", "2000000"],
        "mqblk: error: --poll-us 2000000: expected at most 1000000 (one second of spinning per batch)",
    ),
    (
        &["serve", "ram,size=1M", "--vhost-user-blk", "v.sock", "--serial", "a-serial-longer-than-20"],
        "mqblk: error: serial \"a-serial-longer-than-20\" is longer than virtio-blk's 20 bytes",
    ),
    (
        &["serve", "--socket", "d/s"],
        "mqblk: error: serve needs a device to export: `mqblk serve SPEC --socket PATH` or `--device SPEC`, as in `mqblk serve ram,size=1G --socket /tmp/mqblk.sock`",
    ),
    (
        &["serve", "--listen", "127.0.0.1:99999", "ram,size=1M"],
        "mqblk: error: --listen \"127.0.0.1:99999\": port \"99999\" is not a number from 0 to 65535 (NBD's is 10809; 0 picks a free one)",
    ),
    (
        &["serve", "--listen", "10809", "ram,size=1M"],
        "mqblk: error: --listen \"10809\": expected HOST:PORT, as in 127.0.0.1:10809 (port 0 picks a free one)",
    ),
    (
        &["serve", "--socket", "d", "ram,size=1M"],
        "mqblk: error: d is a directory; --socket needs the path of a socket to create, such as d/mqblk.sock",
    ),
    (
        &["serve", "--socket", "d/f.img", "ram,size=1M"],
        "mqblk: error: d/f.img exists and is a regular file, not a socket; it is left alone: remove it yourself or choose another --socket path",
    ),
    (
        &["serve", "--socket", "nodir/s", "ram,size=1M"],
        "mqblk: error: cannot listen on nodir/s: the directory nodir does not exist",
    ),
    (
        &["serve", "--socket", "d/s", "--max-mib", "8", "ram,size=1M"],
        "mqblk: error: --max-mib 8: expected at least 32, so that one request of up to 32 MiB fits in a connection's buffers",
    ),
    (
        &["serve", "--socket", "d/s", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-verify-peer", "ca.pem", "--tls=on", "ram,size=1M"],
        "mqblk: error: --tls-verify-peer with --tls=on: a plaintext client would be served with no certificate at all; use --tls=require (the default with --tls-verify-peer)",
    ),
    (
        &["serve", "--socket", "d/s", "--max-connections=0", "ram,size=1M"],
        "mqblk: error: --max-connections 0: expected at least 1 connection at once",
    ),
    (
        &["serve", "--socket", "d/s", "--max-requests=0", "ram,size=1M"],
        "mqblk: error: --max-requests 0: expected at least 1 request in flight per connection",
    ),
    (
        &["serve", "--socket", "d/s", "--export", "a", "--export", "b", "ram,size=1M"],
        "mqblk: error: 2 --export names for 1 devices: give one name per device",
    ),
    // An unquoted dm-table, split by the shell.
    (
        &["info", "dm-table:0", "1000", "linear", "ram,size=1M", "0"],
        "mqblk: error: unknown option 1000 for `mqblk info`; a dm-table spec holds spaces, and the shell split it there: quote it whole, as in 'dm-table:0 1000 linear ram,size=1M 0' (`mqblk info --help` lists every option)",
    ),
    (
        &["bench", "--device", "dm-table:0", "8", "zero", "--runtime=1"],
        "mqblk: error: unknown option zero for `mqblk bench`; a dm-table spec holds spaces, and the shell split it there: quote it whole, as in --device 'dm-table:0 8 zero' (`mqblk bench --help` lists every option)",
    ),
    (
        &["bench", "--device=dm-table:0", "8"],
        "mqblk: error: cannot open job file 8: No such file or directory (os error 2); a dm-table spec holds spaces, and the shell split it there: quote it whole, as in --device='dm-table:0 8'",
    ),
    // stat.
    (
        &["stat"],
        "mqblk: error: give the stats directory: mqblk stat DIR, or mqblk stat --stats-dir DIR",
    ),
    (
        &["stat", "--interval=0", "d"],
        "mqblk: error: --interval: must be more than 0",
    ),
];

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn bad_invocations_and_their_first_error_line() {
    let root = std::env::temp_dir().join(format!("mqblk-errors-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("d")).unwrap();
    let _scratch = Scratch(root.clone());
    let img = root.join("d/f.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();

    let mut wrong = Vec::new();
    for (args, want) in TABLE {
        let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(*args)
            .current_dir(&root)
            .output()
            .expect("run the mqblk binary");
        let err = String::from_utf8_lossy(&o.stderr);
        let first = err.lines().next().unwrap_or("");
        if o.status.success() {
            wrong.push(format!("{args:?}: succeeded; stderr: {err}"));
        } else if first != *want {
            wrong.push(format!("{args:?}:\n  got:  {first}\n  want: {want}"));
        }
        // Nothing before the error: no banner, no partial report.
        if !o.stdout.is_empty() {
            wrong.push(format!(
                "{args:?}: printed to stdout before failing: {}",
                String::from_utf8_lossy(&o.stdout)
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 16 << 20);
    assert_eq!(names(&root.join("d")), ["f.img"], "nothing left behind");
    assert_eq!(names(&root), ["d"], "nothing left behind");
}

/// A ram device larger than the machine's memory opens (it is sparse),
/// with one warning on stderr, however many such devices there are.
#[test]
fn a_ram_device_past_memory_is_warned_of_once() {
    let sectors = (100u64 << 40) / 512;
    let table = format!(
        "dm-table:0 {sectors} linear ram,size=100T,hw_queues=1 0;{sectors} {sectors} linear ram,size=100T,hw_queues=2 0"
    );
    for spec in ["ram,size=100T", table.as_str()] {
        let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["info", spec])
            .output()
            .expect("run the mqblk binary");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{spec}: {err}");
        let warnings: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("mqblk: warning: ram"))
            .collect();
        assert_eq!(warnings.len(), 1, "{spec}: {err}");
        assert!(
            warnings[0]
                .contains("is 100.0 TiB (109951162777600 bytes), more than this machine's memory"),
            "{}",
            warnings[0]
        );
    }
    // A small one: no word.
    let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["info", "ram,size=1M"])
        .output()
        .expect("run the mqblk binary");
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"));
}
