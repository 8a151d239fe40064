//! Egress proxies for the upstream connections: `HTTPS_PROXY`,
//! `HTTP_PROXY`, `NO_PROXY` (and their lower-case forms; the upper-case
//! one wins), read once at start.
//!
//! Contract:
//! * An `https` upstream whose host `NO_PROXY` does not exempt goes through
//!   `HTTPS_PROXY` in a `CONNECT host:port` tunnel (TLS then runs end to
//!   end inside it); an `http` one goes to `HTTP_PROXY`, which gets the
//!   request in absolute form. Without a matching variable the connection
//!   is direct.
//! * A proxy is `http://[user:password@]host[:port]` (port default 80;
//!   a bare `host:port` is taken as `http://`); credentials go as
//!   `Proxy-Authorization: Basic`. A proxy URL of another scheme is a
//!   start-up error.
//! * `NO_PROXY`: comma-separated; `*` exempts every host; an entry exempts
//!   that host and its subdomains (a leading `.` is ignored); a `:port`
//!   suffix on an entry is ignored.
//! * A tunnel the proxy refuses (a status other than 2xx, or an answer
//!   head over 8 KiB) is a connect error naming the proxy's status.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::Engine as _;
use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower_service::Service;

use super::conn::Io;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Proxy {
    /// `http://host:port` to connect to.
    uri: Uri,
    /// `host:port`, for messages.
    authority: String,
    /// `Basic …`, when the URL had credentials.
    auth: Option<String>,
}

/// The proxy settings of the environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProxyEnv {
    http: Option<Proxy>,
    https: Option<Proxy>,
    no_proxy: Vec<String>,
}

impl ProxyEnv {
    /// The settings of the process environment.
    pub(crate) fn from_env() -> Result<ProxyEnv, String> {
        ProxyEnv::from_lookup(&|k| std::env::var(k).ok())
    }

    /// The settings from `env`.
    fn from_lookup(env: &dyn Fn(&str) -> Option<String>) -> Result<ProxyEnv, String> {
        let var = |name: &str| {
            env(name)
                .or_else(|| env(&name.to_ascii_lowercase()))
                .filter(|v| !v.trim().is_empty())
        };
        let proxy = |name: &str| {
            var(name)
                .map(|v| parse_proxy(&v).map_err(|m| format!("{name}: {m}")))
                .transpose()
        };
        Ok(ProxyEnv {
            http: proxy("HTTP_PROXY")?,
            https: proxy("HTTPS_PROXY")?,
            no_proxy: var("NO_PROXY")
                .unwrap_or_default()
                .split(',')
                .map(|e| {
                    let e = e.trim().trim_start_matches('.');
                    let e = match e.rsplit_once(':') {
                        Some((h, p))
                            if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) =>
                        {
                            h
                        }
                        _ => e,
                    };
                    e.trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_ascii_lowercase()
                })
                .filter(|e| !e.is_empty())
                .collect(),
        })
    }

    /// Whether any proxy is set.
    pub(crate) fn is_empty(&self) -> bool {
        self.http.is_none() && self.https.is_none()
    }

    /// Whether a connection to `uri` goes through a proxy.
    pub(crate) fn proxies(&self, uri: &Uri) -> bool {
        self.for_uri(uri).is_some()
    }

    /// The proxy for a connection to `uri`, if any.
    fn for_uri(&self, uri: &Uri) -> Option<&Proxy> {
        let p = if uri.scheme_str() == Some("https") {
            self.https.as_ref()
        } else {
            self.http.as_ref()
        }?;
        let host = uri
            .host()?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let exempt = self.no_proxy.iter().any(|e| {
            e == "*"
                || host == *e
                || host
                    .strip_suffix(e.as_str())
                    .is_some_and(|rest| rest.ends_with('.'))
        });
        (!exempt).then_some(p)
    }
}

fn parse_proxy(v: &str) -> Result<Proxy, String> {
    let v = v.trim();
    let full = if v.contains("://") {
        v.to_owned()
    } else {
        format!("http://{v}")
    };
    let uri: Uri = full
        .parse()
        .map_err(|e| format!("invalid proxy URL {v:?}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "proxy URL {v:?}: only http:// proxies are supported"
        ));
    }
    let auth = uri
        .authority()
        .ok_or_else(|| format!("proxy URL {v:?}: no host"))?;
    let (cred, hostport) = match auth.as_str().rsplit_once('@') {
        Some((c, h)) => (Some(c), h),
        None => (None, auth.as_str()),
    };
    let authority = if auth.port().is_some() {
        hostport.to_owned()
    } else {
        format!("{hostport}:80")
    };
    let uri = format!("http://{authority}")
        .parse()
        .map_err(|e| format!("invalid proxy URL {v:?}: {e}"))?;
    let auth = cred.map(|c| {
        let c = percent_decode(c);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(c)
        )
    });
    Ok(Proxy {
        uri,
        authority,
        auth,
    })
}

/// `%XX` escapes of a URL's user info undone.
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// A TCP connector that goes through the environment's proxy.
#[derive(Clone, Debug)]
pub(crate) struct Tunnel {
    tcp: HttpConnector,
    env: Arc<ProxyEnv>,
}

impl Tunnel {
    pub(crate) fn new(tcp: HttpConnector, env: ProxyEnv) -> Tunnel {
        Tunnel {
            tcp,
            env: Arc::new(env),
        }
    }
}

impl Service<Uri> for Tunnel {
    type Response = Io<TokioIo<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let mut tcp = self.tcp.clone();
        let proxy = self.env.for_uri(&uri).cloned();
        Box::pin(async move {
            let Some(p) = proxy else {
                return Ok(Io::plain(tcp.call(uri).await?, false));
            };
            let io = tcp
                .call(p.uri.clone())
                .await
                .map_err(|e| format!("proxy {}: {e}", p.authority))?;
            if uri.scheme_str() != Some("https") {
                // Plain HTTP: the proxy gets absolute-form requests.
                return Ok(Io::plain(io, true));
            }
            let stream = connect_tunnel(io.into_inner(), &uri, &p).await?;
            Ok(Io::plain(TokioIo::new(stream), false))
        })
    }
}

/// Asks the proxy for a tunnel to `uri`'s host and port.
async fn connect_tunnel(mut s: TcpStream, uri: &Uri, p: &Proxy) -> Result<TcpStream, BoxError> {
    let host = uri.host().ok_or("no host")?;
    let port = uri.port_u16().unwrap_or(443);
    let target = format!("{host}:{port}");
    let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(a) = &p.auth {
        req.push_str(&format!("Proxy-Authorization: {a}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut head = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    // Byte by byte: nothing after the head may be consumed (it is the
    // server's TLS).
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 {
            return Err(format!("proxy {}: answer head too large", p.authority).into());
        }
        if s.read(&mut byte).await? == 0 {
            return Err(format!("proxy {}: closed during CONNECT", p.authority).into());
        }
        head.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&head);
    let status = line.split_whitespace().nth(1).unwrap_or("");
    if !status.starts_with('2') || status.len() != 3 {
        return Err(format!(
            "proxy {} refused the tunnel to {target}: {}",
            p.authority,
            line.lines().next().unwrap_or("")
        )
        .into());
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> ProxyEnv {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        ProxyEnv::from_lookup(&|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
            .unwrap()
    }

    #[test]
    fn proxies_by_scheme_and_no_proxy() {
        let e = env(&[
            ("HTTPS_PROXY", "http://u%40x:p@127.0.0.1:3128"),
            ("http_proxy", "proxy.local:8080"),
            ("NO_PROXY", "internal.example, .corp.example:443,[::1]"),
        ]);
        let https = |u: &str| e.for_uri(&u.parse().unwrap()).map(|p| p.authority.clone());
        assert_eq!(
            https("https://api.openai.com/v1").as_deref(),
            Some("127.0.0.1:3128")
        );
        assert_eq!(
            https("http://api.openai.com").as_deref(),
            Some("proxy.local:8080")
        );
        assert_eq!(https("https://internal.example"), None);
        assert_eq!(https("https://a.internal.example"), None);
        assert_eq!(
            https("https://notinternal.example").as_deref(),
            Some("127.0.0.1:3128")
        );
        assert_eq!(https("https://x.corp.example"), None);
        assert_eq!(https("https://[::1]:8443"), None);
        let p = e.https.as_ref().unwrap();
        // "u@x:p" in base64.
        assert_eq!(p.auth.as_deref(), Some("Basic dUB4OnA="));
        assert!(
            env(&[("NO_PROXY", "*"), ("HTTPS_PROXY", "h:1")])
                .for_uri(&"https://a".parse().unwrap())
                .is_none()
        );
        assert!(env(&[]).is_empty());
        assert!(
            ProxyEnv::from_lookup(&|k| (k == "HTTPS_PROXY").then(|| "socks5://h:1".into()))
                .unwrap_err()
                .contains("only http://")
        );
    }
}
