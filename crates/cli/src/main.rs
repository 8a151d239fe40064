//! The `citestream` command-line tool: one binary with a subcommand per
//! job, parsed by `clap` (every command answers `--help`, the binary
//! `--version`).
//!
//! ```text
//! citestream events   [--chunk-size N] [--last-event-id ID] [FILE]
//! citestream rewrite  --sources FILE [--endpoint chat|messages]
//!                     [--dialect sources|citations|both] [--offsets chars|utf16|bytes]
//!                     [--n N] [--chunk-size N] [FILE]
//! citestream search   [--config FILE] QUERY
//! citestream serve    [--config FILE] [--listen ADDR]
//! citestream ext-proc [--config FILE] [--listen ADDR]
//! citestream hash-key            (reads a key on standard input, prints "sha256:<hex>")
//! citestream --version | citestream COMMAND --help
//! ```
//!
//! Contract:
//! * Input is FILE or standard input (`-` too); output is standard output.
//! * Exit status 0 on success (and for `--help`, `--version`); 1 when a
//!   search failed (`search`) or on an I/O error mid-stream; 2 on a usage
//!   error or an unreadable input, sources or config file, or a server
//!   that cannot start. Every error is printed once, as one line on
//!   standard error; a closed standard output (`| head`) is not an error.
//!
//! The commands' manual is `docs/reference/cli.md`.

mod ext_proc;
mod process;
mod search;
mod serve;

use process::Failure;

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;

use bytes::{Bytes, BytesMut};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};
use std::sync::Arc;

use citestream::sse::{Frame, Parser as SseParser};
use citestream::{
    Dialect, Endpoint, OffsetUnit, RewriteOptions, Rewriter, Sources, StreamRewriter,
};

/// Size of one read from the input when `--chunk-size` is not given.
const READ_SIZE: usize = 64 * 1024;

/// Web-search grounding for LLM gateways: SSE parsing, citation rewriting,
/// search, and the gateway itself.
#[derive(Debug, Parser)]
#[command(name = "citestream", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print each event of an SSE stream as one JSON line:
    /// {"type", "data", "id"}.
    Events(EventsArgs),
    /// Rewrite an upstream model response (a JSON body, or an SSE stream)
    /// for the given sources, as the gateway would.
    Rewrite(RewriteArgs),
    /// Print the sources the configured search provider finds for QUERY,
    /// as the JSON array the gateway would inject.
    Search(search::SearchArgs),
    /// Run the gateway: an HTTP server in front of an OpenAI- or
    /// Anthropic-compatible model server.
    Serve(serve::ServeArgs),
    /// Run the Envoy external processor (an ext_proc gRPC server).
    ExtProc(ext_proc::ExtProcArgs),
    /// Read an API key on standard input and print its hashed form, the
    /// one `[[accounts]] keys` stores.
    #[command(
        about = "Read an API key on standard input and print \"sha256:<hex>\", the form `[[accounts]] keys` stores.",
        long_about = None
    )]
    HashKey,
}

/// The input of `events` and `rewrite`.
#[derive(Debug, Args)]
struct InputArgs {
    /// Feed the input to the parser in pieces of N bytes (default: as
    /// read), to reproduce arbitrary network splits.
    #[arg(long, value_name = "N")]
    chunk_size: Option<NonZeroUsize>,
    /// The input file; standard input when absent or `-`.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct EventsArgs {
    /// Seed the last event ID, as a reconnecting client does.
    #[arg(long, value_name = "ID")]
    last_event_id: Option<String>,
    #[command(flatten)]
    input: InputArgs,
}

#[derive(Debug, Args)]
struct RewriteArgs {
    /// The sources: a JSON array of source objects ({"title", "url",
    /// "text", ...}), numbered from 1.
    #[arg(long, value_name = "FILE")]
    sources: PathBuf,
    /// The API the response comes from.
    #[arg(
        long,
        value_name = "NAME",
        default_value = Endpoint::ChatCompletions.as_str(),
        value_parser = PossibleValuesParser::new(Endpoint::ALL.map(Endpoint::as_str))
            .try_map(|s| s.parse::<Endpoint>()),
    )]
    endpoint: Endpoint,
    /// The citation dialect added to the response.
    #[arg(
        long,
        value_name = "NAME",
        default_value = Dialect::SOURCES.as_str(),
        value_parser = PossibleValuesParser::new(
            [Dialect::SOURCES, Dialect::CITATIONS, Dialect::BOTH].map(Dialect::as_str)
        )
            .try_map(|s| s.parse::<Dialect>()),
    )]
    dialect: Dialect,
    /// The unit of citation offsets.
    #[arg(
        long,
        value_name = "UNIT",
        default_value = OffsetUnit::Chars.as_str(),
        value_parser = PossibleValuesParser::new(
            [OffsetUnit::Chars, OffsetUnit::Utf16, OffsetUnit::Bytes].map(OffsetUnit::as_str)
        )
        .try_map(|s| s.parse::<OffsetUnit>()),
    )]
    offsets: OffsetUnit,
    /// The number of choices the request asked for (chat's `n`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    n: u32,
    #[command(flatten)]
    input: InputArgs,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return parse_failure(&e),
    };
    let result = match cli.command {
        Command::Events(a) => events(a),
        Command::Rewrite(a) => rewrite(a),
        Command::Serve(a) => serve::run(a),
        Command::ExtProc(a) => ext_proc::run(a),
        Command::Search(a) => search::run(a),
        Command::HashKey => hash_key(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("citestream: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Io(e)) => {
            eprintln!("citestream: {e}");
            ExitCode::from(1)
        }
    }
}

/// `--help` and `--version` print to standard output (exit 0); any other
/// parse error is one line on standard error pointing at the command's
/// help (exit 2).
fn parse_failure(e: &clap::Error) -> ExitCode {
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        print!("{}", e.render());
        return ExitCode::SUCCESS;
    }
    let msg = if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        "missing command".to_owned()
    } else {
        // clap's message, its possible values and tips, on one line.
        let rendered = e.render().to_string();
        let mut msg = String::new();
        for line in rendered
            .lines()
            .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            if !msg.is_empty() {
                msg.push_str(if msg.ends_with(':') { " " } else { "; " });
            }
            msg.push_str(line);
        }
        msg.strip_prefix("error: ").unwrap_or(&msg).to_owned()
    };
    // The help to point at: the subcommand's, when the first word is one.
    let cmd = std::env::args()
        .nth(1)
        .filter(|a| Cli::command().find_subcommand(a).is_some())
        .map(|a| format!(" {a}"))
        .unwrap_or_default();
    eprintln!("citestream: {msg} (see citestream{cmd} --help)");
    ExitCode::from(2)
}

/// `hash-key`: the key is standard input less surrounding ASCII
/// whitespace (as the gateway reads it from a header).
fn hash_key() -> Result<(), Failure> {
    let mut raw = Vec::new();
    io::stdin().lock().read_to_end(&mut raw)?;
    let key = std::str::from_utf8(raw.trim_ascii())
        .map_err(|_| Failure::Usage("hash-key: the key on standard input is not UTF-8".into()))?;
    if key.is_empty() {
        return Err(Failure::Usage(
            "hash-key: no key on standard input (try: printf %s \"$KEY\" | citestream hash-key)"
                .into(),
        ));
    }
    let mut out = io::stdout().lock();
    writeln!(out, "{}", citestream_host::auth::hash_key(key))?;
    out.flush()?;
    Ok(())
}

impl InputArgs {
    fn chunk(&self) -> Option<usize> {
        self.chunk_size.map(NonZeroUsize::get)
    }

    fn open(&self) -> Result<Input, Failure> {
        match &self.file {
            None => Ok(Input::Stdin(io::stdin())),
            Some(p) if p.as_os_str() == "-" => Ok(Input::Stdin(io::stdin())),
            Some(path) => File::open(path)
                .map(Input::File)
                .map_err(|e| Failure::Usage(format!("cannot read '{}': {e}", path.display()))),
        }
    }
}

enum Input {
    Stdin(io::Stdin),
    File(File),
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Input::Stdin(s) => s.read(buf),
            Input::File(f) => f.read(buf),
        }
    }
}

/// Reads `input` incrementally and hands `f` pieces of at most `chunk`
/// bytes (or whatever one read returned), in constant memory.
fn for_each_piece(
    mut input: impl Read,
    chunk: Option<usize>,
    mut f: impl FnMut(Bytes) -> io::Result<()>,
) -> io::Result<()> {
    let mut buf = BytesMut::with_capacity(READ_SIZE);
    loop {
        buf.resize(READ_SIZE, 0);
        let n = match input.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        buf.truncate(n);
        let mut read = buf.split().freeze();
        match chunk {
            None => f(read)?,
            Some(size) => {
                while !read.is_empty() {
                    let piece = read.split_to(size.min(read.len()));
                    f(piece)?;
                }
            }
        }
    }
}

fn events(args: EventsArgs) -> Result<(), Failure> {
    let chunk = args.input.chunk();
    let input = args.input.open()?;
    let mut parser = SseParser::new();
    if let Some(id) = &args.last_event_id {
        parser.set_last_event_id(Bytes::copy_from_slice(id.as_bytes()));
    }
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut line = Vec::with_capacity(256);
    for_each_piece(input, chunk, |piece| {
        parser.feed(piece);
        while let Some(frame) = parser.next_frame() {
            if let Frame::Event(e) = frame {
                line.clear();
                line.extend_from_slice(b"{\"type\": ");
                push_json_lossy(&mut line, e.event_type());
                line.extend_from_slice(b", \"data\": ");
                push_json_lossy(&mut line, e.data());
                line.extend_from_slice(b", \"id\": ");
                push_json_lossy(&mut line, e.last_event_id());
                line.extend_from_slice(b"}\n");
                out.write_all(&line)?;
            }
        }
        out.flush()
    })?;
    // An unterminated last event is not dispatched.
    let _tail = parser.finish();
    out.flush()?;
    Ok(())
}

fn push_json_lossy(out: &mut Vec<u8>, bytes: &[u8]) {
    let s = String::from_utf8_lossy(bytes);
    // Serializing a str cannot fail.
    if serde_json::to_writer(&mut *out, &*s).is_err() {
        out.extend_from_slice(b"\"\"");
    }
}

fn rewrite(args: RewriteArgs) -> Result<(), Failure> {
    let sources_path = &args.sources;
    let sources_json = std::fs::read(sources_path).map_err(|e| {
        Failure::Usage(format!(
            "cannot read sources file '{}': {e}",
            sources_path.display()
        ))
    })?;
    let sources = Sources::from_json(&sources_json)
        .map_err(|e| Failure::Usage(format!("sources file '{}': {e}", sources_path.display())))?;
    let sources = Arc::new(sources);
    let endpoint = args.endpoint;
    let mut opts = RewriteOptions::new();
    opts.dialect(args.dialect).offsets(args.offsets).n(args.n);
    let chunk = args.input.chunk();
    let input = args.input.open()?;

    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    // Decide between a whole JSON body and a stream on the first
    // non-whitespace byte; hold back only leading whitespace until then.
    enum Mode {
        Undecided(Vec<Bytes>),
        Body(Vec<u8>),
        Stream(Rewriter),
    }
    let mut mode = Mode::Undecided(Vec::new());
    let new_stream =
        |sources: &Arc<Sources>| Rewriter::new(endpoint, sources.clone(), opts.clone());
    for_each_piece(input, chunk, |piece| {
        if let Mode::Undecided(held) = &mut mode {
            let first = piece.iter().position(|b| !b.is_ascii_whitespace());
            held.push(piece);
            let Some(pos) = first else { return Ok(()) };
            let is_body = held.last().is_some_and(|p| p[pos] == b'{');
            let held = std::mem::take(held);
            if is_body {
                mode = Mode::Body(held.concat());
                return Ok(());
            }
            let mut rw = new_stream(&sources);
            for p in held {
                rw.feed(p);
                while let Some(b) = rw.next_output() {
                    out.write_all(&b)?;
                }
            }
            mode = Mode::Stream(rw);
            return out.flush();
        }
        match &mut mode {
            Mode::Body(all) => all.extend_from_slice(&piece),
            Mode::Stream(rw) => {
                rw.feed(piece);
                while let Some(b) = rw.next_output() {
                    out.write_all(&b)?;
                }
                out.flush()?;
            }
            Mode::Undecided(_) => {}
        }
        Ok(())
    })?;
    match mode {
        Mode::Undecided(held) => {
            for p in held {
                out.write_all(&p)?;
            }
        }
        Mode::Body(all) => {
            let rewritten = citestream::rewrite::rewrite_body(endpoint, &all, &sources, &opts);
            out.write_all(&rewritten)?;
        }
        Mode::Stream(mut rw) => {
            rw.finish();
            while let Some(b) = rw.next_output() {
                out.write_all(&b)?;
            }
        }
    }
    out.flush()?;
    Ok(())
}
