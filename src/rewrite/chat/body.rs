//! The whole-body rewriter for `/v1/chat/completions`
//! (`chat.completion` objects): `annotations` on each
//! `choices[i].message` (ours appended after any upstream ones; an empty
//! array when there are none), top-level `sources` and/or `citations`;
//! every other byte stays where it was.

use std::borrow::Cow;

use crate::cite::MarkerTracker;
use crate::json::{self, ArrayWalker, Field, Invalid, ObjectWalker, Splice};
use crate::rewrite::RewriteOptions;
use crate::rewrite::additions::{Existing, add_top_level, push_annotations};
use crate::sources::Sources;

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
            let mut annotations: Option<Field> = None;
            // With duplicate keys the last one counts (as in serde_json and
            // the streaming path).
            let mut content = None;
            while let Some(mm) = mw.next_member()? {
                let end = mw.skip_value()?;
                if mm.key_is(b, "content") {
                    content = (b[mm.value_start] == b'"').then(|| mm.value_start + 1..end - 1);
                } else if mm.key_is(b, "annotations") {
                    annotations = Some(Field { member: mm, end });
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
