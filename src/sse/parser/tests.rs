//! Tests of [`Parser`](super::Parser): the quick layers against the general
//! path under every split, limits, gathering and the fused path's `skip`.

use super::*;

/// (type, data, last event id) of each event.
fn fields(frames: &[Frame]) -> Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    frames
        .iter()
        .filter_map(|f| match f {
            Frame::Event(e) => Some((
                e.event_type().to_vec(),
                e.data().to_vec(),
                e.last_event_id().to_vec(),
            )),
            _ => None,
        })
        .collect()
}

fn parse_all(input: &[u8], pieces: &[usize]) -> (Vec<Frame>, Option<Bytes>) {
    let mut p = Parser::new();
    let mut frames = Vec::new();
    let mut at = 0;
    for &n in pieces {
        let end = (at + n).min(input.len());
        p.feed(Bytes::copy_from_slice(&input[at..end]));
        at = end;
        while let Some(f) = p.next_frame() {
            frames.push(f);
        }
    }
    p.feed(Bytes::copy_from_slice(&input[at..]));
    while let Some(f) = p.next_frame() {
        frames.push(f);
    }
    (frames, p.finish())
}

fn concat(frames: &[Frame], tail: &Option<Bytes>) -> Vec<u8> {
    let mut v: Vec<u8> = frames.iter().flat_map(|f| f.raw().to_vec()).collect();
    if let Some(t) = tail {
        v.extend_from_slice(t);
    }
    v
}

/// `clean_rest` + `skip` leave the parser where dispatching the
/// skipped events would, across pieces and after gathered blocks.
#[test]
fn skipping_clean_events_matches_dispatching_them() {
    let ev = b"data: {\"a\":1}\n\n";
    let mut p = Parser::new();
    // The BOM is undecided at the start: no clean rest yet.
    p.feed(Bytes::from_static(b"data: x\n\n"));
    assert!(p.clean_rest().is_none());
    assert!(matches!(p.next_frame(), Some(Frame::Event(_))));
    // Used up on a block boundary, a queued piece is next.
    p.feed(Bytes::copy_from_slice(
        &[&ev[..], &ev[..], b"data: tail"].concat(),
    ));
    let (piece, at) = p.clean_rest().expect("clean");
    assert_eq!((at, &piece[..ev.len()]), (0, &ev[..]));
    p.skip(2 * ev.len());
    assert!(p.clean_rest().is_some());
    assert!(p.next_frame().is_none(), "the tail is unterminated");
    // Mid-block: nothing clean until the block ends.
    assert!(p.clean_rest().is_none());
    p.feed(Bytes::from_static(b"\n\r"));
    let Some(Frame::Event(e)) = p.next_frame() else {
        panic!()
    };
    assert_eq!(e.data(), b"tail");
    // A CR that may pair with the next piece's LF: not clean.
    assert!(p.clean_rest().is_none());
    p.feed(Bytes::copy_from_slice(&[&b"\n"[..], &ev[..]].concat()));
    assert!(matches!(p.next_frame(), Some(Frame::LineEnd(_))));
    let (piece, at) = p.clean_rest().expect("clean");
    assert_eq!(&piece[at..], &ev[..]);
    p.skip(ev.len());
    assert!(p.next_frame().is_none());
    assert!(p.clean_rest().is_none(), "nothing left");
    assert!(p.finish().is_none());
    assert_eq!(p.max_event_size(), DEFAULT_MAX_EVENT_SIZE);
}

/// Every frame through `next_frame_ref` (as owned frames) or
/// `next_frame`, the input cut at `cuts`.
fn drive(input: &[u8], cuts: &[usize], by_ref: bool) -> (Vec<Frame>, Option<Bytes>) {
    let mut c = Config::new();
    c.max_event_size(40);
    drive_with(Parser::with_config(&c), input, cuts, by_ref)
}

/// [`drive`] with the parser `p`.
fn drive_with(
    mut p: Parser,
    input: &[u8],
    cuts: &[usize],
    by_ref: bool,
) -> (Vec<Frame>, Option<Bytes>) {
    let mut frames = Vec::new();
    let mut at = 0;
    for &cut in cuts.iter().chain([&input.len()]) {
        p.feed(Bytes::copy_from_slice(&input[at..cut]));
        at = cut;
        loop {
            let f = if by_ref {
                p.next_frame_ref().map(|f| f.to_frame())
            } else {
                p.next_frame()
            };
            let Some(f) = f else { break };
            frames.push(f);
        }
    }
    (frames, p.finish())
}

/// The quick path (its own entry in `next_frame_ref`, its continuation
/// of a `data` line across pieces) hands out what `next_frame` does, and
/// both what a one-piece parse does, under every two cuts; the blocks
/// mix the quick shapes (`data:` and `event:` with and without the
/// optional space) with ones it declines halfway (a second `data` line, an
/// `id` after `event`, CR line ends, one over the limit).
#[test]
fn quick_path_matches_the_general_path_under_every_split() {
    let input: &[u8] = b"data: a\n\nevent: e\ndata:b\r\n\r\ndata: c\ndata: d\n\n\
        event:x\nid: 7\ndata: e\n\ndata: 0123456789012345678901234567890123456789\n\n\
        event:y\ndata: h\n\ndata:  f\r\rdata: g";
    let whole = drive(input, &[], false);
    assert_eq!(fields(&whole.0).len(), 6);
    for i in 0..=input.len() {
        for j in i..=input.len() {
            let by_ref = drive(input, &[i, j], true);
            assert_eq!(by_ref, drive(input, &[i, j], false), "split {i} {j}");
            assert_eq!(fields(&by_ref.0), fields(&whole.0), "split {i} {j}");
            assert_eq!(concat(&by_ref.0, &by_ref.1), input, "split {i} {j}");
        }
    }
}

/// A gathered frame lent by `next_frame_ref` (no `piece`) is the one
/// `take_gathered` hands out afterwards, once; a frame within a piece has
/// none to take. Under every two cuts, taking (every gathered frame, or
/// every other one, leaving the rest to be let go of in place) or not,
/// the frames are `next_frame`'s, with oversized blocks, CR line ends and
/// several `data` lines in the mix.
#[test]
fn gathered_frames_are_taken_once_under_every_split() {
    let input: &[u8] = b"data: a\n\nevent: e\ndata:b\r\n\r\ndata: c\ndata: d\n\n\
        : ping\n\nevent:x\nid: 7\ndata: e\n\ndata: 0123456789012345678901234567890123456789\n\n\
        event:y\ndata: h\n\ndata:  f\r\rdata: g";
    for i in 0..=input.len() {
        for j in i..=input.len() {
            let want = drive(input, &[i, j], false);
            for every in [1, 2] {
                let mut c = Config::new();
                c.max_event_size(40);
                let mut p = Parser::with_config(&c);
                let (mut frames, mut gathered, mut at) = (Vec::new(), 0, 0);
                for cut in [i, j, input.len()] {
                    p.feed(Bytes::copy_from_slice(&input[at..cut]));
                    at = cut;
                    while let Some(f) = p.next_frame_ref() {
                        let (frame, lent) = (f.to_frame(), f.piece().is_none());
                        assert_eq!(&f.raw_bytes()[..], f.raw(), "split {i} {j}");
                        if lent {
                            gathered += 1;
                        }
                        if !lent || gathered % every == 0 {
                            let taken = p.take_gathered();
                            assert_eq!(taken.as_ref(), lent.then_some(frame.raw()));
                            assert!(p.take_gathered().is_none(), "split {i} {j}");
                        }
                        frames.push(frame);
                    }
                }
                assert_eq!((frames, p.finish()), want, "split {i} {j} every {every}");
            }
        }
    }
}

/// A line cut within its `data: ` prefix (or right after it) goes on in
/// the next piece as a `data` line left open does, when it is the block's
/// first `data` line with no `id` or `retry` before it; lines that only
/// look like one (`data` without a colon, a `dat` field, a second `data`
/// line, after an `id`) stay the general loop's. Under every two cuts (a
/// short middle piece takes the small-read path), both read paths hand out
/// what a one-piece parse does.
#[test]
fn data_lines_cut_in_their_prefix_read_the_same_under_every_split() {
    let input: &[u8] = b"data: 0123456789012345678901234567890123\n\ndata:x\n\n\
        event: e\ndata: zz\n\nid: 1\ndata: w\n\ndata\n\ndat: q\n\ndata:\n\n\
        data: a\ndata: b\n\n: c\ndata: v\n\nretry: 5\ndata: r\n\n";
    let whole = parse_all(input, &[]);
    assert_eq!(fields(&whole.0).len(), 9);
    for i in 0..=input.len() {
        for j in i..=input.len() {
            for by_ref in [false, true] {
                let (frames, tail) = drive_with(Parser::new(), input, &[i, j], by_ref);
                assert_eq!(fields(&frames), fields(&whole.0), "split {i} {j}");
                assert_eq!(concat(&frames, &tail), input, "split {i} {j}");
                assert_eq!(frames, whole.0, "split {i} {j}");
            }
        }
    }
}

/// Pieces queued before the parser is drained (the general loop then goes
/// on into the queued pieces while `cur` is lent, see `State::advance`):
/// `next_frame_ref` and `next_frame` hand out the same frames as a
/// one-piece parse under every two cuts, with the last piece fed after
/// the first frame is read; between reads, `clean_rest` shows only bytes
/// not yet handed out.
#[test]
fn queued_pieces_read_the_same_under_every_split() {
    let input: &[u8] = b"data: a\n\nevent: e\ndata:b\r\n\r\ndata: c\ndata: d\n\n\
        : ping\n\nevent:x\nid: 7\ndata: e\n\ndata: 0123456789012345678901234567890123456789\n\n\
        event:y\ndata: h\n\ndata:  f\r\rdata: g";
    let whole = drive(input, &[], false);
    let read = |p: &mut Parser, by_ref: bool| {
        if by_ref {
            p.next_frame_ref().map(|f| f.to_frame())
        } else {
            p.next_frame()
        }
    };
    for i in 0..=input.len() {
        for j in i..=input.len() {
            let mut runs = Vec::new();
            for by_ref in [true, false] {
                let mut c = Config::new();
                c.max_event_size(40);
                let mut p = Parser::with_config(&c);
                p.feed(Bytes::copy_from_slice(&input[..i]));
                p.feed(Bytes::copy_from_slice(&input[i..j]));
                let mut frames: Vec<Frame> = read(&mut p, by_ref).into_iter().collect();
                p.feed(Bytes::copy_from_slice(&input[j..]));
                loop {
                    let out: usize = frames.iter().map(|f| f.raw().len()).sum();
                    if let Some((piece, at)) = p.clean_rest() {
                        let rest = &piece[at..];
                        assert_eq!(rest, &input[out..][..rest.len()], "split {i} {j}");
                    }
                    let Some(f) = read(&mut p, by_ref) else { break };
                    frames.push(f);
                }
                let tail = p.finish();
                assert_eq!(fields(&frames), fields(&whole.0), "split {i} {j}");
                assert_eq!(concat(&frames, &tail), input, "split {i} {j}");
                runs.push((frames, tail));
            }
            assert_eq!(runs[0], runs[1], "split {i} {j}");
        }
    }
}

/// Events around the size limit (`data` lines ending just under, at and
/// just over it, with an event line or not): split anywhere (the line
/// continued in the next piece), the same frames as a one-piece parse.
#[test]
fn limit_edges_read_the_same_under_every_split() {
    for k in 30..=36 {
        for event in [&b""[..], b"event: e\n"] {
            let mut input = event.to_vec();
            input.extend_from_slice(b"data: ");
            input.resize(input.len() + k, b'x');
            input.extend_from_slice(b"\n\ndata: y\n\n");
            let whole = drive(&input, &[], false);
            for i in 0..=input.len() {
                for by_ref in [true, false] {
                    let split = drive(&input, &[i], by_ref);
                    assert_eq!(fields(&split.0), fields(&whole.0), "k {k} split {i}");
                    assert_eq!(concat(&split.0, &split.1), input, "k {k} split {i}");
                }
            }
        }
    }
}

#[test]
fn single_event_is_a_slice_of_the_input() {
    let input = Bytes::from_static(b"data: x\n\n");
    let mut p = Parser::new();
    p.feed(input.clone());
    let Some(Frame::Event(e)) = p.next_frame() else {
        panic!()
    };
    assert_eq!(e.raw().as_ptr(), input.as_ptr());
    assert_eq!(e.data(), b"x");
    assert_eq!(e.data_range(), Some(6..7));
}

#[test]
fn split_cr_lf_yields_line_end_frame() {
    let (frames, tail) = parse_all(b"data: a\r\n\r\ndata: b\n\n", &[10]);
    assert!(matches!(&frames[0], Frame::Event(e) if e.data() == b"a"));
    assert!(matches!(&frames[1], Frame::LineEnd(b) if &b[..] == b"\n"));
    assert!(matches!(&frames[2], Frame::Event(e) if e.data() == b"b"));
    assert!(tail.is_none());
}

#[test]
fn every_split_is_lossless() {
    let input: &[u8] = b"\xEF\xBB\xBFid: 1\r\ndata: a\r\ndata: b\r\r: c\n\nevent: x\rdata\n\nretry: 5\n\ndata: tail";
    let (whole, whole_tail) = parse_all(input, &[]);
    for i in 0..=input.len() {
        for j in i..=input.len() {
            let (frames, tail) = parse_all(input, &[i, j - i]);
            assert_eq!(concat(&frames, &tail), input, "split {i} {j}");
            assert_eq!(fields(&frames), fields(&whole), "split {i} {j}");
            assert_eq!(tail, whole_tail);
        }
    }
    assert_eq!(whole.len(), 4);
}

#[test]
fn oversized_is_forwarded_and_resynchronised() {
    let mut c = Config::new();
    c.max_event_size(12);
    let input: &[u8] = b"data: 0123456789\ndata: more\n\ndata: ok\n\n";
    for split in 0..=input.len() {
        let mut p = Parser::with_config(&c);
        let mut frames = Vec::new();
        p.feed(Bytes::copy_from_slice(&input[..split]));
        while let Some(f) = p.next_frame() {
            frames.push(f);
        }
        p.feed(Bytes::copy_from_slice(&input[split..]));
        while let Some(f) = p.next_frame() {
            frames.push(f);
        }
        assert!(p.finish().is_none());
        assert_eq!(concat(&frames, &None), input);
        let evs: Vec<_> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::Event(e) => Some(e.data().to_vec()),
                _ => None,
            })
            .collect();
        assert_eq!(evs, vec![b"ok".to_vec()], "split {split}");
        assert!(p.buffered() <= 12 + 2);
    }
}

/// Blocks larger than the gathering buffer's first reservation and
/// than one copy step (a long `data` line, a long multi-line block),
/// gathered across pieces of several sizes: the same frames through
/// `next_frame` and `next_frame_ref` as a one-piece parse.
#[test]
fn large_blocks_gather_the_same_under_every_read_size() {
    let mut input = b"data: a\n\ndata: ".to_vec();
    input.extend((0..10_000).map(|i| b"xyz"[i % 3]));
    input.extend_from_slice(b"\n\nevent: e\n");
    for _ in 0..300 {
        input.extend_from_slice(b"data: 0123456789\n: c\n");
    }
    input.extend_from_slice(b"\ndata: tail\n\n");
    let whole = parse_all(&input, &[]);
    assert_eq!(fields(&whole.0).len(), 4);
    for read in [1, 7, 1460, 3000, 4001, 5000] {
        let cuts: Vec<usize> = (1..)
            .map(|k| k * read)
            .take_while(|&c| c < input.len())
            .collect();
        for by_ref in [false, true] {
            let (frames, tail) = drive_with(Parser::new(), &input, &cuts, by_ref);
            assert_eq!(fields(&frames), fields(&whole.0), "read {read}");
            assert_eq!(concat(&frames, &tail), input, "read {read}");
        }
    }
}

#[test]
fn memory_stays_bounded_on_a_long_line_after_a_split() {
    let mut c = Config::new();
    c.max_event_size(100);
    let mut p = Parser::with_config(&c);
    p.feed(Bytes::from_static(b"data: ab"));
    assert!(p.next_frame().is_none());
    let mut big = vec![b'x'; 10_000];
    big.extend_from_slice(b"\n\ndata: ok\n\n");
    p.feed(Bytes::from(big));
    let mut frames = Vec::new();
    while let Some(f) = p.next_frame() {
        assert!(p.buffered() <= 100);
        frames.push(f);
    }
    let last = frames.pop().unwrap();
    assert!(matches!(last, Frame::Event(e) if e.data() == b"ok"));
    assert!(frames.iter().all(|f| matches!(f, Frame::Oversized(_))));
    let total: usize = frames.iter().map(|f| f.raw().len()).sum();
    assert_eq!(total, 8 + 10_000 + 2);
}
