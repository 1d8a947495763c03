//! TLS: nbdinfo connects with `nbds://` using a certificate chain the test
//! makes (rcgen: a CA and a server certificate for localhost), and under
//! `TlsMode::Require` plaintext clients are refused. With a client CA
//! (`serve --tls-verify-peer`), only clients whose certificate that CA
//! signed are served.

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

/// A certificate authority made for a test.
struct Ca {
    key: KeyPair,
    cert: rcgen::Certificate,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, name);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = ca.self_signed(&key).unwrap();
        Ca { key, cert }
    }
}

/// The parameters of a client certificate.
fn client_params(name: &str) -> CertificateParams {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    // qemu checks that a client certificate permits key encipherment.
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p
}

/// Write a client certificate and its key into `dir` as libnbd and qemu
/// look for them (client-cert.pem, client-key.pem): signed by `ca`, or
/// self-signed.
fn client_cert(dir: &std::path::Path, ca: Option<&Ca>) {
    let key = KeyPair::generate().unwrap();
    let p = client_params("mqblk test client");
    let cert = match ca {
        Some(ca) => p.signed_by(&key, &ca.cert, &ca.key).unwrap(),
        None => p.self_signed(&key).unwrap(),
    };
    std::fs::write(dir.join("client-cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("client-key.pem"), key.serialize_pem()).unwrap();
}

/// Write ca-cert.pem (for libnbd) and server cert/key files into `dir`.
fn make_certs(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key, _) = make_certs_and_ca(dir);
    (cert, key)
}

/// The same, and the CA that signed them.
fn make_certs_and_ca(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, Ca) {
    let ca = Ca::new("mqblk test CA");
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
    let cert = p.signed_by(&key, &ca.cert, &ca.key).unwrap();

    std::fs::write(dir.join("ca-cert.pem"), ca.cert.pem()).unwrap();
    let cert_path = dir.join("server-cert.pem");
    let key_path = dir.join("server-key.pem");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path, ca)
}

fn tls_server(mode: TlsMode, dir: &TempDir) -> TestServer {
    let (cert, key) = make_certs(dir.path());
    let cfg = mqblk_nbd::tls::server_config(&cert, &key, None).expect("TLS config");
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

/// `--tls-verify-peer`: the server asks every client for a certificate and
/// serves only those its CA signed. nbdinfo (GnuTLS), qemu-img (GnuTLS,
/// through a `tls-creds-x509` object) and mqblk's own client (rustls) each
/// present: a certificate the CA signed (served, data round-trips), a
/// self-signed one, one another CA signed, and none (each refused).
#[test]
fn verify_peer_serves_only_client_certificates_the_ca_signed() {
    require("nbdinfo");
    require("qemu-img");
    let dir = TempDir::new("tls-verify");
    let (cert, key, ca) = make_certs_and_ca(dir.path());
    let ca_file = dir.path().join("ca-cert.pem");
    let cfg = mqblk_nbd::tls::server_config(&cert, &key, Some(&ca_file)).expect("TLS config");
    let srv = TestServer::start_with(
        vec![export("secure", "ram,size=32M")],
        ConnLimits::default(),
        TlsMode::Require,
        Some(cfg),
        true,
    );
    let port = srv.tcp.unwrap().port();
    // Each client's certificate directory: its own certificate (if any),
    // and in ca-cert.pem the CA that signed the server's certificate and
    // the CA that signed the client's own: qemu refuses to present a
    // certificate its own CA file does not vouch for. It refuses a
    // self-signed one outright (it is not a CA), so only nbdinfo and
    // mqblk present that. (GnuTLS, under nbdinfo and qemu, sends no
    // certificate whose issuer is not among the CAs the server names;
    // mqblk's client sends its certificate whatever the server names.)
    let client_dir = |tag: &str, signer: Option<Option<&Ca>>| {
        let d = TempDir::new(tag);
        let mut cas = std::fs::read_to_string(&ca_file).unwrap();
        if let Some(signer) = signer {
            client_cert(d.path(), signer);
            if let Some(ca) = signer {
                cas.push_str(&ca.cert.pem());
            }
        }
        std::fs::write(d.path().join("ca-cert.pem"), cas).unwrap();
        d
    };
    let other = Ca::new("another CA");
    let signed = client_dir("tls-signed", Some(Some(&ca)));
    // (what, directory, whether qemu can present it)
    let cases = [
        ("self-signed", client_dir("tls-self", Some(None)), false),
        (
            "signed by another CA",
            client_dir("tls-other-ca", Some(Some(&other))),
            true,
        ),
        ("no certificate", client_dir("tls-none", None), true),
    ];
    let uri = |d: &TempDir| {
        format!(
            "nbds://localhost:{port}/secure?tls-certificates={}",
            d.path().display()
        )
    };
    let qemu_img = |d: &TempDir| {
        run_timeout(
            Command::new("qemu-img")
                .arg("info")
                .arg("--object")
                .arg(format!(
                    "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                    d.path().display()
                ))
                .arg("--image-opts")
                .arg(format!(
                    "driver=nbd,host=localhost,port={port},export=secure,tls-creds=tls0"
                )),
            T,
        )
    };

    // Signed by the CA: served, by each client.
    let out = run_ok(Command::new("nbdinfo").arg("--json").arg(uri(&signed)), T);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["TLS"], true, "{out}");
    assert_eq!(j["exports"][0]["export-size"], 32u64 << 20);
    let q = qemu_img(&signed);
    assert!(
        q.status.success(),
        "qemu-img with a signed certificate: {}",
        String::from_utf8_lossy(&q.stderr)
    );
    assert!(
        String::from_utf8_lossy(&q.stdout).contains("33554432"),
        "{}",
        String::from_utf8_lossy(&q.stdout)
    );
    let dev = mqblk::open(&uri(&signed)).expect("a signed certificate is served");
    let mut ctx = dev.context().unwrap();
    let data = pattern(21, 1 << 20);
    ctx.write_at(&data, 1 << 20).unwrap();
    let mut back = vec![0u8; data.len()];
    ctx.read_at(&mut back, 1 << 20).unwrap();
    assert!(back == data, "data round trip with a verified client");
    drop(ctx);
    drop(dev);

    // Anything else: refused, by each client.
    let dropped = |srv: &TestServer| {
        srv.server
            .stats()
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    for (what, d, qemu) in &cases {
        let before = dropped(&srv);
        let o = run_timeout(Command::new("nbdinfo").arg(uri(d)), T);
        assert!(
            !o.status.success(),
            "nbdinfo with {what} was served: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        println!(
            "nbdinfo with {what}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
        if *qemu {
            let q = qemu_img(d);
            assert!(
                !q.status.success(),
                "qemu-img with {what} was served: {}",
                String::from_utf8_lossy(&q.stdout)
            );
            println!(
                "qemu-img with {what}: {}",
                String::from_utf8_lossy(&q.stderr).trim()
            );
        }
        let err = mqblk::open(&uri(d)).expect_err(what);
        println!("mqblk with {what}: {err}");
        assert!(
            err.to_string()
                .contains("the server refused this client's TLS certificate"),
            "{what}: {err}"
        );
        // Each client reached the server, and was dropped there. A client
        // sees the refusal before the server's thread counts the drop, so
        // the count is waited for (a second at most) before it is compared.
        let clients = 2 + u64::from(*qemu);
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        let counted_from = std::time::Instant::now();
        while dropped(&srv) - before < clients && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        mqblk_test_support::time_bound(
            &format!("{what} drops counted"),
            counted_from.elapsed(),
            Duration::from_secs(1),
        );
        assert_eq!(
            dropped(&srv) - before,
            clients,
            "{what}: the server dropped {} connections, not {clients}",
            dropped(&srv) - before
        );
    }
    // Plaintext is refused too (--tls-verify-peer implies require).
    let plain = run_timeout(
        Command::new("nbdinfo").arg(format!("nbd://localhost:{port}/secure")),
        T,
    );
    assert!(!plain.status.success(), "plaintext was served");
}
