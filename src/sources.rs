//! Source documents and their two output dialects.
//!
//! A [`Source`] is one search result (or retrieved passage) put in front of
//! the model. Sources are numbered from 1 in the order given; the model cites
//! them with `[n]` markers. [`Sources`] holds the list together with the
//! pre-serialized JSON fragments the rewriters splice into responses, so the
//! streaming hot path never serializes anything.
//!
//! Two dialects exist and can be enabled separately or together
//! ([`Dialect`]):
//!
//! * `sources`: a top-level `sources` array (`{"index","title","url"}` per
//!   source, cited or not) and, on chat messages, `annotations` of type
//!   `url_citation` with the character offsets of each marker.
//! * `citations`: a top-level `citations` array in the Magisterium shape,
//!   every key always present (see [`Sources::citations_json`]).
//!
//! An annotation is written from fixed text, its two offsets and its
//! source's pre-serialized rest; `AnnotationWriter` writes a run of them
//! (the last event of a stream that cites in every sentence carries
//! thousands) with two appends each and no allocation.

use std::fmt;

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::json::push_json_str;

/// One source document given to the model. Every field is optional.
///
/// Deserializes from a JSON object; unknown members are ignored, and `year`
/// and `reference` also accept a JSON number (kept as its decimal text).
/// Serializes to the same object, absent fields left out.
///
/// ```
/// let s: citestream::Source = serde_json::from_str(r#"{"title":"T","year":1999,"x":1}"#).unwrap();
/// assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"title":"T","year":"1999"}"#);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct Source {
    /// Title of the page or document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// URL of the page or document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The snippet or passage the model read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Nearest heading of the passage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
    /// Author of the document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Year of publication.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "string_or_number")]
    pub year: Option<String>,
    /// A reference inside the document, e.g. a paragraph number.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(deserialize_with = "string_or_number")]
    pub reference: Option<String>,
}

impl Source {
    /// The fields that are present, as `(name, value)` in the order they
    /// serialize (`title`, `url`, `text`, `heading`, `author`, `year`,
    /// `reference`): for hosts that build a source object of their own
    /// kind (a Python dict) with the names its JSON has.
    ///
    /// ```
    /// let s = citestream::Source { title: Some("T".into()), year: Some("1999".into()), ..Default::default() };
    /// assert_eq!(s.fields().collect::<Vec<_>>(), [("title", "T"), ("year", "1999")]);
    /// ```
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("title", &self.title),
            ("url", &self.url),
            ("text", &self.text),
            ("heading", &self.heading),
            ("author", &self.author),
            ("year", &self.year),
            ("reference", &self.reference),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name, value.as_deref()?)))
    }
}

fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Sn {
        S(String),
        N(serde_json::Number),
    }
    Ok(match Option::<Sn>::deserialize(d)? {
        None => None,
        Some(Sn::S(s)) => Some(s),
        Some(Sn::N(n)) => Some(n.to_string()),
    })
}

/// Which output dialects a rewriter adds. Both may be on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dialect {
    /// Top-level `sources` plus `annotations` on chat messages.
    pub sources: bool,
    /// Top-level `citations` (Magisterium shape).
    pub citations: bool,
}

impl Dialect {
    /// Only the `sources` dialect (the default).
    pub const SOURCES: Dialect = Dialect {
        sources: true,
        citations: false,
    };
    /// Only the `citations` dialect.
    pub const CITATIONS: Dialect = Dialect {
        sources: false,
        citations: true,
    };
    /// Both dialects.
    pub const BOTH: Dialect = Dialect {
        sources: true,
        citations: true,
    };
}

impl Default for Dialect {
    fn default() -> Self {
        Dialect::SOURCES
    }
}

impl Dialect {
    /// The dialect's name, as `rewrite.dialect`, `--dialect` and the Python
    /// `dialect=` spell it: `"sources"`, `"citations"` or `"both"` (`"none"`
    /// for neither, which no name parses to).
    ///
    /// ```
    /// use citestream::Dialect;
    /// assert_eq!("both".parse::<Dialect>(), Ok(Dialect::BOTH));
    /// assert_eq!(Dialect::default().to_string(), "sources");
    /// assert!("Both".parse::<Dialect>().is_err());
    /// ```
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match (self.sources, self.citations) {
            (true, false) => "sources",
            (false, true) => "citations",
            (true, true) => "both",
            (false, false) => "none",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error returned when parsing a [`Dialect`] from a string other than
/// `sources`, `citations` or `both`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseDialectError {
    _private: (),
}

impl fmt::Display for ParseDialectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown dialect (expected sources, citations or both)")
    }
}

impl std::error::Error for ParseDialectError {}

impl FromStr for Dialect {
    type Err = ParseDialectError;

    /// Parses `sources`, `citations` or `both` (exactly, lowercase).
    ///
    /// # Errors
    /// [`ParseDialectError`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Dialect::SOURCES, Dialect::CITATIONS, Dialect::BOTH]
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or(ParseDialectError { _private: () })
    }
}

/// Error returned when a sources document is not a JSON array of objects.
#[derive(Debug)]
pub struct SourcesError {
    msg: String,
}

impl fmt::Display for SourcesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid sources: {}", self.msg)
    }
}

impl std::error::Error for SourcesError {}

/// The numbered sources of one request, with their output fragments
/// serialized once up front.
///
/// Cheap to share: wrap it in an `Arc` to hand one list to many rewriters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sources {
    list: Vec<Source>,
    /// `[{"index":1,"title":…,"url":…},…]`
    sources_json: String,
    /// Per source: `,"url":…,"title":…}}`, the rest of a chat-shaped
    /// `url_citation` object after its `end_index`; the Responses shape
    /// ends one brace earlier ([`Sources::url_citation_rest`]).
    url_citation_rest: Vec<String>,
}

impl Sources {
    /// Builds the list from sources numbered 1.. in the given order.
    #[must_use]
    pub fn new(list: Vec<Source>) -> Self {
        let mut sources_json = String::from("[");
        let mut url_citation_rest = Vec::with_capacity(list.len());
        for (i, s) in list.iter().enumerate() {
            if i > 0 {
                sources_json.push(',');
            }
            sources_json.push_str("{\"index\":");
            sources_json.push_str(&(i + 1).to_string());
            sources_json.push_str(",\"title\":");
            push_opt_str(&mut sources_json, s.title.as_deref());
            sources_json.push_str(",\"url\":");
            push_opt_str(&mut sources_json, s.url.as_deref());
            sources_json.push('}');

            let mut m = String::from(",\"url\":");
            push_str_or_empty(&mut m, s.url.as_deref());
            m.push_str(",\"title\":");
            push_str_or_empty(&mut m, s.title.as_deref());
            m.push_str("}}");
            url_citation_rest.push(m);
        }
        sources_json.push(']');
        Sources {
            list,
            sources_json,
            url_citation_rest,
        }
    }

    /// Parses a JSON array of source objects (docs/reference/request.md, "Sources").
    ///
    /// # Errors
    /// Returns [`SourcesError`] when `json` is not valid JSON, not an array,
    /// or has an element that is not an object (or has a field of the wrong
    /// type).
    pub fn from_json(json: &[u8]) -> Result<Self, SourcesError> {
        let v: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| SourcesError { msg: e.to_string() })?;
        let arr = v.as_array().ok_or_else(|| SourcesError {
            msg: "expected a JSON array of objects".into(),
        })?;
        let mut list = Vec::with_capacity(arr.len());
        for (i, el) in arr.iter().enumerate() {
            if !el.is_object() {
                return Err(SourcesError {
                    msg: format!("element {i} is not an object"),
                });
            }
            let s: Source = serde_json::from_value(el.clone()).map_err(|e| SourcesError {
                msg: format!("element {i}: {e}"),
            })?;
            list.push(s);
        }
        Ok(Sources::new(list))
    }

    /// The sources, in footnote order (`[1]` is element 0).
    #[must_use]
    pub fn list(&self) -> &[Source] {
        &self.list
    }

    /// Number of sources; markers `[1]` to `[len]` annotate.
    #[must_use]
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when there are no sources (a rewriter then adds nothing).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The top-level `sources` array as JSON: one `{"index","title","url"}`
    /// per source, cited or not (`null` for a missing title or URL).
    #[must_use]
    pub fn sources_json(&self) -> &str {
        &self.sources_json
    }

    /// Appends one `url_citation` annotation object for a marker citing
    /// source `number` (1-based) at `start..end` to `out`, in the chat
    /// shape (`{"type":"url_citation","url_citation":{…}}`).
    ///
    /// # Panics
    /// Panics if `number` is 0 or greater than [`Sources::len`]; the marker
    /// tracker only reports numbers in range.
    pub fn push_annotation(&self, out: &mut Vec<u8>, number: u32, start: u64, end: u64) {
        self.push_annotation_as(AnnotationShape::Nested, out, number, start, end);
    }

    /// The number of bytes [`push_annotation`](Self::push_annotation)
    /// appends (so a buffer can be sized exactly).
    ///
    /// # Panics
    /// As `push_annotation`.
    #[must_use]
    pub fn annotation_len(&self, number: u32, start: u64, end: u64) -> usize {
        self.annotation_len_as(AnnotationShape::Nested, number, start, end)
    }

    /// [`push_annotation`](Self::push_annotation) in either shape.
    pub(crate) fn push_annotation_as(
        &self,
        shape: AnnotationShape,
        out: &mut Vec<u8>,
        number: u32,
        start: u64,
        end: u64,
    ) {
        AnnotationWriter::new(shape).push(self, out, false, number, start, end);
    }

    /// The rest of a `url_citation` object of `shape` citing source
    /// `number` after its `end_index`: `,"url":…,"title":…}` and, in the
    /// chat shape, the enclosing object's `}`.
    #[inline]
    fn url_citation_rest(&self, shape: AnnotationShape, number: u32) -> &[u8] {
        let rest = self.url_citation_rest[number as usize - 1].as_bytes();
        match shape {
            AnnotationShape::Nested => rest,
            AnnotationShape::Flat => &rest[..rest.len() - 1],
        }
    }

    /// [`annotation_len`](Self::annotation_len) in either shape.
    pub(crate) fn annotation_len_as(
        &self,
        shape: AnnotationShape,
        number: u32,
        start: u64,
        end: u64,
    ) -> usize {
        self.annotation_len_in(shape, number, start, end, &mut DecimalLen::default())
    }

    /// [`annotation_len_as`](Self::annotation_len_as) with the offsets'
    /// lengths from `digits`, which a caller sizing many annotations keeps
    /// from one to the next (their offsets mostly rise).
    #[inline]
    pub(crate) fn annotation_len_in(
        &self,
        shape: AnnotationShape,
        number: u32,
        start: u64,
        end: u64,
        digits: &mut DecimalLen,
    ) -> usize {
        shape.head().len()
            + digits.of(start)
            + ANNOTATION_END.len()
            + digits.of(end)
            + self.url_citation_rest(shape, number).len()
    }

    /// The top-level `citations` array as JSON (docs/reference/responses.md, "The citations array"): one entry per
    /// source in footnote order, or only those whose 1-based number satisfies
    /// `include` (`document_index` stays footnote number − 1 either way).
    #[must_use]
    pub fn citations_json(&self, mut include: impl FnMut(u32) -> bool) -> String {
        let mut out = String::from("[");
        let mut first = true;
        for (i, s) in self.list.iter().enumerate() {
            if !include(i as u32 + 1) {
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str("{\"cited_text\":");
            push_str_or_empty(&mut out, s.text.as_deref());
            out.push_str(",\"cited_text_heading\":");
            push_opt_str(&mut out, s.heading.as_deref());
            out.push_str(",\"document_title\":");
            push_opt_str(&mut out, s.title.as_deref());
            out.push_str(",\"document_index\":");
            out.push_str(&i.to_string());
            out.push_str(",\"document_author\":");
            push_opt_str(&mut out, s.author.as_deref());
            out.push_str(",\"document_year\":");
            push_opt_str(&mut out, s.year.as_deref());
            out.push_str(",\"document_reference\":");
            push_opt_str(&mut out, s.reference.as_deref());
            out.push_str(",\"source_url\":");
            push_str_or_empty(&mut out, s.url.as_deref());
            out.push('}');
        }
        out.push(']');
        out
    }
}

/// The two shapes of a `url_citation` annotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AnnotationShape {
    /// Chat completions: `{"type":"url_citation","url_citation":{"start_index",
    /// "end_index","url","title"}}`.
    Nested,
    /// The Responses API: `{"type":"url_citation","start_index","end_index",
    /// "url","title"}`.
    Flat,
}

impl AnnotationShape {
    fn head(self) -> &'static [u8] {
        match self {
            AnnotationShape::Nested => NESTED_HEAD,
            AnnotationShape::Flat => FLAT_HEAD,
        }
    }
}

const NESTED_HEAD: &[u8; 53] = b"{\"type\":\"url_citation\",\"url_citation\":{\"start_index\":";
const FLAT_HEAD: &[u8; 37] = b"{\"type\":\"url_citation\",\"start_index\":";
const ANNOTATION_END: &[u8; 13] = b",\"end_index\":";

/// Writes `url_citation` annotations of one shape, one after another (a
/// stream whose every event cites writes thousands in its last event).
///
/// Each annotation is put together in the writer's buffer, then appended
/// with its source's rest: two appends per annotation. The buffer holds a
/// comma and the shape's head from the start, written once; per annotation
/// only the two offsets and `,"end_index":` between them are written, each
/// offset's digits in place (their number from [`DecimalLen`]).
pub(crate) struct AnnotationWriter {
    shape: AnnotationShape,
    /// `,` then the head, then room for the rest of the fixed part.
    buf: [u8; 1 + NESTED_HEAD.len() + 20 + ANNOTATION_END.len() + 20],
    /// Where the start offset goes (after the comma and the head).
    at: usize,
    digits: DecimalLen,
}

impl AnnotationWriter {
    pub(crate) fn new(shape: AnnotationShape) -> Self {
        let mut buf = [0u8; 1 + NESTED_HEAD.len() + 20 + ANNOTATION_END.len() + 20];
        buf[0] = b',';
        let head = shape.head();
        buf[1..1 + head.len()].copy_from_slice(head);
        AnnotationWriter {
            shape,
            buf,
            at: 1 + head.len(),
            digits: DecimalLen::default(),
        }
    }

    /// Appends the annotation of a marker citing source `number` at
    /// `start..end` to `out`, after a comma when `comma`.
    ///
    /// # Panics
    /// As [`Sources::push_annotation`].
    #[inline]
    pub(crate) fn push(
        &mut self,
        sources: &Sources,
        out: &mut Vec<u8>,
        comma: bool,
        number: u32,
        start: u64,
        end: u64,
    ) {
        let rest = sources.url_citation_rest(self.shape, number);
        let mut n = self.at;
        n = write_digits(&mut self.buf, n, self.digits.of(start), start);
        self.buf[n..n + ANNOTATION_END.len()].copy_from_slice(ANNOTATION_END);
        n += ANNOTATION_END.len();
        n = write_digits(&mut self.buf, n, self.digits.of(end), end);
        out.extend_from_slice(&self.buf[usize::from(!comma)..n]);
        out.extend_from_slice(rest);
    }
}

/// Writes `v`, which has `len` decimal digits, into `buf` at `at` and
/// returns where it ends: two digits a step from the right.
#[inline(always)]
fn write_digits(buf: &mut [u8], at: usize, len: usize, mut v: u64) -> usize {
    let digits = &mut buf[at..at + len];
    let mut i = len;
    while i >= 2 {
        let p = (v % 100) as usize * 2;
        v /= 100;
        digits[i - 2..i].copy_from_slice(&DIGIT_PAIRS[p..p + 2]);
        i -= 2;
    }
    if i == 1 {
        digits[0] = b'0' + v as u8;
    }
    at + len
}

/// The number of decimal digits of `v`.
fn u64_len(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The number of decimal digits of numbers that mostly come in rising
/// order (the offsets of a choice's annotations, in the order they are
/// written): the range of numbers of the last one's length is kept, so
/// most cost two comparisons and a number of another length one
/// [`u64_len`]. Exact for any order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DecimalLen {
    /// Every `v` with `lo <= v < hi` has `len` digits (empty at first).
    lo: u64,
    hi: u64,
    len: usize,
}

impl Default for DecimalLen {
    fn default() -> Self {
        DecimalLen {
            lo: 1,
            hi: 0,
            len: 0,
        }
    }
}

impl DecimalLen {
    /// The number of decimal digits of `v`.
    #[inline]
    pub(crate) fn of(&mut self, v: u64) -> usize {
        if self.lo <= v && v < self.hi {
            return self.len;
        }
        self.refill(v)
    }

    /// [`of`](Self::of) for a `v` of another length: its length's range.
    #[cold]
    fn refill(&mut self, v: u64) -> usize {
        let len = u64_len(v);
        self.len = len;
        self.lo = if len == 1 {
            0
        } else {
            10u64.pow(len as u32 - 1)
        };
        // (20 digits: no power of ten above; such numbers take this path.)
        self.hi = 10u64.checked_pow(len as u32).unwrap_or(self.lo);
        len
    }
}

/// The two digits of each number below 100, in order.
static DIGIT_PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut n = 0;
    while n < 100 {
        t[2 * n] = b'0' + (n / 10) as u8;
        t[2 * n + 1] = b'0' + (n % 10) as u8;
        n += 1;
    }
    t
};

/// `v` in decimal, written at the end of `buf` (no allocation, unlike
/// `to_string`), by [`write_digits`].
pub(crate) fn decimal(v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let len = u64_len(v);
    write_digits(buf, 20 - len, len, v);
    &buf[20 - len..]
}

fn push_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => push_json_str(out, s),
        None => out.push_str("null"),
    }
}

fn push_str_or_empty(out: &mut String, s: Option<&str>) {
    push_json_str(out, s.unwrap_or(""));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_len_counts_every_number_in_any_order() {
        let mut rising = DecimalLen::default();
        let check = |d: &mut DecimalLen, v: u64| {
            assert_eq!(d.of(v), v.to_string().len(), "{v}");
        };
        let mut all = Vec::new();
        for v in 0..100_000 {
            check(&mut rising, v);
            all.push(v);
        }
        let mut p = 1u64;
        while let Some(q) = p.checked_mul(10) {
            for v in [p - 1, p, p + 1, q - 1] {
                check(&mut rising, v);
                all.push(v);
            }
            p = q;
        }
        for v in [u64::MAX - 1, u64::MAX, 0, 9, 10, u64::MAX, 99] {
            check(&mut rising, v);
            all.push(v);
        }
        // Falling and mixed orders: each length's range found again.
        let mut any = DecimalLen::default();
        for v in all.iter().rev().chain(all.iter().step_by(7)) {
            check(&mut any, *v);
        }
    }

    #[test]
    fn decimal_writes_every_number_as_to_string_does() {
        let mut buf = [0u8; 20];
        let mut check = |v: u64| assert_eq!(decimal(v, &mut buf), v.to_string().as_bytes(), "{v}");
        for v in 0..100_000 {
            check(v);
        }
        let mut p = 1u64;
        while let Some(q) = p.checked_mul(10) {
            for v in [p - 1, p, p + 1, q - 1] {
                check(v);
            }
            p = q;
        }
        check(u64::MAX);
        check(u64::MAX - 1);
    }

    #[test]
    fn fragments_are_valid_json() {
        let s = Sources::from_json(
            br#"[{"title":"A \"q\"","url":"https://a/","text":"t","year":1999},{"url":"u2"},{}]"#,
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        let v: serde_json::Value = serde_json::from_str(s.sources_json()).unwrap();
        assert_eq!(v[0]["index"], 1);
        assert_eq!(v[0]["title"], "A \"q\"");
        assert_eq!(v[2]["title"], serde_json::Value::Null);
        let c: serde_json::Value = serde_json::from_str(&s.citations_json(|_| true)).unwrap();
        assert_eq!(c[0]["document_year"], "1999");
        assert_eq!(c[1]["cited_text"], "");
        assert_eq!(c[1]["document_index"], 1);
        assert_eq!(c[2]["source_url"], "");
        let only2: serde_json::Value = serde_json::from_str(&s.citations_json(|n| n == 2)).unwrap();
        assert_eq!(only2.as_array().unwrap().len(), 1);
        assert_eq!(only2[0]["document_index"], 1);
        let mut a = Vec::new();
        s.push_annotation(&mut a, 1, 66, 69);
        let a: serde_json::Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(a["url_citation"]["start_index"], 66);
        assert_eq!(a["url_citation"]["url"], "https://a/");
    }

    #[test]
    fn annotation_len_is_exact() {
        let s =
            Sources::from_json(br#"[{"title":"A \"q\" \u00e9","url":"https://a/"},{}]"#).unwrap();
        for (n, start, end) in [(1, 0, 0), (2, 9, 10), (1, 99, 100), (2, 12_345, u64::MAX)] {
            let mut out = Vec::new();
            s.push_annotation(&mut out, n, start, end);
            assert_eq!(
                out.len(),
                s.annotation_len(n, start, end),
                "{n} {start} {end}"
            );
            let mut flat = Vec::new();
            s.push_annotation_as(AnnotationShape::Flat, &mut flat, n, start, end);
            let len = s.annotation_len_as(AnnotationShape::Flat, n, start, end);
            assert_eq!(flat.len(), len, "{n} {start} {end}");
            let v: serde_json::Value = serde_json::from_slice(&flat).unwrap();
            assert_eq!(v["start_index"], start);
            assert_eq!(v["type"], "url_citation");
        }
    }

    /// Every annotation, both shapes, is the object a JSON serializer
    /// writes for it, byte for byte: offsets of every length (the fixed
    /// 20-byte copies of the digits overwrite and cut their filler at every
    /// length), sources with and without title or URL, escapes and
    /// non-ASCII in them.
    #[test]
    fn annotations_are_what_a_serializer_writes() {
        let s = Sources::from_json(
            br#"[{"title":"A \"q\" \u00e9 \\ \n","url":"https://a/?x=1&y=\"2\""},{},{"url":"u"}]"#,
        )
        .unwrap();
        let mut offsets = vec![0, 1, 9, 10, 99, 100, 12_345, u64::MAX - 1, u64::MAX];
        let mut p = 1u64;
        while let Some(q) = p.checked_mul(10) {
            offsets.extend([p - 1, p, p + 1, q - 1]);
            p = q;
        }
        for (i, src) in s.list.iter().enumerate() {
            let number = i as u32 + 1;
            let url = src.url.as_deref().unwrap_or("");
            let title = src.title.as_deref().unwrap_or("");
            for &start in &offsets {
                for &end in &[start, start.saturating_add(3), u64::MAX, 7] {
                    let inner = serde_json::json!({
                        "start_index": start, "end_index": end, "url": url, "title": title,
                    });
                    let nested = serde_json::json!({"type": "url_citation", "url_citation": inner});
                    let flat = serde_json::json!({
                        "type": "url_citation", "start_index": start, "end_index": end,
                        "url": url, "title": title,
                    });
                    for (shape, want) in [
                        (AnnotationShape::Nested, nested),
                        (AnnotationShape::Flat, flat),
                    ] {
                        let mut out = b"[".to_vec();
                        s.push_annotation_as(shape, &mut out, number, start, end);
                        let got = &out[1..];
                        // As values (key order aside), then the order the
                        // shapes document up to the URL.
                        let v: serde_json::Value = serde_json::from_slice(got).unwrap();
                        assert_eq!(v, want, "{shape:?} {number} {start} {end}");
                        assert_eq!(got.len(), s.annotation_len_as(shape, number, start, end));
                        let text = std::str::from_utf8(got).unwrap();
                        let head = match shape {
                            AnnotationShape::Nested => {
                                "{\"type\":\"url_citation\",\"url_citation\":{\"start_index\":"
                            }
                            AnnotationShape::Flat => "{\"type\":\"url_citation\",\"start_index\":",
                        };
                        let mid = format!("{head}{start},\"end_index\":{end},\"url\":");
                        assert!(text.starts_with(&mid), "{text}");
                    }
                }
            }
        }
    }

    /// Many annotations through one writer (as a stream's last event
    /// writes them): offsets rising across every digit count, then
    /// falling and mixed, so each offset is written over a longer or
    /// shorter one left in the buffer; the array is what a serializer
    /// writes, and as long as it was sized.
    #[test]
    fn a_writer_writes_arrays_of_annotations() {
        let s = Sources::from_json(br#"[{"title":"T","url":"https://a/"},{"url":"u"}]"#).unwrap();
        let mut offsets: Vec<u64> = (0..300).chain([999, 1000, 99_999, 100_000]).collect();
        let mut p = 1u64;
        while let Some(q) = p.checked_mul(10) {
            offsets.extend([p - 1, p, q - 1]);
            p = q;
        }
        offsets.push(u64::MAX);
        let falling: Vec<u64> = offsets.iter().rev().copied().collect();
        let mixed: Vec<u64> = offsets
            .iter()
            .step_by(7)
            .chain(offsets.iter().step_by(3))
            .copied()
            .collect();
        for list in [offsets, falling, mixed] {
            for shape in [AnnotationShape::Nested, AnnotationShape::Flat] {
                let triples: Vec<(u32, u64, u64)> = list
                    .iter()
                    .enumerate()
                    .map(|(k, &v)| (k as u32 % 2 + 1, v, list[(k + 1) % list.len()]))
                    .collect();
                let mut out = b"[".to_vec();
                let mut w = AnnotationWriter::new(shape);
                let mut len = 2;
                for (k, &(n, start, end)) in triples.iter().enumerate() {
                    w.push(&s, &mut out, k > 0, n, start, end);
                    len += s.annotation_len_as(shape, n, start, end) + usize::from(k > 0);
                }
                out.push(b']');
                assert_eq!(out.len(), len);
                let got: serde_json::Value = serde_json::from_slice(&out).unwrap();
                let want: Vec<serde_json::Value> = triples
                    .iter()
                    .map(|&(n, start, end)| {
                        let (url, title) = if n == 1 {
                            ("https://a/", "T")
                        } else {
                            ("u", "")
                        };
                        let inner = serde_json::json!({
                            "start_index": start, "end_index": end, "url": url, "title": title,
                        });
                        match shape {
                            AnnotationShape::Nested => {
                                serde_json::json!({"type": "url_citation", "url_citation": inner})
                            }
                            AnnotationShape::Flat => {
                                let mut o = inner;
                                o["type"] = "url_citation".into();
                                o
                            }
                        }
                    })
                    .collect();
                assert_eq!(got, serde_json::Value::Array(want), "{shape:?}");
            }
        }
    }

    #[test]
    fn rejects_non_arrays() {
        assert!(Sources::from_json(b"{}").is_err());
        assert!(Sources::from_json(b"[1]").is_err());
        assert!(Sources::from_json(b"[{\"title\":3}]").is_err());
        assert!(Sources::from_json(b"nope").is_err());
    }
}
