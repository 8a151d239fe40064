//! TLS trust and egress proxies of the gateway's upstream client, against a
//! CA and certificates the test makes (rcgen), a loopback HTTPS upstream
//! that requires a client certificate, and a loopback `CONNECT` proxy that
//! counts its tunnels.
//!
//! `SSL_CERT_FILE` and `HTTPS_PROXY` are process-wide: those cases run in a
//! child process (this test binary again, one `#[ignore]`d test, with the
//! variables set), started by the parent test that owns the servers.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// PEM files of a test PKI.
struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn make_pki(dir: &Path) -> Pki {
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "citestream test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(names).unwrap();
        p.extended_key_usages = vec![usage];
        let cert = p.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (sc, sk) = leaf(
        vec!["localhost".into(), "127.0.0.1".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (cc, ck) = leaf(
        vec!["client.test".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let write = |name: &str, pem: &str| {
        let p = dir.join(name);
        std::fs::write(&p, pem).unwrap();
        p
    };
    Pki {
        ca: write("ca.pem", &ca_cert.pem()),
        server_cert: write("server.pem", &sc),
        server_key: write("server.key", &sk),
        client_cert: write("client.pem", &cc),
        client_key: write("client.key", &ck),
    }
}

fn certs(p: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(p)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// An HTTPS upstream that requires a client certificate from the test CA
/// and answers every request with the Lisbon answer.
async fn mtls_upstream(pki: &Pki) -> SocketAddr {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(&pki.ca) {
        roots.add(c).unwrap();
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            certs(&pki.server_cert),
            PrivateKeyDer::from_pem_file(&pki.server_key).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let svc = service_fn(|_req| async {
                    Ok::<_, Infallible>(
                        http::Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(lisbon("upstream.json")))
                            .unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

/// A `CONNECT` proxy; counts the tunnels it opened.
async fn connect_proxy() -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tunnels = Arc::new(AtomicU64::new(0));
    let count = tunnels.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let count = count.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                let mut parts = line.split_whitespace();
                let (Some("CONNECT"), Some(target)) = (parts.next(), parts.next()) else {
                    let _ = s
                        .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    return;
                };
                let Ok(mut up) = TcpStream::connect(target).await else {
                    let _ = s
                        .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    return;
                };
                count.fetch_add(1, Ordering::Relaxed);
                let _ = s
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
            });
        }
    });
    (addr, tunnels)
}

fn tls_config(up: &str, tls: &str) -> (citestream_host::config::Config, PathBuf) {
    config(up, &format!("[tls]\n{tls}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_and_a_client_certificate_reach_an_mtls_upstream() {
    let dir = std::env::temp_dir().join(format!("citestream-tls-{}", std::process::id()));
    let pki = make_pki(&dir);
    let addr = mtls_upstream(&pki).await;
    let url = format!("https://localhost:{}", addr.port());
    let path = "/v1/chat/completions";

    // Only the platform's and the bundled roots: the CA is unknown.
    let (cfg, d) = tls_config(&url, "");
    let gw = start_gateway(&cfg, d).await;
    let (s, _, b) = post(&gw.url(path), &[], &chat_body(false)).await;
    assert_eq!(s, 502, "{}", String::from_utf8_lossy(&b));

    // The CA trusted, but no client certificate: the upstream refuses.
    let (cfg, d) = tls_config(&url, &format!("ca_file = \"{}\"\n", pki.ca.display()));
    let gw = start_gateway(&cfg, d).await;
    let (s, _, _) = post(&gw.url(path), &[], &chat_body(false)).await;
    assert_eq!(s, 502);

    // Both: answered, grounded.
    let (cfg, d) = tls_config(
        &url,
        &format!(
            "ca_file = \"{}\"\nclient_cert = \"{}\"\nclient_key = \"{}\"\n",
            pki.ca.display(),
            pki.client_cert.display(),
            pki.client_key.display()
        ),
    );
    let gw = start_gateway(&cfg, d).await;
    for _ in 0..3 {
        let (s, _, b) = post(&gw.url(path), &[], &chat_body(false)).await;
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
        assert!(String::from_utf8_lossy(&b).contains("\"sources\""));
    }
}

/// Runs the child test with `env`; true when it passed.
fn run_child(env: &[(&str, String)]) -> bool {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "child_through_the_environment",
        "--nocapture",
    ]);
    for k in [
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // The child ran (an unmatched name would pass with 0 tests).
    out.status.success() && stdout.contains("test result: ok. 1 passed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_cert_file_and_https_proxy_are_honoured() {
    let dir = std::env::temp_dir().join(format!("citestream-tls-env-{}", std::process::id()));
    let pki = make_pki(&dir);
    let addr = mtls_upstream(&pki).await;
    let (proxy, tunnels) = connect_proxy().await;
    let base = vec![
        (
            "CITESTREAM_TEST_UPSTREAM",
            format!("https://localhost:{}", addr.port()),
        ),
        (
            "CITESTREAM_TEST_CLIENT_CERT",
            pki.client_cert.display().to_string(),
        ),
        (
            "CITESTREAM_TEST_CLIENT_KEY",
            pki.client_key.display().to_string(),
        ),
        ("SSL_CERT_FILE", pki.ca.display().to_string()),
    ];
    // SSL_CERT_FILE, direct.
    let (ok, n) = {
        let base = base.clone();
        let ok = tokio::task::spawn_blocking(move || run_child(&base))
            .await
            .unwrap();
        (ok, tunnels.load(Ordering::Relaxed))
    };
    assert!(ok, "SSL_CERT_FILE trusted");
    assert_eq!(n, 0);
    // Through the proxy: every connection is a tunnel.
    let mut with_proxy = base.clone();
    with_proxy.push(("HTTPS_PROXY", format!("http://{proxy}")));
    let env = with_proxy.clone();
    assert!(
        tokio::task::spawn_blocking(move || run_child(&env))
            .await
            .unwrap()
    );
    assert!(
        tunnels.load(Ordering::Relaxed) >= 1,
        "the upstream was reached through the proxy"
    );
    // NO_PROXY exempts the host.
    let before = tunnels.load(Ordering::Relaxed);
    let mut exempt = with_proxy;
    exempt.push(("NO_PROXY", "localhost".into()));
    assert!(
        tokio::task::spawn_blocking(move || run_child(&exempt))
            .await
            .unwrap()
    );
    assert_eq!(tunnels.load(Ordering::Relaxed), before);
    // Without SSL_CERT_FILE the CA is unknown again (the child then sees 502).
    let mut untrusted = base;
    untrusted.retain(|(k, _)| *k != "SSL_CERT_FILE");
    untrusted.push(("CITESTREAM_TEST_EXPECT", "502".into()));
    assert!(
        tokio::task::spawn_blocking(move || run_child(&untrusted))
            .await
            .unwrap()
    );
}

/// The child of [`ssl_cert_file_and_https_proxy_are_honoured`]: a gateway
/// with a client certificate and no `ca_file`, in front of the parent's
/// upstream, under the environment the parent set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by ssl_cert_file_and_https_proxy_are_honoured with its environment"]
async fn child_through_the_environment() {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} set by the parent test"));
    let expect: u16 = std::env::var("CITESTREAM_TEST_EXPECT")
        .map(|v| v.parse().unwrap())
        .unwrap_or(200);
    let (cfg, d) = tls_config(
        &var("CITESTREAM_TEST_UPSTREAM"),
        &format!(
            "client_cert = \"{}\"\nclient_key = \"{}\"\n",
            var("CITESTREAM_TEST_CLIENT_CERT"),
            var("CITESTREAM_TEST_CLIENT_KEY")
        ),
    );
    let gw = start_gateway(&cfg, d).await;
    for _ in 0..2 {
        let (s, _, b) = post(&gw.url("/v1/chat/completions"), &[], &chat_body(false)).await;
        assert_eq!(s, expect, "{}", String::from_utf8_lossy(&b));
        if s == 200 {
            assert!(String::from_utf8_lossy(&b).contains("\"sources\""));
        }
    }
}
