//! Tests of the chunk scanner: the fast and full scans, the scan prefix and
//! its cached envelope against fresh scans.

use super::*;

type Read = Vec<(Option<u32>, Option<String>, bool)>;

fn full(d: &str) -> Result<Read, Invalid> {
    let (mut s, mut cs) = (ChunkScan::default(), ChoiceScans::default());
    scan_chunk(d.as_bytes(), &mut s, &mut cs, None)?;
    let body = |r: &Range<usize>| d[r.clone()].to_owned();
    Ok(cs
        .iter()
        .map(|c| (c.index, c.content.as_ref().map(body), c.finish.is_some()))
        .collect())
}

/// `Ok(None)`: the fast scan defers to the full scan (or stops at an
/// empty `choices`).
fn fast(d: &str) -> Result<Option<(Read, Vec<String>)>, Invalid> {
    let (mut cs, mut holes) = (FastChoices::default(), Holes::default());
    if !fast_reads(d.as_bytes(), &mut cs, &mut holes)? {
        return Ok(None);
    }
    let read = cs
        .iter()
        .map(|c| (c.index, c.content.clone().map(|r| d[r].to_owned()), false))
        .collect();
    let holes = holes.iter().map(|r| d[r.clone()].to_owned()).collect();
    Ok(Some((read, holes)))
}

#[test]
fn both_scans_read_the_same_choices() {
    for d in [
        r#"{"id":"c","choices":[{"index":0,"delta":{"content":"a\"b"},"finish_reason":null}]}"#,
        r#" { "choices" : [ { "delta" : { "content" : null } } , 3 ] } "#,
        r#"{"choices":[{"index":-1,"delta":{"content":"x","content":7}}]}"#,
        r#"{"choices":[{"index":2,"delta":"s","finish_reason":{"a":1}}],"choices":[3],"n":"choices"}"#,
        r#"{"usage":{"total_tokens":3},"choices":[],"x":"choices"}"#,
    ] {
        let (read, _) = fast(d).unwrap().expect("no escaped key, no finish");
        assert_eq!(Ok(read), full(d), "{d}");
    }
}

/// The fast scan against the full scan on `d`: the same choices when it
/// reads them, the same rejection, and no choice where it stops at an
/// empty `choices` array.
fn scans_agree(d: &[u8]) -> bool {
    let (mut cs, mut holes) = (FastChoices::default(), Holes::default());
    let (mut s, mut full) = (ChunkScan::default(), ChoiceScans::default());
    let valid = scan_chunk(d, &mut s, &mut full, None).is_ok();
    match fast_scan(d, &mut cs, &mut holes, None) {
        Err(Invalid) => !valid,
        Ok(FastScan::Defer) => true,
        Ok(FastScan::NoChoices) => !valid || full.is_empty(),
        Ok(FastScan::Read) => {
            valid
                && cs.len() == full.len()
                && cs.iter().zip(full.iter()).all(|(f, c)| {
                    (f.index, &f.content, c.finish.is_none()) == (c.index, &c.content, true)
                })
        }
    }
}

/// The fast scan stops at an empty `choices` array when neither an escape
/// nor `"choices"` follows (whatever else does, even invalid JSON), and
/// reads on otherwise; every chunk cut anywhere and with each byte
/// replaced reads as the full scan reads it.
#[test]
fn the_fast_scan_stops_at_a_last_empty_choices_array() {
    let stops = [
        r#"{"usage":{"total_tokens":3},"choices":[]}"#,
        r#"{"choices":[{"index":2,"delta":{"content":"x"}}],"choices":[]}"#,
        r#"{"id":"c","choices":[ ],"usage":{"n":1,"d":{"a":[true,null]}}}"#,
        r#"{"choices":[1,"a",[]],"moderation":{"flagged":false}}"#,
        r#"{"choices":[],"usage":{"n":1"#,
    ];
    let reads = [
        r#"{"choices":[],"choices":[{"index":0,"delta":{"content":"x"}}]}"#,
        r#"{"choices":[],"x":"a\"choices\":[{}]"}"#,
        r#"{"choices":[],"ch\u006fices":[{"delta":{"content":"x"}}]}"#,
        r#"{"choices":[],"x":["choices"]}"#,
        r#"{"choices":[{"index":0}],"usage":{}}"#,
    ];
    for (d, stop) in stops
        .iter()
        .map(|d| (d, true))
        .chain(reads.iter().map(|d| (d, false)))
    {
        let (mut cs, mut holes) = (FastChoices::default(), Holes::default());
        let got = fast_scan(d.as_bytes(), &mut cs, &mut holes, None);
        assert_eq!(got == Ok(FastScan::NoChoices), stop, "{d}");
        for cut in 0..=d.len() {
            assert!(scans_agree(&d.as_bytes()[..cut]), "{d} cut at {cut}");
            for b in [b'\\', b'"', b'[', b']', b'{', b'}', b':', b','] {
                let mut m = d.as_bytes().to_vec();
                if let Some(at) = m.get_mut(cut) {
                    *at = b;
                }
                assert!(scans_agree(&m), "{d} with {b} at {cut}");
            }
        }
    }
}

#[test]
fn the_fast_scan_defers_finish_chunks() {
    let d = r#"{"choices":[{"index":1,"delta":{"content":"x"}},{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    assert_eq!(fast(d), Ok(None));
    assert_eq!(
        full(d),
        Ok(vec![
            (Some(1), Some("x".into()), false),
            (Some(0), None, true)
        ])
    );
}

#[test]
fn the_fast_scan_defers_chunks_with_many_choices() {
    let chunk = |n: usize| {
        let choices: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"index":{i},"delta":{{"content":"c{i}"}}}}"#))
            .collect();
        format!(r#"{{"id":"c","choices":[{}]}}"#, choices.join(","))
    };
    let most = chunk(MAX_FAST_CHOICES);
    let (read, _) = fast(&most).unwrap().expect("no more than the most");
    assert_eq!(read.len(), MAX_FAST_CHOICES);
    assert_eq!(Ok(read), full(&most));
    let more = chunk(MAX_FAST_CHOICES + 1);
    assert_eq!(fast(&more), Ok(None));
    assert_eq!(full(&more).map(|r| r.len()), Ok(MAX_FAST_CHOICES + 1));
}

#[test]
fn the_full_scan_reads_envelope_usage_and_escaped_keys() {
    let d = r#"{"id":"c","model":"m","choices":[],"usage":{"a":1},"sources":[],"created":1}"#;
    let (mut s, mut cs) = (ChunkScan::default(), ChoiceScans::default());
    scan_chunk(d.as_bytes(), &mut s, &mut cs, None).unwrap();
    assert_eq!(s.envelope[0].clone().map(|r| &d[r]), Some("\"c\""));
    assert_eq!(s.envelope[2].clone().map(|r| &d[r]), Some("1"));
    assert_eq!(s.envelope[4], None);
    assert_eq!(&d[s.usage.unwrap().value()], r#"{"a":1}"#);
    assert_eq!(s.existing.sources.len(), 1);
    assert_eq!(s.close, d.len() - 1);

    let escaped = r#"{"choic\u0065s":[{"index":0,"delta":{"content":"x"}}]}"#;
    assert_eq!(fast(escaped), Ok(None));
    assert_eq!(full(escaped), Ok(vec![(Some(0), Some("x".into()), false)]));
}

#[test]
fn holes_are_the_strings_and_numbers_that_vary() {
    let d = r#"{"id":"c","object":"o","choices":[{"index":0,"delta":{"role":"assistant","content":"x","tool_calls":[{"function":{"arguments":"{}"}}]}}],"obfuscation":"zz"}"#;
    let (_, holes) = fast(d).unwrap().unwrap();
    assert_eq!(holes, [r#""assistant""#, r#""{}""#, r#""zz""#]);
    let usage = d.replace(
        r#""obfuscation":"zz""#,
        r#""usage":{"total_tokens":12,"cost":0.5}"#,
    );
    let (_, holes) = fast(&usage).unwrap().unwrap();
    assert_eq!(holes, [r#""assistant""#, r#""{}""#, "12", "0.5"]);
    // Strings inside other top-level arrays and objects repeat
    // (Perplexity's `citations`): literal, not holes.
    let cited = d.replace(
        r#""obfuscation":"zz""#,
        r#""citations":["https://a/","https://b/"],"usage":{"model":"m","total_tokens":3}"#,
    );
    let (_, holes) = fast(&cited).unwrap().unwrap();
    assert_eq!(holes, [r#""assistant""#, r#""{}""#, "3"]);
}

/// The fast scan reads the same with a prefix learned from earlier
/// chunks as without, chunk after chunk (valid, invalid, deferred, with
/// and without the prefix, cut anywhere after it).
#[test]
fn a_learned_prefix_reads_the_same() {
    for env in [
        r#"{"id":"c","object":"o","created":1,"#,
        // Holes in the prefix: taken from it when resumed.
        r#"{"id":"c","service_tier":"default","n":7,"created":1,"#,
        r#"{"usage":{"n":1,"m":"x"},"id":"c", "#,
    ] {
        assert_eq!(prefix_reads_the_same(env), env.as_bytes());
    }
    // More holes than a prefix keeps: none learned.
    let many = format!(r#"{{"id":"c",{}"#, r#""a":"x","#.repeat(PREFIX_HOLES + 1));
    assert_eq!(prefix_reads_the_same(&many), b"");
}

/// Scans chunks starting with `env` (and others) with a prefix and
/// without; returns the prefix learned.
fn prefix_reads_the_same(env: &str) -> Vec<u8> {
    let mut chunks: Vec<String> = vec![
        format!(r#"{env}"choices":[{{"index":0,"delta":{{"content":"a"}}}}]}}"#),
        format!(r#"{env}"choices":[{{"index":1,"delta":{{"content":"b"}}}}],"x":"y"}}"#),
        format!(r#"{env} "choices":[]}}"#),
        format!(r#"{env}"choices":[{{"finish_reason":"stop"}}]}}"#),
        format!(r#"{env}"choic\u0065s":[]}}"#),
        format!(r#"{env}"usage":{{"n":1}},"choices":[]}}"#),
        format!(r#"{env}}}"#),
        format!(r#"{env}"choices":[{{"index":0,"delta":{{"content":"a"}}}}]"#),
        r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"id":"c"}"#.to_owned(),
        format!("{env}"),
    ];
    let first = chunks[0].clone();
    for cut in env.len()..first.len() {
        chunks.push(first[..cut].to_owned());
        chunks.push(format!("{}}}", &first[..cut]));
    }
    let mut prefix = ScanPrefix::default();
    for _ in 0..2 {
        for d in &chunks {
            let (mut cs, mut holes) = (FastChoices::default(), Holes::default());
            let got = fast_scan(d.as_bytes(), &mut cs, &mut holes, Some(&mut prefix));
            let read = |cs: &[FastChoice]| -> Vec<_> {
                cs.iter().map(|c| (c.index, c.content.clone())).collect()
            };
            let got = got.map(|ok| (ok, read(&cs), holes.to_vec()));
            let (mut cs, mut holes) = (FastChoices::default(), Holes::default());
            let want = fast_scan(d.as_bytes(), &mut cs, &mut holes, None);
            let want = want.map(|ok| (ok, read(&cs), holes.to_vec()));
            assert_eq!(got, want, "{d}");
        }
    }
    prefix.bytes
}

/// The full scan reads the same with the envelope of a prefix learned
/// from an earlier chunk as fresh: finish chunks with the same
/// envelope, duplicate keys, more members after it, cut anywhere and
/// with each byte after the prefix replaced; prefixes with other
/// members (no envelope kept) and whitespace around the keys.
#[test]
fn a_cached_envelope_reads_the_same() {
    let envs = [
        r#"{"id":"c","object":"o","created":1,"model":"m","#,
        r#"{ "id" : "c" , "system_fingerprint":null,"id":"d",  "#,
        r#"{"id":"c","service_tier":"default","n":[1,"a"],"model":"m","#,
        r#"{"id":"c","citations":["a"],"#,
        r#"{"usage":null,"model":"m","#,
    ];
    for (i, env) in envs.into_iter().enumerate() {
        let learn = format!(r#"{env}"choices":[{{"index":0,"delta":{{"content":"a"}}}}]}}"#);
        let mut p = ScanPrefix::default();
        let (mut cs, mut holes) = (FastChoices::default(), Holes::default());
        let read = fast_scan(learn.as_bytes(), &mut cs, &mut holes, Some(&mut p));
        assert_eq!(read, Ok(FastScan::Read));
        // Only a prefix without members the full scan reads (but the
        // envelope) keeps them.
        assert_eq!(p.envelope.is_some(), i < 3, "{env}");
        let chunks = [
            format!(
                r#"{env}"choices":[{{"index":0,"delta":{{}},"finish_reason":"stop"}}],"usage":{{"n":1}},"citations":["x"]}}"#
            ),
            format!(r#"{env}  "model":"n","choices":[{{"finish_reason":"stop"}}]}}"#),
            format!(r#"{env}"choic\u0065s":[{{"finish_reason":"stop"}}],"sources":[]}}"#),
            format!(r#"{env}"id":"z"}}"#),
        ];
        for d in &chunks {
            let (got, want) = scan_with_prefix(learn.as_bytes(), d.as_bytes());
            assert_eq!(got, want, "{d}");
            assert_ne!(want, "invalid", "{d}");
            for cut in 0..d.len() {
                let (got, want) = scan_with_prefix(learn.as_bytes(), &d.as_bytes()[..cut]);
                assert_eq!(got, want, "{d} cut at {cut}");
                for b in [b' ', b'"', b',', b'}', b'x'] {
                    let mut m = d.as_bytes().to_vec();
                    m[cut] = b;
                    let (got, want) = scan_with_prefix(learn.as_bytes(), &m);
                    assert_eq!(got, want, "{d} with {b} at {cut}");
                }
            }
        }
    }
}

#[test]
fn has_finish_finds_string_finish_reasons_outside_strings() {
    for (d, want) in [
        (
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            true,
        ),
        (
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":null}]}"#,
            false,
        ),
        // Escaped inside a string: not the pattern.
        (
            r#"{"choices":[{"delta":{"content":"\"finish_reason\":\"x"}}]}"#,
            false,
        ),
        // With whitespace: missed (the fast scan then defers).
        (r#"{"choices":[{"finish_reason": "stop"}]}"#, false),
        ("", false),
    ] {
        assert_eq!(has_finish(d.as_bytes()), want, "{d}");
    }
}

#[test]
fn both_scans_reject_invalid_json() {
    for d in [
        "",
        "[]",
        r#"{"choices":[{"index":0,"delta":{"content":"x"}}]"#,
        r#"{"choices":[{"index":0,"delta":{"content":"x"}}]} x"#,
        r#"{"choices":[{"index":01}]}"#,
        "{\"choices\":[{\"delta\":{\"content\":\"a\nb\"}}]}",
    ] {
        assert_eq!(fast(d), Err(Invalid), "{d:?}");
        assert_eq!(full(d), Err(Invalid), "{d:?}");
    }
}

#[test]
fn envelope_keys_are_the_envelope_names_quoted() {
    for (name, key) in ENVELOPE.iter().zip(ENVELOPE_KEYS) {
        assert_eq!(key, format!("\"{name}\":").as_bytes());
    }
}

/// The choices list keeps its order across the move from inline to the
/// heap, and is empty again after `clear`.
#[test]
fn choice_scans_spill_in_order() {
    let mut cs = ChoiceScans::default();
    for round in 0..2 {
        for i in 0..5 {
            cs.push(ChoiceScan {
                index: Some(i),
                ..ChoiceScan::default()
            });
            let got: Vec<_> = cs.iter().map(|c| c.index).collect();
            let want: Vec<_> = (0..=i).map(Some).collect();
            assert_eq!(got, want, "round {round}");
        }
        cs[4].ending = true;
        assert!(cs.last().is_some_and(|c| c.ending));
        cs.clear();
        assert!(cs.is_empty());
    }
}
