//! Undoing a `gzip` or `deflate` content encoding of an upstream response
//! the gateway rewrites (it asks for `accept-encoding: identity`, but an
//! upstream may compress anyway).
//!
//! Contract: [`coding`] tells identity, a coding this module undoes, or one
//! it does not know (`br`, `zstd`, several codings: the caller passes such
//! a body through untouched). [`Decoded`] inflates a body piece by piece,
//! feeding at most [`INPUT_STEP`] compressed bytes per output piece so one
//! small input cannot produce an unbounded piece; invalid compressed data
//! ends the body with an error (the client sees a broken response, never
//! wrong bytes).

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use flate2::write::{MultiGzDecoder, ZlibDecoder};
use http::HeaderMap;
use http::header::CONTENT_ENCODING;
use http_body::{Body, Frame};

use crate::body::{AnyBody, BoxError};

/// Compressed bytes fed per step (at most about 1 MiB of output).
pub(crate) const INPUT_STEP: usize = 1024;

/// A content coding this module undoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coding {
    /// `gzip` / `x-gzip`.
    Gzip,
    /// `deflate` (zlib format, RFC 9110 section 8.4.1.2).
    Deflate,
}

/// `Ok(None)`: identity. `Err(())`: a coding not undone here.
pub(crate) fn coding(h: &HeaderMap) -> Result<Option<Coding>, ()> {
    let mut found = None;
    for v in h.get_all(CONTENT_ENCODING) {
        for c in v.to_str().map_err(drop)?.split(',') {
            let c = c.trim().to_ascii_lowercase();
            let this = match c.as_str() {
                "" | "identity" => continue,
                "gzip" | "x-gzip" => Coding::Gzip,
                "deflate" => Coding::Deflate,
                _ => return Err(()),
            };
            if found.replace(this).is_some() {
                return Err(()); // stacked codings
            }
        }
    }
    Ok(found)
}

enum Inflater {
    Gzip(MultiGzDecoder<Vec<u8>>),
    Deflate(ZlibDecoder<Vec<u8>>),
}

impl Inflater {
    fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Inflater::Gzip(d) => d.write_all(b),
            Inflater::Deflate(d) => d.write_all(b),
        }
    }

    fn finish(&mut self) -> std::io::Result<()> {
        match self {
            Inflater::Gzip(d) => d.try_finish(),
            Inflater::Deflate(d) => d.try_finish(),
        }
    }

    fn take(&mut self) -> Vec<u8> {
        match self {
            Inflater::Gzip(d) => std::mem::take(d.get_mut()),
            Inflater::Deflate(d) => std::mem::take(d.get_mut()),
        }
    }
}

/// A body with its content coding undone.
pub(crate) struct Decoded {
    inner: AnyBody,
    inflater: Inflater,
    pending: Bytes,
    done: bool,
}

impl Decoded {
    pub(crate) fn new(inner: AnyBody, coding: Coding) -> Self {
        let inflater = match coding {
            Coding::Gzip => Inflater::Gzip(MultiGzDecoder::new(Vec::new())),
            Coding::Deflate => Inflater::Deflate(ZlibDecoder::new(Vec::new())),
        };
        Decoded {
            inner,
            inflater,
            pending: Bytes::new(),
            done: false,
        }
    }
}

impl Body for Decoded {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            while !this.pending.is_empty() {
                let step = this.pending.split_to(this.pending.len().min(INPUT_STEP));
                this.inflater.write(&step)?;
                let out = this.inflater.take();
                if !out.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(out.into()))));
                }
            }
            if this.done {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        this.pending = d;
                    }
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => {
                    this.done = true;
                    this.inflater.finish()?;
                    let out = this.inflater.take();
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out.into()))));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn codings() {
        let mut h = HeaderMap::new();
        assert_eq!(coding(&h), Ok(None));
        h.insert(CONTENT_ENCODING, "identity".parse().unwrap());
        assert_eq!(coding(&h), Ok(None));
        h.insert(CONTENT_ENCODING, "GZIP".parse().unwrap());
        assert_eq!(coding(&h), Ok(Some(Coding::Gzip)));
        h.insert(CONTENT_ENCODING, "deflate".parse().unwrap());
        assert_eq!(coding(&h), Ok(Some(Coding::Deflate)));
        h.insert(CONTENT_ENCODING, "br".parse().unwrap());
        assert_eq!(coding(&h), Err(()));
        h.insert(CONTENT_ENCODING, "gzip, gzip".parse().unwrap());
        assert_eq!(coding(&h), Err(()));
    }

    #[tokio::test]
    async fn inflates_in_any_pieces_and_fails_on_garbage() {
        let plain: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("data: {i}\n\n").into_bytes())
            .collect();
        let z = gzip(&plain);
        for piece in [1, 7, 1460, z.len()] {
            let chunks: Vec<Result<Frame<Bytes>, BoxError>> = z
                .chunks(piece)
                .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
                .collect();
            let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks)).boxed();
            let out = Decoded::new(body, Coding::Gzip)
                .collect()
                .await
                .unwrap()
                .to_bytes();
            assert!(out == plain, "piece {piece}");
        }
        let bad = crate::body::full(Bytes::from_static(b"not gzip at all"));
        assert!(Decoded::new(bad, Coding::Gzip).collect().await.is_err());
    }
}
