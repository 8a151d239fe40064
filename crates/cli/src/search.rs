//! `citestream search [--config FILE] (QUERY | --conversation FILE)`: prints the sources the
//! configured search provider returns for QUERY, as a JSON array of
//! source objects (absent fields left out), after the adapter rules — what the
//! gateway would inject. With no `--config`, the `local` provider over the
//! bundled corpus. The file is read as `citestream serve` reads it
//! (`citestream_host::config::Config::load`: `${VAR}`, overrides, unknown
//! keys rejected); only its `[search]` table is used.
//!
//! Exit status: 0 with the array (possibly `[]`); 2 on a usage error or a
//! configuration the search cannot start with; 1 when the search failed
//! (error, timeout, non-2xx answer), with the reason on standard error,
//! once.
//! Warnings (e.g. unreadable files of a local folder) go to standard error.

use std::io::{self, Write};

use std::path::PathBuf;

use citestream_host::config::Config;
use citestream_search::query::conversation_query;
use citestream_search::{Search, SearchQuery};

use crate::process::Failure;

/// The flags of `search`.
#[derive(Debug, clap::Args)]
pub(crate) struct SearchArgs {
    /// The config file whose `[search]` table is used; without it, the
    /// `local` provider over the bundled corpus.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// What to search for.
    #[arg(
        value_name = "QUERY",
        required_unless_present = "conversation",
        conflicts_with = "conversation"
    )]
    query: Option<String>,
    /// Search for a conversation instead: FILE is a request body (or its
    /// `messages` array) of a grounded endpoint; the query formed from it
    /// is printed on standard error.
    #[arg(long, value_name = "FILE")]
    conversation: Option<PathBuf>,
}

pub(crate) fn run(args: SearchArgs) -> Result<(), Failure> {
    let conversation = match &args.conversation {
        None => None,
        Some(path) => {
            let bytes = std::fs::read(path)
                .map_err(|e| Failure::Usage(format!("cannot read '{}': {e}", path.display())))?;
            Some(conversation_query(&bytes).map_err(|e| {
                Failure::Usage(format!("conversation file '{}': {e}", path.display()))
            })?)
        }
    };
    let config = Config::load(args.config.as_deref())
        .map_err(|e| Failure::Usage(e.to_string()))?
        .search;
    crate::process::init_warnings();
    let search = Search::new(&config).map_err(|e| Failure::Usage(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let found = runtime.block_on(async {
        match conversation {
            Some(q) => {
                let formed = search.form(&q).await;
                eprintln!("query: {}", formed.text());
                search.search_formed(&formed).await
            }
            None => {
                let query = SearchQuery {
                    text: args.query.unwrap_or_default(),
                    context: Vec::new(),
                };
                search.search(&query).await
            }
        }
    });
    let sources = found.map_err(|e| {
        Failure::Io(io::Error::other(format!(
            "search failed ({}): {e}",
            e.kind().label()
        )))
    })?;
    let mut out = io::stdout().lock();
    // `Source: Serialize` writes the object the sources array has
    // (docs/reference/request.md): absent fields left out.
    serde_json::to_writer_pretty(&mut out, &sources).map_err(io::Error::from)?;
    out.write_all(b"\n")?;
    Ok(())
}
