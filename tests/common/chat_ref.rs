//! A slow, deliberately plain reference for the response rewriters
//! (docs/reference/request.md, "Sources"; docs/reference/responses.md, "Markers", "Chat completions", "Messages", "The citations array", "Errors and bad input"), written independently of
//! `citestream::{chat, messages, json}`, plus a structural checker that
//! compares a real rewritten stream with what the reference expects.
//!
//! How it works:
//!
//! * the upstream stream is split into frames by `citestream::sse::Parser`
//!   (tested on its own elsewhere), fed the whole input at once;
//! * every `message` event's data is parsed by the tiny JSON parser below
//!   (recursive descent into a tree, strings kept as their raw escaped
//!   bytes so that lone surrogates and invalid UTF-8, which the spec counts
//!   as U+FFFD, survive; `serde_json` rejects those);
//! * each choice's `delta.content` pieces are concatenated as raw escaped
//!   bytes and decoded once at the end, which is exactly "all its pieces
//!   concatenated, escapes decoded" (a surrogate pair or a UTF-8 sequence
//!   whose halves sit in two deltas joins up);
//! * markers come from the marker reference (`cite_ref`);
//! * the result is a list of [`Item`]s: the upstream frames that must come
//!   out byte-identical, and the events we add or modify, with everything
//!   needed to check them.
//!
//! [`check_chat`] / [`check_messages`] then walk the real output against
//! that list.

use std::sync::Arc;

use bytes::Bytes;
use citestream::cite::{Marker, OffsetUnit};
use citestream::sse::{self, Frame};
use citestream::{Dialect, RewriteOptions, Source, Sources, StreamRewriter};
use serde_json::{Value, json};

use super::cite_ref;

// ---------------------------------------------------------------------------
// A tiny lenient JSON parser.
// ---------------------------------------------------------------------------

/// A parsed JSON value. Strings and keys keep their raw (escaped) bytes;
/// numbers keep their text. Object members keep their order and duplicates.
#[derive(Clone, Debug, PartialEq)]
pub enum J {
    Null,
    Bool(bool),
    Num(String),
    Str(Vec<u8>),
    Arr(Vec<J>),
    Obj(Vec<(Vec<u8>, J)>),
}

const MAX_NESTING: usize = 120;

/// Parses a whole JSON text (whitespace around allowed). Lenient exactly
/// where the spec asks: string bodies may hold invalid UTF-8 and lone
/// surrogate escapes. Everything else follows RFC 8259.
pub fn parse(b: &[u8]) -> Option<J> {
    let mut p = P { b, i: 0 };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    (p.i == b.len()).then_some(v)
}

struct P<'a> {
    b: &'a [u8],
    i: usize,
}

impl P<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }
    fn value(&mut self, depth: usize) -> Option<J> {
        match self.peek()? {
            b'{' => {
                if depth + 1 > MAX_NESTING {
                    return None;
                }
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.eat(b'}').is_some() {
                    return Some(J::Obj(members));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    let v = self.value(depth + 1)?;
                    members.push((k, v));
                    self.ws();
                    match self.peek()? {
                        b',' => self.i += 1,
                        b'}' => {
                            self.i += 1;
                            return Some(J::Obj(members));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                if depth + 1 > MAX_NESTING {
                    return None;
                }
                self.i += 1;
                let mut els = Vec::new();
                self.ws();
                if self.eat(b']').is_some() {
                    return Some(J::Arr(els));
                }
                loop {
                    self.ws();
                    els.push(self.value(depth + 1)?);
                    self.ws();
                    match self.peek()? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(J::Arr(els));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => self.string().map(J::Str),
            b't' => self.lit(b"true").map(|()| J::Bool(true)),
            b'f' => self.lit(b"false").map(|()| J::Bool(false)),
            b'n' => self.lit(b"null").map(|()| J::Null),
            _ => self.number().map(J::Num),
        }
    }
    fn lit(&mut self, l: &[u8]) -> Option<()> {
        if self.b[self.i..].starts_with(l) {
            self.i += l.len();
            Some(())
        } else {
            None
        }
    }
    fn string(&mut self) -> Option<Vec<u8>> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            let c = self.peek()?;
            match c {
                b'"' => {
                    let s = self.b[start..self.i].to_vec();
                    self.i += 1;
                    return Some(s);
                }
                b'\\' => {
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let h = self.b.get(self.i + 1..self.i + 5)?;
                            if !h.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 5;
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                _ => self.i += 1,
            }
        }
    }
    fn number(&mut self) -> Option<String> {
        let start = self.i;
        self.eat(b'-');
        let digits = |p: &mut Self| {
            let s = p.i;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.i += 1;
            }
            p.i > s
        };
        if self.eat(b'0').is_none() && !digits(self) {
            return None;
        }
        if self.eat(b'.').is_some() && !digits(self) {
            return None;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        Some(String::from_utf8(self.b[start..self.i].to_vec()).unwrap())
    }
}

/// Decodes a raw JSON string body to a Rust string (lossy, spec rules).
pub fn decode(raw: &[u8]) -> String {
    cite_ref::decode_json(raw).into_iter().collect()
}

impl J {
    /// The last member whose decoded key is `key`.
    pub fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(m) => m
                .iter()
                .rev()
                .find(|(k, _)| decode(k) == key)
                .map(|(_, v)| v),
            _ => None,
        }
    }
    /// How many members have the decoded key `key`.
    pub fn count(&self, key: &str) -> usize {
        match self {
            J::Obj(m) => m.iter().filter(|(k, _)| decode(k) == key).count(),
            _ => 0,
        }
    }
    /// Removes every member whose decoded key is in `keys`.
    pub fn without(&self, keys: &[&str]) -> J {
        match self {
            J::Obj(m) => J::Obj(
                m.iter()
                    .filter(|(k, _)| !keys.contains(&decode(k).as_str()))
                    .cloned()
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    /// Replaces the value of every member named `key`.
    pub fn with(&self, key: &str, v: J) -> J {
        match self {
            J::Obj(m) => J::Obj(
                m.iter()
                    .map(|(k, old)| {
                        if decode(k) == key {
                            (k.clone(), v.clone())
                        } else {
                            (k.clone(), old.clone())
                        }
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    pub fn is_obj(&self) -> bool {
        matches!(self, J::Obj(_))
    }
    /// As a `serde_json::Value` (strings decoded lossily, numbers parsed).
    pub fn to_value(&self) -> Value {
        match self {
            J::Null => Value::Null,
            J::Bool(b) => Value::Bool(*b),
            J::Num(n) => serde_json::from_str(n).unwrap_or(Value::Null),
            J::Str(s) => Value::String(decode(s)),
            J::Arr(a) => Value::Array(a.iter().map(J::to_value).collect()),
            J::Obj(m) => {
                let mut map = serde_json::Map::new();
                for (k, v) in m {
                    map.insert(decode(k), v.to_value());
                }
                Value::Object(map)
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Options and expected additions.
// ---------------------------------------------------------------------------

/// The reference's own view of the options.
#[derive(Clone, Debug)]
pub struct RefOpts {
    pub dialect: Dialect,
    pub unit: OffsetUnit,
    pub n: u32,
    pub only_cited: bool,
    pub max_event_size: Option<usize>,
}

impl Default for RefOpts {
    fn default() -> Self {
        RefOpts {
            dialect: Dialect::SOURCES,
            unit: OffsetUnit::Chars,
            n: 1,
            only_cited: false,
            max_event_size: None,
        }
    }
}

impl RefOpts {
    pub fn rewrite_options(&self) -> RewriteOptions {
        let mut o = RewriteOptions::new();
        o.dialect(self.dialect)
            .offsets(self.unit)
            .n(self.n)
            .only_cited(self.only_cited);
        o.sse(self.sse_config());
        o
    }
    pub fn sse_config(&self) -> sse::Config {
        let mut c = sse::Config::new();
        if let Some(m) = self.max_event_size {
            c.max_event_size(m);
        }
        c
    }
    /// The top-level keys this configuration adds.
    pub fn top_keys(&self) -> Vec<&'static str> {
        let mut k = Vec::new();
        if self.dialect.sources {
            k.push("sources");
        }
        if self.dialect.citations {
            k.push("citations");
        }
        k
    }
}

/// The top-level `sources` value (docs/reference/responses.md, "Chat completions"), built from the list.
pub fn expected_sources(list: &[Source]) -> Value {
    Value::Array(
        list.iter()
            .enumerate()
            .map(|(i, s)| json!({"index": i + 1, "title": s.title, "url": s.url}))
            .collect(),
    )
}

/// The top-level `citations` value (docs/reference/responses.md, "The citations array").
pub fn expected_citations(list: &[Source], cited: Option<&[bool]>) -> Value {
    Value::Array(
        list.iter()
            .enumerate()
            .filter(|(i, _)| cited.is_none_or(|c| c.get(i + 1).copied().unwrap_or(false)))
            .map(|(i, s)| {
                json!({
                    "cited_text": s.text.clone().unwrap_or_default(),
                    "cited_text_heading": s.heading,
                    "document_title": s.title,
                    "document_index": i,
                    "document_author": s.author,
                    "document_year": s.year,
                    "document_reference": s.reference,
                    "source_url": s.url.clone().unwrap_or_default(),
                })
            })
            .collect(),
    )
}

/// One `url_citation` annotation.
pub fn expected_annotation(list: &[Source], m: &Marker) -> Value {
    let s = &list[m.number as usize - 1];
    json!({"type": "url_citation", "url_citation": {
        "start_index": m.start, "end_index": m.end,
        "url": s.url.clone().unwrap_or_default(),
        "title": s.title.clone().unwrap_or_default(),
    }})
}

/// The markers of one content given as concatenated raw escaped bytes.
pub fn markers_of(escaped: &[u8], max: usize, unit: OffsetUnit) -> Vec<Marker> {
    cite_ref::markers(&cite_ref::decode_json(escaped), max as u32, unit)
}

/// What the output must contain, in order.
#[derive(Clone, Debug)]
pub enum Item {
    /// Upstream bytes forwarded unchanged.
    Same(Bytes),
    /// A synthesized annotations chunk for choice `index`, with the
    /// envelope of the finish chunk it precedes.
    Annotations {
        index: u32,
        envelope: Vec<(&'static str, J)>,
        markers: Vec<Marker>,
    },
    /// A chunk (or `message_delta`) that gets only our top-level members.
    Top { orig: J, event: sse::Event },
    /// The content half of a split finish chunk.
    SplitContent {
        orig: J,
        ending: Vec<usize>,
        event: sse::Event,
    },
    /// The finish half of a split finish chunk (`top`: carries ours).
    SplitFinish {
        orig: J,
        ending: Vec<usize>,
        top: bool,
        event: sse::Event,
    },
    /// The synthesized `choices: []` chunk for fewer than `n` finishes.
    Trailer { envelope: Vec<(&'static str, J)> },
}

/// The reference's verdict on one stream.
#[derive(Clone, Debug, Default)]
pub struct Expected {
    pub items: Vec<Item>,
    /// Per choice index: the markers of the choice's content (for every
    /// choice that finished).
    pub markers: Vec<(u32, Vec<Marker>)>,
    /// Numbers cited by the finished choices (index = number).
    pub cited: Vec<bool>,
    /// Whether any top-level addition is expected.
    pub top: bool,
}

const ENVELOPE: [&str; 5] = ["id", "object", "created", "model", "system_fingerprint"];

fn envelope(chunk: &J) -> Vec<(&'static str, J)> {
    ENVELOPE
        .iter()
        .filter_map(|&k| chunk.get(k).map(|v| (k, v.clone())))
        .collect()
}

/// A choice index: a plain non-negative integer that fits `u32`; a choice
/// without `index` is choice 0; any other value (a string, `1.0`, `-1`,
/// `01`, ...) is not a choice we understand, and is ignored.
fn choice_index(c: &J) -> Option<u32> {
    match c.get("index") {
        None => Some(0),
        Some(J::Num(s))
            if s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0')) =>
        {
            s.parse().ok()
        }
        _ => None,
    }
}

const MAX_CHOICES: u32 = 128;

#[derive(Default, Clone)]
struct RefChoice {
    content: Vec<u8>,
    finished: bool,
    markers: Vec<Marker>,
}

/// Splits `input` into frames (whole input at once) and the tail.
pub fn frames(input: &[u8], config: &sse::Config) -> (Vec<Frame>, Option<Bytes>) {
    let mut p = sse::Parser::with_config(config);
    p.feed(Bytes::copy_from_slice(input));
    let mut v = Vec::new();
    while let Some(f) = p.next_frame() {
        v.push(f);
    }
    let tail = p.finish();
    (v, tail)
}

/// The reference chat rewriter: what `ChatStream` must produce for `input`.
pub fn expect_chat(input: &[u8], sources: &[Source], o: &RefOpts) -> Expected {
    let (frames, tail) = frames(input, &o.sse_config());
    let mut ex = Expected::default();
    if sources.is_empty() {
        ex.items = frames.iter().map(|f| Item::Same(f.raw().clone())).collect();
        ex.items.extend(tail.map(Item::Same));
        return ex;
    }
    let mut choices: Vec<RefChoice> = Vec::new();
    let mut finished = 0u32;
    let mut top_done = false;
    let mut last_env: Vec<(&'static str, J)> = Vec::new();
    let mut items = Vec::new();
    let mut cited = vec![false; sources.len() + 1];
    // The cited set when the top-level additions are made (later finishes
    // cannot change what was already sent).
    let mut cited_at_top: Option<Vec<bool>> = None;

    let flush = |items: &mut Vec<Item>, top_done: &mut bool, finished: u32, env: &Vec<_>| {
        if !*top_done && finished > 0 {
            *top_done = true;
            items.push(Item::Trailer {
                envelope: env.clone(),
            });
        }
    };

    for f in &frames {
        let Frame::Event(e) = f else {
            items.push(Item::Same(f.raw().clone()));
            continue;
        };
        if e.event_type() != b"message" {
            items.push(Item::Same(e.raw().clone()));
            continue;
        }
        if e.data() == b"[DONE]" {
            flush(&mut items, &mut top_done, finished, &last_env);
            if top_done && cited_at_top.is_none() {
                cited_at_top = Some(cited.clone());
            }
            items.push(Item::Same(e.raw().clone()));
            continue;
        }
        let Some(chunk) = parse(e.data()).filter(J::is_obj) else {
            items.push(Item::Same(e.raw().clone()));
            continue;
        };
        let list: Vec<&J> = match chunk.get("choices") {
            Some(J::Arr(a)) => a.iter().filter(|c| c.is_obj()).collect(),
            _ => Vec::new(),
        };
        // Content first (the finish chunk's own content counts).
        for c in &list {
            let Some(idx) = choice_index(c).filter(|&i| i < MAX_CHOICES) else {
                continue;
            };
            while choices.len() <= idx as usize {
                choices.push(RefChoice::default());
            }
            let st = &mut choices[idx as usize];
            if st.finished {
                continue;
            }
            if let Some(J::Str(s)) = c.get("delta").and_then(|d| d.get("content")) {
                st.content.extend_from_slice(s);
            }
        }
        // Which choices finish here (first finish only), by position.
        let mut ending: Vec<usize> = Vec::new();
        let mut ending_idx: Vec<u32> = Vec::new();
        for (k, c) in list.iter().enumerate() {
            let Some(idx) = choice_index(c).filter(|&i| i < MAX_CHOICES) else {
                continue;
            };
            if !matches!(c.get("finish_reason"), Some(J::Str(_))) {
                continue;
            }
            if ending_idx.contains(&idx) || choices[idx as usize].finished {
                continue;
            }
            let st = &mut choices[idx as usize];
            st.finished = true;
            st.markers = markers_of(&st.content, sources.len(), o.unit);
            for m in &st.markers {
                cited[m.number as usize] = true;
            }
            ex.markers.push((idx, st.markers.clone()));
            ending.push(k);
            ending_idx.push(idx);
        }
        if ending.is_empty() {
            items.push(Item::Same(e.raw().clone()));
            continue;
        }
        finished += ending.len() as u32;
        let env = envelope(&chunk);
        last_env = env.clone();
        let top = !top_done && finished >= o.n;
        top_done |= top;
        if top {
            cited_at_top = Some(cited.clone());
        }
        let annotated: Vec<(usize, u32)> = ending
            .iter()
            .zip(&ending_idx)
            .filter(|&(_, &i)| o.dialect.sources && !choices[i as usize].markers.is_empty())
            .map(|(&k, &i)| (k, i))
            .collect();
        let split = annotated.iter().any(|&(k, _)| {
            matches!(list[k].get("delta").and_then(|d| d.get("content")), Some(J::Str(s)) if !s.is_empty())
        });
        // Positions are relative to the object-only list; map them back to
        // positions in the full `choices` array.
        let full_pos = |k: usize| -> usize {
            let Some(J::Arr(a)) = chunk.get("choices") else {
                unreachable!()
            };
            a.iter()
                .enumerate()
                .filter(|(_, c)| c.is_obj())
                .nth(k)
                .unwrap()
                .0
        };
        let ending_full: Vec<usize> = ending.iter().map(|&k| full_pos(k)).collect();
        if split {
            items.push(Item::SplitContent {
                orig: chunk.clone(),
                ending: ending_full.clone(),
                event: e.clone(),
            });
        }
        for &(_, i) in &annotated {
            items.push(Item::Annotations {
                index: i,
                envelope: env.clone(),
                markers: choices[i as usize].markers.clone(),
            });
        }
        if split {
            items.push(Item::SplitFinish {
                orig: chunk.clone(),
                ending: ending_full,
                top,
                event: e.clone(),
            });
        } else if top {
            items.push(Item::Top {
                orig: chunk.clone(),
                event: e.clone(),
            });
        } else {
            items.push(Item::Same(e.raw().clone()));
        }
    }
    flush(&mut items, &mut top_done, finished, &last_env);
    items.extend(tail.map(Item::Same));
    ex.top = top_done;
    ex.items = items;
    ex.cited = cited_at_top.unwrap_or(cited);
    ex
}

/// The reference messages rewriter.
pub fn expect_messages(input: &[u8], sources: &[Source], o: &RefOpts) -> Expected {
    let (frames, tail) = frames(input, &o.sse_config());
    let mut ex = Expected::default();
    let mut done = sources.is_empty();
    // The message's text (for `only_cited`): every `text_delta`, blocks
    // separated as paragraphs, as in the whole-body rewrite.
    let mut text: Vec<u8> = Vec::new();
    for f in &frames {
        if let Frame::Event(e) = f
            && !done
        {
            match e.event_type() {
                b"content_block_delta" => {
                    if let Some(d) = parse(e.data()).and_then(|j| j.get("delta").cloned())
                        && d.get("type") == Some(&J::Str(b"text_delta".to_vec()))
                        && let Some(J::Str(t)) = d.get("text")
                    {
                        text.extend_from_slice(t);
                    }
                }
                b"content_block_stop" => text.extend_from_slice(b"\\n\\n"),
                _ => {}
            }
        }
        match f {
            Frame::Event(e) if !done && matches!(e.event_type(), b"message_delta" | b"message") => {
                match parse(e.data()) {
                    Some(d) if d.get("type") == Some(&J::Str(b"message_delta".to_vec())) => {
                        done = true;
                        ex.top = true;
                        ex.cited = vec![false; sources.len() + 1];
                        for m in markers_of(&text, sources.len(), o.unit) {
                            ex.cited[m.number as usize] = true;
                        }
                        ex.items.push(Item::Top {
                            orig: d,
                            event: e.clone(),
                        });
                    }
                    _ => ex.items.push(Item::Same(e.raw().clone())),
                }
            }
            f => ex.items.push(Item::Same(f.raw().clone())),
        }
    }
    ex.items.extend(tail.map(Item::Same));
    ex
}

// ---------------------------------------------------------------------------
// Driving a rewriter.
// ---------------------------------------------------------------------------

/// Feeds `pieces` to `rw` with the sans-IO contract and returns the output.
pub fn drive<R: StreamRewriter + ?Sized>(rw: &mut R, pieces: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        rw.feed(Bytes::copy_from_slice(p));
        while let Some(b) = rw.next_output() {
            out.extend_from_slice(&b);
        }
    }
    rw.finish();
    while let Some(b) = rw.next_output() {
        out.extend_from_slice(&b);
    }
    out
}

/// Like [`drive`], but drains only after the pieces `i` with
/// `drain[i % drain.len()]` (always when `drain` is empty), so several
/// pieces may be queued before the output is taken.
pub fn drive_mixed<R: StreamRewriter + ?Sized>(
    rw: &mut R,
    pieces: &[&[u8]],
    drain: &[bool],
) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, p) in pieces.iter().enumerate() {
        rw.feed(Bytes::copy_from_slice(p));
        if drain.is_empty() || drain[i % drain.len()] {
            while let Some(b) = rw.next_output() {
                out.extend_from_slice(&b);
            }
        }
    }
    rw.finish();
    while let Some(b) = rw.next_output() {
        out.extend_from_slice(&b);
    }
    out
}

/// `input` in pieces of `size` bytes (`0` = whole).
pub fn pieces(input: &[u8], size: usize) -> Vec<&[u8]> {
    if size == 0 || input.is_empty() {
        return vec![input];
    }
    input.chunks(size).collect()
}

/// `input` split at the given (sorted, deduplicated) offsets.
pub fn split_at<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut v = Vec::new();
    let mut at = 0;
    for &c in cuts {
        let c = c.min(input.len());
        if c > at {
            v.push(&input[at..c]);
            at = c;
        }
    }
    v.push(&input[at..]);
    v
}

pub fn run_chat(sources: &Arc<Sources>, o: &RefOpts, pieces: &[&[u8]]) -> Vec<u8> {
    let mut rw = citestream::ChatStream::new(sources.clone(), o.rewrite_options());
    drive(&mut rw, pieces)
}

pub fn run_messages(sources: &Arc<Sources>, o: &RefOpts, pieces: &[&[u8]]) -> Vec<u8> {
    let mut rw = citestream::MessagesStream::new(sources.clone(), o.rewrite_options());
    drive(&mut rw, pieces)
}

// ---------------------------------------------------------------------------
// The structural checker.
// ---------------------------------------------------------------------------

/// Output frames with their start offsets (whole output, default limits so
/// that large synthesized events parse too).
fn out_frames(output: &[u8]) -> Vec<(usize, Frame)> {
    let (fs, tail) = frames(output, &sse::Config::new());
    let mut at = 0;
    let mut v = Vec::new();
    for f in fs {
        let len = f.raw().len();
        v.push((at, f));
        at += len;
    }
    if let Some(t) = tail {
        v.push((at, Frame::Skipped(t)));
    }
    v
}

fn fail(ctx: &str, msg: String, output: &[u8]) -> ! {
    panic!(
        "{ctx}: {msg}\n--- output ---\n{}",
        String::from_utf8_lossy(output)
    )
}

/// Checks that `output` is exactly what the reference expects, structurally.
/// Returns the annotations arrays found, per choice index, in output order.
pub fn check(
    ctx: &str,
    output: &[u8],
    ex: &Expected,
    sources: &[Source],
    o: &RefOpts,
    messages: bool,
) -> Vec<(u32, Value)> {
    let outs = out_frames(output);
    let keys = o.top_keys();
    let top_values: Vec<(&str, Value)> = keys
        .iter()
        .map(|&k| {
            let v = if k == "sources" {
                expected_sources(sources)
            } else {
                expected_citations(sources, o.only_cited.then_some(&ex.cited[..]))
            };
            (k, v)
        })
        .collect();
    let mut cur = 0usize; // byte cursor in output
    let mut found: Vec<(u32, Value)> = Vec::new();
    let mut tops = 0;
    // The next whole output event at `cur`.
    let next_event = |cur: usize, what: &str| -> sse::Event {
        let Some((_, f)) = outs.iter().find(|(s, _)| *s == cur) else {
            fail(
                ctx,
                format!("{what}: no frame starts at output byte {cur}"),
                output,
            )
        };
        match f {
            Frame::Event(e) => e.clone(),
            other => fail(
                ctx,
                format!("{what}: expected an event, got {other:?}"),
                output,
            ),
        }
    };
    let parse_data = |e: &sse::Event, what: &str| -> J {
        match parse(e.data()) {
            Some(j) if j.is_obj() => j,
            _ => fail(
                ctx,
                format!("{what}: data is not a JSON object: {:?}", e.data_str()),
                output,
            ),
        }
    };
    let check_top = |j: &J, what: &str| {
        for (k, v) in &top_values {
            if j.count(k) != 1 {
                fail(
                    ctx,
                    format!("{what}: `{k}` appears {} times", j.count(k)),
                    output,
                );
            }
            if &j.get(k).unwrap().to_value() != v {
                fail(
                    ctx,
                    format!("{what}: `{k}` = {} != {v}", j.get(k).unwrap().to_value()),
                    output,
                );
            }
        }
    };
    // A synthesized event: canonical framing, no event/id (on chat).
    let synthesized = |e: &sse::Event, what: &str| {
        let mut want = Vec::new();
        if messages {
            unreachable!("messages synthesizes nothing");
        }
        want.extend_from_slice(b"data: ");
        want.extend_from_slice(e.data());
        want.extend_from_slice(b"\n\n");
        if e.raw()[..] != want[..] {
            fail(
                ctx,
                format!("{what}: not canonical `data: <json>\\n\\n` framing"),
                output,
            );
        }
    };
    // A modified event keeps its event/id fields; spliced events keep all
    // framing bytes.
    let kept_fields = |out: &sse::Event, orig: &sse::Event, what: &str, spliced: bool| {
        if out.event_field() != orig.event_field() || out.id_field() != orig.id_field() {
            fail(ctx, format!("{what}: event/id fields changed"), output);
        }
        if messages && out.event_type() != orig.event_type() {
            fail(ctx, format!("{what}: event type changed"), output);
        }
        if spliced && let Some(r) = orig.data_range() {
            // Framing identical: put the original data back in.
            let or = out.data_range().unwrap_or_else(|| {
                fail(
                    ctx,
                    format!("{what}: one-line data became multi-line"),
                    output,
                )
            });
            let mut back = out.raw()[..or.start].to_vec();
            back.extend_from_slice(orig.data());
            back.extend_from_slice(&out.raw()[or.end..]);
            if back[..] != orig.raw()[..] {
                fail(ctx, format!("{what}: framing bytes changed"), output);
            }
            let _ = r;
        }
    };

    for (n, item) in ex.items.iter().enumerate() {
        let what = format!("item {n}");
        match item {
            Item::Same(raw) => {
                if !output[cur..].starts_with(raw) {
                    fail(
                        ctx,
                        format!(
                            "{what}: upstream bytes not forwarded unchanged at {cur}: expected {:?}",
                            String::from_utf8_lossy(raw)
                        ),
                        output,
                    );
                }
                cur += raw.len();
            }
            Item::Annotations {
                index,
                envelope,
                markers,
            } => {
                let e = next_event(cur, &what);
                cur += e.raw().len();
                synthesized(&e, &what);
                let j = parse_data(&e, &what);
                let mut want = serde_json::Map::new();
                for (k, v) in envelope {
                    want.insert(k.to_string(), v.to_value());
                }
                let anns: Vec<Value> = markers
                    .iter()
                    .map(|m| expected_annotation(sources, m))
                    .collect();
                want.insert(
                    "choices".into(),
                    json!([{"index": index, "delta": {"annotations": anns}, "finish_reason": null}]),
                );
                if j.to_value() != Value::Object(want.clone()) {
                    fail(
                        ctx,
                        format!(
                            "{what}: annotations chunk {} != expected {}",
                            j.to_value(),
                            Value::Object(want)
                        ),
                        output,
                    );
                }
                // Strict JSON too.
                if serde_json::from_slice::<Value>(e.data()).is_err() {
                    fail(ctx, format!("{what}: not strict JSON"), output);
                }
                found.push((
                    *index,
                    j.to_value()["choices"][0]["delta"]["annotations"].clone(),
                ));
            }
            Item::Top { orig, event } => {
                let e = next_event(cur, &what);
                cur += e.raw().len();
                kept_fields(&e, event, &what, true);
                let j = parse_data(&e, &what);
                check_top(&j, &what);
                tops += 1;
                if j.without(&keys) != orig.without(&keys) {
                    fail(
                        ctx,
                        format!("{what}: modified chunk differs beyond our members"),
                        output,
                    );
                }
            }
            Item::SplitContent {
                orig,
                ending,
                event,
            } => {
                let e = next_event(cur, &what);
                cur += e.raw().len();
                kept_fields(&e, event, &what, false);
                let j = parse_data(&e, &what);
                let want = map_choices(orig, |i, c| {
                    if ending.contains(&i) {
                        Some(c.with("finish_reason", J::Null))
                    } else {
                        Some(c.clone())
                    }
                })
                .without(&["usage"]);
                if j != want {
                    fail(
                        ctx,
                        format!(
                            "{what}: content part {} != expected {}",
                            j.to_value(),
                            want.to_value()
                        ),
                        output,
                    );
                }
            }
            Item::SplitFinish {
                orig,
                ending,
                top,
                event,
            } => {
                let e = next_event(cur, &what);
                cur += e.raw().len();
                kept_fields(&e, event, &what, false);
                let j = parse_data(&e, &what);
                let want = map_choices(orig, |i, c| {
                    ending.contains(&i).then(|| {
                        let c = c.with("delta", J::Obj(vec![]));
                        if c.get("logprobs").is_some() {
                            c.with("logprobs", J::Null)
                        } else {
                            c
                        }
                    })
                });
                let (jj, ww) = if *top {
                    check_top(&j, &what);
                    tops += 1;
                    (j.without(&keys), want.without(&keys))
                } else {
                    (j.clone(), want)
                };
                if jj != ww {
                    fail(
                        ctx,
                        format!(
                            "{what}: finish part {} != expected {}",
                            jj.to_value(),
                            ww.to_value()
                        ),
                        output,
                    );
                }
            }
            Item::Trailer { envelope } => {
                let e = next_event(cur, &what);
                cur += e.raw().len();
                synthesized(&e, &what);
                let j = parse_data(&e, &what);
                check_top(&j, &what);
                tops += 1;
                let mut want: Vec<(Vec<u8>, J)> = envelope
                    .iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
                    .collect();
                want.push((b"choices".to_vec(), J::Arr(vec![])));
                if j.without(&keys).to_value() != J::Obj(want).to_value() {
                    fail(
                        ctx,
                        format!("{what}: trailer chunk {}", j.to_value()),
                        output,
                    );
                }
            }
        }
    }
    if cur != output.len() {
        fail(
            ctx,
            format!(
                "extra output after byte {cur}: {:?}",
                String::from_utf8_lossy(&output[cur..])
            ),
            output,
        );
    }
    if tops != usize::from(ex.top && !keys.is_empty()) {
        fail(ctx, format!("top-level additions {tops} times"), output);
    }
    found
}

/// Applies `f` to each element of `choices` (by position); `None` drops it.
fn map_choices(orig: &J, f: impl Fn(usize, &J) -> Option<J>) -> J {
    let Some(J::Arr(a)) = orig.get("choices") else {
        return orig.clone();
    };
    let arr = a.iter().enumerate().filter_map(|(i, c)| f(i, c)).collect();
    orig.with("choices", J::Arr(arr))
}

/// Full check of one chat stream: runs the reference, then the real
/// rewriter at every given read size, requires identical outputs across
/// read sizes and the reference's structure. Returns the whole-read output.
pub fn check_chat(
    ctx: &str,
    input: &[u8],
    sources: &[Source],
    o: &RefOpts,
    read_sizes: &[usize],
) -> (Vec<u8>, Expected, Vec<(u32, Value)>) {
    let ex = expect_chat(input, sources, o);
    let arc = Arc::new(Sources::new(sources.to_vec()));
    let whole = run_chat(&arc, o, &pieces(input, 0));
    let found = check(ctx, &whole, &ex, sources, o, false);
    for &r in read_sizes {
        let out = run_chat(&arc, o, &pieces(input, r));
        if out != whole {
            panic!(
                "{ctx}: read size {r} output differs from whole-input output\n--- whole ---\n{}\n--- read {r} ---\n{}",
                String::from_utf8_lossy(&whole),
                String::from_utf8_lossy(&out)
            );
        }
    }
    (whole, ex, found)
}

/// Full check of one messages stream (see [`check_chat`]).
pub fn check_messages(
    ctx: &str,
    input: &[u8],
    sources: &[Source],
    o: &RefOpts,
    read_sizes: &[usize],
) -> (Vec<u8>, Expected) {
    let ex = expect_messages(input, sources, o);
    let arc = Arc::new(Sources::new(sources.to_vec()));
    let whole = run_messages(&arc, o, &pieces(input, 0));
    check(ctx, &whole, &ex, sources, o, true);
    for &r in read_sizes {
        let out = run_messages(&arc, o, &pieces(input, r));
        if out != whole {
            panic!("{ctx}: read size {r} output differs from whole-input output");
        }
    }
    (whole, ex)
}

/// `n` made-up sources, some with missing fields and characters that need
/// escaping.
pub fn make_sources(n: usize) -> Vec<Source> {
    (0..n)
        .map(|i| Source {
            title: (i % 4 != 3).then(|| format!("Source \"{}\" é", i + 1)),
            url: (i % 5 != 4).then(|| format!("https://example.com/{}?q=a&b=<c>", i + 1)),
            text: (i % 2 == 0).then(|| format!("Passage {} with a\nnewline", i + 1)),
            heading: (i % 3 == 0).then(|| format!("Heading {}", i + 1)),
            author: (i == 0).then(|| "Anon".to_string()),
            year: (i == 1).then(|| "1999".to_string()),
            reference: (i == 2).then(|| "34".to_string()),
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Helpers for the fuzz targets (fuzz/fuzz_targets/chat_*.rs include this
// file with `#[path]`).
// ---------------------------------------------------------------------------

/// Options from one fuzz byte: dialect, unit, `n`, `only_cited`.
pub fn opts_from_byte(b: u8, max_event_size: Option<usize>) -> RefOpts {
    RefOpts {
        dialect: [
            Dialect::SOURCES,
            Dialect::CITATIONS,
            Dialect::BOTH,
            Dialect::SOURCES,
        ][usize::from(b & 3)],
        unit: [
            OffsetUnit::Chars,
            OffsetUnit::Utf16,
            OffsetUnit::Bytes,
            OffsetUnit::Chars,
        ][usize::from((b >> 2) & 3)],
        n: u32::from((b >> 4) & 3) + 1,
        only_cited: b & 0x40 != 0,
        max_event_size,
    }
}

/// A chat stream made of fuzz bytes: pieces separated by `0xFF`; each
/// piece's first byte picks the choice (bits 0-1), whether it finishes
/// (bit 2), content or not (bit 3), a usage-only chunk after it (bit 4),
/// `[DONE]` after it (bit 5), CRLF framing (bit 6), multi-line data
/// (bit 7); the rest is put raw between the quotes of `delta.content`
/// (so it may be invalid JSON, which must then pass through).
pub fn chat_stream_from_fuzz(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in data.split(|&b| b == 0xFF) {
        let Some((&c, content)) = piece.split_first() else {
            continue;
        };
        let eol: &[u8] = if c & 64 != 0 { b"\r\n" } else { b"\n" };
        let mut d = format!(
            "{{\"id\":\"f\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":{},\"delta\":{{",
            c & 3
        )
        .into_bytes();
        if c & 8 != 0 {
            d.extend_from_slice(b"\"content\":\"");
            d.extend_from_slice(content);
            d.push(b'"');
        }
        d.extend_from_slice(b"},\"finish_reason\":");
        d.extend_from_slice(if c & 4 != 0 { b"\"stop\"" } else { b"null" });
        d.extend_from_slice(b"}]}");
        let sep: &[u8] = if c & 128 != 0 { b"\ndata: " } else { b"" };
        out.extend_from_slice(b"data: ");
        // Multi-line data: break after the first comma.
        if let Some(k) = d.iter().position(|&b| b == b',') {
            out.extend_from_slice(&d[..=k]);
            out.extend_from_slice(sep);
            out.extend_from_slice(&d[k + 1..]);
        } else {
            out.extend_from_slice(&d);
        }
        out.extend_from_slice(eol);
        out.extend_from_slice(eol);
        if c & 16 != 0 {
            out.extend_from_slice(
                b"data: {\"id\":\"f\",\"choices\":[],\"usage\":{\"total_tokens\":1}}",
            );
            out.extend_from_slice(eol);
            out.extend_from_slice(eol);
        }
        if c & 32 != 0 {
            out.extend_from_slice(b"data: [DONE]");
            out.extend_from_slice(eol);
            out.extend_from_slice(eol);
        }
    }
    out
}

/// A messages stream made of fuzz bytes: pieces separated by `0xFF`; each
/// piece's first byte picks the event (`message_start`, text delta,
/// `content_block_stop`, `message_delta`, `message_stop`, `ping`, `error`,
/// an event without `event:` line); the rest goes raw into its text.
pub fn messages_stream_from_fuzz(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in data.split(|&b| b == 0xFF) {
        let Some((&c, text)) = piece.split_first() else {
            continue;
        };
        let text = || text.to_vec();
        let (ev, d): (&str, Vec<u8>) = match c & 7 {
            0 => ("message_start", b"{\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"content\":[]}}".to_vec()),
            1 => ("content_block_delta", [&b"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""[..], &text(), b"\"}}"].concat()),
            2 => ("content_block_stop", b"{\"type\":\"content_block_stop\",\"index\":0}".to_vec()),
            3 => ("message_delta", [&b"{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"x\":\""[..], &text(), b"\"},\"usage\":{\"output_tokens\":3}}"].concat()),
            4 => ("message_stop", b"{\"type\":\"message_stop\"}".to_vec()),
            5 => ("ping", b"{\"type\": \"ping\"}".to_vec()),
            6 => ("error", b"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}".to_vec()),
            _ => ("", [&b"{\"type\":\"message_delta\",\"delta\":{},\"t\":\""[..], &text(), b"\"}"].concat()),
        };
        let eol: &[u8] = if c & 8 != 0 { b"\r\n" } else { b"\n" };
        if !ev.is_empty() {
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(ev.as_bytes());
            out.extend_from_slice(eol);
        }
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&d);
        out.extend_from_slice(eol);
        if c & 16 == 0 {
            out.extend_from_slice(eol);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Whole bodies.
// ---------------------------------------------------------------------------

/// Checks a whole-body chat rewrite against the reference: unchanged when
/// the body is not a JSON object with a `choices` array (or there are no
/// sources); else each `choices[i].message` object has `annotations` =
/// upstream ones (when an array) + ours (in place when the member existed,
/// else appended), top-level ours replace upstream members of the same
/// name, and nothing else changes.
pub fn check_body(ctx: &str, body: &[u8], out: &[u8], sources: &[Source], o: &RefOpts) {
    let parsed = parse(body).filter(|j| matches!(j.get("choices"), Some(J::Arr(_))));
    let Some(orig) = parsed.filter(|_| !sources.is_empty()) else {
        assert!(out == body, "{ctx}: body must be unchanged");
        return;
    };
    let got = parse(out).unwrap_or_else(|| panic!("{ctx}: output is not JSON"));
    let keys = o.top_keys();
    let mut cited = vec![false; sources.len() + 1];
    let J::Arr(choices) = orig.get("choices").unwrap().clone() else {
        unreachable!()
    };
    let mut new_choices = Vec::new();
    for c in choices {
        let Some(msg) = c.get("message").filter(|m| m.is_obj()).cloned() else {
            new_choices.push(c);
            continue;
        };
        let content = match msg.get("content") {
            Some(J::Str(s)) => s.clone(),
            _ => Vec::new(),
        };
        let ms = markers_of(&content, sources.len(), o.unit);
        for m in &ms {
            cited[m.number as usize] = true;
        }
        if !o.dialect.sources {
            new_choices.push(c);
            continue;
        }
        let ours: Vec<J> = ms
            .iter()
            .map(|m| {
                // Members in the spec's order (a `Value` would sort them).
                let s = &sources[m.number as usize - 1];
                let txt = format!(
                    "{{\"type\":\"url_citation\",\"url_citation\":{{\"start_index\":{},\"end_index\":{},\"url\":{},\"title\":{}}}}}",
                    m.start,
                    m.end,
                    serde_json::to_string(&s.url.clone().unwrap_or_default()).unwrap(),
                    serde_json::to_string(&s.title.clone().unwrap_or_default()).unwrap()
                );
                parse(txt.as_bytes()).unwrap()
            })
            .collect();
        let msg = match msg.get("annotations") {
            Some(J::Arr(up)) => {
                let mut all = up.clone();
                all.extend(ours);
                msg.with("annotations", J::Arr(all))
            }
            Some(_) => msg.with("annotations", J::Arr(ours)),
            None => {
                let J::Obj(mut m) = msg else { unreachable!() };
                m.push((b"annotations".to_vec(), J::Arr(ours)));
                J::Obj(m)
            }
        };
        new_choices.push(c.with("message", msg));
    }
    let want = orig.with("choices", J::Arr(new_choices)).without(&keys);
    // Compared as values: a string's escapes may differ only in ours.
    assert_eq!(
        got.without(&keys).to_value(),
        want.to_value(),
        "{ctx}: body differs beyond our additions"
    );
    assert!(
        got.without(&keys) == want,
        "{ctx}: upstream bytes (or member order) of the body changed:\n{}\n{}",
        String::from_utf8_lossy(out),
        {
            let (g, w) = (format!("{:?}", got.without(&keys)), format!("{want:?}"));
            let k = g.bytes().zip(w.bytes()).take_while(|(a, b)| a == b).count();
            format!(
                "got  ...{}\nwant ...{}",
                &g[k.saturating_sub(200)..(k + 200).min(g.len())],
                &w[k.saturating_sub(200)..(k + 200).min(w.len())]
            )
        }
    );
    for k in &keys {
        assert_eq!(got.count(k), 1, "{ctx}: `{k}` count");
        let v = if *k == "sources" {
            expected_sources(sources)
        } else {
            expected_citations(sources, o.only_cited.then_some(&cited[..]))
        };
        assert_eq!(got.get(k).unwrap().to_value(), v, "{ctx}: `{k}`");
    }
}
