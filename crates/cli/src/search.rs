//! `citestream search [--config FILE] QUERY`: prints the sources the
//! configured search provider returns for QUERY, as the JSON array of SPEC
//! section 2 (absent fields left out), after the adapter rules — what the
//! gateway would inject. With no `--config`, the `local` provider over the
//! bundled corpus. The file is read as `citestream serve` reads it
//! (`citestream_host::config::Config::load`: `${VAR}`, overrides, unknown
//! keys rejected); only its `[search]` table is used.
//!
//! Exit status: 0 with the array (possibly `[]`); 2 on a usage error or a
//! configuration the search cannot start with; 1 when the search failed
//! (error, timeout, non-2xx answer), with the reason on standard error.
//! Warnings (e.g. unreadable files of a local folder) go to standard error.

use std::io::{self, Write};

use std::path::Path;

use citestream_host::config::Config;
use citestream_search::{Search, SearchQuery, Source};
use serde_json::{Map, Value};

use super::{Args, Failure};

pub(crate) fn run(args: &[String]) -> Result<(), Failure> {
    let args = Args::parse(args, &["--config"])?;
    let Some(query) = args.positional.first() else {
        return Err(Failure::Usage("search needs a QUERY".into()));
    };
    let config = Config::load(args.get("--config").map(Path::new))
        .map_err(|e| Failure::Usage(e.to_string()))?
        .search;
    crate::process::init_warnings();
    let search = Search::new(&config).map_err(|e| Failure::Usage(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let query = SearchQuery {
        text: query.clone(),
        context: Vec::new(),
    };
    let sources = runtime.block_on(search.search(&query)).map_err(|e| {
        Failure::Io(io::Error::other(format!(
            "search failed ({}): {e}",
            e.kind().label()
        )))
    })?;
    let array: Vec<Value> = sources.iter().map(to_json).collect();
    let mut out = io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &array).map_err(io::Error::from)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// A source as a SPEC section 2 object.
fn to_json(s: &Source) -> Value {
    let mut m = Map::new();
    for (key, value) in [
        ("title", &s.title),
        ("url", &s.url),
        ("text", &s.text),
        ("heading", &s.heading),
        ("author", &s.author),
        ("year", &s.year),
        ("reference", &s.reference),
    ] {
        if let Some(v) = value {
            m.insert(key.into(), Value::String(v.clone()));
        }
    }
    Value::Object(m)
}
