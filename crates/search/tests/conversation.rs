//! Search from the conversation over the bundled corpus: the conversations
//! of `tests/data/conversations.txt` (follow-ups of every kind, topic
//! switches, system prompts naming another subject; chat and messages
//! bodies, string and block content), each with the document that answers
//! its last question.
//!
//! Each conversation is made into a request body of its shape and read by
//! the core's request inspection (`citestream::request::inspect`), as every
//! host does, then searched through [`Search`] with the default config
//! (`search.query = "context"`) and with `query = "last"`. Prints top-1 and
//! top-3 per kind for both, and asserts: follow-ups find their subject's
//! document in the top 3 for at least 90%, at least twice as often as
//! `last` (top 1 and top 3); topic switches put the new subject first for
//! at least 90%, no worse than `last`, and carry no term of the old
//! subject. `CONVO_DEBUG=1` also prints every conversation whose document
//! is not first.

use std::collections::BTreeMap;

use citestream::request::{Endpoint, inspect};
use citestream_search::{QueryMode, Search, SearchConfig, SearchQuery, Source};
use serde_json::{Value, json};

const DATA: &str = include_str!("data/conversations.txt");

#[derive(Debug)]
struct Conversation {
    line: usize,
    kind: String,
    shape: String,
    want: String,
    not: Option<String>,
    turns: Vec<(String, String)>,
}

fn title(doc: &str) -> String {
    let doc = doc.trim();
    match doc.strip_prefix('"').and_then(|d| d.strip_suffix('"')) {
        Some(t) => t.to_owned(),
        None => format!("{doc} - The World Factbook"),
    }
}

fn conversations() -> Vec<Conversation> {
    let mut out: Vec<Conversation> = Vec::new();
    for (i, line) in DATA.lines().enumerate() {
        if let Some(h) = line.strip_prefix("## ") {
            let (head, docs) = h.split_once("->").expect("header has ->");
            let mut head = head.split_whitespace();
            let (kind, shape) = (head.next().unwrap(), head.next().unwrap());
            let (want, not) = match docs.split_once('!') {
                Some((w, n)) => (title(w), Some(title(n))),
                None => (title(docs), None),
            };
            out.push(Conversation {
                line: i + 1,
                kind: kind.to_owned(),
                shape: shape.to_owned(),
                want,
                not,
                turns: Vec::new(),
            });
        } else if let Some((role, text)) = line.split_once(": ")
            && !line.starts_with('#')
            && let Some(c) = out.last_mut()
        {
            c.turns.push((role.to_owned(), text.to_owned()));
        }
    }
    out
}

fn content(text: &str, blocks: bool) -> Value {
    if blocks {
        json!([{"type": "text", "text": text}])
    } else {
        json!(text)
    }
}

/// The request body of `c` in its shape.
fn body(c: &Conversation) -> (Endpoint, Vec<u8>) {
    let blocks = c.shape.ends_with("-blocks");
    let (endpoint, v) = if c.shape.starts_with("chat") {
        let messages: Vec<Value> = c
            .turns
            .iter()
            .map(|(r, t)| json!({"role": r, "content": content(t, blocks)}))
            .collect();
        (
            Endpoint::ChatCompletions,
            json!({"model": "m", "web_search": true, "messages": messages}),
        )
    } else {
        let system: Vec<&str> = c
            .turns
            .iter()
            .filter(|(r, _)| r == "system" || r == "developer")
            .map(|(_, t)| t.as_str())
            .collect();
        let messages: Vec<Value> = c
            .turns
            .iter()
            .filter(|(r, _)| r == "user" || r == "assistant")
            .map(|(r, t)| json!({"role": r, "content": content(t, blocks)}))
            .collect();
        let mut v =
            json!({"model": "m", "max_tokens": 100, "web_search": true, "messages": messages});
        if !system.is_empty() {
            v["system"] = content(&system.join("\n"), blocks);
        }
        (Endpoint::Messages, v)
    };
    (endpoint, serde_json::to_vec(&v).unwrap())
}

/// The query the core extracts from `c`'s body.
fn query(c: &Conversation) -> SearchQuery {
    let (endpoint, body) = body(c);
    let i = inspect(endpoint, body).unwrap();
    i.query().cloned().expect("a query")
}

fn titles(sources: &[Source]) -> Vec<String> {
    sources
        .iter()
        .take(3)
        .map(|s| s.title.clone().unwrap_or_default())
        .collect()
}

#[derive(Default, Clone, Copy)]
struct Tally {
    n: u32,
    at1: u32,
    at3: u32,
    /// Switches: the old subject in the top 3.
    old: u32,
    /// Switches: terms were carried.
    carried: u32,
}

impl Tally {
    fn add(&mut self, c: &Conversation, got: &[String]) {
        self.n += 1;
        self.at1 += u32::from(got.first() == Some(&c.want));
        self.at3 += u32::from(got.contains(&c.want));
        if let Some(not) = &c.not {
            self.old += u32::from(got.contains(not));
        }
    }

    fn r1(self) -> f64 {
        f64::from(self.at1) / f64::from(self.n.max(1))
    }

    fn r3(self) -> f64 {
        f64::from(self.at3) / f64::from(self.n.max(1))
    }
}

fn search(mode: QueryMode) -> Search {
    let config = SearchConfig {
        query: mode,
        ..SearchConfig::default()
    };
    Search::new(&config).unwrap()
}

#[tokio::test]
async fn conversations_find_their_subject() {
    let all = conversations();
    assert!(all.len() >= 60, "{} conversations", all.len());
    for c in &all {
        assert!(c.turns.len() >= 2, "line {}: {c:?}", c.line);
        assert_eq!(c.turns.last().unwrap().0, "user", "line {}", c.line);
    }
    let context = search(QueryMode::Context);
    let last = search(QueryMode::Last);
    // kind -> (context, last)
    let mut by_kind: BTreeMap<String, (Tally, Tally)> = BTreeMap::new();
    let (mut follow, mut follow_last) = (Tally::default(), Tally::default());
    let (mut switch, mut switch_last) = (Tally::default(), Tally::default());
    let mut shapes: BTreeMap<String, u32> = BTreeMap::new();
    for c in &all {
        let q = query(c);
        let formed = context.form(&q).await;
        let got = titles(&context.search_formed(&formed).await.unwrap());
        let got_last = titles(&last.search(&q).await.unwrap());
        if c.kind == "switch" && !formed.carried().is_empty() {
            switch.carried += 1;
            println!("carried in a switch (line {}): {:?}", c.line, formed.text());
        }
        let e = by_kind.entry(c.kind.clone()).or_default();
        e.0.add(c, &got);
        e.1.add(c, &got_last);
        *shapes.entry(c.shape.clone()).or_default() += 1;
        let (t, tl) = if c.kind == "switch" {
            (&mut switch, &mut switch_last)
        } else {
            (&mut follow, &mut follow_last)
        };
        t.add(c, &got);
        tl.add(c, &got_last);
        let ok = if c.kind == "switch" {
            got.first() == Some(&c.want) && !got.contains(c.not.as_ref().unwrap())
        } else {
            got.contains(&c.want)
        };
        if std::env::var_os("CONVO_DEBUG").is_some() && got.first() != Some(&c.want) {
            println!(
                "not first (line {}): {:?} -> {:?}",
                c.line,
                formed.text(),
                got
            );
        }
        if !ok {
            println!(
                "miss (line {}, {}): {:?} -> {:?}: want {:?}, got {got:?}",
                c.line,
                c.kind,
                q.text,
                formed.text(),
                c.want
            );
        }
    }
    println!("kind        n  context@1 context@3   last@1   last@3");
    for (kind, (t, l)) in &by_kind {
        println!(
            "{kind:<10} {:>2}  {:>9.3} {:>9.3} {:>8.3} {:>8.3}",
            t.n,
            t.r1(),
            t.r3(),
            l.r1(),
            l.r3()
        );
    }
    println!(
        "follow-ups {}: context top-1 {:.3} top-3 {:.3}; last top-1 {:.3} top-3 {:.3}",
        follow.n,
        follow.r1(),
        follow.r3(),
        follow_last.r1(),
        follow_last.r3()
    );
    println!(
        "switches {}: context new first {:.3}, old in top 3 {}, carried terms {}; last new first {:.3}, old in top 3 {}",
        switch.n,
        switch.r1(),
        switch.old,
        switch.carried,
        switch_last.r1(),
        switch_last.old
    );
    println!("shapes: {shapes:?}");
    for shape in ["chat", "chat-blocks", "messages", "messages-blocks"] {
        assert!(
            shapes.get(shape).copied().unwrap_or(0) >= 5,
            "{shape}: {shapes:?}"
        );
    }
    for kind in [
        "pronoun",
        "there",
        "fragment",
        "ellipsis",
        "assistant",
        "far",
        "system",
    ] {
        assert!(by_kind.get(kind).is_some_and(|k| k.0.n >= 5), "kind {kind}");
    }
    assert!(switch.n >= 10);
    assert!(follow.r3() >= 0.9, "follow-ups top-3 {:.3}", follow.r3());
    assert!(follow.r3() >= 2.0 * follow_last.r3());
    assert!(follow.r1() >= 2.0 * follow_last.r1());
    assert!(switch.r1() >= 0.9, "switches new first {:.3}", switch.r1());
    assert!(switch.r1() >= switch_last.r1());
    // The old subject is never carried into a switch: it reaches the top 3
    // no more often than when the question is searched alone.
    assert_eq!(switch.carried, 0, "terms carried into a topic switch");
    assert!(switch.old <= switch_last.old);
}
