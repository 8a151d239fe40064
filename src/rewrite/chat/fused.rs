//! The fused path of [`ChatStream`](crate::ChatStream): the template
//! hooks of [`ChatHandler`] (feeding a match's contents, learning a
//! template from a chunk the fast scan read), shared by the parsed hot
//! path ([`ChatHandler::event`]) and the fused one
//! ([`Handler::fast_events`](crate::rewrite::driver::Handler::fast_events)),
//! which recognises whole events in an input piece before the SSE parser
//! sees them. An event that straddles two pieces is matched in two steps:
//! the start (a held tail) along a template as far as it goes
//! ([`ChatHandler::fused_tail`]), the rest in the next piece from where
//! that walk stopped ([`ChatHandler::fused_straddle`]).
//!
//! Both give the same output as the parser + full scan would (the tests
//! below and the `chat_split` fuzz target compare the two with the fused
//! path switched off).

use super::ChatHandler;
use super::template::{MAX_CONTENTS, Stop, TEMPLATES, walk_one_parts};
use crate::rewrite::driver::Tail;
use crate::sse::FrameRef;

/// How [`ChatHandler::one_content_run`] ended.
enum Run {
    /// The last template is not of the most common shape: not tried.
    NotOne,
    /// It did not take the event at the position reached.
    Miss,
    /// The event there is over the parser's size limit.
    TooLong,
    /// The run reached the end of the input.
    End,
}

impl ChatHandler {
    /// Switches the fused path on or off (for the differential tests).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn set_fused(&mut self, on: bool) {
        self.fused = on;
    }

    /// The parsed hot path: whether a template matches the event (`raw`,
    /// its `data` `d`); its contents are then fed.
    #[inline]
    pub(super) fn template_hit(&mut self, raw: &[u8], d: &[u8]) -> bool {
        for j in 0..TEMPLATES {
            let k = (self.last_hit + j) % TEMPLATES;
            let t = &mut self.templates[k];
            let s = if t.framed { raw } else { d };
            if t.matches(s, &mut self.found) {
                self.last_hit = k;
                self.feed_contents(s);
                return true;
            }
        }
        false
    }

    /// The template slot to try first on a held tail: the one that took
    /// the last straddling event after the last hit's slot. (Kept out of
    /// the per-event path: learned from straddling events only.)
    #[inline(always)]
    fn first_try(&self) -> usize {
        self.next_hit[self.last_hit % TEMPLATES]
    }

    /// Template slot `k` took a straddling event.
    #[inline(always)]
    fn straddle_hit(&mut self, k: usize) {
        self.next_hit[self.last_hit % TEMPLATES] = k;
        self.last_hit = k;
    }

    /// Feeds the content bodies the last template match found in `s`
    /// (`self.found`).
    #[inline(always)]
    fn feed_contents(&mut self, s: &[u8]) {
        for k in 0..self.found.n {
            let (index, start, end, plain) = self.found.at[k];
            self.feed_content(index, &s[start..end], plain);
        }
    }

    /// Feeds the content body `body` to choice `index`'s tracker (`plain`:
    /// how many of its first bytes the template walk found free of the
    /// bytes the tracker's fast path stops at).
    #[inline(always)]
    fn feed_content(&mut self, index: u32, body: &[u8], plain: usize) {
        let st = match self.choices.get_mut(index as usize) {
            Some(st) => st,
            None => match self.choice(index) {
                Some(st) => st,
                None => return,
            },
        };
        if !st.finished {
            st.tracker.push_json_after(body, plain);
        }
    }

    /// Whether the chunk the fast scan read as `self.fast` opens every one
    /// of its choices (an index not seen yet) without text (its content
    /// absent, `null` or empty): the `{"role":"assistant","content":""}`
    /// chunk OpenAI-style streams send once per choice. Such a chunk is not
    /// learned (the caller asks before the chunk adds its choices): its
    /// template would match nothing later, yet cost its learning and be
    /// tried on every miss after it. (A stream that does repeat it, the
    /// role in every chunk and no text yet, pays one more scan: its
    /// second one.)
    pub(super) fn opening_chunk(&self) -> bool {
        let seen = self.choices.len();
        self.fast.iter().all(|c| {
            c.index.is_some_and(|i| i as usize >= seen)
                && c.content.as_ref().is_none_or(|r| r.is_empty())
        })
    }

    /// Learns a template from a chunk the fast scan read as `self.fast`
    /// (with the varying tokens `self.holes`), when no choice finishes in it, it has
    /// choices and every index is a `u32`: framed when the event is
    /// exactly `data: ` + the data + `\n\n`.
    ///
    /// A chunk without choices (a `usage`, a content filter or moderation
    /// result, an error object) is not learned: such chunks come once or
    /// twice per stream, so a template of one would cost its learning and
    /// evict one of the content chunks' templates for nothing.
    pub(super) fn learn(&mut self, f: &FrameRef<'_>) {
        let fast = &self.fast;
        if fast.is_empty() || fast.len() > MAX_CONTENTS || fast.iter().any(|c| c.index.is_none()) {
            return;
        }
        let (raw, d) = (f.raw(), f.data());
        let at = f.data_range().map_or(0, |r| r.start);
        let framed = matches!(at, 5 | 6)
            && raw.len() == at + d.len() + 2
            && raw.starts_with(&b"data: "[..at])
            && raw.ends_with(b"\n\n");
        let (s, at) = if framed { (raw, at) } else { (d, 0) };
        let contents = fast
            .iter()
            .filter_map(|c| Some((c.index?, c.content.clone()?)));
        let slot = self.next_template;
        self.next_template = (slot + 1) % TEMPLATES;
        self.templates[slot].learn(s, at, framed, contents, &self.holes);
    }

    /// The fused path: whole events at the start of `rest` that a framed
    /// template matches (chunks without a finish, shaped like recent
    /// ones) have their contents fed to the trackers and pass through, as
    /// [`event`](ChatHandler::event) would handle them after a parse.
    #[inline(always)]
    pub(super) fn fused_events(&mut self, rest: &[u8], max_event: usize) -> usize {
        if !self.fused {
            return 0;
        }
        let mut pos = 0;
        'events: while pos < rest.len() {
            // First the run of events the template that took the last event
            // takes, when it has the most common shape. (Tried, it is not
            // tried again below.)
            let tried = match self.one_content_run(rest, &mut pos, max_event) {
                Run::NotOne => 0,
                Run::Miss => 1,
                Run::End => break,
                Run::TooLong => break 'events,
            };
            let ev = &rest[pos..];
            for j in tried..TEMPLATES {
                let k = (self.last_hit + j) % TEMPLATES;
                let t = &mut self.templates[k];
                // (A rest shorter than the literal text is the start of an
                // event the next piece completes: the parser's.)
                if !t.framed || ev.len() < t.literal_len() {
                    continue;
                }
                let Some(len) = t.matches_event(ev, &mut self.found) else {
                    continue;
                };
                // The parser's limit: the bytes before the blank line.
                if len - 1 > max_event {
                    break 'events;
                }
                self.last_hit = k;
                self.feed_contents(ev);
                pos += len;
                continue 'events;
            }
            break;
        }
        pos
    }

    /// The events from `rest[*pos..]` on that the template which took the
    /// last event takes, when it is framed, ready and of one content hole
    /// of a choice seen before (the most common shape): each walked
    /// straight ([`walk_one_parts`]), its content fed to the choice's
    /// tracker at once, `*pos` moved past it. The template's parts, the
    /// tracker and the size check are looked up once per run, not per
    /// event. How the run ended: [`Run::End`] at the end of `rest`.
    #[inline(always)]
    fn one_content_run(&mut self, rest: &[u8], pos: &mut usize, max_event: usize) -> Run {
        let t = &self.templates[self.last_hit % TEMPLATES];
        let Some((end, index)) = t.one_content() else {
            return Run::NotOne;
        };
        let (Some(parts), Some(st)) = (t.one_parts(end), self.choices.get_mut(index as usize))
        else {
            return Run::NotOne;
        };
        // (A finished choice's content is not fed, as `feed_content`.)
        let mut tracker = (!st.finished).then_some(&mut st.tracker);
        // The parser's limit: the bytes before the blank line. A rest no
        // longer than that holds no event over it.
        let limit = if rest.len() <= max_event {
            usize::MAX
        } else {
            max_event
        };
        while let Some(ev) = rest.get(*pos..).filter(|ev| !ev.is_empty()) {
            let Some((len, (start, stop, plain))) = walk_one_parts(ev, parts) else {
                return Run::Miss;
            };
            if len - 1 > limit {
                return Run::TooLong;
            }
            if let Some(tracker) = tracker.as_mut() {
                tracker.push_json_after(&ev[start..stop], plain);
            }
            *pos += len;
        }
        Run::End
    }

    /// Whether an event starting with `tail` may be one
    /// [`fused_events`](Self::fused_events) recognises once complete:
    /// [`Tail::Started`] when all of `tail` matches the start of a framed
    /// template (not on probation; the last one to match first) and stops
    /// inside a literal segment (remembered in `held`), so
    /// [`fused_straddle`](Self::fused_straddle) goes on from there;
    /// [`Tail::Maybe`] when a framed template's walk stops inside a hole
    /// (or matches, or the template is on probation); [`Tail::No`] when
    /// every framed template differs. (Inlined into the driver's
    /// out-of-line `hold`, its one caller: no call boundary per held tail.)
    #[inline(always)]
    pub(super) fn fused_tail(&mut self, tail: &[u8]) -> Tail {
        // (Five bytes compared as a word and a byte, no library call; a
        // shorter tail byte by byte.)
        let data = match tail.first_chunk::<5>() {
            Some(w) => w == b"data:",
            None => tail.iter().zip(b"data:").all(|(a, b)| a == b),
        };
        if !self.fused || !data {
            return Tail::No;
        }
        let mut kind = Tail::No;
        let first = self.first_try();
        for j in 0..TEMPLATES {
            let i = (first + j) % TEMPLATES;
            match self.tail_walk(i, tail) {
                Err(Stop::Mismatch) => {}
                Err(Stop::Short { k, lit }) => {
                    (self.held.template, self.held.k, self.held.lit) = (i, k, lit);
                    return Tail::Started;
                }
                _ => kind = Tail::Maybe,
            }
        }
        kind
    }

    /// Template `i`'s walk of a tail, its contents into `held`: a
    /// [`Stop::Short`] only for a framed template not on probation (one
    /// on probation stops [`Stop::InHole`]: its first match refines it).
    #[inline(always)]
    fn tail_walk(&mut self, i: usize, tail: &[u8]) -> Result<usize, Stop> {
        let t = &mut self.templates[i];
        if !t.framed {
            return Err(Stop::Mismatch);
        }
        let walked = t.prefix(tail, &mut self.held.contents);
        if t.on_probation() && matches!(walked, Err(Stop::Short { .. })) {
            return Err(Stop::InHole);
        }
        walked
    }

    /// The event a [`Tail::Started`] tail starts, completed by `head`:
    /// the walk goes on where it stopped in the tail (then the other
    /// templates' walks of the tail and the head), and on a match (the
    /// blank line's LF before byte `limit` of the event) the contents are
    /// fed as [`fused_events`](Self::fused_events) would feed them for the
    /// tail and the head joined. The bytes of `head` taken, or 0.
    /// (Inlined into the driver's out-of-line `straddle`, as `fused_tail`.)
    #[inline(always)]
    pub(super) fn fused_straddle(&mut self, tail: &[u8], head: &[u8], limit: usize) -> usize {
        let first = self.held.template;
        for j in 0..TEMPLATES {
            let i = (first + j) % TEMPLATES;
            if j > 0 {
                let Err(Stop::Short { k, lit }) = self.tail_walk(i, tail) else {
                    continue;
                };
                (self.held.k, self.held.lit) = (k, lit);
            }
            let h = &mut self.held;
            let in_tail = h.contents.n;
            let Some(end) = self.templates[i].resume(head, h.k, h.lit, &mut h.contents) else {
                continue;
            };
            if tail.len() + end > limit {
                return 0;
            }
            self.straddle_hit(i);
            for n in 0..self.held.contents.n {
                let (index, start, end, plain) = self.held.contents.at[n];
                let s = if n < in_tail { tail } else { head };
                self.feed_content(index, &s[start..end], plain);
            }
            return end;
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use crate::sources::Sources;
    use crate::{ChatStream, RewriteOptions};

    fn rewriter(fused: bool) -> ChatStream {
        let sources = Sources::from_json(
            br#"[{"title":"A","url":"https://a/"},{"title":"B","url":"https://b/"},{"title":"C","url":"https://c/"}]"#,
        )
        .expect("sources");
        let mut rw = ChatStream::new(Arc::new(sources), RewriteOptions::new());
        rw.handler_mut().set_fused(fused);
        rw
    }

    /// The output for `input` cut at `cuts` (sorted offsets).
    fn run(fused: bool, input: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut rw = rewriter(fused);
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain([&input.len()]) {
            rw.feed(Bytes::copy_from_slice(&input[at..c]));
            at = c;
            while let Some(b) = rw.next_output() {
                out.extend_from_slice(&b);
            }
        }
        rw.finish();
        while let Some(b) = rw.next_output() {
            out.extend_from_slice(&b);
        }
        out
    }

    /// Chat fixtures (recorded upstream streams) and a few shapes of our own.
    fn inputs() -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
        let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .expect("fixtures")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "sse"))
            .filter(|p| {
                !p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("anthropic_")
            })
            .map(|p| (p.display().to_string(), std::fs::read(&p).expect("fixture")))
            .collect();
        all.sort();
        let chunk = |i: usize, c: &str| {
            format!(
                "data: {{\"id\":\"x\",\"choices\":[{{\"index\":{i},\"delta\":{{\"content\":\"{c}\"}},\"finish_reason\":null}}],\"usage\":{{\"n\":{}}}}}\n\n",
                c.len()
            )
        };
        let packed = |c: &str| {
            format!(
                "data: {{\"id\":\"x\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{c}\"}}}},{{\"index\":1,\"delta\":{{\"content\":\"{c}\"}}}},{{\"index\":2,\"delta\":{{}}}}]}}\n\n"
            )
        };
        let words = [
            "a [1]",
            "b",
            " [2] c",
            "`[3]`",
            "d\\n",
            "e [1][2]",
            "f\\u00e9 [3]",
        ];
        let mut own = String::new();
        for (k, w) in words.iter().cycle().take(40).enumerate() {
            own.push_str(&chunk(k % 2, w));
            own.push_str(&packed(w));
            if k % 9 == 4 {
                own.push_str(": keep-alive\n\ndata:");
                own.push_str(&chunk(0, w)[5..]);
                own.push_str(&chunk(1, w).replace("\n\n", "\r\n\r\n"));
            }
        }
        own.push_str("data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n");
        own.push_str("data: {\"id\":\"x\",\"choices\":[{\"index\":1,\"delta\":{\"content\":\"z [1]\"},\"finish_reason\":\"stop\"}]}\n\n");
        own.push_str("data: {\"id\":\"x\",\"choices\":[{\"index\":2,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n");
        all.push(("own".into(), own.into_bytes()));
        all
    }

    /// The fused path changes no byte of the output: every fixture cut at
    /// every byte into two pieces (the first 2 KiB; then every 7th byte),
    /// at event boundaries, and into random pieces.
    #[test]
    fn fused_and_parsed_outputs_are_identical() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rand = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for (name, input) in inputs() {
            let want = run(false, &input, &[]);
            assert_eq!(run(true, &input, &[]), want, "{name}: whole");
            let step = if cfg!(miri) { 97 } else { 1 };
            for i in (0..=input.len()).step_by(step) {
                if i > 2048 && i % 7 != 0 {
                    continue;
                }
                assert_eq!(run(true, &input, &[i]), want, "{name}: cut at {i}");
            }
            let events: Vec<usize> = input
                .windows(2)
                .enumerate()
                .filter(|(_, w)| w == b"\n\n")
                .map(|(i, _)| i + 2)
                .collect();
            assert_eq!(run(true, &input, &events), want, "{name}: event reads");
            for _ in 0..20 {
                let mut cuts: Vec<usize> = (0..rand(40)).map(|_| rand(input.len() + 1)).collect();
                cuts.sort_unstable();
                assert_eq!(run(true, &input, &cuts), want, "{name}: cuts {cuts:?}");
            }
        }
    }

    /// The fused path does take the events it can: most chunks of the
    /// stream go through it.
    #[test]
    fn the_fused_path_recognises_repeated_chunks() {
        let mut rw = rewriter(true);
        let ev = |c: &str| {
            format!(
                "data: {{\"id\":\"x\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{c}\"}}}}]}}\n\n"
            )
        };
        let input = [ev("a"), ev("b [1]"), ev("c"), ev("d")].concat();
        let (max, h) = (crate::sse::DEFAULT_MAX_EVENT_SIZE, rw.handler_mut());
        assert_eq!(
            h.fused_events(input.as_bytes(), max),
            0,
            "nothing learned yet"
        );
        rw.feed(Bytes::from(input.clone()));
        let out: Vec<Bytes> = std::iter::from_fn(|| rw.next_output()).collect();
        assert_eq!(out.concat(), input.as_bytes());
        let more = [ev("e"), ev("f")].concat();
        let h = rw.handler_mut();
        assert_eq!(h.fused_events(more.as_bytes(), max), more.len());
        assert_eq!(
            h.fused_events(more.as_bytes(), 10),
            0,
            "over the size limit"
        );
    }

    /// A choice's opening chunk (its role, no text) teaches no template;
    /// the chunks after it do.
    #[test]
    fn an_opening_chunk_is_not_learned() {
        let mut rw = rewriter(true);
        let role = "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
        let ev = |c: &str| {
            format!(
                "data: {{\"id\":\"x\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{c}\"}}}}]}}\n\n"
            )
        };
        let input = [role.to_owned(), ev("a")].concat();
        rw.feed(Bytes::from(input.clone()));
        let out: Vec<Bytes> = std::iter::from_fn(|| rw.next_output()).collect();
        assert_eq!(out.concat(), input.as_bytes());
        let (max, h) = (crate::sse::DEFAULT_MAX_EVENT_SIZE, rw.handler_mut());
        assert_eq!(h.fused_events(role.as_bytes(), max), 0, "not learned");
        let more = ev("b [1]");
        assert_eq!(h.fused_events(more.as_bytes(), max), more.len());
    }
}
