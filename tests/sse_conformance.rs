//! WHATWG HTML "Interpreting an event stream" and web-platform-tests
//! `eventsource/format-*` vectors, one named test per vector.
//!
//! Every vector is checked five ways:
//!
//! 1. its literal expected events against the reference parser
//!    (`common::sse_ref`), which pins the reference to the standard;
//! 2. the fast parser on the whole input in one piece: the same events, the
//!    expected `finish()` tail, each event a slice of the input, and the
//!    concatenation of all `Frame::raw()` plus the tail equal to the input;
//! 3. split into two pieces at every split point (sampled for inputs over
//!    `EXHAUSTIVE_2`), into three pieces at every pair of split points for
//!    inputs up to `EXHAUSTIVE_3` bytes, and fed one byte at a time (once
//!    draining after every byte, once queueing them all first): the same
//!    events, byte for byte, and lossless;
//! 4. an explicit piece list where the vector gives one (BOM split across
//!    reads, empty first reads, CR at the end of one read);
//! 5. the byte-level limited reference with no limit agrees with the
//!    decoding reference.

mod common;

use bytes::Bytes;
use citestream::sse::Config;
use common::sse_ref::{self, RefEvent, Run, interpret, interpret_limited, run_cuts, run_pieces};

/// Inputs up to this length are split at every point into two pieces.
const EXHAUSTIVE_2: usize = if cfg!(miri) { 64 } else { 8 * 1024 };
/// Inputs up to this length are split at every pair of points.
const EXHAUSTIVE_3: usize = if cfg!(miri) { 8 } else { 48 };

struct Vector {
    name: &'static str,
    input: Bytes,
    expected: Vec<RefEvent>,
    initial_id: Option<String>,
    tail: Option<Vec<u8>>,
    retry: Option<Vec<Option<u64>>>,
    reconnection: Option<Option<u64>>,
    pieces: Option<Vec<Vec<u8>>>,
}

impl Vector {
    fn new(name: &'static str, input: &[u8], expected: &[(&str, &str, &str)]) -> Self {
        Vector {
            name,
            input: Bytes::copy_from_slice(input),
            expected: expected
                .iter()
                .map(|(t, d, i)| (t.to_string(), d.to_string(), i.to_string()))
                .collect(),
            initial_id: None,
            tail: None,
            retry: None,
            reconnection: None,
            pieces: None,
        }
    }

    /// The initial last event ID (`Parser::set_last_event_id`).
    fn initial_id(mut self, id: &str) -> Self {
        self.initial_id = Some(id.to_string());
        self
    }

    /// The bytes `finish()` must return (default: none).
    fn tail(mut self, tail: &[u8]) -> Self {
        self.tail = Some(tail.to_vec());
        self
    }

    /// `Event::retry()` of each dispatched event.
    fn retry(mut self, retry: &[Option<u64>]) -> Self {
        self.retry = Some(retry.to_vec());
        self
    }

    /// `Parser::reconnection_time()` at the end of the input.
    fn reconnection(mut self, ms: Option<u64>) -> Self {
        self.reconnection = Some(ms);
        self
    }

    /// Also feed the input in exactly these pieces (empty ones included).
    fn pieces(mut self, pieces: &[&[u8]]) -> Self {
        self.pieces = Some(pieces.iter().map(|p| p.to_vec()).collect());
        self
    }

    fn id(&self) -> Option<&[u8]> {
        self.initial_id.as_deref().map(str::as_bytes)
    }

    fn check(self) {
        let name = self.name;
        let input = &self.input;

        // 1. The reference agrees with the vector.
        let reference = interpret(input, self.initial_id.as_deref());
        assert_eq!(
            reference.keys(),
            self.expected,
            "{name}: reference parser disagrees with the vector"
        );
        // 5. The byte-level reference agrees with the decoding one.
        assert_eq!(
            interpret_limited(input, self.initial_id.as_deref(), usize::MAX).complete_blocks(),
            reference.complete_blocks(),
            "{name}: byte-level reference"
        );
        if let Some(retry) = &self.retry {
            let got: Vec<_> = reference.events.iter().map(|e| e.retry).collect();
            assert_eq!(&got, retry, "{name}: reference retry");
        }

        // 2. One piece.
        let whole = run_cuts(input, self.id(), &[]);
        assert_eq!(whole.ref_events(), self.expected, "{name}: one piece");
        assert_eq!(whole.details(), reference.events, "{name}: one piece");
        assert_eq!(
            whole.tail.as_deref(),
            self.tail.as_deref(),
            "{name}: finish() tail"
        );
        assert_eq!(&whole.concat()[..], &input[..], "{name}: lossless");
        if let Some(retry) = &self.retry {
            let got: Vec<_> = whole.events().map(|e| e.retry()).collect();
            assert_eq!(&got, retry, "{name}: Event::retry");
        }
        if let Some(ms) = self.reconnection {
            assert_eq!(
                reference.reconnection_time_at_last_blank_line, ms,
                "{name}: reference reconnection time"
            );
            assert_eq!(whole.reconnection_time, ms, "{name}: reconnection_time");
        }
        assert_eq!(
            String::from_utf8_lossy(&whole.last_event_id),
            reference.last_event_id,
            "{name}: Parser::last_event_id"
        );
        let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
        for e in whole.events() {
            let raw = e.raw().as_ptr() as usize;
            assert!(
                range.contains(&raw) && raw + e.raw().len() <= range.end,
                "{name}: event not a slice of the input"
            );
            if e.data_range().is_some() && !e.data().is_empty() {
                assert!(range.contains(&(e.data().as_ptr() as usize)), "{name}");
            }
        }
        let want = whole.keys();

        let same = |run: &Run, how: &dyn Fn() -> String| {
            if run.keys() != want {
                panic!(
                    "{name}: {}: events differ\n got: {:?}\nwant: {:?}",
                    how(),
                    run.details(),
                    whole.details()
                );
            }
            assert!(run.concat() == input[..], "{name}: {}: not lossless", how());
            assert_eq!(run.tail, whole.tail, "{name}: {}: tail", how());
            assert_eq!(
                run.reconnection_time,
                whole.reconnection_time,
                "{name}: {}: reconnection time",
                how()
            );
            assert_eq!(
                run.last_event_id,
                whole.last_event_id,
                "{name}: {}: last event id",
                how()
            );
        };

        // 4. The vector's own pieces.
        if let Some(pieces) = &self.pieces {
            assert_eq!(pieces.concat(), input[..], "{name}: pieces must add up");
            let pieces: Vec<Bytes> = pieces.iter().map(|p| Bytes::copy_from_slice(p)).collect();
            for drain in [&[true][..], &[false]] {
                let run = run_pieces(&Config::new(), self.id(), &pieces, drain);
                same(&run, &|| format!("pieces {pieces:?} drain {drain:?}"));
            }
        }

        // 3. Splits.
        let n = input.len();
        for i in split_points(input) {
            same(&run_cuts(input, self.id(), &[i]), &|| {
                format!("split at {i}")
            });
        }
        if n <= EXHAUSTIVE_3 {
            for i in 0..=n {
                for j in i..=n {
                    same(&run_cuts(input, self.id(), &[i, j]), &|| {
                        format!("split at {i}, {j}")
                    });
                }
            }
        }
        let bytewise: Vec<usize> = (1..n).collect();
        same(&run_cuts(input, self.id(), &bytewise), &|| {
            "one byte at a time".into()
        });
        let pieces = sse_ref::pieces_at(input, &bytewise);
        let queued = run_pieces(&Config::new(), self.id(), &pieces, &[false]);
        same(&queued, &|| "one byte at a time, queued".into());
    }
}

/// Every split point for short inputs; for long ones the first and last
/// 64, a point on each side of every line end, and an even stride.
fn split_points(input: &[u8]) -> Vec<usize> {
    let n = input.len();
    if n <= EXHAUSTIVE_2 {
        return (0..=n).collect();
    }
    let mut v: Vec<usize> = (0..=64).chain(n - 64..=n).collect();
    for (i, b) in input.iter().enumerate() {
        if *b == b'\n' || *b == b'\r' {
            v.extend([i, i + 1]);
        }
    }
    v.extend((0..n).step_by(n / 256));
    v.sort_unstable();
    v.dedup();
    v
}

macro_rules! vectors {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident: $input:expr => [$(($t:expr, $d:expr, $i:expr)),* $(,)?]
            $(, $opt:ident = $val:expr)* ;
    )*) => {
        $(
            $(#[doc = $doc])*
            #[test]
            fn $name() {
                let input: Vec<u8> = $input.to_vec();
                let v = Vector::new(stringify!($name), &input, &[$(($t, $d, $i)),*]);
                $( let v = v.$opt($val); )*
                v.check();
            }
        )*
    };
}

fn long(n: usize, fill: u8) -> Vec<u8> {
    vec![fill; n]
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

vectors! {
    // ---- web-platform-tests eventsource/format-*.htm -------------------
    // (`resources/message.py` appends "\n\n" to the message.)

    /// format-bom.htm: a second BOM is not stripped, so it starts the field
    /// name ("\u{FEFF}data") and that block has no data.
    wpt_format_bom: b"\xEF\xBB\xBFdata:1\n\n\xEF\xBB\xBFdata:2\n\ndata:3\n\n"
        => [("message", "1", ""), ("message", "3", "")];
    /// format-bom-2.htm
    wpt_format_bom_2: b"\xEF\xBB\xBF\xEF\xBB\xBFdata:1\n\ndata:2\n\ndata:3\n\n"
        => [("message", "2", ""), ("message", "3", "")];
    /// format-comments.htm
    wpt_format_comments: cat(&[
            b"data:1\r:\0\n:\r\ndata:2\n:", &long(2048, b'x'), b"\rdata:3\n:data:fail\r:",
            &long(2048, b'x'), b"\ndata:4\n\n",
        ])
        => [("message", "1\n2\n3\n4", "")];
    /// format-data-before-final-empty-line.htm
    wpt_format_data_before_final_empty_line: b"retry:1000\ndata:test1\n\nid:test\ndata:test2"
        => [("message", "test1", "")],
        tail = b"id:test\ndata:test2", reconnection = Some(1000);
    /// format-field-data.htm
    wpt_format_field_data: b"data:\n\ndata\ndata\n\ndata:test\n\n"
        => [("message", "", ""), ("message", "\n", ""), ("message", "test", "")];
    /// format-field-event-empty.htm
    wpt_format_field_event_empty: b"event: \ndata:data\n\n" => [("message", "data", "")];
    /// format-field-event.htm
    wpt_format_field_event: b"event:test\ndata:x\n\ndata:x\n\n"
        => [("test", "x", ""), ("message", "x", "")];
    /// format-field-id.htm
    wpt_format_field_id: b"id: 1\ndata: 1\n\n" => [("message", "1", "1")];
    /// format-field-id-2.htm
    wpt_format_field_id_2: b"id:1\ndata:1\n\ndata:2\n\nid:\ndata:3\n\n"
        => [("message", "1", "1"), ("message", "2", "1"), ("message", "3", "")];
    /// format-field-id-3.htm: the id applies to the block it is in.
    wpt_format_field_id_3: b"data:hello\nid:1\n\n" => [("message", "hello", "1")];
    /// format-field-id-null.htm: an id containing NUL is ignored.
    wpt_format_field_id_null: b"id:1\ndata:a\n\nid:2\0\ndata:b\n\n"
        => [("message", "a", "1"), ("message", "b", "1")];
    /// format-field-parsing.htm
    wpt_format_field_parsing:
        b"data:\0\ndata:  2\rData:1\ndata\0:2\ndata:1\r\0data:4\nda-ta:3\rdata_5\ndata:3\rdata:\r\n data:32\ndata:4\n\n"
        => [("message", "\0\n 2\n1\n3\n\n4", "")];
    /// format-field-retry-bogus.htm
    wpt_format_field_retry_bogus: b"retry:3000\nretry:1000x\ndata:x\n\n"
        => [("message", "x", "")], retry = &[Some(3000)], reconnection = Some(3000);
    /// format-field-retry-empty.htm
    wpt_format_field_retry_empty: b"retry\ndata:test\n\n"
        => [("message", "test", "")], retry = &[None], reconnection = None;
    /// format-field-retry.htm
    wpt_format_field_retry: b"retry:03000\ndata:x\n\n"
        => [("message", "x", "")], retry = &[Some(3000)], reconnection = Some(3000);
    /// format-field-unknown.htm
    wpt_format_field_unknown:
        b"data:test\n data\ndata\nfoobar:xxx\njustsometext\n:thisisacommentyay\ndata:test\n\n"
        => [("message", "test\n\ntest", "")];
    /// format-leading-space.htm
    wpt_format_leading_space: b"data:\ttest\rdata: \ndata:test\n\n"
        => [("message", "\ttest\n\ntest", "")];
    /// format-newlines.htm: ends on a lone CR, which still dispatches.
    wpt_format_newlines: b"data:test\r\ndata\ndata:test\r\n\r"
        => [("message", "test\n\ntest", "")];
    /// format-null-character.htm
    wpt_format_null_character: b"data:\0\n\n\n\n" => [("message", "\0", "")];
    /// format-utf-8.htm
    wpt_format_utf_8: "data:ok\u{20AC}\n\n".as_bytes() => [("message", "ok\u{20AC}", "")];

    // ---- the examples in WHATWG HTML "Server-sent events" --------------

    spec_example_stock: b"data: YHOO\ndata: +2\ndata: 10\n\n"
        => [("message", "YHOO\n+2\n10", "")];
    spec_example_ids:
        b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n"
        => [("message", "first event", "1"), ("message", "second event", ""),
            ("message", " third event", "")];
    spec_example_empty_data: b"data\n\ndata\ndata\n\ndata:"
        => [("message", "", ""), ("message", "\n", "")], tail = b"data:";
    spec_example_space: b"data:test\n\ndata: test\n\n"
        => [("message", "test", ""), ("message", "test", "")];

    // ---- byte order mark -----------------------------------------------

    bom_stripped: b"\xEF\xBB\xBFdata: a\n\n" => [("message", "a", "")];
    bom_second_kept_in_data: b"\xEF\xBB\xBFdata: \xEF\xBB\xBFa\n\n"
        => [("message", "\u{FEFF}a", "")];
    bom_not_at_start_is_not_stripped: b"data: a\n\n\xEF\xBB\xBFdata: b\n\ndata: c\n\n"
        => [("message", "a", ""), ("message", "c", "")];
    bom_partial_is_not_stripped: b"\xEF\xBBdata: a\n\ndata: b\n\n"
        => [("message", "b", "")];
    bom_partial_alone_on_a_line: b"\xEF\n\ndata: b\n\n" => [("message", "b", "")];
    bom_then_blank_line: b"\xEF\xBB\xBF\ndata: a\n\n" => [("message", "a", "")];
    bom_then_comment: b"\xEF\xBB\xBF: hi\r\n\r\ndata: a\r\n\r\n" => [("message", "a", "")];
    bom_only: b"\xEF\xBB\xBF" => [], tail = b"\xEF\xBB\xBF";
    bom_split_across_reads: b"\xEF\xBB\xBFdata: a\n\n" => [("message", "a", "")],
        pieces = &[b"\xEF", b"\xBB", b"\xBF", b"data: a\n\n"];
    bom_split_two_one: b"\xEF\xBB\xBFdata: a\n\n" => [("message", "a", "")],
        pieces = &[b"\xEF\xBB", b"\xBFdata: a\n\n"];
    bom_after_empty_first_read: b"\xEF\xBB\xBFdata: a\n\n" => [("message", "a", "")],
        pieces = &[b"", b"\xEF\xBB\xBFdata: a\n\n"];
    bom_split_between_empty_reads: b"\xEF\xBB\xBFdata: a\n\n" => [("message", "a", "")],
        pieces = &[b"", b"\xEF", b"", b"\xBB\xBF", b"", b"data: a\n\n"];
    bom_twice_split: b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n"
        => [("message", "b", "")],
        pieces = &[b"\xEF\xBB", b"\xBF\xEF", b"\xBB\xBFdata: a\n\ndata: b\n\n"];

    // ---- line ends -----------------------------------------------------

    line_end_lf: b"data: a\ndata: b\n\n" => [("message", "a\nb", "")];
    line_end_crlf: b"data: a\r\ndata: b\r\n\r\n" => [("message", "a\nb", "")];
    line_end_cr: b"data: a\rdata: b\r\r" => [("message", "a\nb", "")];
    line_end_mixed: b"data: a\rdata: b\r\ndata: c\n\r\ndata: d\r\r\n\n"
        => [("message", "a\nb\nc", ""), ("message", "d", "")];
    line_end_lf_cr_is_two_line_ends: b"data: a\n\rdata: b\n\n"
        => [("message", "a", ""), ("message", "b", "")];
    line_end_cr_cr: b"data: a\r\rdata: b\r\r" => [("message", "a", ""), ("message", "b", "")];
    line_end_cr_at_end_of_read: b"data: a\r\n\r\ndata: b\r\n\r\n"
        => [("message", "a", ""), ("message", "b", "")],
        pieces = &[b"data: a\r", b"\n\r", b"\ndata: b\r", b"\n\r", b"\n"];
    line_end_cr_at_end_of_read_then_data: b"data: a\rdata: b\r\r"
        => [("message", "a\nb", "")],
        pieces = &[b"data: a\r", b"data: b\r", b"\r"];
    line_end_blank_cr_then_lf_next_read: b"data: a\n\r\ndata: b\n\n"
        => [("message", "a", ""), ("message", "b", "")],
        pieces = &[b"data: a\n\r", b"\ndata: b\n\n"];
    line_end_lone_cr_blank_dispatches_at_once: b"data: a\n\r"
        => [("message", "a", "")];
    line_end_crlf_blank_lines_between_events: b"data: a\r\n\r\n\r\n\r\ndata: b\r\n\r\n"
        => [("message", "a", ""), ("message", "b", "")];

    // ---- comments ------------------------------------------------------

    comment_only_block: b": hello\n\n" => [];
    comment_empty: b":\n\n" => [];
    comment_between_data_lines: b"data: a\n: c\ndata: b\n\n" => [("message", "a\nb", "")];
    comment_keep_alive_then_event: b": ping\n\n: ping\n\ndata: x\n\n" => [("message", "x", "")];
    comment_looks_like_field: b":data: x\n\n" => [];
    comment_with_cr_lf_inside_block: b"data: a\r:x\r\n:y\rdata: b\n\n"
        => [("message", "a\nb", "")];

    // ---- field parsing -------------------------------------------------

    field_space_removed_once: b"data:  two\n\n" => [("message", " two", "")];
    field_without_space: b"data:x\n\n" => [("message", "x", "")];
    field_tab_is_not_a_space: b"data:\tx\n\n" => [("message", "\tx", "")];
    field_trailing_space_kept: b"data: x \n\n" => [("message", "x ", "")];
    field_colon_in_value: b"data: a:b: c\n\n" => [("message", "a:b: c", "")];
    field_value_only_space: b"data: \n\n" => [("message", "", "")];
    field_value_two_spaces: b"data:  \n\n" => [("message", " ", "")];
    field_name_without_colon: b"foo\ndata: x\n\n" => [("message", "x", "")];
    field_name_is_case_sensitive: b"DATA: x\nData: y\nEvent: e\n\n" => [];
    field_name_space_before_colon: b"data : x\n\n" => [];
    field_name_leading_space: b" data: x\n\n" => [];
    field_unknown_ignored: b"foo: bar\ndata: x\nbaz\n\n" => [("message", "x", "")];
    field_unknown_only: b"foo: bar\n\n" => [];

    // ---- data ----------------------------------------------------------

    data_join_with_lf: b"data: a\ndata: b\ndata: c\n\n" => [("message", "a\nb\nc", "")];
    data_empty: b"data:\n\n" => [("message", "", "")];
    data_without_colon: b"data\n\n" => [("message", "", "")];
    data_two_empty_lines: b"data:\ndata:\n\n" => [("message", "\n", "")];
    data_trailing_empty_line: b"data: a\ndata:\n\n" => [("message", "a\n", "")];
    data_leading_empty_line: b"data:\ndata: a\n\n" => [("message", "\na", "")];
    data_without_colon_then_value: b"data\ndata: a\n\n" => [("message", "\na", "")];
    data_json: b"data: {\"a\": [1, 2]}\n\ndata: [DONE]\n\n"
        => [("message", "{\"a\": [1, 2]}", ""), ("message", "[DONE]", "")];
    data_nul: b"data: a\0b\n\n" => [("message", "a\0b", "")];
    data_only_nul: b"data:\0\n\n" => [("message", "\0", "")];

    // ---- event ---------------------------------------------------------

    event_type: b"event: add\ndata: x\n\n" => [("add", "x", "")];
    event_empty_is_message: b"event:\ndata: x\n\n" => [("message", "x", "")];
    event_without_colon_is_message: b"event\ndata: x\n\n" => [("message", "x", "")];
    event_last_wins: b"event: a\nevent: b\ndata: x\n\n" => [("b", "x", "")];
    event_empty_after_set: b"event: a\nevent:\ndata: x\n\n" => [("message", "x", "")];
    event_does_not_persist: b"event: a\ndata: x\n\ndata: y\n\n"
        => [("a", "x", ""), ("message", "y", "")];
    event_without_data_is_reset: b"event: a\n\ndata: y\n\n" => [("message", "y", "")];
    event_value_keeps_second_space: b"event:  a\ndata: x\n\n" => [(" a", "x", "")];
    event_with_nul: b"event: a\0\ndata: x\n\n" => [("a\0", "x", "")];
    event_after_data: b"data: x\nevent: late\n\n" => [("late", "x", "")];

    // ---- id ------------------------------------------------------------

    id_basic: b"id: 1\ndata: a\n\n" => [("message", "a", "1")];
    id_persists: b"id: 1\ndata: a\n\ndata: b\n\nevent: e\ndata: c\n\n"
        => [("message", "a", "1"), ("message", "b", "1"), ("e", "c", "1")];
    id_set_without_data: b"id: 7\n\ndata: a\n\n" => [("message", "a", "7")];
    id_set_in_comment_block: b"id: 7\n: x\n\ndata: a\n\n" => [("message", "a", "7")];
    id_empty_resets: b"id: 1\ndata: a\n\nid:\ndata: b\n\ndata: c\n\n"
        => [("message", "a", "1"), ("message", "b", ""), ("message", "c", "")];
    id_without_colon_resets: b"id: 1\ndata: a\n\nid\ndata: b\n\n"
        => [("message", "a", "1"), ("message", "b", "")];
    id_empty_without_data_resets: b"id: 1\ndata: a\n\nid:\n\ndata: b\n\n"
        => [("message", "a", "1"), ("message", "b", "")];
    id_with_nul_ignored: b"id: 1\ndata: a\n\nid: 2\0\ndata: b\n\n"
        => [("message", "a", "1"), ("message", "b", "1")];
    id_only_nul_ignored: b"id: \0\ndata: a\n\n" => [("message", "a", "")];
    id_nul_does_not_undo_earlier_id_in_block: b"id: 3\nid: 4\0\ndata: a\n\n"
        => [("message", "a", "3")];
    id_nul_then_valid_in_block: b"id: 4\0\nid: 5\ndata: a\n\n" => [("message", "a", "5")];
    id_after_data_in_block: b"data: a\nid: 5\n\n" => [("message", "a", "5")];
    id_last_wins: b"id: 1\nid: 2\ndata: a\n\n" => [("message", "a", "2")];
    id_keeps_inner_and_trailing_spaces: b"id:  x y \ndata: a\n\n" => [("message", "a", " x y ")];
    id_invalid_utf8: b"id: \xFF\ndata: a\n\n" => [("message", "a", "\u{FFFD}")];
    id_in_unterminated_block_not_used: b"id: 1\ndata: a\n\nid: 2\ndata: b"
        => [("message", "a", "1")], tail = b"id: 2\ndata: b";
    id_with_long_comment_in_block: cat(&[b"id: 9\n: ", &long(5000, b'c'), b"\ndata: a\n\n"])
        => [("message", "a", "9")];

    // ---- initial last event ID -----------------------------------------

    initial_id_used: b"data: a\n\nid: 2\ndata: b\n\ndata: c\n\n"
        => [("message", "a", "5"), ("message", "b", "2"), ("message", "c", "2")],
        initial_id = "5";
    initial_id_reset_by_empty_id: b"id\ndata: a\n\n" => [("message", "a", "")],
        initial_id = "5";
    initial_id_kept_on_nul_id: b"id: \0\ndata: a\n\n" => [("message", "a", "5")],
        initial_id = "5";
    initial_id_without_events: b": nothing\n\n" => [], initial_id = "5";

    // ---- retry ---------------------------------------------------------

    retry_digits: b"retry: 1500\ndata: a\n\n" => [("message", "a", "")],
        retry = &[Some(1500)], reconnection = Some(1500);
    retry_leading_zeros: b"retry: 0010\ndata: a\n\n" => [("message", "a", "")],
        retry = &[Some(10)], reconnection = Some(10);
    retry_zero: b"retry:0\ndata: a\n\n" => [("message", "a", "")],
        retry = &[Some(0)], reconnection = Some(0);
    retry_invalid_keeps_earlier: b"retry: 1500\nretry: 15a\ndata: a\n\n"
        => [("message", "a", "")], retry = &[Some(1500)], reconnection = Some(1500);
    retry_negative_ignored: b"retry: -5\ndata: a\n\n" => [("message", "a", "")],
        retry = &[None], reconnection = None;
    retry_plus_ignored: b"retry: +5\ndata: a\n\n" => [("message", "a", "")],
        retry = &[None], reconnection = None;
    retry_decimal_ignored: b"retry: 5.0\ndata: a\n\n" => [("message", "a", "")],
        retry = &[None], reconnection = None;
    retry_extra_space_ignored: b"retry:  5\ndata: a\n\n" => [("message", "a", "")],
        retry = &[None], reconnection = None;
    retry_trailing_space_ignored: b"retry: 5 \ndata: a\n\n" => [("message", "a", "")],
        retry = &[None], reconnection = None;
    retry_empty_ignored: b"retry:\ndata: a\n\n" => [("message", "a", "")],
        retry = &[None], reconnection = None;
    retry_non_ascii_digits_ignored: "retry: \u{0661}\u{0662}\ndata: a\n\n".as_bytes()
        => [("message", "a", "")], retry = &[None], reconnection = None;
    retry_without_data: b"retry: 7\n\ndata: a\n\n" => [("message", "a", "")],
        retry = &[None], reconnection = Some(7);
    retry_later_block_wins: b"retry: 7\ndata: a\n\nretry: 8\ndata: b\n\n"
        => [("message", "a", ""), ("message", "b", "")],
        retry = &[Some(7), Some(8)], reconnection = Some(8);
    /// WHATWG sets the reconnection time as soon as the `retry` line is
    /// processed; the crate interprets a block only once it is complete
    /// (so that the result does not depend on chunking under a size limit),
    /// so a `retry` in an unterminated last block has no effect.
    retry_in_unterminated_block_not_applied: b"data: a\n\nretry: 5\n"
        => [("message", "a", "")], tail = b"retry: 5\n", reconnection = None;
    retry_overflow_saturates: b"retry: 99999999999999999999999\ndata: a\n\n"
        => [("message", "a", "")], retry = &[Some(u64::MAX)], reconnection = Some(u64::MAX);

    // ---- dispatch ------------------------------------------------------

    dispatch_empty_input: b"" => [];
    dispatch_blank_lines_only: b"\n\n\r\n\r" => [];
    dispatch_blank_lines_before_event: b"\n\n\ndata: a\n\n" => [("message", "a", "")];
    dispatch_only_fields_without_data: b"event: a\nid: 1\nretry: 5\nfoo\n\ndata: b\n\n"
        => [("message", "b", "1")];
    dispatch_unterminated_block: b"data: a\n\ndata: b" => [("message", "a", "")],
        tail = b"data: b";
    dispatch_unterminated_after_line_end: b"data: a\n\ndata: b\n" => [("message", "a", "")],
        tail = b"data: b\n";
    dispatch_unterminated_after_cr: b"data: a\r" => [], tail = b"data: a\r";
    dispatch_unterminated_after_crlf: b"data: a\r\n" => [], tail = b"data: a\r\n";
    dispatch_unterminated_comment: b"data: a\n\n: x" => [("message", "a", "")], tail = b": x";
    dispatch_unterminated_no_line_end: b"data: a" => [], tail = b"data: a";
    dispatch_many_events: b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n"
        => [("message", "1", ""), ("message", "2", ""), ("message", "3", ""),
            ("message", "4", "")];

    // ---- UTF-8 ---------------------------------------------------------

    utf8_valid_multibyte: "data: h\u{e9}llo \u{65e5}\u{672c} \u{1F389}\n\n".as_bytes()
        => [("message", "h\u{e9}llo \u{65e5}\u{672c} \u{1F389}", "")];
    utf8_invalid_bytes: b"data: \xFF\xFEa\n\n" => [("message", "\u{FFFD}\u{FFFD}a", "")];
    utf8_truncated_sequence: b"data: \xE2\x82\n\n" => [("message", "\u{FFFD}", "")];
    utf8_truncated_sequence_at_end_of_line: b"data: a\xE2\x82\ndata: \xACb\n\n"
        => [("message", "a\u{FFFD}\n\u{FFFD}b", "")];
    utf8_surrogate: b"data: \xED\xA0\x80\n\n"
        => [("message", "\u{FFFD}\u{FFFD}\u{FFFD}", "")];
    utf8_overlong: b"data: \xC0\xAF\n\n" => [("message", "\u{FFFD}\u{FFFD}", "")];
    utf8_invalid_event_type: b"event: \xC3\ndata: a\n\n" => [("\u{FFFD}", "a", "")];
    utf8_invalid_field_name: b"dat\xE1: a\n\n" => [];
    utf8_invalid_then_valid_events: b"data: \x80\n\ndata: ok\n\n"
        => [("message", "\u{FFFD}", ""), ("message", "ok", "")];

    // ---- long lines ----------------------------------------------------

    long_line_exhaustive: cat(&[b"data: ", &long(3000, b'a'), b"\n\n"])
        => [("message", &"a".repeat(3000), "")];
    long_line: cat(&[b"data: ", &long(200_000, b'b'), b"\r\n\r\n"])
        => [("message", &"b".repeat(200_000), "")];
    long_multi_line_data: cat(&[b"data: ", &long(50_000, b'c'), b"\rdata: ", &long(50_000, b'd'),
            b"\r\r"])
        => [("message", &["c".repeat(50_000), "d".repeat(50_000)].join("\n"), "")];
    long_comment_then_event: cat(&[b":", &long(100_000, b' '), b"\n\ndata: x\n\n"])
        => [("message", "x", "")];
    long_unterminated: cat(&[b"data: ", &long(100_000, b'e')])
        => [], tail = &cat(&[b"data: ", &long(100_000, b'e')]);
}

/// The one documented difference from WHATWG among the vectors above: the
/// standard's reconnection time already changes with the `retry` line of an
/// unterminated block; `Parser::reconnection_time` only with complete
/// blocks (see `retry_in_unterminated_block_not_applied`).
#[test]
fn whatwg_reconnection_time_changes_before_the_block_ends() {
    let input = b"data: a\n\nretry: 5\n";
    let reference = interpret(input, None);
    assert_eq!(reference.reconnection_time, Some(5));
    assert_eq!(reference.reconnection_time_at_last_blank_line, None);
    let run = run_cuts(&Bytes::from_static(input), None, &[]);
    assert_eq!(run.reconnection_time, None);
}
