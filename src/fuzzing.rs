//! The fuzz targets' bridge to internals (built only with `--cfg fuzzing`,
//! as `cargo fuzz` does; the pattern of quinn-proto and h2). Nothing here
//! is part of the public API.

use std::ops::Range;

/// The whole internal JSON module.
pub use crate::json::*;

/// What a chunk scan read of one choice: its index (`None` when not a
/// `u32`), the raw body of `delta.content` when it is a string, whether
/// `finish_reason` is a string.
pub type ChoiceRead = (Option<u32>, Option<Range<usize>>, bool);

/// What the chat rewriter's fast scan made of one chunk's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FastRead {
    /// Valid JSON, these choices (none finishing).
    Read(Vec<ChoiceRead>),
    /// The full scan decides (an escaped key, a finish).
    Defer,
    /// No choice, whatever follows its last (empty) `choices` array (not
    /// validated): the full scan reads none there, or rejects the text.
    NoChoices,
}

/// The chat rewriter's fast scan of one chunk's data.
///
/// # Errors
/// [`Invalid`] when `d` is not valid JSON.
pub fn fast_scan(d: &[u8]) -> Result<FastRead, Invalid> {
    use crate::rewrite::chat::scan::FastScan;
    let mut out = crate::rewrite::chat::scan::FastChoices::default();
    let mut holes = crate::json::Holes::default();
    Ok(
        match crate::rewrite::chat::scan::fast_scan(d, &mut out, &mut holes, None)? {
            FastScan::Defer => FastRead::Defer,
            FastScan::NoChoices => FastRead::NoChoices,
            FastScan::Read => FastRead::Read(
                out.iter()
                    .map(|c| (c.index, c.content.clone(), false))
                    .collect(),
            ),
        },
    )
}

/// The chat rewriter's full scan of one chunk's data.
///
/// # Errors
/// [`Invalid`] when `d` is not valid JSON (or not an object).
pub fn full_scan(d: &[u8]) -> Result<Vec<ChoiceRead>, Invalid> {
    let mut scan = crate::rewrite::chat::scan::ChunkScan::default();
    let mut out = crate::rewrite::chat::scan::ChoiceScans::default();
    crate::rewrite::chat::scan::scan_chunk(d, &mut scan, &mut out, None)?;
    Ok(out
        .iter()
        .map(|c| (c.index, c.content.clone(), c.finish.is_some()))
        .collect())
}

/// The chat rewriter's full scan of `d` twice, as text (`Err` when
/// invalid): with the scan prefix the fast scan learned from `learn` (as
/// the rewriter scans a finish chunk after earlier chunks), and fresh.
/// The two must be equal.
#[must_use]
pub fn full_scan_with_prefix(learn: &[u8], d: &[u8]) -> (String, String) {
    crate::rewrite::chat::scan::scan_with_prefix(learn, d)
}

/// Learns a chunk template from `learn` the way the chat rewriter does
/// (only from a chunk the fast scan reads with at most four choices, none
/// finishing, every index a `u32`) and matches each of `candidates` against
/// it in turn (the first match refines the template). Per candidate:
/// `None` when no template was learned or it does not match, else what the
/// template read of it (the learned choices: index, content, no finish).
///
/// `framed`: learn from and match `data: ` + the JSON + `\n\n` events
/// (when `learn` holds no CR or LF), each candidate event followed by
/// another event in the same piece, as the fused path sees them.
#[must_use]
pub fn template_match(
    learn: &[u8],
    candidates: &[&[u8]],
    framed: bool,
) -> Vec<Option<Vec<ChoiceRead>>> {
    use crate::rewrite::chat::template::{ChunkTemplate, Contents, MAX_CONTENTS};
    let mut out = crate::rewrite::chat::scan::FastChoices::default();
    let mut holes = crate::json::Holes::default();
    let none = vec![None; candidates.len()];
    if !matches!(
        crate::rewrite::chat::scan::fast_reads(learn, &mut out, &mut holes),
        Ok(true)
    ) || out.len() > MAX_CONTENTS
        || out.iter().any(|c| c.index.is_none())
    {
        return none;
    }
    let framed = framed && !learn.iter().any(|&b| b == b'\n' || b == b'\r');
    let frame = |d: &[u8]| [&b"data: "[..], d, b"\n\n"].concat();
    let sample = if framed { frame(learn) } else { learn.to_vec() };
    let at = if framed { 6 } else { 0 };
    let mut t = ChunkTemplate::default();
    let contents = out
        .iter()
        .filter_map(|c| Some((c.index?, c.content.clone()?)));
    t.learn(&sample, at, framed, contents, &holes);
    candidates
        .iter()
        .map(|&c| {
            let mut contents = Contents::default();
            let shift = if framed {
                let ev = frame(c);
                let piece = [&ev[..], b"data: [DONE]\n\n"].concat();
                assert!(t.walks_agree(&piece), "the template walks disagree");
                let end = t.matches_event(&piece, &mut contents)?;
                // A match is one `data:` line without CR or LF and a blank
                // line: the whole event unless `c` held a line end (then
                // the events the parser sees differ from `c`).
                let line = &piece[..end - 2];
                assert!(
                    !line.iter().any(|&b| b == b'\n' || b == b'\r')
                        && piece[end - 2..end] == *b"\n\n",
                    "a framed match is one data line and a blank line"
                );
                if c.iter().any(|&b| b == b'\n' || b == b'\r') {
                    return None;
                }
                assert_eq!(end, ev.len(), "a framed match ends with its event");
                6
            } else {
                assert!(t.walks_agree(c), "the template walks disagree");
                if !t.matches(c, &mut contents) {
                    return None;
                }
                0
            };
            let mut found = contents.iter();
            Some(
                out.iter()
                    .map(|l| {
                        let content = l.content.as_ref().and_then(|_| {
                            let (i, r) = found.next()?;
                            assert_eq!(Some(i), l.index);
                            Some(r.start - shift..r.end - shift)
                        });
                        (l.index, content, false)
                    })
                    .collect(),
            )
        })
        .collect()
}

/// A [`ChatStream`](crate::ChatStream) with the fused path (whole events
/// recognised in the input pieces before the SSE parser) switched off: its
/// output must be byte-identical to the default one's.
#[must_use]
pub fn chat_stream_unfused(
    sources: std::sync::Arc<crate::Sources>,
    opts: crate::RewriteOptions,
) -> crate::ChatStream {
    let mut rw = crate::ChatStream::new(sources, opts);
    rw.handler_mut().set_fused(false);
    rw
}

/// A [`ResponsesStream`](crate::ResponsesStream) with the fused path (text
/// deltas recognised by a learned template) switched off: its output must
/// be byte-identical to the default one's.
#[must_use]
pub fn responses_stream_unfused(
    sources: std::sync::Arc<crate::Sources>,
    opts: crate::RewriteOptions,
) -> crate::ResponsesStream {
    let mut rw = crate::ResponsesStream::new(sources, opts);
    rw.handler_mut().set_fused(false);
    rw
}

/// Cut points for a split-anywhere target: each fuzzer-chosen `u16` taken
/// modulo `len + 1`, sorted (duplicates give empty pieces, which every
/// consumer must accept).
#[must_use]
pub fn cuts(raw: &[u16], len: usize) -> Vec<usize> {
    let mut cuts: Vec<usize> = raw.iter().map(|&c| usize::from(c) % (len + 1)).collect();
    cuts.sort_unstable();
    cuts
}
