//! The general loop's per-line work (see [`state`](super::state)): WHATWG
//! "process the field" for each line of a block, and the block's dispatch
//! at its blank line.

use std::ops::Range;

use bytes::Bytes;

use super::frame::{Data, FrameKind, Loc};
use super::state::{Found, State};

impl State {
    /// Bytes of the current block at block-relative `r`, which must already
    /// be complete (gathered into `partial` when the block spans pieces).
    pub(super) fn block_slice<'a>(&'a self, chunk: &'a [u8], r: Range<usize>) -> &'a [u8] {
        if self.partial.is_empty() {
            &chunk[self.start + r.start..self.start + r.end]
        } else {
            &self.partial[r]
        }
    }

    /// WHATWG "process the field" for one non-blank line.
    pub(super) fn process_line(&mut self, chunk: &[u8], line: Range<usize>) {
        let bytes = self.block_slice(chunk, line.clone());
        if bytes[0] == b':' {
            return; // comment
        }
        let (name, value) = match memchr::memchr(b':', bytes) {
            Some(c) => {
                let mut v = c + 1;
                if bytes.get(v) == Some(&b' ') {
                    v += 1;
                }
                (&bytes[..c], line.start + v..line.end)
            }
            None => (bytes, line.end..line.end),
        };
        match name {
            b"data" => match std::mem::replace(&mut self.data, Data::Many) {
                Data::None => self.data = Data::One(value),
                Data::One(first) => {
                    let mut s = std::mem::take(&mut self.scratch);
                    s.clear();
                    s.extend_from_slice(self.block_slice(chunk, first));
                    s.extend_from_slice(b"\n");
                    s.extend_from_slice(self.block_slice(chunk, value));
                    self.scratch = s;
                }
                Data::Many => {
                    let mut s = std::mem::take(&mut self.scratch);
                    s.extend_from_slice(b"\n");
                    s.extend_from_slice(self.block_slice(chunk, value));
                    self.scratch = s;
                }
            },
            b"event" => self.event = Some(value),
            b"id" => {
                if memchr::memchr(0, self.block_slice(chunk, value.clone())).is_none() {
                    self.id_valid = Some(value.clone());
                }
                self.id = Some(value);
            }
            b"retry" => {
                let v = self.block_slice(chunk, value);
                if !v.is_empty() && v.iter().all(u8::is_ascii_digit) {
                    // Digits only; a value too large for u64 saturates.
                    let n = v.iter().fold(0u64, |acc, d| {
                        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                    });
                    self.retry = Some(n);
                }
            }
            _ => {}
        }
    }

    /// The blank line ending at `cur[..next]` closes the block.
    pub(super) fn end_block(&mut self, chunk: &Bytes, next: usize) -> Found {
        let size = self.line_start;
        let raw = if self.partial.is_empty() {
            Loc::Cur(self.start, next)
        } else {
            self.gather(&chunk[self.start..next]);
            self.note_lent();
            Loc::Owned
        };
        let block_start = self.start;
        self.start = next;
        self.line_start = 0;
        if size > self.max {
            self.reset_block();
            return Found::plain(FrameKind::Oversized, raw);
        }
        if let Some(r) = self.id_valid.take() {
            self.last_event_id = match raw {
                Loc::Cur(..) => chunk.slice(block_start + r.start..block_start + r.end),
                // (A copy: the gathering buffer is reused.)
                Loc::Owned => Bytes::copy_from_slice(&self.partial[r]),
            };
        }
        if let Some(n) = self.retry {
            self.reconnection_time = Some(n);
        }
        let data = match std::mem::replace(&mut self.data, Data::None) {
            Data::None => {
                self.reset_block();
                return Found::plain(FrameKind::Skipped, raw);
            }
            Data::One(r) => Some(r),
            Data::Many => {
                self.joined = self.scratch.split().freeze();
                None
            }
        };
        Found {
            kind: FrameKind::Event,
            raw,
            data,
            event: self.event.take(),
            id: self.id.take(),
            retry: self.retry.take(),
        }
    }

    pub(super) fn reset_block(&mut self) {
        self.open_data = None;
        self.open_prefix = false;
        self.data = Data::None;
        self.event = None;
        self.id = None;
        self.id_valid = None;
        self.retry = None;
    }
}
