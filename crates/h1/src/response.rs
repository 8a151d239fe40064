//! The response head: parsed from the start of the read buffer once all of
//! it is there, with the framing of the body that follows it (RFC 9112
//! section 6.3) and whether the connection can carry another request.
//!
//! Contract:
//! * [`parse`] returns `Ok(None)` until the head's blank line is in the
//!   buffer; then the head and its length (the body starts there). A head
//!   longer than the caller's `limit`, more than [`MAX_HEADERS`] header
//!   lines, or bytes that are not a status line and header lines (obsolete
//!   line folding included) are an [`Error`], whatever pieces they came in.
//! * Informational answers (`1xx`) are heads too ([`ResponseHead::informational`],
//!   no body): the caller skips them and parses again; `101 Switching
//!   Protocols` is the caller's error (it asks for no upgrade).
//! * Framing ([`Framing`]), in the order of the RFC: no body for a `HEAD`
//!   request or a `1xx`, `204` or `304` answer; else `transfer-encoding`
//!   decides (chunked when it is the last coding, else the body runs to
//!   the connection's close), and a `content-length` beside it is ignored
//!   and the connection not kept; else `content-length` (every value the
//!   same number, or an error); else the body runs to the close.
//! * Kept alive: HTTP/1.1 unless `connection: close`; HTTP/1.0 only with
//!   `connection: keep-alive`; never when the body runs to the close.
//! * Header names and values are copied out of the buffer (once per
//!   response); the reason phrase is kept as sent.

use http::header::{CONNECTION, CONTENT_LENGTH, HeaderName, HeaderValue, TRANSFER_ENCODING};
use http::{HeaderMap, StatusCode, Version};

use crate::{BadLength, Error};

/// The most header lines a response head may have.
pub const MAX_HEADERS: usize = 128;

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body at all.
    Empty,
    /// This many bytes.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
    /// Everything until the upstream closes the connection.
    Close,
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: StatusCode,
    /// The reason phrase as sent (often the status's canonical one).
    pub reason: Vec<u8>,
    /// HTTP/1.0 or HTTP/1.1.
    pub version: Version,
    /// Every header line, in order.
    pub headers: HeaderMap,
    /// How the body that follows is delimited.
    pub framing: Framing,
    /// Whether the connection can carry another request after this
    /// response's body.
    pub keep_alive: bool,
}

impl ResponseHead {
    /// A `1xx` answer: another head follows (and no body).
    pub fn informational(&self) -> bool {
        self.status.is_informational()
    }
}

/// Parses the response head at the start of `buf`, the answer to a request
/// with `method` `HEAD` when `to_head`: `Ok(None)` until it is all there,
/// then the head and its length in bytes.
pub fn parse(
    buf: &[u8],
    to_head: bool,
    limit: usize,
) -> Result<Option<(ResponseHead, usize)>, Error> {
    let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut lines);
    let len = match r.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() >= limit => {
            return Err(Error::new("response head too large"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(n)) if n > limit => {
            return Err(Error::new("response head too large"));
        }
        Ok(httparse::Status::Complete(n)) => n,
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Error::new("too many response headers"));
        }
        Err(_) => return Err(Error::new("invalid response head")),
    };
    let version = if r.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let status = r
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or(Error::new("invalid response status"))?;
    let mut headers = HeaderMap::with_capacity(r.headers.len());
    for h in r.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| Error::new("invalid response header name"))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| Error::new("invalid response header value"))?;
        headers.append(name, value);
    }
    let reason = r.reason.unwrap_or("").as_bytes().to_vec();
    let (framing, mut keep_alive) = framing(&headers, status, to_head)?;
    let connection = |token: &str| {
        headers.get_all(CONNECTION).iter().any(|v| {
            v.as_bytes()
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        })
    };
    keep_alive &= if version == Version::HTTP_10 {
        connection("keep-alive")
    } else {
        !connection("close")
    };
    Ok(Some((
        ResponseHead {
            status,
            reason,
            version,
            headers,
            framing,
            keep_alive,
        },
        len,
    )))
}

/// The body's framing, and whether it leaves the connection usable.
fn framing(
    headers: &HeaderMap,
    status: StatusCode,
    to_head: bool,
) -> Result<(Framing, bool), Error> {
    if to_head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Empty, true));
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        let last = headers
            .get_all(TRANSFER_ENCODING)
            .iter()
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .rfind(|c| !c.is_empty());
        let chunked = last.is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"));
        // With `content-length` beside it, the message is suspect: read it
        // by `transfer-encoding`, then close.
        let keep = chunked && !headers.contains_key(CONTENT_LENGTH);
        return Ok((
            if chunked {
                Framing::Chunked
            } else {
                Framing::Close
            },
            keep,
        ));
    }
    let len = crate::content_length(headers).map_err(|e| match e {
        BadLength::Invalid => Error::new("invalid response content-length"),
        BadLength::Conflicting => Error::new("conflicting response content-length"),
    })?;
    Ok(match len {
        Some(n) => (Framing::Length(n), true),
        None => (Framing::Close, false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 64 * 1024;

    fn head(s: &str) -> Result<Option<(ResponseHead, usize)>, Error> {
        parse(s.as_bytes(), false, LIMIT)
    }

    fn ok(s: &str) -> ResponseHead {
        let (h, n) = head(s).unwrap().unwrap();
        assert_eq!(n, s.len());
        h
    }

    #[test]
    fn a_head_is_parsed_once_it_is_all_there_at_every_split() {
        let s = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nx-a: 1\r\nx-a: 2\r\n\r\nbody";
        let end = s.len() - 4;
        for i in 0..s.len() {
            let got = parse(&s.as_bytes()[..i], false, LIMIT).unwrap();
            assert_eq!(got.is_some(), i >= end, "at {i}");
        }
        let (h, n) = head(s).unwrap().unwrap();
        assert_eq!(n, end);
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.reason, b"OK");
        assert_eq!(h.version, Version::HTTP_11);
        assert_eq!(h.framing, Framing::Chunked);
        assert!(h.keep_alive);
        let a: Vec<_> = h.headers.get_all("x-a").iter().collect();
        assert_eq!(a, ["1", "2"]);
    }

    #[test]
    fn framing_follows_the_rfc_order() {
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n").framing,
            Framing::Length(5)
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\ncontent-length: 5\r\n\r\n").framing,
            Framing::Length(5)
        );
        let no_len = ok("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(no_len.framing, Framing::Close);
        assert!(!no_len.keep_alive);
        let both = ok("HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n");
        assert_eq!(both.framing, Framing::Chunked);
        assert!(!both.keep_alive, "suspect: not kept");
        let gzip = ok("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n");
        assert_eq!(gzip.framing, Framing::Close);
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ntransfer-encoding: Chunked\r\n\r\n")
                .framing,
            Framing::Chunked
        );
        for s in [
            "204 No Content",
            "304 Not Modified",
            "100 Continue",
            "103 Early Hints",
        ] {
            let h = ok(&format!("HTTP/1.1 {s}\r\ncontent-length: 9\r\n\r\n"));
            assert_eq!(h.framing, Framing::Empty, "{s}");
        }
        assert!(ok("HTTP/1.1 103 Early Hints\r\n\r\n").informational());
        let (h, _) = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n", true, LIMIT)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing, Framing::Empty, "answer to HEAD");
        for bad in [
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 5,6\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length:\r\n\r\n",
        ] {
            assert!(head(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keep_alive_follows_the_version_and_connection() {
        assert!(
            !ok("HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n").keep_alive
        );
        assert!(
            !ok("HTTP/1.1 200 OK\r\nconnection: x, close\r\ncontent-length: 0\r\n\r\n").keep_alive
        );
        assert!(!ok("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").keep_alive);
        let h = ok("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n");
        assert!(h.keep_alive);
        assert_eq!(h.version, Version::HTTP_10);
    }

    #[test]
    fn bad_and_oversized_heads_are_errors_at_every_split() {
        for bad in [
            "HTTP/1.1 200 OK\r\nfolded: a\r\n b\r\n\r\n",
            "HTTP/2 200 OK\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nbad name: x\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            let whole = head(bad);
            assert!(whole.is_err(), "{bad}");
            for i in 0..bad.len() {
                // A prefix is an error or incomplete, never a head.
                assert!(!matches!(
                    parse(&bad.as_bytes()[..i], false, LIMIT),
                    Ok(Some(_))
                ));
            }
        }
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("x-{i}: v\r\n"))
            .collect();
        assert_eq!(
            head(&format!("HTTP/1.1 200 OK\r\n{many}\r\n"))
                .unwrap_err()
                .what(),
            "too many response headers"
        );
        let s = format!("HTTP/1.1 200 OK\r\nx-big: {}\r\n\r\n", "a".repeat(100));
        let limit = s.len() - 1;
        assert!(
            parse(s.as_bytes(), false, limit).is_err(),
            "whole, over the limit"
        );
        assert!(
            parse(&s.as_bytes()[..limit], false, limit).is_err(),
            "partial at the limit"
        );
        assert!(
            parse(&s.as_bytes()[..limit - 1], false, limit)
                .unwrap()
                .is_none()
        );
        assert!(parse(s.as_bytes(), false, s.len()).unwrap().is_some());
    }
}
