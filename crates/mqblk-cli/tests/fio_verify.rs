//! Verify headers as fio writes them: `fio --verify_only` checks a file
//! `mqblk bench --verify=KIND` wrote, and `mqblk bench --rw=read
//! --verify=KIND` checks a file fio wrote, for md5, crc32c, sha1, xxhash,
//! crc64, crc32, crc16, crc7 and sha3-*; a byte
//! changed in fio's file is caught, with its offset. The fio run is the
//! installed fio (scripts/test installs it).

use std::path::Path;
use std::process::{Command, Output};

use mqblk_test_support::{require_tool, Scratch};

const SIZE: &str = "1m";
const BLOCKS: u64 = 256;
/// fio's checksums that mqblk writes in fio's layout.
const KINDS: [&str; 12] = [
    "md5", "crc32c", "sha1", "xxhash", "crc64", "crc32", "crc16", "crc7", "sha3-224", "sha3-256",
    "sha3-384", "sha3-512",
];

fn run(cmd: &str, args: &[String]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn mqblk_bench(file: &Path, rw: &str, kind: &str) -> serde_json::Value {
    let o = run(
        env!("CARGO_BIN_EXE_mqblk"),
        &[
            "bench".into(),
            format!("--device=file:{},size={SIZE}", file.display()),
            format!("--rw={rw}"),
            "--bs=4k".into(),
            format!("--size={SIZE}"),
            format!("--verify={kind}"),
            "--output-format=json".into(),
        ],
    );
    assert!(o.status.success(), "mqblk bench: {}", text(&o));
    serde_json::from_slice(&o.stdout).expect("JSON output")
}

fn fio(file: &Path, kind: &str, extra: &[&str]) -> Output {
    let mut args: Vec<String> = vec![
        "--name=interop".into(),
        format!("--filename={}", file.display()),
        "--rw=write".into(),
        "--bs=4k".into(),
        format!("--size={SIZE}"),
        format!("--verify={kind}"),
        "--ioengine=psync".into(),
        "--output-format=json".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    run("fio", &args)
}

/// fio's verdict on its run: its job's error, and its read bytes.
fn fio_job(o: &Output) -> (i64, u64) {
    let out = String::from_utf8_lossy(&o.stdout);
    // fio prints verify failures on stderr before its JSON.
    let json = &out[out.find('{').unwrap_or(0)..];
    let v: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("fio's JSON: {e}: {}", text(o)));
    let job = &v["jobs"][0];
    (
        job["error"].as_i64().unwrap(),
        job["read"]["io_bytes"].as_u64().unwrap() + job["write"]["io_bytes"].as_u64().unwrap(),
    )
}

#[test]
fn fio_verify_only_passes_on_what_mqblk_wrote() {
    require_tool("fio");
    let dir = Scratch::new("fio-verify-mqblk");
    for kind in KINDS {
        let file = dir.file(&format!("{kind}.img"), 1 << 20);
        let v = mqblk_bench(&file, "write", kind);
        assert_eq!(v["jobs"][0]["verify"]["blocks_written"], BLOCKS, "{v:#}");
        let o = fio(&file, kind, &["--verify_only"]);
        let (error, bytes) = fio_job(&o);
        eprintln!("{kind}: fio --verify_only on mqblk's file: error {error}, {bytes} bytes");
        assert!(o.status.success(), "{}", text(&o));
        assert_eq!(error, 0, "{}", text(&o));
        assert!(!text(&o).contains("verify:"), "{}", text(&o));
        // A changed byte is what fio catches, so the pass is a check.
        corrupt(&file, 8192 + 100);
        let o = fio(&file, kind, &["--verify_only"]);
        let (error, _) = fio_job(&o);
        eprintln!("{kind}: after a byte changed at 8292: fio's error {error}");
        assert_eq!(error, 84, "fio catches it (EILSEQ): {}", text(&o));
    }
}

fn corrupt(path: &Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ 0xff], offset).unwrap();
}

#[test]
fn mqblk_checks_what_fio_wrote() {
    require_tool("fio");
    let dir = Scratch::new("mqblk-verify-fio");
    for kind in KINDS {
        let file = dir.path().join(format!("{kind}.img"));
        let o = fio(&file, kind, &["--do_verify=0"]);
        assert!(o.status.success(), "{}", text(&o));
        let v = mqblk_bench(&file, "read", kind);
        let verify = &v["jobs"][0]["verify"];
        eprintln!(
            "{kind}: mqblk on fio's file: {} blocks verified, {} errors",
            verify["blocks_verified"], verify["errors"]
        );
        assert_eq!(verify["blocks_verified"], BLOCKS, "{verify:#}");
        assert_eq!(verify["errors"], 0, "{verify:#}");
        assert_eq!(verify["blocks_unwritten"], 0, "{verify:#}");
        corrupt(&file, 3 * 4096 + 200);
        let v = mqblk_bench_allowing_errors(&file, kind);
        let verify = &v["jobs"][0]["verify"];
        eprintln!(
            "{kind}: after a byte changed at {}: {} errors",
            3 * 4096 + 200,
            verify["errors"]
        );
        assert_eq!(verify["errors"], 1, "{verify:#}");
        assert_eq!(verify["mismatches"][0]["offset"], 3 * 4096, "{verify:#}");
    }
}

fn mqblk_bench_allowing_errors(file: &Path, kind: &str) -> serde_json::Value {
    let o = run(
        env!("CARGO_BIN_EXE_mqblk"),
        &[
            "bench".into(),
            format!("--device=file:{}", file.display()),
            "--rw=read".into(),
            "--bs=4k".into(),
            format!("--size={SIZE}"),
            format!("--verify={kind}"),
            "--output-format=json".into(),
        ],
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("JSON output: {e}: {}", text(&o)))
}

#[test]
fn a_checksum_mqblk_writes_in_another_s_place_says_so_on_the_command_line() {
    let dir = Scratch::new("verify-stand-in");
    let file = dir.file("sha512.img", 1 << 20);
    let o = run(
        env!("CARGO_BIN_EXE_mqblk"),
        &[
            "bench".into(),
            format!("--device=file:{}", file.display()),
            "--rw=write".into(),
            "--size=1m".into(),
            "--verify=sha512".into(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("note: --verify=sha512: checked with sha256")
            && err.contains("fio with verify=sha512 cannot check"),
        "{err}"
    );
}
