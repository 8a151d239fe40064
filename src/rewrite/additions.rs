//! The members the rewriters add, shared by both endpoints: the top-level
//! `sources` / `citations` splice, the `annotations` array, and writing an
//! event back with new data (spliced into its original framing, or
//! re-framed).
//!
//! Contract: an object gets each of our members exactly once. An upstream
//! member of the same name is replaced in place (the first) or removed
//! (any further ones), never duplicated; every other byte of the object
//! stays where it was.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;

use crate::cite::Marker;
use crate::json::{self, Field, Invalid, Member, Splice};
use crate::sources::{AnnotationShape, AnnotationWriter, DecimalLen, Sources};
use crate::sse::{self, Event, FrameRef};

use super::RewriteOptions;

/// What writing an event back reads of it: an owned [`Event`] or the
/// parser's view of one ([`FrameRef`], an event frame), so that a handler
/// rewrites a lent frame without making it an owned one (no reference
/// counts taken and dropped).
pub(crate) trait EventParts {
    /// The event's raw bytes, framing included.
    fn raw(&self) -> &[u8];
    /// The `data` field's value.
    fn data(&self) -> &[u8];
    /// Where `data` lies in `raw`, when it is one line there.
    fn data_range(&self) -> Option<Range<usize>>;
    /// The `event` field, if any.
    fn event_field(&self) -> Option<&[u8]>;
    /// The `id` field, if any.
    fn id_field(&self) -> Option<&[u8]>;
    /// The `retry` field, if any.
    fn retry(&self) -> Option<u64>;
}

/// [`EventParts`] for a type whose inherent methods of the same names
/// read the event (inherent methods come first in `Self::` paths).
macro_rules! event_parts {
    ($t:ty) => {
        impl EventParts for $t {
            fn raw(&self) -> &[u8] {
                Self::raw(self)
            }
            fn data(&self) -> &[u8] {
                Self::data(self)
            }
            fn data_range(&self) -> Option<Range<usize>> {
                Self::data_range(self)
            }
            fn event_field(&self) -> Option<&[u8]> {
                Self::event_field(self)
            }
            fn id_field(&self) -> Option<&[u8]> {
                Self::id_field(self)
            }
            fn retry(&self) -> Option<u64> {
                Self::retry(self)
            }
        }
    };
}

event_parts!(Event);
event_parts!(FrameRef<'_>);

/// Top-level members we may replace (`sources`, `citations`), all
/// occurrences, so that no object ever carries a key twice.
#[derive(Debug, Default)]
pub(crate) struct Existing {
    pub(crate) sources: Vec<Field>,
    pub(crate) citations: Vec<Field>,
}

impl Existing {
    /// Whether the object has neither member.
    pub(crate) fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.citations.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.sources.clear();
        self.citations.clear();
    }

    /// Records `m` if it is one of ours; returns whether it was.
    pub(crate) fn note(&mut self, b: &[u8], m: &Member, end: usize) -> bool {
        if m.key_is(b, "sources") {
            self.sources.push(Field {
                member: m.clone(),
                end,
            });
            true
        } else if m.key_is(b, "citations") {
            self.citations.push(Field {
                member: m.clone(),
                end,
            });
            true
        } else {
            false
        }
    }
}

/// The `citations` value when the dialect has it (only the cited numbers
/// with `only_cited`; `cited` is indexed by number).
fn citations_value(sources: &Sources, opts: &RewriteOptions, cited: &[bool]) -> Option<String> {
    let cited = |n: u32| cited.get(n as usize).copied().unwrap_or(false);
    opts.dialect.citations.then(|| {
        if opts.only_cited {
            sources.citations_json(cited)
        } else {
            sources.citations_json(|_| true)
        }
    })
}

/// The new members `,"sources":…,"citations":…` (each when given; no
/// leading comma when `comma` is false): their length, and writing them.
struct NewMembers<'v> {
    comma: bool,
    sources: Option<&'v [u8]>,
    citations: Option<&'v [u8]>,
}

impl NewMembers<'_> {
    fn members(&self) -> impl Iterator<Item = (&'static str, &[u8])> {
        let sources = self.sources.map(|v| ("sources", v));
        sources
            .into_iter()
            .chain(self.citations.map(|v| ("citations", v)))
    }

    fn len(&self) -> usize {
        let mut comma = self.comma;
        self.members()
            .map(|(name, v)| {
                let n = usize::from(comma) + name.len() + 3 + v.len();
                comma = true;
                n
            })
            .sum()
    }

    fn push(&self, out: &mut Vec<u8>) {
        let mut comma = self.comma;
        for (name, value) in self.members() {
            if comma {
                out.push(b',');
            }
            comma = true;
            out.push(b'"');
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b"\":");
            out.extend_from_slice(value);
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
    let citations = citations_value(sources, opts, cited);
    // Whether an upstream member was there (then replaced by `value`).
    let replaced = |value: &[u8], found: &[Field], splice: &mut Splice| {
        let Some((first, rest)) = found.split_first() else {
            return false;
        };
        splice.replace(first.value(), value.to_vec());
        for f in rest {
            splice.replace(json::removal_span(b, &f.member, f.end), Vec::new());
        }
        true
    };
    let sources_json = sources.sources_json().as_bytes();
    let with_sources = opts.dialect.sources && !replaced(sources_json, &existing.sources, splice);
    let citations = citations.as_ref().map(String::as_bytes);
    let with_citations = citations.is_some_and(|c| !replaced(c, &existing.citations, splice));
    let new = NewMembers {
        comma: has_members,
        sources: with_sources.then_some(sources_json),
        citations: citations.filter(|_| with_citations),
    };
    if new.sources.is_some() || new.citations.is_some() {
        // Sized once.
        let mut tail = Vec::with_capacity(new.len());
        new.push(&mut tail);
        let at = json::insert_point(b, close);
        splice.replace(at..at, tail);
    }
}

/// The event `e` whose data is one line in its raw bytes (`data_range`
/// is `Some`) and an object without upstream `sources` / `citations`
/// (closing brace at `close`), with the top-level members inserted:
/// [`add_top_level`] + [`splice_event`] written straight into one buffer
/// of the exact size (no edit list, no intermediate copy).
pub(crate) fn event_with_top_level(
    e: &impl EventParts,
    (close, has_members): (usize, bool),
    sources: &Sources,
    opts: &RewriteOptions,
    cited: &[bool],
) -> Option<Bytes> {
    let r = e.data_range()?;
    let citations = citations_value(sources, opts, cited);
    let new = NewMembers {
        comma: has_members,
        sources: opts
            .dialect
            .sources
            .then(|| sources.sources_json().as_bytes()),
        citations: citations.as_ref().map(String::as_bytes),
    };
    let raw = e.raw();
    let at = r.start + json::insert_point(e.data(), close);
    let mut out = Vec::with_capacity(raw.len() + new.len());
    out.extend_from_slice(&raw[..at]);
    new.push(&mut out);
    out.extend_from_slice(&raw[at..]);
    Some(Bytes::from(out))
}

/// The number of bytes [`push_annotations`] appends for `markers`.
pub(crate) fn annotations_len(
    shape: AnnotationShape,
    sources: &Sources,
    markers: &[Marker],
) -> usize {
    let mut digits = DecimalLen::default();
    let items: usize = markers
        .iter()
        .map(|m| sources.annotation_len_in(shape, m.number, m.start, m.end, &mut digits))
        .sum();
    2 + items + markers.len().saturating_sub(1)
}

/// Appends the `annotations` array for `markers` to `out`.
pub(crate) fn push_annotations(
    shape: AnnotationShape,
    out: &mut Vec<u8>,
    sources: &Sources,
    markers: &[Marker],
) {
    out.push(b'[');
    let mut w = AnnotationWriter::new(shape);
    for (k, m) in markers.iter().enumerate() {
        w.push(sources, out, k > 0, m.number, m.start, m.end);
    }
    out.push(b']');
}

/// Splices our `annotations` (`ours`, a whole JSON array) into an object
/// of `b` whose closing brace is at `close.0` (`close.1`: it has members):
/// appended inside the upstream `annotations` array (`upstream`; nothing
/// when `ours` is empty), replacing any other upstream value, or as a new
/// member before the closing brace.
pub(crate) fn splice_annotations(
    b: &[u8],
    sp: &mut Splice,
    ours: &[u8],
    upstream: Option<&Field>,
    close: (usize, bool),
) {
    match upstream {
        Some(f) if b[f.member.value_start] == b'[' => {
            let inner = &ours[1..ours.len() - 1];
            if !inner.is_empty() {
                let at = json::insert_point(b, f.end - 1);
                let empty = at == f.member.value_start + 1;
                let mut ins = Vec::with_capacity(inner.len() + 1);
                if !empty {
                    ins.push(b',');
                }
                ins.extend_from_slice(inner);
                sp.replace(at..at, ins);
            }
        }
        Some(f) => sp.replace(f.value(), ours.to_vec()),
        None => {
            let at = json::insert_point(b, close.0);
            let mut ins = Vec::with_capacity(ours.len() + 16);
            if close.1 {
                ins.push(b',');
            }
            ins.extend_from_slice(b"\"annotations\":");
            ins.extend_from_slice(ours);
            sp.replace(at..at, ins);
        }
    }
}

/// The event with `sp` applied to its data: spliced into the original
/// bytes when the data was one line there (framing kept exactly; one
/// buffer of the exact size, no intermediate copy of the data), else
/// re-framed.
pub(crate) fn splice_event(e: &impl EventParts, sp: &mut Splice) -> Bytes {
    let d = e.data();
    match e.data_range() {
        Some(r) => {
            let raw = e.raw();
            let mut out = Vec::with_capacity(raw.len() - r.len() + sp.len_after(d.len()));
            out.extend_from_slice(&raw[..r.start]);
            sp.apply(d, &mut out);
            out.extend_from_slice(&raw[r.end..]);
            Bytes::from(out)
        }
        None => {
            let mut data = Vec::with_capacity(sp.len_after(d.len()));
            sp.apply(d, &mut data);
            reframe(e, &data)
        }
    }
}

/// The event written fresh with canonical framing, keeping its `event`,
/// `id` and `retry` fields.
pub(crate) fn reframe(e: &impl EventParts, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(data.len() + 32);
    sse::write_event(&mut out, e.event_field(), e.id_field(), e.retry(), data);
    Bytes::from(out)
}

/// Which source numbers `markers` cite, indexed by number (index 0 unused),
/// for `only_cited`.
pub(crate) fn cited_set<'m>(
    sources: &Sources,
    markers: impl IntoIterator<Item = &'m Marker>,
) -> Vec<bool> {
    let mut cited = vec![false; sources.len() + 1];
    for m in markers {
        if let Some(x) = cited.get_mut(m.number as usize) {
            *x = true;
        }
    }
    cited
}

/// A whole body through `rewrite` (which returns `Ok(None)` for a body it
/// leaves alone): borrowed unless changed; unchanged when there are no
/// sources or the body is not valid JSON.
pub(crate) fn whole_body<'a>(
    body: &'a [u8],
    sources: &Sources,
    rewrite: impl FnOnce(&[u8]) -> Result<Option<Vec<u8>>, Invalid>,
) -> Cow<'a, [u8]> {
    if sources.is_empty() {
        return Cow::Borrowed(body);
    }
    match rewrite(body) {
        Ok(Some(v)) => Cow::Owned(v),
        Ok(None) | Err(Invalid) => Cow::Borrowed(body),
    }
}

/// Applies `sp` and the top-level additions to the whole body `b` whose
/// top-level object closes at `top.0` (`top.1`: it has members).
pub(crate) fn finish_body(
    b: &[u8],
    top: (usize, bool),
    existing: &Existing,
    (sources, opts): (&Sources, &RewriteOptions),
    cited: &[bool],
    mut sp: Splice,
) -> Vec<u8> {
    add_top_level(b, top, existing, sources, opts, cited, &mut sp);
    let mut out = Vec::with_capacity(b.len() + 1024);
    sp.apply(b, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::sources::Dialect;
    use crate::sse::{Frame, Parser};

    fn event(raw: &str) -> Event {
        let mut p = Parser::new();
        p.feed(Bytes::copy_from_slice(raw.as_bytes()));
        match p.next_frame() {
            Some(Frame::Event(e)) => e,
            other => panic!("{other:?}"),
        }
    }

    /// The direct write of a finish chunk's additions is the general
    /// splice, byte for byte, in every dialect, with and without members
    /// before the brace, whitespace and CRLF framing.
    #[test]
    fn event_with_top_level_is_the_splice() {
        let sources = Sources::from_json(
            br#"[{"title":"A","url":"https://a/"},{"title":"B","url":"https://b/"}]"#,
        )
        .expect("sources");
        for raw in [
            "data: {\"id\":\"c\",\"choices\":[]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[] \t }\r\n\r\n",
            "data:{}\n\n",
            "event: message\nid: 7\ndata: { }\n\n",
        ] {
            let e = event(raw);
            let d = e.data();
            let close = d.iter().rposition(|&b| b == b'}').expect("brace");
            let has_members = d.contains(&b':');
            for dialect in [Dialect::SOURCES, Dialect::CITATIONS, Dialect::BOTH] {
                for only_cited in [false, true] {
                    let mut opts = RewriteOptions::new();
                    opts.dialect(dialect).only_cited(only_cited);
                    let cited = [false, false, true];
                    let mut sp = Splice::new();
                    let existing = Existing::default();
                    let at = (close, has_members);
                    add_top_level(d, at, &existing, &sources, &opts, &cited, &mut sp);
                    let want = splice_event(&e, &mut sp);
                    let got = event_with_top_level(&e, at, &sources, &opts, &cited);
                    assert_eq!(got, Some(want), "{raw:?} {dialect:?} {only_cited}");
                }
            }
        }
    }
}
