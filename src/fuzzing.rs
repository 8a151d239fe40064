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

/// The chat rewriter's fast scan of one chunk's data: `Ok(None)` when it
/// defers to the full scan (an escaped key).
///
/// # Errors
/// [`Invalid`] when `d` is not valid JSON.
pub fn fast_scan(d: &[u8]) -> Result<Option<Vec<ChoiceRead>>, Invalid> {
    let mut out = Vec::new();
    let mut holes = Vec::new();
    if !crate::rewrite::chat::scan::fast_scan(d, &mut out, &mut holes)? {
        return Ok(None);
    }
    Ok(Some(
        out.into_iter()
            .map(|c| (c.index, c.content, c.finish))
            .collect(),
    ))
}

/// The chat rewriter's full scan of one chunk's data.
///
/// # Errors
/// [`Invalid`] when `d` is not valid JSON (or not an object).
pub fn full_scan(d: &[u8]) -> Result<Vec<ChoiceRead>, Invalid> {
    let mut scan = crate::rewrite::chat::scan::ChunkScan::default();
    let mut out = Vec::new();
    crate::rewrite::chat::scan::scan_chunk(d, &mut scan, &mut out)?;
    Ok(out
        .into_iter()
        .map(|c| (c.index, c.content, c.finish.is_some()))
        .collect())
}

/// Learns a chunk template from `learn` the way the chat rewriter does
/// (only from a chunk the fast scan reads as one choice without a finish)
/// and matches `candidate` against it: `None` when no template was learned
/// or `candidate` does not match, else what the template read of
/// `candidate` (one choice: its index, content, no finish).
#[must_use]
pub fn template_match(learn: &[u8], candidate: &[u8]) -> Option<ChoiceRead> {
    let mut out = Vec::new();
    let mut holes = Vec::new();
    if !crate::rewrite::chat::scan::fast_scan(learn, &mut out, &mut holes).ok()? {
        return None;
    }
    let [c] = &out[..] else { return None };
    let index = c.index?;
    if c.finish {
        return None;
    }
    let mut t = crate::rewrite::chat::template::ChunkTemplate::default();
    t.learn(learn, index, c.content.as_ref(), &holes);
    let (index, content) = t.matches(candidate)?;
    Some((Some(index), content, false))
}
