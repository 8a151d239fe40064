//! The chunk scanner: what the chat rewriter reads of one
//! `chat.completion.chunk`.
//!
//! Two scans with one meaning. The fast scan ([`fast_scan`]) walks a chunk
//! with a [`Cursor`] the way upstreams write them, reading
//! `choices[].index` and `choices[].delta.content`, and recording the
//! string and number values that vary from chunk to chunk as template
//! holes; it defers to the full scan at an escaped key or a string
//! `finish_reason` (a finish chunk is scanned once, by the full scan). The
//! full scan ([`scan_chunk`]) also reads `finish_reason`, the envelope
//! (`id`, `object`, `created`, `model`, `system_fingerprint`), `usage`, the
//! spans a finish chunk's rewrite needs, and escaped keys. When the fast
//! scan reads a chunk ([`FastScan::Read`]), both read the same index and
//! content for every choice and no finish (the `chat_scan` fuzz target
//! checks this, and templates against both); the fast scan rejects only
//! invalid texts, and every invalid text it neither defers nor stops
//! early in. It stops early ([`FastScan::NoChoices`]) at an empty
//! `choices` array that no other `choices` key can follow: the full scan
//! then reads no choice either, or rejects the text, and the chunk (a
//! `usage`, a moderation or content filter result) passes through either
//! way. Both are [`Cursor`] walks with the same grammar and nesting
//! depths as [`json::scan_value`].
//!
//! Two shortcuts, neither changing what is read: [`has_finish`] sends a
//! chunk with a string `finish_reason` straight to the full scan (no fast
//! scan up to its finish first), and a [`ScanPrefix`] lets the fast scan
//! compare a chunk's envelope with a recent chunk's, already validated,
//! instead of scanning it again (and the full scan take its envelope
//! spans).

use std::ops::Range;
use std::sync::LazyLock;

use memchr::memmem;

use crate::json::{self, Cursor, Field, Holes, Invalid, Member};

use crate::rewrite::additions::Existing;
#[cfg(test)]
use prefix::PREFIX_HOLES;
pub(crate) use prefix::ScanPrefix;
use prefix::{MAX_PREFIX, PrefixEnvelope};

/// What the scanner reads of one choice in a chunk.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChoiceScan {
    pub(crate) span: Range<usize>,
    /// `Some(0)` without `index`; `None` when the index is not a `u32`
    /// (the choice is then ignored, as on the fast path).
    pub(crate) index: Option<u32>,
    /// Raw body of `delta.content` when it is a string.
    pub(crate) content: Option<Range<usize>>,
    pub(crate) delta: Option<Range<usize>>,
    pub(crate) logprobs: Option<Range<usize>>,
    /// `finish_reason` value span when it is a string.
    pub(crate) finish: Option<Range<usize>>,
    /// The choice finishes here (its first finish; set by the handler).
    pub(crate) ending: bool,
}

/// Choices inline in a [`ChoiceScans`] (a finish chunk has one, or a
/// few with `n` > 1).
const INLINE_SCANS: usize = 2;

/// What the full scan reads of a chunk's choices: the first
/// [`INLINE_SCANS`] inline (no allocation), all on the heap once there
/// are more. Derefs to the choices read.
#[derive(Debug, Default)]
pub(crate) struct ChoiceScans {
    n: usize,
    inline: [ChoiceScan; INLINE_SCANS],
    /// All of them, when more than fit inline.
    more: Vec<ChoiceScan>,
}

impl ChoiceScans {
    pub(crate) fn clear(&mut self) {
        self.n = 0;
        self.more.clear();
    }

    fn push(&mut self, c: ChoiceScan) {
        if self.more.is_empty() {
            if let Some(slot) = self.inline.get_mut(self.n) {
                *slot = c;
                self.n += 1;
                return;
            }
            self.more.extend(self.inline.iter_mut().map(std::mem::take));
        }
        self.more.push(c);
    }
}

impl std::ops::Deref for ChoiceScans {
    type Target = [ChoiceScan];

    fn deref(&self) -> &[ChoiceScan] {
        if self.more.is_empty() {
            self.inline.get(..self.n).unwrap_or_default()
        } else {
            &self.more
        }
    }
}

impl std::ops::DerefMut for ChoiceScans {
    fn deref_mut(&mut self) -> &mut [ChoiceScan] {
        if self.more.is_empty() {
            self.inline.get_mut(..self.n).unwrap_or_default()
        } else {
            &mut self.more
        }
    }
}

/// What the scanner reads of one chunk.
#[derive(Debug, Default)]
pub(crate) struct ChunkScan {
    pub(crate) close: usize,
    pub(crate) has_members: bool,
    /// Value spans of `id`, `object`, `created`, `model`,
    /// `system_fingerprint`.
    pub(crate) envelope: [Option<Range<usize>>; 5],
    pub(crate) usage: Option<Field>,
    pub(crate) choices: Option<Range<usize>>,
    pub(crate) existing: Existing,
}

pub(crate) const ENVELOPE: [&str; 5] = ["id", "object", "created", "model", "system_fingerprint"];

/// The [`ENVELOPE`] keys as written: with their quotes and colon.
pub(crate) const ENVELOPE_KEYS: [&[u8]; ENVELOPE.len()] = [
    b"\"id\":",
    b"\"object\":",
    b"\"created\":",
    b"\"model\":",
    b"\"system_fingerprint\":",
];

/// Scans one chunk's JSON. `choices` receives one entry per choice object.
///
/// A [`Cursor`] walk like the fast scan's (same grammar, same nesting
/// depths as [`json::scan_value`]), reading more.
///
/// With a `prefix` of envelope members only that `d` starts with, the
/// scan goes on after it with the envelope spans it holds (the same bytes
/// read the same).
pub(crate) fn scan_chunk(
    d: &[u8],
    s: &mut ChunkScan,
    choices: &mut ChoiceScans,
    prefix: Option<&ScanPrefix>,
) -> Result<(), Invalid> {
    s.usage = None;
    s.choices = None;
    s.existing.clear();
    choices.clear();
    let mut c = Cursor::new(d);
    let mut prev_end = None;
    let resumed = prefix.and_then(|p| Some((p.envelope.as_ref()?, p.resume(d)?)));
    let more = if let Some((env, at)) = resumed {
        // (After a comma: a key follows.)
        s.envelope = env.spans.clone();
        s.has_members = true;
        prev_end = Some(env.last_end);
        c.i = at;
        c.ws();
        true
    } else {
        s.envelope = Default::default();
        s.has_members = false;
        c.ws();
        c.eat(b'{')?;
        !c.empty(b'}')
    };
    if more {
        loop {
            let (key, key_escaped) = c.string()?;
            c.ws();
            c.eat(b':')?;
            c.ws();
            let value_start = c.i;
            if !key_escaped && &d[key.clone()] == b"choices" && c.peek() == b'[' {
                choices.clear();
                c.i = scan_choices(d, value_start, choices)?;
                s.choices = Some(value_start..c.i);
            } else {
                c.skip(1)?;
                let m = Member {
                    key,
                    key_escaped,
                    value_start,
                    prev_end,
                };
                top_member(d, m, c.i, s, choices);
            }
            prev_end = Some(c.i);
            s.has_members = true;
            if !c.more(b'}')? {
                break;
            }
        }
    }
    s.close = c.i - 1;
    c.ws();
    if c.i != d.len() {
        return Err(Invalid);
    }
    Ok(())
}

/// A top-level member other than an unescaped `choices` array, its value
/// (valid) ending at `end`.
fn top_member(d: &[u8], m: Member, end: usize, s: &mut ChunkScan, choices: &mut ChoiceScans) {
    if m.key_escaped {
        // Rare: compare decoded keys.
        if m.key_is(d, "choices") {
            choices.clear();
            scan_choices(d, m.value_start, choices).ok();
            s.choices = Some(m.value_start..end);
        } else if m.key_is(d, "usage") {
            s.usage = Some(Field { member: m, end });
        } else if !s.existing.note(d, &m, end) {
            if let Some(k) = ENVELOPE.iter().position(|e| m.key_is(d, e)) {
                s.envelope[k] = Some(m.value_start..end);
            }
        }
        return;
    }
    match &d[m.key.clone()] {
        b"id" => s.envelope[0] = Some(m.value_start..end),
        b"object" => s.envelope[1] = Some(m.value_start..end),
        b"created" => s.envelope[2] = Some(m.value_start..end),
        b"model" => s.envelope[3] = Some(m.value_start..end),
        b"system_fingerprint" => s.envelope[4] = Some(m.value_start..end),
        b"usage" => s.usage = Some(Field { member: m, end }),
        b"sources" | b"citations" => {
            s.existing.note(d, &m, end);
        }
        _ => {}
    }
}

/// The `choices` array at `d[at]` (a `[`); returns its end.
fn scan_choices(d: &[u8], at: usize, out: &mut ChoiceScans) -> Result<usize, Invalid> {
    let mut c = Cursor::new(d);
    c.i = at;
    c.eat(b'[')?;
    if !c.empty(b']') {
        loop {
            if c.peek() == b'{' {
                let start = c.i;
                let mut choice = scan_choice(&mut c)?;
                choice.span = start..c.i;
                out.push(choice);
            } else {
                c.skip(2)?;
            }
            if !c.more(b']')? {
                break;
            }
        }
    }
    Ok(c.i)
}

/// One choice object (cursor on its `{`, left after its `}`).
fn scan_choice(c: &mut Cursor<'_>) -> Result<ChoiceScan, Invalid> {
    let d = c.b;
    let mut ch = ChoiceScan {
        index: Some(0),
        ..ChoiceScan::default()
    };
    c.i += 1;
    if c.empty(b'}') {
        return Ok(ch);
    }
    loop {
        let (k, escaped) = c.string()?;
        c.ws();
        c.eat(b':')?;
        c.ws();
        // One comparison per key (a length switch), not one per name.
        let decoded;
        let key: &[u8] = if escaped {
            decoded = json::decode_str(&d[k]);
            decoded.as_bytes()
        } else {
            &d[k]
        };
        let start = c.i;
        if key == b"delta" && c.peek() == b'{' {
            ch.content = scan_delta(c)?;
            ch.delta = Some(start..c.i);
        } else {
            c.skip(3)?;
            let end = c.i;
            match key {
                b"index" => ch.index = json::parse_u32(&d[start..end]),
                b"finish_reason" => ch.finish = (d[start] == b'"').then_some(start..end),
                b"logprobs" => ch.logprobs = Some(start..end),
                b"delta" => {
                    ch.delta = Some(start..end);
                    ch.content = None;
                }
                _ => {}
            }
        }
        if !c.more(b'}')? {
            return Ok(ch);
        }
    }
}

/// A `delta` object (cursor on its `{`, left after its `}`): the raw body
/// of its last `content` member when that is a string.
fn scan_delta(c: &mut Cursor<'_>) -> Result<Option<Range<usize>>, Invalid> {
    let d = c.b;
    let mut content = None;
    c.i += 1;
    if c.empty(b'}') {
        return Ok(content);
    }
    loop {
        let (k, escaped) = c.string()?;
        c.ws();
        c.eat(b':')?;
        c.ws();
        let start = c.i;
        c.skip(4)?;
        let is_content = if escaped {
            json::decode_str(&d[k]) == "content"
        } else {
            &d[k] == b"content"
        };
        if is_content {
            content = (d[start] == b'"').then(|| start + 1..c.i - 1);
        }
        if !c.more(b'}')? {
            return Ok(content);
        }
    }
}

/// Whether the chunk `d` has a `"finish_reason":"` (a string finish
/// reason, written without whitespace, the way upstreams write it): then
/// it goes straight to the full scan, which the cold path of a finish
/// chunk needs anyway, instead of being fast-scanned up to its finish
/// first. (A false positive only means a chunk scanned by the full scan,
/// which reads the same; a `"` inside a string is escaped, so the pattern
/// never starts inside one.)
#[inline]
pub(crate) fn has_finish(d: &[u8]) -> bool {
    static FINISH: LazyLock<memmem::Finder<'static>> = LazyLock::new(|| {
        memmem::FinderBuilder::new().build_forward_with_ranker(ChunkBytes, b"\"finish_reason\":\"")
    });
    FINISH.find(d).is_some()
}

/// Byte frequencies as in chat chunks, for [`has_finish`]'s searcher: its
/// prefilter then looks for the pattern's `f` and `h` (rare in a chunk but
/// in `finish_reason`), not for its `"`, `_` or `:` (in every member), so
/// nearly every candidate it stops at is a `finish_reason` key.
struct ChunkBytes;

impl memchr::arch::all::packedpair::HeuristicFrequencyRank for ChunkBytes {
    fn rank(&self, byte: u8) -> u8 {
        match byte {
            b'f' => 1,
            b'h' => 2,
            _ => 255,
        }
    }
}

/// What the fast path reads of one choice of a chunk.
#[derive(Clone, Debug, Default)]
pub(crate) struct FastChoice {
    /// `None` when the index is not a `u32` (the choice is then ignored).
    pub(crate) index: Option<u32>,
    /// Raw body of `delta.content` when it is a string.
    pub(crate) content: Option<Range<usize>>,
}

/// Most choice objects the fast scan reads in one chunk (a chunk with more
/// takes the full scan).
pub(crate) const MAX_FAST_CHOICES: usize = 8;

/// What the fast scan reads of a chunk's choices: at most
/// [`MAX_FAST_CHOICES`], inline (a list that never allocates; it derefs to
/// the choices read).
#[derive(Clone, Debug, Default)]
pub(crate) struct FastChoices {
    n: usize,
    at: [FastChoice; MAX_FAST_CHOICES],
}

impl FastChoices {
    fn clear(&mut self) {
        self.n = 0;
    }

    /// Adds a choice; `false` when the list is full.
    #[inline]
    fn push(&mut self, fc: FastChoice) -> bool {
        let Some(slot) = self.at.get_mut(self.n) else {
            return false;
        };
        *slot = fc;
        self.n += 1;
        true
    }
}

impl std::ops::Deref for FastChoices {
    type Target = [FastChoice];

    #[inline]
    fn deref(&self) -> &[FastChoice] {
        self.at.get(..self.n).unwrap_or_default()
    }
}

/// [`scan_chunk`] of `d` with the [`ScanPrefix`] the fast scan learns
/// from `learn`, and without, as text (for the differential tests).
#[cfg(any(test, fuzzing))]
pub(crate) fn scan_with_prefix(learn: &[u8], d: &[u8]) -> (String, String) {
    let mut prefix = ScanPrefix::default();
    let _ = fast_scan(
        learn,
        &mut FastChoices::default(),
        &mut Holes::default(),
        Some(&mut prefix),
    );
    let scan = |p: Option<&ScanPrefix>| {
        let (mut s, mut cs) = (ChunkScan::default(), ChoiceScans::default());
        match scan_chunk(d, &mut s, &mut cs, p) {
            Ok(()) => format!("{s:?} {:?}", &cs[..]),
            Err(Invalid) => "invalid".to_owned(),
        }
    };
    (scan(Some(&prefix)), scan(None))
}

/// The [`ENVELOPE`] position of an (unescaped) key.
#[inline]
fn envelope_key(key: &[u8]) -> Option<usize> {
    match key {
        b"id" => Some(0),
        b"object" => Some(1),
        b"created" => Some(2),
        b"model" => Some(3),
        b"system_fingerprint" => Some(4),
        _ => None,
    }
}

/// What the fast scan made of a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FastScan {
    /// Valid JSON; its choices (none finishing) are in the
    /// [`FastChoices`], its varying tokens in the [`Holes`].
    Read,
    /// The full scan decides: an escaped key, a string `finish_reason`,
    /// more than [`MAX_FAST_CHOICES`] choices.
    Defer,
    /// No choice, whatever the bytes after an empty `choices` array (not
    /// validated): no escape and no `"choices"` follow it, so it is the
    /// chunk's last `choices` member and the full scan reads no choice
    /// either (or rejects the text). Such a chunk (a `usage`, a
    /// moderation or content filter result) passes through either way,
    /// so the rest of it (often most of it) is not scanned.
    NoChoices,
}

/// The hot path's scan of one chunk: validates the whole JSON text and
/// reads `choices[].index` and `choices[].delta.content`
/// ([`FastScan::Read`]). Defers to the full scan ([`FastScan::Defer`])
/// when a key has escapes (rare), at a choice object past
/// [`MAX_FAST_CHOICES`] (rarer), or as soon as a `choices[].finish_reason`
/// is a string: a finish chunk takes the cold path, which needs the full
/// scan anyway, so it is scanned once. (Invalid JSON after that point is
/// the full scan's to reject.) Stops at an empty `choices` array that no
/// other can follow ([`FastScan::NoChoices`]).
///
/// With `prefix`, a chunk starting like the one it holds is read from
/// where that one's `choices` began, and the prefix is learned from a
/// chunk that does not.
pub(crate) fn fast_scan(
    d: &[u8],
    out: &mut FastChoices,
    holes: &mut Holes,
    mut prefix: Option<&mut ScanPrefix>,
) -> Result<FastScan, Invalid> {
    out.clear();
    holes.clear();
    let mut c = Cursor::new(d);
    let resumed = prefix.as_deref().and_then(|p| p.resume(d));
    // Learn the prefix at the first `choices` key, unless resumed there.
    let mut learn = resumed.is_none();
    let mut more = match resumed {
        // (After a comma: a key must follow.)
        Some(at) => {
            if let Some(p) = prefix.as_deref() {
                p.holes_into(holes);
            }
            c.i = at;
            c.ws();
            true
        }
        None => {
            c.ws();
            c.eat(b'{')?;
            !c.empty(b'}')
        }
    };
    let mut members = 0;
    // The envelope spans of the members read so far, while learning the
    // prefix and as long as the full scan reads nothing else there.
    let mut env = (learn && prefix.is_some()).then(PrefixEnvelope::default);
    while more {
        let key_at = c.i;
        let Some(k) = c.key()? else {
            return Ok(FastScan::Defer);
        };
        let key = &d[k];
        if key == b"choices" && c.peek() == b'[' {
            // (After a comma.)
            if learn && members > 0 && key_at <= MAX_PREFIX {
                if let Some(p) = prefix.as_deref_mut() {
                    p.record(&d[..key_at], holes, env.take());
                }
            }
            learn = false;
            env = None;
            c.i += 1;
            out.clear();
            if !c.empty(b']') {
                loop {
                    if c.peek() == b'{' {
                        if !fast_choice(&mut c, out, holes)? {
                            return Ok(FastScan::Defer);
                        }
                    } else {
                        c.skip(2)?;
                    }
                    if !c.more(b']')? {
                        break;
                    }
                }
            }
            if out.is_empty() && no_choices_key(&d[c.i..]) {
                return Ok(FastScan::NoChoices);
            }
        } else if let Some(k) = envelope_key(key) {
            // The envelope: the same in every chunk of a stream.
            let start = c.i;
            c.skip(1)?;
            if let Some(e) = env.as_mut() {
                e.spans[k] = Some(start..c.i);
            }
        } else {
            if matches!(key, b"usage" | b"sources" | b"citations") {
                // (Read by the full scan.)
                env = None;
            }
            if matches!(c.peek(), b'[' | b'{') {
                // Inside other top-level arrays and objects numbers vary
                // (a running `usage`) but strings repeat (Perplexity's
                // `citations`): only the numbers are holes. (A string
                // that does change only makes the template miss.)
                c.skip_number_holes(1, holes)?;
            } else {
                // Other top-level strings and numbers may vary from chunk
                // to chunk (`obfuscation`): holes in a learned template.
                c.skip_holes(1, holes)?;
            }
        }
        if let Some(e) = env.as_mut() {
            e.last_end = c.i;
        }
        members += 1;
        more = c.more(b'}')?;
    }
    c.ws();
    if c.i != d.len() {
        return Err(Invalid);
    }
    Ok(FastScan::Read)
}

/// Whether `rest` (what follows a `choices` array) can hold no other
/// `choices` key: it has no backslash (so no escaped key) and no
/// `"choices"`. (Without escapes, a `"` always opens or closes a string,
/// so a `choices` key would be that very text.)
#[inline]
fn no_choices_key(rest: &[u8]) -> bool {
    static CHOICES: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(b"\"choices\""));
    memchr::memchr(b'\\', rest).is_none() && CHOICES.find(rest).is_none()
}

/// [`fast_scan`] as "read": whether it read the choices (not deferred,
/// not [`FastScan::NoChoices`]), for the tests.
#[cfg(any(test, fuzzing))]
pub(crate) fn fast_reads(
    d: &[u8],
    out: &mut FastChoices,
    holes: &mut Holes,
) -> Result<bool, Invalid> {
    Ok(fast_scan(d, out, holes, None)? == FastScan::Read)
}

/// One choice object (cursor on its `{`).
#[inline]
fn fast_choice(
    c: &mut Cursor<'_>,
    out: &mut FastChoices,
    holes: &mut Holes,
) -> Result<bool, Invalid> {
    let d = c.b;
    c.i += 1;
    let mut fc = FastChoice {
        index: Some(0),
        content: None,
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
                            if !c.more(b'}')? {
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
                    // Literal in a template: one template per choice of
                    // `n` > 1 (cheaper than a hole; four slots hold them).
                    let start = c.i;
                    c.skip(3)?;
                    fc.index = json::parse_u32(&d[start..c.i]);
                }
                b"finish_reason" if c.peek() == b'"' => return Ok(false),
                // `logprobs` and the like: their strings and numbers vary.
                _ => c.skip_holes(3, holes)?,
            }
            if !c.more(b'}')? {
                break;
            }
        }
    }
    Ok(out.push(fc))
}

mod prefix;

#[cfg(test)]
mod tests;
