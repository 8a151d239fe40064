//! The three SSE parsers driven the same way: feed every piece, take out
//! every event, touch each event's data. Each returns the number of events
//! with data that it dispatched, so callers can check the parsers agree.
//!
//! The two baselines are `futures` streams. They are driven by a manual
//! poll loop with a no-op waker over `futures::stream::iter` (always ready),
//! the cheapest driver there is: no executor, no thread parking, no boxing.

use std::convert::Infallible;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use citestream::sse::{Config, Frame, FrameKind, Parser};
use futures::Stream;

/// citestream: `feed` each piece, drain `next_frame`, then `finish`.
#[inline(never)]
pub(crate) fn citestream(config: &Config, pieces: &[Bytes]) -> usize {
    let mut parser = Parser::with_config(config);
    let mut events = 0;
    for piece in pieces {
        parser.feed(piece.clone());
        while let Some(frame) = parser.next_frame() {
            if let Frame::Event(event) = frame {
                black_box(event.data());
                events += 1;
            }
        }
    }
    black_box(parser.finish());
    events
}

/// citestream's borrowing read path: `feed` each piece, drain
/// `next_frame_ref` (frames lent, no `Bytes` made per event).
#[inline(never)]
pub(crate) fn citestream_ref(config: &Config, pieces: &[Bytes]) -> usize {
    let mut parser = Parser::with_config(config);
    let mut events = 0;
    for piece in pieces {
        parser.feed(piece.clone());
        while let Some(frame) = parser.next_frame_ref() {
            if frame.kind() == FrameKind::Event {
                black_box(frame.data());
                events += 1;
            }
        }
    }
    black_box(parser.finish());
    events
}

/// Polls `stream` to its end; `f` sees every item.
pub(crate) fn drain<S: Stream>(stream: S, mut f: impl FnMut(S::Item)) {
    let mut stream = pin!(stream);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match stream.as_mut().poll_next(&mut cx) {
            Poll::Ready(Some(item)) => f(item),
            Poll::Ready(None) => return,
            Poll::Pending => unreachable!("stream::iter is always ready"),
        }
    }
}

fn byte_stream(pieces: &[Bytes]) -> impl Stream<Item = Result<Bytes, Infallible>> + '_ {
    futures::stream::iter(pieces.iter().map(|p| Ok(p.clone())))
}

/// `sse-stream` 0.3: `SseByteStream` over the pieces (its docs recommend it
/// over `SseStream` for byte streams: it skips the `http_body` frame
/// adapter). Counts blocks with data (it also yields data-less blocks,
/// which browsers and citestream do not dispatch).
#[inline(never)]
pub(crate) fn sse_stream(pieces: &[Bytes]) -> usize {
    let mut events = 0;
    drain(
        sse_stream::SseByteStream::new(byte_stream(pieces)),
        |item| {
            let sse = item.expect("sse-stream error");
            if let Some(data) = &sse.data {
                black_box(data.as_bytes());
                events += 1;
            }
        },
    );
    events
}

/// `sse-stream` 0.3 through its `http_body` entry point,
/// `SseStream::from_bytes_stream` (for the callgrind comparison only).
#[inline(never)]
pub(crate) fn sse_stream_body(pieces: &[Bytes]) -> usize {
    let mut events = 0;
    drain(
        sse_stream::SseStream::from_bytes_stream(byte_stream(pieces)),
        |item| {
            let sse = item.expect("sse-stream error");
            if let Some(data) = &sse.data {
                black_box(data.as_bytes());
                events += 1;
            }
        },
    );
    events
}

/// `eventsource-stream` 0.2: `EventStream` over the pieces.
#[inline(never)]
pub(crate) fn eventsource_stream(pieces: &[Bytes]) -> usize {
    let mut events = 0;
    drain(
        eventsource_stream::EventStream::new(byte_stream(pieces)),
        |item| {
            let event = item.expect("eventsource-stream error");
            black_box(event.data.as_bytes());
            events += 1;
        },
    );
    events
}
