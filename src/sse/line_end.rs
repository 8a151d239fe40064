//! The search for the end of a line (the first CR or LF): the one place
//! the parser looks at bytes in bulk.

#[cfg(target_arch = "x86_64")]
use std::sync::LazyLock;

/// memchr's AVX2 searcher for CR and LF, when the CPU has it: held once,
/// so each search skips memchr's dispatch (three calls deep).
#[cfg(target_arch = "x86_64")]
static AVX2: LazyLock<Option<memchr::arch::x86_64::avx2::memchr::Two>> =
    LazyLock::new(|| memchr::arch::x86_64::avx2::memchr::Two::new(b'\n', b'\r'));

/// Index of the first CR or LF: a plain loop for short inputs (where a
/// call costs more than it saves), else memchr's AVX2 searcher when the CPU
/// has it, else `memchr2`.
#[inline]
pub(super) fn find_line_end(b: &[u8]) -> Option<usize> {
    if b.len() <= 16 {
        return b.iter().position(|&c| c == b'\n' || c == b'\r');
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(two) = &*AVX2 {
        return two.find(b);
    }
    memchr::memchr2(b'\n', b'\r', b)
}

#[cfg(test)]
mod tests {
    use super::find_line_end;

    /// The same index as a byte loop, for every length around the vector
    /// sizes and every position of the first CR or LF (bytes below 0x0E
    /// that are not line ends around it).
    #[test]
    fn finds_what_a_byte_loop_finds() {
        for len in 0..140 {
            for at in 0..=len {
                for end in [b'\n', b'\r'] {
                    let mut b: Vec<u8> =
                        (0..len).map(|i| [b'x', b'\t', 0x0C, 0x0E][i % 4]).collect();
                    if at < len {
                        b[at] = end;
                        if at + 1 < len {
                            b[at + 1] = b'\r';
                        }
                    }
                    let want = b.iter().position(|&c| c == b'\n' || c == b'\r');
                    assert_eq!(find_line_end(&b), want, "len {len} at {at}");
                }
            }
        }
    }
}
