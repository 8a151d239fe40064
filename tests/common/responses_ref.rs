//! A slow, obviously correct reference of the `/v1/responses` rules, for
//! the tests and the `responses_split` fuzz target: the stream is cut into
//! blocks at blank lines (LF framing), each event's data read whole with
//! serde_json, the text parts' decoded `delta`s concatenated and their
//! markers found by `cite_ref` (a separate marker finder); what the output
//! must be is then a list of blocks, compared with the rewriter's output
//! block by block ([`check`]).

use std::collections::BTreeMap;

use citestream::cite::{Marker, OffsetUnit};
use citestream::sources::Source;
use serde_json::{Value, json};

use super::chat_ref::{RefOpts, expected_citations, expected_sources};
use super::cite_ref;

/// One block of the expected output.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// Upstream bytes forwarded unchanged.
    Same(String),
    /// An upstream event with new data: its other lines kept as they were.
    Changed { lines: Vec<String>, data: Value },
    /// An inserted `annotation.added` event (with or without `event:` line).
    Inserted { event_line: bool, data: Value },
}

/// The input cut into blocks, each with its blank line (the last one may
/// be unterminated).
pub fn blocks(input: &str) -> Vec<String> {
    let mut v = Vec::new();
    let mut rest = input;
    while let Some(i) = rest.find("\n\n") {
        v.push(rest[..i + 2].to_owned());
        rest = &rest[i + 2..];
    }
    if !rest.is_empty() {
        v.push(rest.to_owned());
    }
    v
}

/// The `data` of a block (its `data:` lines joined), and its other lines.
fn fields(block: &str) -> (Option<String>, Vec<String>) {
    let mut data: Option<String> = None;
    let mut lines = Vec::new();
    for line in block.trim_end_matches('\n').split('\n') {
        if let Some(d) = line.strip_prefix("data:") {
            let d = d.strip_prefix(' ').unwrap_or(d);
            match &mut data {
                Some(x) => {
                    x.push('\n');
                    x.push_str(d);
                }
                None => data = Some(d.to_owned()),
            }
        } else {
            lines.push(line.to_owned());
        }
    }
    (data, lines)
}

#[derive(Default)]
struct Part {
    text: String,
    upstream: u64,
    markers: Option<Vec<Marker>>,
}

fn annotation(list: &[Source], m: &Marker) -> Value {
    let s = &list[m.number as usize - 1];
    json!({"type": "url_citation", "start_index": m.start, "end_index": m.end,
        "url": s.url.clone().unwrap_or_default(), "title": s.title.clone().unwrap_or_default()})
}

fn u32_of(v: &Value, k: &str) -> Option<u64> {
    v.get(k)
        .and_then(Value::as_u64)
        .filter(|&n| n <= u64::from(u32::MAX))
}

/// Appends `ours` to the `annotations` of an `output_text` part value.
fn annotate(part: &mut Value, ours: &[Value]) {
    if ours.is_empty() || part.get("type").and_then(Value::as_str) != Some("output_text") {
        return;
    }
    match part.get_mut("annotations") {
        Some(Value::Array(a)) => a.extend(ours.iter().cloned()),
        Some(other) => *other = Value::Array(ours.to_vec()),
        None => {
            part["annotations"] = Value::Array(ours.to_vec());
        }
    }
}

/// The expected output for `input` with `sources` and `o`.
pub fn expect(input: &str, sources: &[Source], o: &RefOpts) -> Vec<Block> {
    let max = sources.len() as u32;
    let unit: OffsetUnit = o.unit;
    let mut parts: BTreeMap<(u64, u64), Part> = BTreeMap::new();
    let mut shift = 0u64;
    let mut done = false;
    let mut out = Vec::new();
    for block in blocks(input) {
        let (data, lines) = fields(&block);
        let terminated = block.ends_with("\n\n");
        let v: Option<Value> = data
            .as_deref()
            .filter(|_| terminated && !sources.is_empty())
            .and_then(|d| serde_json::from_str(d).ok())
            .filter(Value::is_object);
        let Some(mut v) = v else {
            out.push(Block::Same(block));
            continue;
        };
        let event_line = lines.iter().any(|l| l.starts_with("event:"));
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let seq = v.get("sequence_number").and_then(Value::as_u64);
        let key = u32_of(&v, "output_index").zip(u32_of(&v, "content_index"));
        let ours_of = |parts: &BTreeMap<(u64, u64), Part>, k: (u64, u64)| -> Vec<Value> {
            if !o.dialect.sources {
                return Vec::new();
            }
            parts
                .get(&k)
                .and_then(|p| p.markers.as_ref())
                .map(|ms| ms.iter().map(|m| annotation(sources, m)).collect())
                .unwrap_or_default()
        };
        let mut changed = false;
        match ty.as_str() {
            "response.output_text.delta" => {
                if let (Some(k), Some(d)) = (key, v.get("delta").and_then(Value::as_str)) {
                    let p = parts.entry(k).or_default();
                    if p.markers.is_none() {
                        p.text.push_str(d);
                    }
                }
            }
            "response.output_text.annotation.added" => {
                if let Some(k) = key {
                    let p = parts.entry(k).or_default();
                    p.upstream = match v.get("annotation_index").and_then(Value::as_u64) {
                        Some(i) => p.upstream.max(i + 1),
                        None => p.upstream + 1,
                    };
                }
            }
            "response.output_text.done" => {
                if let Some(k) = key {
                    let p = parts.entry(k).or_default();
                    if p.markers.is_none() {
                        p.markers = Some(cite_ref::markers_text(p.text.as_bytes(), max, unit));
                    }
                    let ms = p.markers.clone().unwrap_or_default();
                    if o.dialect.sources {
                        for (n, m) in ms.iter().enumerate() {
                            let mut e = json!({"type": "response.output_text.annotation.added"});
                            if let Some(s) = seq {
                                e["sequence_number"] = json!(s + shift + n as u64);
                            }
                            if let Some(id) = v.get("item_id").filter(|x| x.is_string()) {
                                e["item_id"] = id.clone();
                            }
                            e["output_index"] = json!(k.0);
                            e["content_index"] = json!(k.1);
                            e["annotation_index"] = json!(p.upstream + n as u64);
                            e["annotation"] = annotation(sources, m);
                            out.push(Block::Inserted {
                                event_line,
                                data: e,
                            });
                        }
                        if seq.is_some() {
                            shift += ms.len() as u64;
                        }
                    }
                }
            }
            "response.content_part.done" => {
                if let Some(k) = key {
                    let ours = ours_of(&parts, k);
                    if !ours.is_empty() && v.get("part").is_some_and(Value::is_object) {
                        let before = v.clone();
                        annotate(&mut v["part"], &ours);
                        changed = v != before;
                    }
                }
            }
            "response.output_item.done" => {
                let oi = u32_of(&v, "output_index");
                let content = v
                    .get_mut("item")
                    .filter(|item| item.get("type").and_then(Value::as_str) == Some("message"))
                    .and_then(|item| item.get_mut("content"))
                    .and_then(Value::as_array_mut);
                if let (Some(oi), Some(content)) = (oi, content) {
                    for (i, p) in content.iter_mut().enumerate() {
                        let ours = ours_of(&parts, (oi, i as u64));
                        if !ours.is_empty() && p.is_object() {
                            annotate(p, &ours);
                            changed = true;
                        }
                    }
                }
            }
            "response.completed" | "response.incomplete" if !done => {
                let is_response = v
                    .get("response")
                    .is_some_and(|r| r.get("object").and_then(Value::as_str) == Some("response"));
                if is_response {
                    done = true;
                    for p in parts.values_mut() {
                        if p.markers.is_none() {
                            p.markers = Some(cite_ref::markers_text(p.text.as_bytes(), max, unit));
                        }
                    }
                    let r = &mut v["response"];
                    if let Some(Value::Array(output)) = r.get_mut("output") {
                        for (j, item) in output.iter_mut().enumerate() {
                            if item.get("type").and_then(Value::as_str) != Some("message") {
                                continue;
                            }
                            if let Some(Value::Array(content)) = item.get_mut("content") {
                                for (i, p) in content.iter_mut().enumerate() {
                                    let ours = ours_of(&parts, (j as u64, i as u64));
                                    if p.is_object() {
                                        annotate(p, &ours);
                                    }
                                }
                            }
                        }
                    }
                    let mut cited = vec![false; sources.len() + 1];
                    for p in parts.values() {
                        for m in p.markers.iter().flatten() {
                            cited[m.number as usize] = true;
                        }
                    }
                    let obj = r.as_object_mut().expect("object");
                    if o.dialect.sources {
                        obj.insert("sources".into(), expected_sources(sources));
                    }
                    if o.dialect.citations {
                        let c = o.only_cited.then_some(&cited[..]);
                        obj.insert("citations".into(), expected_citations(sources, c));
                    }
                    changed = true;
                }
            }
            _ => {}
        }
        if let (Some(s), true) = (seq, shift > 0) {
            v["sequence_number"] = json!(s + shift);
            changed = true;
        }
        out.push(if changed {
            Block::Changed { lines, data: v }
        } else {
            Block::Same(block)
        });
    }
    out
}

/// Checks `output` against `expected`; panics with `what` and the first
/// difference.
pub fn check(output: &[u8], expected: &[Block], what: &str) {
    let output = std::str::from_utf8(output).unwrap_or_else(|e| panic!("{what}: not UTF-8: {e}"));
    let got = blocks(output);
    let mut g = got.iter();
    for (k, want) in expected.iter().enumerate() {
        let Some(block) = g.next() else {
            panic!("{what}: output ends before expected block {k}: {want:?}");
        };
        match want {
            Block::Same(raw) => assert_eq!(block, raw, "{what}: block {k} must pass unchanged"),
            Block::Changed { lines, data } => {
                let (d, l) = fields(block);
                assert_eq!(&l, lines, "{what}: block {k}: framing");
                let d: Value = serde_json::from_str(&d.unwrap_or_default())
                    .unwrap_or_else(|e| panic!("{what}: block {k}: {e}: {block}"));
                assert_eq!(&d, data, "{what}: block {k}");
            }
            Block::Inserted { event_line, data } => {
                let (d, l) = fields(block);
                let want_lines: Vec<String> = if *event_line {
                    vec!["event: response.output_text.annotation.added".into()]
                } else {
                    Vec::new()
                };
                assert_eq!(l, want_lines, "{what}: block {k}: inserted framing");
                let d: Value = serde_json::from_str(&d.unwrap_or_default())
                    .unwrap_or_else(|e| panic!("{what}: block {k}: {e}"));
                assert_eq!(&d, data, "{what}: block {k} (inserted)");
            }
        }
    }
    if let Some(extra) = g.next() {
        panic!("{what}: unexpected extra output block: {extra:?}");
    }
}

/// The expected whole body: the same placement on a response object.
pub fn expect_body(body: &[u8], sources: &[Source], o: &RefOpts) -> Option<Value> {
    if sources.is_empty() {
        return None;
    }
    let mut v: Value = serde_json::from_slice(body).ok()?;
    if v.get("object").and_then(Value::as_str) != Some("response") {
        return None;
    }
    let mut cited = vec![false; sources.len() + 1];
    if let Some(Value::Array(output)) = v.get_mut("output") {
        for item in output.iter_mut() {
            if item.get("type").and_then(Value::as_str) != Some("message") {
                continue;
            }
            if let Some(Value::Array(content)) = item.get_mut("content") {
                for p in content.iter_mut() {
                    if p.get("type").and_then(Value::as_str) != Some("output_text") {
                        continue;
                    }
                    let text = p.get("text").and_then(Value::as_str).unwrap_or("");
                    let ms = cite_ref::markers_text(text.as_bytes(), sources.len() as u32, o.unit);
                    for m in &ms {
                        cited[m.number as usize] = true;
                    }
                    if o.dialect.sources {
                        let ours: Vec<Value> = ms.iter().map(|m| annotation(sources, m)).collect();
                        annotate(p, &ours);
                    }
                }
            }
        }
    }
    let obj = v.as_object_mut()?;
    if o.dialect.sources {
        obj.insert("sources".into(), expected_sources(sources));
    }
    if o.dialect.citations {
        let c = o.only_cited.then_some(&cited[..]);
        obj.insert("citations".into(), expected_citations(sources, c));
    }
    Some(v)
}
