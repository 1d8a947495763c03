//! TLS for the server: an X.509 certificate chain and key from PEM files,
//! through rustls (TLS 1.2 and 1.3, the ring provider). Clients are not
//! asked for certificates.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Build the server's TLS configuration from a PEM certificate chain and a
/// PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn server_config(cert_pem: &Path, key_pem: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_pem)
        .map_err(|e| format!("{}: {e}", cert_pem.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert_pem.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no certificate in the file",
            cert_pem.display()
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(key_pem).map_err(|e| format!("{}: {e}", key_pem.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key do not make a TLS configuration: {e}"))?;
    Ok(Arc::new(cfg))
}
