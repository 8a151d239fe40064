//! The reference checker itself must be able to fail: feed it outputs with
//! one deliberate defect each and require a panic. (A checker that accepts
//! everything would make every other test in `chat_*` meaningless.)

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use citestream::Dialect;
use common::chat_ref::{self, RefOpts};

const LISBON: &[u8] = include_bytes!("../examples/lisbon/upstream.sse");
const N3: &[u8] = include_bytes!("fixtures/upstream/openai_gpt4o_n3_interleaved_choices.sse");
const GEMINI: &[u8] =
    include_bytes!("fixtures/upstream/gemini_openai_compat_finish_with_content.sse");

fn lisbon_sources() -> Vec<citestream::Source> {
    citestream::Sources::from_json(include_bytes!("../examples/lisbon/sources.json"))
        .unwrap()
        .list()
        .to_vec()
}

/// Asserts that the checker rejects `bad` (the output of `input` with a
/// defect) and accepts the real output.
fn rejects(
    name: &str,
    input: &[u8],
    o: &RefOpts,
    sources: &[citestream::Source],
    mutate: impl Fn(&str) -> String,
) {
    let ex = chat_ref::expect_chat(input, sources, o);
    let arc = std::sync::Arc::new(citestream::Sources::new(sources.to_vec()));
    let good = chat_ref::run_chat(&arc, o, &[input]);
    chat_ref::check("good", &good, &ex, sources, o, false);
    let bad = mutate(std::str::from_utf8(&good).unwrap());
    assert_ne!(bad.as_bytes(), &good[..], "{name}: mutation did nothing");
    let r = catch_unwind(AssertUnwindSafe(|| {
        chat_ref::check(name, bad.as_bytes(), &ex, sources, o, false);
    }));
    assert!(r.is_err(), "{name}: checker accepted a defective output");
}

fn events(s: &str) -> Vec<String> {
    s.split_inclusive("\n\n").map(str::to_string).collect()
}

#[test]
fn checker_rejects_defects() {
    let src = lisbon_sources();
    let o = RefOpts::default();
    rejects("annotations chunk dropped", LISBON, &o, &src, |s| {
        events(s)
            .into_iter()
            .filter(|e| !e.contains("\"annotations\""))
            .collect()
    });
    rejects("annotations after finish chunk", LISBON, &o, &src, |s| {
        let mut ev = events(s);
        let k = ev
            .iter()
            .position(|e| e.contains("\"annotations\""))
            .unwrap();
        ev.swap(k, k + 1);
        ev.concat()
    });
    rejects("annotation offset off by one", LISBON, &o, &src, |s| {
        s.replace("\"start_index\":66", "\"start_index\":67")
    });
    rejects("upstream byte changed", LISBON, &o, &src, |s| {
        s.replacen("Saturday", "Saturdax", 1)
    });
    rejects("sources also on the usage chunk", LISBON, &o, &src, |s| {
        s.replace("\"choices\":[],", "\"sources\":[],\"choices\":[],")
    });
    rejects("sources moved to the usage chunk", LISBON, &o, &src, |s| {
        let mut ev = events(s);
        let k = ev.iter().position(|e| e.contains("\"sources\"")).unwrap();
        let i = ev[k].find(",\"sources\"").unwrap();
        let j = ev[k].rfind("}\n\n").unwrap();
        let member = ev[k][i..j].to_string();
        ev[k] = ev[k].replace(&member, "");
        ev[k + 1] = ev[k + 1].replace("}}\n\n", &format!("}}{member}}}\n\n"));
        ev.concat()
    });
    rejects("third source missing", LISBON, &o, &src, |s| {
        s.replace(",{\"index\":3,\"title\":\"Portugal: the week ahead\",\"url\":\"https://news.example/portugal/weather-week\"}", "")
    });
    rejects("envelope not copied", LISBON, &o, &src, |s| {
        s.replace("{\"id\":\"chatcmpl-3e5a7c9b1d2f4a6c8e0b2d4f6a8c1e3b\",\"object\":\"chat.completion.chunk\",\"created\":1791590400,\"model\":\"shannon-3\",\"system_fingerprint\":\"fp_5e1c2d3a4b\",\"choices\":[{\"index\":0,\"delta\":{\"annotations\"", "{\"id\":\"chatcmpl-3e5a7c9b1d2f4a6c8e0b2d4f6a8c1e3b\",\"object\":\"chat.completion.chunk\",\"created\":1791590400,\"model\":\"shannon-3\",\"choices\":[{\"index\":0,\"delta\":{\"annotations\"")
    });
    rejects("extra event at the end", LISBON, &o, &src, |s| {
        format!("{s}data: {{}}\n\n")
    });
    rejects("finish chunk framing changed", LISBON, &o, &src, |s| {
        let mut ev = events(s);
        let k = ev.iter().position(|e| e.contains("\"sources\"")).unwrap();
        ev[k] = ev[k].replacen("data: ", "data:", 1);
        ev.concat()
    });
    // n = 3: sources on the third finish, not the first.
    let o3 = RefOpts {
        n: 3,
        ..RefOpts::default()
    };
    let three = chat_ref::make_sources(3);
    rejects("n=3 sources on wrong finish chunk", N3, &o3, &three, |s| {
        let mut ev = events(s);
        let k = ev.iter().position(|e| e.contains("\"sources\"")).unwrap();
        let i = ev[k].find(",\"sources\"").unwrap();
        let j = ev[k].rfind("}\n\n").unwrap();
        let member = ev[k][i..j].to_string();
        ev[k] = ev[k].replace(&member, "");
        let first = ev
            .iter()
            .position(|e| e.contains("\"finish_reason\":\"stop\""))
            .unwrap();
        ev[first] = ev[first].replacen("}\n\n", &format!("{member}}}\n\n"), 1);
        ev.concat()
    });
    // Gemini: finish chunk with content must be split; an unsplit output
    // (content and finish_reason together after the annotations) fails.
    let g = lisbon_sources();
    let gsrc = vec![g[0].clone()];
    let gemini = String::from_utf8(GEMINI.to_vec())
        .unwrap()
        .replace("17 × 23.", "17 × 23 [1].");
    rejects(
        "split content part lost",
        gemini.as_bytes(),
        &o,
        &gsrc,
        |s| {
            let ev = events(s);
            ev.into_iter()
                .filter(|e| !(e.contains("23 [1].") && e.contains("\"finish_reason\":null")))
                .collect()
        },
    );
    // Citations dialect: the document_index must be the footnote number - 1.
    let oc = RefOpts {
        dialect: Dialect::CITATIONS,
        ..RefOpts::default()
    };
    rejects("document_index off", LISBON, &oc, &src, |s| {
        s.replace("\"document_index\":2", "\"document_index\":3")
    });
}
