//! The TLS trust of every outgoing HTTPS connection a host makes (the
//! model upstreams, the search providers, the query model): one
//! [`rustls::ClientConfig`] built from `[tls]` at start.
//!
//! Contract:
//! * Trusted roots: the platform's ([`rustls_native_certs`], which reads
//!   `SSL_CERT_FILE` and `SSL_CERT_DIR` instead when either is set), plus
//!   the bundled Mozilla roots ([`webpki_roots`], so a machine without a
//!   CA store still reaches public services), plus every certificate of the
//!   PEM file `tls.ca_file`.
//! * `tls.client_cert` (a PEM chain) and `tls.client_key` (its PEM private
//!   key): sent to servers that ask for a client certificate (mTLS).
//! * A `ca_file`, `client_cert` or `client_key` that cannot be read or
//!   holds nothing usable is a start-up [`ConfigError`] naming the key;
//!   unreadable platform stores are only logged (the other roots remain).
//! * The crypto provider is ring; no ALPN is set (each client sets its
//!   own).
//! * Proxies are not TLS: `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` are read
//!   by each client (reqwest natively; the gateway's upstream connector
//!   tunnels with `CONNECT`).
//!
//! # Example
//! ```
//! use citestream_host::config::TlsConfig;
//!
//! let cfg = citestream_host::tls::client_config(&TlsConfig::default()).unwrap();
//! assert!(cfg.alpn_protocols.is_empty());
//! ```

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::{ConfigError, TlsConfig};

/// The client TLS config of `[tls]`.
///
/// # Errors
/// A [`ConfigError`] naming `tls.ca_file`, `tls.client_cert` or
/// `tls.client_key` when one cannot be read or parsed.
pub fn client_config(cfg: &TlsConfig) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::warn!(error = %e, "could not read some platform CA certificates");
    }
    let (_, ignored) = roots.add_parsable_certificates(native.certs);
    if ignored > 0 {
        tracing::debug!(
            ignored,
            "platform CA certificates that do not parse were skipped"
        );
    }
    if !cfg.ca_file.is_empty() {
        let certs = read_certs(&cfg.ca_file, "tls.ca_file")?;
        for c in certs {
            roots
                .add(c)
                .map_err(|e| ConfigError::new("tls.ca_file", format!("{}: {e}", cfg.ca_file)))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::new("tls", e.to_string()))?
        .with_root_certificates(roots);
    let config = if cfg.client_cert.is_empty() {
        builder.with_no_client_auth()
    } else {
        let chain = read_certs(&cfg.client_cert, "tls.client_cert")?;
        let key = PrivateKeyDer::from_pem_file(&cfg.client_key).map_err(|e| {
            ConfigError::new(
                "tls.client_key",
                format!("{}: no PEM private key ({e})", cfg.client_key),
            )
        })?;
        builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| ConfigError::new("tls.client_key", e.to_string()))?
    };
    Ok(Arc::new(config))
}

/// The certificates of a PEM file; at least one.
fn read_certs(path: &str, key: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| ConfigError::new(key, format!("{path}: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::new(key, format!("{path}: {e}")))?;
    if certs.is_empty() {
        return Err(ConfigError::new(
            key,
            format!("{path}: no PEM certificate in the file"),
        ));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_files_name_their_key() {
        let mut cfg = TlsConfig {
            ca_file: "/nonexistent/ca.pem".into(),
            ..TlsConfig::default()
        };
        let e = client_config(&cfg).unwrap_err();
        assert_eq!(e.key(), "tls.ca_file");
        let dir = std::env::temp_dir().join(format!("citestream-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        cfg.ca_file = empty.display().to_string();
        let e = client_config(&cfg).unwrap_err();
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
    }
}
