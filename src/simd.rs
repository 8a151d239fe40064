//! The sixteen-bytes-a-step walk the SIMD scanners share: the first byte
//! at or after an index that a block test flags.
//!
//! Each scanner brings its own test, a function from sixteen bytes to a
//! 16-bit mask (bit `k` set when byte `k` is one it stops at):
//! [`json`](crate::json)'s string scan stops at `"`, `\` and control
//! characters, [`cite`](crate::cite)'s fast path at the bytes that may
//! start a marker, an escape, a line or a code span. [`first_from`] is
//! exact for any such test: its tests use a test made of a byte set and
//! check every start index against a bytewise search.
//!
//! Compiled only for x86_64 with SSE2 and without `--cfg
//! citestream_disable_simd`, as the tests it serves are; no `unsafe`.

/// Index of the first byte at or after `i` that `mask` flags, or
/// `b.len()` when there is none (`i` when `i` is at or past the end).
/// `None` when `b` is shorter than sixteen bytes: the caller scans it
/// itself. The last step tests the last sixteen bytes of `b` and ignores
/// the flags of those before `i`.
#[inline(always)]
pub(crate) fn first_from(b: &[u8], mut i: usize, mask: impl Fn(&[u8; 16]) -> u32) -> Option<usize> {
    let last = b.len().checked_sub(16)?;
    while i <= last {
        let m = mask(b[i..].first_chunk::<16>()?);
        if m != 0 {
            return Some(i + m.trailing_zeros() as usize);
        }
        i += 16;
    }
    if i >= b.len() {
        return Some(i);
    }
    let m = mask(b.last_chunk::<16>()?) >> (i - last);
    if m != 0 {
        return Some(i + m.trailing_zeros() as usize);
    }
    Some(b.len())
}

#[cfg(test)]
mod tests {
    use super::first_from;

    /// A block test flagging the bytes `set` holds.
    fn mask_of(set: &'static [u8]) -> impl Fn(&[u8; 16]) -> u32 {
        move |block| {
            (0..16)
                .filter(|&k| set.contains(&block[k]))
                .map(|k| 1 << k)
                .sum()
        }
    }

    #[test]
    fn first_from_finds_the_first_flagged_byte_from_every_index() {
        let set: &[u8] = b"x!";
        for len in 0..70usize {
            for at in 0..=len {
                let mut b = vec![b'a'; len];
                if at < len {
                    b[at] = b'x';
                }
                if len > 3 && len - 3 != at {
                    b[len - 3] = b'!';
                }
                for i in 0..=len + 1 {
                    let want = (len >= 16).then(|| {
                        (i..len)
                            .find(|&k| set.contains(&b[k]))
                            .unwrap_or(len.max(i))
                    });
                    assert_eq!(
                        first_from(&b, i, mask_of(set)),
                        want,
                        "len {len} at {at} i {i}"
                    );
                }
            }
        }
    }
}
