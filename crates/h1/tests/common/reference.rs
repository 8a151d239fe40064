//! A slow reference for the body decoder, which reads the whole input at
//! once by the grammar with no state between calls, and a runner of the
//! decoder over pieces that checks after each piece that nothing which has
//! arrived was held back. Shared by the tests and the fuzz target
//! `h1_response`.

use bytes::BytesMut;
use citestream_h1::body::{BodyDecoder, Decoded, MAX_CHUNK_LINE};
use citestream_h1::response::Framing;
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};

/// How a run over some bytes ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The body ended; this many bytes were left after it.
    End(usize),
    /// More bytes are needed.
    Incomplete,
    Error,
}

/// What a body decoded to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub data: Vec<u8>,
    pub trailers: Option<HeaderMap>,
    pub outcome: Outcome,
}

/// The reference: the whole input, read by the grammar, with no state
/// carried between calls.
pub fn reference(framing: Framing, input: &[u8], limit: usize) -> Run {
    let mut data = Vec::new();
    let outcome = match framing {
        Framing::Empty => Outcome::End(input.len()),
        Framing::Length(n) => {
            let n = n as usize;
            data.extend_from_slice(&input[..n.min(input.len())]);
            if input.len() >= n {
                Outcome::End(input.len() - n)
            } else {
                Outcome::Incomplete
            }
        }
        Framing::Close => {
            data.extend_from_slice(input);
            Outcome::Incomplete
        }
        Framing::Chunked => {
            return reference_chunked(input, limit);
        }
    };
    Run {
        data,
        trailers: None,
        outcome,
    }
}

/// Whether `line` (a chunk-size line without its CRLF, complete or the
/// start of one) fits `1*HEX *(SP / HTAB) [";" *ext-byte]`, and its size.
fn size_line(line: &[u8], complete: bool) -> Result<Option<u64>, ()> {
    if line.len() > MAX_CHUNK_LINE {
        return Err(());
    }
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return if line.is_empty() && !complete {
            Ok(None)
        } else {
            Err(())
        };
    }
    let hex = std::str::from_utf8(&line[..digits]).unwrap();
    let significant = hex.trim_start_matches('0');
    if significant.len() > 16 {
        return Err(());
    }
    let rest = &line[digits..];
    let spaces = rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    let rest = &rest[spaces..];
    if let Some((&first, ext)) = rest.split_first() {
        let ext_ok = ext
            .iter()
            .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80);
        if first != b';' || !ext_ok {
            return Err(());
        }
    }
    Ok(Some(u64::from_str_radix(significant, 16).unwrap_or(0)))
}

fn reference_chunked(input: &[u8], limit: usize) -> Run {
    let mut data = Vec::new();
    let mut at = 0;
    let end = |data, trailers, outcome| Run {
        data,
        trailers,
        outcome,
    };
    loop {
        // The size line.
        let rest = &input[at..];
        let Some(cr) = rest.iter().position(|&b| b == b'\r') else {
            let ok = size_line(rest, false).is_ok() && !rest.contains(&b'\n');
            let outcome = if ok {
                Outcome::Incomplete
            } else {
                Outcome::Error
            };
            return end(data, None, outcome);
        };
        let Ok(Some(size)) = size_line(&rest[..cr], true) else {
            return end(data, None, Outcome::Error);
        };
        match rest.get(cr + 1) {
            None => return end(data, None, Outcome::Incomplete),
            Some(b'\n') => {}
            Some(_) => return end(data, None, Outcome::Error),
        }
        at += cr + 2;
        if size == 0 {
            break;
        }
        // The data and its CRLF.
        let rest = &input[at..];
        let size = size as usize;
        if rest.len() < size {
            data.extend_from_slice(rest);
            return end(data, None, Outcome::Incomplete);
        }
        data.extend_from_slice(&rest[..size]);
        let after = &rest[size..];
        let crlf = &b"\r\n"[..after.len().min(2)];
        if !after.starts_with(crlf) {
            return end(data, None, Outcome::Error);
        }
        if after.len() < 2 {
            return end(data, None, Outcome::Incomplete);
        }
        at += size + 2;
    }
    // The trailer section.
    let rest = &input[at..];
    if rest.starts_with(b"\r\n") {
        return end(data, None, Outcome::End(rest.len() - 2));
    }
    let Some(t) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
        let outcome = if rest.len() >= limit {
            Outcome::Error
        } else {
            Outcome::Incomplete
        };
        return end(data, None, outcome);
    };
    let len = t + 4;
    if len > limit {
        return end(data, None, Outcome::Error);
    }
    let mut lines = [httparse::EMPTY_HEADER; 128];
    match httparse::parse_headers(&rest[..len], &mut lines) {
        Ok(httparse::Status::Complete((n, lines))) if n == len => {
            let mut map = HeaderMap::new();
            for h in lines {
                let (Ok(k), Ok(v)) = (
                    HeaderName::from_bytes(h.name.as_bytes()),
                    HeaderValue::from_bytes(h.value),
                ) else {
                    return end(data, None, Outcome::Error);
                };
                map.append(k, v);
            }
            end(data, Some(map), Outcome::End(rest.len() - len))
        }
        _ => end(data, None, Outcome::Error),
    }
}

/// The decoder over `pieces`, one after another; checks after each piece
/// that everything its bytes so far allow was handed over (against the
/// reference of that prefix).
pub fn run(framing: Framing, pieces: &[&[u8]], limit: usize) -> Run {
    let mut d = BodyDecoder::new(framing, limit);
    let mut buf = BytesMut::new();
    let mut data = Vec::new();
    let mut trailers = None;
    let mut seen = 0;
    let total: usize = pieces.iter().map(|p| p.len()).sum();
    let all: Vec<u8> = pieces.concat();
    for p in pieces {
        buf.extend_from_slice(p);
        seen += p.len();
        loop {
            match d.decode(&mut buf) {
                Ok(Decoded::Data(b)) => {
                    assert!(!b.is_empty(), "no empty data");
                    data.extend_from_slice(&b);
                }
                Ok(Decoded::Trailers(t)) => {
                    assert!(trailers.is_none());
                    trailers = Some(t);
                    assert!(d.is_done());
                }
                Ok(Decoded::End) => {
                    assert!(d.is_done());
                    assert_eq!(d.decode(&mut buf), Ok(Decoded::End), "ended stays ended");
                    return Run {
                        data,
                        trailers,
                        outcome: Outcome::End(buf.len() + total - seen),
                    };
                }
                Ok(Decoded::More) => break,
                Err(_) => {
                    return Run {
                        data,
                        trailers,
                        outcome: Outcome::Error,
                    };
                }
            }
        }
        // Nothing that has arrived is held back.
        let prefix = reference(framing, &all[..seen], limit);
        assert_eq!(data, prefix.data, "after {seen} bytes");
        assert_eq!(prefix.outcome, Outcome::Incomplete, "after {seen} bytes");
    }
    Run {
        data,
        trailers,
        outcome: Outcome::Incomplete,
    }
}
