//! `futures_core::Stream` adapters (feature `stream`).
//!
//! [`Rewritten`] wraps any `Stream<Item = Result<Bytes, E>>` (a hyper or
//! reqwest body stream, say) and yields the rewritten stream. It polls the
//! inner stream only when the rewriter has no output ready, so it adds no
//! buffering and keeps the inner stream's backpressure. Errors from the
//! inner stream are passed through as they come.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use futures::{StreamExt, executor::block_on, stream};
//! use citestream::{RewriteOptions, Sources};
//!
//! let sources = Arc::new(Sources::from_json(br#"[{"title":"T","url":"u"}]"#).unwrap());
//! let upstream = stream::iter([
//!     Ok::<_, std::io::Error>(Bytes::from_static(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x [1]\"},\"finish_reason\":null}]}\n\n")),
//!     Ok(Bytes::from_static(b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")),
//! ]);
//! let rewritten = citestream::stream::chat(upstream, sources, RewriteOptions::new());
//! let out: Vec<Bytes> = block_on(rewritten.map(Result::unwrap).collect());
//! let text = String::from_utf8(out.concat()).unwrap();
//! assert!(text.contains("\"annotations\""));
//! assert!(text.contains("\"sources\""));
//! ```

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_core::Stream;
use pin_project_lite::pin_project;

use crate::{ChatStream, MessagesStream, RewriteOptions, Sources, StreamRewriter};

pin_project! {
    /// A byte stream rewritten by a [`StreamRewriter`].
    ///
    /// Yields `Ok` pieces of the rewritten stream and passes the inner
    /// stream's errors through unchanged. Never panics.
    #[derive(Debug)]
    #[must_use = "streams do nothing unless polled"]
    pub struct Rewritten<S, R> {
        #[pin]
        inner: S,
        rewriter: R,
        ended: bool,
    }
}

impl<S, R> Rewritten<S, R> {
    /// Wraps `inner`, rewriting it with `rewriter`.
    pub fn new(inner: S, rewriter: R) -> Self {
        Rewritten {
            inner,
            rewriter,
            ended: false,
        }
    }

    /// The rewriter (for example to ask whether sources were emitted).
    #[must_use]
    pub fn rewriter(&self) -> &R {
        &self.rewriter
    }
}

impl<S, R, E> Stream for Rewritten<S, R>
where
    S: Stream<Item = Result<Bytes, E>>,
    R: StreamRewriter,
{
    type Item = Result<Bytes, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        loop {
            if let Some(b) = this.rewriter.next_output() {
                return Poll::Ready(Some(Ok(b)));
            }
            if *this.ended {
                return Poll::Ready(None);
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => this.rewriter.feed(chunk),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    this.rewriter.finish();
                    *this.ended = true;
                }
            }
        }
    }
}

/// Rewrites a `/v1/chat/completions` SSE body stream with a [`ChatStream`].
pub fn chat<S>(inner: S, sources: Arc<Sources>, opts: RewriteOptions) -> Rewritten<S, ChatStream> {
    Rewritten::new(inner, ChatStream::new(sources, opts))
}

/// Rewrites a `/v1/messages` SSE body stream with a [`MessagesStream`].
pub fn messages<S>(
    inner: S,
    sources: Arc<Sources>,
    opts: RewriteOptions,
) -> Rewritten<S, MessagesStream> {
    Rewritten::new(inner, MessagesStream::new(sources, opts))
}
