//! `ResponsesStream` gives the same output whatever the chunking (one
//! shot, arbitrary splits, one byte at a time, finish before draining);
//! on a Responses-shaped stream built from the fuzz bytes its output is
//! what the reference expects (`responses_ref::check`: every block the
//! rules do not touch byte-identical, the others equal as JSON), and the
//! final response it writes equals the whole-body rewrite of the
//! upstream's final response. The fused path (text deltas matched by a
//! learned template) gives the same bytes as the general path alone.
//! Never panics.
#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use bytes::Bytes;
use citestream::{ResponsesStream, Sources, StreamRewriter, responses};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/cite_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod cite_ref;

#[path = "../../tests/common/chat_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod chat_ref;

#[path = "../../tests/common/responses_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod responses_ref;

#[derive(Arbitrary, Debug)]
struct Case {
    opts: u8,
    sources: u8,
    limit: Option<u16>,
    shaped: bool,
    seq: bool,
    event_lines: bool,
    cuts: Vec<u16>,
    /// Drain after piece `i` when `drain[i % len]` (always when empty).
    drain: Vec<bool>,
    data: Vec<u8>,
}

/// Text pieces: markers, escapes, non-ASCII, code, brackets.
const TOKENS: &[&str] = &[
    "[1]",
    "[2]",
    "[3]",
    "[12]",
    "[0]",
    "\\\\[1]",
    "[",
    "]",
    "1",
    " ",
    "w",
    ".",
    "\\n",
    "\\n\\n",
    "`",
    "```\\n",
    "\\u00e9",
    "é",
    "😀",
    "\\ud83d\\ude00",
    "\\\"",
    "\\\\",
    "[1][2]",
    "ü",
];

/// Writes events with or without `sequence_number` / `event:` lines.
struct W {
    out: String,
    n: u64,
    seq: bool,
    event_lines: bool,
}

impl W {
    fn ev(&mut self, ty: &str, body: &str) {
        if self.event_lines {
            self.out.push_str(&format!("event: {ty}\n"));
        }
        let s = if self.seq {
            self.n += 1;
            format!(",\"sequence_number\":{}", self.n - 1)
        } else {
            String::new()
        };
        self.out
            .push_str(&format!("data: {{\"type\":\"{ty}\"{s},{body}}}\n\n"));
    }

    fn close_part(&mut self, parts: &mut Vec<String>, text: &mut String, o: u32, c: u32) {
        let t = std::mem::take(text);
        let part = format!(r#"{{"type":"output_text","text":"{t}","annotations":[]}}"#);
        let at = format!(r#""item_id":"m{o}","output_index":{o},"content_index":{c}"#);
        self.ev(
            "response.output_text.done",
            &format!(r#"{at},"text":"{t}""#),
        );
        self.ev(
            "response.content_part.done",
            &format!(r#"{at},"part":{part}"#),
        );
        parts.push(part);
    }
}

/// A Responses stream from the fuzz bytes: a byte with the high bit set
/// ends a delta (bit 6 also ends the part, bit 5 the item, closing its
/// open part); the others pick a token. Every part's `done` text is the
/// concatenation of its deltas.
fn shaped(data: &[u8], seq: bool, event_lines: bool) -> String {
    let mut w = W {
        out: String::new(),
        n: 0,
        seq,
        event_lines,
    };
    w.ev(
        "response.created",
        r#""response":{"object":"response","output":[]}"#,
    );
    let mut items = Vec::new();
    let mut parts: Vec<String> = Vec::new();
    let (mut o, mut c) = (0u32, 0u32);
    let mut text = String::new();
    let mut delta = String::new();
    for &b in data {
        if b & 0x80 == 0 {
            delta.push_str(TOKENS[usize::from(b) % TOKENS.len()]);
            continue;
        }
        w.ev(
            "response.output_text.delta",
            &format!(r#""item_id":"m{o}","output_index":{o},"content_index":{c},"delta":"{delta}","obfuscation":"[1]""#),
        );
        text.push_str(&delta);
        delta.clear();
        // Part `c` has just had a delta, so it is open here. An item ends
        // with its open part closed: a part's `done` text is always its
        // deltas (the next item's part starts empty).
        if b & 0x40 != 0 || b & 0x20 != 0 {
            w.close_part(&mut parts, &mut text, o, c);
            c += 1;
        }
        if b & 0x20 != 0 && !parts.is_empty() {
            items.push(format!(
                r#"{{"type":"message","id":"m{o}","content":[{}]}}"#,
                parts.join(",")
            ));
            parts.clear();
            o += 1;
            c = 0;
        }
    }
    w.close_part(&mut parts, &mut text, o, c);
    items.push(format!(
        r#"{{"type":"message","id":"m{o}","content":[{}]}}"#,
        parts.join(",")
    ));
    w.ev(
        "response.completed",
        &format!(
            r#""response":{{"object":"response","output":[{}]}}"#,
            items.join(",")
        ),
    );
    w.out
}

fuzz_target!(|case: Case| {
    let o = chat_ref::opts_from_byte(case.opts, case.limit.map(|l| usize::from(l) % 2048));
    let list = chat_ref::make_sources(usize::from(case.sources % 5));
    let sources = Arc::new(Sources::new(list.clone()));
    let input = if case.shaped {
        shaped(&case.data, case.seq, case.event_lines).into_bytes()
    } else {
        case.data.clone()
    };
    let new = || ResponsesStream::new(sources.clone(), o.rewrite_options());
    let whole = chat_ref::drive(&mut new(), &[&input]);
    if case.shaped && case.limit.is_none() {
        let text = std::str::from_utf8(&input).expect("shaped is UTF-8");
        let exp = responses_ref::expect(text, &list, &o);
        responses_ref::check(&whole, &exp, "responses_split");
        // The final response equals the whole-body rewrite of the
        // upstream's (same text, same rules).
        let last = |b: &[u8]| -> Option<serde_json::Value> {
            let s = std::str::from_utf8(b).ok()?;
            let blk = responses_ref::blocks(s)
                .into_iter()
                .rev()
                .find(|b| b.contains("response.completed"))?;
            let d = blk.lines().find_map(|l| l.strip_prefix("data: "))?;
            let v: serde_json::Value = serde_json::from_str(d).ok()?;
            Some(v["response"].clone())
        };
        if let (Some(up), Some(got)) = (last(&input), last(&whole)) {
            let up = serde_json::to_vec(&up).unwrap();
            let body = responses::rewrite_body(&up, &sources, &o.rewrite_options());
            let want: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(
                got, want,
                "stream's final response differs from the body rewrite"
            );
        }
    }
    let unfused =
        || citestream::fuzzing::responses_stream_unfused(sources.clone(), o.rewrite_options());
    let general = chat_ref::drive(&mut unfused(), &[&input]);
    assert!(
        general == whole,
        "the fused path differs from the general path"
    );
    let cuts = citestream::fuzzing::cuts(&case.cuts, input.len());
    let split = chat_ref::drive(&mut new(), &chat_ref::split_at(&input, &cuts));
    assert!(split == whole, "split at {cuts:?} differs");
    let mixed = chat_ref::drive_mixed(&mut new(), &chat_ref::split_at(&input, &cuts), &case.drain);
    assert!(mixed == whole, "draining {:?} differs", case.drain);
    if input.len() <= 4096 {
        let bytes = chat_ref::drive(&mut new(), &chat_ref::pieces(&input, 1));
        assert!(bytes == whole, "one byte at a time differs");
    }
    let mut rw = new();
    for p in chat_ref::split_at(&input, &cuts) {
        rw.feed(Bytes::copy_from_slice(p));
    }
    StreamRewriter::finish(&mut rw);
    let mut late = Vec::new();
    while let Some(b) = rw.next_output() {
        late.extend_from_slice(&b);
    }
    assert!(late == whole, "finish before draining differs");
    // Lossless: with no sources the output is the input.
    if list.is_empty() {
        assert!(whole == input, "no sources must change nothing");
    }
});
