//! Feeds one long content body to a `MarkerTracker` in one call, for
//! instruction counts per byte under `valgrind --tool=callgrind` (the
//! whole-body case: a non-streaming response, or a stream read whole).
//!
//! ```text
//! cite_callgrind <json|text> [repeat]
//! ```
//!
//! Collect only inside `measured`
//! (`--toggle-collect='*cite_callgrind::measured*'`); prints
//! `<bytes> <markers>`.

use citestream::cite::{MarkerTracker, OffsetUnit};

/// About 8 KB of chat content as a raw JSON string body: prose, markers,
/// escapes, non-ASCII, inline code and a fence.
fn body(json: bool) -> Vec<u8> {
    let para = if json {
        r#"Streaming responses arrive as server-sent events [1], and each chunk carries one token of the answer. The parser reads the \"data\" lines, decodes the JSON and forwards the text [2][3]. Caf\u00e9 na\u00efve \u6771\u4eac \ud83d\ude00 caf\u00e9 \u2014 the tracker counts characters, not bytes: `code [1]` is ignored.\n\n```rust\nlet x = v[1];\n```\n\nSee the sources [1] for details; search results [4] and citations follow.\n\n"#
    } else {
        "Streaming responses arrive as server-sent events [1], and each chunk carries one token of the answer. The parser reads the \"data\" lines, decodes the JSON and forwards the text [2][3]. Café naïve 東京 😀 café — the tracker counts characters, not bytes: `code [1]` is ignored.\n\n```rust\nlet x = v[1];\n```\n\nSee the sources [1] for details; search results [4] and citations follow.\n\n"
    };
    para.repeat(8192 / para.len() + 1).into_bytes()
}

#[inline(never)]
fn measured(body: &[u8], json: bool, repeat: usize) -> usize {
    let mut markers = 0;
    for _ in 0..repeat {
        let mut t = MarkerTracker::new(9, OffsetUnit::Utf16);
        if json {
            t.push_json(body);
        } else {
            t.push_text(body);
        }
        t.finish();
        markers += t.markers().len();
    }
    markers
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = match args.first().map(String::as_str) {
        Some("json") => true,
        Some("text") => false,
        _ => {
            eprintln!("usage: cite_callgrind <json|text> [repeat]");
            std::process::exit(2)
        }
    };
    let repeat = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(1);
    let body = body(json);
    let markers = measured(std::hint::black_box(&body), json, repeat);
    println!("{} {markers}", body.len() * repeat);
}
