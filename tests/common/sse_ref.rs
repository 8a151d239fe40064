//! A slow, obviously-correct reference for the WHATWG HTML event-stream
//! rules ("Interpreting an event stream"), and helpers that drive the fast
//! [`citestream::sse::Parser`] so the two can be compared.
//!
//! The reference works on the whole input at once and favours being easy to
//! check against the standard over being fast: it decodes everything first,
//! splits lines with a char loop, and keeps the standard's three buffers as
//! `String`s.
//!
//! Two crate decisions the standard leaves open are modelled here too:
//!
//! * The last event ID buffer starts as the *initial* last event ID (what a
//!   client reconnecting with a `Last-Event-ID` header had), not the empty
//!   string.
//! * A `retry` value too large for `u64` saturates at `u64::MAX`.

use bytes::Bytes;
use citestream::sse::{Config, Event, Frame, Parser};

/// `(event type, data, last event ID)`, as a browser's `MessageEvent`
/// exposes them (`type`, `data`, `lastEventId`).
pub type RefEvent = (String, String, String);

/// One dispatched event with the `retry` value its block carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefDetail {
    pub event_type: String,
    pub data: String,
    pub last_event_id: String,
    /// The last valid `retry` value among the lines of the dispatched block
    /// (what [`Event::retry`] reports).
    pub retry: Option<u64>,
    /// The value of the block's last `event` line, if any (what
    /// [`Event::event_field`] reports).
    pub event_field: Option<String>,
    /// The value of the block's last `id` line, if any, NUL or not (what
    /// [`Event::id_field`] reports).
    pub id_field: Option<String>,
}

impl RefDetail {
    pub fn key(&self) -> RefEvent {
        (
            self.event_type.clone(),
            self.data.clone(),
            self.last_event_id.clone(),
        )
    }
}

/// Everything the reference computes for a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interpretation {
    pub events: Vec<RefDetail>,
    /// The event stream's reconnection time, set by every valid `retry`
    /// field as soon as its line is processed (complete blocks or not).
    pub reconnection_time: Option<u64>,
    /// The reconnection time as it stood after the last complete block.
    pub reconnection_time_at_last_blank_line: Option<u64>,
    /// The event source's "last event ID string" (set from the buffer at
    /// every blank line, dispatching or not); the initial ID before that.
    pub last_event_id: String,
}

impl Interpretation {
    pub fn keys(&self) -> Vec<RefEvent> {
        self.events.iter().map(RefDetail::key).collect()
    }

    /// What follows from the complete blocks alone: the events, the
    /// reconnection time and the last event ID string after the last blank
    /// line. ([`interpret_limited`] only looks at complete blocks, so its
    /// `reconnection_time` ignores an unterminated last block.)
    pub fn complete_blocks(&self) -> (&[RefDetail], Option<u64>, &str) {
        (
            &self.events,
            self.reconnection_time_at_last_blank_line,
            &self.last_event_id,
        )
    }
}

/// The standard's per-stream state.
struct State {
    /// "data buffer"
    data: String,
    /// "event type buffer"
    event_type: String,
    /// "last event ID buffer"
    last_event_id: String,
    /// Not in the standard: the last valid `retry`, the last `event` and
    /// the last `id` line's value in the current block.
    block_retry: Option<u64>,
    block_event: Option<String>,
    block_id: Option<String>,
    out: Interpretation,
}

impl State {
    fn new(initial_last_event_id: Option<&str>) -> Self {
        State {
            data: String::new(),
            event_type: String::new(),
            last_event_id: initial_last_event_id.unwrap_or("").to_string(),
            block_retry: None,
            block_event: None,
            block_id: None,
            out: Interpretation {
                last_event_id: initial_last_event_id.unwrap_or("").to_string(),
                ..Interpretation::default()
            },
        }
    }

    /// "Lines must be processed, in the order they are received, as follows".
    fn process_line(&mut self, line: &str) {
        // "If the line is empty (a blank line): Dispatch the event."
        if line.is_empty() {
            self.dispatch();
            return;
        }
        // "If the line starts with a U+003A COLON character (:): Ignore the line."
        if line.starts_with(':') {
            return;
        }
        match line.find(':') {
            // "If the line contains a U+003A COLON character (:): Collect the
            // characters on the line before the first U+003A COLON character
            // (:), and let field be that string. Collect the characters on
            // the line after the first U+003A COLON character (:), and let
            // value be that string. If value starts with a U+0020 SPACE
            // character, remove it from value."
            Some(colon) => {
                let field = &line[..colon];
                let mut value = &line[colon + 1..];
                if let Some(rest) = value.strip_prefix(' ') {
                    value = rest;
                }
                self.process_field(field, value);
            }
            // "Otherwise, the string is not empty but does not contain a
            // U+003A COLON character (:): Process the field using the whole
            // line as the field name, and the empty string as the field value."
            None => self.process_field(line, ""),
        }
    }

    /// "The steps to process the field given a field name and field value".
    /// "Field names must be compared literally, with no case folding".
    fn process_field(&mut self, field: &str, value: &str) {
        match field {
            "event" => self.block_event = Some(value.to_string()),
            "id" => self.block_id = Some(value.to_string()),
            _ => {}
        }
        match field {
            // "Set the event type buffer to the field value."
            "event" => self.event_type = value.to_string(),
            // "Append the field value to the data buffer, then append a
            // single U+000A LINE FEED (LF) character to the data buffer."
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            // "If the field value does not contain U+0000 NULL, then set the
            // last event ID buffer to the field value. Otherwise, ignore the
            // field."
            "id" if !value.contains('\0') => self.last_event_id = value.to_string(),
            // "If the field value consists of only ASCII digits, then
            // interpret the field value as an integer in base ten, and set
            // the event stream's reconnection time to that integer.
            // Otherwise, ignore the field." (An empty value is no integer.)
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                let n = value.bytes().fold(0u64, |acc, d| {
                    acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                });
                self.out.reconnection_time = Some(n);
                self.block_retry = Some(n);
            }
            // An `id` with NUL, an invalid `retry`, and "Otherwise: The
            // field is ignored."
            _ => {}
        }
    }

    /// "Dispatch the event" (web browser steps).
    fn dispatch(&mut self) {
        let retry = self.block_retry.take();
        let event_field = self.block_event.take();
        let id_field = self.block_id.take();
        self.out.reconnection_time_at_last_blank_line = self.out.reconnection_time;
        // 1. "Set the last event ID string of the event source to the value
        //    of the last event ID buffer. The buffer does not get reset."
        let last_event_id = self.last_event_id.clone();
        self.out.last_event_id = last_event_id.clone();
        // 2. "If the data buffer is an empty string, set the data buffer and
        //    the event type buffer to the empty string and return."
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        // 3. "If the data buffer's last character is a U+000A LINE FEED (LF)
        //    character, then remove the last character from the data buffer."
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        // 5./6. type "message" unless the event type buffer is non-empty.
        let event_type = match std::mem::take(&mut self.event_type) {
            t if t.is_empty() => "message".to_string(),
            t => t,
        };
        // 7. "Set the data buffer and the event type buffer to the empty
        //    string." (done by the `take`s above)
        self.out.events.push(RefDetail {
            event_type,
            data,
            last_event_id,
            retry,
            event_field,
            id_field,
        });
    }
}

/// Splits `text` into its *terminated* lines: "a U+000D CARRIAGE RETURN
/// U+000A LINE FEED (CRLF) character pair, a single U+000A LINE FEED (LF)
/// character not preceded by a U+000D CARRIAGE RETURN (CR) character, and a
/// single U+000D CARRIAGE RETURN (CR) character not followed by a U+000A
/// LINE FEED (LF) character being the ways in which a line can end". A last
/// line without a line end is left out: "Once the end of the file is
/// reached, any pending data must be discarded."
fn terminated_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' => {
                lines.push(&text[start..i]);
                start = i + 1;
            }
            '\r' => {
                lines.push(&text[start..i]);
                start = i + 1;
                if let Some(&(_, '\n')) = chars.peek() {
                    chars.next();
                    start = i + 2;
                }
            }
            _ => {}
        }
    }
    lines
}

/// The WHATWG interpretation of a whole stream.
///
/// "Streams must be decoded using the UTF-8 decode algorithm": invalid
/// sequences become U+FFFD and one leading U+FEFF (BOM) is skipped.
pub fn interpret(input: &[u8], initial_last_event_id: Option<&str>) -> Interpretation {
    let decoded = String::from_utf8_lossy(input);
    let text = decoded.strip_prefix('\u{FEFF}').unwrap_or(&decoded);
    let mut state = State::new(initial_last_event_id);
    for line in terminated_lines(text) {
        state.process_line(line);
    }
    state.out
}

/// The dispatched events of a whole stream: `(type, data, lastEventId)`.
pub fn parse(input: &[u8], initial_last_event_id: Option<&str>) -> Vec<RefEvent> {
    interpret(input, initial_last_event_id).keys()
}

/// Splits raw bytes into terminated lines: `(line, line end length)`.
fn terminated_byte_lines(input: &[u8]) -> Vec<(&[u8], usize)> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'\n' => {
                lines.push((&input[start..i], 1));
                i += 1;
                start = i;
            }
            b'\r' => {
                let n = if input.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                lines.push((&input[start..i], n));
                i += n;
                start = i;
            }
            _ => i += 1,
        }
    }
    lines
}

/// The crate's interpretation under [`Config::max_event_size`]: a block
/// (its lines with their line ends, up to but not including the blank line
/// that ends it; a leading BOM counts towards the first block) larger than
/// `max_event_size` is forwarded uninterpreted, so none of its fields has
/// any effect. Every other block is interpreted as [`interpret`] does.
///
/// This works on bytes (each line decoded on its own, which is the same as
/// decoding the whole input first: CR and LF are ASCII, so no invalid UTF-8
/// sequence spans a line end). With `usize::MAX` it must agree with
/// [`interpret`]; the property tests check that.
pub fn interpret_limited(
    input: &[u8],
    initial_last_event_id: Option<&str>,
    max_event_size: usize,
) -> Interpretation {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let (mut size, body) = match input.strip_prefix(BOM) {
        Some(rest) => (BOM.len(), rest),
        None => (0, input),
    };
    let mut state = State::new(initial_last_event_id);
    let mut block: Vec<&[u8]> = Vec::new();
    for (line, end) in terminated_byte_lines(body) {
        if !line.is_empty() {
            block.push(line);
            size += line.len() + end;
            continue;
        }
        if size <= max_event_size {
            for l in &block {
                state.process_line(&String::from_utf8_lossy(l));
            }
            state.process_line("");
        }
        // Nothing of an oversized block is interpreted.
        block.clear();
        size = 0;
    }
    state.out
}

/// Event size of each complete block as the crate counts it (see
/// [`interpret_limited`]), blocks of only blank lines included, and the
/// length of the unterminated tail after the last blank line (a leading
/// BOM included when there is no blank line).
pub fn blocks(input: &[u8]) -> (Vec<usize>, usize) {
    const BOM: &[u8] = b"\xEF\xBB\xBF";
    let (mut size, body) = match input.strip_prefix(BOM) {
        Some(rest) => (BOM.len(), rest),
        None => (0, input),
    };
    let mut sizes = Vec::new();
    let mut end_of_last_block = 0;
    let mut at = input.len() - body.len();
    for (line, end) in terminated_byte_lines(body) {
        at += line.len() + end;
        if line.is_empty() {
            sizes.push(size);
            size = 0;
            end_of_last_block = at;
        } else {
            size += line.len() + end;
        }
    }
    (sizes, input.len() - end_of_last_block)
}

// ---------------------------------------------------------------------------
// Driving the fast parser.

/// Everything one run of the fast parser produced.
#[derive(Debug)]
pub struct Run {
    pub frames: Vec<Frame>,
    /// What [`Parser::finish`] returned.
    pub tail: Option<Bytes>,
    /// The largest [`Parser::buffered`] seen after any call.
    pub max_buffered: usize,
    /// The most input bytes held back (fed but not yet handed out in a
    /// frame) after draining the parser, over all drains.
    pub max_held: usize,
    /// [`Parser::reconnection_time`] just before `finish`.
    pub reconnection_time: Option<u64>,
    /// [`Parser::last_event_id`] just before `finish`.
    pub last_event_id: Vec<u8>,
}

/// The fields of a dispatched event, as bytes, for exact comparisons
/// between runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventKey {
    pub event_type: Vec<u8>,
    pub data: Vec<u8>,
    pub last_event_id: Vec<u8>,
    pub retry: Option<u64>,
    pub event_field: Option<Vec<u8>>,
    pub id_field: Option<Vec<u8>>,
}

impl EventKey {
    pub fn of(e: &Event) -> Self {
        EventKey {
            event_type: e.event_type().to_vec(),
            data: e.data().to_vec(),
            last_event_id: e.last_event_id().to_vec(),
            retry: e.retry(),
            event_field: e.event_field().map(<[u8]>::to_vec),
            id_field: e.id_field().map(<[u8]>::to_vec),
        }
    }
}

/// An event as the reference reports it, decoded with U+FFFD.
pub fn ref_event(e: &Event) -> RefEvent {
    (
        String::from_utf8_lossy(e.event_type()).into_owned(),
        String::from_utf8_lossy(e.data()).into_owned(),
        String::from_utf8_lossy(e.last_event_id()).into_owned(),
    )
}

pub fn ref_detail(e: &Event) -> RefDetail {
    let (event_type, data, last_event_id) = ref_event(e);
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    RefDetail {
        event_type,
        data,
        last_event_id,
        retry: e.retry(),
        event_field: e.event_field().map(lossy),
        id_field: e.id_field().map(lossy),
    }
}

impl Run {
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.frames.iter().filter_map(|f| match f {
            Frame::Event(e) => Some(e),
            _ => None,
        })
    }

    pub fn keys(&self) -> Vec<EventKey> {
        self.events().map(EventKey::of).collect()
    }

    pub fn ref_events(&self) -> Vec<RefEvent> {
        self.events().map(ref_event).collect()
    }

    pub fn details(&self) -> Vec<RefDetail> {
        self.events().map(ref_detail).collect()
    }

    /// All frames' raw bytes, then the tail: must equal the input.
    pub fn concat(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for f in &self.frames {
            out.extend_from_slice(f.raw());
        }
        if let Some(t) = &self.tail {
            out.extend_from_slice(t);
        }
        out
    }

    pub fn oversized_bytes(&self) -> usize {
        self.frames
            .iter()
            .filter(|f| matches!(f, Frame::Oversized(_)))
            .map(|f| f.raw().len())
            .sum()
    }
}

/// Feeds `pieces` to a new parser; after each piece, drains the frames when
/// `drain[i % drain.len()]` is true (an empty `drain` drains every time).
/// All frames are drained before `finish`.
pub fn run_pieces(
    config: &Config,
    initial_last_event_id: Option<&[u8]>,
    pieces: &[Bytes],
    drain: &[bool],
) -> Run {
    let mut p = Parser::with_config(config);
    if let Some(id) = initial_last_event_id {
        p.set_last_event_id(Bytes::copy_from_slice(id));
    }
    let mut frames: Vec<Frame> = Vec::new();
    let mut max_buffered = p.buffered();
    let mut max_held = 0;
    let (mut fed, mut out) = (0, 0);
    for (i, piece) in pieces.iter().enumerate() {
        p.feed(piece.clone());
        fed += piece.len();
        max_buffered = max_buffered.max(p.buffered());
        if drain.is_empty() || drain[i % drain.len()] {
            while let Some(f) = p.next_frame() {
                max_buffered = max_buffered.max(p.buffered());
                out += f.raw().len();
                frames.push(f);
            }
            max_held = max_held.max(fed - out);
        }
    }
    while let Some(f) = p.next_frame() {
        max_buffered = max_buffered.max(p.buffered());
        frames.push(f);
    }
    let reconnection_time = p.reconnection_time();
    let last_event_id = p.last_event_id().to_vec();
    let tail = p.finish();
    Run {
        frames,
        tail,
        max_buffered,
        max_held,
        reconnection_time,
        last_event_id,
    }
}

/// Cuts `input` at the given (sorted, in-range) positions into zero-copy
/// pieces; empty pieces are kept (the parser must ignore them).
pub fn pieces_at(input: &Bytes, cuts: &[usize]) -> Vec<Bytes> {
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut at = 0;
    for &c in cuts {
        pieces.push(input.slice(at..c));
        at = c;
    }
    pieces.push(input.slice(at..));
    pieces
}

/// Pieces of `size` bytes (the last one shorter).
pub fn pieces_of(input: &Bytes, size: usize) -> Vec<Bytes> {
    let cuts: Vec<usize> = (1..)
        .map(|k| k * size)
        .take_while(|&c| c < input.len())
        .collect();
    pieces_at(input, &cuts)
}

/// Runs the default-config parser on `input` cut at `cuts`.
pub fn run_cuts(input: &Bytes, initial_last_event_id: Option<&[u8]>, cuts: &[usize]) -> Run {
    run_pieces(
        &Config::new(),
        initial_last_event_id,
        &pieces_at(input, cuts),
        &[],
    )
}

/// A small deterministic PRNG (xorshift64*) for random chunkings outside
/// proptest.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Random cut points for `len` bytes: pieces of 1 to `max_piece` bytes.
    pub fn cuts(&mut self, len: usize, max_piece: usize) -> Vec<usize> {
        let mut cuts = Vec::new();
        let mut at = 0;
        loop {
            at += 1 + self.below(max_piece);
            if at >= len {
                return cuts;
            }
            cuts.push(at);
        }
    }
}
