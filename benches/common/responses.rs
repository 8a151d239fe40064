//! The `/v1/responses` rewriter and its conventional baseline, driven like
//! the chat ones (every input piece in, every output `Bytes` to `sink`).
//!
//! * `citestream`: [`ResponsesStream`], `feed` + drain, `finish` + drain.
//! * `conventional` (the usual way to write it): `sse-stream` 0.3 framing,
//!   serde deserializing only the fields read (`type`, `delta`,
//!   `output_index`, `content_index`, `item_id`, `sequence_number`) as
//!   borrowed values, the original data forwarded (re-framed into one
//!   reused `BytesMut`) for every event it does not change; per text part
//!   the deltas appended to a `String`, at its `output_text.done` the same
//!   marker scan as the chat baselines ([`find_markers`]) and the
//!   `annotation.added` events synthesized with serde_json; the snapshot
//!   events and every later event with a `sequence_number` parsed to a
//!   `Value`, changed and serialized again.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use citestream::ResponsesStream;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Lcg;
use super::chat::{
    OUT_CAPACITY, Setup, Text, emit, find_markers, obfuscation, sse_events, token, write_event,
};

/// A long Responses stream in the current api.openai.com shape:
/// `response.created`, `in_progress`, `output_item.added`,
/// `content_part.added`, `deltas` one-token `output_text.delta` events
/// (markers `[1]`–`[3]` among the tokens; `logprobs`, `obfuscation`,
/// `sequence_number` last, about 250 bytes each), `output_text.done`,
/// `content_part.done`, `output_item.done`, `response.completed` (the
/// whole text repeated in the last four).
pub(crate) fn responses_stream(deltas: usize) -> Vec<u8> {
    let mut rng = Lcg::new(24);
    let id = "msg_0f9c4b2f224d858000695fa063d4708197af73c2f37cb0b9d3";
    let resp = r#"{"id":"resp_0f9c4b2f224d858000695fa062bf048197a680f357bbb09000","object":"response","created_at":1767874658,"status":"in_progress","model":"gpt-4.1-2025-04-14","output":[],"usage":null}"#;
    let mut out = Vec::new();
    let mut seq = 0u64;
    let mut ev = |out: &mut Vec<u8>, ty: &str, body: &[u8]| {
        out.extend_from_slice(format!("event: {ty}\ndata: {{\"type\":\"{ty}\",").as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(format!(",\"sequence_number\":{seq}}}\n\n").as_bytes());
        seq += 1;
    };
    ev(
        &mut out,
        "response.created",
        format!(r#""response":{resp}"#).as_bytes(),
    );
    ev(
        &mut out,
        "response.in_progress",
        format!(r#""response":{resp}"#).as_bytes(),
    );
    ev(
        &mut out,
        "response.output_item.added",
        format!(r#""item":{{"id":"{id}","type":"message","status":"in_progress","content":[],"role":"assistant"}},"output_index":0"#).as_bytes(),
    );
    ev(
        &mut out,
        "response.content_part.added",
        format!(r#""content_index":0,"item_id":"{id}","output_index":0,"part":{{"type":"output_text","annotations":[],"logprobs":[],"text":""}}"#).as_bytes(),
    );
    let mut text = String::new();
    for _ in 0..deltas {
        let t = token(&mut rng);
        text.push_str(t);
        let mut body = format!(
            r#""content_index":0,"delta":"{t}","item_id":"{id}","logprobs":[],"obfuscation":""#
        )
        .into_bytes();
        obfuscation(&mut rng, &mut body);
        body.extend_from_slice(br#"","output_index":0"#);
        ev(&mut out, "response.output_text.delta", &body);
    }
    let part =
        format!(r#"{{"type":"output_text","annotations":[],"logprobs":[],"text":"{text}"}}"#);
    let at = format!(r#""content_index":0,"item_id":"{id}""#);
    ev(
        &mut out,
        "response.output_text.done",
        format!(r#"{at},"logprobs":[],"output_index":0,"text":"{text}""#).as_bytes(),
    );
    ev(
        &mut out,
        "response.content_part.done",
        format!(r#"{at},"output_index":0,"part":{part}"#).as_bytes(),
    );
    let item = format!(
        r#"{{"id":"{id}","type":"message","status":"completed","content":[{part}],"role":"assistant"}}"#
    );
    ev(
        &mut out,
        "response.output_item.done",
        format!(r#""item":{item},"output_index":0"#).as_bytes(),
    );
    let done = resp
        .replace("in_progress", "completed")
        .replace(r#""output":[]"#, &format!(r#""output":[{item}]"#));
    ev(
        &mut out,
        "response.completed",
        format!(r#""response":{done}"#).as_bytes(),
    );
    out
}

/// [`ResponsesStream`] over one stream's pieces.
#[inline(never)]
pub(crate) fn citestream(setup: &Setup, pieces: &[Bytes], sink: &mut impl FnMut(Bytes)) {
    let rw = ResponsesStream::new(setup.sources.clone(), setup.opts.clone());
    super::chat::drive(rw, pieces, sink);
}

/// The fields the conventional rewriter reads of every event.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    ty: Text<'a>,
    #[serde(borrow, default)]
    delta: Option<Text<'a>>,
    #[serde(default)]
    output_index: Option<u32>,
    #[serde(default)]
    content_index: Option<u32>,
    #[serde(borrow, default)]
    item_id: Option<Text<'a>>,
    #[serde(default)]
    sequence_number: Option<u64>,
}

/// One text part: its text and its annotations once done.
#[derive(Default)]
struct Part {
    text: String,
    ours: Option<Vec<Value>>,
}

/// Appends `ours` to a part value's `annotations`.
fn annotate(part: &mut Value, ours: &[Value]) {
    if let Some(Value::Array(a)) = part.get_mut("annotations") {
        a.extend(ours.iter().cloned());
    }
}

/// The conventional Responses gateway over one stream's pieces.
#[inline(never)]
pub(crate) fn conventional(setup: &Setup, pieces: &[Bytes], sink: &mut impl FnMut(Bytes)) {
    let mut parts: BTreeMap<(u32, u32), Part> = BTreeMap::new();
    let mut shift = 0u64;
    let mut done = false;
    let mut out = BytesMut::with_capacity(OUT_CAPACITY);
    super::sse::drain(sse_events(pieces), |item| {
        let sse = item.expect("sse-stream error");
        let Some(data) = &sse.data else {
            return;
        };
        let event = sse.event.as_deref();
        let Ok(e) = serde_json::from_str::<Event<'_>>(data) else {
            write_event(&mut out, event, data);
            return emit(&mut out, sink);
        };
        let key = e.output_index.zip(e.content_index);
        let ty: &str = &e.ty.0;
        let mut edit: Option<Value> = None;
        match ty {
            "response.output_text.delta" => {
                if let (Some(k), Some(d)) = (key, &e.delta) {
                    parts.entry(k).or_default().text.push_str(&d.0);
                }
            }
            "response.output_text.done" => {
                if let Some(k) = key {
                    let p = parts.entry(k).or_default();
                    let markers = find_markers(&p.text, setup.max());
                    let ours: Vec<Value> = markers
                        .iter()
                        .map(|&(n, start, end)| {
                            let (url, title) = &setup.cites[n as usize - 1];
                            json!({"type": "url_citation", "start_index": start,
                                "end_index": end, "url": url, "title": title})
                        })
                        .collect();
                    for (i, a) in ours.iter().enumerate() {
                        let mut v = json!({"type": "response.output_text.annotation.added"});
                        if let Some(s) = e.sequence_number {
                            v["sequence_number"] = json!(s + shift + i as u64);
                        }
                        v["item_id"] = json!(e.item_id.as_ref().map(|t| &*t.0));
                        v["output_index"] = json!(k.0);
                        v["content_index"] = json!(k.1);
                        v["annotation_index"] = json!(i);
                        v["annotation"] = a.clone();
                        let s = serde_json::to_string(&v).expect("serialize");
                        write_event(&mut out, event, &s);
                        emit(&mut out, sink);
                    }
                    if e.sequence_number.is_some() {
                        shift += ours.len() as u64;
                    }
                    p.ours = Some(ours);
                }
            }
            "response.content_part.done" => {
                if let Some(ours) = key.and_then(|k| parts.get(&k)).and_then(|p| p.ours.clone()) {
                    let mut v: Value = serde_json::from_str(data).expect("valid event");
                    annotate(&mut v["part"], &ours);
                    edit = Some(v);
                }
            }
            "response.output_item.done" => {
                let mut v: Value = serde_json::from_str(data).expect("valid event");
                let o = e.output_index.unwrap_or(0);
                if let Some(Value::Array(c)) = v["item"].get_mut("content") {
                    for (i, p) in c.iter_mut().enumerate() {
                        if let Some(ours) = parts.get(&(o, i as u32)).and_then(|p| p.ours.as_ref())
                        {
                            annotate(p, ours);
                        }
                    }
                }
                edit = Some(v);
            }
            "response.completed" | "response.incomplete" if !done => {
                done = true;
                let mut v: Value = serde_json::from_str(data).expect("valid event");
                if let Some(Value::Array(items)) = v["response"].get_mut("output") {
                    for (o, item) in items.iter_mut().enumerate() {
                        if let Some(Value::Array(c)) = item.get_mut("content") {
                            for (i, p) in c.iter_mut().enumerate() {
                                let k = (o as u32, i as u32);
                                if let Some(ours) = parts.get(&k).and_then(|p| p.ours.as_ref()) {
                                    annotate(p, ours);
                                }
                            }
                        }
                    }
                }
                v["response"]["sources"] = serde_json::from_str(&setup.sources_json).expect("json");
                edit = Some(v);
            }
            _ => {}
        }
        if let (Some(s), true) = (e.sequence_number, shift > 0) {
            let v = edit.get_or_insert_with(|| serde_json::from_str(data).expect("valid event"));
            v["sequence_number"] = json!(s + shift);
        }
        match edit {
            None => write_event(&mut out, event, data),
            Some(v) => write_event(&mut out, event, &serde_json::to_string(&v).expect("json")),
        }
        emit(&mut out, sink);
    });
}

/// Asserts, outside timing, that both implementations add the same on
/// `stream`: the same `annotation.added` events (as JSON) and the same
/// final response; returns the number of annotation events.
pub(crate) fn check(setup: &Setup, stream: &[u8]) -> usize {
    let pieces = super::split(stream, super::EVENT_READS);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    citestream(setup, &pieces, &mut |b| ours.extend_from_slice(&b));
    conventional(setup, &pieces, &mut |b| theirs.extend_from_slice(&b));
    let ours = String::from_utf8(ours).expect("UTF-8");
    let theirs = String::from_utf8(theirs).expect("UTF-8");
    let added = |out: &str| -> (Vec<Value>, Option<Value>) {
        let mut added = Vec::new();
        let mut last = None;
        for block in out.split("\n\n") {
            let Some(d) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(d) else {
                continue;
            };
            match v["type"].as_str() {
                Some("response.output_text.annotation.added") => added.push(v),
                Some("response.completed") => last = Some(v),
                _ => {}
            }
        }
        (added, last)
    };
    let (a, b) = (added(&ours), added(&theirs));
    assert_eq!(a, b, "citestream and conventional differ");
    a.0.len()
}
