//! Undoing a `gzip` or `deflate` content encoding of an upstream response
//! the exchange rewrites (it asks for `accept-encoding: identity`, but an
//! upstream may compress anyway), sans-IO.
//!
//! Contract: [`coding`] tells identity, a coding this module undoes, or one
//! it does not know (`br`, `zstd`, several codings: such a body passes
//! through untouched). [`Inflater`] takes compressed pieces and hands out
//! plain ones, inflating at most [`INPUT_STEP`] compressed bytes per output
//! piece, so one small input cannot produce an unbounded piece; invalid
//! compressed data is an [`InflateError`] (the client then sees a broken
//! response, never wrong bytes).

use std::collections::VecDeque;
use std::fmt;
use std::io::Write;

use bytes::{Buf, Bytes};
use flate2::write::{MultiGzDecoder, ZlibDecoder};
use http::HeaderMap;
use http::header::CONTENT_ENCODING;

/// Compressed bytes inflated per step (at most about 1 MiB of output).
pub const INPUT_STEP: usize = 1024;

/// A content coding this module undoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// `gzip` / `x-gzip`.
    Gzip,
    /// `deflate` (zlib format, RFC 9110 section 8.4.1.2).
    Deflate,
}

/// A `content-encoding` this module does not undo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownCoding;

/// `Ok(None)`: identity. `Err`: a coding not undone here (or stacked
/// codings).
///
/// # Errors
/// [`UnknownCoding`] as said.
pub fn coding(h: &HeaderMap) -> Result<Option<Coding>, UnknownCoding> {
    let mut found = None;
    for v in h.get_all(CONTENT_ENCODING) {
        for c in v.to_str().map_err(|_| UnknownCoding)?.split(',') {
            let c = c.trim().to_ascii_lowercase();
            let this = match c.as_str() {
                "" | "identity" => continue,
                "gzip" | "x-gzip" => Coding::Gzip,
                "deflate" => Coding::Deflate,
                _ => return Err(UnknownCoding),
            };
            if found.replace(this).is_some() {
                return Err(UnknownCoding); // stacked codings
            }
        }
    }
    Ok(found)
}

/// Invalid compressed data.
#[derive(Debug)]
pub struct InflateError(std::io::Error);

impl fmt::Display for InflateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid compressed body: {}", self.0)
    }
}

impl std::error::Error for InflateError {}

enum Decoder {
    Gzip(MultiGzDecoder<Vec<u8>>),
    Deflate(ZlibDecoder<Vec<u8>>),
}

/// A body's content coding undone, piece by piece (see the module docs).
pub struct Inflater {
    decoder: Decoder,
    pending: VecDeque<Bytes>,
    ended: bool,
    finished: bool,
}

impl fmt::Debug for Inflater {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inflater")
            .field(
                "pending",
                &self.pending.iter().map(Bytes::len).sum::<usize>(),
            )
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Inflater {
    /// An inflater for `coding`.
    #[must_use]
    pub fn new(coding: Coding) -> Inflater {
        let decoder = match coding {
            Coding::Gzip => Decoder::Gzip(MultiGzDecoder::new(Vec::new())),
            Coding::Deflate => Decoder::Deflate(ZlibDecoder::new(Vec::new())),
        };
        Inflater {
            decoder,
            pending: VecDeque::new(),
            ended: false,
            finished: false,
        }
    }

    /// Queues a compressed piece.
    pub fn feed(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.pending.push_back(piece);
        }
    }

    /// The compressed input ended.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// The next plain piece; `Ok(None)` when more input is needed (or, after
    /// [`Inflater::end`], when the body is done).
    ///
    /// # Errors
    /// [`InflateError`] on invalid compressed data.
    pub fn next_plain(&mut self) -> Result<Option<Bytes>, InflateError> {
        while let Some(front) = self.pending.front_mut() {
            let step = front.split_to(front.len().min(INPUT_STEP));
            if !front.has_remaining() {
                self.pending.pop_front();
            }
            let out = self.write(&step)?;
            if !out.is_empty() {
                return Ok(Some(out.into()));
            }
        }
        if self.ended && !self.finished {
            self.finished = true;
            let out = self.finish()?;
            if !out.is_empty() {
                return Ok(Some(out.into()));
            }
        }
        Ok(None)
    }

    fn write(&mut self, b: &[u8]) -> Result<Vec<u8>, InflateError> {
        let r = match &mut self.decoder {
            Decoder::Gzip(d) => d.write_all(b).map(|()| std::mem::take(d.get_mut())),
            Decoder::Deflate(d) => d.write_all(b).map(|()| std::mem::take(d.get_mut())),
        };
        r.map_err(InflateError)
    }

    fn finish(&mut self) -> Result<Vec<u8>, InflateError> {
        let r = match &mut self.decoder {
            Decoder::Gzip(d) => d.try_finish().map(|()| std::mem::take(d.get_mut())),
            Decoder::Deflate(d) => d.try_finish().map(|()| std::mem::take(d.get_mut())),
        };
        r.map_err(InflateError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(coding(&h), Err(UnknownCoding));
        h.insert(CONTENT_ENCODING, "gzip, gzip".parse().unwrap());
        assert_eq!(coding(&h), Err(UnknownCoding));
    }

    fn inflate_all(z: &[u8], piece: usize) -> Result<Vec<u8>, InflateError> {
        let mut inf = Inflater::new(Coding::Gzip);
        let mut out = Vec::new();
        for c in z.chunks(piece) {
            inf.feed(Bytes::copy_from_slice(c));
            while let Some(b) = inf.next_plain()? {
                assert!(b.len() <= 1100 * INPUT_STEP); // deflate inflates at most ~1032:1
                out.extend_from_slice(&b);
            }
        }
        inf.end();
        while let Some(b) = inf.next_plain()? {
            out.extend_from_slice(&b);
        }
        Ok(out)
    }

    #[test]
    fn inflates_in_any_pieces_and_fails_on_garbage() {
        let plain: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("data: {i}\n\n").into_bytes())
            .collect();
        let z = gzip(&plain);
        for piece in [1, 7, 1460, z.len()] {
            assert!(inflate_all(&z, piece).unwrap() == plain, "piece {piece}");
        }
        assert!(inflate_all(b"not gzip at all", 4).is_err());
        // A bomb comes out in bounded pieces.
        let zeros = gzip(&vec![0u8; 8 << 20]);
        assert_eq!(inflate_all(&zeros, zeros.len()).unwrap().len(), 8 << 20);
    }
}
