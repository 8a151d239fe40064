//! HTTP/1.1 for a client, without I/O: what the gateway writes to a
//! plain-HTTP upstream and how it reads the answer (RFC 9112). The
//! connection that does the reading and writing is the gateway's
//! (`citestream-gateway`, `upstream/h1.rs`); this crate opens no socket,
//! reads no clock and allocates only what it returns.
//!
//! The modules follow one exchange:
//!
//! | module | role |
//! |---|---|
//! | [`request`] | the request's framing (`content-length` or chunked), its head written out, chunked body pieces |
//! | [`response`] | a response head parsed from the start of the read buffer: status, headers, body framing, whether the connection can be kept |
//! | [`body`] | the response body's framing decoded out of the read buffer: data as zero-copy slices of it, trailers, the end |
//!
//! Contract, for all three:
//! * Split-invariant: whatever pieces the bytes arrive in, the same data
//!   (concatenated), trailers, end and errors come out as when they arrive
//!   at once; nothing is waited for that has arrived (a body's data is
//!   handed over as soon as any of it is in the buffer).
//! * Bounded: a response head and a trailer section are at most the limit
//!   the caller gives, a chunk-size line at most [`body::MAX_CHUNK_LINE`]
//!   bytes; more is an [`Error`], never a larger buffer.
//! * Strict where leniency could desynchronise a connection: bare `LF`
//!   line ends in chunked framing, conflicting `content-length` values,
//!   chunk sizes beyond `u64` and obsolete header line folding are errors;
//!   a response with both `transfer-encoding` and `content-length` is read
//!   by `transfer-encoding`, and its connection is not kept.
//! * Never panics on any input (the fuzz target `h1_response` asserts it,
//!   and split-invariance, on arbitrary bytes and splits).

pub mod body;
pub mod request;
pub mod response;

pub use body::{BodyDecoder, Decoded};
pub use request::RequestFraming;
pub use response::{Framing, ResponseHead};

/// Why a `content-length` could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadLength {
    /// A value that is not a number.
    Invalid,
    /// Two different numbers.
    Conflicting,
}

/// The length the `content-length` headers give: every value, and every
/// item of a comma-separated list, the same number of decimal digits
/// (RFC 9110 section 8.6); `Ok(None)` without any.
pub(crate) fn content_length(headers: &http::HeaderMap) -> Result<Option<u64>, BadLength> {
    let mut len = None;
    for v in headers.get_all(http::header::CONTENT_LENGTH) {
        for item in v.as_bytes().split(|&b| b == b',') {
            let item = item.trim_ascii();
            let n = std::str::from_utf8(item)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or(BadLength::Invalid)?;
            if len.is_some_and(|l| l != n) {
                return Err(BadLength::Conflicting);
            }
            len = Some(n);
        }
    }
    Ok(len)
}

/// What is wrong with the bytes the upstream sent (or with a request that
/// cannot be framed): the connection cannot be read further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    what: &'static str,
}

impl Error {
    pub(crate) const fn new(what: &'static str) -> Error {
        Error { what }
    }

    /// The failure, as a short phrase ("invalid chunk size line").
    pub fn what(&self) -> &'static str {
        self.what
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.what)
    }
}

impl std::error::Error for Error {}
