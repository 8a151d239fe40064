//! All JSON byte work: validating, walking, reading and splicing JSON
//! text in place, without building a DOM and without re-serializing.
//!
//! The rewriters read a few members of each chunk and add a few; the
//! request side finds and cuts members of a request body. Both work on
//! byte spans of the original text, so every byte they do not own stays
//! exactly as it was.
//!
//! # Which function for what
//!
//! | task | use |
//! |---|---|
//! | skip whitespace | [`skip_ws`] |
//! | validate and skip a whole value / a string / a number | [`scan_value`] / [`scan_string`] / [`scan_number`] |
//! | step through an object's members, reading some in place | [`ObjectWalker`] (and [`ArrayWalker`] for arrays) |
//! | collect an object's members / an array's elements, look a key up, in text already validated (request bodies: any depth) | [`members`], [`elements`], [`find`], [`skip_valid`] |
//! | scan a text whose shape you expect, token by token (hot path) | [`Cursor`] |
//! | compare a key with a name | [`Member::key_is`] (decodes escaped keys) |
//! | decode a string's raw body / a string token | [`decode_str`] / [`decode_token`] |
//! | write a string literal | [`push_json_str`] |
//! | read a choice index | [`parse_u32`] |
//! | insert, replace, remove members | [`Splice`], [`insert_point`], [`removal_span`] |
//!
//! # Contract
//!
//! Everything that skips validates what it skips (except the lookups in
//! already-validated text, which say so): the JSON grammar,
//! escapes, no raw control characters in strings, nesting at most
//! [`MAX_DEPTH`] deep. Invalid JSON is reported as [`Invalid`] (the
//! rewriters then forward the input unchanged); nothing panics, recurses
//! without bound or allocates on the skip paths.
//!
//! Two deliberate differences from `serde_json`, both so that text the
//! citation rules define is understood: invalid UTF-8 inside strings and
//! lone surrogate escapes are accepted (they decode to U+FFFD, and count as
//! one U+FFFD in offsets), and duplicate keys are not rejected.
//!
//! String bodies are scanned sixteen bytes per step with SSE2 on x86_64
//! (the `simd` child module, through `safe_arch`), a SWAR word per step
//! elsewhere and with `--cfg citestream_disable_simd`; both give the same
//! results.
//!
//! This module is internal; the fuzz targets reach it through
//! `citestream::fuzzing` (built with `--cfg fuzzing`).

mod cursor;
mod lookup;
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "sse2",
    not(citestream_disable_simd)
))]
mod simd;
mod skip;
mod splice;
mod string;
mod walker;

pub use cursor::{Cursor, Holes, MAX_HOLES};
pub use lookup::{elements, find, members, skip_valid};
#[cfg(fuzzing)]
pub use skip::naive_string;
#[cfg(all(
    target_arch = "x86_64",
    target_feature = "sse2",
    not(citestream_disable_simd)
))]
pub use skip::scan_string_rest;
pub use skip::{
    digits_end, leading_digits, scan_number, scan_string, scan_value, short_string_end, skip_ws,
};
pub use splice::{Splice, insert_point, removal_span};
pub(crate) use string::simple_escape;
pub use string::{decode_str, decode_token, parse_u32, push_json_str};
pub use walker::{ArrayWalker, Field, Member, ObjectWalker};

/// Nesting deeper than this is treated as invalid (serde_json's default
/// recursion limit is 128).
pub const MAX_DEPTH: u32 = 120;

/// The input is not valid JSON (or is nested deeper than [`MAX_DEPTH`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Invalid;

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("invalid JSON")
    }
}

impl std::error::Error for Invalid {}
