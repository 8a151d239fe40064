//! The scan prefix: the validated start of a recent chunk, which the
//! fast scan compares instead of scanning again (see [`ScanPrefix`]).

use std::ops::Range;

use crate::json::Holes;

/// The validated start of a recent chunk: its bytes up to its first
/// top-level `choices` key, when members (the envelope: `id`, `object`,
/// `created`, `model`, …, the same in every chunk of a stream; a
/// `service_tier`, a `provider`) come before it. A chunk that starts with
/// the same bytes reads the same up to there (the same bytes parse the
/// same way, with the same holes), so the fast scan compares them (one
/// `memcmp`) and takes the holes found there instead of scanning them
/// again.
///
/// When no member of the prefix is one the full scan reads but the
/// envelope (`usage`, `sources`, `citations`), it also keeps the envelope
/// spans and where the last member ends, so that the full scan of a
/// finish chunk starting with the same bytes ([`scan_chunk`](super::scan_chunk) with the
/// prefix) sets them without scanning them again.
#[derive(Debug, Default)]
pub(crate) struct ScanPrefix {
    pub(super) bytes: Vec<u8>,
    /// The holes in `bytes` (the first `n_holes`; inline and small: the
    /// prefix is at most [`MAX_PREFIX`] bytes).
    holes: [(u16, u16); PREFIX_HOLES],
    n_holes: usize,
    /// The envelope spans, when the full scan reads nothing else there.
    pub(super) envelope: Option<PrefixEnvelope>,
}

/// Most holes in a [`ScanPrefix`] (a start with more is not kept).
pub(super) const PREFIX_HOLES: usize = 8;

/// What the full scan reads of a [`ScanPrefix`]: the envelope, no other
/// member it reads.
#[derive(Clone, Debug, Default)]
pub(super) struct PrefixEnvelope {
    pub(super) spans: [Option<Range<usize>>; 5],
    /// End of the last member's value (the full scan's `prev_end`).
    pub(super) last_end: usize,
}

/// Longest [`ScanPrefix`] kept.
pub(super) const MAX_PREFIX: usize = 512;

impl ScanPrefix {
    /// Where the fast scan of `d` goes on (after the comma before a
    /// top-level key, maybe in whitespace) when `d` starts with the prefix.
    #[inline]
    pub(super) fn resume(&self, d: &[u8]) -> Option<usize> {
        let n = self.bytes.len();
        (n > 0 && d.get(..n)? == self.bytes.as_slice()).then_some(n)
    }

    /// Keeps `prefix` (validated, ending after a comma before a top-level
    /// key) with its `holes` and `envelope`; keeps nothing when it has more
    /// than [`PREFIX_HOLES`] holes.
    pub(super) fn record(
        &mut self,
        prefix: &[u8],
        holes: &Holes,
        envelope: Option<PrefixEnvelope>,
    ) {
        self.bytes.clear();
        self.envelope = None;
        self.n_holes = 0;
        if holes.len() > PREFIX_HOLES {
            return;
        }
        for (slot, h) in self.holes.iter_mut().zip(holes.iter()) {
            let (Ok(start), Ok(end)) = (u16::try_from(h.start), u16::try_from(h.end)) else {
                self.n_holes = 0;
                return;
            };
            *slot = (start, end);
            self.n_holes += 1;
        }
        self.bytes.extend_from_slice(prefix);
        self.envelope = envelope;
    }

    /// The holes in the prefix, into `holes` (cleared).
    #[inline]
    pub(super) fn holes_into(&self, holes: &mut Holes) {
        holes.clear();
        for &(start, end) in self.holes.get(..self.n_holes).unwrap_or_default() {
            holes.push(usize::from(start)..usize::from(end));
        }
    }
}
