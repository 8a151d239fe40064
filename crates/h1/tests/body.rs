//! The body decoder against the slow reference (tests/common/reference.rs),
//! at every split point, byte by byte and in random pieces.

mod common;

use bytes::BytesMut;
use citestream_h1::body::{BodyDecoder, Decoded, MAX_CHUNK_LINE};
use citestream_h1::response::Framing;
use common::reference::{Outcome, Run, reference, run};

const LIMIT: usize = 256;

/// Checks `input` whole, at every split into two pieces, and byte by byte.
fn check(framing: Framing, input: &[u8]) -> Run {
    let want = reference(framing, input, LIMIT);
    assert_eq!(
        run(framing, &[input], LIMIT),
        want,
        "whole: {:?}",
        String::from_utf8_lossy(input)
    );
    for i in 0..=input.len() {
        let (a, b) = input.split_at(i);
        assert_eq!(
            run(framing, &[a, b], LIMIT),
            want,
            "split at {i}: {:?}",
            String::from_utf8_lossy(input)
        );
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(run(framing, &bytes, LIMIT), want, "byte by byte");
    want
}

fn chunked(chunks: &[&[u8]], trailer: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    out.extend_from_slice(trailer.as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

#[test]
fn valid_chunked_bodies_decode_the_same_at_every_split() {
    let ev = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi [1]\"}}]}\n\n";
    let cases: Vec<Vec<u8>> = vec![
        chunked(&[], ""),
        chunked(&[ev, b"x", ev], ""),
        chunked(&[ev], "x-done: yes\r\nx-n: 1\r\n"),
        b"000A\r\n0123456789\r\n0\r\n\r\nHTTP/1.1 extra".to_vec(),
        b"a;name=value;other\r\n0123456789\r\n0 ;last\r\n\r\n".to_vec(),
        b"3 \t;ext=\"q\"\r\nabc\r\n0\r\n\r\n".to_vec(),
        b"00000000000000000000001\r\nZ\r\n0\r\n\r\n".to_vec(),
    ];
    for c in &cases {
        let r = check(Framing::Chunked, c);
        assert!(matches!(r.outcome, Outcome::End(_)), "{r:?}");
    }
    let r = check(Framing::Chunked, &cases[2]);
    assert_eq!(r.data, ev);
    assert_eq!(r.trailers.unwrap()["x-done"], "yes");
    assert_eq!(check(Framing::Chunked, &cases[3]).outcome, Outcome::End(14));
}

#[test]
fn broken_chunked_bodies_fail_at_the_same_byte_at_every_split() {
    let long_ext = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(MAX_CHUNK_LINE));
    let max_ext = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(MAX_CHUNK_LINE - 2));
    let big_trailer = format!("0\r\nx-a: {}\r\n\r\n", "v".repeat(LIMIT));
    let cases: Vec<&[u8]> = vec![
        b"3\nabc\r\n0\r\n\r\n",
        b"3\r\nabcX\r\n0\r\n\r\n",
        b"3\r\nabc\rX0\r\n\r\n",
        b"g\r\n",
        b"\r\n",
        b";x\r\n",
        b"3 4\r\nabc\r\n0\r\n\r\n",
        b"3;a\x01\r\nabc\r\n",
        b"3\r\x0aabc\r\n0\r\nbad trailer\r\n\r\n",
        b"10000000000000000\r\n",
        b"ffffffffffffffff\r\nab",
        b"3\r\nabc\r\n0\r\nx-a: 1\r\n folded\r\n\r\n",
        long_ext.as_bytes(),
        big_trailer.as_bytes(),
    ];
    for c in cases {
        let r = check(Framing::Chunked, c);
        assert!(
            r.outcome != Outcome::End(0),
            "{:?}: {r:?}",
            String::from_utf8_lossy(c)
        );
    }
    assert_eq!(
        check(Framing::Chunked, b"3\r\nabcX").outcome,
        Outcome::Error
    );
    assert_eq!(check(Framing::Chunked, b"3\r\nabcX").data, b"abc");
    assert_eq!(
        check(Framing::Chunked, long_ext.as_bytes()).outcome,
        Outcome::Error
    );
    assert_eq!(
        check(Framing::Chunked, max_ext.as_bytes()).outcome,
        Outcome::End(0)
    );
    assert_eq!(
        check(Framing::Chunked, big_trailer.as_bytes()).outcome,
        Outcome::Error
    );
    assert_eq!(
        check(Framing::Chunked, b"ffffffffffffffff\r\nab").data,
        b"ab",
        "the largest size is read, and its data handed over"
    );
}

#[test]
fn length_close_and_empty_bodies() {
    for n in [0u64, 1, 7, 30] {
        let input = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let r = check(Framing::Length(n), input);
        assert_eq!(r.data, &input[..n as usize]);
    }
    assert_eq!(
        check(Framing::Length(40), b"short").outcome,
        Outcome::Incomplete
    );
    assert_eq!(
        check(Framing::Close, b"until the close").data,
        b"until the close"
    );
    assert_eq!(check(Framing::Empty, b"leftover").outcome, Outcome::End(8));
}

#[test]
fn the_close_ends_only_a_close_delimited_or_ended_body() {
    let mut d = BodyDecoder::new(Framing::Close, LIMIT);
    let mut buf = BytesMut::from(&b"abc"[..]);
    assert!(matches!(d.decode(&mut buf), Ok(Decoded::Data(_))));
    assert!(d.closed().is_ok());
    assert!(d.is_done());
    for f in [Framing::Length(3), Framing::Chunked] {
        let mut d = BodyDecoder::new(f, LIMIT);
        let mut buf = BytesMut::from(&b"ab"[..]);
        let _ = d.decode(&mut buf);
        assert!(d.closed().is_err(), "{f:?}");
    }
    let mut d = BodyDecoder::new(Framing::Length(2), LIMIT);
    let mut buf = BytesMut::from(&b"ab"[..]);
    let _ = d.decode(&mut buf);
    assert!(d.is_done() && d.closed().is_ok());
}

#[test]
fn data_is_a_slice_of_the_read_buffer() {
    let mut d = BodyDecoder::new(Framing::Chunked, LIMIT);
    let mut buf = BytesMut::with_capacity(1024);
    buf.extend_from_slice(b"5\r\nhello\r\n");
    let base = buf.as_ptr() as usize;
    let Ok(Decoded::Data(b)) = d.decode(&mut buf) else {
        panic!("no data");
    };
    assert_eq!(&b[..], b"hello");
    assert_eq!(b.as_ptr() as usize, base + 3, "zero-copy");
}

/// A small deterministic generator (no dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

#[test]
fn random_bodies_and_mutations_in_random_pieces() {
    let mut rng = Lcg(7);
    for round in 0..3000 {
        let chunks: Vec<Vec<u8>> = (0..rng.next(6))
            .map(|_| {
                (0..1 + rng.next(40))
                    .map(|i| b'a' + (i % 26) as u8)
                    .collect()
            })
            .collect();
        let refs: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
        let trailer = if rng.next(3) == 0 { "x-t: 1\r\n" } else { "" };
        let mut input = chunked(&refs, trailer);
        // Half of them mutated: a byte changed, dropped or doubled.
        if round % 2 == 1 && !input.is_empty() {
            let at = rng.next(input.len());
            let alphabet = b"\r\n;0aZ \t:x\x00";
            match rng.next(3) {
                0 => input[at] = alphabet[rng.next(alphabet.len())],
                1 => drop(input.remove(at)),
                _ => input.insert(at, input[at]),
            }
        }
        let want = reference(Framing::Chunked, &input, LIMIT);
        let mut pieces = Vec::new();
        let mut rest = &input[..];
        while !rest.is_empty() {
            let (a, b) = rest.split_at(1 + rng.next(rest.len().min(12)));
            pieces.push(a);
            rest = b;
        }
        assert_eq!(
            run(Framing::Chunked, &pieces, LIMIT),
            want,
            "round {round}: {:?}",
            String::from_utf8_lossy(&input)
        );
    }
}

#[test]
fn the_chunks_a_buffer_holds_come_as_one_piece_then_the_end_or_error() {
    let mut d = BodyDecoder::new(Framing::Chunked, LIMIT);
    let mut buf = BytesMut::from(&b"3\r\nabc\r\n2;x\r\nde\r\n1\r\nf\r\n0\r\nx-t: 1\r\n\r\n"[..]);
    let base = buf.as_ptr() as usize;
    let Ok(Decoded::Data(b)) = d.decode(&mut buf) else {
        panic!("no data");
    };
    assert_eq!(&b[..], b"abcdef", "every chunk's data, together");
    assert_eq!(b.as_ptr() as usize, base + 3, "in place");
    assert!(matches!(d.decode(&mut buf), Ok(Decoded::Trailers(t)) if t["x-t"] == "1"));
    assert_eq!(d.decode(&mut buf), Ok(Decoded::End));
    assert!(buf.is_empty());
    // Data, then a broken chunk: the data, then the error.
    let mut d = BodyDecoder::new(Framing::Chunked, LIMIT);
    let mut buf = BytesMut::from(&b"3\r\nabc\r\n2\r\ndeX"[..]);
    assert_eq!(
        d.decode(&mut buf),
        Ok(Decoded::Data(bytes::Bytes::from_static(b"abcde")))
    );
    assert!(d.decode(&mut buf).is_err());
    assert!(d.decode(&mut buf).is_err(), "the error stays");
}
