use super::*;

fn env_of(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |n: &str| {
        vars.iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| (*v).to_owned())
    }
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml_with_env(text, &|_| None)
}

#[test]
fn empty_file_is_the_embedded_defaults() {
    let c = parse("").unwrap();
    assert_eq!(c.server.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(c.server.shutdown_grace, Duration::from_secs(30));
    assert_eq!(c.server.max_request_body, ByteSize(32 * 1024 * 1024));
    assert_eq!(c.server.workers, default_workers());
    assert!(c.server.workers >= 1);
    assert_eq!(c.upstream.base_url, "");
    assert_eq!(c.upstream.connect_timeout, Duration::from_secs(5));
    assert_eq!(c.upstream.headers_timeout, Duration::from_secs(120));
    assert_eq!(c.quota.store, StoreName::Memory);
    assert_eq!(c.auth.mode, AuthMode::Open);
    assert_eq!(c.rewrite.dialect, DialectName::Sources);
    assert_eq!(c.rewrite.offsets, OffsetsName::Chars);
}

#[test]
fn the_spec_sample_parses() {
    let text = r#"
[server]
listen = "127.0.0.1:8080"
shutdown_grace = "30s"          # drain time after SIGTERM/SIGINT
max_request_body = "32MiB"      # larger: 413

[upstream]
base_url = ""
messages_base_url = ""
api_key = ""
connect_timeout = "5s"
headers_timeout = "120s"

[search]
provider = "local"
max_results = 5
timeout = "8s"
max_text_chars = 1500

[search.local]
path = ""
[search.static]
path = "sources.json"
[search.searxng]
url = "http://127.0.0.1:8888"
[search.perplexity]
url = ""
api_key = ""
[search.http]
url = ""
api_key = ""

[inject]
placement = "user"
header = "Sources:\n\n"
source = "[{n}] {title}\nURL: {url}\n{text}"   # {n} {title} {url} {text} {heading} {author} {year} {reference}
separator = "\n\n"
footer = "\n\n"

[rewrite]
dialect = "sources"
offsets = "chars"

[quota]
store = "memory"
redis_url = ""

[auth]
mode = "open"

[plans.default]
searches_per_day = 100

[[accounts]]
id = "acme"
plan = "default"
keys = ["sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"]
"#;
    let c = parse(text).unwrap();
    assert_eq!(c.accounts.len(), 1);
    assert_eq!(c.plans["default"].searches_per_day, 100);
}

#[test]
fn unknown_keys_are_named() {
    let e = parse("[server]\nlisten = \"127.0.0.1:1\"\nlistn = \"x\"\n").unwrap_err();
    assert_eq!(e.key(), "server.listn", "{e}");
    assert!(e.to_string().contains("unknown field"), "{e}");
    let e = parse("[servr]\n").unwrap_err();
    assert_eq!(e.key(), "servr", "{e}");
    let e = parse("[search]\nprovidr = \"local\"\n").unwrap_err();
    assert_eq!(e.key(), "search.providr", "{e}");
    let e = parse("[[accounts]]\nid = \"a\"\nkey = []\n").unwrap_err();
    assert_eq!(e.key(), "accounts[0].key", "{e}");
}

#[test]
fn bad_values_are_named_on_one_line() {
    let cases = [
        (
            "[server]\nshutdown_grace = \"30x\"\n",
            "server.shutdown_grace",
        ),
        ("[server]\nshutdown_grace = 30\n", "server.shutdown_grace"),
        (
            "[server]\nmax_request_body = \"32XB\"\n",
            "server.max_request_body",
        ),
        (
            "[server]\nmax_request_body = \"0\"\n",
            "server.max_request_body",
        ),
        ("[server]\nlisten = \"localhost\"\n", "server.listen"),
        ("[server]\nworkers = 0\n", "server.workers"),
        ("[server]\nworkers = 1025\n", "server.workers"),
        ("[server]\nworkers = -1\n", "server.workers"),
        ("[server]\nworkers = \"4\"\n", "server.workers"),
        (
            "[upstream]\nheaders_timeout = \"soon\"\n",
            "upstream.headers_timeout",
        ),
        ("[upstream]\nbase_url = \"ftp://x\"\n", "upstream.base_url"),
        (
            "[upstream]\nbase_url = \"not a url\"\n",
            "upstream.base_url",
        ),
        (
            "[upstream]\nmessages_base_url = \"/v1\"\n",
            "upstream.messages_base_url",
        ),
        ("[rewrite]\ndialect = \"footnotes\"\n", "rewrite.dialect"),
        ("[rewrite]\noffsets = \"words\"\n", "rewrite.offsets"),
        ("[quota]\nstore = \"etcd\"\n", "quota.store"),
        ("[quota]\nstore = \"redis\"\n", "quota.redis_url"),
        ("[auth]\nmode = \"closed\"\n", "auth.mode"),
        (
            "[plans.default]\nsearches_per_day = -1\n",
            "plans.default.searches_per_day",
        ),
        ("[search]\ntimeout = \"8 parsecs\"\n", "search.timeout"),
        ("[inject]\nplacement = \"assistant\"\n", "inject.placement"),
        ("[inject]\nsource = \"[{n}] {titel}\"\n", "inject.source"),
        ("[inject]\nheadr = \"x\"\n", "inject.headr"),
        ("[inject]\nfooter = 3\n", "inject.footer"),
    ];
    for (text, key) in cases {
        let e = parse(text).unwrap_err();
        assert_eq!(e.key(), key, "{text}: {e}");
        let line = e.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.starts_with(&format!("{key}: ")), "{line}");
    }
}

#[test]
fn inject_table() {
    // The defaults are the core's.
    assert_eq!(
        parse("").unwrap().inject_options(),
        InjectOptions::default()
    );
    let c = parse(
        "[inject]\nplacement = \"system\"\nheader = \"H\"\nsource = \"<{n}|{url}|{heading}>\"\n\
         separator = \"; \"\nfooter = \"\"\n",
    )
    .unwrap();
    let o = c.inject_options();
    assert_eq!(o.placement, Placement::System);
    assert_eq!(
        o.template,
        Template {
            header: "H".into(),
            source: "<{n}|{url}|{heading}>".into(),
            separator: "; ".into(),
            footer: String::new(),
        }
    );
    // Only the named keys change; other braces are text.
    let c = parse("[inject]\nsource = \"{n}: {\\\"t\\\": 1} {}\"\n").unwrap();
    assert_eq!(
        c.inject_options().template.header,
        Template::default().header
    );
    assert_eq!(c.inject_options().placement, Placement::UserMessage);
    let e = parse("[inject]\nsource = \"{n} {snippet}\"\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "inject.source: unknown placeholder {snippet} (known: {n} {title} {url} {text} \
         {heading} {author} {year} {reference})"
    );
    let e = parse("[inject]\nplacement = \"top\"\n").unwrap_err();
    assert!(e.to_string().contains("`user`"), "{e}");
}

#[test]
fn syntax_errors_give_the_line() {
    let e = parse("[server]\nlisten = \n").unwrap_err();
    let line = e.to_string();
    assert!(line.contains("line 2"), "{line}");
    assert!(!line.contains('\n'), "{line}");
}

#[test]
fn env_variables_are_expanded() {
    let env = env_of(&[("KEY", "sk-1"), ("PORT", "9000")]);
    let c = Config::from_toml_with_env(
        "[upstream]\nbase_url = \"http://127.0.0.1:${PORT}\"\napi_key = \"${KEY}\"\n[search.http]\napi_key = \"a$b$${KEY}\"\n",
        &env,
    )
    .unwrap();
    assert_eq!(c.upstream.base_url, "http://127.0.0.1:9000");
    assert_eq!(c.upstream.api_key, "sk-1");
    assert_eq!(c.search.http.api_key, "a$b${KEY}");
}

#[test]
fn an_unset_variable_is_named() {
    let e = Config::from_toml_with_env("[upstream]\napi_key = \"${NOPE_KEY}\"\n", &|_| None)
        .unwrap_err();
    assert_eq!(e.key(), "upstream.api_key");
    assert!(e.to_string().contains("NOPE_KEY is not set"), "{e}");
    let e = Config::from_toml_with_env("[[accounts]]\nid = \"a\"\nkeys = [\"${K0}\"]\n", &|_| None)
        .unwrap_err();
    assert_eq!(e.key(), "accounts[0].keys[0]", "{e}");
    let e =
        Config::from_toml_with_env("[upstream]\napi_key = \"${OPEN\"\n", &|_| None).unwrap_err();
    assert!(e.to_string().contains("unterminated"), "{e}");
}

#[test]
fn overrides_win_over_the_file_and_listen_flag_over_both() {
    let env = env_of(&[
        ("CITESTREAM_LISTEN", "127.0.0.1:9001"),
        ("CITESTREAM_UPSTREAM_URL", "http://127.0.0.1:7000"),
        ("CITESTREAM_REDIS_URL", "redis://127.0.0.1:6390/"),
    ]);
    let mut c = Config::from_toml_with_env(
        "[server]\nlisten = \"127.0.0.1:1\"\n[upstream]\nbase_url = \"http://x\"\n[quota]\nstore = \"redis\"\n",
        &env,
    )
    .unwrap();
    assert_eq!(c.server.listen, "127.0.0.1:9001".parse().unwrap());
    assert_eq!(c.upstream.base_url, "http://127.0.0.1:7000");
    assert_eq!(c.quota.redis_url, "redis://127.0.0.1:6390/");
    c.set_listen("127.0.0.1:0").unwrap();
    assert_eq!(c.server.listen.port(), 0);
    assert_eq!(c.set_listen("nowhere").unwrap_err().key(), "--listen");

    let bad = env_of(&[("CITESTREAM_LISTEN", "x")]);
    assert_eq!(
        Config::from_toml_with_env("", &bad).unwrap_err().key(),
        "CITESTREAM_LISTEN"
    );
    let bad = env_of(&[("CITESTREAM_UPSTREAM_URL", "gopher://x")]);
    assert_eq!(
        Config::from_toml_with_env("", &bad).unwrap_err().key(),
        "CITESTREAM_UPSTREAM_URL"
    );
    // Set to "": back to the demo model.
    let empty = env_of(&[("CITESTREAM_UPSTREAM_URL", "")]);
    let c = Config::from_toml_with_env("[upstream]\nbase_url = \"http://x\"\n", &empty).unwrap();
    assert_eq!(c.upstream.base_url, "");
}

#[test]
fn sizes() {
    assert_eq!(ByteSize::parse("32MiB"), Ok(ByteSize(32 << 20)));
    assert_eq!(ByteSize::parse("64 KiB"), Ok(ByteSize(64 << 10)));
    assert_eq!(ByteSize::parse("1MB"), Ok(ByteSize(1_000_000)));
    assert_eq!(ByteSize::parse("512"), Ok(ByteSize(512)));
    assert_eq!(ByteSize::parse("2gib"), Ok(ByteSize(2 << 30)));
    assert!(ByteSize::parse("MiB").is_err());
    assert!(ByteSize::parse("1.5MiB").is_err());
    assert!(ByteSize::parse("99999999999999999999GiB").is_err());
    let c = parse("[server]\nmax_request_body = 1024\n").unwrap();
    assert_eq!(c.server.max_request_body, ByteSize(1024));
}

#[test]
fn options_follow_the_rewrite_table() {
    let c = parse("[rewrite]\ndialect = \"both\"\noffsets = \"utf16\"\n").unwrap();
    let o = c.rewrite_options();
    assert_eq!(o.get_dialect(), Dialect::BOTH);
    assert_eq!(o.get_offsets(), OffsetUnit::Utf16);
}

#[test]
fn a_missing_file_is_named() {
    let e = Config::load(Some(Path::new("/nonexistent/citestream.toml"))).unwrap_err();
    assert_eq!(e.key(), "/nonexistent/citestream.toml");
}

#[test]
fn relative_paths_resolve_against_the_config_files_folder() {
    let dir = std::env::temp_dir().join(format!("citestream-cfg-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("conf")).unwrap();
    let file = dir.join("conf").join("citestream.toml");
    std::fs::write(
        &file,
        "[search.local]\npath = \"../kb\"\n[search.static]\npath = \"/abs/sources.json\"\n",
    )
    .unwrap();
    let c = Config::load(Some(&file)).unwrap();
    assert_eq!(
        Path::new(&c.search.local.path),
        dir.join("conf").join("../kb")
    );
    assert_eq!(c.search.r#static.path, "/abs/sources.json");
    // The default static path is relative too: the config's folder.
    std::fs::write(&file, "").unwrap();
    let c = Config::load(Some(&file)).unwrap();
    assert_eq!(
        Path::new(&c.search.r#static.path),
        dir.join("conf").join("sources.json")
    );
    assert_eq!(c.search.local.path, "", "the bundled corpus stays");
    // No file: the working directory's, as written.
    assert_eq!(
        Config::load(None).unwrap().search.r#static.path,
        "sources.json"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn relative_paths_resolve_against_the_config_folder() {
    let dir = std::env::temp_dir().join(format!("citestream-cfg-paths-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gateway.toml");
    std::fs::write(
        &file,
        "[tls]\nca_file = \"certs/ca.pem\"\nclient_cert = \"/abs/c.pem\"\nclient_key = \"k.pem\"\n\
         [search.local]\npath = \"docs\"\n[search.static]\npath = \"sources.json\"\n",
    )
    .unwrap();
    let cfg = Config::load(Some(&file)).unwrap();
    assert_eq!(cfg.tls.ca_file, dir.join("certs/ca.pem").to_string_lossy());
    assert_eq!(cfg.tls.client_cert, "/abs/c.pem");
    assert_eq!(cfg.tls.client_key, dir.join("k.pem").to_string_lossy());
    assert_eq!(cfg.search.local.path, dir.join("docs").to_string_lossy());
    assert_eq!(
        cfg.search.r#static.path,
        dir.join("sources.json").to_string_lossy()
    );
    // Empty stays empty (the bundled corpus).
    std::fs::write(&file, "").unwrap();
    assert_eq!(Config::load(Some(&file)).unwrap().search.local.path, "");
}

#[test]
fn routes_and_tls_are_checked() {
    let env = |_: &str| None;
    let bad = [
        (
            "[[routes]]\nmodel = \"\"\nbase_urls = [\"http://a\"]\n",
            "routes[0].model",
        ),
        (
            "[[routes]]\nmodel = \"a*b*\"\nbase_urls = [\"http://a\"]\n",
            "routes[0].model",
        ),
        (
            "[[routes]]\nmodel = \"m\"\nbase_urls = []\n",
            "routes[0].base_urls",
        ),
        (
            "[[routes]]\nmodel = \"m\"\nbase_urls = [\"ftp://a\"]\n",
            "routes[0].base_urls[0]",
        ),
        (
            "[[routes]]\nmodel = \"m\"\nbase_urls = [\"http://a\"]\nkey = 1\n",
            "routes[0]",
        ),
        ("[tls]\nclient_cert = \"c.pem\"\n", "tls.client_key"),
    ];
    for (toml, key) in bad {
        let e = Config::from_toml_with_env(toml, &env).unwrap_err();
        assert!(e.key().starts_with(key), "{toml}: {e}");
    }
    let cfg = Config::from_toml_with_env(
        "[upstream]\nretries = 3\nidle_timeout = \"5s\"\n[[routes]]\nmodel = \"shannon-*\"\nbase_urls = [\"http://a:1\", \"https://b/v1\"]\n",
        &env,
    )
    .unwrap();
    assert_eq!(cfg.upstream.retries, 3);
    assert_eq!(cfg.upstream.pool_idle_timeout, Duration::from_secs(4));
    assert!(cfg.routes[0].matches("shannon-7b") && !cfg.routes[0].matches("shannon"));
}

#[test]
fn server_workers_takes_1_to_the_limit() {
    for n in [1, 2, 7, MAX_WORKERS] {
        let c = parse(&format!("[server]\nworkers = {n}\n")).unwrap();
        assert_eq!(c.server.workers, n);
    }
    let e = parse("[server]\nworkers = 0\n").unwrap_err();
    assert!(e.to_string().contains("must be 1 to 1024"), "{e}");
}
