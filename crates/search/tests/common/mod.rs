//! A loopback HTTP/1.1 server for the provider tests: answers every
//! connection with one canned response (recorded provider bodies from
//! `tests/fixtures/`) and records the requests it got. 127.0.0.1 only.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server answers.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Body,
    /// Wait this long before answering.
    pub delay: Duration,
}

#[derive(Clone, Debug)]
pub enum Body {
    /// These bytes, with a `content-length`.
    Bytes(Vec<u8>),
    /// `n` bytes of JSON-ish filler, streamed in 64 KiB writes; with
    /// `content-length` when `declare_length`, else until the connection
    /// closes.
    Huge { n: usize, declare_length: bool },
}

impl Reply {
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: Body::Bytes(body.into()),
            delay: Duration::ZERO,
        }
    }

    pub fn fixture(status: u16, path: &str) -> Reply {
        let mut r = Reply::json(status, fixture(path));
        if path.ends_with(".html") {
            r.content_type = "text/html; charset=utf-8";
        }
        r
    }
}

/// The bytes of `tests/fixtures/<path>`.
pub fn fixture(path: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    std::fs::read(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

/// One request as received.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }

    /// The decoded query parameters of the target.
    pub fn query(&self) -> Vec<(String, String)> {
        let q = self.target.split_once('?').map_or("", |(_, q)| q);
        q.split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode(k), decode(v))
            })
            .collect()
    }

    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).expect("hex"));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).expect("utf-8")
}

/// A running server.
pub struct Server {
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    /// Starts a server on 127.0.0.1 (an ephemeral port) answering `reply`.
    pub async fn start(reply: Reply) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let reply = reply.clone();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, reply, recorded).await;
                });
            }
        });
        Server { url, requests }
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("lock").clone()
    }

    /// The only request received.
    pub fn request(&self) -> Request {
        let r = self.requests();
        assert_eq!(r.len(), 1, "expected one request, got {r:#?}");
        r.into_iter().next().expect("one")
    }
}

async fn serve(
    mut stream: TcpStream,
    reply: Reply,
    recorded: Arc<Mutex<Vec<Request>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let mut req = Request {
        method: first.next().unwrap_or("").to_owned(),
        target: first.next().unwrap_or("").to_owned(),
        ..Request::default()
    };
    for line in lines.filter(|l| !l.is_empty()) {
        if let Some((n, v)) = line.split_once(':') {
            req.headers
                .push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let len: usize = req
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    req.body = body;
    recorded.lock().expect("lock").push(req);
    tokio::time::sleep(reply.delay).await;
    let status = format!(
        "HTTP/1.1 {} X\r\ncontent-type: {}\r\nconnection: close\r\n",
        reply.status, reply.content_type
    );
    match reply.body {
        Body::Bytes(b) => {
            stream
                .write_all(format!("{status}content-length: {}\r\n\r\n", b.len()).as_bytes())
                .await?;
            stream.write_all(&b).await?;
        }
        Body::Huge { n, declare_length } => {
            let length = if declare_length {
                format!("content-length: {n}\r\n")
            } else {
                String::new()
            };
            stream
                .write_all(format!("{status}{length}\r\n").as_bytes())
                .await?;
            stream.write_all(b"{\"results\":[{\"url\":\"").await?;
            let filler = vec![b'a'; 64 * 1024];
            let mut sent = 0;
            while sent < n {
                stream.write_all(&filler).await?;
                sent += filler.len();
            }
        }
    }
    stream.shutdown().await
}
