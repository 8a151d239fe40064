//! The gateway's HTTP/1 response reading (`citestream-h1`) on arbitrary
//! bytes split at arbitrary points: no panic; the response head parsed from
//! pieces is the head parsed at once (or the same error, never a head that
//! the whole input does not have); the body decoded from pieces is the
//! slow reference's (crates/h1/tests/common/reference.rs) data, trailers,
//! end and error, with nothing that has arrived held back after any piece.
#![no_main]

use arbitrary::Arbitrary;
use citestream_h1::response::{self, Framing};
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/h1/tests/common/reference.rs"]
#[allow(dead_code, unreachable_pub)]
mod reference;

#[derive(Arbitrary, Debug)]
struct Case {
    /// 0: a whole response (head, then its body); else the body alone,
    /// framed as chunked (1, 2), by length (3) or by the close (4).
    mode: u8,
    length: u16,
    /// The head and trailer size limit, above 16 bytes.
    limit: u8,
    to_head: bool,
    cuts: Vec<u16>,
    data: Vec<u8>,
}

/// `data` cut at `cuts`.
fn pieces<'a>(data: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts {
        let c = c.clamp(at, data.len());
        out.push(&data[at..c]);
        at = c;
    }
    out.push(&data[at..]);
    out
}

fuzz_target!(|case: Case| {
    let limit = 16 + usize::from(case.limit);
    let data = &case.data[..];
    let cuts = citestream::fuzzing::cuts(&case.cuts, data.len());
    let (framing, body) = match case.mode % 5 {
        0 => {
            let whole = response::parse(data, case.to_head, limit);
            // The same from the pieces, as a connection reads them.
            let mut seen = 0;
            let mut piecewise = Ok(None);
            for p in pieces(data, &cuts) {
                seen += p.len();
                piecewise = response::parse(&data[..seen], case.to_head, limit);
                if !matches!(piecewise, Ok(None)) {
                    break;
                }
            }
            match (&whole, &piecewise) {
                (Ok(Some((a, n))), Ok(Some((b, m)))) => {
                    assert_eq!(a, b);
                    assert_eq!(n, m);
                }
                (Err(a), Err(b)) => assert_eq!(a, b),
                (Ok(None), Ok(None)) => {}
                _ => panic!("at once {whole:?}, in pieces {piecewise:?}"),
            }
            let Ok(Some((head, n))) = whole else {
                return;
            };
            assert!(n <= limit && n <= data.len());
            (head.framing, &data[n..])
        }
        1 | 2 => (Framing::Chunked, data),
        3 => (Framing::Length(u64::from(case.length)), data),
        _ => (Framing::Close, data),
    };
    let body_cuts = citestream::fuzzing::cuts(&case.cuts, body.len());
    let want = reference::reference(framing, body, limit);
    let got = reference::run(framing, &pieces(body, &body_cuts), limit);
    assert_eq!(got, want);
});
