//! An upstream that breaks off mid-stream: every byte it delivered before
//! the break reaches the client (passed, or rewritten as the rewriter does
//! on an early end), nothing is added, and the client's response ends
//! abnormally (no last chunk), never as a clean end of stream.
//!
//! The upstream is a raw loopback socket writing a long SSE stream as
//! chunked HTTP/1.1 in random piece sizes (several chunks per write), then
//! cutting in the middle of an event: a FIN, or an RST once the gateway
//! has read everything. The client is a raw socket too, slow at first (so
//! the gateway's writes back up) and then reading small pieces.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use citestream::{ChatStream, RewriteOptions, Sources};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the upstream ends its response.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Half an event, then a FIN (the chunked body without its end).
    Close,
    /// Half an event, then an RST once the gateway has read it all.
    Reset,
}

/// A small deterministic generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A long chat stream without its finish: the recorded Lisbon stream's
/// content events, repeated to about `size` bytes.
fn long_chat_stream(size: usize) -> Bytes {
    let input = lisbon("upstream.sse");
    let text = std::str::from_utf8(&input).unwrap();
    let events: Vec<String> = text
        .split("\n\n")
        .filter(|e| e.starts_with("data: {") && e.contains("\"finish_reason\":null"))
        .map(|e| format!("{e}\n\n"))
        .collect();
    assert!(events.len() > 30);
    let mut out = BytesMut::new();
    while out.len() < size {
        for e in &events {
            out.extend_from_slice(e.as_bytes());
        }
    }
    out.freeze()
}

/// A one-connection upstream: reads the request, answers 200 SSE chunked
/// with `body` in random pieces, cut `cut_at` bytes in (mid-event) as
/// `cut` says. Returns its address.
async fn upstream_once(body: Bytes, cut_at: usize, cut: Cut, seed: u64) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        read_request(&mut s).await;
        let mut rng = Rng(seed);
        let mut w = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"[..],
        );
        let mut at = 0;
        while at < cut_at {
            let max = [16u64, 512, 16 * 1024][rng.below(3) as usize];
            let n = (1 + rng.below(max) as usize).min(cut_at - at);
            if at + n == cut_at {
                // The last chunk is declared whole but only half of it
                // arrives.
                w.extend_from_slice(format!("{:x}\r\n", 2 * n).as_bytes());
                w.extend_from_slice(&body[at..at + n]);
            } else {
                w.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                w.extend_from_slice(&body[at..at + n]);
                w.extend_from_slice(b"\r\n");
            }
            at += n;
            // Several chunks per write, sometimes a pause.
            if rng.below(4) == 0 || at == cut_at {
                if s.write_all(&w).await.is_err() {
                    return;
                }
                w.clear();
                if rng.below(8) == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
        match cut {
            Cut::Close => drop(s),
            Cut::Reset => {
                tokio::time::sleep(Duration::from_millis(150)).await;
                s.set_zero_linger().unwrap();
                drop(s);
            }
        }
    });
    addr
}

/// Reads one request (headers and a `content-length` body).
async fn read_request(s: &mut TcpStream) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "request cut");
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if got.len() >= end + 4 + len {
                return;
            }
        }
    }
}

/// What the client got: the chunked body's bytes, and whether it ended
/// with the last chunk (a clean end).
async fn client_reads(gw: SocketAddr, body: &str, seed: u64) -> (Bytes, bool) {
    let mut s = TcpStream::connect(gw).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    // Slow at first: the gateway's writes back up.
    tokio::time::sleep(Duration::from_millis(5 + seed % 40)).await;
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 1 + (seed as usize * 977) % 8192];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response headers");
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw[..end])
    );
    let mut rest = &raw[end + 4..];
    let mut out = BytesMut::new();
    loop {
        let Some(i) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (out.freeze(), false);
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..i]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return (out.freeze(), true);
        }
        let data = &rest[i + 2..];
        if data.len() < size + 2 {
            // A chunk cut short: what there is counts.
            out.extend_from_slice(&data[..data.len().min(size)]);
            return (out.freeze(), false);
        }
        out.extend_from_slice(&data[..size]);
        rest = &data[size + 2..];
    }
}

/// What the chat rewriter makes of `input` ended early.
fn rewritten(input: &Bytes) -> Bytes {
    let sources = Arc::new(Sources::from_json(&lisbon("sources.json")).unwrap());
    rewrite_all(ChatStream::new(sources, RewriteOptions::new()), input)
}

async fn broken_runs(web_search: bool, cut: Cut, runs: u64) {
    let body = long_chat_stream(300 * 1024);
    for seed in 1..=runs {
        let mut rng = Rng(seed * 7919);
        // Somewhere in the second half, mid-event.
        let cut_at = body.len() / 2 + rng.below(body.len() as u64 / 2 - 1) as usize;
        let up = upstream_once(body.clone(), cut_at, cut, seed).await;
        let (cfg, dir) = config(&format!("http://{up}"), "");
        let gw = start_gateway(&cfg, dir).await;
        let req = if web_search {
            chat_body(true)
        } else {
            chat_body(true).replace("\"web_search\":true,", "")
        };
        let (got, clean) = client_reads(gw.addr, &req, seed).await;
        let delivered = body.slice(..cut_at);
        let want = if web_search {
            rewritten(&delivered)
        } else {
            delivered
        };
        assert!(!clean, "seed {seed}: a clean end after a broken upstream");
        assert_eq!(
            got.len(),
            want.len(),
            "seed {seed} ({cut:?}, web_search {web_search}): {} bytes missing; got ends {:?}, want ends {:?}",
            want.len() as i64 - got.len() as i64,
            String::from_utf8_lossy(&got[got.len().saturating_sub(300)..]),
            String::from_utf8_lossy(&want[want.len().saturating_sub(300)..]),
        );
        assert!(got == want, "seed {seed}: bytes differ");
        assert!(
            !got.windows(9).any(|w| w == b"\"sources\""),
            "seed {seed}: sources added"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_through_stream_cut_by_a_close_arrives_whole_and_broken() {
    broken_runs(false, Cut::Close, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_stream_cut_by_a_close_arrives_whole_and_broken() {
    broken_runs(true, Cut::Close, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_by_a_reset_arrives_whole_and_broken() {
    broken_runs(false, Cut::Reset, 8).await;
    broken_runs(true, Cut::Reset, 8).await;
}
