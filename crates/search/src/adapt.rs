//! The adapter rules every provider's results go through (crate docs,
//! "Adapter rules" 2–6): HTML stripped, URL checks, caps, years.
//!
//! Pure functions over [`Source`]s; [`crate::Search`] calls [`apply`] once
//! per search, whatever the provider.

use std::collections::HashSet;

use crate::Source;

/// Applies rules 2–6 to `sources`, keeping at most `max_results` and
/// cutting each `text` to `max_text_chars` characters.
pub(crate) fn apply(
    sources: Vec<Source>,
    max_results: usize,
    max_text_chars: usize,
) -> Vec<Source> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(sources.len().min(max_results));
    for s in sources {
        if out.len() == max_results {
            break;
        }
        let Some(url) = s.url.as_deref().map(str::trim).filter(|u| !u.is_empty()) else {
            continue;
        };
        if !seen.insert(url.to_owned()) {
            continue;
        }
        out.push(Source {
            url: Some(url.to_owned()),
            title: clean(s.title.as_deref()),
            text: clean(s.text.as_deref()).map(|t| cap_chars(t, max_text_chars)),
            heading: clean(s.heading.as_deref()),
            author: clean(s.author.as_deref()),
            year: s.year.as_deref().and_then(year_of),
            reference: clean(s.reference.as_deref()),
        });
    }
    out
}

/// Strips HTML and squeezes whitespace; `None` when nothing is left.
fn clean(s: Option<&str>) -> Option<String> {
    let s = strip_html(s?);
    (!s.is_empty()).then_some(s)
}

/// Cuts `s` to at most `max` characters (never inside a character).
fn cap_chars(mut s: String, max: usize) -> String {
    if let Some((i, _)) = s.char_indices().nth(max) {
        s.truncate(i);
        s.truncate(s.trim_end().len());
    }
    s
}

/// The year in a date string: the first run of exactly four ASCII digits
/// between 1000 and 2999 (`2024-06-21T…`, `Apr 17, 2024`, `2015`).
pub(crate) fn year_of(date: &str) -> Option<String> {
    let b = date.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i - start == 4 && matches!(b[start], b'1' | b'2') {
                return Some(date[start..i].to_owned());
            }
        } else {
            i += 1;
        }
    }
    None
}

/// Removes tags (`<b>`, `</strong>`, `<!-- … -->`, `<br/>`), decodes
/// character references (`&amp;`, `&#39;`, `&#x27;`, …), drops control and
/// bidi marks, and turns each whitespace run into one space, trimmed.
///
/// A `<` that does not start a tag (`a < b`, `<3`) is kept as text.
pub(crate) fn strip_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(['<', '&']) {
        push_text(&mut out, &rest[..i]);
        rest = &rest[i..];
        if rest.starts_with('<') {
            match tag_len(rest) {
                Some(n) => {
                    // Block tags separate words (`a<br>b`); inline ones do
                    // not (`<b>Lis</b>bon` stays one word).
                    if is_block_tag(&rest[..n]) {
                        push_text(&mut out, " ");
                    }
                    rest = &rest[n..];
                }
                None => {
                    push_text(&mut out, "<");
                    rest = &rest[1..];
                }
            }
        } else {
            match entity(rest) {
                Some((c, n)) => {
                    let mut buf = [0; 4];
                    push_text(&mut out, c.encode_utf8(&mut buf));
                    rest = &rest[n..];
                }
                None => {
                    push_text(&mut out, "&");
                    rest = &rest[1..];
                }
            }
        }
    }
    push_text(&mut out, rest);
    out.truncate(out.trim_end().len());
    out
}

/// Appends `text`, squeezing whitespace and dropping invisible marks.
fn push_text(out: &mut String, text: &str) {
    for c in text.chars() {
        if c.is_whitespace() {
            if !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
            }
        } else if !(c.is_control()
            || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}'))
        {
            out.push(c);
        }
    }
}

/// Length of the tag at the start of `s` (`<` + letter, `/` or `!` … `>`).
fn tag_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if s.starts_with("<!--") {
        return s.find("-->").map(|i| i + 3);
    }
    match b.get(1) {
        Some(c) if c.is_ascii_alphabetic() || *c == b'/' || *c == b'!' => {}
        _ => return None,
    }
    // The tag ends at the next `>`, unless another `<` comes first.
    let end = 1 + s[1..].find(['>', '<'])?;
    (b[end] == b'>' && end < 1024).then_some(end + 1)
}

fn is_block_tag(tag: &str) -> bool {
    let name: String = tag
        .trim_start_matches(['<', '/'])
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    matches!(
        name.as_str(),
        "br" | "p"
            | "div"
            | "li"
            | "ul"
            | "ol"
            | "tr"
            | "td"
            | "th"
            | "table"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "hr"
            | "section"
            | "article"
            | "blockquote"
    )
}

/// The character reference at the start of `s` and its length.
fn entity(s: &str) -> Option<(char, usize)> {
    let end = s[1..].find(';')? + 1;
    if end > 12 {
        return None;
    }
    let name = &s[1..end];
    let c = if let Some(num) = name.strip_prefix('#') {
        let v = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        char::from_u32(v).unwrap_or('\u{FFFD}')
    } else {
        match name {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            "nbsp" => ' ',
            "ndash" => '–',
            "mdash" => '—',
            "hellip" => '…',
            "lsquo" => '‘',
            "rsquo" => '’',
            "ldquo" => '“',
            "rdquo" => '”',
            "middot" => '·',
            "copy" => '©',
            "reg" => '®',
            "trade" => '™',
            "deg" => '°',
            "euro" => '€',
            "laquo" => '«',
            "raquo" => '»',
            _ => return None,
        }
    };
    Some((c, end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(url: Option<&str>, text: &str) -> Source {
        Source {
            url: url.map(Into::into),
            text: Some(text.into()),
            ..Source::default()
        }
    }

    #[test]
    fn strips_tags_and_entities() {
        assert_eq!(
            strip_html("The <strong>Python</strong> didn&#x27;t &amp; <em>won&#39;t</em>&nbsp;x"),
            "The Python didn't & won't x"
        );
        assert_eq!(strip_html("a < b and 1<2, <3"), "a < b and 1<2, <3");
        assert_eq!(strip_html("x<br/>y<p>z</p>"), "x y z");
        assert_eq!(strip_html("<!-- c -->  keep \u{200E}this\n\t"), "keep this");
        assert_eq!(strip_html("AT&T &unknown; &#128512;"), "AT&T &unknown; 😀");
        assert_eq!(strip_html("&#xD800;"), "\u{FFFD}");
    }

    #[test]
    fn years() {
        assert_eq!(year_of("2024-06-21T15:55:04.000Z").as_deref(), Some("2024"));
        assert_eq!(year_of("September 9, 2023").as_deref(), Some("2023"));
        assert_eq!(year_of("03/20/2025").as_deref(), Some("2025"));
        assert_eq!(year_of("20 hours ago"), None);
        assert_eq!(year_of("12345 and 0999"), None);
    }

    #[test]
    fn drops_missing_and_duplicate_urls_and_caps() {
        let got = apply(
            vec![
                src(None, "a"),
                src(Some(" "), "b"),
                src(Some("https://x/1"), "ééééé"),
                src(Some("https://x/1"), "dup"),
                src(Some("https://x/2"), "c"),
                src(Some("https://x/3"), "d"),
            ],
            2,
            3,
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].text.as_deref(), Some("ééé"));
        assert_eq!(got[1].url.as_deref(), Some("https://x/2"));
    }

    #[test]
    fn empty_fields_become_absent() {
        let mut s = src(Some("u"), " <b></b> ");
        s.title = Some(String::new());
        s.year = Some("yesterday".into());
        let got = apply(vec![s], 5, 10);
        assert_eq!(
            got[0],
            Source {
                url: Some("u".into()),
                ..Source::default()
            }
        );
    }
}
