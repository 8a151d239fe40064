//! The request side: how its body is framed, its head written out, and
//! the pieces of a chunked body.
//!
//! Contract:
//! * Framing ([`RequestFraming::choose`]), as hyper's client does it: a
//!   `content-length` header the request has is kept (and its body must
//!   match it: the caller's check); else a body of known length gets one
//!   (none for an empty body of `GET`, `HEAD`, `CONNECT`, `OPTIONS` or
//!   `TRACE`, which do not take one), and one of unknown length is sent
//!   chunked.
//! * The head ([`write_head`]) is the request line in origin form, the
//!   headers as given (each `name: value`, in order, repeated names
//!   repeated), except any `transfer-encoding` and `content-length` (the
//!   framing's own header replaces them), then the framing's header.

use bytes::BufMut;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, Method};

use crate::{BadLength, Error};

/// How a request body goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFraming {
    /// This many bytes, announced in `content-length` (`announce`: the head
    /// says so; not for an empty body of a method that takes none).
    Length {
        /// The body's length.
        len: u64,
        /// Whether the head carries `content-length`.
        announce: bool,
    },
    /// `transfer-encoding: chunked` ([`chunk_head`], [`CHUNK_END`],
    /// [`LAST_CHUNK`]).
    Chunked,
}

impl RequestFraming {
    /// The framing of a request with these headers and a body of `exact`
    /// bytes (`None`: not known before it is sent). A `content-length`
    /// that is not one number (repeated the same is one) is an error.
    pub fn choose(
        method: &Method,
        headers: &HeaderMap,
        exact: Option<u64>,
    ) -> Result<RequestFraming, Error> {
        let given = crate::content_length(headers).map_err(|e| match e {
            BadLength::Invalid => Error::new("invalid request content-length"),
            BadLength::Conflicting => Error::new("conflicting request content-length"),
        })?;
        Ok(match (given, exact) {
            (Some(len), _) => RequestFraming::Length {
                len,
                announce: true,
            },
            (None, Some(0)) if takes_no_body(method) => RequestFraming::Length {
                len: 0,
                announce: false,
            },
            (None, Some(len)) => RequestFraming::Length {
                len,
                announce: true,
            },
            (None, None) => RequestFraming::Chunked,
        })
    }
}

/// Methods whose requests have no body unless they say so.
fn takes_no_body(m: &Method) -> bool {
    [
        Method::GET,
        Method::HEAD,
        Method::CONNECT,
        Method::OPTIONS,
        Method::TRACE,
    ]
    .contains(m)
}

/// Writes the request head (request line, headers, framing header, blank
/// line) to `out`. `target` is the origin form (`/v1/chat/completions?x`).
pub fn write_head(
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    framing: RequestFraming,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(if target.is_empty() { "/" } else { target }.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        if name == TRANSFER_ENCODING || name == CONTENT_LENGTH {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        RequestFraming::Length {
            announce: false, ..
        } => {}
        RequestFraming::Length { len, .. } => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(len.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        RequestFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
}

/// Writes the line that opens a chunk of `len` (> 0) bytes.
pub fn chunk_head(len: usize, out: &mut impl BufMut) {
    out.put_slice(format!("{len:x}\r\n").as_bytes());
}

/// What follows each chunk's data.
pub const CHUNK_END: &[u8] = b"\r\n";

/// The last chunk and an empty trailer section: the end of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn framing_follows_the_header_then_the_known_length() {
        let post = Method::POST;
        let given = headers(&[("content-length", "12")]);
        assert_eq!(
            RequestFraming::choose(&post, &given, None),
            Ok(RequestFraming::Length {
                len: 12,
                announce: true
            })
        );
        let none = HeaderMap::new();
        assert_eq!(
            RequestFraming::choose(&post, &none, Some(0)),
            Ok(RequestFraming::Length {
                len: 0,
                announce: true
            })
        );
        assert_eq!(
            RequestFraming::choose(&Method::GET, &none, Some(0)),
            Ok(RequestFraming::Length {
                len: 0,
                announce: false
            })
        );
        assert_eq!(
            RequestFraming::choose(&post, &none, None),
            Ok(RequestFraming::Chunked)
        );
        for bad in [
            headers(&[("content-length", "1,2")]),
            headers(&[("content-length", "")]),
            headers(&[("content-length", "+3")]),
            headers(&[("content-length", "3"), ("content-length", "4")]),
        ] {
            assert!(
                RequestFraming::choose(&post, &bad, Some(3)).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_head_replaces_framing_headers_with_its_own() {
        let h = headers(&[
            ("host", "up:8000"),
            ("transfer-encoding", "gzip, chunked"),
            ("content-length", "99"),
            ("x-a", "1"),
            ("x-a", "2"),
        ]);
        let mut out = Vec::new();
        write_head(
            &Method::POST,
            "/v1/chat/completions",
            &h,
            RequestFraming::Length {
                len: 99,
                announce: true,
            },
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /v1/chat/completions HTTP/1.1\r\nhost: up:8000\r\nx-a: 1\r\nx-a: 2\r\ncontent-length: 99\r\n\r\n"
        );
        let mut out = Vec::new();
        write_head(&Method::POST, "", &h, RequestFraming::Chunked, &mut out);
        assert!(out.starts_with(b"POST / HTTP/1.1\r\n"));
        assert!(out.ends_with(b"x-a: 2\r\ntransfer-encoding: chunked\r\n\r\n"));
        let mut c = Vec::new();
        chunk_head(0x1f3, &mut c);
        assert_eq!(c, b"1f3\r\n");
    }
}
