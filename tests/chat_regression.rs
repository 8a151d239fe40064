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
