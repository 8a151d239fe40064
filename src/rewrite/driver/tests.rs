//! Tests of the driver ([`SseRewriter`], [`Out`]) with a toy handler.

use super::*;
use crate::sse::{Config, DEFAULT_MAX_EVENT_SIZE};

/// Passes every frame, re-framing (as a handler may) events whose data
/// is `x`, and counts what it saw.
#[derive(Default)]
struct Echo {
    out: Out,
    frames: usize,
    ended: usize,
    fast: bool,
    /// Tails that start `data: a` are [`Tail::Started`] (else `Maybe`).
    resume: bool,
    fast_frames: usize,
}

/// The event [`Echo`] recognises.
const A: &[u8] = b"data: a\n\n";

impl Handler for Echo {
    const NAME: &'static str = "Echo";
    const FUSED: bool = true;
    /// Recognises `data: a` events when `fast` is on.
    fn fast_events(&mut self, rest: &[u8], max_event: usize) -> usize {
        let mut n = 0;
        while self.fast && rest[n..].starts_with(A) && A.len() - 1 <= max_event {
            self.fast_frames += 1;
            n += A.len();
        }
        n
    }
    /// Holds any tail the driver offers when `fast` is on; with `resume`,
    /// the start of `data: a` is [`Tail::Started`].
    fn fast_tail(&mut self, tail: &[u8]) -> Tail {
        match (self.fast, self.resume) {
            (false, _) => Tail::No,
            (true, true) if tail.len() < A.len() && A.starts_with(tail) => Tail::Started,
            (true, _) => Tail::Maybe,
        }
    }
    /// The rest of `data: a` after a started tail.
    fn fast_straddle(&mut self, tail: &[u8], head: &[u8], limit: usize) -> usize {
        assert!(self.resume && A.starts_with(tail), "only after a start");
        if !head.starts_with(&A[tail.len()..]) || A.len() > limit {
            return 0;
        }
        self.fast_frames += 1;
        A.len() - tail.len()
    }
    fn handle(&mut self, f: &FrameRef<'_>) {
        self.frames += 1;
        if f.kind() == FrameKind::Event && f.data() == b"x" {
            self.out.swallow_line_end = f.raw().ends_with(b"\r");
            self.out.push(Bytes::from_static(b"data: y\n\n"));
        } else {
            self.out.pass(f);
        }
    }
    fn out(&mut self) -> &mut Out {
        &mut self.out
    }
    fn end(&mut self) {
        self.ended += 1;
    }
    fn sources_emitted(&self) -> bool {
        false
    }
    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("frames", &self.frames);
    }
}

fn echo() -> SseRewriter<Echo> {
    SseRewriter::with_handler(Parser::with_config(&Config::new()), Echo::default())
}

/// An [`echo`] with the event size limit `max`, the fused path `fast`
/// and started tails `resume`.
fn echo_with(max: usize, fast: bool, resume: bool) -> SseRewriter<Echo> {
    let mut c = Config::new();
    c.max_event_size(max);
    let mut r = SseRewriter::with_handler(Parser::with_config(&c), Echo::default());
    r.h.fast = fast;
    r.h.resume = resume;
    r
}

/// How [`feed_all`] hands the pieces over.
#[derive(Clone, Copy, Debug)]
enum Feed {
    /// `feed`, draining after each piece.
    Drained,
    /// `feed_slice`, draining after each piece.
    Slices,
    /// `feed`, draining only at the end (after `finish`).
    Late,
}

/// The output for `input` cut at `cuts` (sorted offsets).
fn feed_all<H: Handler>(
    r: &mut SseRewriter<H>,
    input: &[u8],
    cuts: &[usize],
    how: Feed,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain([&input.len()]) {
        let piece = &input[at..c];
        at = c;
        match how {
            Feed::Slices => r.feed_slice(piece),
            _ => r.feed(Bytes::copy_from_slice(piece)),
        }
        if !matches!(how, Feed::Late) {
            out.extend(drain(r).concat());
        }
    }
    r.finish();
    out.extend(drain(r).concat());
    out
}

fn drain<H: Handler>(r: &mut SseRewriter<H>) -> Vec<Bytes> {
    std::iter::from_fn(|| r.next_output()).collect()
}

#[test]
fn pass_through_frames_of_one_piece_go_out_as_one_slice() {
    let mut r = echo();
    let piece = Bytes::from_static(b"data: a\n\n: c\n\ndata: b\n\n");
    r.feed(piece.clone());
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0], piece);
    // A slice of the input, not a copy.
    assert_eq!(out[0].as_ptr(), piece.as_ptr());
    assert_eq!(r.h.frames, 3);
}

/// Events the fused path takes go out exactly as the parsed ones, in
/// order, under any split; a piece taken whole goes out as itself.
#[test]
fn the_fused_path_gives_the_parsed_output() {
    let input: &[u8] =
        b"data: a\n\ndata: a\n\n: c\n\ndata: a\n\ndata: x\r\rdata: a\n\ndata: a\r\n\r\ndata: a\n\ndata: b";
    let run = |fast: bool, cuts: &[usize]| {
        let mut r = echo();
        r.h.fast = fast;
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain([&input.len()]) {
            r.feed(Bytes::copy_from_slice(&input[at..c]));
            at = c;
            out.extend(drain(&mut r));
        }
        r.finish();
        out.extend(drain(&mut r));
        (out.concat(), r.h.fast_frames)
    };
    let (want, none) = run(false, &[]);
    assert_eq!(none, 0);
    for i in 0..=input.len() {
        for j in i..=input.len() {
            assert_eq!(run(true, &[i, j]).0, want, "cuts {i} {j}");
        }
    }
    // The BOM is decided by the first frame; the rest is fused.
    assert!(run(true, &[]).1 >= 3);
    let mut r = echo();
    r.h.fast = true;
    r.feed(Bytes::from_static(b": start\n\n"));
    assert_eq!(drain(&mut r).concat(), b": start\n\n");
    let piece = Bytes::from_static(b"data: a\n\ndata: a\n\n");
    r.feed(piece.clone());
    let out = drain(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].as_ptr(), piece.as_ptr(), "the piece itself");
    assert_eq!(r.h.fast_frames, 2);
}

#[test]
fn our_bytes_split_runs_and_keep_order() {
    let mut r = echo();
    r.feed(Bytes::from_static(b"data: a\n\ndata: x\n\ndata: b\n\n"));
    let out = drain(&mut r);
    assert_eq!(
        out,
        [&b"data: a\n\n"[..], b"data: y\n\n", b"data: b\n\n"].map(Bytes::from_static)
    );
}

#[test]
fn split_crlf_after_a_reframed_event_is_dropped() {
    let mut r = echo();
    r.feed(Bytes::from_static(b"data: x\r\n\r"));
    let mut out = drain(&mut r);
    r.feed(Bytes::from_static(b"\ndata: b\r\n\r\n"));
    out.extend(drain(&mut r));
    r.finish();
    out.extend(drain(&mut r));
    assert_eq!(out.concat(), b"data: y\n\ndata: b\r\n\r\n");
}

#[test]
fn finish_handles_undrained_frames_then_the_tail_once() {
    let mut r = echo();
    r.feed(Bytes::from_static(b"data: a\n\ndata: unterminated"));
    r.finish();
    r.finish();
    assert_eq!(r.h.ended, 1);
    assert_eq!(drain(&mut r).concat(), b"data: a\n\ndata: unterminated");
    assert!(format!("{r:?}").starts_with("Echo { parser: "));
}

#[test]
fn tiny_pieces_and_slices_give_the_same_output() {
    let input: &[u8] =
        b"data: a\n\n: c\r\n\r\ndata: x\r\rdata: a longer line\n\nid: 7\ndata: b\n\ndata: tail";
    let mut r = echo();
    r.feed(Bytes::copy_from_slice(input));
    r.finish();
    let want = drain(&mut r).concat();
    for size in [1, 2, 3, 16, 17] {
        for slices in [false, true] {
            let mut r = echo();
            let mut out = Vec::new();
            for piece in input.chunks(size) {
                if slices {
                    r.feed_slice(piece);
                } else {
                    r.feed(Bytes::copy_from_slice(piece));
                }
                out.extend(drain(&mut r));
            }
            r.finish();
            out.extend(drain(&mut r));
            assert_eq!(out.concat(), want, "size {size}, slices {slices}");
        }
    }
}

#[test]
fn an_absorbed_piece_keeps_undrained_output() {
    let mut r = echo();
    r.feed(Bytes::from_static(b"data: a\n\ndata: x\n\n"));
    let mut out = vec![r.next_output().unwrap()];
    // Not drained to `None`: the rest must still come out.
    r.feed_slice(b"da");
    r.feed_slice(b"ta: b");
    out.extend(drain(&mut r));
    r.feed(Bytes::from_static(b"\n\n"));
    out.extend(drain(&mut r));
    r.finish();
    out.extend(drain(&mut r));
    assert_eq!(out.concat(), b"data: a\n\ndata: y\n\ndata: b\n\n");
}

/// Events straddling two pieces, held back from the parser and completed
/// by the next piece, give the parsed output under every two cuts, fed as
/// pieces or slices, drained or finished first, within and over the size
/// limit: hits (`data: a`), misses (other data, a re-framed event, CRLF, a
/// second line, a comment), a tail ending in the line's LF, and an
/// unterminated last event held at `finish`.
#[test]
fn held_tails_give_the_parsed_output_under_every_split() {
    let input: &[u8] = b"data: a\n\ndata: a\n\ndata: b\n\ndata: a\n\ndata: x\r\n\r\ndata: a\n\n\
        data: a\r\n\r\ndata: a\ndata: a\n\n: c\n\ndata: a\n\ndata: a\n\ndata: a";
    for (max, resume) in [DEFAULT_MAX_EVENT_SIZE, 8, 7]
        .into_iter()
        .flat_map(|m| [(m, false), (m, true)])
    {
        let want = feed_all(&mut echo_with(max, false, false), input, &[], Feed::Drained);
        for i in 0..=input.len() {
            for j in i..=input.len() {
                for how in [Feed::Drained, Feed::Slices, Feed::Late] {
                    let mut r = echo_with(max, true, resume);
                    let got = feed_all(&mut r, input, &[i, j], how);
                    assert_eq!(got, want, "max {max} {resume}, cuts {i} {j}, {how:?}");
                }
            }
        }
        for size in 1..=input.len() {
            let cuts: Vec<usize> = (size..input.len()).step_by(size).collect();
            for how in [Feed::Drained, Feed::Slices, Feed::Late] {
                let got = feed_all(&mut echo_with(max, true, resume), input, &cuts, how);
                assert_eq!(got, want, "max {max} {resume}, pieces of {size}, {how:?}");
            }
        }
    }
}

/// A straddling event the fused path takes goes out as two slices (the
/// tail of the first piece, the head of the second), not gathered: no
/// parse, no copy.
#[test]
fn a_straddling_event_goes_out_as_two_slices() {
    for resume in [false, true] {
        straddling_event_goes_out_as_two_slices(resume);
    }
}

fn straddling_event_goes_out_as_two_slices(resume: bool) {
    let mut r = echo_with(DEFAULT_MAX_EVENT_SIZE, true, resume);
    // The first frame decides the BOM (no fused path before it).
    r.feed(Bytes::from_static(b": start\n\n"));
    assert_eq!(drain(&mut r).concat(), b": start\n\n");
    let one = Bytes::from_static(b"data: a\n\ndat");
    let two = Bytes::from_static(b"a: a\n\ndata: a\n\ndata: a\n");
    r.feed(one.clone());
    let out = drain(&mut r);
    assert_eq!(out, [Bytes::from_static(b"data: a\n\n")]);
    assert!(r.held, "the tail is held");
    r.feed(two.clone());
    let out = drain(&mut r);
    assert_eq!(out.concat(), b"data: a\n\ndata: a\n\n");
    assert_eq!(out[0].as_ptr(), one[9..].as_ptr(), "the tail, a slice");
    assert_eq!(out[1].as_ptr(), two.as_ptr(), "the head and on, a slice");
    assert_eq!(r.h.fast_frames, 3);
    // Held again (the line's LF is in it): the blank line completes it,
    // and the rest of that piece is held as it is.
    r.feed(Bytes::from_static(b"\ndata"));
    assert_eq!(drain(&mut r).concat(), b"data: a\n\n");
    assert_eq!(r.h.fast_frames, 4);
    r.feed(Bytes::from_static(b": a\n\n"));
    assert_eq!(drain(&mut r).concat(), b"data: a\n\n");
    assert_eq!(r.h.fast_frames, 5);
    assert_eq!(r.parser.buffered(), 0, "never gathered");
    r.finish();
    assert!(drain(&mut r).is_empty());
}

/// A chat stream: chunks of one shape (templates learned and matched),
/// some with CRLF or a second line, comments, `data:` without the space,
/// a usage chunk, the finish chunks and `[DONE]`.
fn chat_input() -> Vec<u8> {
    let chunk = |i: usize, c: &str| {
        format!(
            "data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{c}\"}},\"finish_reason\":null}}],\"n\":{}}}\n\n",
            c.len()
        )
    };
    let words = [
        "a [1]",
        "b",
        " [2] c",
        "`[3]`",
        "d\\n",
        "e [1][2]",
        "f\\u00e9 [3]",
    ];
    let mut s = String::new();
    for (k, w) in words.iter().cycle().take(40).enumerate() {
        s.push_str(&chunk(k % 2, w));
        match k % 11 {
            3 => s.push_str(": keep-alive\n\n"),
            5 => s.push_str(&chunk(0, w).replace("\n\n", "\r\n\r\n")),
            7 => s.push_str(&format!("data:{}", &chunk(1, w)[5..])),
            9 => s.push_str(&chunk(0, w).replace("\"id\"", "\"id\"\ndata: ")),
            _ => {}
        }
    }
    s.push_str("data: {\"id\":\"x\",\"choices\":[],\"usage\":{\"total_tokens\":9}}\n\n");
    for i in 0..2 {
        s.push_str(&format!(
            "data: {{\"id\":\"x\",\"choices\":[{{\"index\":{i},\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n"
        ));
    }
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

/// The chat rewriter's output for `input` cut at `cuts`, with or without
/// the fused path, and how many straddling events the fused path took.
fn chat_run(input: &[u8], cuts: &[usize], fused: bool, how: Feed) -> (Vec<u8>, usize) {
    let sources = crate::Sources::from_json(
        br#"[{"title":"A","url":"https://a/"},{"title":"B","url":"https://b/"},{"title":"C","url":"https://c/"}]"#,
    )
    .expect("sources");
    let mut opts = crate::RewriteOptions::new();
    opts.n(2);
    let mut rw = crate::ChatStream::new(std::sync::Arc::new(sources), opts);
    rw.handler_mut().set_fused(fused);
    let out = feed_all(&mut rw, input, cuts, how);
    (out, rw.straddled)
}

/// The chat rewriter with held tails gives the parsed output: the input
/// cut once at every byte, cut twice with a short piece between (a head
/// without the event's end), in pieces of every size up to two events,
/// fed as pieces or slices, drained or finished first; and it does take
/// straddling events.
#[test]
fn chat_straddling_events_give_the_parsed_output() {
    let input = chat_input();
    let (want, none) = chat_run(&input, &[], false, Feed::Drained);
    assert_eq!(none, 0);
    let mut taken = 0;
    let step = if cfg!(miri) { 61 } else { 1 };
    for i in (0..=input.len()).step_by(step) {
        let hows = [Feed::Drained, Feed::Slices, Feed::Late];
        let ways = hows.iter().map(|&how| (0, how));
        for (k, how) in ways.chain([(1, Feed::Drained), (7, Feed::Drained)]) {
            let cuts = [i, (i + k).min(input.len())];
            let (got, n) = chat_run(&input, &cuts, true, how);
            assert_eq!(got, want, "cuts {cuts:?}, {how:?}");
            taken += n;
        }
    }
    assert!(taken > input.len(), "straddling events taken: {taken}");
    for size in (1..=300).chain([450, 600, 700]).step_by(step) {
        let cuts: Vec<usize> = (size..input.len()).step_by(size).collect();
        for how in [Feed::Drained, Feed::Slices, Feed::Late] {
            let (got, _) = chat_run(&input, &cuts, true, how);
            assert_eq!(got, want, "pieces of {size}, {how:?}");
        }
    }
    // Pieces of 100 bytes (smaller than an event), of 160: most pieces end
    // in a straddling event the fused path takes.
    for (size, least) in [(100, 15), (160, 30)] {
        let cuts: Vec<usize> = (size..input.len()).step_by(size).collect();
        let taken = chat_run(&input, &cuts, true, Feed::Drained).1;
        assert!(taken >= least, "pieces of {size}: {taken} taken");
    }
}

/// Between pieces the rewriter keeps no reference to a piece used up on
/// an event boundary (its owner, a connection's read buffer, can reuse it
/// at once); a piece whose last event is cut still goes out whole once the
/// next piece ends that event.
#[test]
fn a_piece_used_up_on_an_event_boundary_is_let_go() {
    for fast in [false, true] {
        let mut r = echo_with(DEFAULT_MAX_EVENT_SIZE, fast, true);
        for text in [
            &b"data: x\n\ndata: b\n\n"[..],
            b"data: a\n\n",
            b"data: a\n\ndata: a\n\n",
            b": c\n\n",
        ] {
            let piece = Bytes::from(text.to_vec());
            r.feed(piece.clone());
            let out = drain(&mut r).concat();
            let want = if text.starts_with(b"data: x") {
                &b"data: y\n\ndata: b\n\n"[..]
            } else {
                text
            };
            assert_eq!(out, want, "fast {fast}");
            assert!(
                piece.is_unique(),
                "fast {fast}: the rewriter still holds {text:?}"
            );
        }
        let cut = Bytes::from(b"data: a\n\ndata: b".to_vec());
        r.feed(cut.clone());
        let mut out = drain(&mut r).concat();
        r.feed(Bytes::from_static(b"\n\ndata: a\n\n"));
        out.extend(drain(&mut r).concat());
        assert_eq!(out, b"data: a\n\ndata: b\n\ndata: a\n\n", "fast {fast}");
        assert!(cut.is_unique(), "fast {fast}: the cut piece is still held");
    }
}
