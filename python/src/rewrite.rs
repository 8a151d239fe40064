//! The response side: `Sources`, `ChatRewriter`, `MessagesRewriter`,
//! `rewrite_body`.
//!
//! Each streaming class owns one core rewriter ([`citestream::ChatStream`],
//! [`citestream::MessagesStream`]) and follows its call order: any number of
//! `feed(piece)` calls, each returning the output that piece completed, then
//! one `finish()` returning the rest. Output bytes are exactly what the core
//! (and so `citestream rewrite`) produces for the same input, however the
//! input is split.

use std::sync::Arc;

use bytes::Bytes;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};

use citestream::{Dialect, OffsetUnit, RewriteOptions, StreamRewriter};

use crate::errors::{CitestreamError, SourcesError, bytes_arg};

/// Inputs at least this long are processed with the GIL released; shorter
/// ones are not worth the hand-off.
pub(crate) const DETACH_AT: usize = 16 * 1024;

/// The numbered sources of one request (docs/reference/request.md, "Sources"), validated and with
/// their output fragments serialized once.
#[pyclass(module = "citestream._native", name = "Sources", frozen)]
#[derive(Debug)]
pub(crate) struct PySources {
    pub(crate) inner: Arc<citestream::Sources>,
}

#[pymethods]
impl PySources {
    /// `Sources(data)`: `data` is a list (or tuple) of dicts with the
    /// optional keys `title`, `url`, `text`, `heading`, `author`, `year`,
    /// `reference`, or the same as JSON (`str`, `bytes`). Sources are
    /// numbered from 1 in the given order.
    ///
    /// Raises `SourcesError` when it is not an array of objects or a field
    /// has the wrong type, `TypeError` for any other kind of argument.
    #[new]
    fn new(data: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PySources {
            inner: Arc::new(parse_sources(data)?),
        })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!("<citestream.Sources: {} source(s)>", self.inner.len())
    }

    /// The top-level `sources` array the rewriters add, as JSON text:
    /// `[{"index","title","url"}, ...]`.
    fn sources_json(&self) -> String {
        self.inner.sources_json().to_owned()
    }

    /// The top-level `citations` array (docs/reference/responses.md, "The citations array"), as JSON text, one
    /// entry per source.
    fn citations_json(&self) -> String {
        self.inner.citations_json(|_| true)
    }

    /// The sources as a list of dicts (missing fields left out).
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for s in self.inner.list() {
            let d = PyDict::new(py);
            for (k, v) in s.fields() {
                d.set_item(k, v)?;
            }
            list.append(d)?;
        }
        Ok(list)
    }
}

/// Parses what `Sources(...)` accepts.
fn parse_sources(data: &Bound<'_, PyAny>) -> PyResult<citestream::Sources> {
    let json: Vec<u8> = if data.is_instance_of::<PyList>() || data.is_instance_of::<PyTuple>() {
        // json.dumps does the Python → JSON mapping; the core validates.
        let dumps = data.py().import("json")?.getattr("dumps")?;
        match dumps.call1((data,)) {
            Ok(s) => s.extract::<String>()?.into_bytes(),
            Err(e) => {
                return Err(SourcesError::new_err(format!(
                    "invalid sources: not JSON-serializable: {}",
                    e.value(data.py())
                )));
            }
        }
    } else if let Ok(s) = data.cast::<PyString>() {
        s.to_cow()?.as_bytes().to_vec()
    } else if data.is_instance_of::<PyBytes>() || data.is_instance_of::<PyByteArray>() {
        bytes_arg(data, "sources")?.to_vec()
    } else {
        let ty = data
            .get_type()
            .name()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string());
        return Err(PyTypeError::new_err(format!(
            "sources must be a list of dicts, a JSON str or bytes, or a Sources, not {ty}"
        )));
    };
    citestream::Sources::from_json(&json).map_err(|e| SourcesError::new_err(e.to_string()))
}

/// A `Sources` instance, or anything its constructor accepts.
pub(crate) fn sources_arg(data: &Bound<'_, PyAny>) -> PyResult<Arc<citestream::Sources>> {
    if let Ok(s) = data.cast::<PySources>() {
        return Ok(s.get().inner.clone());
    }
    Ok(Arc::new(parse_sources(data)?))
}

/// Builds the core options from the keyword arguments every rewriter takes.
pub(crate) fn options(
    dialect: &str,
    offsets: &str,
    n: i64,
    only_cited: bool,
) -> PyResult<RewriteOptions> {
    let d: Dialect = dialect.parse().map_err(|_| {
        CitestreamError::new_err(format!(
            "dialect must be 'sources', 'citations' or 'both', not {dialect:?}"
        ))
    })?;
    let o: OffsetUnit = offsets.parse().map_err(|_| {
        CitestreamError::new_err(format!(
            "offsets must be 'chars', 'utf16' or 'bytes', not {offsets:?}"
        ))
    })?;
    let n = u32::try_from(n).ok().filter(|&n| n >= 1).ok_or_else(|| {
        CitestreamError::new_err(format!("n must be between 1 and {}, not {n}", u32::MAX))
    })?;
    let mut opts = RewriteOptions::new();
    opts.dialect(d).offsets(o).n(n).only_cited(only_cited);
    Ok(opts)
}

/// Feeds `input` (when given) or finishes, and returns all output.
fn drive<R: StreamRewriter + Send>(py: Python<'_>, r: &mut R, input: Option<Bytes>) -> Vec<u8> {
    let large = input_len(&input) >= DETACH_AT;
    let work = |r: &mut R| {
        match input {
            Some(b) => r.feed(b),
            None => r.finish(),
        }
        let mut out = Vec::new();
        r.drain_into(&mut out);
        out
    };
    if large {
        py.detach(|| work(r))
    } else {
        work(r)
    }
}

fn input_len(input: &Option<Bytes>) -> usize {
    input.as_ref().map_or(0, Bytes::len)
}

/// The state shared by the streaming classes.
#[derive(Debug)]
struct Stream<R> {
    inner: R,
    finished: bool,
    /// Reads the output back into events for `feed_chunk`.
    events: citestream::sse::Parser,
}

impl<R: StreamRewriter + Send> Stream<R> {
    /// The error for a feed after `finish()`.
    fn open(&self, method: &str) -> PyResult<()> {
        if self.finished {
            return Err(CitestreamError::new_err(format!(
                "{method}() after finish(): the rewriter is done"
            )));
        }
        Ok(())
    }

    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let input = bytes_arg(data, "data")?;
        self.open("feed")?;
        let out = drive(py, &mut self.inner, Some(input));
        Ok(PyBytes::new(py, &out))
    }

    fn finish<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        if self.finished {
            return PyBytes::new(py, b"");
        }
        self.finished = true;
        let out = drive(py, &mut self.inner, None);
        PyBytes::new(py, &out)
    }

    /// One chunk's JSON in, as one `data:` event; the data of each event
    /// the rewriter output, `[DONE]` left out (the host writes its own).
    fn feed_chunk<'py>(
        &mut self,
        py: Python<'py>,
        chunk: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let json = bytes_arg(chunk, "chunk")?;
        self.open("feed_chunk")?;
        let mut event = Vec::with_capacity(json.len() + 8);
        event.extend_from_slice(b"data: ");
        event.extend_from_slice(&json);
        event.extend_from_slice(b"\n\n");
        let out = drive(py, &mut self.inner, Some(Bytes::from(event)));
        self.chunks(py, out)
    }

    fn finish_chunks<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        if self.finished {
            return Ok(PyList::empty(py));
        }
        self.finished = true;
        let out = drive(py, &mut self.inner, None);
        self.chunks(py, out)
    }

    fn chunks<'py>(&mut self, py: Python<'py>, out: Vec<u8>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        if out.is_empty() {
            return Ok(list);
        }
        self.events.feed(Bytes::from(out));
        while let Some(f) = self.events.next_frame() {
            if let citestream::sse::Frame::Event(e) = f {
                let data = e.data();
                if data != b"[DONE]" {
                    list.append(PyBytes::new(py, data))?;
                }
            }
        }
        Ok(list)
    }
}

/// Defines one Python class over one core streaming rewriter: the
/// constructor (the keyword arguments every rewriter takes), `feed`,
/// `finish` and `sources_emitted`. pyo3 classes cannot be generic, so both
/// classes come from this one definition.
macro_rules! stream_class {
    ($(#[$doc:meta])* $name:ident($core:ty); $(#[$new_doc:meta])*) => {
        $(#[$doc])*
        #[pyclass(module = "citestream._native")]
        #[derive(Debug)]
        pub(crate) struct $name {
            s: Stream<$core>,
        }

        impl $name {
            fn from_core(inner: $core) -> Self {
                $name {
                    s: Stream {
                        inner,
                        finished: false,
                        events: citestream::sse::Parser::new(),
                    },
                }
            }
        }

        #[pymethods]
        impl $name {
            $(#[$new_doc])*
            #[new]
            #[pyo3(signature = (sources, *, dialect = "sources", offsets = "chars", n = 1, only_cited = false))]
            fn new(
                sources: &Bound<'_, PyAny>,
                dialect: &str,
                offsets: &str,
                n: i64,
                only_cited: bool,
            ) -> PyResult<Self> {
                let opts = options(dialect, offsets, n, only_cited)?;
                Ok(Self::from_core(<$core>::new(sources_arg(sources)?, opts)))
            }

            /// Feeds the next piece of the upstream stream (split anywhere)
            /// and returns the rewritten bytes it completed (possibly
            /// empty).
            fn feed<'py>(
                &mut self,
                py: Python<'py>,
                data: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyBytes>> {
                self.s.feed(py, data)
            }

            /// Ends the stream and returns the rest of the output. A second
            /// call returns `b""`.
            fn finish<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
                self.s.finish(py)
            }

            /// Feeds one stream chunk given as its JSON (a chat completion
            /// chunk, a Responses event's data) and returns the JSON of each
            /// chunk to emit in its place, in order: usually one, the input
            /// bytes themselves when the rewriter left the chunk unchanged;
            /// none while it holds one back; more when it adds some.
            fn feed_chunk<'py>(
                &mut self,
                py: Python<'py>,
                chunk: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyList>> {
                self.s.feed_chunk(py, chunk)
            }

            /// Ends a stream fed with `feed_chunk` and returns the JSON of
            /// the chunks still to emit. A second call returns `[]`.
            fn finish_chunks<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
                self.s.finish_chunks(py)
            }

            /// True once the top-level `sources`/`citations` went out.
            #[getter]
            fn sources_emitted(&self) -> bool {
                self.s.inner.sources_emitted()
            }
        }
    };
}

stream_class! {
    /// Rewrites an OpenAI `/v1/chat/completions` SSE stream (docs/reference/responses.md, "Chat completions").
    ChatRewriter(citestream::ChatStream);
    /// `ChatRewriter(sources, *, dialect="sources", offsets="chars", n=1,
    /// only_cited=False)`.
}

stream_class! {
    /// Rewrites an Anthropic `/v1/messages` SSE stream (docs/reference/responses.md, "Messages").
    MessagesRewriter(citestream::MessagesStream);
    /// `MessagesRewriter(sources, *, dialect="sources", offsets="chars",
    /// n=1, only_cited=False)`. `n` is accepted for symmetry with the chat
    /// rewriter and the CLI; a messages response has one answer.
}

stream_class! {
    /// Rewrites an OpenAI `/v1/responses` SSE stream.
    ResponsesRewriter(citestream::ResponsesStream);
    /// `ResponsesRewriter(sources, *, dialect="sources", offsets="chars",
    /// n=1, only_cited=False)`. `n` is accepted for symmetry; a response
    /// has one answer.
}

/// Wraps a core rewriter chosen at run time in its Python class.
pub(crate) fn rewriter_object(py: Python<'_>, r: citestream::Rewriter) -> PyResult<Py<PyAny>> {
    Ok(match r {
        citestream::Rewriter::Chat(c) => Py::new(py, ChatRewriter::from_core(*c))?.into_any(),
        citestream::Rewriter::Messages(m) => {
            Py::new(py, MessagesRewriter::from_core(*m))?.into_any()
        }
        citestream::Rewriter::Responses(r) => {
            Py::new(py, ResponsesRewriter::from_core(*r))?.into_any()
        }
    })
}

/// Parses an endpoint name (`chat`, `messages`, `responses`).
pub(crate) fn endpoint_arg(endpoint: &str) -> PyResult<citestream::Endpoint> {
    endpoint.parse().map_err(|_| {
        let names: Vec<String> = citestream::Endpoint::ALL
            .iter()
            .map(|e| format!("'{e}'"))
            .collect();
        let (last, rest) = names.split_last().expect("at least one endpoint");
        CitestreamError::new_err(format!(
            "endpoint must be {} or {last}, not {endpoint:?}",
            rest.join(", ")
        ))
    })
}

/// Rewrites a whole (non-streamed) response body. Bodies the rewriter does
/// not own (error bodies, invalid JSON) come back unchanged.
#[pyfunction]
#[pyo3(signature = (body, sources, *, endpoint = "chat", dialect = "sources", offsets = "chars", n = 1, only_cited = false))]
#[allow(clippy::too_many_arguments)]
fn rewrite_body<'py>(
    py: Python<'py>,
    body: &Bound<'py, PyAny>,
    sources: &Bound<'py, PyAny>,
    endpoint: &str,
    dialect: &str,
    offsets: &str,
    n: i64,
    only_cited: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let body = bytes_arg(body, "body")?;
    let sources = sources_arg(sources)?;
    let opts = options(dialect, offsets, n, only_cited)?;
    let ep = endpoint_arg(endpoint)?;
    let work = || -> Vec<u8> {
        citestream::rewrite::rewrite_body(ep, &body, &sources, &opts).into_owned()
    };
    let out = if body.len() >= DETACH_AT {
        py.detach(work)
    } else {
        work()
    };
    Ok(PyBytes::new(py, &out))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySources>()?;
    m.add_class::<ChatRewriter>()?;
    m.add_class::<MessagesRewriter>()?;
    m.add_class::<ResponsesRewriter>()?;
    m.add_function(wrap_pyfunction!(rewrite_body, m)?)?;
    Ok(())
}
