//! The `futures_core::Stream` adapter: same bytes as the sans-IO rewriter,
//! errors passed through, no read-ahead (backpressure kept).
#![cfg(feature = "stream")]

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use citestream::{ChatStream, RewriteOptions, Sources, StreamRewriter};
use futures::{StreamExt, executor::block_on, stream};

fn lisbon() -> (Arc<Sources>, Vec<u8>) {
    let root = env!("CARGO_MANIFEST_DIR");
    let sources =
        Sources::from_json(&std::fs::read(format!("{root}/examples/lisbon/sources.json")).unwrap())
            .unwrap();
    let input = std::fs::read(format!("{root}/examples/lisbon/upstream.sse")).unwrap();
    (Arc::new(sources), input)
}

fn sans_io(sources: Arc<Sources>, input: &[u8]) -> Vec<u8> {
    let mut rw = ChatStream::new(sources, RewriteOptions::new());
    let mut out = Vec::new();
    rw.feed(Bytes::copy_from_slice(input));
    while let Some(b) = rw.next_output() {
        out.extend_from_slice(&b);
    }
    StreamRewriter::finish(&mut rw);
    while let Some(b) = rw.next_output() {
        out.extend_from_slice(&b);
    }
    out
}

#[test]
fn same_bytes_as_sans_io_core() {
    let (sources, input) = lisbon();
    let want = sans_io(sources.clone(), &input);
    for size in [1, 7, 100, 4096] {
        let pieces: Vec<Result<Bytes, std::io::Error>> = input
            .chunks(size)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let s =
            citestream::stream::chat(stream::iter(pieces), sources.clone(), RewriteOptions::new());
        let got: Vec<Bytes> = block_on(s.map(Result::unwrap).collect());
        assert_eq!(got.concat(), want, "read size {size}");
    }
}

#[test]
fn errors_pass_through() {
    let (sources, _) = lisbon();
    let pieces = vec![
        Ok(Bytes::from_static(b"data: {\"choices\":[]}\n\n")),
        Err("boom"),
        Ok(Bytes::from_static(b"data: [DONE]\n\n")),
    ];
    let s = citestream::stream::chat(stream::iter(pieces), sources, RewriteOptions::new());
    let got: Vec<Result<Bytes, &str>> = block_on(s.collect());
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[0].as_ref().unwrap(),
        &Bytes::from_static(b"data: {\"choices\":[]}\n\n")
    );
    assert_eq!(got[1], Err("boom"));
    assert_eq!(
        got[2].as_ref().unwrap(),
        &Bytes::from_static(b"data: [DONE]\n\n")
    );
}

/// Counts how many items were pulled from it.
struct Counted {
    items: Vec<Bytes>,
    pulled: Arc<AtomicUsize>,
}

impl futures_core::Stream for Counted {
    type Item = Result<Bytes, std::convert::Infallible>;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.items.is_empty() {
            return Poll::Ready(None);
        }
        self.pulled.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(Some(Ok(self.items.remove(0))))
    }
}

#[test]
fn does_not_read_ahead() {
    let (sources, input) = lisbon();
    let events: Vec<Bytes> = input
        .split_inclusive(|&b| b == b'\n')
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|c| Bytes::from(c.concat()))
        .collect();
    let pulled = Arc::new(AtomicUsize::new(0));
    let mut s = citestream::stream::chat(
        Counted {
            items: events.clone(),
            pulled: pulled.clone(),
        },
        sources,
        RewriteOptions::new(),
    );
    // Each upstream event is yielded as soon as it is read: the k-th output
    // needs no more than k inputs (before the finish chunk adds pieces).
    block_on(async {
        for k in 1..=5 {
            let b = s.next().await.unwrap().unwrap();
            assert_eq!(b, events[k - 1]);
            assert_eq!(pulled.load(Ordering::SeqCst), k);
        }
    });
}
