//! The `local` provider over a folder (front matter, headings, `.jsonl`,
//! unreadable files, empty folders) and the `static` provider, through
//! [`Search`] as a host uses them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use citestream_search::{
    LocalConfig, LocalIndex, ProviderKind, Search, SearchConfig, SearchQuery, Source,
};

/// A fresh folder under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p =
            std::env::temp_dir().join(format!("citestream-search-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn write(&self, rel: &str, bytes: &[u8]) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn local(dir: &Path) -> SearchConfig {
    SearchConfig {
        provider: ProviderKind::Local,
        local: LocalConfig {
            path: dir.display().to_string(),
            ..LocalConfig::default()
        },
        ..SearchConfig::default()
    }
}

async fn search(search: &Search, q: &str) -> Vec<Source> {
    search
        .search(&SearchQuery {
            text: q.to_owned(),
            context: vec![],
        })
        .await
        .unwrap()
}

/// Runs `f` with `warn` logs captured; returns its result and the log text.
fn with_logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let logs = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (out, logs)
}

const GUIDE: &str = "---\ntitle: Lisbon travel notes\nurl: https://example.org/lisbon\nauthor: Ana Reis\nyear: 2021\nreference: ch. 3\n---\nGeneral notes about the trip.\n\n## Weather\nLisbon has mild winters and warm, dry summers; trams climb the hills.\n\n## Food\nGrilled sardines and custard tarts are everywhere.\n";

#[tokio::test]
async fn markdown_front_matter_and_headings() {
    let dir = TempDir::new("md");
    dir.write("guide.md", GUIDE.as_bytes());
    dir.write(
        "sub/plain.txt",
        b"# Porto\n\nPort wine cellars line the river Douro.\n",
    );
    dir.write("ignored.pdf", b"%PDF- not indexed: sardines");
    dir.write(".hidden.md", b"sardines sardines sardines");
    let s = Search::new(&local(&dir.0)).unwrap();
    assert_eq!(s.provider_name(), "local");

    let got = search(&s, "What is the weather like in Lisbon?").await;
    let top = &got[0];
    assert_eq!(top.heading.as_deref(), Some("Weather"));
    assert_eq!(top.title.as_deref(), Some("Lisbon travel notes"));
    assert_eq!(
        top.url.as_deref(),
        Some("https://example.org/lisbon#weather")
    );
    assert_eq!(top.author.as_deref(), Some("Ana Reis"));
    assert_eq!(top.year.as_deref(), Some("2021"));
    assert_eq!(top.reference.as_deref(), Some("ch. 3"));
    assert!(
        top.text
            .as_deref()
            .unwrap()
            .starts_with("Lisbon has mild winters")
    );

    let got = search(&s, "sardines").await;
    assert_eq!(
        got.len(),
        1,
        "the pdf and the hidden file are not indexed: {got:#?}"
    );
    assert_eq!(got[0].heading.as_deref(), Some("Food"));

    let got = search(&s, "port wine Douro").await;
    assert_eq!(got[0].title.as_deref(), Some("Porto"));
    assert_eq!(got[0].heading.as_deref(), Some("Porto"));
    // No server path: url_base + the path relative to the folder + anchor.
    assert_eq!(got[0].url.as_deref(), Some("local:sub/plain.txt#porto"));

    assert!(search(&s, "zeppelin").await.is_empty());
}

#[tokio::test]
async fn jsonl_sources_search_their_text() {
    let dir = TempDir::new("jsonl");
    dir.write(
        "news.jsonl",
        b"{\"title\":\"Storm warning\",\"url\":\"https://ex/1\",\"text\":\"Heavy rain expected in Porto on Sunday.\",\"year\":2024,\"author\":\"IPMA\"}\n\
          {\"title\":\"Heat\",\"url\":\"https://ex/2\",\"text\":\"A heatwave reaches the Algarve.\",\"reference\":12}\n\
          not a source\n\
          {\"title\":\"No url\",\"text\":\"Rain in Braga.\"}\n",
    );
    let (s, logs) = with_logs(|| Search::new(&local(&dir.0)).unwrap());
    assert!(
        logs.contains("news.jsonl") && logs.contains("line=3"),
        "{logs}"
    );
    let got = search(&s, "rain on Sunday").await;
    assert_eq!(got[0].url.as_deref(), Some("https://ex/1"));
    assert_eq!(got[0].year.as_deref(), Some("2024"));
    assert_eq!(got[0].author.as_deref(), Some("IPMA"));
    // The Braga line matches "rain" but has no URL: dropped by the adapter.
    assert!(got.iter().all(|s| s.title.as_deref() != Some("No url")));
    let got = search(&s, "heatwave").await;
    assert_eq!(got[0].reference.as_deref(), Some("12"));
}

#[test]
fn unreadable_files_are_skipped_with_a_warning_naming_them() {
    let dir = TempDir::new("unreadable");
    dir.write("good.md", GUIDE.as_bytes());
    dir.write("latin1.md", b"caf\xe9 au lait\n");
    #[cfg(unix)]
    std::os::unix::fs::symlink(dir.0.join("missing.md"), dir.0.join("dangling.md")).unwrap();
    let (index, logs) = with_logs(|| LocalIndex::from_dir(&dir.0).unwrap());
    assert_eq!(index.len(), 3, "the three passages of good.md");
    assert!(logs.contains("WARN"), "{logs}");
    assert!(logs.contains("latin1.md"), "{logs}");
    #[cfg(unix)]
    assert!(logs.contains("dangling.md"), "{logs}");
}

#[test]
fn empty_folders_are_setup_errors() {
    let dir = TempDir::new("empty");
    let e = Search::new(&local(&dir.0)).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "search.local.path {}: no passages found",
            dir.0.display()
        )),
        "{e}"
    );
    dir.write("notes.pdf", b"not a document");
    dir.write("blank.md", b"---\ntitle: t\n---\n\n   \n");
    assert!(Search::new(&local(&dir.0)).is_err());
    let e = Search::new(&local(&dir.0.join("nope")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read the folder"), "{e}");
}

#[tokio::test]
async fn static_file_provider() {
    let dir = TempDir::new("static");
    dir.write(
        "sources.json",
        br#"[{"title":"A","url":"https://a","text":"<b>bold</b> claim","year":1999},
             {"title":"dup","url":"https://a"},
             {"title":"no url"},
             {"title":"B","url":"https://b","heading":"H"}]"#,
    );
    let mut c = SearchConfig {
        provider: ProviderKind::Static,
        ..SearchConfig::default()
    };
    c.r#static.path = dir.0.join("sources.json").display().to_string();
    let s = Search::new(&c).unwrap();
    assert_eq!(s.provider_name(), "static");
    let got = search(&s, "anything").await;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].text.as_deref(), Some("bold claim"));
    assert_eq!(got[0].year.as_deref(), Some("1999"));
    assert_eq!(got[1].heading.as_deref(), Some("H"));

    c.r#static.path = dir.0.join("missing.json").display().to_string();
    let e = Search::new(&c).unwrap_err().to_string();
    assert!(e.contains("missing.json: cannot read"), "{e}");
    dir.write("bad.json", b"{\"title\":\"not an array\"}");
    c.r#static.path = dir.0.join("bad.json").display().to_string();
    let e = Search::new(&c).unwrap_err().to_string();
    assert!(e.contains("not a JSON array of sources"), "{e}");
}

#[tokio::test]
async fn url_base_and_no_server_path_in_any_passage() {
    let dir = TempDir::new("urlbase");
    dir.write(
        "a b/notes#1.md",
        b"# Tram 28\n\nThe tram climbs to Alfama.\n\n## Fares\n\nA ticket costs three euros.\n",
    );
    dir.write("top.txt", b"Sintra palaces on the hills.\n");
    let mut c = local(&dir.0);
    c.local.url_base = "https://kb.example/docs/".into();
    let index = LocalIndex::from_dir_with_url_base(&dir.0, &c.local.url_base).unwrap();
    let mut urls: Vec<&str> = index
        .passages()
        .iter()
        .filter_map(|p| p.url.as_deref())
        .collect();
    urls.sort_unstable();
    assert_eq!(
        urls,
        [
            "https://kb.example/docs/a%20b/notes%231.md#fares",
            "https://kb.example/docs/a%20b/notes%231.md#tram-28",
            "https://kb.example/docs/top.txt",
        ]
    );
    // The default base, through the provider as a host builds it.
    let s = Search::new(&local(&dir.0)).unwrap();
    let got = search(&s, "Sintra palaces").await;
    assert_eq!(got[0].url.as_deref(), Some("local:top.txt"));
    // Nothing of the folder's absolute path, in any field of any passage.
    let root = dir.0.display().to_string();
    for p in LocalIndex::from_dir(&dir.0).unwrap().passages() {
        let all = format!("{p:?}");
        assert!(!all.contains(&root) && !all.contains("file:"), "{all}");
    }
}
