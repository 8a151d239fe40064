//! Every recorded upstream stream in `tests/fixtures/upstream/` parses to
//! the reference parser's events at every read size and under random
//! chunkings, losslessly; also with its line ends rewritten to CRLF and to
//! CR, and behind a BOM.

mod common;

use bytes::Bytes;
use citestream::sse::Config;
use common::sse_ref::{Rng, Run, interpret, pieces_at, pieces_of, run_pieces};

/// Read sizes every fixture is fed at (plus the whole file in one piece).
const READ_SIZES: &[usize] = &[1, 2, 3, 5, 7, 64, 1460, 4096];
/// Read sizes for the rewritten variants (CRLF, CR, BOM).
const VARIANT_READ_SIZES: &[usize] = &[1, 7, 1460];
/// Random chunkings per fixture, pieces of 1..=MAX_RANDOM_PIECE bytes.
const RANDOM_CHUNKINGS: u64 = 8;
const MAX_RANDOM_PIECE: usize = 300;

fn check_stream(name: &str, input: &Bytes, read_sizes: &[usize], random: u64) -> Run {
    let reference = interpret(input, None);
    let whole = run_pieces(&Config::new(), None, std::slice::from_ref(input), &[]);
    assert_eq!(
        whole.details(),
        reference.events,
        "{name}: whole input vs reference"
    );
    assert!(
        whole.concat() == input[..],
        "{name}: whole input not lossless"
    );
    assert!(!reference.events.is_empty(), "{name}: no events at all");
    let want = whole.keys();
    let same = |run: &Run, how: &str| {
        assert!(run.keys() == want, "{name}: {how}: events differ");
        assert!(run.concat() == input[..], "{name}: {how}: not lossless");
        assert_eq!(run.tail, whole.tail, "{name}: {how}: finish() tail");
    };
    for &size in read_sizes {
        let run = run_pieces(&Config::new(), None, &pieces_of(input, size), &[]);
        same(&run, &format!("read size {size}"));
    }
    let mut rng = Rng::new(input.len() as u64);
    for k in 0..random {
        let cuts = rng.cuts(input.len(), MAX_RANDOM_PIECE);
        // Sometimes let a few pieces queue up before draining.
        let drain = [true, k % 2 == 0, true];
        let run = run_pieces(&Config::new(), None, &pieces_at(input, &cuts), &drain);
        same(&run, &format!("random chunking {k}"));
    }
    whole
}

fn rewrite_line_ends(input: &[u8], end: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(input.len() * 2);
    for &b in input {
        if b == b'\n' {
            out.extend_from_slice(end);
        } else {
            out.push(b);
        }
    }
    Bytes::from(out)
}

fn check_fixture(name: &str, bytes: &'static [u8]) {
    let input = Bytes::from_static(bytes);
    let whole = check_stream(name, &input, READ_SIZES, RANDOM_CHUNKINGS);

    // Recorded streams carry JSON (or OpenAI's `[DONE]`) in every event; a
    // mis-split or mis-joined data field would not parse.
    for e in whole.events() {
        let data = e.data();
        assert!(
            data == b"[DONE]" || serde_json::from_slice::<serde_json::Value>(data).is_ok(),
            "{name}: event data is not JSON: {:?}",
            e.data_str()
        );
    }

    // Same events with other line ends and behind a BOM.
    let crlf = rewrite_line_ends(bytes, b"\r\n");
    let cr = rewrite_line_ends(bytes, b"\r");
    let bom = Bytes::from([&b"\xEF\xBB\xBF"[..], bytes].concat());
    for (variant, input) in [("CRLF", crlf), ("CR", cr), ("BOM", bom)] {
        let run = check_stream(
            &format!("{name} ({variant})"),
            &input,
            VARIANT_READ_SIZES,
            2,
        );
        assert_eq!(run.keys(), whole.keys(), "{name}: {variant} variant");
    }
}

macro_rules! fixtures {
    ($($name:ident)*) => {
        $(
            #[test]
            #[allow(non_snake_case)]
            fn $name() {
                check_fixture(
                    stringify!($name),
                    include_bytes!(concat!("fixtures/upstream/", stringify!($name), ".sse")),
                );
            }
        )*

        /// The table above lists every fixture in the directory.
        #[test]
        fn every_fixture_is_tested() {
            let mut listed = vec![$(concat!(stringify!($name), ".sse")),*];
            listed.sort_unstable();
            let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/upstream");
            let mut found: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".sse"))
                .collect();
            found.sort_unstable();
            assert_eq!(found, listed);
        }
    };
}

fixtures! {
    alibaba_qwen_reasoning
    anthropic_basic_ping
    anthropic_event_error_overloaded
    anthropic_refusal_stop_details
    anthropic_tool_use
    anthropic_trailing_spaces_in_json
    anthropic_web_search_citations_delta
    anthropic_web_search_citations_delta_2
    anthropic_web_search_vercel
    azure_gpt5mini_prompt_filter_first_chunk
    azure_model_router_prompt_filter
    azure_o4mini_tool_call
    deepseek_chat_tool_call_reasoning
    deepseek_reasoner_reasoning_content
    gemini_openai_compat_finish_with_content
    groq_gptoss_event_error_midstream
    groq_kimi_k2_usage_twice
    llamacpp_gptoss_reasoning_timings
    mistral_tool_call_no_index
    openai_gpt41_error_object_midstream
    openai_gpt41nano_text_usage
    openai_gpt4o_finish_length
    openai_gpt4o_logprobs
    openai_gpt4o_mini_search_preview_annotations_chunk_PARTIAL
    openai_gpt4o_n3_interleaved_choices
    openai_gpt4o_parallel_tool_calls
    openai_gpt4o_refusal
    openai_gpt4o_text_usage_chunk
    openai_gpt5_moderation_chunk_after_usage
    openrouter_error_chunk_after_finish
    openrouter_web_search_annotations
    perplexity_sonar_citations
    xai_grok_code_fast_reasoning_content
    zai_glm47_reasoning_content
}

/// All fixtures back to back in one stream (as a long-lived connection
/// would carry them), fed at a typical network read size and one byte at
/// a time: the reference's events, as many as the parts have.
#[test]
fn all_fixtures_concatenated() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/upstream");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        .collect();
    names.sort();
    let mut all = Vec::new();
    let mut parts = 0;
    for path in names {
        let mut bytes = std::fs::read(&path).unwrap();
        // Close an unterminated last event so the parts stay separate.
        bytes.extend_from_slice(b"\n\n");
        parts += interpret(&bytes, None).events.len();
        all.extend_from_slice(&bytes);
    }
    let all = Bytes::from(all);
    let want = interpret(&all, None).keys();
    assert_eq!(want.len(), parts);
    for size in [1, 1460] {
        let run = run_pieces(&Config::new(), None, &pieces_of(&all, size), &[]);
        assert_eq!(run.ref_events(), want, "read size {size}");
        assert!(run.concat() == all[..]);
        assert!(run.tail.is_none());
    }
}
