//! Every recorded upstream stream through the streaming rewriters, at read
//! sizes 1, 5, 4096 and whole, with 0, 1, 3 and 10 sources, each dialect,
//! `n` = 1 and the stream's real `n`: identical output across read sizes,
//! and exactly the structure the reference (`common::chat_ref`) expects.

mod common;

use std::path::PathBuf;

use citestream::Dialect;
use citestream::cite::OffsetUnit;
use common::chat_ref::{self, RefOpts};

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    assert_eq!(v.len(), 34, "fixture count changed");
    v
}

const DIALECTS: [Dialect; 3] = [Dialect::SOURCES, Dialect::CITATIONS, Dialect::BOTH];
const READS: [usize; 3] = [1, 5, 4096];

/// The `n` each recording was made with.
fn real_n(name: &str) -> u32 {
    if name.contains("_n3_") { 3 } else { 1 }
}

#[test]
fn chat_fixtures_all_read_sizes_sources_dialects() {
    let mut annotated = 0;
    let mut topped = 0;
    for (name, input) in fixtures() {
        if name.starts_with("anthropic_") {
            continue;
        }
        for nsrc in [0, 1, 3, 10] {
            let sources = chat_ref::make_sources(nsrc);
            for dialect in DIALECTS {
                let mut ns = vec![1];
                if real_n(&name) != 1 {
                    ns.push(real_n(&name));
                }
                for n in ns {
                    let o = RefOpts {
                        dialect,
                        n,
                        ..RefOpts::default()
                    };
                    let ctx = format!("{name} sources={nsrc} {dialect:?} n={n}");
                    // Byte-at-a-time only once per fixture and source count
                    // (it dominates the run time).
                    let reads: &[usize] = if dialect == Dialect::BOTH {
                        &READS
                    } else {
                        &READS[1..]
                    };
                    let (out, ex, _) = chat_ref::check_chat(&ctx, &input, &sources, &o, reads);
                    if nsrc == 0 {
                        assert_eq!(out, input, "{ctx}: no sources must mean no change");
                    }
                    annotated += ex.markers.iter().filter(|(_, m)| !m.is_empty()).count();
                    topped += usize::from(ex.top);
                }
            }
        }
    }
    // The harness must actually exercise additions.
    assert!(topped > 100, "only {topped} runs with top-level additions");
    assert!(annotated > 0, "no fixture produced annotations");
}

#[test]
fn chat_fixtures_offset_units() {
    for (name, input) in fixtures() {
        if name.starts_with("anthropic_") {
            continue;
        }
        for unit in [OffsetUnit::Utf16, OffsetUnit::Bytes] {
            let o = RefOpts {
                unit,
                n: real_n(&name),
                ..RefOpts::default()
            };
            let ctx = format!("{name} {unit:?}");
            chat_ref::check_chat(&ctx, &input, &chat_ref::make_sources(3), &o, &[7]);
        }
    }
}

#[test]
fn messages_fixtures_all_read_sizes() {
    for (name, input) in fixtures() {
        if !name.starts_with("anthropic_") {
            continue;
        }
        for nsrc in [0, 1, 3, 10] {
            let sources = chat_ref::make_sources(nsrc);
            for dialect in DIALECTS {
                let o = RefOpts {
                    dialect,
                    // The cited subset (from the text deltas) with both.
                    only_cited: dialect == Dialect::BOTH,
                    ..RefOpts::default()
                };
                let ctx = format!("{name} sources={nsrc} {dialect:?}");
                let (out, ex) = chat_ref::check_messages(&ctx, &input, &sources, &o, &READS);
                if nsrc == 0 {
                    assert_eq!(out, input, "{ctx}");
                }
                let has_delta = input
                    .windows(b"event: message_delta".len())
                    .any(|w| w == b"event: message_delta");
                assert_eq!(ex.top, nsrc > 0 && has_delta, "{ctx}");
            }
        }
    }
}

#[test]
fn fixtures_with_crlf_and_cr_line_ends() {
    // The same streams re-framed with CRLF and with CR line ends: the CR/LF
    // pair is split by odd read sizes.
    for (name, input) in fixtures() {
        let text = String::from_utf8_lossy(&input).into_owned();
        for (ends, framed) in [
            ("crlf", text.replace('\n', "\r\n")),
            ("cr", text.replace('\n', "\r")),
        ] {
            let ctx = format!("{name} {ends}");
            let sources = chat_ref::make_sources(3);
            let o = RefOpts {
                dialect: Dialect::BOTH,
                n: real_n(&name),
                ..RefOpts::default()
            };
            if name.starts_with("anthropic_") {
                chat_ref::check_messages(&ctx, framed.as_bytes(), &sources, &o, &[3, 5]);
            } else {
                chat_ref::check_chat(&ctx, framed.as_bytes(), &sources, &o, &[3, 5]);
            }
        }
    }
}
