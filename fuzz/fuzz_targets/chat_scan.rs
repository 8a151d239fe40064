//! The crate's JSON scanning reads what `serde_json` reads.
//!
//! 1. Arbitrary bytes: `scan_value` (the crate's JSON skipper) accepts exactly the
//!    texts `serde_json` accepts (grammar only: lone surrogates and invalid
//!    UTF-8 in strings are accepted by design, so those inputs are skipped;
//!    nesting is kept below both depth limits), and `ObjectWalker` yields
//!    the same members (decoded keys, values) as `serde_json`'s map;
//!    `scan_string` (SSE2 or SWAR words) at each `"` of the bytes gives what
//!    a bytewise reading of the string grammar gives (and so does
//!    `short_string_end` where it answers).
//! 2. An arbitrary chunk-like JSON object (built by `arbitrary`, serialized
//!    with random whitespace and escaped keys) between a stream's chunks:
//!    the choices `ChatStream` reads from it (`index`, `delta.content`,
//!    whether `finish_reason` is a string) are the ones `serde_json` reads,
//!    observed through the annotations each choice gets (offsets cover
//!    every character read, markers identify the content) and through
//!    which chunk they precede (the chunk itself when it finishes the
//!    choice, else a later finish chunk).
//! 3. The differential of the chat rewriter's two chunk scans, on the raw
//!    bytes and on two generated chunks: the fast scan (the hot path)
//!    accepts exactly what the full scan accepts and reads the same
//!    choices (index, content, finish) unless it defers (escaped key,
//!    finish) or stops at an empty `choices` array no other can follow
//!    (the full scan then reads no choice, or rejects the text); a
//!    chunk template learned from one chunk (framed as an event or not)
//!    accepts another only if both scans read it as the template says (the
//!    learned choices, their contents in the content holes, no finish),
//!    also after its first match turned constant holes into literal text;
//!    the full scan with the envelope cached from the scan prefix learned
//!    from one chunk reads another as a fresh full scan does.
#![no_main]

use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use citestream::cite::{MarkerTracker, OffsetUnit};
use citestream::fuzzing::{
    self, FastRead, ObjectWalker, decode_str, naive_string, scan_string, scan_value,
    short_string_end, skip_ws,
};
use citestream::{ChatStream, Sources};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

#[path = "../../tests/common/cite_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod cite_ref;

#[path = "../../tests/common/chat_ref.rs"]
#[allow(dead_code, unreachable_pub)]
mod chat_ref;

/// Keys the rewriter cares about, plus others.
#[derive(Arbitrary, Debug, Clone)]
enum Key {
    Index,
    Delta,
    Content,
    Finish,
    Choices,
    Role,
    Other(String),
}

impl Key {
    fn name(&self) -> String {
        match self {
            Key::Index => "index".into(),
            Key::Delta => "delta".into(),
            Key::Content => "content".into(),
            Key::Finish => "finish_reason".into(),
            Key::Choices => "choices".into(),
            Key::Role => "role".into(),
            // No envelope keys: `id` identifies our finish chunks.
            Key::Other(s) if s == "id" => "x".into(),
            Key::Other(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum Val {
    Null,
    Bool(bool),
    Small(u8),
    Int(i64),
    Big(u64),
    Float(f64),
    Str(String),
    /// Text made of markers and escapes-worthy characters.
    Text(Vec<TextBit>),
    Arr(Vec<Val>),
    Obj(Vec<(Key, Val)>),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum TextBit {
    Marker(u8),
    Space,
    Nl,
    Quote,
    Backslash,
    Tick,
    Fence,
    E9,
    Emoji,
    Word,
}

fn text(bits: &[TextBit]) -> String {
    let mut s = String::new();
    for b in bits {
        match b {
            TextBit::Marker(n) => s.push_str(&format!("[{}]", n % 12)),
            TextBit::Space => s.push(' '),
            TextBit::Nl => s.push('\n'),
            TextBit::Quote => s.push('"'),
            TextBit::Backslash => s.push('\\'),
            TextBit::Tick => s.push('`'),
            TextBit::Fence => s.push_str("\n```\n"),
            TextBit::E9 => s.push('é'),
            TextBit::Emoji => s.push('😀'),
            TextBit::Word => s.push_str("word"),
        }
    }
    s
}

/// Serializes with optional whitespace and escaped keys.
struct W<'a> {
    u: Unstructured<'a>,
    out: String,
}

impl W<'_> {
    fn ws(&mut self) {
        if self.u.ratio(1, 4).unwrap_or(false) {
            self.out
                .push_str([" ", "\n", "\t", "\r\n "][self.u.choose_index(4).unwrap_or(0)]);
        }
    }
    fn key(&mut self, k: &str) {
        if !k.is_empty() && k.is_ascii() && self.u.ratio(1, 6).unwrap_or(false) {
            self.out.push_str(&format!(
                "\"\\u{:04x}{}\"",
                k.as_bytes()[0],
                &serde_json::to_string(&k[1..]).unwrap()[1..]
            ));
        } else {
            self.out.push_str(&serde_json::to_string(k).unwrap());
        }
    }
    fn val(&mut self, v: &Val, depth: usize) {
        self.ws();
        match v {
            _ if depth > 10 => self.out.push_str("null"),
            Val::Null => self.out.push_str("null"),
            Val::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            Val::Small(n) => self.out.push_str(&(n % 5).to_string()),
            Val::Int(n) => self.out.push_str(&n.to_string()),
            Val::Big(n) => self.out.push_str(&n.to_string()),
            Val::Float(f) => self.out.push_str(&serde_json::to_string(f).unwrap()),
            Val::Str(s) => self.out.push_str(&serde_json::to_string(s).unwrap()),
            Val::Text(t) => self.out.push_str(&serde_json::to_string(&text(t)).unwrap()),
            Val::Arr(a) => {
                self.out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.val(x, depth + 1);
                }
                self.ws();
                self.out.push(']');
            }
            Val::Obj(m) => {
                self.out.push('{');
                let mut seen = Vec::new();
                for (k, x) in m {
                    let name = k.name();
                    if seen.contains(&name) {
                        continue; // no duplicate keys (undefined in JSON)
                    }
                    if !seen.is_empty() {
                        self.out.push(',');
                    }
                    seen.push(name.clone());
                    self.ws();
                    self.key(&name);
                    self.ws();
                    self.out.push(':');
                    self.val(x, depth + 1);
                    self.ws();
                }
                self.out.push('}');
            }
        }
        self.ws();
    }
}

/// A chunk-like object: mostly the shape the rewriter reads, with
/// arbitrary values and members mixed in.
#[derive(Arbitrary, Debug)]
struct ChunkSpec {
    choices: Option<Vec<ChoiceV>>,
    extra: Vec<(Key, Val)>,
    choices_last: bool,
}

#[derive(Arbitrary, Debug)]
enum ChoiceV {
    Choice {
        index: IndexV,
        delta: Option<DeltaV>,
        finish: FinishV,
        extra: Vec<(Key, Val)>,
        rotate: u8,
    },
    Other(Val),
}

#[derive(Arbitrary, Debug)]
enum IndexV {
    Missing,
    Small(u8),
    Other(Val),
}

#[derive(Arbitrary, Debug)]
enum DeltaV {
    Object {
        content: ContentV,
        extra: Vec<(Key, Val)>,
        content_first: bool,
    },
    Other(Val),
}

#[derive(Arbitrary, Debug)]
enum ContentV {
    Missing,
    Text(Vec<TextBit>),
    Other(Val),
}

#[derive(Arbitrary, Debug)]
enum FinishV {
    Missing,
    Null,
    Stop,
    Other(Val),
}

impl ChunkSpec {
    fn to_val(&self) -> Val {
        let mut m: Vec<(Key, Val)> = Vec::new();
        let choices = self
            .choices
            .as_ref()
            .map(|cs| Val::Arr(cs.iter().map(ChoiceV::to_val).collect()));
        if !self.choices_last
            && let Some(c) = &choices
        {
            m.push((Key::Choices, c.clone()));
        }
        m.extend(self.extra.iter().cloned());
        if self.choices_last
            && let Some(c) = choices
        {
            m.push((Key::Choices, c));
        }
        Val::Obj(m)
    }
}

impl ChoiceV {
    fn to_val(&self) -> Val {
        let (index, delta, finish, extra, rotate) = match self {
            ChoiceV::Choice {
                index,
                delta,
                finish,
                extra,
                rotate,
            } => (index, delta, finish, extra, rotate),
            ChoiceV::Other(v) => return v.clone(),
        };
        let mut m: Vec<(Key, Val)> = Vec::new();
        match index {
            IndexV::Missing => {}
            IndexV::Small(n) => m.push((Key::Index, Val::Small(*n))),
            IndexV::Other(v) => m.push((Key::Index, v.clone())),
        }
        match delta {
            None => {}
            Some(DeltaV::Other(v)) => m.push((Key::Delta, v.clone())),
            Some(DeltaV::Object {
                content,
                extra,
                content_first,
            }) => {
                let mut d: Vec<(Key, Val)> = Vec::new();
                let c = match content {
                    ContentV::Missing => None,
                    ContentV::Text(t) => Some(Val::Text(t.clone())),
                    ContentV::Other(v) => Some(v.clone()),
                };
                if *content_first {
                    d.extend(c.clone().map(|c| (Key::Content, c)));
                }
                d.extend(extra.iter().cloned());
                if !*content_first {
                    d.extend(c.map(|c| (Key::Content, c)));
                }
                m.push((Key::Delta, Val::Obj(d)));
            }
        }
        match finish {
            FinishV::Missing => {}
            FinishV::Null => m.push((Key::Finish, Val::Null)),
            FinishV::Stop => m.push((Key::Finish, Val::Str("stop".into()))),
            FinishV::Other(v) => m.push((Key::Finish, v.clone())),
        }
        if !m.is_empty() {
            let k = usize::from(*rotate) % m.len();
            m.rotate_left(k);
        }
        m.extend(extra.iter().cloned());
        Val::Obj(m)
    }
}

#[derive(Arbitrary, Debug)]
struct Case {
    raw: Vec<u8>,
    chunk: ChunkSpec,
    /// A second chunk for the template differential.
    other: ChunkSpec,
    style: Vec<u8>,
    unit: u8,
}

fn max_nesting(b: &[u8]) -> usize {
    let (mut d, mut m, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for &c in b {
        if in_str {
            match (esc, c) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_str = true,
            b'{' | b'[' => {
                d += 1;
                m = m.max(d);
            }
            b'}' | b']' => d = d.saturating_sub(1),
            _ => {}
        }
    }
    m
}

/// Part 1: grammar and members of arbitrary bytes.
fn raw_json(b: &[u8]) {
    // Every string start (the first 64 quotes), on the whole input and on
    // the input cut right after the string's end (the last, overlapping
    // SSE2 block; the word path of short inputs).
    let quotes = (0..b.len()).filter(|&i| b[i] == b'"');
    for i in quotes.take(64) {
        let want = naive_string(b, i);
        assert_eq!(scan_string(b, i), want, "string at {i}");
        if let Some(end) = short_string_end(b, i) {
            assert_eq!(want, Ok((end, false)), "short string at {i}");
        }
        if let Ok((end, _)) = want {
            let cut = &b[..end];
            if let Some(e) = short_string_end(cut, i) {
                assert_eq!(want, Ok((e, false)), "cut short string at {i}");
            }
            assert_eq!(
                scan_string(cut, i),
                naive_string(cut, i),
                "cut string at {i}"
            );
            let tail = &b[i..end];
            assert_eq!(
                scan_string(tail, 0),
                naive_string(tail, 0),
                "tail string at {i}"
            );
        }
    }
    if max_nesting(b) > 100 {
        return;
    }
    let ours = scan_value(b, skip_ws(b, 0), 0).is_ok_and(|e| skip_ws(b, e) == b.len());
    let strict = serde_json::from_slice::<Value>(b);
    let lenient = serde_json::from_slice::<serde::de::IgnoredAny>(b).is_ok();
    if std::str::from_utf8(b).is_ok() {
        // Surrogate escapes are the one leniency left on valid UTF-8.
        if strict.is_ok() {
            assert!(ours, "serde_json accepts, scan_value rejects");
        }
        if !lenient {
            assert!(
                !ours,
                "scan_value accepts what serde_json's grammar rejects"
            );
        }
    }
    let Ok(Value::Object(map)) = strict else {
        return;
    };
    let start = skip_ws(b, 0);
    let mut w = ObjectWalker::new(b, start, 0).expect("object");
    let mut members = Vec::new();
    while let Some(m) = w.next_member().expect("valid") {
        let end = w.skip_value().expect("valid");
        let v: Value = serde_json::from_slice(&b[m.value_start..end]).expect("member value");
        members.push((decode_str(&b[m.key.clone()]).into_owned(), v));
    }
    // serde_json keeps the last of duplicate keys.
    for (k, v) in &map {
        let last = members
            .iter()
            .rev()
            .find(|(mk, _)| mk == k)
            .expect("key seen");
        assert_eq!(&last.1, v, "member {k}");
    }
    assert!(members.iter().all(|(k, _)| map.contains_key(k)));
}

/// What serde_json reads of the chunk: per entry, (index, content, finishes).
fn serde_choices(v: &Value) -> Vec<(u32, Option<String>, bool)> {
    let Some(list) = v.get("choices").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(Value::as_object)
        .filter_map(|c| {
            let index = match c.get("index") {
                None => Some(0),
                Some(Value::Number(n)) => n
                    .as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .filter(|_| !n.to_string().starts_with('-')),
                Some(_) => None,
            }?;
            let content = c
                .get("delta")
                .and_then(Value::as_object)
                .and_then(|d| d.get("content"))
                .and_then(Value::as_str)
                .map(String::from);
            let fin = c.get("finish_reason").is_some_and(Value::is_string);
            Some((index, content, fin))
        })
        .filter(|c| c.0 < citestream::MAX_CHOICES)
        .collect()
}

/// Part 2: the chunk inside a stream.
fn chunk_in_stream(chunk: &[u8], unit: OffsetUnit) {
    let Ok(v) = serde_json::from_slice::<Value>(chunk) else {
        return;
    };
    if !v.is_object() || max_nesting(chunk) > 100 {
        return;
    }
    let entries = serde_choices(&v);
    let mut indices: Vec<u32> = entries.iter().map(|e| e.0).collect();
    indices.sort_unstable();
    indices.dedup();
    // Expected per choice: content read (before its first finish) and
    // whether this chunk finishes it.
    let mut expect: Vec<(u32, String, bool)> =
        indices.iter().map(|&i| (i, String::new(), false)).collect();
    for (i, content, _) in &entries {
        let e = expect.iter_mut().find(|e| e.0 == *i).unwrap();
        if e.2 {
            continue;
        }
        if let Some(c) = content {
            e.1.push_str(c);
        }
    }
    for (i, _, fin) in &entries {
        if *fin {
            expect.iter_mut().find(|e| e.0 == *i).unwrap().2 = true;
        }
    }
    // Stream: a plain first chunk for every choice, the fuzz chunk, then a
    // finish chunk per choice with a recognizable id.
    let mut input = Vec::new();
    for &i in &indices {
        input.extend_from_slice(format!("data: {{\"id\":\"pre\",\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"\"}},\"finish_reason\":null}}]}}\n\n").as_bytes());
    }
    // One `data` line per line of the JSON text (its whitespace may hold
    // line ends; the parser joins the lines with LF).
    let text = String::from_utf8_lossy(chunk)
        .replace("\r\n", "\n")
        .replace('\r', "\n");
    for line in text.split('\n') {
        input.extend_from_slice(b"data: ");
        input.extend_from_slice(line.as_bytes());
        input.push(b'\n');
    }
    input.push(b'\n');
    for &i in &indices {
        input.extend_from_slice(format!("data: {{\"id\":\"fin-{i}\",\"choices\":[{{\"index\":{i},\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n").as_bytes());
    }
    let sources = Arc::new(Sources::new(chat_ref::make_sources(9)));
    let mut o = chat_ref::RefOpts {
        unit,
        n: indices.len().max(1) as u32,
        ..chat_ref::RefOpts::default()
    };
    o.max_event_size = None;
    let mut rw = ChatStream::new(sources, o.rewrite_options());
    let out = chat_ref::drive(&mut rw, &[&input]);
    let (frames, _) = chat_ref::frames(&out, &citestream::sse::Config::new());
    let datas: Vec<Value> = frames
        .iter()
        .filter_map(|f| match f {
            citestream::sse::Frame::Event(e) => serde_json::from_slice(e.data()).ok(),
            _ => None,
        })
        .collect();
    for (i, content, fin) in &expect {
        let mut t = MarkerTracker::new(9, unit);
        t.push_text(content.as_bytes());
        t.finish();
        let want: Vec<(u64, u64)> = t.markers().iter().map(|m| (m.start, m.end)).collect();
        let got: Vec<&Value> = datas
            .iter()
            .filter(|d| {
                d["choices"][0]["index"] == *i && d["choices"][0]["delta"]["annotations"].is_array()
            })
            .collect();
        if want.is_empty() {
            assert!(
                got.is_empty(),
                "choice {i}: annotations for a content without markers"
            );
            continue;
        }
        assert_eq!(got.len(), 1, "choice {i}: one annotations chunk");
        let anns: Vec<(u64, u64)> = got[0]["choices"][0]["delta"]["annotations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["url_citation"]["start_index"].as_u64().unwrap(),
                    a["url_citation"]["end_index"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            anns, want,
            "choice {i}: content read differs from serde_json's"
        );
        let placed_before_ours = got[0]["id"] == format!("fin-{i}");
        assert_eq!(
            !placed_before_ours, *fin,
            "choice {i}: finish_reason read differs from serde_json's"
        );
    }
}

/// Part 3a: the fast scan against the full scan.
fn fast_vs_full(d: &[u8]) {
    let full = fuzzing::full_scan(d);
    match fuzzing::fast_scan(d) {
        Err(_) => assert!(
            full.is_err(),
            "the fast scan rejects what the full scan accepts"
        ),
        // An escaped key: the full scan decides.
        Ok(FastRead::Defer) => {}
        // The rest unread: no choice there, or invalid.
        Ok(FastRead::NoChoices) => assert!(
            !full.as_ref().is_ok_and(|c| !c.is_empty()),
            "the fast scan stops where the full scan reads choices"
        ),
        Ok(FastRead::Read(fast)) => {
            assert_eq!(Ok(fast), full, "the fast and full scans read differently")
        }
    }
}

/// Part 3c: the full scan of `d` with the envelope cached from the scan
/// prefix the fast scan learned from `learn` against a fresh full scan.
fn prefix_vs_fresh(learn: &[u8], d: &[u8]) {
    let (cached, fresh) = fuzzing::full_scan_with_prefix(learn, d);
    assert_eq!(cached, fresh, "the cached envelope reads differently");
}

/// Part 3b: a template learned from `learn` (framed as an event or not)
/// accepts a candidate only if both scans read it as the template does,
/// also after its first match turned constant holes into literal text.
fn template_vs_scans(learn: &[u8], candidates: &[&[u8]]) {
    for framed in [false, true] {
        let reads = fuzzing::template_match(learn, candidates, framed);
        for (candidate, read) in candidates.iter().zip(reads) {
            let Some(read) = read else { continue };
            let full = fuzzing::full_scan(candidate).expect("a template accepted invalid JSON");
            assert_eq!(full, read, "template and full scan read differently");
            match fuzzing::fast_scan(candidate).expect("valid") {
                FastRead::Read(fast) => {
                    assert_eq!(fast, read, "template and fast scan read differently")
                }
                FastRead::NoChoices => assert!(read.is_empty(), "template reads choices"),
                FastRead::Defer => {}
            }
        }
    }
}

fuzz_target!(|case: Case| {
    raw_json(&case.raw);
    let mut w = W {
        u: Unstructured::new(&case.style),
        out: String::new(),
    };
    w.val(&case.other.to_val(), 0);
    let other = std::mem::take(&mut w.out);
    w.val(&case.chunk.to_val(), 0);
    if max_nesting(&case.raw) <= 100 {
        fast_vs_full(&case.raw);
        prefix_vs_fresh(w.out.as_bytes(), &case.raw);
    }
    prefix_vs_fresh(w.out.as_bytes(), w.out.as_bytes());
    prefix_vs_fresh(w.out.as_bytes(), other.as_bytes());
    prefix_vs_fresh(other.as_bytes(), w.out.as_bytes());
    fast_vs_full(w.out.as_bytes());
    fast_vs_full(other.as_bytes());
    template_vs_scans(
        w.out.as_bytes(),
        &[
            other.as_bytes(),
            &case.raw,
            w.out.as_bytes(),
            other.as_bytes(),
        ],
    );
    template_vs_scans(w.out.as_bytes(), &[w.out.as_bytes(), other.as_bytes()]);
    if std::env::var_os("CHAT_SCAN_DEBUG").is_some() {
        eprintln!("chunk: {}", w.out);
    }
    let unit =
        [OffsetUnit::Chars, OffsetUnit::Utf16, OffsetUnit::Bytes][usize::from(case.unit % 3)];
    chunk_in_stream(w.out.as_bytes(), unit);
});
