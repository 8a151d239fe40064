//! Zero-copy, size and auto-trait guarantees of the public SSE types.

use std::ops::Range;

use bytes::Bytes;
use citestream::sse::{Config, Event, Frame, Parser};

fn span(b: &[u8]) -> Range<usize> {
    b.as_ptr() as usize..b.as_ptr() as usize + b.len()
}

/// `inner` lies within `outer` in memory.
fn within(inner: &[u8], outer: &[u8]) -> bool {
    let (i, o) = (span(inner), span(outer));
    o.start <= i.start && i.end <= o.end
}

fn drain(p: &mut Parser) -> Vec<Frame> {
    std::iter::from_fn(|| p.next_frame()).collect()
}

fn events(frames: Vec<Frame>) -> Vec<Event> {
    frames
        .into_iter()
        .filter_map(|f| match f {
            Frame::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

#[test]
fn events_within_one_piece_are_slices_of_it() {
    let pieces = [
        Bytes::from(b"event: a\nid: 1\ndata: {\"x\":1}\n\ndata: two\r\n\r\n".to_vec()),
        Bytes::from(b": c\n\nretry: 5\ndata: three\r\rdata: fo".to_vec()),
        Bytes::from(b"ur\n\ndata: five\n\n".to_vec()),
    ];
    let mut p = Parser::new();
    let mut got = Vec::new();
    for piece in &pieces {
        p.feed(piece.clone());
        for e in events(drain(&mut p)) {
            got.push((piece.clone(), e));
        }
    }
    assert!(p.finish().is_none());
    let datas: Vec<&[u8]> = got.iter().map(|(_, e)| e.data()).collect();
    assert_eq!(
        datas,
        [&b"{\"x\":1}"[..], b"two", b"three", b"four", b"five"]
    );
    for (piece, e) in &got {
        if e.data() == b"four" {
            // Spans two pieces: gathered, so a slice of neither.
            assert!(!pieces.iter().any(|p| within(e.raw(), p)));
            assert_eq!(&e.raw()[..], b"data: four\n\n");
            continue;
        }
        assert!(within(e.raw(), piece), "{e:?} is not a slice of its piece");
        assert!(within(e.data(), e.raw()));
        assert_eq!(e.data_bytes().as_ptr(), e.data().as_ptr());
        let r = e.data_range().expect("single data line");
        assert_eq!(&e.raw()[r], e.data());
        if let Some(t) = e.event_field() {
            assert!(within(t, e.raw()));
        }
        if let Some(i) = e.id_field() {
            assert!(within(i, e.raw()));
        }
    }
    // The first event: its fields are slices of the input too.
    let first = &got[0].1;
    assert_eq!(first.event_type(), b"a");
    assert!(within(first.event_type(), &pieces[0]));
    assert!(within(first.last_event_id(), &pieces[0]));
}

#[test]
fn unchanged_events_re_emit_their_exact_bytes() {
    let input = Bytes::from_static(
        b"\xEF\xBB\xBF: hi\r\nid:7\r\nevent:  x \r\ndata:a\r\ndata:  b\r\n\r\n\ndata:\xFF\r\r",
    );
    let mut p = Parser::new();
    p.feed(input.clone());
    let frames = drain(&mut p);
    let raws: Vec<&[u8]> = frames.iter().map(|f| &f.raw()[..]).collect();
    assert_eq!(
        raws,
        [
            &b"\xEF\xBB\xBF: hi\r\nid:7\r\nevent:  x \r\ndata:a\r\ndata:  b\r\n\r\n"[..],
            b"\n",
            b"data:\xFF\r\r",
        ]
    );
    let Frame::Event(e) = &frames[0] else {
        panic!("{:?}", frames[0])
    };
    assert_eq!(e.event_type(), b" x ");
    assert_eq!(e.data(), b"a\n b");
    assert_eq!(e.data_range(), None);
    assert_eq!(e.last_event_id(), b"7");
    assert!(matches!(frames[1], Frame::Skipped(_)));
    let Frame::Event(e) = &frames[2] else {
        panic!("{:?}", frames[2])
    };
    assert_eq!(e.data_str(), "\u{FFFD}");
}

#[test]
fn public_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Parser>();
    send_sync::<Event>();
    send_sync::<Frame>();
    send_sync::<Config>();
    fn unpin<T: Unpin>() {}
    unpin::<Parser>();
    unpin::<Event>();
}

#[test]
fn event_and_frame_stay_small() {
    // Event: raw Bytes (32) + data (32) + event and id ranges (2 x 24) +
    // retry (16) + last event ID Bytes (32) = 160 on 64-bit targets; a Frame
    // adds no tag of its own.
    if cfg!(target_pointer_width = "64") {
        assert!(size_of::<Event>() <= 160, "Event is {}", size_of::<Event>());
        assert!(size_of::<Frame>() <= 160, "Frame is {}", size_of::<Frame>());
        // The parser also holds the last gathered frame and joined data
        // (2 x 32) so frames can be lent without touching reference counts.
        assert!(
            size_of::<Parser>() <= 448,
            "Parser is {}",
            size_of::<Parser>()
        );
    }
    assert!(size_of::<Option<Frame>>() <= size_of::<Frame>() + size_of::<usize>());
}

#[test]
fn config_limit_round_trips() {
    let mut c = Config::new();
    assert_eq!(
        c.get_max_event_size(),
        citestream::sse::DEFAULT_MAX_EVENT_SIZE
    );
    c.max_event_size(10).max_event_size(11);
    assert_eq!(c.get_max_event_size(), 11);
    assert_eq!(Config::default(), Config::new());
}

/// The default limit is documented as 1 MiB: an event of exactly that size
/// is dispatched, one byte more is not.
#[test]
fn default_limit_is_inclusive_and_enforced() {
    let limit = citestream::sse::DEFAULT_MAX_EVENT_SIZE;
    assert_eq!(limit, 1 << 20);
    for (extra, dispatched) in [(0, true), (1, false)] {
        // "data: " + payload + "\n" is the event's size.
        let payload = limit - 7 + extra;
        let mut input = b"data: ".to_vec();
        input.resize(6 + payload, b'x');
        input.extend_from_slice(b"\n\ndata: after\n\n");
        let input = Bytes::from(input);
        for read in [1460, input.len()] {
            let mut p = Parser::new();
            let mut frames = Vec::new();
            let mut rest = input.clone();
            while !rest.is_empty() {
                p.feed(rest.split_to(read.min(rest.len())));
                frames.extend(drain(&mut p));
                assert!(p.buffered() <= limit + 2);
            }
            let evs = events(frames);
            let datas: Vec<usize> = evs.iter().map(|e| e.data().len()).collect();
            if dispatched {
                assert_eq!(datas, [payload, 5], "read {read}");
            } else {
                assert_eq!(datas, [5], "read {read}");
            }
        }
    }
}

/// The frames of `input` cut at `cuts`, with the event size limit `max`,
/// as (kind, raw bytes, data) with what depends on the cuts merged: a
/// [`Frame::LineEnd`] into the frame before it, adjacent oversized pieces
/// into one. Then the unterminated tail.
fn frames_cut(input: &[u8], cuts: &[usize], max: usize) -> (Vec<Shown>, Option<Bytes>) {
    let mut c = Config::new();
    c.max_event_size(max);
    let mut p = Parser::with_config(&c);
    let mut frames: Vec<Shown> = Vec::new();
    let mut at = 0;
    for &cut in cuts.iter().chain([&input.len()]) {
        p.feed(Bytes::copy_from_slice(&input[at..cut]));
        at = cut;
        for f in drain(&mut p) {
            let (kind, data) = match &f {
                Frame::Event(e) => ("event", e.data().to_vec()),
                Frame::Skipped(_) => ("skipped", Vec::new()),
                Frame::Oversized(_) => ("oversized", Vec::new()),
                Frame::LineEnd(_) => ("line end", Vec::new()),
            };
            match frames.last_mut() {
                Some(last) if kind == "line end" || (kind == "oversized" && last.0 == kind) => {
                    last.1.extend_from_slice(f.raw());
                }
                _ => frames.push((kind, f.raw().to_vec(), data)),
            }
        }
    }
    (frames, p.finish())
}

/// A frame as [`frames_cut`] shows it.
type Shown = (&'static str, Vec<u8>, Vec<u8>);

/// Comment blocks at a block start take their own quick step (a comment
/// line, then a blank line, whole in the piece: skipped at once; else the
/// line consumed and the general loop goes on). Under every two cuts the
/// frames are those of one-byte reads (where no line end is ever in the
/// piece, so the general loop does all the work), for blocks of every
/// shape around it: CR and CRLF ends, a comment before fields, several
/// comments, a comment block at and over the limit.
#[test]
fn comment_blocks_match_the_general_path_under_every_split() {
    let input: &[u8] = b": OPENROUTER PROCESSING\n\ndata: a\n\n:\n\n: c\r\n\r\n:x\r\r\
        : one\n: two\ndata: b\n\n: then data\ndata: c\n\n: 012345678901234567890123456\n\n\
        : 0123456789012345678901234567\n\n:tail";
    let max = 30;
    let cuts: Vec<usize> = (1..input.len()).collect();
    let bytewise = frames_cut(input, &cuts, max);
    let kinds: Vec<&str> = bytewise.0.iter().map(|f| f.0).collect();
    assert_eq!(
        kinds,
        [
            "skipped",
            "event",
            "skipped",
            "skipped",
            "skipped",
            "event",
            "event",
            "skipped",
            "oversized"
        ]
    );
    assert_eq!(bytewise.0[0].1, b": OPENROUTER PROCESSING\n\n");
    assert_eq!(bytewise.1.as_deref(), Some(&b":tail"[..]));
    for i in 0..=input.len() {
        for j in i..=input.len() {
            assert_eq!(frames_cut(input, &[i, j], max), bytewise, "cuts {i} {j}");
        }
    }
}
