//! Shared helpers for the benches: input generators, fixture loading and
//! chunking. Inputs are built outside the timed loops.
//!
//! Each bench includes this module with `mod common;` (the callgrind driver
//! in `examples/` with `#[path]`), so not every bench uses every helper.
#![allow(dead_code)]

pub(crate) mod chat;
pub(crate) mod responses;
pub(crate) mod sse;

use std::path::Path;

use bytes::Bytes;

/// The piece length that means "one read per SSE event" (see [`split`]).
pub(crate) const EVENT_READS: Option<usize> = Some(0);

/// Read sizes the benches feed the parsers with: label and piece length
/// (`None`: the whole input in one piece; [`EVENT_READS`]: one piece per
/// event). 1460 B is a typical TCP payload on an Ethernet MTU; 16 KiB a
/// typical TLS record / hyper read; event-sized reads are what an HTTP
/// client hands out for an LLM stream whose server flushes every event.
pub(crate) const READ_SIZES: [(&str, Option<usize>); 6] = [
    ("event", EVENT_READS),
    ("1", Some(1)),
    ("64", Some(64)),
    ("1460", Some(1460)),
    ("16384", Some(16 * 1024)),
    ("whole", None),
];

/// Splits `input` into pieces of `size` bytes (the last one shorter), one
/// piece when `size` is `None`, or one piece per event (cut after each
/// blank line) for [`EVENT_READS`].
///
/// The pieces are slices of one shared `Bytes`, as they are when a network
/// stack hands out reads: cloning or slicing one costs an atomic reference
/// count update, not a copy (and not the free ride a `Bytes::from_static`
/// would give the zero-copy parser).
pub(crate) fn split(input: &[u8], size: Option<usize>) -> Vec<Bytes> {
    let all = Bytes::copy_from_slice(input);
    if size == EVENT_READS {
        return event_cuts(input)
            .windows(2)
            .map(|w| all.slice(w[0]..w[1]))
            .collect();
    }
    let size = size.unwrap_or(input.len()).max(1);
    (0..input.len())
        .step_by(size)
        .map(|at| all.slice(at..(at + size).min(input.len())))
        .collect()
}

/// 0, the end of every blank line (`\n\n`, `\r\n\r\n`, `\r\r`), and
/// `input.len()`.
fn event_cuts(input: &[u8]) -> Vec<usize> {
    let mut cuts = vec![0];
    let mut i = 0;
    while i < input.len() {
        let blank = [&b"\r\n\r\n"[..], b"\n\n", b"\r\r"]
            .into_iter()
            .find(|t| input[i..].starts_with(t));
        match blank {
            Some(t) => {
                i += t.len();
                cuts.push(i);
            }
            None => i += 1,
        }
    }
    if cuts.last() != Some(&input.len()) {
        cuts.push(input.len());
    }
    cuts
}

/// A small deterministic generator (64-bit LCG, Knuth's MMIX constants) so
/// every run and every bench sees the same bytes.
#[derive(Debug, Clone)]
pub(crate) struct Lcg(u64);

impl Lcg {
    /// A generator started at `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Lcg(seed)
    }

    /// The next value in `0..n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Content pieces as an OpenAI tokenizer emits them, already JSON-escaped:
/// mostly short words with a leading space, some punctuation, escaped line
/// breaks and quotes, and some non-ASCII text (so 1-byte reads split UTF-8
/// sequences).
pub(crate) const TOKENS: &[&str] = &[
    " the",
    " of",
    " and",
    " to",
    " a",
    " in",
    " is",
    " that",
    " for",
    " it",
    " with",
    " as",
    " was",
    " on",
    " streaming",
    " response",
    " server",
    " events",
    " citation",
    " source",
    " search",
    " results",
    " model",
    ",",
    ".",
    ":",
    " (",
    ")",
    "\\n",
    "\\n\\n",
    "\\\"",
    " **",
    "**",
    " `",
    "`",
    " 1",
    "2",
    "0",
    "25",
    " café",
    " naïve",
    " 東京",
    "では",
    " —",
    " ü",
    "ber",
    "ing",
    "ed",
    " [1]",
    " Rust",
    " parser",
];

/// A long OpenAI `/v1/chat/completions` stream: a role chunk, `events`
/// content chunks of about 250 bytes each (real envelope shape, one token of
/// content), a finish chunk, a usage chunk and `data: [DONE]`.
pub(crate) fn openai_stream(events: usize) -> Vec<u8> {
    const HEAD: &str = r#"data: {"id":"chatcmpl-AY3rM0dJ9sVq2ZkT7wXpLb4NcHe81","object":"chat.completion.chunk","created":1732900000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_7f6be3efb0","choices":["#;
    let mut rng = Lcg::new(0x5EED);
    let mut out = Vec::with_capacity(events * 260 + 1024);
    out.extend_from_slice(HEAD.as_bytes());
    out.extend_from_slice(
        br#"{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}"#,
    );
    out.extend_from_slice(b"\n\n");
    for _ in 0..events {
        out.extend_from_slice(HEAD.as_bytes());
        out.extend_from_slice(br#"{"index":0,"delta":{"content":""#);
        out.extend_from_slice(TOKENS[rng.below(TOKENS.len())].as_bytes());
        out.extend_from_slice(br#""},"logprobs":null,"finish_reason":null}]}"#);
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(HEAD.as_bytes());
    out.extend_from_slice(br#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}"#);
    out.extend_from_slice(b"\n\n");
    out.extend_from_slice(HEAD.as_bytes());
    out.extend_from_slice(
        br#"],"usage":{"prompt_tokens":1543,"completion_tokens":4000,"total_tokens":5543}}"#,
    );
    out.extend_from_slice(b"\n\ndata: [DONE]\n\n");
    out
}

/// Every recorded upstream stream in `tests/fixtures/upstream/*.sse`, in
/// file name order, concatenated; a blank line is added after a stream that
/// does not end with one so streams do not run into each other.
pub(crate) fn upstream_fixtures() -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("fixture dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        out.extend_from_slice(&bytes);
        if !out.ends_with(b"\n\n") && !out.ends_with(b"\r\n\r\n") {
            out.extend_from_slice(if out.ends_with(b"\n") { b"\n" } else { b"\n\n" });
        }
    }
    out
}

/// One event whose single `data` line carries `len` bytes of payload:
/// `data: xxx…x\n\n`.
pub(crate) fn long_line(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    out.extend_from_slice(b"data: ");
    out.resize(6 + len, b'x');
    out.extend_from_slice(b"\n\n");
    out
}

/// The recorded Responses streams (`tests/fixtures/upstream/responses/*.sse`).
pub(crate) fn responses_fixtures() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/responses");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| std::fs::read(p).expect("fixture"))
        .collect()
}
