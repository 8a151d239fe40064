//! Canonical framing for events citestream synthesizes or modifies.

/// Appends one event in canonical framing to `out`.
///
/// The framing is `event: <event>\n` (when given), `id: <id>\n` (when
/// given), `retry: <ms>\n` (when given), then one `data: <line>\n` per line
/// of `data` and a blank line: LF line ends, no BOM, never a block without
/// `data` (empty `data` is written as one empty `data` line, which a parser
/// dispatches as an event with empty data).
///
/// `data` is split into lines at CRLF, CR and LF, since any of them ends a
/// line on the wire; re-parsing gives the lines joined with LF. `event` and
/// `id` cannot hold a line end: they are cut at the first CR or LF.
///
/// An event that citestream does not change is never re-written: forward
/// its [`raw`](super::Event::raw) bytes instead.
///
/// # Example
///
/// ```
/// let mut out = Vec::new();
/// citestream::sse::write_event(&mut out, Some(b"message_delta"), None, None, b"{\"a\":1}\n{}");
/// assert_eq!(out, b"event: message_delta\ndata: {\"a\":1}\ndata: {}\n\n");
/// ```
///
/// # Panics
///
/// Never panics.
pub fn write_event(
    out: &mut Vec<u8>,
    event: Option<&[u8]>,
    id: Option<&[u8]>,
    retry: Option<u64>,
    data: &[u8],
) {
    if let Some(e) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(first_line(e));
        out.push(b'\n');
    }
    if let Some(i) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(first_line(i));
        out.push(b'\n');
    }
    if let Some(r) = retry {
        out.extend_from_slice(b"retry: ");
        out.extend_from_slice(r.to_string().as_bytes());
        out.push(b'\n');
    }
    let mut rest = data;
    loop {
        out.extend_from_slice(b"data: ");
        match memchr::memchr2(b'\n', b'\r', rest) {
            None => {
                out.extend_from_slice(rest);
                out.push(b'\n');
                break;
            }
            Some(i) => {
                out.extend_from_slice(&rest[..i]);
                out.push(b'\n');
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = &rest[i + skip..];
            }
        }
    }
    out.push(b'\n');
}

fn first_line(v: &[u8]) -> &[u8] {
    match memchr::memchr2(b'\n', b'\r', v) {
        Some(i) => &v[..i],
        None => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_data_is_one_empty_line() {
        let mut out = Vec::new();
        write_event(&mut out, None, Some(b"7"), Some(10), b"");
        assert_eq!(out, b"id: 7\nretry: 10\ndata: \n\n");
    }

    #[test]
    fn line_ends_split_data() {
        let mut out = Vec::new();
        write_event(&mut out, Some(b"a\rb"), None, None, b"x\r\ny\rz\n");
        assert_eq!(out, b"event: a\ndata: x\ndata: y\ndata: z\ndata: \n\n");
    }
}
