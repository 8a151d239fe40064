//! The `citestream` command-line tool (SPEC section 11).
//!
//! ```text
//! citestream events  [--chunk-size N] [--last-event-id ID] [FILE]
//! citestream rewrite --sources FILE [--endpoint chat|messages]
//!                    [--dialect sources|citations|both] [--offsets chars|utf16|bytes]
//!                    [--n N] [--chunk-size N] [FILE]
//! citestream search  [--config FILE] QUERY
//! citestream serve   [--config FILE] [--listen ADDR]
//! citestream ext-proc [--config FILE] [--listen ADDR]
//! ```
//!
//! Exit status: 0 on success, 2 on a usage error or an unreadable sources or
//! input file (one line on standard error), 1 on an I/O error mid-stream.

mod ext_proc;
mod process;
mod search;
mod serve;

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::process::ExitCode;

use bytes::{Bytes, BytesMut};
use std::sync::Arc;

use citestream::sse::{Frame, Parser};
use citestream::{
    Dialect, Endpoint, OffsetUnit, RewriteOptions, Rewriter, Sources, StreamRewriter,
};

const USAGE: &str = "usage: citestream events [--chunk-size N] [--last-event-id ID] [FILE]\n       citestream rewrite --sources FILE [--endpoint chat|messages] [--dialect sources|citations|both] [--offsets chars|utf16|bytes] [--n N] [--chunk-size N] [FILE]\n       citestream search [--config FILE] QUERY\n       citestream serve [--config FILE] [--listen ADDR]\n       citestream ext-proc [--config FILE] [--listen ADDR]";

/// Size of one read from the input when `--chunk-size` is not given.
const READ_SIZE: usize = 64 * 1024;

enum Failure {
    Usage(String),
    Io(io::Error),
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("events") => events(&args[1..]),
        Some("rewrite") => rewrite(&args[1..]),
        Some("serve") => return serve::main(&args[1..]),
        Some("ext-proc") => ext_proc::run(&args[1..]),
        Some("search") => search::run(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(Failure::Usage(format!("unknown command '{other}'"))),
        None => Err(Failure::Usage("missing command".into())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("citestream: {msg} (see citestream --help)");
            ExitCode::from(2)
        }
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Io(e)) => {
            eprintln!("citestream: {e}");
            ExitCode::from(1)
        }
    }
}

/// Command-line options: `--name value`, `--name=value`, and positionals.
struct Args {
    opts: Vec<(String, String)>,
    positional: Vec<String>,
}

impl Args {
    fn parse(args: &[String], known: &[&str]) -> Result<Args, Failure> {
        let mut opts = Vec::new();
        let mut positional = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "-" || !a.starts_with('-') {
                positional.push(a.clone());
                continue;
            }
            let (name, inline) = match a.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (a.as_str(), None),
            };
            if !known.contains(&name) {
                return Err(Failure::Usage(format!("unknown option '{name}'")));
            }
            let value = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| Failure::Usage(format!("option '{name}' needs a value")))?,
            };
            if opts.iter().any(|(n, _)| n == name) {
                return Err(Failure::Usage(format!("option '{name}' given twice")));
            }
            opts.push((name.to_string(), value));
        }
        if positional.len() > 1 {
            return Err(Failure::Usage(format!(
                "unexpected argument '{}'",
                positional[1]
            )));
        }
        Ok(Args { opts, positional })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.opts
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn positive(&self, name: &str) -> Result<Option<usize>, Failure> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(Failure::Usage(format!(
                    "{name} takes a positive integer, got '{v}'"
                ))),
            },
        }
    }

    fn input(&self) -> Result<Input, Failure> {
        match self.positional.first().map(String::as_str) {
            None | Some("-") => Ok(Input::Stdin(io::stdin())),
            Some(path) => File::open(path)
                .map(Input::File)
                .map_err(|e| Failure::Usage(format!("cannot read '{path}': {e}"))),
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

fn events(args: &[String]) -> Result<(), Failure> {
    let args = Args::parse(args, &["--chunk-size", "--last-event-id"])?;
    let chunk = args.positive("--chunk-size")?;
    let input = args.input()?;
    let mut parser = Parser::new();
    if let Some(id) = args.get("--last-event-id") {
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

fn rewrite(args: &[String]) -> Result<(), Failure> {
    let args = Args::parse(
        args,
        &[
            "--sources",
            "--endpoint",
            "--dialect",
            "--offsets",
            "--n",
            "--chunk-size",
        ],
    )?;
    let sources_path = args
        .get("--sources")
        .ok_or_else(|| Failure::Usage("rewrite needs --sources FILE".into()))?;
    let endpoint = match args.get("--endpoint").unwrap_or("chat") {
        "chat" => Endpoint::ChatCompletions,
        "messages" => Endpoint::Messages,
        other => {
            return Err(Failure::Usage(format!(
                "--endpoint takes chat or messages, got '{other}'"
            )));
        }
    };
    let dialect = match args.get("--dialect").unwrap_or("sources") {
        "sources" => Dialect::SOURCES,
        "citations" => Dialect::CITATIONS,
        "both" => Dialect::BOTH,
        other => {
            return Err(Failure::Usage(format!(
                "--dialect takes sources, citations or both, got '{other}'"
            )));
        }
    };
    let offsets: OffsetUnit = match args.get("--offsets").unwrap_or("chars").parse() {
        Ok(u) => u,
        Err(_) => {
            return Err(Failure::Usage(format!(
                "--offsets takes chars, utf16 or bytes, got '{}'",
                args.get("--offsets").unwrap_or_default()
            )));
        }
    };
    let n = match args.positive("--n")? {
        Some(n) => {
            u32::try_from(n).map_err(|_| Failure::Usage(format!("--n is too large: {n}")))?
        }
        None => 1,
    };
    let chunk = args.positive("--chunk-size")?;
    let sources_json = std::fs::read(sources_path)
        .map_err(|e| Failure::Usage(format!("cannot read sources file '{sources_path}': {e}")))?;
    let sources = Sources::from_json(&sources_json)
        .map_err(|e| Failure::Usage(format!("sources file '{sources_path}': {e}")))?;
    let sources = Arc::new(sources);
    let mut opts = RewriteOptions::new();
    opts.dialect(dialect).offsets(offsets).n(n);
    let input = args.input()?;

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
