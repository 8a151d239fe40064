//! The chat (`/v1/chat/completions`) and messages (`/v1/messages`)
//! rewriters and their baselines, driven the same way: every input piece in,
//! every output `Bytes` out to `sink`.
//!
//! * `citestream`: [`ChatStream`] / [`MessagesStream`], `feed` + drain
//!   `next_output`, then `finish` + drain.
//! * `naive` (what gateways do today): split the byte stream on blank lines
//!   (carry-over across reads), parse each event's data to a
//!   `serde_json::Value`, append each choice's content to a `String`, at the
//!   finish chunk find the markers in it ([`find_markers`]), insert the
//!   annotations chunk and `sources`, `serde_json::to_vec` every chunk and
//!   frame it again as `data: …\n\n`.
//! * `conventional` (the strongest conventional approach): `sse-stream` 0.3
//!   framing, serde deserializing only `choices[].index`,
//!   `choices[].delta.content` and `choices[].finish_reason` as borrowed
//!   values, the original data forwarded (re-framed into one reused
//!   `BytesMut`, no per-event allocation of ours) for every chunk it does
//!   not modify, the same marker scan as naive at the finish chunk, the
//!   annotations chunk synthesized and `sources` spliced into the finish
//!   chunk before its closing brace.
//!
//! Both baselines follow the same rules as citestream (docs/reference/responses.md, "Markers", "Chat completions", "Messages")
//! for what they add: annotations only for choices with markers, right
//! before the choice's first finish chunk; `sources` on the n-th finish;
//! a finish chunk that also carries content for an annotated choice split
//! in three; events with an `event:` type other than `message` untouched.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use citestream::{ChatStream, MessagesStream, RewriteOptions, Sources, StreamRewriter};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Lcg;

/// The three sources every chat and messages bench uses.
pub(crate) const SOURCES_JSON: &str = r#"[
  {"title": "Server-sent events - HTML Living Standard", "url": "https://html.spec.whatwg.org/multipage/server-sent-events.html"},
  {"title": "Streaming responses | OpenAI API", "url": "https://platform.openai.com/docs/guides/streaming-responses"},
  {"title": "Messages streaming | Anthropic", "url": "https://docs.anthropic.com/en/api/messages-streaming"}
]"#;

/// What every implementation gets, prepared once outside timing: the
/// sources as citestream holds them, and as a gateway would keep them
/// (serialized `sources` array, its `Value`, `url`/`title` per number).
#[derive(Debug)]
pub(crate) struct Setup {
    pub(crate) sources: Arc<Sources>,
    pub(crate) opts: RewriteOptions,
    pub(crate) sources_json: String,
    sources_value: Value,
    pub(crate) cites: Vec<(Value, Value)>,
}

impl Setup {
    pub(crate) fn new() -> Self {
        let sources = Arc::new(Sources::from_json(SOURCES_JSON.as_bytes()).expect("sources"));
        let sources_json = sources.sources_json().to_owned();
        let sources_value: Value = serde_json::from_str(&sources_json).expect("sources json");
        let cites = sources
            .list()
            .iter()
            .map(|s| {
                (
                    json!(s.url.clone().unwrap_or_default()),
                    json!(s.title.clone().unwrap_or_default()),
                )
            })
            .collect();
        Setup {
            sources,
            opts: RewriteOptions::new(),
            sources_json,
            sources_value,
            cites,
        }
    }

    pub(crate) fn max(&self) -> u32 {
        self.cites.len() as u32
    }

    fn annotations(&self, markers: &[(u32, u64, u64)]) -> Value {
        Value::Array(
            markers
                .iter()
                .map(|&(n, start, end)| {
                    let (url, title) = &self.cites[n as usize - 1];
                    json!({"type": "url_citation", "url_citation": {
                        "start_index": start, "end_index": end, "url": url, "title": title}})
                })
                .collect(),
        )
    }
}

// ---------------------------------------------------------------------------
// Inputs

/// Content tokens for the chat streams: the SSE bench's tokens plus the
/// markers `[2]` and `[3]` (`[1]` is among them already).
pub(crate) fn token(rng: &mut Lcg) -> &'static str {
    match rng.below(60) {
        0 => " [2]",
        1 => " [3]",
        2 => "[1][2]",
        _ => super::TOKENS[rng.below(super::TOKENS.len())],
    }
}

/// Random `obfuscation` padding as OpenAI sends it (0–15 characters).
pub(crate) fn obfuscation(rng: &mut Lcg, out: &mut Vec<u8>) {
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    for _ in 0..rng.below(16) {
        out.push(ALNUM[rng.below(ALNUM.len())]);
    }
}

/// A long OpenAI chat stream: role chunk, `events` one-token content chunks
/// (markers `[1]`–`[3]` among the tokens, some inside inline code), the
/// finish chunk, the usage chunk and `[DONE]`.
///
/// `obfuscation`: the current gpt-4.1/gpt-5 shape (`service_tier`,
/// `"usage":null` and a random-length `"obfuscation"` string on every
/// chunk, about 290 bytes per event); otherwise the gpt-4o shape of the SSE
/// bench (about 260 bytes per event).
pub(crate) fn chat_stream(events: usize, obfuscate: bool) -> Vec<u8> {
    let head: &str = if obfuscate {
        r#"data: {"id":"chatcmpl-D8Z5oo6uDh67AD85p73ksdT1KxhE0","object":"chat.completion.chunk","created":1770933892,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_de604bd877","choices":["#
    } else {
        r#"data: {"id":"chatcmpl-AY3rM0dJ9sVq2ZkT7wXpLb4NcHe81","object":"chat.completion.chunk","created":1732900000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_7f6be3efb0","choices":["#
    };
    let mut rng = Lcg::new(0xC17E);
    let mut out = Vec::with_capacity(events * 300 + 1024);
    let tail = |rng: &mut Lcg, out: &mut Vec<u8>, usage: &str| {
        out.extend_from_slice(b"]");
        if obfuscate {
            out.extend_from_slice(b",\"usage\":");
            out.extend_from_slice(usage.as_bytes());
            out.extend_from_slice(b",\"obfuscation\":\"");
            obfuscation(rng, out);
            out.extend_from_slice(b"\"}\n\n");
        } else if usage != "null" {
            out.extend_from_slice(b",\"usage\":");
            out.extend_from_slice(usage.as_bytes());
            out.extend_from_slice(b"}\n\n");
        } else {
            out.extend_from_slice(b"}\n\n");
        }
    };
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(
        br#"{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}"#,
    );
    tail(&mut rng, &mut out, "null");
    for _ in 0..events {
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(br#"{"index":0,"delta":{"content":""#);
        out.extend_from_slice(token(&mut rng).as_bytes());
        out.extend_from_slice(br#""},"logprobs":null,"finish_reason":null}"#);
        tail(&mut rng, &mut out, "null");
    }
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(br#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}"#);
    tail(&mut rng, &mut out, "null");
    out.extend_from_slice(head.as_bytes());
    tail(
        &mut rng,
        &mut out,
        r#"{"prompt_tokens":1543,"completion_tokens":4000,"total_tokens":5543}"#,
    );
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

/// [`chat_stream`]'s gpt-4o stream with `n` = 3: role chunks for the three
/// choices, then `events` content chunks whose choice index cycles 0, 1, 2
/// (one choice per chunk, interleaved, as api.openai.com sends them), a
/// finish chunk per choice, `[DONE]`.
pub(crate) fn chat_stream_n3(events: usize) -> Vec<u8> {
    let head = r#"data: {"id":"chatcmpl-AY3rM0dJ9sVq2ZkT7wXpLb4NcHe81","object":"chat.completion.chunk","created":1732900000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_7f6be3efb0","choices":["#;
    let mut rng = Lcg::new(0xC17E);
    let mut out = Vec::with_capacity(events * 300 + 1024);
    let chunk = |out: &mut Vec<u8>, choice: String| {
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(choice.as_bytes());
        out.extend_from_slice(b"]}\n\n");
    };
    for i in 0..3 {
        chunk(
            &mut out,
            format!(
                r#"{{"index":{i},"delta":{{"role":"assistant","content":"","refusal":null}},"logprobs":null,"finish_reason":null}}"#
            ),
        );
    }
    for k in 0..events {
        let tok = token(&mut rng);
        chunk(
            &mut out,
            format!(
                r#"{{"index":{},"delta":{{"content":"{tok}"}},"logprobs":null,"finish_reason":null}}"#,
                k % 3
            ),
        );
    }
    for i in 0..3 {
        chunk(
            &mut out,
            format!(r#"{{"index":{i},"delta":{{}},"logprobs":null,"finish_reason":"stop"}}"#),
        );
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

/// [`chat_stream_n3`]'s stream with the three choices packed into ONE
/// chunk each time (as some OpenAI-compatible servers send `n` > 1): a role
/// chunk, `events` chunks each carrying a content token for choices 0, 1
/// and 2, a finish chunk for all three, `[DONE]`.
pub(crate) fn chat_stream_n3_packed(events: usize) -> Vec<u8> {
    let head = r#"data: {"id":"chatcmpl-AY3rM0dJ9sVq2ZkT7wXpLb4NcHe81","object":"chat.completion.chunk","created":1732900000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_7f6be3efb0","choices":["#;
    let mut rng = Lcg::new(0xC17E);
    let mut out = Vec::with_capacity(events * 400 + 1024);
    let chunk = |out: &mut Vec<u8>, choice: &dyn Fn(usize) -> String| {
        out.extend_from_slice(head.as_bytes());
        for i in 0..3 {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(choice(i).as_bytes());
        }
        out.extend_from_slice(b"]}\n\n");
    };
    chunk(&mut out, &|i| {
        format!(
            r#"{{"index":{i},"delta":{{"role":"assistant","content":"","refusal":null}},"logprobs":null,"finish_reason":null}}"#
        )
    });
    for _ in 0..events {
        let toks = [token(&mut rng), token(&mut rng), token(&mut rng)];
        chunk(&mut out, &|i| {
            format!(
                r#"{{"index":{i},"delta":{{"content":"{}"}},"logprobs":null,"finish_reason":null}}"#,
                toks[i]
            )
        });
    }
    chunk(&mut out, &|i| {
        format!(r#"{{"index":{i},"delta":{{}},"logprobs":null,"finish_reason":"stop"}}"#)
    });
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

/// A Perplexity-style stream (the shape of
/// `tests/fixtures/upstream/perplexity_sonar_citations.sse`): every chunk
/// carries a running `usage` (its numbers change every time) and the
/// `citations` list, before `choices`; `events` content chunks, a finish
/// chunk, `[DONE]`.
pub(crate) fn perplexity_stream(events: usize) -> Vec<u8> {
    let mut rng = Lcg::new(0x5EA7);
    let mut out = Vec::with_capacity(events * 700 + 1024);
    let citations = r#""citations":["https://populationstat.com/united-states/san-francisco","https://en.wikipedia.org/wiki/San_Francisco","https://fred.stlouisfed.org/graph/?g=4K5j","https://www.california-demographics.com/cities_by_population"]"#;
    for k in 0..=events {
        let (delta, finish) = if k == events {
            (String::new(), r#","finish_reason":"stop""#)
        } else {
            (
                format!(r#""role":"assistant","content":"{}""#, token(&mut rng)),
                "",
            )
        };
        out.extend_from_slice(
            format!(
                r#"data: {{"id":"58cb9740-f356-49e9-b71e-a02a1376c1b9","model":"sonar","created":1770768240,"usage":{{"prompt_tokens":10,"completion_tokens":{},"total_tokens":{}}},{citations},"object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{{delta}}}{finish}}}]}}"#,
                k + 1,
                k + 11
            )
            .as_bytes(),
        );
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

/// A long Anthropic `/v1/messages` text stream: `message_start`,
/// `content_block_start`, `ping`, `events` `text_delta` events (the same
/// tokens and markers as [`chat_stream`]), `content_block_stop`,
/// `message_delta`, `message_stop`.
pub(crate) fn messages_stream(events: usize) -> Vec<u8> {
    let mut rng = Lcg::new(0xA17C);
    let mut out = Vec::with_capacity(events * 150 + 1024);
    out.extend_from_slice(concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1543,"output_tokens":1}}}"#,
        "\n\nevent: content_block_start\n",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        "\n\nevent: ping\n",
        r#"data: {"type": "ping"}"#,
        "\n\n"
    ).as_bytes());
    for _ in 0..events {
        out.extend_from_slice(
            br#"event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""#,
        );
        out.extend_from_slice(token(&mut rng).as_bytes());
        out.extend_from_slice(b"\"}}\n\n");
    }
    out.extend_from_slice(concat!(
        "event: content_block_stop\n",
        r#"data: {"type":"content_block_stop","index":0}"#,
        "\n\nevent: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":4000}}"#,
        "\n\nevent: message_stop\n",
        r#"data: {"type":"message_stop"}"#,
        "\n\n"
    ).as_bytes());
    out
}

/// The recorded streams in `tests/fixtures/upstream/` whose name starts
/// (`anthropic_`) or does not start (`!anthropic_`) with `prefix`, in file
/// name order, each as its own stream.
pub(crate) fn fixtures(anthropic: bool) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("fixture dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("anthropic_") == anthropic
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let name = f.file_stem().unwrap().to_string_lossy().into_owned();
            (
                name,
                std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display())),
            )
        })
        .collect()
}

/// One stream's pieces; several streams form one input.
pub(crate) type Streams = Vec<Vec<Bytes>>;

/// Splits each stream as [`super::split`] does (pieces are slices of one
/// shared `Bytes` per stream).
pub(crate) fn split_streams(streams: &[Vec<u8>], size: Option<usize>) -> Streams {
    streams.iter().map(|s| super::split(s, size)).collect()
}

// ---------------------------------------------------------------------------
// The marker scan the baselines share

/// The markers of a whole content, as `(number, start, end)` in characters
/// (docs/reference/responses.md, "Markers"): `[n]` with 1–4 digits, no leading zero, `n` in
/// `1..=max`, not after a backslash, not inside a fenced code block or an
/// inline code span. A straightforward scan over the accumulated text: a
/// byte mask for code, then one pass over the bytes counting characters.
pub(crate) fn find_markers(text: &str, max: u32) -> Vec<(u32, u64, u64)> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    if memchr::memchr(b'[', b).is_none() {
        return found;
    }
    let mut code = vec![false; b.len()];
    mark_code(b, &mut code);
    let mut chars = 0u64;
    for i in 0..b.len() {
        let c = b[i];
        if c == b'[' && (i == 0 || b[i - 1] != b'\\') {
            let digits = b[i + 1..].iter().take_while(|d| d.is_ascii_digit()).count();
            let close = i + 1 + digits;
            if (1..=4).contains(&digits) && b[i + 1] != b'0' && b.get(close) == Some(&b']') {
                let n: u32 = text[i + 1..close].parse().unwrap();
                if n <= max && !code[i..=close].contains(&true) {
                    found.push((n, chars, chars + (close + 1 - i) as u64));
                }
            }
        }
        chars += u64::from(c & 0xC0 != 0x80);
    }
    found
}

/// Marks the bytes inside fenced code blocks and inline code spans.
fn mark_code(b: &[u8], code: &mut [bool]) {
    let blank = |l: &[u8]| l.iter().all(|c| matches!(c, b' ' | b'\t' | b'\r'));
    // (fence char, run length) of the open fenced block.
    let mut fence: Option<(u8, usize)> = None;
    // Byte range of the current paragraph.
    let mut para: Option<(usize, usize)> = None;
    let mut start = 0;
    loop {
        let end = memchr::memchr(b'\n', &b[start..]).map_or(b.len(), |i| start + i);
        let line = &b[start..end];
        let indent = line.iter().take_while(|&&c| c == b' ').count();
        let rest = &line[indent..];
        let run_of = |ch: u8| rest.iter().take_while(|&&c| c == ch).count();
        match fence {
            Some((ch, len)) => {
                code[start..end].fill(true);
                let run = run_of(ch);
                if indent <= 3 && run >= len && blank(&rest[run..]) {
                    fence = None;
                }
            }
            None => {
                let opening = match rest.first() {
                    Some(&ch @ (b'`' | b'~')) if indent <= 3 && run_of(ch) >= 3 => {
                        Some((ch, run_of(ch)))
                    }
                    _ => None,
                };
                if opening.is_some() || blank(line) {
                    if let Some((s, e)) = para.take() {
                        mark_spans(b, s, e, code);
                    }
                    if opening.is_some() {
                        code[start..end].fill(true);
                        fence = opening;
                    }
                } else {
                    para = Some((para.map_or(start, |(s, _)| s), end));
                }
            }
        }
        if end == b.len() {
            break;
        }
        start = end + 1;
    }
    if let Some((s, e)) = para {
        mark_spans(b, s, e, code);
    }
}

/// Inline code spans of the paragraph `b[start..end]`: a run of k backticks
/// opens a span closed by the next run of exactly k.
fn mark_spans(b: &[u8], start: usize, end: usize, code: &mut [bool]) {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = start;
    while let Some(k) = memchr::memchr(b'`', &b[i..end]) {
        let at = i + k;
        let len = b[at..end].iter().take_while(|&&c| c == b'`').count();
        runs.push((at, len));
        i = at + len;
    }
    let mut r = 0;
    while r < runs.len() {
        let (open, len) = runs[r];
        match (r + 1..runs.len()).find(|&s| runs[s].1 == len) {
            Some(s) => {
                code[open..runs[s].0 + len].fill(true);
                r = s + 1;
            }
            None => r += 1,
        }
    }
}

// ---------------------------------------------------------------------------
// Grounding state shared by the baselines

/// Per-stream state of a baseline: each choice's content so far, which
/// choices finished, whether `sources` went out.
#[derive(Default)]
struct Grounding {
    texts: Vec<String>,
    finished: Vec<bool>,
    finishes: u32,
    top_done: bool,
}

impl Grounding {
    fn slot(&mut self, index: usize) -> usize {
        if self.texts.len() <= index {
            self.texts.resize_with(index + 1, String::new);
            self.finished.resize(index + 1, false);
        }
        index
    }

    /// Content for choice `index` (ignored once it finished).
    fn content(&mut self, index: usize, text: &str) {
        let i = self.slot(index);
        if !self.finished[i] {
            self.texts[i].push_str(text);
        }
    }

    /// Choice `index` sent a `finish_reason`: its markers, or `None` when it
    /// had finished already.
    fn finish(&mut self, index: usize, max: u32) -> Option<Vec<(u32, u64, u64)>> {
        let i = self.slot(index);
        if std::mem::replace(&mut self.finished[i], true) {
            return None;
        }
        self.finishes += 1;
        Some(find_markers(&self.texts[i], max))
    }

    /// Whether this finish chunk gets `sources` (the n-th finish).
    fn top(&mut self, n: u32) -> bool {
        let top = !self.top_done && self.finishes >= n;
        self.top_done |= top;
        top
    }
}

/// A marker found by [`find_markers`]: number, start, end (characters).
type Found = (u32, u64, u64);

/// A choice finishing in a chunk: its position in `choices`, its index,
/// its markers.
type Ending = (usize, usize, Vec<Found>);

/// The envelope members a synthesized chunk copies.
const ENVELOPE: [&str; 5] = ["id", "object", "created", "model", "system_fingerprint"];

/// The finish-chunk edit both baselines make, on a parsed chunk `v`:
/// returns the events to send instead of it (content part when split,
/// annotations chunks, the finish chunk with `sources` when `top`), or
/// `None` when `v` is to be sent unchanged.
fn finish_events(setup: &Setup, v: &Value, ending: &[Ending], top: bool) -> Option<Vec<Value>> {
    let with_markers: Vec<_> = ending.iter().filter(|e| !e.2.is_empty()).collect();
    if with_markers.is_empty() && !top {
        return None;
    }
    let choices = v["choices"].as_array().expect("choices");
    let split = with_markers.iter().any(|&&(k, _, _)| {
        choices[k]["delta"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
    });
    let mut out = Vec::new();
    if split {
        let mut part = v.clone();
        for &(k, _, _) in ending {
            part["choices"][k]["finish_reason"] = Value::Null;
        }
        part.as_object_mut().unwrap().remove("usage");
        out.push(part);
    }
    let mut envelope = serde_json::Map::new();
    for k in ENVELOPE {
        if let Some(x) = v.get(k) {
            envelope.insert(k.to_owned(), x.clone());
        }
    }
    for &&(_, index, ref markers) in &with_markers {
        let mut chunk = envelope.clone();
        chunk.insert(
            "choices".into(),
            json!([{"index": index, "delta": {"annotations": setup.annotations(markers)},
                    "finish_reason": null}]),
        );
        out.push(Value::Object(chunk));
    }
    let mut fin = v.clone();
    if split {
        let kept: Vec<Value> = ending
            .iter()
            .map(|&(k, _, _)| {
                let mut c = choices[k].clone();
                c["delta"] = json!({});
                if c.get("logprobs").is_some() {
                    c["logprobs"] = Value::Null;
                }
                c
            })
            .collect();
        fin["choices"] = Value::Array(kept);
    }
    if top {
        fin["sources"] = setup.sources_value.clone();
    }
    out.push(fin);
    Some(out)
}

// ---------------------------------------------------------------------------
// citestream

/// [`ChatStream`] over one stream's pieces; every output to `sink`.
#[inline(never)]
pub(crate) fn citestream_chat(setup: &Setup, pieces: &[Bytes], sink: &mut impl FnMut(Bytes)) {
    let mut rw = ChatStream::new(setup.sources.clone(), setup.opts.clone());
    for piece in pieces {
        rw.feed(piece.clone());
        while let Some(b) = rw.next_output() {
            sink(b);
        }
    }
    rw.finish();
    while let Some(b) = rw.next_output() {
        sink(b);
    }
}

/// [`ChatStream`] over one stream's pieces, fed with `feed_slice` (the
/// caller keeps its buffers: the small-read path).
#[inline(never)]
pub(crate) fn citestream_chat_slice(setup: &Setup, pieces: &[Bytes], sink: &mut impl FnMut(Bytes)) {
    let mut rw = ChatStream::new(setup.sources.clone(), setup.opts.clone());
    for piece in pieces {
        rw.feed_slice(piece);
        while let Some(b) = rw.next_output() {
            sink(b);
        }
    }
    rw.finish();
    while let Some(b) = rw.next_output() {
        sink(b);
    }
}

/// [`MessagesStream`] over one stream's pieces.
#[inline(never)]
pub(crate) fn citestream_messages(setup: &Setup, pieces: &[Bytes], sink: &mut impl FnMut(Bytes)) {
    let rw = MessagesStream::new(setup.sources.clone(), setup.opts.clone());
    drive(rw, pieces, sink);
}

/// A streaming rewriter over one stream's pieces (`feed` + drain, then
/// `finish` + drain); every output to `sink`.
#[inline(always)]
pub(crate) fn drive<R: StreamRewriter>(mut rw: R, pieces: &[Bytes], sink: &mut impl FnMut(Bytes)) {
    for piece in pieces {
        rw.feed(piece.clone());
        while let Some(b) = rw.next_output() {
            sink(b);
        }
    }
    rw.finish();
    while let Some(b) = rw.next_output() {
        sink(b);
    }
}

// ---------------------------------------------------------------------------
// naive

/// Blank-line framing with carry-over: calls `event` with each block
/// (without its blank line), then the unterminated rest at the end.
/// LF line ends only (the fixtures have no CR).
struct Blocks {
    buf: Vec<u8>,
    /// `buf[..scanned]` holds no complete `\n\n` past the consumed part.
    scanned: usize,
}

impl Blocks {
    fn new() -> Self {
        Blocks {
            buf: Vec::new(),
            scanned: 0,
        }
    }

    fn feed(&mut self, piece: &[u8], mut event: impl FnMut(&[u8])) {
        self.buf.extend_from_slice(piece);
        let mut start = 0;
        loop {
            let from = self.scanned.saturating_sub(1).max(start);
            match memchr::memmem::find(&self.buf[from..], b"\n\n") {
                Some(k) => {
                    let end = from + k;
                    if end > start {
                        event(&self.buf[start..end]);
                    }
                    start = end + 2;
                    self.scanned = start;
                }
                None => {
                    self.scanned = self.buf.len();
                    break;
                }
            }
        }
        self.buf.drain(..start);
        self.scanned -= start;
    }

    fn finish(&mut self, mut event: impl FnMut(&[u8])) {
        let rest = std::mem::take(&mut self.buf);
        let rest = rest.strip_suffix(b"\n").unwrap_or(&rest);
        if !rest.is_empty() {
            event(rest);
        }
    }
}

/// An event block's `event` field and joined `data` (`None` without data).
fn fields(block: &[u8]) -> (Option<&str>, Option<Cow<'_, str>>) {
    let text = std::str::from_utf8(block).unwrap_or("");
    let mut event = None;
    let mut data: Option<Cow<'_, str>> = None;
    for line in text.split('\n') {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match name {
            "event" => event = Some(value),
            "data" => {
                data = Some(match data {
                    None => Cow::Borrowed(value),
                    Some(d) => Cow::Owned(format!("{d}\n{value}")),
                })
            }
            _ => {}
        }
    }
    (event, data)
}

/// Frames one event: `event: …\n` when it had one, `data: <json>\n\n`.
fn frame(event: Option<&str>, v: &Value) -> Bytes {
    let json = serde_json::to_vec(v).expect("serialize");
    let mut out = Vec::with_capacity(json.len() + 32);
    if let Some(e) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(e.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The block as it came (comments, `[DONE]`, non-JSON data).
fn verbatim(block: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(block.len() + 2);
    out.extend_from_slice(block);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The naive chat gateway over one stream's pieces.
#[inline(never)]
pub(crate) fn naive_chat(setup: &Setup, pieces: &[Bytes], sink: &mut impl FnMut(Bytes)) {
    let mut blocks = Blocks::new();
    let mut g = Grounding::default();
    let n = setup.opts.get_n();
    let mut on_block = |block: &[u8]| {
        let (event, data) = fields(block);
        let parsed = match (&data, event) {
            (Some(d), None | Some("message")) => serde_json::from_str::<Value>(d).ok(),
            _ => None,
        };
        let Some(v) = parsed.filter(Value::is_object) else {
            sink(verbatim(block));
            return;
        };
        let mut ending = Vec::new();
        if let Some(choices) = v.get("choices").and_then(Value::as_array) {
            for (k, c) in choices.iter().enumerate() {
                let index = c.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if let Some(text) = c["delta"]["content"].as_str() {
                    g.content(index, text);
                }
                if c.get("finish_reason").is_some_and(Value::is_string) {
                    if let Some(markers) = g.finish(index, setup.max()) {
                        ending.push((k, index, markers));
                    }
                }
            }
        }
        let top = !ending.is_empty() && g.top(n);
        match finish_events(setup, &v, &ending, top) {
            Some(events) => events.iter().for_each(|e| sink(frame(event, e))),
            None => sink(frame(event, &v)),
        }
    };
    for piece in pieces {
        // Each read arrives as an owned `Bytes` and is dropped once copied,
        // as from a network stack (and as citestream and sse-stream get it).
        let piece = piece.clone();
        blocks.feed(&piece, &mut on_block);
    }
    blocks.finish(&mut on_block);
}

/// The naive messages gateway: every event parsed to a `Value` and written
/// again; `sources` added to the first `message_delta`.
#[inline(never)]
pub(crate) fn naive_messages(setup: &Setup, pieces: &[Bytes], sink: &mut impl FnMut(Bytes)) {
    let mut blocks = Blocks::new();
    let mut done = false;
    let mut on_block = |block: &[u8]| {
        let (event, data) = fields(block);
        let Some(mut v) = data
            .and_then(|d| serde_json::from_str::<Value>(&d).ok())
            .filter(Value::is_object)
        else {
            sink(verbatim(block));
            return;
        };
        if !done && v["type"] == "message_delta" {
            done = true;
            v["sources"] = setup.sources_value.clone();
        }
        sink(frame(event, &v));
    };
    for piece in pieces {
        // Each read arrives as an owned `Bytes` and is dropped once copied,
        // as from a network stack (and as citestream and sse-stream get it).
        let piece = piece.clone();
        blocks.feed(&piece, &mut on_block);
    }
    blocks.finish(&mut on_block);
}

// ---------------------------------------------------------------------------
// conventional

/// A string borrowed from the event's data when it has no escapes. (A bare
/// `Option<Cow<str>>` field always copies: serde-rs/serde#1497.)
#[derive(Deserialize)]
pub(crate) struct Text<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Choices<'a>,
}

/// `choices` without a heap allocation for the usual single choice (a
/// `Vec<Choice>` would allocate on every chunk).
#[derive(Default)]
struct Choices<'a> {
    first: Option<Choice<'a>>,
    rest: Vec<Choice<'a>>,
}

impl<'a> Choices<'a> {
    fn iter(&self) -> impl Iterator<Item = &Choice<'a>> {
        self.first.iter().chain(&self.rest)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Seq<'a>(std::marker::PhantomData<Choices<'a>>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Seq<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Choices<'a>, A::Error> {
                let mut c = Choices {
                    first: seq.next_element()?,
                    rest: Vec::new(),
                };
                while let Some(x) = seq.next_element()? {
                    c.rest.push(x);
                }
                Ok(c)
            }
        }
        d.deserialize_seq(Seq(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Text<'a>>,
}

/// Writes `event: …\n` (if any) and the data as `data:` lines.
pub(crate) fn write_event(out: &mut BytesMut, event: Option<&str>, data: &str) {
    if let Some(e) = event {
        out.put_slice(b"event: ");
        out.put_slice(e.as_bytes());
        out.put_u8(b'\n');
    }
    if memchr::memchr(b'\n', data.as_bytes()).is_none() {
        // JSON chunks: one line.
        out.put_slice(b"data: ");
        out.put_slice(data.as_bytes());
        out.put_slice(b"\n\n");
        return;
    }
    for line in data.split('\n') {
        out.put_slice(b"data: ");
        out.put_slice(line.as_bytes());
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
}

/// Output buffer of the conventional baselines: events are written into one
/// `BytesMut` and split off as `Bytes` (an allocation only when its 64 KiB
/// run out), as `tokio_util::codec::FramedWrite` does.
pub(crate) const OUT_CAPACITY: usize = 64 << 10;

pub(crate) fn emit(out: &mut BytesMut, sink: &mut impl FnMut(Bytes)) {
    sink(out.split().freeze());
    if out.capacity() < 4096 {
        out.reserve(OUT_CAPACITY);
    }
}

pub(crate) fn sse_events(
    pieces: &[Bytes],
) -> sse_stream::SseByteStream<impl futures::Stream<Item = Result<Bytes, Infallible>> + '_> {
    sse_stream::SseByteStream::new(futures::stream::iter(pieces.iter().map(|p| Ok(p.clone()))))
}

/// The conventional chat gateway over one stream's pieces.
#[inline(never)]
pub(crate) fn conventional_chat(setup: &Setup, pieces: &[Bytes], sink: &mut impl FnMut(Bytes)) {
    let mut g = Grounding::default();
    let n = setup.opts.get_n();
    let mut out = BytesMut::with_capacity(OUT_CAPACITY);
    let mut ending = Vec::new();
    super::sse::drain(sse_events(pieces), |item| {
        let sse = item.expect("sse-stream error");
        let Some(data) = &sse.data else {
            return; // comments, retry-only blocks: nothing to forward
        };
        let event = sse.event.as_deref();
        let chunk = match event {
            None | Some("message") => serde_json::from_str::<Chunk<'_>>(data).ok(),
            _ => None,
        };
        ending.clear();
        if let Some(chunk) = &chunk {
            for (k, c) in chunk.choices.iter().enumerate() {
                let index = c.index as usize;
                if let Some(Delta {
                    content: Some(Text(text)),
                }) = &c.delta
                {
                    g.content(index, text);
                }
                if c.finish_reason.is_some() {
                    if let Some(markers) = g.finish(index, setup.max()) {
                        ending.push((k, index, markers));
                    }
                }
            }
        }
        if ending.is_empty() {
            // The hot path: forward the data as it came.
            write_event(&mut out, event, data);
            return emit(&mut out, sink);
        }
        let top = g.top(n);
        if ending.iter().all(|e| e.2.is_empty()) {
            // No annotations: splice `sources` before the closing brace.
            if top {
                let close = data.rfind('}').expect("object");
                let mut spliced = String::with_capacity(data.len() + setup.sources_json.len() + 12);
                spliced.push_str(&data[..close]);
                spliced.push_str(",\"sources\":");
                spliced.push_str(&setup.sources_json);
                spliced.push_str(&data[close..]);
                write_event(&mut out, event, &spliced);
            } else {
                write_event(&mut out, event, data);
            }
            return emit(&mut out, sink);
        }
        // Annotations: the cold path, once per choice; build with a Value.
        let v: Value = serde_json::from_str(data).expect("valid chunk");
        for e in finish_events(setup, &v, &ending, top).expect("edits") {
            write_event(
                &mut out,
                event,
                &serde_json::to_string(&e).expect("serialize"),
            );
            emit(&mut out, sink);
        }
    });
}

// ---------------------------------------------------------------------------
// Checking that everyone adds the same

/// What a rewritten stream carries: per choice index, the `annotations`
/// arrays of all its deltas in order; every top-level `sources` value; the
/// number of events with data.
#[derive(Debug, PartialEq)]
pub(crate) struct Additions {
    pub(crate) annotations: BTreeMap<u64, Vec<Value>>,
    pub(crate) sources: Vec<Value>,
    pub(crate) events: usize,
}

/// Parses a rewritten stream back (LF framing).
pub(crate) fn additions(stream: &[u8]) -> Additions {
    let mut a = Additions {
        annotations: BTreeMap::new(),
        sources: Vec::new(),
        events: 0,
    };
    let text = String::from_utf8_lossy(stream);
    for block in text.split("\n\n") {
        let (_, data) = fields(block.as_bytes());
        let Some(data) = data else { continue };
        a.events += 1;
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        if let Some(s) = v.get("sources") {
            a.sources.push(s.clone());
        }
        for c in v
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(ann) = c.get("delta").and_then(|d| d.get("annotations")) {
                let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
                a.annotations.entry(index).or_default().push(ann.clone());
            }
        }
    }
    a
}

/// Runs `run` over every stream and collects the output.
pub(crate) fn collect(
    streams: &Streams,
    mut run: impl FnMut(&[Bytes], &mut dyn FnMut(Bytes)),
) -> Vec<u8> {
    let mut out = Vec::new();
    for pieces in streams {
        run(pieces, &mut |b: Bytes| out.extend_from_slice(&b));
    }
    out
}

/// The implementations of one endpoint, by name.
pub(crate) fn run(endpoint: &str, implementation: &str, setup: &Setup, streams: &Streams) -> usize {
    let mut total = 0;
    let mut sink = |b: Bytes| total += b.len();
    for pieces in streams {
        match (endpoint, implementation) {
            ("chat", "citestream") => citestream_chat(setup, pieces, &mut sink),
            ("chat", "citestream-slice") => citestream_chat_slice(setup, pieces, &mut sink),
            ("chat", "naive") => naive_chat(setup, pieces, &mut sink),
            ("chat", "conventional") => conventional_chat(setup, pieces, &mut sink),
            ("messages", "citestream") => citestream_messages(setup, pieces, &mut sink),
            ("messages", "naive") => naive_messages(setup, pieces, &mut sink),
            ("responses", "citestream") => super::responses::citestream(setup, pieces, &mut sink),
            ("responses", "conventional") => {
                super::responses::conventional(setup, pieces, &mut sink)
            }
            _ => panic!("unknown implementation {endpoint}/{implementation}"),
        }
    }
    total
}

/// Asserts, outside timing, that every implementation adds the same
/// annotations and sources as citestream on `streams` (each stream on its
/// own). Returns the number of input events with data, of annotation
/// objects and of `sources` members citestream added.
pub(crate) fn check(
    endpoint: &str,
    setup: &Setup,
    names: &[String],
    streams: &Streams,
) -> (usize, usize, usize) {
    let impls: &[&str] = if endpoint == "chat" {
        &["naive", "conventional"]
    } else {
        &["naive"]
    };
    let (mut events, mut annotations, mut sources) = (0, 0, 0);
    for (name, pieces) in names.iter().zip(streams) {
        let one = vec![pieces.clone()];
        let input: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        events += additions(&input).events;
        let ours = additions(&collect(&one, |p, s| match endpoint {
            "chat" => citestream_chat(setup, p, &mut |b| s(b)),
            _ => citestream_messages(setup, p, &mut |b| s(b)),
        }));
        for imp in impls {
            let theirs = additions(&collect(&one, |p, s| match (endpoint, *imp) {
                ("chat", "naive") => naive_chat(setup, p, &mut |b| s(b)),
                ("chat", _) => conventional_chat(setup, p, &mut |b| s(b)),
                _ => naive_messages(setup, p, &mut |b| s(b)),
            }));
            assert_eq!(
                (&theirs.annotations, &theirs.sources),
                (&ours.annotations, &ours.sources),
                "{endpoint}/{imp} adds something else than citestream on {name}"
            );
        }
        let upstream = additions(&input);
        annotations += count_annotations(&ours) - count_annotations(&upstream);
        sources += ours.sources.len() - upstream.sources.len();
    }
    (events, annotations, sources)
}

fn count_annotations(a: &Additions) -> usize {
    a.annotations
        .values()
        .flatten()
        .map(|v| v.as_array().map_or(0, Vec::len))
        .sum()
}
