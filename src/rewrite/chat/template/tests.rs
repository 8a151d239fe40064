//! Tests of [`ChunkTemplate`](super::ChunkTemplate): learning, probation and the walks against each other.

use super::*;
use crate::rewrite::chat::scan::{FastChoices, fast_reads};

impl ChunkTemplate {
    fn kinds(&self) -> Vec<Hole> {
        self.holes[..self.n].iter().map(|h| h.1).collect()
    }
}

/// The template learned from `d` the way the handler learns it.
fn learned(d: &str) -> ChunkTemplate {
    learned_as(d, false)
}

/// The template learned from `d`, framed (from `data: ` + `d` + a blank
/// line) or not.
fn learned_as(d: &str, framed: bool) -> ChunkTemplate {
    let (mut cs, mut holes) = (FastChoices::default(), crate::json::Holes::default());
    assert!(fast_reads(d.as_bytes(), &mut cs, &mut holes).unwrap());
    let mut t = ChunkTemplate::default();
    let contents = cs
        .iter()
        .filter_map(|c| Some((c.index.unwrap(), c.content.clone()?)));
    let ev = format!("data: {d}\n\n");
    let (s, at) = if framed { (ev.as_str(), 6) } else { (d, 0) };
    t.learn(s.as_bytes(), at, framed, contents, &holes);
    t
}

fn content<'d>(t: &mut ChunkTemplate, d: &'d str) -> Option<Vec<(u32, &'d str)>> {
    let mut c = Contents::default();
    t.matches(d.as_bytes(), &mut c)
        .then(|| c.iter().map(|(i, r)| (i, &d[r])).collect())
}

const CHUNK: &str = r#"{"id":"c1","choices":[{"index":2,"delta":{"content":"Hi"},"finish_reason":null}],"obfuscation":"ab"}"#;

#[test]
fn matches_chunks_of_the_same_shape() {
    let mut t = learned(CHUNK);
    assert!(t.valid);
    // Holes: the content, the obfuscation.
    assert_eq!(t.kinds(), [Hole::Content(2), Hole::Str]);
    let other = CHUNK
        .replace("Hi", r#"a \"[1]\" \u00e9"#)
        .replace("ab", "xyz");
    assert_eq!(
        content(&mut t, &other),
        Some(vec![(2, r#"a \"[1]\" \u00e9"#)])
    );
    assert_eq!(
        t.kinds(),
        [Hole::Content(2), Hole::Str],
        "obfuscation varies"
    );
    assert_eq!(content(&mut t, CHUNK), Some(vec![(2, "Hi")]));
}

#[test]
fn constant_holes_become_literal_on_the_first_match() {
    let mut t = learned(CHUNK);
    assert_eq!(
        content(&mut t, &CHUNK.replace("Hi", "Ho")),
        Some(vec![(2, "Ho")])
    );
    assert_eq!(t.kinds(), [Hole::Content(2)]);
    assert_eq!(content(&mut t, &CHUNK.replace("ab", "abc")), None);
    assert_eq!(content(&mut t, CHUNK), Some(vec![(2, "Hi")]));
}

#[test]
fn several_choices_in_one_chunk() {
    let d = r#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{}},{"index":2,"delta":{"content":"c"}}]}"#;
    let mut t = learned(d);
    assert_eq!(t.kinds(), [Hole::Content(0), Hole::Content(2)]);
    let other = d.replace("\"a\"", "\"x[1]\"");
    assert_eq!(content(&mut t, &other), Some(vec![(0, "x[1]"), (2, "c")]));
}

#[test]
fn anything_else_is_no_match() {
    for d in [
        CHUNK.replace("c1", "c2"),
        CHUNK.replace("null", r#""stop""#),
        CHUNK.replace(r#""Hi""#, "null"),
        CHUNK.replace("Hi", "a\nb"),
        CHUNK.replace(r#""ab""#, r#""ab"#),
        format!("{CHUNK} "),
        CHUNK[..CHUNK.len() - 1].to_owned(),
        String::new(),
    ] {
        assert_eq!(content(&mut learned(CHUNK), &d), None, "{d:?}");
    }
    assert_eq!(content(&mut ChunkTemplate::default(), CHUNK), None);
}

#[test]
fn numbers_are_holes_but_not_the_index() {
    let d = r#"{"id":"p","created":5,"choices":[{"index":1,"delta":{"content":"a"}}],"usage":{"prompt_tokens":3,"completion_tokens":7,"total_tokens":10,"cost":0.25}}"#;
    let other = d
        .replace(":7,", ":17,")
        .replace(":10,", ":20,")
        .replace("0.25", "-1.5e-3");
    assert_eq!(content(&mut learned(d), &other), Some(vec![(1, "a")]));
    for bad in [
        d.replace(r#""index":1"#, r#""index":2"#),
        d.replace(r#""index":1"#, r#""index":1.5"#),
        d.replace(":7,", r#":"7","#),
        d.replace(":7,", ":07,"),
        d.replace(r#""created":5"#, r#""created":6"#),
    ] {
        assert_eq!(content(&mut learned(d), &bad), None, "{bad}");
    }
}

#[test]
fn a_chunk_without_content_has_no_content_hole() {
    let d = r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#;
    let mut t = learned(d);
    assert_eq!(t.kinds(), [Hole::Str]);
    assert_eq!(
        content(&mut t, &d.replace("assistant", "tool")),
        Some(vec![])
    );
}

#[test]
fn framed_templates_match_events_at_the_start_of_a_piece() {
    let ev = format!("data: {CHUNK}\n\n");
    let (mut cs, mut holes) = (FastChoices::default(), crate::json::Holes::default());
    assert!(fast_reads(CHUNK.as_bytes(), &mut cs, &mut holes).unwrap());
    let mut t = ChunkTemplate::default();
    let contents = cs.iter().map(|c| (2, c.content.clone().unwrap()));
    t.learn(ev.as_bytes(), 6, true, contents, &holes);
    let piece = format!("{}data: [DONE]\n\n", ev.replace("Hi", "Yo"));
    let mut c = Contents::default();
    let end = t.matches_event(piece.as_bytes(), &mut c).unwrap();
    assert_eq!(end, ev.len());
    assert_eq!(c.iter().map(|(_, r)| &piece[r]).collect::<Vec<_>>(), ["Yo"]);
    for bad in [ev.replace("Hi", "H\ri"), ev.replace("\n\n", "\r\n\r\n")] {
        assert!(t.matches_event(bad.as_bytes(), &mut c).is_none(), "{bad:?}");
    }
    let cut = &ev.as_bytes()[..ev.len() - 1];
    assert!(t.matches_event(cut, &mut c).is_none());
}

#[test]
fn a_choice_index_above_a_byte_is_not_learned() {
    let mut t = learned(&CHUNK.replace(r#""index":2"#, r#""index":255"#));
    assert_eq!(t.kinds(), [Hole::Content(255), Hole::Str]);
    let other = CHUNK
        .replace(r#""index":2"#, r#""index":255"#)
        .replace("Hi", "Ho");
    assert_eq!(content(&mut t, &other), Some(vec![(255, "Ho")]));
    assert!(!learned(&CHUNK.replace(r#""index":2"#, r#""index":256"#)).valid);
}

#[test]
fn large_chunks_are_not_learned() {
    let big = CHUNK.replace("Hi", &"x".repeat(MAX_TEMPLATE));
    assert!(!learned(&big).valid);
    let mut t = learned(CHUNK);
    t.learn(big.as_bytes(), 0, false, std::iter::empty(), &[]);
    assert!(!t.valid, "a failed learn forgets the old template");
}

#[test]
fn number_holes_end_where_the_json_scanner_says() {
    for t in [
        "0", "7", "12", "012", "-1", "-0.5", "1.5", "1e3", "1E+3", "0.25", "-", "1.", "a", "",
    ] {
        let s = format!("{t},");
        let want = json::scan_number(s.as_bytes(), 0).ok();
        assert_eq!(number_end(s.as_bytes(), 0), want, "{t}");
    }
    assert_eq!(number_end(b"12", 0), json::scan_number(b"12", 0).ok());
}

/// The straight-line walk of a one-content template agrees with the
/// general walk on every truncation and every one-byte change of a
/// matching chunk (framed and not).
#[test]
fn walk_one_equals_the_general_walk() {
    let ev = format!("data: {CHUNK}\n\n").replace(r#","obfuscation":"ab""#, "");
    let (mut cs, mut holes) = (FastChoices::default(), crate::json::Holes::default());
    let d = &ev[6..ev.len() - 2];
    assert!(fast_reads(d.as_bytes(), &mut cs, &mut holes).unwrap());
    for framed in [false, true] {
        let (s, at) = if framed { (ev.as_str(), 6) } else { (d, 0) };
        let mut t = ChunkTemplate::default();
        let contents = cs.iter().map(|c| (2, c.content.clone().unwrap()));
        t.learn(s.as_bytes(), at, framed, contents, &holes);
        assert!(t.matches(s.replace("Hi", "Ho").as_bytes(), &mut Contents::default()));
        assert_eq!(t.kinds(), [Hole::Content(2)]);
        let base = s.replace("Hi", r#"a \"[1]\" \u00e9"#);
        let whole = t.walk_contents(base.as_bytes(), &mut Contents::default());
        assert_eq!(whole, Some(base.len()));
        assert_walks_agree(&t, &base);
    }
}

/// The straight-line walk of one or two string holes (a content then
/// OpenAI's `obfuscation`, a role then a content, a reasoning delta alone)
/// agrees with the general walk on every truncation and every one-byte
/// change of a matching chunk (framed and not), and so does the
/// out-of-line general walk of three holes.
#[test]
fn walk_two_equals_the_general_walk() {
    let three = CHUNK.replace(r#""id":"c1","#, r#""id":"c1","x":"y","#);
    for (d, kinds) in [
        (CHUNK.to_string(), vec![Hole::Content(2), Hole::Str]),
        (
            CHUNK.replace(r#""obfuscation":"ab"}"#, r#""o":"ab","z":"c"}"#),
            vec![Hole::Content(2), Hole::Str, Hole::Str],
        ),
        (three, vec![Hole::Str, Hole::Content(2), Hole::Str]),
        (
            CHUNK
                .replace(r#""content":"Hi""#, r#""reasoning_content":"ab""#)
                .replace(r#","obfuscation":"ab""#, ""),
            vec![Hole::Str],
        ),
        (
            CHUNK
                .replace(r#""content":"Hi""#, r#""role":"ab","content":"Hi""#)
                .replace(r#","obfuscation":"ab""#, ""),
            vec![Hole::Str, Hole::Content(2)],
        ),
    ] {
        let ev = format!("data: {d}\n\n");
        let (mut cs, mut holes) = (FastChoices::default(), crate::json::Holes::default());
        assert!(fast_reads(d.as_bytes(), &mut cs, &mut holes).unwrap());
        for framed in [false, true] {
            let (s, at) = if framed {
                (ev.as_str(), 6)
            } else {
                (d.as_str(), 0)
            };
            let mut t = ChunkTemplate::default();
            let contents = cs.iter().filter_map(|c| Some((2, c.content.clone()?)));
            t.learn(s.as_bytes(), at, framed, contents, &holes);
            let next = s
                .replace("Hi", "Ho")
                .replace(r#""ab""#, r#""abc""#)
                .replace(r#""y""#, r#""w""#)
                .replace(r#""c""#, r#""d""#);
            assert!(t.matches(next.as_bytes(), &mut Contents::default()));
            assert_eq!(t.kinds(), kinds);
            let base = s
                .replace("Hi", r#"a \"[1]\" \u00e9"#)
                .replace(r#""ab""#, r#""0123456789abcdef\n""#);
            let whole = t.walk_contents(base.as_bytes(), &mut Contents::default());
            assert_eq!(whole, Some(base.len()));
            assert_walks_agree(&t, &base);
        }
    }
}

/// The walks agree on `base`, on each of its truncations and on each
/// one-byte change of it.
fn assert_walks_agree(t: &ChunkTemplate, base: &str) {
    let mut inputs = vec![base.as_bytes().to_vec()];
    for i in 0..base.len() {
        inputs.push(base.as_bytes()[..i].to_vec());
        for x in [b'"', b'\\', b'x', b'\n', 0x80, b'0', b'7', b'.', b'-', b'e'] {
            let mut m = base.as_bytes().to_vec();
            m[i] = x;
            inputs.push(m);
        }
    }
    for input in inputs {
        assert!(
            t.walks_agree(&input),
            "{:?}",
            String::from_utf8_lossy(&input)
        );
    }
}

/// The straight-line walk of a numbers-then-content template (a
/// running `usage` before the choices) answers on matches and agrees
/// with the general walk wherever it answers (framed and not).
#[test]
fn walk_nums_one_equals_the_general_walk() {
    let d = r#"{"id":"p","usage":{"prompt_tokens":10,"completion_tokens":7,"total_tokens":17},"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
    let ev = format!("data: {d}\n\n");
    let (mut cs, mut holes) = (FastChoices::default(), crate::json::Holes::default());
    assert!(fast_reads(d.as_bytes(), &mut cs, &mut holes).unwrap());
    for framed in [false, true] {
        let (s, at) = if framed { (ev.as_str(), 6) } else { (d, 0) };
        let mut t = ChunkTemplate::default();
        let contents = cs.iter().map(|c| (0, c.content.clone().unwrap()));
        t.learn(s.as_bytes(), at, framed, contents, &holes);
        let next = s.replace(":7,", ":8,").replace(":17}", ":18}");
        assert!(t.matches(next.as_bytes(), &mut Contents::default()));
        assert_eq!(t.kinds(), [Hole::Num, Hole::Num, Hole::Content(0)]);
        assert!(t.nums_one);
        let base = s
            .replace(":7,", ":1234567,")
            .replace("Hi", r#"a \"[1]\" \u00e9"#);
        let (mut c, mut unsure) = (Contents::default(), false);
        let end = t.walk_nums_one(base.as_bytes(), &mut c, &mut unsure);
        assert_eq!(end, Ok(base.len()));
        assert_walks_agree(&t, &base);
        let zero = s.replace(":7,", ":0,");
        assert!(
            t.walk_nums_one(zero.as_bytes(), &mut c, &mut unsure)
                .is_ok()
        );
        for other in [":07,", ":-7,", ":7.5,", ":7e1,", ":12345678,"] {
            let m = s.replace(":7,", other);
            let end = t.walk_nums_one(m.as_bytes(), &mut c, &mut unsure);
            assert!(end.is_err() && unsure, "{other}");
            assert_eq!(
                t.walk_contents(m.as_bytes(), &mut c).is_some(),
                other != ":07,",
                "{other}"
            );
        }
    }
}

#[test]
fn short_segments_compare_like_slices() {
    let a: Vec<u8> = (0..70u8).collect();
    for n in 0..70 {
        for flip in 0..n {
            let mut b = a[..n].to_vec();
            assert!(same(&a[..n], &b));
            b[flip] ^= 1;
            assert!(!same(&a[..n], &b), "{n} {flip}");
        }
    }
}

/// A framed template's walk of an event cut anywhere: the start stops
/// short inside a literal segment (then the walk goes on in the rest to
/// the same end and contents, `splits_agree`) or inside a hole, never a
/// mismatch; a start that differs from the template is a mismatch.
#[test]
fn walks_of_a_cut_event_go_on_where_they_stopped() {
    let d = r#"{"id":"p","usage":{"completion_tokens":7,"total_tokens":17},"choices":[{"index":0,"delta":{"content":"Hi"}}],"x":"y"}"#;
    let ev = format!("data: {d}\n\n");
    let (mut cs, mut holes) = (FastChoices::default(), crate::json::Holes::default());
    assert!(fast_reads(d.as_bytes(), &mut cs, &mut holes).unwrap());
    let mut t = ChunkTemplate::default();
    let contents = cs.iter().map(|c| (0, c.content.clone().unwrap()));
    t.learn(ev.as_bytes(), 6, true, contents, &holes);
    let next = ev
        .replace(":7,", ":8,")
        .replace(":17}", ":18}")
        .replace(r#""y""#, r#""w""#);
    assert!(t.matches(next.as_bytes(), &mut Contents::default()));
    assert_eq!(
        t.kinds(),
        [Hole::Num, Hole::Num, Hole::Content(0), Hole::Str]
    );
    let base = ev
        .replace(":7,", ":1234,")
        .replace("Hi", r#"a \"[1]\" \u00e9"#)
        .replace(r#""y""#, r#""z\"z""#);
    let (mut short, mut in_hole) = (0, 0);
    for i in 0..base.len() {
        match t.prefix(&base.as_bytes()[..i], &mut Contents::default()) {
            Err(Stop::Short { .. }) => short += 1,
            Err(Stop::InHole) => in_hole += 1,
            other => panic!("cut at {i}: {other:?}"),
        }
    }
    assert!(
        short > base.len() * 3 / 4 && in_hole > 10,
        "{short} {in_hole}"
    );
    assert_walks_agree(&t, &base);
    let other = base.replace(r#""id":"p""#, r#""id":"q""#);
    let cut = &other.as_bytes()[..20];
    assert_eq!(t.prefix(cut, &mut Contents::default()), Err(Stop::Mismatch));
}

/// The walk of a numbers-then-content template keeps the last numbers
/// (`filled`) and their widths (the straight-line `NumWalk`) from one
/// walk to the next: a run of chunks whose numbers change value and
/// width (and some that are no plain integer, or whose text around them
/// differs), walked in turn by the same template, gets the general walk's
/// answer for each (one number hole and two; framed and not; with keys
/// so short that the first of two numbers' word reaches the second: no
/// straight-line walk).
#[test]
fn walk_nums_agrees_from_one_chunk_to_the_next() {
    let chunk = |(c, t): (&str, &str), a: &str, b: &str, rest: &str| {
        format!(
            r#"{{"id":"p","usage":{{"prompt_tokens":10,"{c}":{a},"{t}":{b}}},"choices":[{{"index":0,"delta":{{"content":"Hi"}}}}]{rest}}}"#
        )
    };
    let numbers = [
        "1", "9", "10", "99", "0", "123", "1234567", "12345678", "07", "-1", "1.5", "2e3", "42",
        "1000", "5",
    ];
    for k in 0..8 {
        let (two, short, framed) = (k & 1 != 0, k & 2 != 0, k & 4 != 0);
        let keys = if short {
            ("c", "t")
        } else {
            ("completion_tokens", "total_tokens")
        };
        let frame = |d: String| if framed { format!("data: {d}\n\n") } else { d };
        let mut t = learned_as(&chunk(keys, "7", "17", ""), framed);
        let next = frame(chunk(keys, "8", if two { "18" } else { "17" }, ""));
        assert!(t.matches(next.as_bytes(), &mut Contents::default()));
        assert!(t.nums_one);
        assert_eq!(t.n, if two { 3 } else { 2 });
        let (mut k, mut matched) = (0, 0);
        for a in numbers {
            for &b in numbers.iter().rev() {
                k += 1;
                let rest = if k % 11 == 0 { ",\"x\":1" } else { "" };
                let mut s = frame(chunk(keys, a, if two { b } else { "17" }, rest));
                if k % 7 == 0 {
                    s = s.replace("total", "totaL").replace("\"t\"", "\"T\"");
                }
                let (mut c1, mut c2) = (Contents::default(), Contents::default());
                let fast = t.walk_contents(s.as_bytes(), &mut c1);
                let general = t.walk_any(s.as_bytes(), &mut c2);
                assert_eq!(fast, general, "{s}");
                if fast.is_some() {
                    assert!(c1.iter().eq(c2.iter()), "{s}");
                    matched += 1;
                }
            }
        }
        assert!(matched > 40, "{matched}");
        assert_eq!(
            t.num_walk.is_set(),
            !(short && two),
            "{two} {short} {framed}"
        );
    }
}

/// A straight-line number walk needs each number's word in the literal
/// text before the next hole, a tail of one to eight bytes and a literal
/// text of a word at least (its last word holds the tail).
#[test]
fn num_walk_needs_room_for_its_words() {
    use super::num_walk::NumWalk;
    // `{"a":` 12 `,"bb":` content `}`: the number's word `12,"bb":`.
    let filled = b"{\"a\":12,\"bb\":\0\0\0\0\0\0\0\0";
    let literal = b"{\"a\":,\"bb\":}";
    assert!(NumWalk::new(filled, &[(5, 2)], 11, 0, literal).is_set());
    // A byte less before the content: the word reaches the content.
    let (filled_b, literal_b) = (b"{\"a\":12,\"b\":\0\0\0\0\0\0\0\0", b"{\"a\":,\"b\":}");
    assert!(!NumWalk::new(filled_b, &[(5, 2)], 10, 0, literal_b).is_set());
    // No tail, a tail longer than a word.
    assert!(!NumWalk::new(filled, &[(5, 2)], 12, 0, literal).is_set());
    let long = b"{\"a\":,\"bb\":},\"x\":\"yz\"}";
    assert!(!NumWalk::new(filled, &[(5, 2)], 11, 0, long).is_set());
    // A literal text shorter than a word (the number's word fits).
    let short = b"[1234567,\0\0\0\0\0\0\0\0";
    assert!(!NumWalk::new(short, &[(1, 7)], 2, 0, b"[,]").is_set());
    assert!(NumWalk::new(short, &[(1, 7)], 2, 0, b"[,]     ").is_set());
}

/// A template slot learned again keeps the old template's `filled` until
/// its numbers are walked: the held start of an event is walked against
/// `filled` only once a number walk is set for the new template, so the
/// start of an event of the old shape is no match of the new one (and a
/// start of the new shape stops short as the general walk says).
#[test]
fn a_held_start_is_not_matched_against_an_old_templates_numbers() {
    let chunk = |id: &str, a: u32, text: &str| {
        format!(
            r#"{{"id":"{id}","usage":{{"completion_tokens":{a},"total_tokens":{}}},"choices":[{{"index":0,"delta":{{"content":"{text}"}}}}]}}"#,
            a + 10
        )
    };
    let event = |d: String| format!("data: {d}\n\n");
    let relearn = |t: &mut ChunkTemplate, d: &str| {
        let (mut cs, mut holes) = (FastChoices::default(), crate::json::Holes::default());
        assert!(fast_reads(d.as_bytes(), &mut cs, &mut holes).unwrap());
        let contents = cs
            .iter()
            .filter_map(|c| Some((c.index.unwrap(), c.content.clone()?)));
        t.learn(event(d.to_owned()).as_bytes(), 6, true, contents, &holes);
    };
    let mut t = ChunkTemplate::default();
    relearn(&mut t, &chunk("old", 1, "a"));
    for k in 2..5 {
        let ev = event(chunk("old", k, "b"));
        assert!(
            t.matches_event(ev.as_bytes(), &mut Contents::default())
                .is_some()
        );
    }
    assert!(t.num_walk.is_set());
    // The same slot, another template (the id differs early on).
    relearn(&mut t, &chunk("new", 1, "a"));
    let ev = event(chunk("new", 2, "b"));
    assert!(
        t.matches_event(ev.as_bytes(), &mut Contents::default())
            .is_some()
    );
    assert!(t.ready && !t.num_walk.is_set());
    let old = event(chunk("old", 5, "c"));
    let new = event(chunk("new", 5, "c"));
    let number = old.find(":5,").unwrap();
    let differs = old
        .bytes()
        .zip(new.bytes())
        .position(|(a, b)| a != b)
        .unwrap();
    for cut in differs + 1..number {
        let mut c = Contents::default();
        assert_eq!(
            t.prefix(&old.as_bytes()[..cut], &mut c),
            Err(Stop::Mismatch)
        );
        let walked = t.prefix(&new.as_bytes()[..cut], &mut c);
        assert_eq!(walked, t.prefix_general(&new.as_bytes()[..cut], &mut c));
        assert!(
            matches!(walked, Err(Stop::Short { k: 0, .. })),
            "{walked:?}"
        );
    }
}
