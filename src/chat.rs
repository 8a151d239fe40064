//! `/v1/chat/completions`: the streaming and the whole-body rewriter.
//!
//! Both feed each choice's content to a [`MarkerTracker`], the single
//! source of truth for offsets, so streamed and whole responses cannot
//! disagree.
//!
//! # Streaming ([`ChatStream`])
//!
//! Events are forwarded as they arrive; nothing is held back. For each
//! chunk the rewriter reads only `choices[].index`,
//! `choices[].delta.content` and `choices[].finish_reason` (plus the
//! envelope `id`, `object`, `created`, `model`, `system_fingerprint` when a
//! choice finishes) with the scanner in [`crate::json`]. A chunk it does not
//! change goes out as the very same bytes (a slice of the input). Then:
//!
//! * before the first `finish_reason` chunk of each choice with at least one
//!   marker, one synthesized chunk
//!   `{"id",…,"choices":[{"index":i,"delta":{"annotations":[…]},"finish_reason":null}]}`;
//! * on the finish chunk of the n-th choice to finish, top-level `sources`
//!   and/or `citations`, spliced in before its closing brace (an upstream
//!   member of the same name in that chunk is replaced);
//! * a finish chunk that also carries content for a choice with annotations
//!   is split: the content part (`finish_reason: null`, without `usage`),
//!   the annotations, then the finish chunk with an empty `delta`;
//! * a stream that ends (`[DONE]` or end of input) after some but fewer than
//!   `n` finishes gets the top-level additions on a synthesized chunk with
//!   `choices: []` just before `[DONE]` or the end;
//! * everything else (usage-only chunks, `[DONE]`, comments, errors,
//!   unknown events, invalid JSON, events over the size limit) passes
//!   through byte for byte.
//!
//! # Whole bodies ([`rewrite_body`])
//!
//! `annotations` on each `choices[i].message` (ours appended after any
//! upstream ones; an empty array when there are none), top-level `sources`
//! and/or `citations`; every other byte stays where it was.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::cite::{Marker, MarkerTracker};
use crate::json::{self, ArrayWalker, Invalid, Member, ObjectWalker, Splice};
use crate::options::{Driver, Handler, MAX_CHOICES, Out, RewriteOptions};
use crate::sources::Sources;
use crate::sse::{self, Event, Frame, FrameKind, FrameRef, Parser};

/// A top-level member found while scanning, with the end of its value.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub(crate) member: Member,
    pub(crate) end: usize,
}

impl Found {
    pub(crate) fn value(&self) -> Range<usize> {
        self.member.value_start..self.end
    }
}

/// Top-level members we may replace (`sources`, `citations`), all
/// occurrences, so that no object ever carries a key twice.
#[derive(Debug, Default)]
pub(crate) struct Existing {
    pub(crate) sources: Vec<Found>,
    pub(crate) citations: Vec<Found>,
}

impl Existing {
    pub(crate) fn clear(&mut self) {
        self.sources.clear();
        self.citations.clear();
    }

    /// Records `m` if it is one of ours; returns whether it was.
    pub(crate) fn note(&mut self, b: &[u8], m: &Member, end: usize) -> bool {
        if m.key_is(b, "sources") {
            self.sources.push(Found {
                member: m.clone(),
                end,
            });
            true
        } else if m.key_is(b, "citations") {
            self.citations.push(Found {
                member: m.clone(),
                end,
            });
            true
        } else {
            false
        }
    }
}

/// Adds the top-level `sources` / `citations` members to the object whose
/// closing brace is at `close`: replacing the first upstream member of the
/// same name, removing any further ones, else inserting before the brace.
pub(crate) fn add_top_level(
    b: &[u8],
    (close, has_members): (usize, bool),
    existing: &Existing,
    sources: &Sources,
    opts: &RewriteOptions,
    cited: &[bool],
    splice: &mut Splice,
) {
    let cited = |n: u32| cited.get(n as usize).copied().unwrap_or(false);
    let mut tail = Vec::new();
    let mut comma = has_members;
    let mut put = |name: &str, value: &[u8], found: &[Found], splice: &mut Splice| {
        if let Some((first, rest)) = found.split_first() {
            splice.replace(first.value(), value.to_vec());
            for f in rest {
                splice.replace(json::removal_span(b, &f.member, f.end), Vec::new());
            }
        } else {
            if comma {
                tail.push(b',');
            }
            comma = true;
            tail.push(b'"');
            tail.extend_from_slice(name.as_bytes());
            tail.extend_from_slice(b"\":");
            tail.extend_from_slice(value);
        }
    };
    if opts.dialect.sources {
        put(
            "sources",
            sources.sources_json().as_bytes(),
            &existing.sources,
            splice,
        );
    }
    if opts.dialect.citations {
        let c = if opts.only_cited {
            sources.citations_json(cited)
        } else {
            sources.citations_json(|_| true)
        };
        put("citations", c.as_bytes(), &existing.citations, splice);
    }
    if !tail.is_empty() {
        let at = json::insert_point(b, close);
        splice.replace(at..at, tail);
    }
}

/// Appends the `annotations` array for `markers` to `out`.
fn push_annotations(out: &mut Vec<u8>, sources: &Sources, markers: &[Marker]) {
    out.push(b'[');
    for (k, m) in markers.iter().enumerate() {
        if k > 0 {
            out.push(b',');
        }
        sources.push_annotation(out, m.number, m.start, m.end);
    }
    out.push(b']');
}

/// What the scanner reads of one choice in a chunk.
#[derive(Clone, Debug, Default)]
struct ChoiceScan {
    span: Range<usize>,
    /// `Some(0)` without `index`; `None` when the index is not a `u32`
    /// (the choice is then ignored, as on the fast path).
    index: Option<u32>,
    /// Raw body of `delta.content` when it is a string.
    content: Option<Range<usize>>,
    delta: Option<Range<usize>>,
    logprobs: Option<Range<usize>>,
    /// `finish_reason` value span when it is a string.
    finish: Option<Range<usize>>,
}

/// What the scanner reads of one chunk.
#[derive(Debug, Default)]
struct ChunkScan {
    close: usize,
    has_members: bool,
    /// Value spans of `id`, `object`, `created`, `model`,
    /// `system_fingerprint`.
    envelope: [Option<Range<usize>>; 5],
    usage: Option<Found>,
    choices: Option<Range<usize>>,
    existing: Existing,
}

const ENVELOPE: [&str; 5] = ["id", "object", "created", "model", "system_fingerprint"];

/// Scans one chunk's JSON. `choices` receives one entry per choice object.
fn scan_chunk(d: &[u8], s: &mut ChunkScan, choices: &mut Vec<ChoiceScan>) -> Result<(), Invalid> {
    s.envelope = Default::default();
    s.usage = None;
    s.choices = None;
    s.existing.clear();
    choices.clear();
    let start = json::skip_ws(d, 0);
    let mut w = ObjectWalker::new(d, start, 0)?;
    while let Some(m) = w.next_member()? {
        let key = &d[m.key.clone()];
        if !m.key_escaped && key == b"choices" && d.get(m.value_start) == Some(&b'[') {
            choices.clear();
            let end = scan_choices(d, m.value_start, w.depth(), choices)?;
            s.choices = Some(m.value_start..end);
            w.value_end(end);
            continue;
        }
        let end = w.skip_value()?;
        if m.key_escaped {
            // Rare: compare decoded keys.
            if m.key_is(d, "choices") {
                choices.clear();
                scan_choices(d, m.value_start, w.depth(), choices).ok();
                s.choices = Some(m.value_start..end);
            } else if m.key_is(d, "usage") {
                s.usage = Some(Found { member: m, end });
            } else if !s.existing.note(d, &m, end) {
                if let Some(k) = ENVELOPE.iter().position(|e| m.key_is(d, e)) {
                    s.envelope[k] = Some(m.value_start..end);
                }
            }
            continue;
        }
        match key {
            b"id" => s.envelope[0] = Some(m.value_start..end),
            b"object" => s.envelope[1] = Some(m.value_start..end),
            b"created" => s.envelope[2] = Some(m.value_start..end),
            b"model" => s.envelope[3] = Some(m.value_start..end),
            b"system_fingerprint" => s.envelope[4] = Some(m.value_start..end),
            b"usage" => s.usage = Some(Found { member: m, end }),
            b"sources" | b"citations" => {
                s.existing.note(d, &m, end);
            }
            _ => {}
        }
    }
    s.close = w.close();
    s.has_members = w.has_members();
    if json::skip_ws(d, s.close + 1) != d.len() {
        return Err(Invalid);
    }
    Ok(())
}

fn scan_choices(
    d: &[u8],
    at: usize,
    depth: u32,
    out: &mut Vec<ChoiceScan>,
) -> Result<usize, Invalid> {
    let mut a = ArrayWalker::new(d, at, depth)?;
    while let Some(el) = a.next_element()? {
        if d[el] != b'{' {
            a.skip_value()?;
            continue;
        }
        let mut c = ChoiceScan {
            index: Some(0),
            ..ChoiceScan::default()
        };
        let mut w = ObjectWalker::new(d, el, a.depth())?;
        while let Some(m) = w.next_member()? {
            if m.key_is(d, "delta") && d[m.value_start] == b'{' {
                let mut dw = ObjectWalker::new(d, m.value_start, w.depth())?;
                c.content = None;
                while let Some(dm) = dw.next_member()? {
                    let end = dw.skip_value()?;
                    if dm.key_is(d, "content") {
                        c.content =
                            (d[dm.value_start] == b'"').then(|| dm.value_start + 1..end - 1);
                    }
                }
                let end = dw.close() + 1;
                w.value_end(end);
                c.delta = Some(m.value_start..end);
                continue;
            }
            let end = w.skip_value()?;
            if m.key_is(d, "index") {
                c.index = json::parse_u32(&d[m.value_start..end]);
            } else if m.key_is(d, "finish_reason") {
                c.finish = (d[m.value_start] == b'"').then_some(m.value_start..end);
            } else if m.key_is(d, "logprobs") {
                c.logprobs = Some(m.value_start..end);
            } else if m.key_is(d, "delta") {
                c.delta = Some(m.value_start..end);
                c.content = None;
            }
        }
        let end = w.close() + 1;
        a.value_end(end);
        c.span = el..end;
        out.push(c);
    }
    Ok(a.close() + 1)
}

/// What the fast path reads of one choice of a chunk.
#[derive(Clone, Debug, Default)]
struct FastChoice {
    /// `None` when the index is not a `u32` (the choice is then ignored).
    index: Option<u32>,
    /// Raw body of `delta.content` when it is a string.
    content: Option<Range<usize>>,
    finish: bool,
}

/// A cursor over one chunk's JSON for the fast path.
struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cur<'_> {
    #[inline(always)]
    fn peek(&self) -> u8 {
        // NUL never starts a JSON token, so it doubles as end of input.
        self.b.get(self.i).copied().unwrap_or(0)
    }

    #[inline(always)]
    fn ws(&mut self) {
        while matches!(self.peek(), b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    #[inline(always)]
    fn eat(&mut self, c: u8) -> Result<(), Invalid> {
        if self.peek() == c {
            self.i += 1;
            Ok(())
        } else {
            Err(Invalid)
        }
    }

    /// A string; returns its raw body and whether it has escapes.
    #[inline(always)]
    fn string(&mut self) -> Result<(Range<usize>, bool), Invalid> {
        let start = self.i + 1;
        let (end, escaped) = json::scan_string(self.b, self.i)?;
        self.i = end;
        Ok((start..end - 1, escaped))
    }

    /// `,` (then whitespace) before another member/element, or `close`.
    /// Returns whether another one follows.
    #[inline(always)]
    fn next(&mut self, close: u8) -> Result<bool, Invalid> {
        self.ws();
        match self.peek() {
            b',' => {
                self.i += 1;
                self.ws();
                Ok(true)
            }
            c if c == close => {
                self.i += 1;
                Ok(false)
            }
            _ => Err(Invalid),
        }
    }

    /// A key and its colon; `None` when the key has escapes (the caller
    /// falls back to the complete scanner).
    #[inline(always)]
    fn key(&mut self) -> Result<Option<Range<usize>>, Invalid> {
        let (k, escaped) = self.string()?;
        self.ws();
        self.eat(b':')?;
        self.ws();
        Ok((!escaped).then_some(k))
    }

    /// Skips (validating) any value at `depth`.
    #[inline]
    fn skip(&mut self, depth: u32) -> Result<(), Invalid> {
        match self.peek() {
            b'"' => self.i = json::scan_string(self.b, self.i)?.0,
            b'n' if self.b.get(self.i..self.i + 4) == Some(b"null") => self.i += 4,
            _ => self.i = json::scan_value(self.b, self.i, depth)?,
        }
        Ok(())
    }

    /// Skips (validating) any value at `depth`, recording every string
    /// value in it (not keys) as a template hole: the strings of a delta's
    /// `tool_calls`, say, vary from chunk to chunk while the rest does not.
    fn skip_holes(&mut self, depth: u32, holes: &mut Vec<Range<usize>>) -> Result<(), Invalid> {
        // The same nesting limit as `json::scan_value`.
        if matches!(self.peek(), b'{' | b'[') && depth + 1 > json::MAX_DEPTH {
            return Err(Invalid);
        }
        match self.peek() {
            b'"' => {
                let s = self.i;
                self.i = json::scan_string(self.b, self.i)?.0;
                holes.push(s..self.i);
            }
            b'{' => {
                self.i += 1;
                if !self.empty(b'}') {
                    loop {
                        self.string()?;
                        self.ws();
                        self.eat(b':')?;
                        self.ws();
                        self.skip_holes(depth + 1, holes)?;
                        if !self.next(b'}')? {
                            break;
                        }
                    }
                }
            }
            b'[' => {
                self.i += 1;
                if !self.empty(b']') {
                    loop {
                        self.skip_holes(depth + 1, holes)?;
                        if !self.next(b']')? {
                            break;
                        }
                    }
                }
            }
            _ => self.skip(depth)?,
        }
        Ok(())
    }

    /// Whether an object or array opened at `close`'s partner is empty
    /// (and consumed if so).
    #[inline(always)]
    fn empty(&mut self, close: u8) -> bool {
        self.ws();
        if self.peek() == close {
            self.i += 1;
            true
        } else {
            false
        }
    }
}

/// The hot path's scan of one chunk: validates the whole JSON text and
/// reads `choices[].index`, `choices[].delta.content` and whether
/// `choices[].finish_reason` is a string. Returns `Ok(false)` when a key
/// has escapes, so the complete scanner must decide (rare).
fn fast_scan(
    d: &[u8],
    out: &mut Vec<FastChoice>,
    holes: &mut Vec<Range<usize>>,
) -> Result<bool, Invalid> {
    out.clear();
    holes.clear();
    let mut c = Cur { b: d, i: 0 };
    c.ws();
    c.eat(b'{')?;
    if !c.empty(b'}') {
        loop {
            let Some(k) = c.key()? else { return Ok(false) };
            let key = &d[k];
            if key == b"choices" && c.peek() == b'[' {
                c.i += 1;
                out.clear();
                if !c.empty(b']') {
                    loop {
                        if c.peek() == b'{' {
                            if !fast_choice(&mut c, out, holes)? {
                                return Ok(false);
                            }
                        } else {
                            c.skip(2)?;
                        }
                        if !c.next(b']')? {
                            break;
                        }
                    }
                }
            } else if c.peek() == b'"'
                && !matches!(key, b"id" | b"object" | b"model" | b"system_fingerprint")
            {
                // A top-level string that may vary from chunk to chunk
                // (`obfuscation`, say): a hole in a learned template.
                let s = c.i;
                c.skip(1)?;
                holes.push(s..c.i);
            } else {
                c.skip(1)?;
            }
            if !c.next(b'}')? {
                break;
            }
        }
    }
    c.ws();
    if c.i != d.len() {
        return Err(Invalid);
    }
    Ok(true)
}

/// One choice object (cursor on its `{`).
#[inline]
fn fast_choice(
    c: &mut Cur<'_>,
    out: &mut Vec<FastChoice>,
    holes: &mut Vec<Range<usize>>,
) -> Result<bool, Invalid> {
    let d = c.b;
    c.i += 1;
    let mut fc = FastChoice {
        index: Some(0),
        content: None,
        finish: false,
    };
    if !c.empty(b'}') {
        loop {
            let Some(k) = c.key()? else { return Ok(false) };
            match &d[k] {
                b"delta" if c.peek() == b'{' => {
                    c.i += 1;
                    fc.content = None;
                    if !c.empty(b'}') {
                        loop {
                            let Some(k) = c.key()? else { return Ok(false) };
                            let is_content = &d[k] == b"content";
                            if is_content && c.peek() == b'"' {
                                fc.content = Some(c.string()?.0);
                            } else {
                                if is_content {
                                    fc.content = None;
                                }
                                // The delta's other strings (`reasoning_content`,
                                // `role`, tool call arguments, …) are holes.
                                c.skip_holes(4, holes)?;
                            }
                            if !c.next(b'}')? {
                                break;
                            }
                        }
                    }
                }
                b"delta" => {
                    fc.content = None;
                    c.skip(3)?;
                }
                b"index" => {
                    let start = c.i;
                    c.skip(3)?;
                    fc.index = json::parse_u32(&d[start..c.i]);
                }
                b"finish_reason" => {
                    fc.finish = c.peek() == b'"';
                    c.skip(3)?;
                }
                _ => c.skip(3)?,
            }
            if !c.next(b'}')? {
                break;
            }
        }
    }
    out.push(fc);
    Ok(true)
}

/// Largest chunk a [`Template`] is learned from.
const MAX_TEMPLATE: usize = 4096;

/// How many chunk shapes a stream keeps (content and reasoning chunks
/// alternate in some streams; `n` > 1 interleaves choices).
const TEMPLATES: usize = 4;

/// The shape of a recent chunk without a finish, learned so the next ones
/// can be checked with a few comparisons instead of a full scan.
///
/// Chunks of one stream are nearly identical: the same `id`, `model`,
/// `created`, keys and punctuation; only string values vary (the content,
/// reasoning text, `obfuscation` padding). A template is the learned chunk
/// cut at those strings ("holes"): the delta's string members and the
/// top-level strings other than the envelope's. A chunk made of the same
/// literal segments with a valid JSON string in each hole parses exactly
/// like the chunk the template was learned from, except for those strings:
/// it is valid JSON, for the same choice index, without `finish_reason`,
/// with its content (if the template has a content hole) in that hole.
/// Anything else takes the full scan.
#[derive(Clone, Debug, Default)]
struct Template {
    /// The literal segments, concatenated.
    literal: Vec<u8>,
    /// End of each segment in `literal`; holes lie between segments.
    seg_ends: Vec<usize>,
    content_hole: Option<usize>,
    index: u32,
    valid: bool,
}

impl Template {
    /// `Some(content)` if `d` matches: the content's raw body, when the
    /// template has a content hole.
    #[inline]
    fn matches(&self, d: &[u8]) -> Option<Option<Range<usize>>> {
        if !self.valid {
            return None;
        }
        let mut pos = 0;
        let mut lit = 0;
        let mut content = None;
        let last = self.seg_ends.len() - 1;
        for (h, &end) in self.seg_ends.iter().enumerate() {
            let seg = &self.literal[lit..end];
            if !d.get(pos..)?.starts_with(seg) {
                return None;
            }
            pos += seg.len();
            lit = end;
            if h == last {
                return (pos == d.len()).then_some(content);
            }
            let (s_end, _) = json::scan_string(d, pos).ok()?;
            if Some(h) == self.content_hole {
                content = Some(pos + 1..s_end - 1);
            }
            pos = s_end;
        }
        None
    }

    /// Learns from a chunk the full scan found to have one choice and no
    /// finish: `content` is the content's raw body, `holes` the other
    /// varying string tokens.
    fn learn(
        &mut self,
        d: &[u8],
        index: u32,
        content: Option<&Range<usize>>,
        holes: &[Range<usize>],
    ) {
        const MAX_HOLES: usize = 16;
        self.valid = false;
        if d.len() > MAX_TEMPLATE || holes.len() >= MAX_HOLES {
            return;
        }
        let content_tok = content.map(|c| c.start - 1..c.end + 1);
        let mut cuts: [Range<usize>; MAX_HOLES] = Default::default();
        cuts[..holes.len()].clone_from_slice(holes);
        let mut n = holes.len();
        if let Some(t) = &content_tok {
            cuts[n] = t.clone();
            n += 1;
        }
        let cuts = &mut cuts[..n];
        cuts.sort_by_key(|r| r.start);
        self.literal.clear();
        self.seg_ends.clear();
        self.content_hole = None;
        let mut at = 0;
        for (k, h) in cuts.iter().enumerate() {
            if h.start < at {
                return;
            }
            self.literal.extend_from_slice(&d[at..h.start]);
            self.seg_ends.push(self.literal.len());
            if Some(h) == content_tok.as_ref() {
                self.content_hole = Some(k);
            }
            at = h.end;
        }
        self.literal.extend_from_slice(&d[at..]);
        self.seg_ends.push(self.literal.len());
        self.index = index;
        self.valid = true;
    }
}

#[derive(Clone, Debug)]
struct ChoiceState {
    tracker: MarkerTracker,
    finished: bool,
    markers: Vec<Marker>,
}

/// Streaming rewriter for `/v1/chat/completions` (`chat.completion.chunk`
/// events over SSE).
///
/// # Contract
///
/// Sans-IO: [`feed`](ChatStream::feed) input pieces as they arrive and
/// drain [`next_output`](ChatStream::next_output) until `None` after each;
/// call [`finish`](ChatStream::finish) at the end of the input and drain
/// again. The concatenation of the outputs is the rewritten stream.
/// Unchanged events come out as slices of the input (no copy); memory is
/// bounded by the SSE event size limit plus a few bytes per choice and the
/// markers found; the content itself is never kept.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use bytes::Bytes;
/// use citestream::{ChatStream, RewriteOptions, Sources};
///
/// let sources = Arc::new(Sources::from_json(br#"[{"title":"T","url":"https://t/"}]"#).unwrap());
/// let mut rw = ChatStream::new(sources, RewriteOptions::new());
/// let mut out = Vec::new();
/// for piece in [
///     &br#"data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi [1]"},"finish_reason":null}]}"#[..],
///     b"\n\ndata: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
///     b"data: [DONE]\n\n",
/// ] {
///     rw.feed(Bytes::copy_from_slice(piece));
///     while let Some(b) = rw.next_output() {
///         out.extend_from_slice(&b);
///     }
/// }
/// rw.finish();
/// while let Some(b) = rw.next_output() {
///     out.extend_from_slice(&b);
/// }
/// let out = String::from_utf8(out).unwrap();
/// assert!(out.contains(r#"{"id":"c","choices":[{"index":0,"delta":{"annotations":[{"type":"url_citation","url_citation":{"start_index":3,"end_index":6,"url":"https://t/","title":"T"}}]},"finish_reason":null}]}"#));
/// assert!(out.contains(r#""finish_reason":"stop"}],"sources":[{"index":1,"title":"T","url":"https://t/"}]}"#));
/// ```
///
/// # Panics
///
/// Never panics, on any input.
pub struct ChatStream {
    d: Driver<Core>,
}

/// Everything but the parser, so frames lent by the parser can be handled
/// while the rewriter's state changes.
struct Core {
    sources: Arc<Sources>,
    opts: RewriteOptions,
    choices: Vec<ChoiceState>,
    finished: u32,
    top_done: bool,
    /// Envelope members of the latest finish chunk, for a trailing chunk.
    last_envelope: Vec<u8>,
    out: Out,
    scan: ChunkScan,
    scans: Vec<ChoiceScan>,
    fast: Vec<FastChoice>,
    holes: Vec<Range<usize>>,
    templates: [Template; TEMPLATES],
    /// The template slot to learn into next.
    next_template: usize,
}

impl fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatStream")
            .field("parser", &self.d.parser)
            .field("choices", &self.d.h.choices.len())
            .field("finished", &self.d.h.finished)
            .field("top_done", &self.d.h.top_done)
            .finish_non_exhaustive()
    }
}

impl ChatStream {
    /// A rewriter adding `sources` as configured by `opts`. With no sources
    /// it adds nothing (the stream passes through unchanged).
    #[must_use]
    pub fn new(sources: Arc<Sources>, opts: RewriteOptions) -> Self {
        let parser = Parser::with_config(&opts.sse);
        ChatStream {
            d: Driver::new(
                parser,
                Core {
                    sources,
                    opts,
                    choices: Vec::new(),
                    finished: 0,
                    top_done: false,
                    last_envelope: Vec::new(),
                    out: Out::default(),
                    scan: ChunkScan::default(),
                    scans: Vec::with_capacity(2),
                    fast: Vec::with_capacity(2),
                    holes: Vec::with_capacity(2),
                    templates: Default::default(),
                    next_template: 0,
                },
            ),
        }
    }

    /// Queues an input piece (any size, split anywhere).
    pub fn feed(&mut self, chunk: Bytes) {
        self.d.feed(chunk);
    }

    /// Whether the top-level additions have been emitted (or queued).
    #[must_use]
    pub fn sources_emitted(&self) -> bool {
        self.d.h.top_done
    }

    /// Ends the input: what remains (a trailing synthesized chunk if fewer
    /// than `n` choices finished, an unterminated last event's bytes) is
    /// queued for [`next_output`](ChatStream::next_output).
    pub fn finish(&mut self) {
        self.d.finish();
    }

    /// The next piece of output, or `None` when more input is needed.
    ///
    /// Unchanged events that lie next to each other in one input piece come
    /// out as one slice of it; everything a piece yields is out before
    /// `None` is returned, so nothing is held back.
    #[must_use]
    pub fn next_output(&mut self) -> Option<Bytes> {
        self.d.next_output()
    }
}

impl Handler for Core {
    #[inline]
    fn handle(&mut self, f: &FrameRef<'_>) {
        match f.kind() {
            FrameKind::Event => self.event(f),
            _ => self.out.pass(f),
        }
    }

    fn out(&mut self) -> &mut Out {
        &mut self.out
    }

    fn end(&mut self) {
        self.flush_pending_top();
    }
}

impl Core {
    fn emit(&mut self, b: Bytes) {
        self.out.push(b);
    }

    #[inline]
    fn event(&mut self, f: &FrameRef<'_>) {
        if self.sources.is_empty() || f.event_type() != b"message" {
            return self.out.pass(f);
        }
        let d = f.data();
        if d == b"[DONE]" {
            self.flush_pending_top();
            return self.out.pass(f);
        }
        // The hot path: a chunk shaped like a recent one.
        if let Some((index, content)) = self
            .templates
            .iter()
            .find_map(|t| Some((t.index, t.matches(d)?)))
        {
            if let (Some(r), Some(st)) = (content, self.choice(index)) {
                if !st.finished {
                    st.tracker.push_json(&d[r]);
                }
            }
            return self.out.pass(f);
        }
        let mut fast = std::mem::take(&mut self.fast);
        let mut holes = std::mem::take(&mut self.holes);
        match fast_scan(d, &mut fast, &mut holes) {
            Err(Invalid) => self.out.pass(f),
            Ok(true) => {
                let mut finishing = false;
                for fc in &fast {
                    let Some(st) = fc.index.and_then(|i| self.choice(i)) else {
                        continue;
                    };
                    if st.finished {
                        continue;
                    }
                    if let Some(r) = &fc.content {
                        st.tracker.push_json(&d[r.clone()]);
                    }
                    finishing |= fc.finish;
                }
                if let [
                    FastChoice {
                        index: Some(i),
                        content,
                        finish: false,
                    },
                ] = &fast[..]
                {
                    let slot = self.next_template;
                    self.next_template = (slot + 1) % TEMPLATES;
                    self.templates[slot].learn(d, *i, content.as_ref(), &holes);
                }
                if finishing {
                    self.slow_path(f, true);
                } else {
                    self.out.pass(f);
                }
            }
            Ok(false) => self.slow_path(f, false),
        }
        self.fast = fast;
        self.holes = holes;
    }

    /// The complete scan of a chunk, for finish chunks and chunks with
    /// escaped keys. `counted`: the content was already fed by the fast
    /// path.
    fn slow_path(&mut self, f: &FrameRef<'_>, counted: bool) {
        let Frame::Event(e) = f.to_frame() else {
            return self.out.pass(f);
        };
        let mut scan = std::mem::take(&mut self.scan);
        let mut scans = std::mem::take(&mut self.scans);
        match scan_chunk(e.data(), &mut scan, &mut scans) {
            Ok(()) if counted => self.finish_chunk(&e, &scan, &scans),
            Ok(()) => self.chunk(&e, &scan, &scans),
            Err(Invalid) => self.emit(e.raw().clone()),
        }
        self.scan = scan;
        self.scans = scans;
    }

    fn choice(&mut self, index: u32) -> Option<&mut ChoiceState> {
        if index >= MAX_CHOICES {
            return None;
        }
        let i = index as usize;
        while self.choices.len() <= i {
            self.choices.push(ChoiceState {
                tracker: MarkerTracker::new(self.sources.len() as u32, self.opts.offsets),
                finished: false,
                markers: Vec::new(),
            });
        }
        Some(&mut self.choices[i])
    }

    fn chunk(&mut self, e: &Event, scan: &ChunkScan, scans: &[ChoiceScan]) {
        let d = e.data();
        let mut finishing = false;
        for c in scans {
            let Some(st) = c.index.and_then(|i| self.choice(i)) else {
                continue;
            };
            if st.finished {
                continue;
            }
            if let Some(r) = &c.content {
                st.tracker.push_json(&d[r.clone()]);
            }
            finishing |= c.finish.is_some();
        }
        if !finishing {
            return self.emit(e.raw().clone());
        }
        self.finish_chunk(e, scan, scans);
    }

    /// The cold path: at least one choice finishes in this chunk.
    fn finish_chunk(&mut self, e: &Event, scan: &ChunkScan, scans: &[ChoiceScan]) {
        let d = e.data();
        // Which choices finish here (first finish only), and their markers.
        let mut ending: Vec<(usize, u32)> = Vec::new();
        for (k, c) in scans.iter().enumerate() {
            let Some(idx) = c.index else { continue };
            if c.finish.is_none() || ending.iter().any(|&(_, i)| i == idx) {
                continue;
            }
            let Some(st) = self.choice(idx) else { continue };
            if st.finished {
                continue;
            }
            st.finished = true;
            st.tracker.finish();
            st.markers = st.tracker.take_markers();
            ending.push((k, idx));
        }
        self.finished += ending.len() as u32;
        let envelope = envelope_members(d, scan);
        self.last_envelope.clone_from(&envelope);
        let top = !self.top_done && self.finished >= self.opts.n;
        self.top_done |= top;

        let annotate = self.opts.dialect.sources;
        let with_markers: Vec<(usize, u32)> = ending
            .iter()
            .copied()
            .filter(|&(_, i)| annotate && !self.choices[i as usize].markers.is_empty())
            .collect();
        let split = with_markers
            .iter()
            .any(|&(k, _)| scans[k].content.as_ref().is_some_and(|r| !r.is_empty()));

        let mut pieces: Vec<Bytes> = Vec::new();
        if split {
            // 1. The content part: finish_reason null, usage moved to the end.
            let mut sp = Splice::new();
            for &(k, _) in &ending {
                if let Some(f) = &scans[k].finish {
                    sp.replace(f.clone(), &b"null"[..]);
                }
            }
            if let Some(u) = &scan.usage {
                sp.replace(json::removal_span(d, &u.member, u.end), Vec::new());
            }
            let mut data = Vec::with_capacity(d.len());
            sp.apply(d, &mut data);
            pieces.push(reframe(e, &data));
        }
        for &(_, idx) in &with_markers {
            let mut data = Vec::with_capacity(256);
            data.push(b'{');
            data.extend_from_slice(&envelope);
            if !envelope.is_empty() {
                data.push(b',');
            }
            data.extend_from_slice(b"\"choices\":[{\"index\":");
            data.extend_from_slice(idx.to_string().as_bytes());
            data.extend_from_slice(b",\"delta\":{\"annotations\":");
            push_annotations(
                &mut data,
                &self.sources,
                &self.choices[idx as usize].markers,
            );
            data.extend_from_slice(b"},\"finish_reason\":null}]}");
            let mut ev = Vec::with_capacity(data.len() + 8);
            sse::write_event(&mut ev, None, None, None, &data);
            pieces.push(Bytes::from(ev));
        }
        // The finish chunk itself.
        let mut sp = Splice::new();
        if split {
            // Keep only the finishing choices, each with an empty delta.
            let mut arr = Vec::from(&b"["[..]);
            for (n, &(k, _)) in ending.iter().enumerate() {
                let c = &scans[k];
                if n > 0 {
                    arr.push(b',');
                }
                // Edits relative to the element's own bytes.
                let base = c.span.start;
                let mut csp = Splice::new();
                if let Some(r) = &c.delta {
                    csp.replace(r.start - base..r.end - base, &b"{}"[..]);
                }
                if let Some(r) = &c.logprobs {
                    csp.replace(r.start - base..r.end - base, &b"null"[..]);
                }
                csp.apply(&d[c.span.clone()], &mut arr);
            }
            arr.push(b']');
            if let Some(r) = &scan.choices {
                sp.replace(r.clone(), arr);
            }
        }
        if top {
            let cited = self.cited_set();
            add_top_level(
                d,
                (scan.close, scan.has_members),
                &scan.existing,
                &self.sources,
                &self.opts,
                &cited,
                &mut sp,
            );
        }
        if split || !sp.is_empty() {
            let mut data = Vec::with_capacity(d.len() + 512);
            sp.apply(d, &mut data);
            if split {
                pieces.push(reframe(e, &data));
                self.out.swallow_line_end = e.raw().ends_with(b"\r");
            } else {
                pieces.push(splice_event(e, &data));
                if e.data_range().is_none() {
                    self.out.swallow_line_end = e.raw().ends_with(b"\r");
                }
            }
        } else {
            pieces.push(e.raw().clone());
        }
        for p in pieces {
            self.out.push(p);
        }
    }

    /// Numbers cited by any finished choice, indexed by number.
    fn cited_set(&self) -> Vec<bool> {
        let mut cited = vec![false; self.sources.len() + 1];
        for c in &self.choices {
            for m in &c.markers {
                if let Some(x) = cited.get_mut(m.number as usize) {
                    *x = true;
                }
            }
        }
        cited
    }

    /// The stream ends (or `[DONE]`) with fewer than `n` finishes: put the
    /// top-level additions on a synthesized chunk with `choices: []`.
    fn flush_pending_top(&mut self) {
        if self.top_done || self.finished == 0 {
            return;
        }
        self.top_done = true;
        let mut obj = Vec::from(&b"{"[..]);
        obj.extend_from_slice(&self.last_envelope);
        if !self.last_envelope.is_empty() {
            obj.push(b',');
        }
        obj.extend_from_slice(b"\"choices\":[]}");
        let close = obj.len() - 1;
        let cited = self.cited_set();
        let mut sp = Splice::new();
        add_top_level(
            &obj,
            (close, true),
            &Existing::default(),
            &self.sources,
            &self.opts,
            &cited,
            &mut sp,
        );
        let mut data = Vec::new();
        sp.apply(&obj, &mut data);
        let mut ev = Vec::with_capacity(data.len() + 8);
        sse::write_event(&mut ev, None, None, None, &data);
        self.out.push(Bytes::from(ev));
    }
}

impl crate::StreamRewriter for ChatStream {
    fn feed(&mut self, chunk: Bytes) {
        ChatStream::feed(self, chunk);
    }
    fn next_output(&mut self) -> Option<Bytes> {
        ChatStream::next_output(self)
    }
    fn finish(&mut self) {
        ChatStream::finish(self);
    }
}

/// `"id":…,"object":…,…` from the chunk's envelope members present.
fn envelope_members(d: &[u8], scan: &ChunkScan) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, span) in ENVELOPE.iter().zip(&scan.envelope) {
        if let Some(r) = span {
            if !out.is_empty() {
                out.push(b',');
            }
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
            out.extend_from_slice(&d[r.clone()]);
        }
    }
    out
}

/// The event with its data replaced by `data`: spliced into the original
/// bytes when the data was one line there (framing kept exactly), else
/// re-framed.
pub(crate) fn splice_event(e: &Event, data: &[u8]) -> Bytes {
    match e.data_range() {
        Some(r) => {
            let raw = e.raw();
            let mut out = Vec::with_capacity(raw.len() - r.len() + data.len());
            out.extend_from_slice(&raw[..r.start]);
            out.extend_from_slice(data);
            out.extend_from_slice(&raw[r.end..]);
            Bytes::from(out)
        }
        None => reframe(e, data),
    }
}

/// The event written fresh with canonical framing, keeping its `event`,
/// `id` and `retry` fields.
pub(crate) fn reframe(e: &Event, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + 32);
    sse::write_event(&mut out, e.event_field(), e.id_field(), e.retry(), data);
    Bytes::from(out)
}

/// Rewrites a whole (non-streamed) `chat.completion` body.
///
/// Returns the body unchanged (borrowed) when it is not a JSON object with a
/// `choices` array (an error body, say), when it is not valid JSON, or when
/// there are no sources.
///
/// ```
/// use citestream::{RewriteOptions, Sources, chat};
/// let sources = Sources::from_json(br#"[{"title":"T","url":"u"}]"#).unwrap();
/// let body = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"A [1]."}}]}"#;
/// let out = chat::rewrite_body(body, &sources, &RewriteOptions::new());
/// assert_eq!(
///     std::str::from_utf8(&out).unwrap(),
///     r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"A [1].","annotations":[{"type":"url_citation","url_citation":{"start_index":2,"end_index":5,"url":"u","title":"T"}}]}}],"sources":[{"index":1,"title":"T","url":"u"}]}"#
/// );
/// ```
///
/// # Panics
///
/// Never panics, on any input.
#[must_use]
pub fn rewrite_body<'a>(body: &'a [u8], sources: &Sources, opts: &RewriteOptions) -> Cow<'a, [u8]> {
    if sources.is_empty() {
        return Cow::Borrowed(body);
    }
    match rewrite_body_inner(body, sources, opts) {
        Ok(Some(v)) => Cow::Owned(v),
        Ok(None) | Err(Invalid) => Cow::Borrowed(body),
    }
}

fn rewrite_body_inner(
    b: &[u8],
    sources: &Sources,
    opts: &RewriteOptions,
) -> Result<Option<Vec<u8>>, Invalid> {
    let start = json::skip_ws(b, 0);
    let mut w = ObjectWalker::new(b, start, 0)?;
    let mut sp = Splice::new();
    let mut existing = Existing::default();
    let mut saw_choices = false;
    let mut cited = vec![false; sources.len() + 1];
    while let Some(m) = w.next_member()? {
        if m.key_is(b, "choices") && b[m.value_start] == b'[' {
            saw_choices = true;
            let end = body_choices(
                b,
                m.value_start,
                w.depth(),
                sources,
                opts,
                &mut sp,
                &mut cited,
            )?;
            w.value_end(end);
            continue;
        }
        let end = w.skip_value()?;
        existing.note(b, &m, end);
    }
    let close = w.close();
    if json::skip_ws(b, close + 1) != b.len() || !saw_choices {
        return Ok(None);
    }
    add_top_level(
        b,
        (close, w.has_members()),
        &existing,
        sources,
        opts,
        &cited,
        &mut sp,
    );
    let mut out = Vec::with_capacity(b.len() + 1024);
    sp.apply(b, &mut out);
    Ok(Some(out))
}

fn body_choices(
    b: &[u8],
    at: usize,
    depth: u32,
    sources: &Sources,
    opts: &RewriteOptions,
    sp: &mut Splice,
    cited: &mut [bool],
) -> Result<usize, Invalid> {
    let mut a = ArrayWalker::new(b, at, depth)?;
    while let Some(el) = a.next_element()? {
        if b[el] != b'{' {
            a.skip_value()?;
            continue;
        }
        let mut w = ObjectWalker::new(b, el, a.depth())?;
        while let Some(m) = w.next_member()? {
            if !(m.key_is(b, "message") && b[m.value_start] == b'{') {
                w.skip_value()?;
                continue;
            }
            let mut mw = ObjectWalker::new(b, m.value_start, w.depth())?;
            let mut tracker = MarkerTracker::new(sources.len() as u32, opts.offsets);
            let mut annotations: Option<Found> = None;
            // With duplicate keys the last one counts (as in serde_json and
            // the streaming path).
            let mut content = None;
            while let Some(mm) = mw.next_member()? {
                let end = mw.skip_value()?;
                if mm.key_is(b, "content") {
                    content = (b[mm.value_start] == b'"').then(|| mm.value_start + 1..end - 1);
                } else if mm.key_is(b, "annotations") {
                    annotations = Some(Found { member: mm, end });
                }
            }
            if let Some(r) = content {
                tracker.push_json(&b[r]);
            }
            tracker.finish();
            let markers = tracker.take_markers();
            for mk in &markers {
                if let Some(x) = cited.get_mut(mk.number as usize) {
                    *x = true;
                }
            }
            if opts.dialect.sources {
                let mut ours = Vec::new();
                push_annotations(&mut ours, sources, &markers);
                match annotations {
                    Some(f) if b[f.member.value_start] == b'[' => {
                        // Append ours inside the upstream array.
                        if !markers.is_empty() {
                            let inner = &ours[1..ours.len() - 1];
                            let close = json::insert_point(b, f.end - 1);
                            let empty = close == f.member.value_start + 1;
                            let mut ins = Vec::with_capacity(inner.len() + 1);
                            if !empty {
                                ins.push(b',');
                            }
                            ins.extend_from_slice(inner);
                            sp.replace(close..close, ins);
                        }
                    }
                    Some(f) => sp.replace(f.value(), ours),
                    None => {
                        let close = json::insert_point(b, mw.close());
                        let mut ins = Vec::with_capacity(ours.len() + 16);
                        if mw.has_members() {
                            ins.push(b',');
                        }
                        ins.extend_from_slice(b"\"annotations\":");
                        ins.extend_from_slice(&ours);
                        sp.replace(close..close, ins);
                    }
                }
            }
            w.value_end(mw.close() + 1);
        }
        a.value_end(w.close() + 1);
    }
    Ok(a.close() + 1)
}
