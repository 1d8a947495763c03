//! Every file mqblk reads has a size cap: pointed at `/dev/zero`, each
//! command fails at once with an error naming the file and the cap,
//! instead of reading until memory runs out.

use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_test_support::Scratch;

/// Run mqblk with `args`; it must fail, within `bound` (a hang bound: the
/// commands used to read on for as long as they were let; `what` names
/// it), and the last line of stderr is returned.
fn fails(what: &str, args: &[&str], bound: Duration) -> String {
    let t = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .output()
        .expect("run the mqblk binary");
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{args:?} succeeded: {err}");
    assert!(
        mqblk_test_support::time_bound(what, took, bound),
        "{args:?} took {took:?}: {err}"
    );
    err.lines().last().unwrap_or_default().to_string()
}

#[test]
fn plot_of_dev_zero_fails_within_a_second_naming_the_file_and_the_cap() {
    let d = Scratch::new("cap-plot");
    let out = d.path().join("fig");
    let e = fails(
        "plot",
        &["plot", "/dev/zero", "--out", out.to_str().unwrap()],
        Duration::from_secs(1),
    );
    assert_eq!(
        e,
        format!(
            "mqblk: error: the plot input /dev/zero is larger than {} bytes, the most mqblk reads of a plot input (is it the right file?)",
            64 << 20
        )
    );
}

#[test]
fn stat_of_a_dev_zero_stats_file_fails_naming_it_and_the_cap() {
    let d = Scratch::new("cap-stat");
    let json = d.path().join("mqblk.json");
    std::os::unix::fs::symlink("/dev/zero", &json).unwrap();
    let e = fails(
        "capped",
        &["stat", d.path().to_str().unwrap()],
        Duration::from_secs(1),
    );
    assert_eq!(
        e,
        format!(
            "mqblk: error: the stats file {} is larger than {} bytes, the most mqblk reads of a stats file (is it the right file?)",
            json.display(),
            16 << 20
        )
    );
    // A missing one still says what to do.
    std::fs::remove_file(&json).unwrap();
    let e = fails(
        "missing",
        &["stat", d.path().to_str().unwrap()],
        Duration::from_secs(5),
    );
    assert!(e.ends_with("(is a bench running with --stats-dir?)"), "{e}");
}

#[test]
fn a_dm_table_file_of_dev_zero_fails_naming_it_and_the_cap() {
    let e = fails("info", &["info", "dm:/dev/zero"], Duration::from_secs(1));
    assert!(
        e.contains(&format!(
            "the table file /dev/zero is larger than {} bytes, the most mqblk reads of a dm table",
            16 << 20
        )),
        "{e}"
    );
}

/// A PEM file of one block of `label`: it parses, though it holds no real
/// certificate or key (the file that is too large is refused before any is
/// checked).
fn pem(dir: &Scratch, name: &str, label: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(
        &p,
        format!("-----BEGIN {label}-----\nMAAA\n-----END {label}-----\n"),
    )
    .unwrap();
    p.to_str().unwrap().to_string()
}

/// `serve` with one of its TLS files pointed at `/dev/zero`: it fails within
/// a second (it used to read 3.8 GB in 5 s), naming the file and the cap.
fn serve_with_tls_file_of_dev_zero(which: &str, what: &str) {
    let d = Scratch::new(&format!("cap-tls{which}"));
    let cert = pem(&d, "cert.pem", "CERTIFICATE");
    let key = pem(&d, "key.pem", "PRIVATE KEY");
    let ca = pem(&d, "ca.pem", "CERTIFICATE");
    let sock = d.path().join("s");
    let mut args = vec!["serve", "ram,size=1M", "--socket", sock.to_str().unwrap()];
    let files = [
        ("--tls-cert", &cert),
        ("--tls-key", &key),
        ("--tls-verify-peer", &ca),
    ];
    for (opt, path) in files {
        args.push(opt);
        args.push(if opt == which { "/dev/zero" } else { path });
    }
    let e = fails(which, &args, Duration::from_secs(1));
    assert_eq!(
        e,
        format!(
            "mqblk: error: the {what} /dev/zero is larger than {} bytes, the most mqblk reads of a {what} (is it the right file?)",
            1 << 20
        )
    );
    assert_eq!(mqblk::input::PEM_FILE_BYTES_MAX, 1 << 20);
}

#[test]
fn serve_with_a_tls_certificate_of_dev_zero_fails_within_a_second_naming_it_and_the_cap() {
    serve_with_tls_file_of_dev_zero("--tls-cert", "TLS certificate");
}

#[test]
fn serve_with_a_tls_key_of_dev_zero_fails_within_a_second_naming_it_and_the_cap() {
    serve_with_tls_file_of_dev_zero("--tls-key", "TLS key");
}

#[test]
fn serve_with_a_tls_ca_of_dev_zero_fails_within_a_second_naming_it_and_the_cap() {
    serve_with_tls_file_of_dev_zero("--tls-verify-peer", "TLS CA certificate");
}
