//! The request side never panics and edits only what it owns.
//!
//! An arbitrary request body (raw bytes, or a generated JSON object with the
//! keys the request side reads, duplicate keys, escaped keys and random
//! whitespace), both endpoints, both placements:
//!
//! * `inspect` never panics; when it accepts the body, its output is valid
//!   JSON equal (as a `serde_json::Value`) to the input less every
//!   top-level `web_search` member;
//! * `inject` on that output never panics; when it succeeds, its output is
//!   valid JSON equal to its input plus the block, placed as documented
//!   (checked against a reference written on `serde_json::Value`).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use citestream::Endpoint;
use citestream::request::{InjectError, InjectOptions, Placement, inject, inspect, render_sources};
use citestream::sources::{Source, Sources};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

#[derive(Arbitrary, Debug, Clone)]
enum Key {
    WebSearch,
    Messages,
    Role,
    Content,
    System,
    Type,
    Text,
    Stream,
    Other(String),
}

#[derive(Arbitrary, Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Num(i32),
    Str(String),
    User,
    TextWord,
    Arr(Vec<J>),
    Obj(Vec<(Key, J)>),
}

#[derive(Arbitrary, Debug)]
struct Case {
    raw: Vec<u8>,
    body: Vec<(Key, J)>,
    style: Vec<u8>,
    messages: bool,
    system: bool,
    title: String,
}

/// Serializes with whitespace and key escapes chosen by `u`.
struct W<'a> {
    u: Unstructured<'a>,
    out: String,
}

impl W<'_> {
    fn ws(&mut self) {
        if self.u.ratio(1, 4).unwrap_or(false) {
            self.out
                .push_str([" ", "\n", "\t", "\r\n  "][self.u.choose_index(4).unwrap_or(0)]);
        }
    }

    fn key(&mut self, k: &Key) {
        let name = match k {
            Key::WebSearch => "web_search",
            Key::Messages => "messages",
            Key::Role => "role",
            Key::Content => "content",
            Key::System => "system",
            Key::Type => "type",
            Key::Text => "text",
            Key::Stream => "stream",
            Key::Other(s) => s,
        };
        if name.len() > 3 && name.is_char_boundary(3) && self.u.ratio(1, 8).unwrap_or(false) {
            // An escaped key: `web\u005fsearch` is still `web_search`.
            let (a, b) = name.split_at(3);
            let c = b.chars().next().unwrap_or('x');
            self.out.push_str(&format!(
                "\"{a}\\u{:04x}{}\"",
                u32::from(c) & 0xFFFF,
                &b[c.len_utf8()..]
            ));
        } else {
            self.out.push_str(&serde_json::to_string(name).unwrap());
        }
    }

    fn val(&mut self, v: &J, depth: usize) {
        self.ws();
        match v {
            J::Null => self.out.push_str("null"),
            J::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            J::Num(n) => self.out.push_str(&n.to_string()),
            J::Str(s) => self.out.push_str(&serde_json::to_string(s).unwrap()),
            J::User => self.out.push_str("\"user\""),
            J::TextWord => self.out.push_str("\"text\""),
            J::Arr(a) if depth < 6 => {
                self.out.push('[');
                for (k, e) in a.iter().enumerate() {
                    if k > 0 {
                        self.out.push(',');
                    }
                    self.val(e, depth + 1);
                }
                self.ws();
                self.out.push(']');
            }
            J::Obj(m) if depth < 6 => self.obj(m, depth),
            _ => self.out.push_str("0"),
        }
        self.ws();
    }

    fn obj(&mut self, m: &[(Key, J)], depth: usize) {
        self.out.push('{');
        for (k, (key, v)) in m.iter().enumerate() {
            if k > 0 {
                self.out.push(',');
            }
            self.ws();
            self.key(key);
            self.ws();
            self.out.push(':');
            self.val(v, depth + 1);
        }
        self.ws();
        self.out.push('}');
    }
}

/// What `inject` should produce, on `Value`s (`None`: `NoMessages`).
fn reference(endpoint: Endpoint, placement: Placement, v: &Value, text: &str) -> Option<Value> {
    let mut v = v.clone();
    let block = json!({"type": "text", "text": text});
    let obj = v.as_object_mut().expect("an object");
    if placement == Placement::UserMessage {
        let user = obj
            .get_mut("messages")
            .and_then(Value::as_array_mut)
            .and_then(|list| {
                list.iter_mut()
                    .filter(|m| m.is_object())
                    .rfind(|m| m["role"] == "user")
            });
        if let Some(Value::Object(m)) = user {
            let content = match m.remove("content") {
                // A string stays a string: the block, then the question.
                Some(Value::String(s)) => Value::String(format!("{text}{s}")),
                Some(Value::Array(mut a)) => {
                    a.insert(0, block);
                    Value::Array(a)
                }
                _ => json!([block]),
            };
            m.insert("content".into(), content);
            return Some(v);
        }
    }
    match endpoint {
        Endpoint::ChatCompletions => {
            let list = obj.get_mut("messages")?.as_array_mut()?;
            list.insert(0, json!({"role": "system", "content": text}));
        }
        Endpoint::Messages => {
            let system = match obj.remove("system") {
                // A string stays a string: the system text, a blank line,
                // the block.
                Some(Value::String(s)) => Value::String(format!("{s}\n\n{text}")),
                Some(Value::Array(mut a)) => {
                    a.push(block);
                    Value::Array(a)
                }
                _ => Value::String(text.to_owned()),
            };
            obj.insert("system".into(), system);
        }
        // (Not generated by this target; tests/request.rs covers it.)
        Endpoint::Responses => return None,
    }
    Some(v)
}

fn check(endpoint: Endpoint, placement: Placement, body: &[u8], title: &str) {
    let Ok(r) = inspect(endpoint, body.to_vec()) else {
        return;
    };
    // Lone surrogate escapes are accepted (as serde_json's validation does)
    // but make no `Value`: then only "no panic" is checked.
    let input = serde_json::from_slice::<Value>(body);
    let Ok(Value::Object(mut input)) = input else {
        let _ = inject(
            endpoint,
            r.body(),
            &Sources::new(Vec::new()),
            &InjectOptions::default(),
        );
        return;
    };
    let out: Value = serde_json::from_slice(r.body()).expect("inspect's output is valid JSON");
    input.remove("web_search");
    assert_eq!(
        out,
        Value::Object(input),
        "inspect changed more than web_search"
    );
    let sources = Sources::new(vec![Source {
        title: Some(title.to_owned()),
        url: Some("https://example.com/".into()),
        ..Default::default()
    }]);
    let opts = InjectOptions {
        placement,
        ..InjectOptions::default()
    };
    let text = render_sources(&opts.template, &sources);
    let want = reference(endpoint, placement, &out, &text);
    match inject(endpoint, r.body(), &sources, &opts) {
        Ok(injected) => {
            let got: Value =
                serde_json::from_slice(&injected).expect("inject's output is valid JSON");
            assert_eq!(Some(got), want, "inject differs from the reference");
        }
        Err(InjectError::NoMessages) => assert_eq!(want, None, "unexpected NoMessages"),
        Err(e) => panic!("inject refused inspect's output: {e}"),
    }
}

fuzz_target!(|case: Case| {
    let mut w = W {
        u: Unstructured::new(&case.style),
        out: String::new(),
    };
    w.obj(&case.body, 0);
    let endpoint = if case.messages {
        Endpoint::Messages
    } else {
        Endpoint::ChatCompletions
    };
    let placement = if case.system {
        Placement::System
    } else {
        Placement::UserMessage
    };
    for body in [w.out.as_bytes(), &case.raw] {
        check(endpoint, placement, body, &case.title);
    }
});
