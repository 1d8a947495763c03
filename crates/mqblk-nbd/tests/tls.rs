//! TLS: nbdinfo connects with `nbds://` using a certificate chain the test
//! makes (rcgen: a CA and a server certificate for localhost), and under
//! `TlsMode::Require` plaintext clients are refused.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use mqblk_nbd::{ConnLimits, TlsMode};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

const T: Duration = Duration::from_secs(60);

/// Write ca-cert.pem (for libnbd) and server cert/key files into `dir`.
fn make_certs(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "mqblk test CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();

    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress(std::net::IpAddr::V4(
            std::net::Ipv4Addr::LOCALHOST,
        )));
    p.distinguished_name.push(DnType::CommonName, "localhost");
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let cert = p.signed_by(&key, &ca_cert, &ca_key).unwrap();

    std::fs::write(dir.join("ca-cert.pem"), ca_cert.pem()).unwrap();
    let cert_path = dir.join("server-cert.pem");
    let key_path = dir.join("server-key.pem");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path)
}

fn tls_server(mode: TlsMode, dir: &TempDir) -> TestServer {
    let (cert, key) = make_certs(dir.path());
    let cfg = mqblk_nbd::tls::server_config(&cert, &key).expect("TLS config");
    TestServer::start_with(
        vec![export("secure", "ram,size=32M")],
        ConnLimits::default(),
        mode,
        Some(cfg),
        true,
    )
}

#[test]
fn nbdinfo_over_tls_and_plaintext_refused_when_required() {
    require("nbdinfo");
    let dir = TempDir::new("tls");
    let srv = tls_server(TlsMode::Require, &dir);
    let port = srv.tcp.unwrap().port();
    let uri = format!(
        "nbds://localhost:{port}/secure?tls-certificates={}",
        dir.path().display()
    );
    let out = run_ok(Command::new("nbdinfo").arg("--json").arg(&uri), T);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["TLS"], true, "{out}");
    assert_eq!(j["exports"][0]["export-size"], 32u64 << 20);
    run_ok(Command::new("nbdinfo").args(["--is", "tls"]).arg(&uri), T);

    // Data over TLS: qemu-io is not needed, nbdcopy is.
    require("nbdcopy");
    let src = dir.path().join("src.img");
    let back = dir.path().join("back.img");
    let data = pattern(3, 32 << 20);
    std::fs::write(&src, &data).unwrap();
    let uri_default = uri.clone();
    run_ok(
        Command::new("nbdcopy")
            .arg("--connections=2")
            .arg(&src)
            .arg(&uri_default),
        T,
    );
    run_ok(
        Command::new("nbdcopy")
            .arg("--connections=2")
            .arg(&uri_default)
            .arg(&back),
        T,
    );
    assert!(std::fs::read(&back).unwrap()[..data.len()] == data[..]);

    // Plaintext is refused.
    let plain = run_timeout(
        Command::new("nbdinfo").arg(format!("nbd://localhost:{port}/secure")),
        T,
    );
    assert!(
        !plain.status.success(),
        "plaintext must be refused under --tls=require"
    );
}

#[test]
fn tls_on_allows_both_and_require_answers_tls_reqd() {
    use mqblk_nbd_proto::consts::{opt, rep};
    use mqblk_nbd_proto::handshake::{encode_option, OptionReplyHeader};
    use std::io::{Read, Write};

    let dir = TempDir::new("tls-raw");
    let srv = tls_server(TlsMode::Require, &dir);
    let mut s = std::net::TcpStream::connect(srv.tcp.unwrap()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&3u32.to_be_bytes()).unwrap();
    for o in [opt::LIST, opt::STRUCTURED_REPLY, opt::GO, 42] {
        let mut v = Vec::new();
        encode_option(o, &[], &mut v);
        s.write_all(&v).unwrap();
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        let h = OptionReplyHeader::decode(&h).unwrap();
        let mut d = vec![0u8; h.len as usize];
        s.read_exact(&mut d).unwrap();
        assert_eq!(h.reply_type, rep::ERR_TLS_REQD, "option {o}");
    }
    let mut v = Vec::new();
    encode_option(opt::EXPORT_NAME, b"secure", &mut v);
    s.write_all(&v).unwrap();
    let mut b = [0u8; 1];
    assert!(
        matches!(s.read(&mut b), Ok(0) | Err(_)),
        "EXPORT_NAME without TLS must hang up"
    );

    // TlsMode::On: plaintext works.
    require("nbdinfo");
    let dir2 = TempDir::new("tls-on");
    let srv2 = tls_server(TlsMode::On, &dir2);
    let port = srv2.tcp.unwrap().port();
    run_ok(
        Command::new("nbdinfo").arg(format!("nbd://localhost:{port}/secure")),
        T,
    );
    run_ok(
        Command::new("nbdinfo").arg(format!(
            "nbds://localhost:{port}/secure?tls-certificates={}",
            dir2.path().display()
        )),
        T,
    );
}

/// The client driver over TLS (`nbds://`, certificates from
/// `tls-certificates=DIR`), against mqblk's server (TLS required) and
/// nbdkit (`--tls=require`): data round-trips on 2 connections, and block
/// status works through the TLS control connection. A wrong CA is refused.
#[test]
fn the_client_driver_speaks_tls() {
    let dir = TempDir::new("tls-client");
    let srv = tls_server(TlsMode::Require, &dir);
    let port = srv.tcp.unwrap().port();
    let mut uris = vec![format!(
        "nbds://localhost:{port}/secure?tls-certificates={}",
        dir.path().display()
    )];
    require("nbdkit");
    let kit_sock = dir.path().join("kit.sock");
    let mut kit = std::process::Command::new("nbdkit")
        .args(["-f", "--tls=require"])
        .arg(format!("--tls-certificates={}", dir.path().display()))
        .arg("-U")
        .arg(&kit_sock)
        .args(["memory", "32M"])
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("start nbdkit");
    let t = std::time::Instant::now();
    while std::os::unix::net::UnixStream::connect(&kit_sock).is_err() {
        assert!(t.elapsed() < T, "nbdkit did not listen on its socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    uris.push(format!(
        "nbds+unix:///?socket={}&tls-certificates={}",
        kit_sock.display(),
        dir.path().display()
    ));
    for uri in &uris {
        let dev = mqblk::open(&format!("{uri},conns=2")).unwrap_or_else(|e| panic!("{uri}: {e}"));
        let mut ctx = dev.context().unwrap();
        let data = pattern(11, 1 << 20);
        ctx.write_at(&data, 4 << 20).unwrap();
        ctx.flush().unwrap();
        let mut back = vec![0u8; data.len()];
        ctx.read_at(&mut back, 4 << 20).unwrap();
        assert!(back == data, "{uri}: data round trip");
        let ext = dev.extents(0, 8 << 20).unwrap();
        assert!(
            ext.iter().any(|e| !e.hole && e.offset_bytes <= 4 << 20),
            "{uri}: {ext:?}"
        );
    }
    // A client that does not trust the server's CA is refused.
    let other = TempDir::new("tls-other");
    make_certs(other.path());
    let bad = format!(
        "nbds://localhost:{port}/secure?tls-certificates={}",
        other.path().display()
    );
    let err = mqblk::open(&bad).expect_err("a wrong CA must fail");
    assert!(err.to_string().contains("TLS"), "{err}");
    let _ = kit.kill();
    let _ = kit.wait();
}
