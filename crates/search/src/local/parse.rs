//! Documents of a `local` folder → passages ([`Source`]s).
//!
//! * `.md`, `.markdown`, `.txt`: optional front matter (a first line `---`,
//!   `key: value` lines, a closing `---` or `...`; keys `title`, `url`,
//!   `author`, `year`, `reference`, others ignored), then the body split
//!   into passages at ATX headings (`#` … `######`, not inside fenced code).
//!   Each passage keeps its heading as `heading`; a section longer than
//!   [`MAX_PASSAGE_CHARS`] is split further at blank lines. The title is
//!   the front matter's, else the first `#` heading, else the file stem.
//!   The URL is the front matter's, else the folder's `url_base` + the
//!   file's path relative to the folder (see the parent module), with
//!   `#` + a slug of the heading appended (so each passage has its own URL
//!   and the adapter's duplicate-URL rule keeps passages of one document
//!   apart).
//! * `.jsonl`: one source object (docs/reference/request.md, "Sources") per line; a line that is
//!   not one is skipped with a warning naming the file and line.

use crate::Source;

/// Sections longer than this many bytes are split at blank lines.
pub(crate) const MAX_PASSAGE_CHARS: usize = 2000;

/// Adds the passages of one file, by extension.
pub(crate) fn document(passages: &mut Vec<Source>, name: &str, url: &str, text: &str) {
    if name.ends_with(".jsonl") {
        let (sources, errors) = jsonl(text);
        for (line, error) in errors {
            tracing::warn!(file = %name, line, error = %error, "local search: skipping a line that is not a source object");
        }
        passages.extend(sources);
    } else {
        passages.extend(markdown(name, url, text));
    }
}

/// The passages of one markdown or text document. `name` is the file's
/// path, used for the default title and URL.
pub(crate) fn markdown(name: &str, default_url: &str, text: &str) -> Vec<Source> {
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text);
    let (meta, body) = front_matter(text);
    let mut doc = Source::default();
    for (key, value) in meta {
        let slot = match key {
            "title" => &mut doc.title,
            "url" => &mut doc.url,
            "author" => &mut doc.author,
            "year" => &mut doc.year,
            "reference" => &mut doc.reference,
            _ => continue,
        };
        *slot = Some(value.to_owned());
    }
    let sections = sections(body);
    if doc.title.is_none() {
        doc.title = sections
            .iter()
            .find(|s| s.level == 1)
            .and_then(|s| s.heading.clone())
            .or_else(|| Some(stem(name).to_owned()));
    }
    let base_url = doc.url.take().unwrap_or_else(|| default_url.to_owned());
    let mut out = Vec::new();
    for section in sections {
        for chunk in split_long(&section.body) {
            let url = match &section.heading {
                Some(h) if !base_url.contains('#') => format!("{base_url}#{}", slug(h)),
                _ => base_url.clone(),
            };
            out.push(Source {
                url: Some(url),
                text: Some(chunk),
                heading: section.heading.clone(),
                ..doc.clone()
            });
        }
    }
    out
}

/// The sources of a `.jsonl` document, with the line numbers (1-based) and
/// errors of the lines that are not source objects.
pub(crate) fn jsonl(text: &str) -> (Vec<Source>, Vec<(usize, String)>) {
    let mut sources = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Source>(line) {
            Ok(s) => sources.push(s),
            Err(e) => errors.push((i + 1, e.to_string())),
        }
    }
    (sources, errors)
}

/// Splits off a front matter block: its `key: value` pairs and the rest.
fn front_matter(text: &str) -> (Vec<(&str, &str)>, &str) {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (Vec::new(), text);
    };
    let mut pairs = Vec::new();
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        offset += line.len();
        let l = line.trim_end();
        if l == "---" || l == "..." {
            return (pairs, &rest[offset..]);
        }
        if let Some((k, v)) = l.split_once(':') {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
                .unwrap_or(v);
            if !v.is_empty() {
                pairs.push((k.trim(), v));
            }
        }
    }
    // No closing line: not front matter.
    (Vec::new(), text)
}

struct Section {
    level: usize,
    heading: Option<String>,
    body: String,
}

/// Splits a markdown body at ATX headings outside fenced code blocks.
fn sections(body: &str) -> Vec<Section> {
    let mut out = vec![Section {
        level: 0,
        heading: None,
        body: String::new(),
    }];
    let mut fence: Option<(char, usize)> = None;
    for line in body.lines() {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        if indent <= 3 {
            if let Some(run) = fence_run(trimmed) {
                match fence {
                    None => fence = Some(run),
                    Some((c, n))
                        if run.0 == c && run.1 >= n && trimmed[run.1..].trim().is_empty() =>
                    {
                        fence = None
                    }
                    Some(_) => {}
                }
            } else if fence.is_none()
                && let Some((level, heading)) = atx_heading(trimmed)
            {
                out.push(Section {
                    level,
                    heading: (!heading.is_empty()).then(|| heading.to_owned()),
                    body: String::new(),
                });
                continue;
            }
        }
        if let Some(last) = out.last_mut() {
            last.body.push_str(line);
            last.body.push('\n');
        }
    }
    out.retain(|s| !s.body.trim().is_empty());
    out
}

/// A fence opener/closer: the fence character and the run length (≥ 3).
fn fence_run(line: &str) -> Option<(char, usize)> {
    let c = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = line.chars().take_while(|x| *x == c).count();
    (n >= 3).then_some((c, n))
}

/// `## Heading ##` → (2, "Heading").
fn atx_heading(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|b| *b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &line[level..];
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let text = rest.trim().trim_end_matches('#').trim_end();
    Some((level, text))
}

/// A section's text, trimmed, split at blank lines into pieces of at most
/// about [`MAX_PASSAGE_CHARS`] bytes (a longer paragraph stays whole).
fn split_long(body: &str) -> Vec<String> {
    let body = body.trim();
    if body.len() <= MAX_PASSAGE_CHARS {
        return vec![body.to_owned()];
    }
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for para in body.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        if !cur.is_empty() && cur.len() + para.len() + 2 > MAX_PASSAGE_CHARS {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push_str("\n\n");
        }
        cur.push_str(para);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A GitHub-style anchor: lowercase alphanumerics, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c == ' ' || c == '-' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

fn stem(name: &str) -> &str {
    let file = name.rsplit(['/', '\\']).next().unwrap_or(name);
    file.rsplit_once('.').map_or(file, |(s, _)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_headings_and_urls() {
        let doc = "---\ntitle: \"Lisbon guide\"\nurl: https://ex/lisbon\nauthor: A. Writer\nyear: 2020\nreference: 7\nother: x\n---\nIntro line.\n\n# Big\n\n## Weather\nMild.\n```\n# not a heading\n```\n### Food ###\nFish.\n";
        let p = markdown("docs/lisbon.md", "local:docs/lisbon.md", doc);
        assert_eq!(p.len(), 3, "{p:#?}");
        assert_eq!(p[0].heading, None);
        assert_eq!(p[0].url.as_deref(), Some("https://ex/lisbon"));
        assert_eq!(p[1].heading.as_deref(), Some("Weather"));
        assert_eq!(p[1].url.as_deref(), Some("https://ex/lisbon#weather"));
        assert!(p[1].text.as_deref().unwrap().contains("# not a heading"));
        assert_eq!(p[2].heading.as_deref(), Some("Food"));
        for s in &p {
            assert_eq!(s.title.as_deref(), Some("Lisbon guide"));
            assert_eq!(s.author.as_deref(), Some("A. Writer"));
            assert_eq!(s.year.as_deref(), Some("2020"));
            assert_eq!(s.reference.as_deref(), Some("7"));
        }
    }

    #[test]
    fn defaults_without_front_matter() {
        let p = markdown(
            "a/notes.txt",
            "local:a/notes.txt",
            "plain text\n#hashtag is not a heading\n",
        );
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].title.as_deref(), Some("notes"));
        assert_eq!(p[0].url.as_deref(), Some("local:a/notes.txt"));
        let p = markdown("x.md", "local:x.md", "# Title\n\nbody\n");
        assert_eq!(p[0].title.as_deref(), Some("Title"));
        // An unclosed front matter is text.
        let p = markdown("y.md", "local:y.md", "---\ntitle: t\nno end\n");
        assert_eq!(p[0].title.as_deref(), Some("y"));
    }

    #[test]
    fn long_sections_split_at_blank_lines() {
        let para = "word ".repeat(300);
        let body = format!("## H\n{para}\n\n{para}\n\n{para}\n");
        let p = markdown("l.md", "local:l.md", &body);
        assert_eq!(p.len(), 3);
        assert!(p.iter().all(|s| s.heading.as_deref() == Some("H")));
    }

    #[test]
    fn jsonl_lines() {
        let (s, e) = jsonl(
            "{\"title\":\"a\",\"url\":\"u\",\"text\":\"t\",\"year\":2001}\n\nnot json\n[1]\n",
        );
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].year.as_deref(), Some("2001"));
        assert_eq!(e.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 4]);
    }
}
