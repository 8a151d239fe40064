//! The cursor: a position in a JSON text that its caller advances token
//! by token, for scans that know the shape they expect (the chat
//! rewriter's fast path). Every step validates what it consumes, with the
//! same rules as [`scan_value`]; a caller that reaches the end of the text
//! this way has validated all of it.

use std::ops::Range;

use super::{Invalid, MAX_DEPTH, scan_number, scan_string, scan_value};

/// Most template holes the `*_holes` skips record: past this many the
/// list stays full (a caller takes a full list as "too many to learn"), so
/// a chunk with thousands of numbers does not grow it.
pub const MAX_HOLES: usize = 32;

/// The template holes the `*_holes` skips record: at most [`MAX_HOLES`],
/// inline (a list that never allocates; it derefs to the recorded ranges).
#[derive(Clone, Debug, Default)]
pub struct Holes {
    n: usize,
    at: [Range<usize>; MAX_HOLES],
}

impl Holes {
    /// Forgets the recorded holes.
    #[inline]
    pub fn clear(&mut self) {
        self.n = 0;
    }

    /// Records a hole unless the list is full.
    #[inline(always)]
    pub fn push(&mut self, r: Range<usize>) {
        if let Some(slot) = self.at.get_mut(self.n) {
            *slot = r;
            self.n += 1;
        }
    }
}

impl std::ops::Deref for Holes {
    type Target = [Range<usize>];

    #[inline]
    fn deref(&self) -> &[Range<usize>] {
        self.at.get(..self.n).unwrap_or_default()
    }
}

/// A position in a JSON text, advanced token by token by its caller.
#[derive(Debug)]
pub struct Cursor<'a> {
    /// The text.
    pub b: &'a [u8],
    /// The position.
    pub i: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `b`.
    #[must_use]
    pub fn new(b: &'a [u8]) -> Self {
        Cursor { b, i: 0 }
    }

    /// The byte at the cursor, 0 at the end of the text.
    #[inline(always)]
    #[must_use]
    pub fn peek(&self) -> u8 {
        // NUL never starts a JSON token, so it doubles as end of input.
        self.b.get(self.i).copied().unwrap_or(0)
    }

    /// Skips whitespace.
    #[inline(always)]
    pub fn ws(&mut self) {
        // Chunks rarely have whitespace between tokens: one compare.
        if self.peek() > b' ' {
            return;
        }
        while matches!(self.peek(), b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    /// Consumes `c`.
    ///
    /// # Errors
    /// [`Invalid`] when the byte at the cursor is not `c`.
    #[inline(always)]
    pub fn eat(&mut self, c: u8) -> Result<(), Invalid> {
        if self.peek() == c {
            self.i += 1;
            Ok(())
        } else {
            Err(Invalid)
        }
    }

    /// A string; returns its raw body and whether it has escapes.
    #[inline(always)]
    pub fn string(&mut self) -> Result<(Range<usize>, bool), Invalid> {
        let start = self.i + 1;
        let (end, escaped) = scan_string(self.b, self.i)?;
        self.i = end;
        Ok((start..end - 1, escaped))
    }

    /// `,` (then whitespace) before another member/element, or `close`.
    /// Returns whether another one follows.
    #[inline(always)]
    pub fn more(&mut self, close: u8) -> Result<bool, Invalid> {
        self.ws();
        match self.peek() {
            b',' => {
                self.i += 1;
                self.ws();
                Ok(true)
            }
            c if c == close => {
                self.i += 1;
                Ok(false)
            }
            _ => Err(Invalid),
        }
    }

    /// A key and its colon; `None` when the key has escapes (the caller
    /// falls back to the complete scanner).
    #[inline(always)]
    pub fn key(&mut self) -> Result<Option<Range<usize>>, Invalid> {
        let (k, escaped) = self.string()?;
        self.ws();
        self.eat(b':')?;
        self.ws();
        Ok((!escaped).then_some(k))
    }

    /// Skips (validating) any value at `depth`.
    #[inline]
    pub fn skip(&mut self, depth: u32) -> Result<(), Invalid> {
        // Scalars here (an `index`, `created`, a `null`), without the
        // container machinery of `scan_value`.
        match self.peek() {
            b'"' => self.i = scan_string(self.b, self.i)?.0,
            b'-' | b'0'..=b'9' => self.i = scan_number(self.b, self.i)?,
            b'n' => self.literal(b"null")?,
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            _ => self.i = scan_value(self.b, self.i, depth)?,
        }
        Ok(())
    }

    /// Skips (validating) any value at `depth`, recording every string and
    /// number token in it (not keys) as a template hole: the strings of a
    /// delta's `tool_calls` or the numbers of a running `usage`, say, vary
    /// from chunk to chunk while the rest does not. At most [`MAX_HOLES`]
    /// are kept.
    ///
    /// Strings, numbers and literals are handled here (inlined into the
    /// caller); only containers take a call, and their scalar elements are
    /// handled in their loop without one.
    #[inline(always)]
    pub fn skip_holes(&mut self, depth: u32, holes: &mut Holes) -> Result<(), Invalid> {
        self.value_holes::<true>(depth, holes)
    }

    /// [`skip_holes`](Self::skip_holes) recording only the numbers: the
    /// strings are part of the template's literal text (compared, not
    /// scanned, in the next chunks), for values whose strings repeat from
    /// chunk to chunk (Perplexity's `citations`) while numbers may not (a
    /// running `usage`).
    #[inline(always)]
    pub fn skip_number_holes(&mut self, depth: u32, holes: &mut Holes) -> Result<(), Invalid> {
        self.value_holes::<false>(depth, holes)
    }

    #[inline(always)]
    fn value_holes<const STRINGS: bool>(
        &mut self,
        depth: u32,
        holes: &mut Holes,
    ) -> Result<(), Invalid> {
        match self.peek() {
            b'"' => {
                let s = self.i;
                self.i = scan_string(self.b, self.i)?.0;
                if STRINGS {
                    holes.push(s..self.i);
                }
                Ok(())
            }
            b'-' | b'0'..=b'9' => {
                let s = self.i;
                self.i = scan_number(self.b, self.i)?;
                holes.push(s..self.i);
                Ok(())
            }
            // With the list full, no more holes: plain validation.
            b'{' | b'[' if holes.len() >= MAX_HOLES => {
                self.i = scan_value(self.b, self.i, depth)?;
                Ok(())
            }
            b'{' | b'[' => self.container_holes::<STRINGS>(depth, holes),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.skip(depth),
        }
    }

    /// Consumes the literal `lit` (`true`, `false`, `null`).
    #[inline(always)]
    fn literal(&mut self, lit: &[u8]) -> Result<(), Invalid> {
        if self.b.get(self.i..self.i + lit.len()) == Some(lit) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(Invalid)
        }
    }

    /// [`value_holes`](Self::value_holes) of an object or array (the
    /// cursor on its opening bracket).
    fn container_holes<const STRINGS: bool>(
        &mut self,
        depth: u32,
        holes: &mut Holes,
    ) -> Result<(), Invalid> {
        // The same nesting limit as `scan_value`.
        if depth + 1 > MAX_DEPTH {
            return Err(Invalid);
        }
        let is_obj = self.peek() == b'{';
        let close = if is_obj { b'}' } else { b']' };
        self.i += 1;
        if self.empty(close) {
            return Ok(());
        }
        loop {
            if is_obj {
                self.string()?;
                self.ws();
                self.eat(b':')?;
                self.ws();
            }
            self.value_holes::<STRINGS>(depth + 1, holes)?;
            if !self.more(close)? {
                return Ok(());
            }
        }
    }

    /// Whether an object or array opened at `close`'s partner is empty
    /// (and consumed if so).
    #[inline(always)]
    pub fn empty(&mut self, close: u8) -> bool {
        self.ws();
        if self.peek() == close {
            self.i += 1;
            true
        } else {
            false
        }
    }
}
