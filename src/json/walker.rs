//! The walkers: step through the members of an object or the elements of
//! an array, validating what they skip and reporting byte spans, so a
//! caller reads a value in place or splices around it.

use std::ops::Range;

use super::{Invalid, MAX_DEPTH, decode_str, scan_string, scan_value, skip_ws};

/// One member of an object, as byte offsets into the scanned buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The key's raw bytes, between the quotes (escapes not decoded).
    pub key: Range<usize>,
    /// The key contains a backslash escape.
    pub key_escaped: bool,
    /// Where the value starts.
    pub value_start: usize,
    /// End of the previous member's value, if there was a previous member.
    pub prev_end: Option<usize>,
}

impl Member {
    /// Offset of the key's opening quote.
    #[must_use]
    pub fn start(&self) -> usize {
        self.key.start - 1
    }

    /// Whether the key equals `name` once escapes are decoded.
    #[must_use]
    pub fn key_is(&self, b: &[u8], name: &str) -> bool {
        let raw = &b[self.key.clone()];
        if self.key_escaped {
            decode_str(raw) == name
        } else {
            raw == name.as_bytes()
        }
    }
}

/// Steps through the members of one object without building anything.
#[derive(Debug)]
pub struct ObjectWalker<'a> {
    b: &'a [u8],
    i: usize,
    depth: u32,
    members: u32,
    last_end: Option<usize>,
    done: bool,
}

impl<'a> ObjectWalker<'a> {
    /// Starts at the `{` at `b[i]`; `depth` counts the containers around it.
    ///
    /// # Errors
    /// [`Invalid`] if `b[i]` is not `{` or the nesting is too deep.
    pub fn new(b: &'a [u8], i: usize, depth: u32) -> Result<Self, Invalid> {
        if b.get(i) != Some(&b'{') || depth + 1 > MAX_DEPTH {
            return Err(Invalid);
        }
        Ok(ObjectWalker {
            b,
            i: i + 1,
            depth: depth + 1,
            members: 0,
            last_end: None,
            done: false,
        })
    }

    /// The nesting depth inside this object (for nested walkers).
    #[must_use]
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Moves to the next member and returns it, positioned at its value; the
    /// caller then consumes the value with [`skip_value`](Self::skip_value)
    /// or reads it and calls [`value_end`](Self::value_end). `None` after the
    /// closing brace.
    ///
    /// # Errors
    /// [`Invalid`] on a syntax error.
    pub fn next_member(&mut self) -> Result<Option<Member>, Invalid> {
        if self.done {
            return Ok(None);
        }
        let b = self.b;
        let mut i = skip_ws(b, self.i);
        if b.get(i) == Some(&b'}') {
            self.i = i;
            self.done = true;
            return Ok(None);
        }
        if self.members > 0 {
            if b.get(i) != Some(&b',') {
                return Err(Invalid);
            }
            i = skip_ws(b, i + 1);
        }
        let (key_end, key_escaped) = scan_string(b, i)?;
        let mut j = skip_ws(b, key_end);
        if b.get(j) != Some(&b':') {
            return Err(Invalid);
        }
        j = skip_ws(b, j + 1);
        self.members += 1;
        self.i = j;
        Ok(Some(Member {
            key: i + 1..key_end - 1,
            key_escaped,
            value_start: j,
            prev_end: self.last_end,
        }))
    }

    /// Skips (validating) the current member's value; returns its end.
    ///
    /// # Errors
    /// [`Invalid`] when the value is not valid JSON.
    pub fn skip_value(&mut self) -> Result<usize, Invalid> {
        // Strings (most values) without the general skipper's call.
        let end = if self.b.get(self.i) == Some(&b'"') {
            scan_string(self.b, self.i)?.0
        } else {
            scan_value(self.b, self.i, self.depth)?
        };
        self.value_end(end);
        Ok(end)
    }

    /// Records that the current member's value, read by the caller, ends at
    /// `end`.
    pub fn value_end(&mut self, end: usize) {
        self.i = end;
        self.last_end = Some(end);
    }

    /// Offset of the closing `}` (valid once `next_member` returned `None`).
    #[must_use]
    pub fn close(&self) -> usize {
        self.i
    }

    /// Whether the object has members (so an added member needs a comma).
    #[must_use]
    pub fn has_members(&self) -> bool {
        self.members > 0
    }
}

/// Steps through the elements of one array.
#[derive(Debug)]
pub struct ArrayWalker<'a> {
    b: &'a [u8],
    i: usize,
    depth: u32,
    count: u32,
    done: bool,
}

impl<'a> ArrayWalker<'a> {
    /// Starts at the `[` at `b[i]`.
    ///
    /// # Errors
    /// [`Invalid`] if `b[i]` is not `[` or the nesting is too deep.
    pub fn new(b: &'a [u8], i: usize, depth: u32) -> Result<Self, Invalid> {
        if b.get(i) != Some(&b'[') || depth + 1 > MAX_DEPTH {
            return Err(Invalid);
        }
        Ok(ArrayWalker {
            b,
            i: i + 1,
            depth: depth + 1,
            count: 0,
            done: false,
        })
    }

    /// The nesting depth inside this array.
    #[must_use]
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Moves to the next element and returns its start; the caller consumes
    /// it like an [`ObjectWalker`] member. `None` after the closing bracket.
    ///
    /// # Errors
    /// [`Invalid`] on a syntax error.
    pub fn next_element(&mut self) -> Result<Option<usize>, Invalid> {
        if self.done {
            return Ok(None);
        }
        let b = self.b;
        let mut i = skip_ws(b, self.i);
        if b.get(i) == Some(&b']') {
            self.i = i;
            self.done = true;
            return Ok(None);
        }
        if self.count > 0 {
            if b.get(i) != Some(&b',') {
                return Err(Invalid);
            }
            i = skip_ws(b, i + 1);
        }
        self.count += 1;
        self.i = i;
        Ok(Some(i))
    }

    /// Skips (validating) the current element; returns its end.
    ///
    /// # Errors
    /// [`Invalid`] when the element is not valid JSON.
    pub fn skip_value(&mut self) -> Result<usize, Invalid> {
        let end = scan_value(self.b, self.i, self.depth)?;
        self.i = end;
        Ok(end)
    }

    /// Records that the current element ends at `end`.
    pub fn value_end(&mut self, end: usize) {
        self.i = end;
    }

    /// Offset of the closing `]` (valid once `next_element` returned `None`).
    #[must_use]
    pub fn close(&self) -> usize {
        self.i
    }
}

/// A member together with the end of its value: what a caller keeps of a
/// member it may later replace or remove.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The member.
    pub member: Member,
    /// Where its value ends.
    pub end: usize,
}

impl Field {
    /// The value's span.
    #[must_use]
    pub fn value(&self) -> Range<usize> {
        self.member.value_start..self.end
    }

    /// The value's bytes.
    #[must_use]
    pub fn value_in<'b>(&self, b: &'b [u8]) -> &'b [u8] {
        &b[self.value()]
    }

    /// Whether the key equals `name` once escapes are decoded.
    #[must_use]
    pub fn key_is(&self, b: &[u8], name: &str) -> bool {
        self.member.key_is(b, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_members() {
        let b = br#"{"a": 1, "b": {"c": [true]}}"#;
        let mut w = ObjectWalker::new(b, 0, 0).unwrap();
        let mut keys = Vec::new();
        while let Some(m) = w.next_member().unwrap() {
            keys.push(String::from_utf8(b[m.key.clone()].to_vec()).unwrap());
            w.skip_value().unwrap();
        }
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(w.close(), b.len() - 1);
    }
}
