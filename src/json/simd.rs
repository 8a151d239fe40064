//! SSE2 scanning of JSON string bodies, sixteen bytes per step.
//!
//! [`special_from`] finds the first byte at or after an index that is
//! `"`, `\` or a control character (below 0x20), the bytes the SWAR word
//! test in [`super::skip`] flags, or the end of the input: exact, so the
//! string scanner's loop there (escapes, the closing quote, errors) runs
//! once per special byte and never on plain bytes. Every result of
//! [`scan_string`](super::scan_string) (end offset, escape flag, error)
//! is the same byte for byte as the SWAR path's: the tests in `skip.rs`
//! check both builds against a bytewise reference, with each special byte
//! at each position and the input ending at or near the string's end.
//!
//! # Why a dependency
//!
//! `std::arch`'s intrinsics are `unsafe fn`s, and the crate is
//! `#![forbid(unsafe_code)]`. `safe_arch` (0.7: 1.x needs Rust 1.89, our
//! MSRV is 1.85) wraps each intrinsic in a safe function gated on the
//! target feature at compile time, so this module has no `unsafe` either.
//! It is an x86_64-only dependency, used here and in `cite`'s own SIMD
//! module (the tracker's scan of paragraph text) only.
//!
//! # When it is compiled
//!
//! Only for `x86_64` with `target_feature = "sse2"` (x86_64's baseline, so
//! always, selected at compile time: no run-time detection), and not with
//! `--cfg citestream_disable_simd`. Every other build uses the portable
//! SWAR loop in [`super::skip`] alone.

use safe_arch::{
    bitor_m128i, bitxor_m128i, cmp_eq_mask_i8_m128i, load_unaligned_m128i, min_u8_m128i,
    move_mask_i8_m128i, set_splat_i8_m128i,
};

/// Bit `k` set when `block[k]` is `"`, `\` or below 0x20.
///
/// Two byte tests instead of three, as in the SWAR word test: `"` (0x22)
/// XOR 0x02 is 0x20 while the control characters stay below 0x20, so one
/// unsigned "at most 0x20" test (`min(t, 0x20) == t`) on the XORed bytes
/// finds both; an equality test finds `\`.
#[inline(always)]
pub(super) fn special_mask(block: &[u8; 16]) -> u32 {
    let v = load_unaligned_m128i(block);
    let t = bitxor_m128i(v, set_splat_i8_m128i(0x02));
    let low = cmp_eq_mask_i8_m128i(min_u8_m128i(t, set_splat_i8_m128i(0x20)), t);
    let backslash = cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b'\\' as i8));
    // The mask has 16 bits: the sign bit of each byte.
    move_mask_i8_m128i(bitor_m128i(low, backslash)) as u32
}

/// Index of the first byte at or after `i` that is `"`, `\` or below
/// 0x20, or `b.len()` when there is none (`i` itself when `i` is past
/// the end); `None` when `b` is shorter than sixteen bytes, which the
/// caller scans itself ([`first_from`](crate::simd::first_from)'s walk).
#[inline(always)]
pub(super) fn special_from(b: &[u8], i: usize) -> Option<usize> {
    crate::simd::first_from(b, i, special_mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn special(c: u8) -> bool {
        c == b'"' || c == b'\\' || c < 0x20
    }

    #[test]
    fn special_mask_flags_exactly_the_special_bytes() {
        for c in 0..=255u8 {
            for at in 0..16 {
                for fill in [b'a', 0x21, 0x23, 0x5B, 0x5D, 0x80, 0xFF, b' '] {
                    let mut w = [fill; 16];
                    w[at] = c;
                    let want: u32 = (0..16).filter(|&k| special(w[k])).map(|k| 1 << k).sum();
                    assert_eq!(special_mask(&w), want, "byte {c:#x} at {at} in {fill:#x}");
                }
            }
        }
    }

    #[test]
    fn special_from_finds_the_first_special_byte() {
        for len in 0..70usize {
            for at in 0..=len {
                for tail in [
                    None,
                    Some(len.saturating_sub(1)),
                    Some(len.saturating_sub(9)),
                ] {
                    let mut b = vec![b'a'; len];
                    if at < len {
                        b[at] = b'"';
                    }
                    if let Some(t) = tail.filter(|&t| t < len) {
                        b[t] = b'\\';
                    }
                    for i in 0..=len + 1 {
                        let want = (len >= 16)
                            .then(|| (i..len).find(|&k| special(b[k])).unwrap_or(len.max(i)));
                        assert_eq!(special_from(&b, i), want, "len {len} at {at} i {i}");
                    }
                }
            }
        }
    }
}
