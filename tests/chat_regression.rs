//! Regression tests for bugs found by the differential tests, one per bug,
//! named after what broke.

mod common;

use common::chat_ref::{self, RefOpts};

/// A choice whose `index` is not a `u32` (`"0"`, `-1`, `1.0`, `1e0`, ...) is not
/// understood: the fast path ignored it, but the complete scanner (used for
/// finish chunks and chunks with escaped keys) took it as choice 0, so a
/// stray entry could finish choice 0 early or add content to it, depending
/// on how the other keys of the chunk happened to be written.
#[test]
fn invalid_choice_index_is_ignored_on_every_path() {
    let head = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A [1]\"},\"finish_reason\":null}]}\n\n";
    for bad in ["\"0\"", "-1", "1.0", "1e0", "null", "4294967296"] {
        // 1. A finish chunk (slow path) holding a stray entry with a bad
        //    index next to a real finish of choice 1.
        let input = format!(
            "{head}data: {{\"id\":\"c\",\"choices\":[{{\"index\":1,\"delta\":{{}},\"finish_reason\":\"stop\"}},{{\"index\":{bad},\"delta\":{{\"content\":\" [2]\"}},\"finish_reason\":\"stop\"}}]}}\n\n\
data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
        );
        let o = RefOpts {
            n: 2,
            ..RefOpts::default()
        };
        let (out, _, found) = chat_ref::check_chat(
            bad,
            input.as_bytes(),
            &chat_ref::make_sources(2),
            &o,
            &[1, 7],
        );
        assert_eq!(found.len(), 1, "{bad}");
        assert_eq!(found[0].0, 0);
        assert_eq!(
            found[0].1.as_array().unwrap().len(),
            1,
            "{bad}: ` [2]` is not choice 0's"
        );
        let s = String::from_utf8(out).unwrap();
        let ann = s.find("\"annotations\"").unwrap();
        let last_finish = s
            .rfind("{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}")
            .unwrap();
        assert!(
            ann < last_finish,
            "{bad}: annotations before choice 0's own finish chunk"
        );

        // 2. A chunk with an escaped key (complete scanner) holding a stray
        //    entry: its content is not choice 0's.
        let input = format!(
            "{head}data: {{\"id\":\"c\",\"choices\":[{{\"\\u0069ndex\":0,\"delta\":{{\"content\":\"b\"}}}},{{\"index\":{bad},\"delta\":{{\"content\":\" [2]\"}}}}]}}\n\n\
data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n"
        );
        let (_, _, found) = chat_ref::check_chat(
            bad,
            input.as_bytes(),
            &chat_ref::make_sources(2),
            &RefOpts::default(),
            &[1, 7],
        );
        assert_eq!(found[0].1.as_array().unwrap().len(), 1, "{bad}");
    }
}

/// `finish` handles the complete frames still in the parser; it queued
/// only the pieces of modified events and dropped every pass-through event
/// (the hot path returned them instead of queueing them), so a caller that
/// fed everything and called `finish` before draining lost most of the
/// stream.
#[test]
fn finish_before_draining_loses_nothing() {
    use std::sync::Arc;

    use bytes::Bytes;
    use citestream::{ChatStream, MessagesStream, Sources, StreamRewriter};

    let sources = Arc::new(Sources::new(chat_ref::make_sources(3)));
    let o = RefOpts::default();
    for (input, chat) in [
        (&include_bytes!("../examples/lisbon/upstream.sse")[..], true),
        (
            include_bytes!("fixtures/upstream/perplexity_sonar_citations.sse"),
            true,
        ),
        (
            include_bytes!("fixtures/upstream/anthropic_basic_ping.sse"),
            false,
        ),
    ] {
        let mut rw: Box<dyn StreamRewriter> = if chat {
            Box::new(ChatStream::new(sources.clone(), o.rewrite_options()))
        } else {
            Box::new(MessagesStream::new(sources.clone(), o.rewrite_options()))
        };
        let drained = chat_ref::drive(rw.as_mut(), &[input]);
        let mut rw: Box<dyn StreamRewriter> = if chat {
            Box::new(ChatStream::new(sources.clone(), o.rewrite_options()))
        } else {
            Box::new(MessagesStream::new(sources.clone(), o.rewrite_options()))
        };
        // Two pieces, no draining in between, then finish.
        let (a, b) = input.split_at(input.len() / 2);
        rw.feed(Bytes::copy_from_slice(a));
        rw.feed(Bytes::copy_from_slice(b));
        rw.finish();
        let mut out = Vec::new();
        while let Some(x) = rw.next_output() {
            out.extend_from_slice(&x);
        }
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&drained)
        );
    }
}
