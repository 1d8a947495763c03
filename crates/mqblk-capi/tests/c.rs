//! libmqblk as a C program sees it: `cargo cinstall` into a temporary
//! prefix, then the C tests and the C example built with the system
//! compiler through pkg-config, run under ASan+UBSan and under valgrind.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use mqblk_test_support::require_tool;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout + &stderr
}

const PREFIX_TAG: &str = "mqblk-capi-test-";

/// A test binary cannot clean up after its last test, so each run removes
/// the prefixes of earlier runs whose process is gone.
fn remove_stale_prefixes() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX_TAG) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The prefix libmqblk is installed into, once per test binary.
fn prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        require_tool("cargo-cinstall");
        require_tool("pkg-config");
        remove_stale_prefixes();
        let dir = std::env::temp_dir().join(format!("{PREFIX_TAG}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // The dev profile (--debug) reuses what `cargo test` built.
        run(Command::new(env!("CARGO"))
            .arg("cinstall")
            .arg("--debug")
            .arg("--manifest-path")
            .arg(crate_dir().join("Cargo.toml"))
            .arg(format!("--prefix={}", dir.display()))
            .arg(format!("--libdir={}", dir.join("lib").display())));
        dir
    })
}

fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = run(Command::new("pkg-config")
        .args(args)
        .arg("mqblk")
        .env("PKG_CONFIG_PATH", prefix().join("lib/pkgconfig")));
    out.split_whitespace().map(str::to_string).collect()
}

/// Build `src` with the system compiler and pkg-config's flags.
fn build(src: &Path, out_name: &str, extra: &[&str]) -> PathBuf {
    require_tool("cc");
    let out = prefix().join("bin").join(out_name);
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    run(Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"])
        .args(extra)
        .args(pkg_config(&["--cflags"]))
        .arg(src)
        .arg("-o")
        .arg(&out)
        .args(pkg_config(&["--libs"])));
    out
}

fn run_c(exe: &Path, wrapper: &[&str]) -> String {
    let mut cmd = match wrapper.split_first() {
        Some((w, rest)) => {
            let mut c = Command::new(w);
            c.args(rest).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.env("LD_LIBRARY_PATH", prefix().join("lib"));
    run(&mut cmd)
}

#[test]
fn cinstall_installs_the_shared_and_static_libraries_the_header_and_the_pc_file() {
    let p = prefix();
    for f in [
        "lib/libmqblk.so",
        "lib/libmqblk.a",
        "include/mqblk.h",
        "lib/pkgconfig/mqblk.pc",
    ] {
        assert!(
            p.join(f).exists(),
            "{f} is not installed under {}",
            p.display()
        );
    }
    require_tool("readelf");
    let dynamic = run(Command::new("readelf")
        .arg("-d")
        .arg(p.join("lib/libmqblk.so")));
    assert!(
        dynamic.contains("Library soname: [libmqblk.so.0"),
        "libmqblk.so has no soname:\n{dynamic}"
    );
    let installed = std::fs::read_to_string(p.join("include/mqblk.h")).unwrap();
    let committed = std::fs::read_to_string(crate_dir().join("include/mqblk.h")).unwrap();
    assert_eq!(
        installed, committed,
        "the installed header is not the committed one"
    );
}

#[test]
fn the_header_compiles_as_c11_and_as_cxx17_with_every_warning_an_error() {
    require_tool("c++");
    let cflags = pkg_config(&["--cflags"]);
    let dir = crate_dir().join("tests/c");
    run(Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
        ])
        .args(&cflags)
        .arg(dir.join("api_test.c")));
    let out = prefix().join("bin/header_cxx");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    run(Command::new("c++")
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .args(&cflags)
        .arg(dir.join("header_cxx.cpp"))
        .arg("-o")
        .arg(&out)
        .args(pkg_config(&["--libs"])));
    run_c(&out, &[]);
}

#[test]
fn c_tests_pass_under_asan_and_ubsan() {
    let exe = build(
        &crate_dir().join("tests/c/api_test.c"),
        "api_test_asan",
        &[
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
        ],
    );
    let out = run_c(&exe, &[]);
    println!("{out}");
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

#[test]
fn c_tests_pass_under_valgrind_with_no_leaks() {
    require_tool("valgrind");
    let exe = build(
        &crate_dir().join("tests/c/api_test.c"),
        "api_test",
        &["-O1"],
    );
    let out = run_c(
        &exe,
        &[
            "valgrind",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect,possible",
            "--errors-for-leak-kinds=definite,indirect,possible",
            "--error-exitcode=99",
        ],
    );
    println!("{out}");
    assert!(out.contains(" passed, 0 failed"), "{out}");
    assert!(out.contains("ERROR SUMMARY: 0 errors"), "{out}");
}

#[test]
fn the_c_example_builds_with_its_makefile_and_runs_under_valgrind() {
    require_tool("make");
    require_tool("valgrind");
    let src = crate_dir().join("../../examples/c");
    let build = prefix().join("example");
    std::fs::create_dir_all(&build).unwrap();
    run(Command::new("make")
        .arg("-C")
        .arg(&build)
        .arg("-f")
        .arg(src.join("Makefile"))
        .arg(format!("VPATH={}", src.display()))
        .env("PKG_CONFIG_PATH", prefix().join("lib/pkgconfig")));
    // The Makefile gives the programs an rpath to where pkg-config found
    // the library: they run with no LD_LIBRARY_PATH.
    let dynamic = run(Command::new("readelf").arg("-d").arg(build.join("hello")));
    let lib = prefix().join("lib");
    assert!(
        dynamic
            .lines()
            .any(|l| (l.contains("(RUNPATH)") || l.contains("(RPATH)"))
                && l.contains(lib.to_str().unwrap())),
        "no rpath to {} in:\n{dynamic}",
        lib.display()
    );
    let alone = Command::new(build.join("hello"))
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(
        alone.status.success(),
        "hello without LD_LIBRARY_PATH: {}",
        String::from_utf8_lossy(&alone.stderr)
    );
    let out = run_c(
        &build.join("hello"),
        &[
            "valgrind",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect,possible",
            "--error-exitcode=99",
        ],
    );
    println!("{out}");
    assert!(out.contains("readv got 'c' and 'd'"), "{out}");
    assert!(
        out.contains("completion fd: write-zeroes completed: success"),
        "{out}"
    );
    // A failure says what was wrong, once.
    assert!(
        out.contains(
            "opening \"nosuchdevice\" failed (-3): invalid device spec \"nosuchdevice\": unknown device kind `nosuchdevice`;"
        ),
        "{out}"
    );
    assert!(
        !out.contains("invalid device spec: invalid device spec"),
        "{out}"
    );
    let bad = Command::new(build.join("hello"))
        .arg("nul")
        .env("LD_LIBRARY_PATH", prefix().join("lib"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(
            "mqblk_open: invalid device spec \"nul\": unknown device kind `nul` (did you mean `null`?); built in: "
        ),
        "{err}"
    );
}

/// examples/c/qd32.c's line: its IOPS.
fn qd32_iops(out: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("qd32: "))
        .unwrap_or_else(|| panic!("no qd32 line:\n{out}"));
    assert!(line.contains("(0 errors)"), "{line}");
    line.split(" IOPS")
        .next()
        .and_then(|r| r.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no IOPS in {line}"))
}

#[test]
fn the_qd32_example_is_clean_under_asan_ubsan_and_valgrind() {
    require_tool("valgrind");
    let src = crate_dir().join("../../examples/c/qd32.c");
    let asan = build(
        &src,
        "qd32_asan",
        &[
            "-O1",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
        ],
    );
    let mut cmd = Command::new(&asan);
    cmd.args(["null,size=1G", "0.2"])
        .env("LD_LIBRARY_PATH", prefix().join("lib"));
    let out = run(&mut cmd);
    assert!(qd32_iops(&out) > 0.0, "{out}");
    let exe = build(&src, "qd32", &["-O1"]);
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--leak-check=full",
        "--errors-for-leak-kinds=definite,indirect,possible",
        "--error-exitcode=99",
    ])
    .arg(&exe)
    .args(["ram,size=64M", "0.2"])
    .env("LD_LIBRARY_PATH", prefix().join("lib"));
    let out = run(&mut cmd);
    assert!(qd32_iops(&out) > 0.0, "{out}");
    assert!(out.contains("ERROR SUMMARY: 0 errors"), "{out}");
}

/// `mqblk bench` of this build (the same profile as this test's).
fn mqblk_bench() -> PathBuf {
    run(Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "mqblk-cli", "--bin", "mqblk"])
        .arg("--manifest-path")
        .arg(crate_dir().join("../../Cargo.toml")));
    // This test runs from target/PROFILE/deps/.
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("mqblk")
}

#[test]
fn the_qd32_loop_runs_beside_mqblk_bench_in_alternating_pairs() {
    let qd32 = build(
        &crate_dir().join("../../examples/c/qd32.c"),
        "qd32_o2",
        &["-O2"],
    );
    let mqblk = mqblk_bench();
    let mut ratios = Vec::new();
    for pair in 1..=3 {
        let mut c = Command::new(&qd32);
        c.args(["null,size=1G", "0.5"])
            .env("LD_LIBRARY_PATH", prefix().join("lib"));
        let c_iops = qd32_iops(&run(&mut c));
        let out = run(Command::new(&mqblk).args([
            "bench",
            "--device=null,size=1G",
            "--rw=randread",
            "--iodepth=32",
            "--runtime=500ms",
            "--time_based",
            "--output-format=json",
        ]));
        let json = &out[..out.rfind('}').map_or(out.len(), |i| i + 1)];
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let bench_iops = v["jobs"][0]["read"]["iops"].as_f64().unwrap();
        assert!(c_iops > 0.0 && bench_iops > 0.0);
        let ratio = c_iops / bench_iops;
        println!(
            "pair {pair}: C loop {c_iops:.0} IOPS, mqblk bench {bench_iops:.0} IOPS: {ratio:.3}"
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    // No bound here: the figures of record come from release builds
    // (scripts/compare-c.sh); this shows the comparison is made alike.
    println!(
        "median C/bench: {:.3} (this test's build profile)",
        ratios[1]
    );
}

#[test]
fn a_static_link_works_too() {
    let exe = prefix().join("bin/api_test_static");
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    run(Command::new("cc")
        .args(["-std=c11", "-g"])
        .args(pkg_config(&["--cflags"]))
        .arg(crate_dir().join("tests/c/api_test.c"))
        .arg("-o")
        .arg(&exe)
        .arg(prefix().join("lib/libmqblk.a"))
        .args(
            pkg_config(&["--static", "--libs-only-l"])
                .iter()
                .filter(|l| *l != "-lmqblk"),
        ));
    let out = run(&mut Command::new(&exe));
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

/// The fio engine, built by contrib/fio-engine/build.sh against the
/// installed libmqblk and fio's own source, once per test binary.
fn fio_engine() -> &'static Path {
    static ENGINE: OnceLock<PathBuf> = OnceLock::new();
    ENGINE.get_or_init(|| {
        require_tool("fio");
        require_tool("dpkg-source");
        let out = prefix().join("fio-engine");
        let script = crate_dir().join("../../contrib/fio-engine/build.sh");
        run(Command::new("bash")
            .arg(script)
            .arg(&out)
            .env("PKG_CONFIG_PATH", prefix().join("lib/pkgconfig")));
        out.join("libmqblk-fio.so")
    })
}

fn fio(args: &[&str]) -> String {
    let engine = format!("--ioengine=external:{}", fio_engine().display());
    run(Command::new("fio").arg(engine).args(args))
}

#[test]
fn fio_verifies_crc32c_through_the_engine_on_a_ram_device() {
    let out = fio(&[
        "--name=verify",
        "--mqblk_spec=ram,size=64M",
        "--rw=randwrite",
        "--bs=4k",
        "--size=16M",
        "--iodepth=16",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
    ]);
    println!("{out}");
    assert!(out.contains("err= 0"), "fio reported an error:\n{out}");
    assert!(out.contains("write: IOPS="), "{out}");
    assert!(out.contains("read: IOPS="), "no verify reads:\n{out}");
}

#[test]
fn fio_filename_names_a_file_device_for_the_engine() {
    let dir = prefix().join("fio-file");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("disk.img");
    let _ = std::fs::remove_file(&file);
    let out = fio(&[
        "--name=file",
        &format!("--filename={}", file.display()),
        "--rw=write",
        "--bs=64k",
        "--size=8M",
        "--iodepth=4",
        "--verify=md5",
        "--do_verify=1",
        "--verify_fatal=1",
        "--end_fsync=1",
        "--output-format=json",
    ]);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 8 << 20);
    let v: serde_json::Value = serde_json::from_str(&out[out.find('{').unwrap()..]).unwrap();
    assert_eq!(v["jobs"][0]["error"], 0, "{out}");
    assert_eq!(v["jobs"][0]["write"]["io_bytes"], 8 << 20, "{out}");
}

#[test]
fn submitting_through_the_c_api_allocates_nothing_and_copies_nothing_per_io() {
    let exe = build(
        &crate_dir().join("tests/c/alloc_test.c"),
        "alloc_test",
        &["-O1"],
    );
    for spec in ["ram,size=16M", "null"] {
        let out = run(Command::new(&exe)
            .args([spec, "100000"])
            .env("LD_LIBRARY_PATH", prefix().join("lib")));
        println!("{out}");
        assert!(
            out.contains("allocations per I/O: 0.000000, bytes copied: 0"),
            "{out}"
        );
    }
}
