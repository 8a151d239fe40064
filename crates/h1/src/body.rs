//! The response body's framing, decoded out of the connection's read
//! buffer.
//!
//! Contract:
//! * [`BodyDecoder::decode`] takes what it understands from the front of
//!   the buffer: the next data as one zero-copy slice of it (all of the
//!   body's data that has arrived, never waiting for the rest: of a chunked
//!   body, the data of every chunk the buffer holds, moved together over
//!   the framing between them, so that one read gives one piece however
//!   many chunks it brought), the trailers, the end, or
//!   [`Decoded::More`] when the buffer holds nothing it can hand over (what
//!   it holds of a chunk-size line or a trailer section stays in it).
//!   Bytes after the body's end are left in the buffer (the caller decides
//!   what they mean for the connection).
//! * Chunked framing (RFC 9112 section 7.1): a chunk-size line is hex digits, then
//!   optional spaces or tabs and `;` extensions (ignored), at most
//!   [`MAX_CHUNK_LINE`] bytes before the `CRLF` that ends it; each chunk's data is followed by
//!   `CRLF`; the last chunk (size 0) by a trailer section, at most the
//!   caller's limit, handed over as [`Decoded::Trailers`] when not empty.
//!   Anything else is an [`Error`].
//! * The upstream closing the connection ([`BodyDecoder::closed`]) ends a
//!   close-delimited body; any other body it cuts short is an error.

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};

use crate::Error;
use crate::response::Framing;

/// The longest chunk-size line (digits and extensions) accepted.
pub const MAX_CHUNK_LINE: usize = 4096;

/// What [`BodyDecoder::decode`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Body bytes (a slice of the read buffer).
    Data(Bytes),
    /// The trailer section (not empty): the body has ended.
    Trailers(HeaderMap),
    /// The body has ended.
    End,
    /// Nothing to hand over until more bytes are read.
    More,
}

/// Decodes one response body (see the module doc).
#[derive(Debug, Clone)]
pub struct BodyDecoder {
    state: State,
    trailer_limit: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes left of a `content-length` body.
    Length(u64),
    /// Until the connection closes.
    Close,
    /// In a chunk-size line: its length so far, the size so far, and
    /// which part of the line this is.
    Line { len: usize, size: u64, part: Part },
    /// The line's `CR` came: its `LF` is next.
    LineLf { size: u64 },
    /// This many bytes left of the chunk's data.
    Data(u64),
    /// The chunk's data ended: its `CR` is next.
    DataCr,
    /// Its `LF` is next.
    DataLf,
    /// After the last chunk: the trailer section.
    Trailers,
    /// The body ended (reported).
    Done,
}

impl BodyDecoder {
    /// A decoder for a body framed as `framing`, whose trailer section may
    /// be at most `trailer_limit` bytes.
    pub fn new(framing: Framing, trailer_limit: usize) -> BodyDecoder {
        let state = match framing {
            Framing::Empty => State::Length(0),
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => LINE_START,
            Framing::Close => State::Close,
        };
        BodyDecoder {
            state,
            trailer_limit,
        }
    }

    /// Whether the body has ended (its last data, trailers or end handed
    /// over).
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// How many bytes of a `content-length` body are still to come.
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// The next thing the buffer holds (see the module doc).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, Error> {
        match self.state {
            State::Done => Ok(Decoded::End),
            State::Length(0) => {
                self.state = State::Done;
                Ok(Decoded::End)
            }
            State::Length(n) => {
                if buf.is_empty() {
                    return Ok(Decoded::More);
                }
                let take = take(n, buf.len());
                self.state = if take as u64 == n {
                    State::Done
                } else {
                    State::Length(n - take as u64)
                };
                Ok(Decoded::Data(buf.split_to(take).freeze()))
            }
            State::Close if buf.is_empty() => Ok(Decoded::More),
            State::Close => Ok(Decoded::Data(buf.split().freeze())),
            State::Trailers => self.trailers(buf),
            _ => self.chunks(buf),
        }
    }

    /// Chunked framing: the data of every chunk the buffer holds (up to the
    /// last chunk, or a framing error), moved together at its front over
    /// the framing between them, handed over as one slice; then the
    /// trailers, the end or the error at the next call.
    fn chunks(&mut self, buf: &mut BytesMut) -> Result<Decoded, Error> {
        // Data gathered at buf[..w]; buf[..r] read.
        let mut w = 0;
        let mut r = 0;
        let mut error = None;
        loop {
            match self.state {
                State::Data(n) => {
                    let take = take(n, buf.len() - r);
                    if take == 0 {
                        break;
                    }
                    if w == 0 {
                        // The first data stays where it is: the framing
                        // before it is dropped instead.
                        buf.advance(r);
                        r = 0;
                    } else if w != r {
                        buf.copy_within(r..r + take, w);
                    }
                    w += take;
                    r += take;
                    self.state = if take as u64 == n {
                        State::DataCr
                    } else {
                        State::Data(n - take as u64)
                    };
                }
                State::Line { .. } | State::LineLf { .. } | State::DataCr | State::DataLf => {
                    // The usual framing whole in the buffer (a data end and
                    // a plain size line): read at once.
                    if let Some(used) = self.quick_framing(&buf[r..]) {
                        r += used;
                        continue;
                    }
                    let (used, step) = self.framing(&buf[r..]);
                    r += used;
                    match step {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) => {
                            error = Some(e);
                            break;
                        }
                    }
                }
                // The last chunk came: the trailers are the next call's.
                _ => break,
            }
        }
        if w > 0 {
            // (An error is met again at the next call: the byte that
            // caused it is not consumed.)
            let data = buf.split_to(w).freeze();
            buf.advance(r - w);
            return Ok(Decoded::Data(data));
        }
        buf.advance(r);
        if let Some(e) = error {
            return Err(e);
        }
        match self.state {
            State::Trailers => self.trailers(buf),
            _ => Ok(Decoded::More),
        }
    }

    /// The framing between two chunks as it usually comes, whole: a data
    /// end (`CRLF`, after a chunk's data) and/or a size line of hex digits
    /// alone (no extension, at most 16 digits) and its `CRLF`; how many bytes
    /// it took, the state after them that [`Self::framing`] would reach.
    /// `None` (nothing consumed) for anything else, which that reads.
    #[inline]
    fn quick_framing(&mut self, bytes: &[u8]) -> Option<usize> {
        let at = match self.state {
            State::DataCr if bytes.starts_with(b"\r\n") => 2,
            LINE_START => 0,
            _ => return None,
        };
        let line = &bytes[at..];
        // The digits and their value in one pass (at most 17 looked at).
        let mut digits = 0;
        let mut size = 0u64;
        for &b in line.iter().take(17) {
            let v = HEX_VALUE[usize::from(b)];
            if v > 15 {
                break;
            }
            size = size << 4 | u64::from(v);
            digits += 1;
        }
        if digits == 0 || digits > 16 || line.get(digits..digits + 2) != Some(b"\r\n") {
            if at > 0 {
                self.state = LINE_START;
            }
            return (at > 0).then_some(at);
        }
        self.state = if size == 0 {
            State::Trailers
        } else {
            State::Data(size)
        };
        Some(at + digits + 2)
    }

    /// Reads chunked framing bytes (size lines, data ends) from the front
    /// of `bytes` until data or trailers are next (`Ok(true)`), `bytes` is
    /// used up (`Ok(false)`) or a byte is wrong (the error, that byte not
    /// consumed); returns how many it consumed, the state following them.
    fn framing(&mut self, bytes: &[u8]) -> (usize, Result<bool, Error>) {
        for (used, &b) in bytes.iter().enumerate() {
            let next = match self.state {
                State::DataCr if b == b'\r' => State::DataLf,
                State::DataLf if b == b'\n' => LINE_START,
                State::DataCr | State::DataLf => {
                    return (used, Err(Error::new("invalid chunk data end")));
                }
                State::Line { len, size, part } => {
                    if len >= MAX_CHUNK_LINE && b != b'\r' {
                        return (used, Err(Error::new("chunk size line too long")));
                    }
                    match line_byte(b, len, size, part) {
                        Ok(next) => next,
                        Err(e) => return (used, Err(e)),
                    }
                }
                State::LineLf { size } if b == b'\n' => {
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                    return (used + 1, Ok(true));
                }
                State::LineLf { .. } => {
                    return (used, Err(Error::new("invalid chunk size line")));
                }
                _ => unreachable!("framing() runs in framing states only"),
            };
            self.state = next;
        }
        (bytes.len(), Ok(false))
    }

    /// The trailer section after the last chunk: an empty line, or header
    /// lines and an empty line.
    fn trailers(&mut self, buf: &mut BytesMut) -> Result<Decoded, Error> {
        if buf.len() < 2 {
            return Ok(Decoded::More);
        }
        if buf.starts_with(b"\r\n") {
            buf.advance(2);
            self.state = State::Done;
            return Ok(Decoded::End);
        }
        let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            if buf.len() >= self.trailer_limit {
                return Err(Error::new("trailer section too large"));
            }
            return Ok(Decoded::More);
        };
        let len = at + 4;
        if len > self.trailer_limit {
            return Err(Error::new("trailer section too large"));
        }
        let mut lines = [httparse::EMPTY_HEADER; crate::response::MAX_HEADERS];
        let parsed = httparse::parse_headers(&buf[..len], &mut lines)
            .map_err(|_| Error::new("invalid trailer section"))?;
        let httparse::Status::Complete((n, lines)) = parsed else {
            return Err(Error::new("invalid trailer section"));
        };
        if n != len {
            return Err(Error::new("invalid trailer section"));
        }
        let mut map = HeaderMap::with_capacity(lines.len());
        for h in lines {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| Error::new("invalid trailer name"))?;
            let value = HeaderValue::from_bytes(h.value)
                .map_err(|_| Error::new("invalid trailer value"))?;
            map.append(name, value);
        }
        buf.advance(len);
        self.state = State::Done;
        Ok(Decoded::Trailers(map))
    }

    /// The upstream closed the connection with everything read handed
    /// over: the end of a close-delimited body (or of one already ended);
    /// an error for any other.
    pub fn closed(&mut self) -> Result<(), Error> {
        match self.state {
            State::Close | State::Done | State::Length(0) => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(Error::new(
                "the upstream closed the connection before the body's end",
            )),
        }
    }
}

/// A chunk-size line's parts: `1*HEXDIG *WSP *( ";" ext )`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Digits,
    /// Spaces or tabs after the digits.
    Space,
    /// From the first `;`: extensions, which are not read.
    Ext,
}

const LINE_START: State = State::Line {
    len: 0,
    size: 0,
    part: Part::Digits,
};

/// Each byte's value as a hex digit, or 0xFF for the bytes that are not
/// one.
static HEX_VALUE: [u8; 256] = {
    let mut t = [0xFFu8; 256];
    let mut b = 0;
    while b < 10 {
        t[b'0' as usize + b] = b as u8;
        b += 1;
    }
    let mut b = 0;
    while b < 6 {
        t[b'a' as usize + b] = 10 + b as u8;
        t[b'A' as usize + b] = 10 + b as u8;
        b += 1;
    }
    t
};

/// The state after byte `b` of a chunk-size line that has `len` bytes
/// before it.
fn line_byte(b: u8, len: usize, size: u64, part: Part) -> Result<State, Error> {
    let bad = Err(Error::new("invalid chunk size line"));
    let next = |size, part| State::Line {
        len: len + 1,
        size,
        part,
    };
    Ok(match (part, b) {
        (Part::Digits, b) if HEX_VALUE[usize::from(b)] <= 15 => {
            if size >> 60 != 0 {
                return Err(Error::new("chunk size too large"));
            }
            next(size << 4 | u64::from(HEX_VALUE[usize::from(b)]), part)
        }
        // No digit yet.
        (Part::Digits, _) if len == 0 => return bad,
        (_, b'\r') => State::LineLf { size },
        (Part::Digits | Part::Space, b' ' | b'\t') => next(size, Part::Space),
        (_, b';') => next(size, Part::Ext),
        // Extension bytes: visible characters, spaces and tabs.
        (Part::Ext, b) if b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80 => next(size, part),
        _ => return bad,
    })
}

/// How many of the `n` bytes still expected `avail` bytes hold.
fn take(n: u64, avail: usize) -> usize {
    usize::try_from(n).map_or(avail, |n| n.min(avail))
}

#[cfg(test)]
mod tests {
    use super::HEX_VALUE;

    #[test]
    fn hex_value_is_the_hex_digit_of_exactly_the_hex_digits() {
        for b in 0..=255u8 {
            let want = (b as char).to_digit(16).map_or(0xFF, |d| d as u8);
            assert_eq!(HEX_VALUE[usize::from(b)], want, "{b:#x}");
        }
    }
}
