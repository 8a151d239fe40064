//! Request side: `web_search` inspection and stripping, query extraction,
//! source injection (docs/reference/request.md), through the public API.

use citestream::request::{
    Endpoint, InjectError, InjectOptions, Placement, RequestErrorKind, Template, inject, inspect,
    render_sources,
};
use citestream::sources::{Source, Sources};
use proptest::prelude::*;
use serde_json::{Value, json};

const CHAT: Endpoint = Endpoint::ChatCompletions;
const MSGS: Endpoint = Endpoint::Messages;

fn body_str(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap()
}

fn src(title: &str, url: &str, text: &str) -> Source {
    Source {
        title: Some(title.into()),
        url: Some(url.into()),
        text: Some(text.into()),
        ..Default::default()
    }
}

fn two_sources() -> Sources {
    Sources::new(vec![
        src(
            "Lisbon weather: weekend outlook",
            "https://weather.example/lisbon/weekend",
            "Sunny, 24 °C",
        ),
        src(
            "Sunday forecast for Lisbon",
            "https://forecast.example/pt/lisbon/sunday",
            "Rain later",
        ),
    ])
}

// ---------------------------------------------------------------- seeds

/// The seed's curl body, byte for byte (web_search last, pretty-printed).
const CURL: &str = r#"{
    "model": "shannon-3",
    "messages": [
      {"role": "user", "content": "What is the weather forecast for Lisbon this weekend?"}
    ],
    "web_search": true
  }"#;

/// What the OpenAI Python SDK sends for the seed's `extra_body` call:
/// `json.dumps` separators, extra_body merged after the SDK's own keys.
const PYTHON: &str = r#"{"messages": [{"role": "user", "content": "What is the weather forecast for Lisbon this weekend?"}], "model": "shannon-3", "web_search": true}"#;

/// What the JS SDK sends: `JSON.stringify` of the seed's object literal.
const JS: &str = r#"{"model":"shannon-3","messages":[{"role":"user","content":"What is the weather forecast for Lisbon this weekend?"}],"web_search":true}"#;

/// The seed's `/v1/messages` body (web_search in the middle).
const MESSAGES: &str = r#"{
  "model": "shannon-3",
  "web_search": true,
  "messages": [
    {
      "role": "user",
      "content": "What is the weather forecast for Lisbon this weekend?"
    }
  ]
}"#;

const Q: &str = "What is the weather forecast for Lisbon this weekend?";

#[test]
fn seed_curl() {
    let r = inspect(CHAT, CURL).unwrap();
    assert!(r.web_search());
    assert_eq!(r.query().unwrap().text, Q);
    assert!(r.query().unwrap().context.is_empty());
    let expected = r#"{
    "model": "shannon-3",
    "messages": [
      {"role": "user", "content": "What is the weather forecast for Lisbon this weekend?"}
    ]
  }"#;
    assert_eq!(body_str(r.body()), expected);
    assert!(!r.stream());
    assert_eq!(r.n(), 1);
}

#[test]
fn seed_python_extra_body() {
    let r = inspect(CHAT, PYTHON).unwrap();
    assert!(r.web_search());
    assert_eq!(r.query().unwrap().text, Q);
    assert_eq!(
        body_str(r.body()),
        r#"{"messages": [{"role": "user", "content": "What is the weather forecast for Lisbon this weekend?"}], "model": "shannon-3"}"#
    );
}

#[test]
fn seed_js() {
    let r = inspect(CHAT, JS).unwrap();
    assert!(r.web_search());
    assert_eq!(r.query().unwrap().text, Q);
    assert_eq!(
        body_str(r.body()),
        r#"{"model":"shannon-3","messages":[{"role":"user","content":"What is the weather forecast for Lisbon this weekend?"}]}"#
    );
}

#[test]
fn seed_messages() {
    let r = inspect(MSGS, MESSAGES).unwrap();
    assert!(r.web_search());
    assert_eq!(r.query().unwrap().text, Q);
    let expected = r#"{
  "model": "shannon-3",
  "messages": [
    {
      "role": "user",
      "content": "What is the weather forecast for Lisbon this weekend?"
    }
  ]
}"#;
    assert_eq!(body_str(r.body()), expected);
}

#[test]
fn seeds_inject_and_parse() {
    for (ep, body) in [(CHAT, CURL), (CHAT, PYTHON), (CHAT, JS), (MSGS, MESSAGES)] {
        let r = inspect(ep, body).unwrap();
        let out = inject(ep, r.body(), &two_sources(), &InjectOptions::default()).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["model"], "shannon-3");
        assert!(v.get("web_search").is_none());
        // A string content stays a string: the block, then the question.
        let content = v["messages"][0]["content"].as_str().unwrap();
        let block = content.strip_suffix(Q).unwrap();
        assert!(block.ends_with("\n\n"));
        assert!(block.contains("[1] Lisbon weather: weekend outlook\nURL: https://weather.example/lisbon/weekend\nSunny, 24 °C"));
        assert!(block.contains("[2] Sunday forecast for Lisbon"));
        assert!(block.contains("[1]") && block.contains("square brackets"));
    }
}

// ---------------------------------------------------------------- switch

#[test]
fn absent_or_false_means_no_search() {
    let b = r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#;
    let r = inspect(CHAT, b).unwrap();
    assert!(!r.web_search());
    assert!(r.query().is_none());
    assert_eq!(body_str(r.body()), b);

    let r = inspect(
        MSGS,
        r#"{"web_search": false ,"messages":[{"role":"user","content":"x"}]}"#,
    )
    .unwrap();
    assert!(!r.web_search());
    assert!(r.query().is_none());
    assert_eq!(
        body_str(r.body()),
        r#"{"messages":[{"role":"user","content":"x"}]}"#
    );
}

#[test]
fn unchanged_body_is_not_copied() {
    let b = bytes::Bytes::from_static(br#"{"model":"m"}"#);
    let r = inspect(CHAT, b.clone()).unwrap();
    assert_eq!(r.body().as_ptr(), b.as_ptr());
}

#[test]
fn non_boolean_web_search_is_a_400_in_the_endpoint_shape() {
    for (v, what) in [
        ("\"true\"", "a string"),
        ("1", "a number"),
        ("0", "a number"),
        ("null", "null"),
        ("{}", "an object"),
        ("[true]", "an array"),
    ] {
        let b = format!(r#"{{"model":"m","web_search":{v},"messages":[]}}"#);
        let e = inspect(CHAT, b.clone()).unwrap_err();
        assert_eq!(e.kind(), RequestErrorKind::WebSearchNotBoolean);
        assert_eq!(e.status(), 400);
        assert_eq!(e.param(), Some("web_search"));
        let body: Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["param"], "web_search");
        assert_eq!(body["error"]["code"], Value::Null);
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(msg.contains("web_search") && msg.contains(what), "{msg}");
        assert_eq!(body.as_object().unwrap().len(), 1);

        let e = inspect(MSGS, b).unwrap_err();
        let body: Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("web_search")
        );
        assert_eq!(body["error"].as_object().unwrap().len(), 2);
    }
}

#[test]
fn not_json_or_not_object_is_the_usual_400() {
    for (b, kind) in [
        (&b""[..], RequestErrorKind::NotJson),
        (b"{", RequestErrorKind::NotJson),
        (b"{\"a\":1}x", RequestErrorKind::NotJson),
        (b"\xff\xfe", RequestErrorKind::NotJson),
        (b"{\"a\":\"\xff\"}", RequestErrorKind::NotJson),
        (b"[1,2]", RequestErrorKind::NotObject),
        (b" \"web_search\" ", RequestErrorKind::NotObject),
        (b"null", RequestErrorKind::NotObject),
        (b"true", RequestErrorKind::NotObject),
    ] {
        for ep in [CHAT, MSGS, RESP] {
            let e = inspect(ep, b.to_vec()).unwrap_err();
            assert_eq!(e.kind(), kind, "{:?}", String::from_utf8_lossy(b));
            assert_eq!(e.status(), 400);
            assert_eq!(e.param(), None);
            let v: Value = serde_json::from_slice(&e.body()).unwrap();
            match ep {
                CHAT | RESP => {
                    assert_eq!(v["error"]["type"], "invalid_request_error");
                    assert_eq!(v["error"]["param"], Value::Null);
                }
                MSGS => {
                    assert_eq!(v["type"], "error");
                    assert_eq!(v["error"]["type"], "invalid_request_error");
                }
            }
        }
    }
}

#[test]
fn duplicate_keys_last_wins_all_removed() {
    let r = inspect(CHAT, r#"{"web_search":false,"a":1,"web_search":true}"#).unwrap();
    assert!(r.web_search());
    assert_eq!(body_str(r.body()), r#"{"a":1}"#);
    let r = inspect(CHAT, r#"{"web_search":true,"a":1,"web_search":false}"#).unwrap();
    assert!(!r.web_search());
    assert_eq!(body_str(r.body()), r#"{"a":1}"#);
    // Only the last one decides, like serde_json::Value and Python's json.
    let r = inspect(CHAT, r#"{"web_search":"x","web_search":true}"#).unwrap();
    assert!(r.web_search());
    assert_eq!(body_str(r.body()), r#"{}"#);
    assert!(inspect(CHAT, r#"{"web_search":true,"web_search":1}"#).is_err());
    // An escaped key is the same key.
    let r = inspect(CHAT, r#"{"a":1,"web\u005fsearch":true}"#).unwrap();
    assert!(r.web_search());
    assert_eq!(body_str(r.body()), r#"{"a":1}"#);
}

#[test]
fn nested_web_search_is_not_the_switch() {
    let b = r#"{"metadata":{"web_search":true},"messages":[{"role":"user","content":"x","web_search":true}]}"#;
    let r = inspect(CHAT, b).unwrap();
    assert!(!r.web_search());
    assert_eq!(body_str(r.body()), b);
}

#[test]
fn search_tools_start_no_search_and_are_forwarded_untouched() {
    let chat_fn = r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"web_search","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]}"#;
    let anthropic = r#"{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5}]}"#;
    let responses = r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search"}]}"#;
    for (ep, b) in [
        (CHAT, chat_fn),
        (MSGS, anthropic),
        (CHAT, responses),
        (MSGS, responses),
    ] {
        let r = inspect(ep, b).unwrap();
        assert!(!r.web_search(), "{b}");
        assert_eq!(body_str(r.body()), b);
    }
    // With the switch on too, the tools stay as they are.
    let with = chat_fn.replacen("{\"model\"", "{\"web_search\":true,\"model\"", 1);
    let r = inspect(CHAT, with).unwrap();
    assert!(r.web_search());
    assert_eq!(body_str(r.body()), chat_fn);
}

// ---------------------------------------------------------------- query

#[test]
fn query_is_last_user_message_with_context() {
    let b = r#"{"web_search":true,"messages":[
        {"role":"system","content":"Be brief."},
        {"role":"user","content":"Weather in Lisbon?"},
        {"role":"assistant","content":"Sunny."},
        {"role":"assistant","content":null,"tool_calls":[]},
        {"role":"user","content":[
            {"type":"text","text":"And on"},
            {"type":"image_url","image_url":{"url":"data:image/png;base64,AAA"}},
            {"type":"text","text":"Sunday?"}
        ]},
        {"role":"assistant","content":"Let me"}
    ]}"#;
    let r = inspect(CHAT, b).unwrap();
    let q = r.query().unwrap();
    assert_eq!(q.text, "And on\nSunday?");
    let ctx: Vec<(&str, &str)> = q
        .context
        .iter()
        .map(|t| (t.role.as_str(), t.text.as_str()))
        .collect();
    assert_eq!(
        ctx,
        [
            ("system", "Be brief."),
            ("user", "Weather in Lisbon?"),
            ("assistant", "Sunny.")
        ]
    );
}

#[test]
fn query_on_messages_blocks_and_system() {
    let b = r#"{"web_search":true,"system":[{"type":"text","text":"S1"},{"type":"text","text":"S2"}],"messages":[
        {"role":"user","content":"first \"q\" \u00e9\ud83d\ude00"},
        {"role":"assistant","content":[{"type":"text","text":"ans"},{"type":"tool_use","id":"t","name":"f","input":{}}]},
        {"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}},{"type":"text","text":"second"}]}
    ]}"#;
    let r = inspect(MSGS, b).unwrap();
    let q = r.query().unwrap();
    assert_eq!(q.text, "second");
    assert_eq!(q.context[0].role, "system");
    assert_eq!(q.context[0].text, "S1\nS2");
    assert_eq!(q.context[1].text, "first \"q\" é😀");
    assert_eq!(q.context[2].text, "ans");
    assert_eq!(q.context.len(), 3);
}

#[test]
fn no_user_text_means_no_query() {
    for b in [
        r#"{"web_search":true,"messages":[]}"#,
        r#"{"web_search":true}"#,
        r#"{"web_search":true,"messages":[{"role":"assistant","content":"x"}]}"#,
        r#"{"web_search":true,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}"#,
        r#"{"web_search":true,"messages":[{"role":"user","content":"   "}]}"#,
        r#"{"web_search":true,"messages":"nope"}"#,
    ] {
        let r = inspect(CHAT, b).unwrap();
        assert!(r.web_search());
        assert!(r.query().is_none(), "{b}");
    }
}

#[test]
fn response_settings() {
    let r = inspect(
        CHAT,
        r#"{"stream":true,"n":3,"stream_options":{"include_usage":true},"messages":[]}"#,
    )
    .unwrap();
    assert!(r.stream());
    assert_eq!(r.n(), 3);
    assert!(r.include_usage());
    let r = inspect(
        CHAT,
        r#"{"stream":"yes","n":0,"stream_options":{"include_usage":false}}"#,
    )
    .unwrap();
    assert!(!r.stream());
    assert_eq!(r.n(), 1);
    assert!(!r.include_usage());
    let r = inspect(CHAT, r#"{"n":99999999999,"stream":false}"#).unwrap();
    assert_eq!(r.n(), u32::MAX);
    let r = inspect(CHAT, r#"{"n":2.5}"#).unwrap();
    assert_eq!(r.n(), 1);
    let r = inspect(
        MSGS,
        r#"{"stream":true,"n":4,"stream_options":{"include_usage":true}}"#,
    )
    .unwrap();
    assert!(r.stream());
    assert_eq!(r.n(), 1);
    assert!(!r.include_usage());
}

// ---------------------------------------------------------------- injection

#[test]
fn inject_user_string_content_keeps_other_bytes() {
    let b = r#"{"model":"m", "messages":[{"role":"system","content":"s"},{"role":"user" , "content" : "hi",  "name":"u"}], "x":1.50}"#;
    let s = Sources::new(vec![src("T", "U", "X")]);
    let t = Template {
        header: "H".into(),
        source: "[{n}] {title}".into(),
        separator: "|".into(),
        footer: "F".into(),
    };
    let opts = InjectOptions {
        placement: Placement::UserMessage,
        template: t,
    };
    let out = inject(CHAT, b.as_bytes(), &s, &opts).unwrap();
    assert_eq!(
        body_str(&out),
        r#"{"model":"m", "messages":[{"role":"system","content":"s"},{"role":"user" , "content" : "H[1] TFhi",  "name":"u"}], "x":1.50}"#
    );
}

#[test]
fn inject_user_parts_and_blocks() {
    let s = Sources::new(vec![src("T", "U", "X")]);
    let t = Template {
        header: String::new(),
        source: "{n}".into(),
        separator: String::new(),
        footer: String::new(),
    };
    let opts = InjectOptions {
        placement: Placement::UserMessage,
        template: t,
    };
    let cases = [
        (
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"1"},{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"u"}}]}]}"#,
        ),
        (
            r#"{"messages":[{"role":"user","content":[]}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"1"}]}]}"#,
        ),
        (
            r#"{"messages":[{"role":"user","content":null}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"text","text":"1"}]}]}"#,
        ),
        (
            r#"{"messages":[{"role":"user"}]}"#,
            r#"{"messages":[{"content":[{"type":"text","text":"1"}],"role":"user"}]}"#,
        ),
        (
            // Only the last user message gets the block.
            r#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"d"}]}"#,
            r#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"1c"},{"role":"assistant","content":"d"}]}"#,
        ),
    ];
    for ep in [CHAT, MSGS] {
        for (inp, want) in cases {
            let out = inject(ep, inp.as_bytes(), &s, &opts).unwrap();
            assert_eq!(body_str(&out), want);
        }
    }
    // Original string literal bytes (escapes) are kept as they were.
    let out = inject(
        CHAT,
        br#"{"messages":[{"role":"user","content":"\u00e9\n"}]}"#,
        &s,
        &opts,
    )
    .unwrap();
    assert_eq!(
        body_str(&out),
        r#"{"messages":[{"role":"user","content":"1\u00e9\n"}]}"#
    );
}

#[test]
fn inject_system_placement() {
    let s = Sources::new(vec![src("T", "U", "X")]);
    let t = Template {
        header: String::new(),
        source: "{n}".into(),
        separator: String::new(),
        footer: String::new(),
    };
    let opts = InjectOptions {
        placement: Placement::System,
        template: t,
    };
    let chat = [
        (
            r#"{"messages":[{"role":"user","content":"q"}]}"#,
            r#"{"messages":[{"role":"system","content":"1"},{"role":"user","content":"q"}]}"#,
        ),
        (
            r#"{"messages":[ ]}"#,
            r#"{"messages":[{"role":"system","content":"1"} ]}"#,
        ),
    ];
    for (inp, want) in chat {
        assert_eq!(
            body_str(&inject(CHAT, inp.as_bytes(), &s, &opts).unwrap()),
            want
        );
    }
    let m = r#""messages":[{"role":"user","content":"q"}]"#;
    let msgs = [
        (format!("{{{m}}}"), format!(r#"{{{m},"system":"1"}}"#)),
        (
            format!(r#"{{"system":"S",{m}}}"#),
            // A string `system` stays a string, the block after a blank line.
            format!(r#"{{"system":"S\n\n1",{m}}}"#),
        ),
        (
            format!(
                r#"{{"system":[{{"type":"text","text":"S","cache_control":{{"type":"ephemeral"}}}}],{m}}}"#
            ),
            format!(
                r#"{{"system":[{{"type":"text","text":"S","cache_control":{{"type":"ephemeral"}}}},{{"type":"text","text":"1"}}],{m}}}"#
            ),
        ),
        (
            format!(r#"{{"system":[ ],{m}}}"#),
            format!(r#"{{"system":[ {{"type":"text","text":"1"}}],{m}}}"#),
        ),
        (
            format!(r#"{{"system":null,{m}}}"#),
            format!(r#"{{"system":"1",{m}}}"#),
        ),
        (format!("{{{m} }}"), format!(r#"{{{m} ,"system":"1"}}"#)),
    ];
    for (inp, want) in msgs {
        assert_eq!(
            body_str(&inject(MSGS, inp.as_bytes(), &s, &opts).unwrap()),
            want
        );
    }
    // Without messages there is nowhere to put a chat system message.
    assert_eq!(
        inject(CHAT, b"{}", &s, &opts).unwrap_err(),
        InjectError::NoMessages
    );
    // Messages endpoint: `system` is always possible.
    assert_eq!(
        body_str(&inject(MSGS, b"{}", &s, &opts).unwrap()),
        r#"{"system":"1"}"#
    );
}

#[test]
fn inject_falls_back_to_system_without_user_message() {
    let s = Sources::new(vec![src("T", "U", "X")]);
    let t = Template {
        header: String::new(),
        source: "{n}".into(),
        separator: String::new(),
        footer: String::new(),
    };
    let opts = InjectOptions {
        placement: Placement::UserMessage,
        template: t,
    };
    let out = inject(
        CHAT,
        br#"{"messages":[{"role":"assistant","content":"a"}]}"#,
        &s,
        &opts,
    )
    .unwrap();
    assert_eq!(
        body_str(&out),
        r#"{"messages":[{"role":"system","content":"1"},{"role":"assistant","content":"a"}]}"#
    );
}

#[test]
fn inject_errors_and_no_sources() {
    let s = Sources::new(vec![src("T", "U", "X")]);
    let o = InjectOptions::default();
    assert!(matches!(
        inject(CHAT, b"[1]", &s, &o),
        Err(InjectError::Invalid(_))
    ));
    assert!(matches!(
        inject(MSGS, b"nope", &s, &o),
        Err(InjectError::Invalid(_))
    ));
    let b = br#"{"messages":[{"role":"user","content":"q"}]}"#;
    assert_eq!(
        inject(CHAT, b, &Sources::new(vec![]), &o).unwrap(),
        b.to_vec()
    );
}

#[test]
fn template_placeholders_single_pass() {
    let s = Sources::new(vec![
        Source {
            title: Some("{url} {n}".into()),
            url: Some("u".into()),
            heading: Some("h".into()),
            author: Some("a".into()),
            year: Some("1999".into()),
            reference: Some("34".into()),
            ..Default::default()
        },
        Source::default(),
    ]);
    let t = Template {
        header: "{n}>".into(),
        source: "{n}:{title}:{url}:{text}:{heading}:{author}:{year}:{reference}:{other}:{".into(),
        separator: "/".into(),
        footer: "<".into(),
    };
    assert_eq!(
        render_sources(&t, &s),
        "{n}>1:{url} {n}:u::h:a:1999:34:{other}:{/2::::::::{other}:{<"
    );
}

#[test]
fn default_template_tells_model_to_cite() {
    let t = Template::default();
    let r = render_sources(&t, &two_sources());
    assert!(r.contains("[1]"));
    assert!(r.contains("[1] Lisbon weather: weekend outlook\nURL: https://weather.example/lisbon/weekend\nSunny, 24 °C\n\n[2] Sunday"));
}

// ---------------------------------------------------------------- properties

/// A JSON value as text, with random whitespace inside.
fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("-1.5e3".to_owned()),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just(r#""with \"web_search\":true, and } ] { [""#.to_owned()),
        Just(r#""\ud800 lone""#.to_owned()),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..4), ws())
                .prop_map(|(v, w)| format!("[{w}{}{w}]", v.join(&format!("{w},{w}")))),
            (prop::collection::vec((key(), inner), 0..4), ws()).prop_map(|(v, w)| {
                let m: Vec<String> = v
                    .into_iter()
                    .map(|(k, v)| format!("{k}{w}:{w}{v}"))
                    .collect();
                format!("{{{w}{}{w}}}", m.join(&format!("{w},{w}")))
            }),
        ]
    })
}

fn ws() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![Just(' '), Just('\n'), Just('\t'), Just('\r')],
        0..3,
    )
    .prop_map(|v| v.into_iter().collect())
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_]{1,8}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("\"web_searc\"".to_owned()),
        Just("\"web_search_x\"".to_owned()),
        Just("\"Web_search\"".to_owned()),
    ]
    .prop_filter("not the switch", |k| k != "\"web_search\"")
}

/// One member of the top-level object: key, whitespace around the colon,
/// value.
fn member() -> impl Strategy<Value = String> {
    (key(), ws(), ws(), json_value()).prop_map(|(k, a, b, v)| format!("{k}{a}:{b}{v}"))
}

fn object(members: &[(String, String)], lead: &str, trail: &str) -> String {
    // members: (separator before it, member text); the first separator is unused.
    let mut s = format!("{{{lead}");
    for (i, (sep, m)) in members.iter().enumerate() {
        if i > 0 {
            s.push_str(sep);
        }
        s.push_str(m);
    }
    s.push_str(trail);
    s.push('}');
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Stripping removes exactly the member and its separator: the output is
    /// the same object written without it, byte for byte.
    #[test]
    fn strip_keeps_every_other_byte(
        members in prop::collection::vec((ws(), ws(), member()), 0..6),
        pos in any::<prop::sample::Index>(),
        value in any::<bool>(),
        (wa, wb, wc, wd) in (ws(), ws(), ws(), ws()),
        lead in ws(),
        trail in ws(),
        ws_prefix in ws(),
        ws_suffix in ws(),
    ) {
        let mut ms: Vec<(String, String)> =
            members.into_iter().map(|(a, b, m)| (format!("{a},{b}"), m)).collect();
        let expected = format!("{ws_prefix}{}{ws_suffix}", object(&ms, &lead, &trail));
        let at = pos.index(ms.len() + 1);
        let ws_member = format!("\"web_search\"{wa}:{wb}{value}");
        ms.insert(at, (format!("{wc},{wd}"), ws_member));
        let with = format!("{ws_prefix}{}{ws_suffix}", object(&ms, &lead, &trail));
        for ep in [CHAT, MSGS] {
            let r = inspect(ep, with.clone()).unwrap();
            prop_assert_eq!(r.web_search(), value);
            prop_assert_eq!(body_str(r.body()), expected.as_str());
        }
    }

    /// Bodies without the switch pass through unchanged.
    #[test]
    fn no_switch_no_change(members in prop::collection::vec((ws(), ws(), member()), 0..6), lead in ws()) {
        let ms: Vec<(String, String)> = members.into_iter().map(|(a, b, m)| (format!("{a},{b}"), m)).collect();
        let o = object(&ms, &lead, "");
        let r = inspect(CHAT, o.clone()).unwrap();
        prop_assert!(!r.web_search());
        prop_assert_eq!(body_str(r.body()), o.as_str());
    }

    /// Arbitrary bytes never panic, and an error is always a 400 whose body
    /// is JSON.
    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..64), s in json_value()) {
        for input in [b.clone(), s.clone().into_bytes(), format!("{{\"web_search\":{s}}}").into_bytes()] {
            for ep in [CHAT, MSGS] {
                match inspect(ep, input.clone()) {
                    Ok(r) => {
                        serde_json::from_slice::<serde::de::IgnoredAny>(r.body()).unwrap();
                    }
                    Err(e) => {
                        prop_assert_eq!(e.status(), 400);
                        serde_json::from_slice::<Value>(&e.body()).unwrap();
                    }
                }
                let srcs = Sources::new(vec![Source::default()]);
                let _ = inject(ep, &input, &srcs, &InjectOptions::default());
            }
        }
    }

    /// Injection escapes any title, URL and text correctly: the output
    /// parses, the block decodes to exactly the rendered text, and every
    /// other field is unchanged.
    #[test]
    fn inject_any_strings(
        srcs in prop::collection::vec((any::<String>(), any::<String>(), any::<String>()), 1..4),
        system_first in any::<bool>(),
        string_content in any::<bool>(),
        placement_system in any::<bool>(),
        messages_ep in any::<bool>(),
        extra in json_value(),
    ) {
        let sources = Sources::new(srcs.iter().map(|(t, u, x)| src(t, u, x)).collect());
        let ep = if messages_ep { MSGS } else { CHAT };
        let content = if string_content { json!("the question") } else { json!([{"type": "text", "text": "the question"}, {"type": "other", "x": 1}]) };
        let mut msgs = vec![json!({"role": "user", "content": "earlier"}), json!({"role": "assistant", "content": "reply"}), json!({"role": "user", "content": content.clone(), "name": "n"})];
        if system_first && !messages_ep {
            msgs.insert(0, json!({"role": "system", "content": "sys"}));
        }
        let extra_v: Value = serde_json::from_str(&extra).unwrap_or(Value::Null);
        let mut orig = json!({"model": "m", "messages": msgs, "extra": extra_v, "temperature": 0.5});
        if system_first && messages_ep {
            orig["system"] = json!("sys");
        }
        let body = serde_json::to_vec(&orig).unwrap();
        let placement = if placement_system { Placement::System } else { Placement::UserMessage };
        let opts = InjectOptions { placement, template: Template::default() };
        let out = inject(ep, &body, &sources, &opts).unwrap();
        let mut v: Value = serde_json::from_slice(&out).unwrap();
        let block = render_sources(&Template::default(), &sources);
        let part = json!({"type": "text", "text": block});
        match (placement, ep) {
            (Placement::UserMessage, _) => {
                let n = v["messages"].as_array().unwrap().len();
                let c = v["messages"][n - 1]["content"].take();
                let want = match content.clone() {
                    Value::String(s) => json!(format!("{block}{s}")),
                    Value::Array(a) => Value::Array([part].into_iter().chain(a).collect()),
                    _ => unreachable!(),
                };
                prop_assert_eq!(c, want);
                v["messages"][n - 1]["content"] = content;
            }
            (Placement::System, CHAT) => {
                let first = v["messages"].as_array_mut().unwrap().remove(0);
                prop_assert_eq!(first, json!({"role": "system", "content": block}));
            }
            (Placement::System, MSGS) => {
                let sys = v["system"].take();
                if system_first {
                    prop_assert_eq!(sys, json!(format!("sys\n\n{block}")));
                    v["system"] = json!("sys");
                } else {
                    prop_assert_eq!(sys, json!(block));
                    v.as_object_mut().unwrap().remove("system");
                }
            }
            _ => unreachable!(),
        }
        prop_assert_eq!(v, orig);
    }
}

/// Reference query extraction on a `serde_json::Value`.
fn reference_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let t: Vec<&str> = parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect();
            if t.is_empty() {
                None
            } else {
                Some(t.join("\n"))
            }
        }
        _ => None,
    }
}

fn message() -> impl Strategy<Value = Value> {
    let role = prop_oneof![
        Just("user"),
        Just("assistant"),
        Just("system"),
        Just("tool")
    ];
    let part = prop_oneof![
        any::<String>().prop_map(|t| json!({"type": "text", "text": t})),
        Just(json!({"type": "image_url", "image_url": {"url": "u"}})),
        Just(json!({"type": "text"})),
    ];
    let content = prop_oneof![
        any::<String>().prop_map(Value::String),
        prop::collection::vec(part, 0..3).prop_map(Value::Array),
        Just(Value::Null),
    ];
    (role, content).prop_map(|(r, c)| json!({"role": r, "content": c}))
}

proptest! {
    /// The scanner-based query extraction agrees with a serde_json reference
    /// on any message list (strings with any characters, escapes and all).
    #[test]
    fn query_matches_reference(msgs in prop::collection::vec(message(), 0..6), pretty in any::<bool>()) {
        let body = json!({"web_search": true, "messages": msgs});
        let text = if pretty { serde_json::to_string_pretty(&body).unwrap() } else { body.to_string() };
        let r = inspect(CHAT, text).unwrap();
        let last = msgs.iter().rposition(|m| m["role"] == "user");
        let want = last.and_then(|i| reference_text(&msgs[i]["content"]).filter(|t| !t.trim().is_empty()).map(|t| (i, t)));
        match (r.query(), want) {
            (None, None) => {}
            (Some(q), Some((i, t))) => {
                prop_assert_eq!(&q.text, &t);
                let ctx: Vec<(String, String)> = msgs[..i]
                    .iter()
                    .filter_map(|m| reference_text(&m["content"]).filter(|t| !t.is_empty()).map(|t| (m["role"].as_str().unwrap().to_owned(), t)))
                    .collect();
                let got: Vec<(String, String)> = q.context.iter().map(|t| (t.role.clone(), t.text.clone())).collect();
                prop_assert_eq!(got, ctx);
            }
            (got, want) => prop_assert!(false, "got {:?}, want {:?}", got, want),
        }
    }
}

#[test]
fn deep_nesting_never_overflows_the_stack() {
    // Neither validation (serde_json skips ignored values without recursing
    // without bound) nor the splicing scanner (iterative) recurses per level.
    let n = 100_000;
    let nested = format!("{}{}", "[".repeat(n), "]".repeat(n));
    let deep = format!(
        "{{\"web_search\":true,\"x\":{nested},\"messages\":[{{\"role\":\"user\",\"content\":\"q\"}}]}}"
    );
    let r = inspect(CHAT, deep.clone()).unwrap();
    assert!(r.web_search());
    assert_eq!(r.query().unwrap().text, "q");
    assert!(r.body().starts_with(b"{\"x\":[[[["));
    assert_eq!(r.body().len(), deep.len() - "\"web_search\":true,".len());
    let out = inject(MSGS, r.body(), &two_sources(), &InjectOptions::default()).unwrap();
    assert!(out.len() > r.body().len());
    // Unbalanced deep input is an error, not a crash.
    let bad = format!("{{\"x\":{}}}", "[".repeat(n));
    assert!(inspect(CHAT, bad).is_err());
}

// ---------------------------------------------------------------------------
// `/v1/responses`

const RESP: Endpoint = Endpoint::Responses;

#[test]
fn responses_bad_web_search_is_a_400_in_the_openai_shape() {
    for v in ["1", "\"true\"", "null", "[]", "{}"] {
        let body = format!(r#"{{"model":"m","web_search":{v},"input":"q"}}"#);
        let e = inspect(RESP, body.into_bytes()).unwrap_err();
        assert_eq!(e.kind(), RequestErrorKind::WebSearchNotBoolean);
        assert_eq!(e.status(), 400);
        let b: Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(b["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(b["error"]["param"], "web_search", "{v}");
        assert_eq!(b["error"]["code"], Value::Null);
    }
    for body in [&b"[1]"[..], b"nope", b"\"s\""] {
        let e = inspect(RESP, body.to_vec()).unwrap_err();
        let b: Value = serde_json::from_slice(&e.body()).unwrap();
        assert_eq!(b["error"]["type"], "invalid_request_error");
    }
}

#[test]
fn responses_web_search_is_removed_and_tools_are_kept() {
    let body = br#"{"model":"m","web_search":true,"tools":[{"type":"web_search"},{"type":"web_search_preview"}],"input":"Lisbon?","stream":true}"#;
    let r = inspect(RESP, body.to_vec()).unwrap();
    assert!(r.web_search() && r.stream());
    assert_eq!(r.n(), 1);
    assert_eq!(
        body_str(r.body()),
        r#"{"model":"m","tools":[{"type":"web_search"},{"type":"web_search_preview"}],"input":"Lisbon?","stream":true}"#
    );
    assert_eq!(r.query().unwrap().text, "Lisbon?");
    // The platform's own search tool alone starts nothing.
    let r = inspect(
        RESP,
        br#"{"tools":[{"type":"web_search"}],"input":"q"}"#.to_vec(),
    )
    .unwrap();
    assert!(!r.web_search() && r.query().is_none());
}

#[test]
fn responses_question_and_conversation_from_input_items() {
    let body = json!({
        "web_search": true,
        "instructions": "Be brief about Spain.",
        "input": [
            {"role": "system", "content": "You talk about France."},
            {"role": "developer", "content": [{"type": "input_text", "text": "Germany rules."}]},
            {"role": "user", "content": "Tell me about Portugal."},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Portugal is in Europe."}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "Italy"},
            {"role": "user", "content": [
                {"type": "input_text", "text": "And its capital?"},
                {"type": "input_image", "image_url": "https://i/"},
                {"type": "input_text", "text": "Briefly."}
            ]},
            {"type": "reasoning", "id": "rs", "summary": []}
        ]
    });
    let r = inspect(RESP, serde_json::to_vec(&body).unwrap()).unwrap();
    let q = r.query().unwrap();
    assert_eq!(q.text, "And its capital?\nBriefly.");
    let ctx: Vec<(&str, &str)> = q
        .context
        .iter()
        .map(|t| (t.role.as_str(), t.text.as_str()))
        .collect();
    assert_eq!(
        ctx,
        [
            ("user", "Tell me about Portugal."),
            ("assistant", "Portugal is in Europe.")
        ]
    );
}

#[test]
fn responses_input_of_unexpected_shapes_gives_no_query() {
    for input in [
        json!(null),
        json!(3),
        json!({"role": "user", "content": "q"}),
        json!([]),
        json!(["q"]),
        json!([{"role": "assistant", "content": "a"}]),
        json!([{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]),
        json!([{"role": "user", "content": 5}]),
        json!([{"type": "function_call_output", "role": "user", "output": "x"}]),
        json!("   "),
    ] {
        let body = json!({"web_search": true, "input": input});
        let r = inspect(RESP, serde_json::to_vec(&body).unwrap()).unwrap();
        assert!(r.web_search());
        assert_eq!(r.query(), None, "{input}");
        // Without a user item there is nowhere to put sources either (a
        // user item without text still takes them, as on chat).
        let has_user = input.is_string()
            || input.as_array().is_some_and(|a| {
                a.iter()
                    .any(|i| i["role"] == "user" && i.get("type").is_none())
            });
        let e = inject(
            RESP,
            &serde_json::to_vec(&body).unwrap(),
            &two_sources(),
            &InjectOptions::default(),
        );
        assert_eq!(e.is_ok(), has_user, "{input}: {e:?}");
        if !has_user {
            assert!(matches!(e, Err(InjectError::NoMessages)), "{input}");
        }
    }
    let r = inspect(RESP, br#"{"web_search":true}"#.to_vec()).unwrap();
    assert_eq!(r.query(), None);
}

#[test]
fn responses_injection_goes_with_the_question_never_instructions() {
    let sources = two_sources();
    let block = render_sources(&Template::default(), &sources);
    for placement in [Placement::UserMessage, Placement::System] {
        let opts = InjectOptions {
            placement,
            ..InjectOptions::default()
        };
        let cases = [
            (json!("Lisbon?"), json!(format!("{block}\n\nLisbon?"))),
            (
                json!([{"role": "user", "content": "Lisbon?"}]),
                json!([{"role": "user", "content": format!("{block}\n\nLisbon?")}]),
            ),
            (
                json!([{"role": "user", "content": [{"type": "input_text", "text": "Lisbon?"}]}]),
                json!([{"role": "user", "content": [
                    {"type": "input_text", "text": block},
                    {"type": "input_text", "text": "Lisbon?"}]}]),
            ),
            (
                json!([{"role": "user", "content": []}, {"role": "assistant", "content": "a"}]),
                json!([{"role": "user", "content": [{"type": "input_text", "text": block}]},
                       {"role": "assistant", "content": "a"}]),
            ),
            (
                json!([{"role": "user"}]),
                json!([{"content": [{"type": "input_text", "text": block}], "role": "user"}]),
            ),
        ];
        for (input, want) in cases {
            let body = json!({"model": "m", "instructions": "Be kind.", "input": input});
            let out = inject(RESP, &serde_json::to_vec(&body).unwrap(), &sources, &opts).unwrap();
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["input"], want, "{input}");
            assert_eq!(v["instructions"], "Be kind.");
            assert_eq!(v["model"], "m");
        }
    }
    // Every other byte kept: the edit is a splice.
    let body = br#"{ "input" : "q\u00e9" , "x":1.50 }"#;
    let out = inject(RESP, body, &sources, &InjectOptions::default()).unwrap();
    let s = body_str(&out);
    assert!(
        s.starts_with(r#"{ "input" : ""#) && s.ends_with(r#"\n\nq\u00e9" , "x":1.50 }"#),
        "{s}"
    );
}
