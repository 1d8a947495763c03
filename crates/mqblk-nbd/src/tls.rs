//! TLS through rustls (TLS 1.2 and 1.3, the ring provider): the server's
//! certificate chain and key from PEM files, and optionally the CA whose
//! signature every client certificate must carry (nbdkit's
//! `--tls-verify-peer`); the client's CA and optional certificate from a
//! directory laid out as libnbd's `tls-certificates`. Every PEM file is
//! read through the capped reader ([`mqblk_core::input`]): at most
//! [`PEM_FILE_BYTES_MAX`], so that `--tls-cert /dev/zero` fails at once.

use std::path::Path;
use std::sync::Arc;

use mqblk_core::input::read_capped;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The most mqblk reads of a PEM file (a certificate chain, a key, a CA
/// bundle): a chain of a few certificates is a few KiB, and the system's
/// whole CA bundle is about 200 KiB.
pub const PEM_FILE_BYTES_MAX: u64 = 1 << 20;

/// The bytes of a PEM file, `what` it is naming it if it is too large.
fn read_pem(path: &Path, what: &'static str) -> Result<Vec<u8>, String> {
    read_capped(path, what, PEM_FILE_BYTES_MAX).map_err(|e| e.to_string())
}

/// The certificates of the PEM file `path` (maybe none).
fn read_certs(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read_pem(path, what)?;
    CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The private key of the PEM file `path`.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read_pem(path, "TLS key")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| format!("{}: {e}", path.display()))
}

/// Build the server's TLS configuration from a PEM certificate chain and a
/// PEM private key (PKCS#8, PKCS#1 or SEC1). With `client_ca` (a PEM file
/// of one or more CA certificates), a client must present a certificate
/// that one of them signed, or its TLS handshake fails; without it,
/// clients are not asked for a certificate.
pub fn server_config(
    cert_pem: &Path,
    key_pem: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = read_certs(cert_pem, "TLS certificate")?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no certificate in the file",
            cert_pem.display()
        ));
    }
    let key = read_key(key_pem)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let b = match client_ca {
        None => b.with_no_client_auth(),
        Some(ca) => {
            let roots = read_roots(ca)?;
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| format!("{}: {e}", ca.display()))?;
            b.with_client_cert_verifier(verifier)
        }
    };
    let cfg = b
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key do not make a TLS configuration: {e}"))?;
    Ok(Arc::new(cfg))
}

/// The CA certificates of a PEM file (at least one).
fn read_roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(path, "TLS CA certificate")? {
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no certificate in the file", path.display()));
    }
    Ok(roots)
}

/// The client's TLS configuration, as libnbd's `tls-certificates=DIR`:
/// the CA that signed the server's certificate from `DIR/ca-cert.pem`, and
/// a client certificate from `DIR/client-cert.pem` and
/// `DIR/client-key.pem` when both exist (for servers that verify peers).
/// TLS-PSK (nbdkit's `--tls-psk`) is not possible: rustls does not
/// implement pre-shared-key cipher suites.
pub fn client_config(dir: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let Some(dir) = dir else {
        return Err(
            "nbds:// needs ?tls-certificates=DIR (with the CA certificate in DIR/ca-cert.pem)"
                .into(),
        );
    };
    let roots = read_roots(&dir.join("ca-cert.pem"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let (cert, key) = (dir.join("client-cert.pem"), dir.join("client-key.pem"));
    let cfg = if cert.exists() && key.exists() {
        let certs = read_certs(&cert, "TLS certificate")?;
        let key = read_key(&key)?;
        b.with_client_auth_cert(certs, key)
            .map_err(|e| format!("client certificate and key: {e}"))?
    } else {
        b.with_no_client_auth()
    };
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_ca_of_dev_zero_is_refused_at_the_cap() {
        // The client's DIR/ca-cert.pem (nbds://...?tls-certificates=DIR).
        let dir = std::env::temp_dir().join(format!("mqblk-tls-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca-cert.pem");
        let _ = std::fs::remove_file(&ca);
        std::os::unix::fs::symlink("/dev/zero", &ca).unwrap();
        let e = client_config(Some(&dir)).unwrap_err();
        assert_eq!(
            e,
            format!(
                "the TLS CA certificate {} is larger than 1048576 bytes, the most mqblk reads of a \
                 TLS CA certificate (is it the right file?)",
                ca.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
