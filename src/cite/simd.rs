//! SSE2 scanning of paragraph text for the bytes that stop the tracker's
//! fast path, sixteen bytes per step.
//!
//! [`stop_from`] finds the first byte at or after an index that
//! [`BYTE_CLASS`](super::scanner::BYTE_CLASS) marks — `\`, LF, `[`, a
//! backtick or any byte `>= 0x80` — or the end of the input: exact, so
//! the fast path's per-character code runs once per such byte and never on
//! the plain ASCII between them. `tests::stop_from_finds_the_first_stop_byte`
//! checks every byte value at every position against the table, and the
//! tracker's own tests (fast path against general path, split everywhere)
//! run in both builds.
//!
//! [`content_from`] serves the content walk of the chunk templates
//! ([`content_token`](super::content_token)): one pass over a JSON string
//! body that stops at whatever ends the string's plain run (`"`, `\`, a
//! control character) *or* would stop the fast path, so that a body which
//! reaches its closing quote first is known plain without a second scan.
//!
//! Compiled only where [`crate::json`]'s SIMD module is (x86_64 with SSE2,
//! not `--cfg citestream_disable_simd`), through the same `safe_arch`
//! wrappers, so no `unsafe`; every other build reads the table a byte per
//! step.

use safe_arch::{
    bitor_m128i, bitxor_m128i, cmp_eq_mask_i8_m128i, cmp_gt_mask_i8_m128i, load_unaligned_m128i,
    move_mask_i8_m128i, set_splat_i8_m128i,
};

/// Bit `k` set when `block[k]` is `\`, LF, `[`, a backtick or `>= 0x80`.
#[inline(always)]
fn stop_mask(block: &[u8; 16]) -> u32 {
    let v = load_unaligned_m128i(block);
    let eq = |c: u8| cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(c as i8));
    let marked = bitor_m128i(
        bitor_m128i(eq(b'\\'), eq(b'\n')),
        bitor_m128i(eq(b'['), eq(b'`')),
    );
    // The sign bit of each byte: of the marked ones, and of `v` itself for
    // the bytes >= 0x80.
    move_mask_i8_m128i(bitor_m128i(marked, v)) as u32
}

/// Index of the first byte at or after `i` that stops the fast path, or
/// `b.len()` when there is none (`i` when `i` is at or past the end);
/// `None` when `b` is shorter than sixteen bytes, which the caller scans
/// itself ([`first_from`](crate::simd::first_from)'s walk).
#[inline(always)]
pub(super) fn stop_from(b: &[u8], i: usize) -> Option<usize> {
    crate::simd::first_from(b, i, stop_mask)
}

/// Bit `k` set when `block[k]` is a byte [`stop_mask`] flags or one that
/// ends a JSON string's plain run: `"`, `\`, `[`, a backtick, `< 0x20` or
/// `>= 0x80`.
#[inline(always)]
pub(super) fn content_mask(block: &[u8; 16]) -> u32 {
    let v = load_unaligned_m128i(block);
    let eq = |c: u8| cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(c as i8));
    // With `"` (0x22) moved to 0x20 and the bytes below 0x20 kept below
    // it, one signed compare takes `"`, the control bytes and (negative
    // as `i8`) every byte `>= 0x80`.
    let t = bitxor_m128i(v, set_splat_i8_m128i(0x02));
    let low = cmp_gt_mask_i8_m128i(set_splat_i8_m128i(0x21), t);
    let marked = bitor_m128i(bitor_m128i(eq(b'\\'), eq(b'[')), bitor_m128i(eq(b'`'), low));
    move_mask_i8_m128i(marked) as u32
}

/// Index of the first byte at or after `i` that [`content_mask`] flags,
/// or `b.len()`; `None` when `b` is shorter than sixteen bytes (as
/// [`stop_from`]).
#[inline(always)]
pub(super) fn content_from(b: &[u8], i: usize) -> Option<usize> {
    crate::simd::first_from(b, i, content_mask)
}

#[cfg(test)]
mod tests {
    use super::super::scanner::BYTE_CLASS;
    use super::*;

    fn stops(c: u8) -> bool {
        BYTE_CLASS[usize::from(c)] != 0
    }

    #[test]
    fn stop_mask_flags_exactly_the_table_bytes() {
        for c in 0..=255u8 {
            for at in 0..16 {
                for fill in [b'a', b' ', b'Z', b']', b'_', b'~', 0x7F, 0x80, 0xFF] {
                    let mut w = [fill; 16];
                    w[at] = c;
                    let want: u32 = (0..16).filter(|&k| stops(w[k])).map(|k| 1 << k).sum();
                    assert_eq!(stop_mask(&w), want, "byte {c:#x} at {at} in {fill:#x}");
                }
            }
        }
    }

    /// The bytes [`content_mask`] flags: the table's and the JSON
    /// string's specials.
    fn ends_content(c: u8) -> bool {
        stops(c) || c == b'"' || c < 0x20
    }

    #[test]
    fn content_mask_flags_exactly_the_stop_and_string_bytes() {
        for c in 0..=255u8 {
            for at in 0..16 {
                for fill in [
                    b'a', b' ', b'!', b'#', b'Z', b']', b'_', b'~', 0x7F, 0x80, 0xFF,
                ] {
                    let mut w = [fill; 16];
                    w[at] = c;
                    let want: u32 = (0..16)
                        .filter(|&k| ends_content(w[k]))
                        .map(|k| 1 << k)
                        .sum();
                    assert_eq!(content_mask(&w), want, "byte {c:#x} at {at} in {fill:#x}");
                }
            }
        }
    }

    #[test]
    fn stop_from_finds_the_first_stop_byte() {
        for len in 0..70usize {
            for at in 0..=len {
                for (first, second) in [(b'[', None), (0xC3, Some(b'`')), (b'\n', Some(b'\\'))] {
                    let mut b = vec![b'a'; len];
                    if at < len {
                        b[at] = first;
                    }
                    if let Some(c) = second {
                        let t = len.saturating_sub(3);
                        if t < len && t != at {
                            b[t] = c;
                        }
                    }
                    for i in 0..=len + 1 {
                        let want = (len >= 16)
                            .then(|| (i..len).find(|&k| stops(b[k])).unwrap_or(len.max(i)));
                        assert_eq!(stop_from(&b, i), want, "len {len} at {at} i {i}");
                    }
                }
            }
        }
    }
}
