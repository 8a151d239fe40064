//! The request side (docs/reference/request.md): `inspect`, `strip`, `inject`,
//! `render_sources`, over [`citestream::request`].
//!
//! Bodies are bytes in and bytes out; the core splices them, so every byte
//! the gateway does not own (key order, number spelling, unknown fields)
//! reaches the upstream unchanged.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use citestream::request::{InjectError as CoreInjectError, InjectOptions, Placement, Template};

use crate::errors::{InjectError, bytes_arg, request_error};
use crate::rewrite::{endpoint_arg, sources_arg};

/// The result of `inspect`: the body to forward (without `web_search`),
/// whether to search, the query, and what the response side needs.
#[pyclass(module = "citestream._native", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct Inspection {
    /// `"chat"` or `"messages"`.
    endpoint: &'static str,
    /// True when the body had `"web_search": true`.
    web_search: bool,
    /// The body to forward upstream: every `web_search` member cut out.
    body: Py<PyBytes>,
    /// The text of the last user message when `web_search` is true and it
    /// has text; `None` otherwise.
    query: Option<String>,
    /// The earlier turns as `(role, text)` pairs, oldest first.
    context: Vec<(String, String)>,
    /// `"stream": true` was sent.
    stream: bool,
    /// Choices requested (`n`; 1 on messages).
    n: u32,
    /// `stream_options.include_usage` was true.
    include_usage: bool,
}

#[pymethods]
impl Inspection {
    fn __repr__(&self) -> String {
        let py_bool = |b: bool| if b { "True" } else { "False" };
        let query = self
            .query
            .as_deref()
            .map_or_else(|| "None".to_owned(), |q| format!("{q:?}"));
        format!(
            "<citestream.Inspection endpoint={} web_search={} query={query} stream={} n={}>",
            self.endpoint,
            py_bool(self.web_search),
            py_bool(self.stream),
            self.n
        )
    }
}

/// Validates a request body, reads and removes `web_search`, extracts the
/// search query.
///
/// Raises `RequestError` (with `.status` 400 and `.body`, the error JSON of
/// the endpoint) when the body is not a JSON object or `web_search` is not
/// a boolean.
#[pyfunction]
#[pyo3(signature = (body, *, endpoint = "chat"))]
fn inspect(py: Python<'_>, body: &Bound<'_, PyAny>, endpoint: &str) -> PyResult<Inspection> {
    let body = bytes_arg(body, "body")?;
    let ep = endpoint_arg(endpoint)?;
    let large = body.len() >= crate::DETACH_AT;
    let work = || citestream::request::inspect(ep, body);
    let r = if large { py.detach(work) } else { work() };
    let i = r.map_err(|e| request_error(py, &e))?;
    let (query, context) = match i.query() {
        Some(q) => (
            Some(q.text.clone()),
            q.context
                .iter()
                .map(|t| (t.role.clone(), t.text.clone()))
                .collect(),
        ),
        None => (None, Vec::new()),
    };
    Ok(Inspection {
        endpoint: ep.as_str(),
        web_search: i.web_search(),
        body: PyBytes::new(py, i.body()).unbind(),
        query,
        context,
        stream: i.stream(),
        n: i.n(),
        include_usage: i.include_usage(),
    })
}

/// The body without its `web_search` member(s): `inspect(body).body`.
#[pyfunction]
#[pyo3(signature = (body, *, endpoint = "chat"))]
fn strip(py: Python<'_>, body: &Bound<'_, PyAny>, endpoint: &str) -> PyResult<Py<PyBytes>> {
    Ok(inspect(py, body, endpoint)?.body)
}

/// Builds the injection options from the keyword arguments (`None` keeps
/// the default of a template part).
fn inject_options(
    placement: &str,
    header: Option<String>,
    source: Option<String>,
    separator: Option<String>,
    footer: Option<String>,
) -> PyResult<InjectOptions> {
    let placement = match placement {
        "user" => Placement::UserMessage,
        "system" => Placement::System,
        other => {
            return Err(crate::errors::CitestreamError::new_err(format!(
                "placement must be 'user' or 'system', not {other:?}"
            )));
        }
    };
    let d = Template::default();
    Ok(InjectOptions {
        placement,
        template: Template {
            header: header.unwrap_or(d.header),
            source: source.unwrap_or(d.source),
            separator: separator.unwrap_or(d.separator),
            footer: footer.unwrap_or(d.footer),
        },
    })
}

/// Returns `body` with the numbered sources put in front of the model
/// (default: a text part prepended to the last user message).
///
/// `source` is the per-source template with the placeholders `{n}`,
/// `{title}`, `{url}`, `{text}`, `{heading}`, `{author}`, `{year}`,
/// `{reference}`. Raises `InjectError` when the body is not a JSON object
/// or has no messages array to put the block into.
#[pyfunction]
#[pyo3(signature = (body, sources, *, endpoint = "chat", placement = "user", header = None, source = None, separator = None, footer = None))]
#[allow(clippy::too_many_arguments)]
fn inject<'py>(
    py: Python<'py>,
    body: &Bound<'py, PyAny>,
    sources: &Bound<'py, PyAny>,
    endpoint: &str,
    placement: &str,
    header: Option<String>,
    source: Option<String>,
    separator: Option<String>,
    footer: Option<String>,
) -> PyResult<Bound<'py, PyBytes>> {
    let body = bytes_arg(body, "body")?;
    let sources = sources_arg(sources)?;
    let ep = endpoint_arg(endpoint)?;
    let opts = inject_options(placement, header, source, separator, footer)?;
    let work = || citestream::request::inject(ep, &body, &sources, &opts);
    let r = if body.len() >= crate::DETACH_AT {
        py.detach(work)
    } else {
        work()
    };
    match r {
        Ok(out) => Ok(PyBytes::new(py, &out)),
        Err(CoreInjectError::Invalid(e)) => Err(request_error(py, &e)),
        Err(e) => Err(InjectError::new_err(e.to_string())),
    }
}

/// The sources block as the model sees it (plain text).
#[pyfunction]
#[pyo3(signature = (sources, *, header = None, source = None, separator = None, footer = None))]
fn render_sources(
    sources: &Bound<'_, PyAny>,
    header: Option<String>,
    source: Option<String>,
    separator: Option<String>,
    footer: Option<String>,
) -> PyResult<String> {
    let sources = sources_arg(sources)?;
    let opts = inject_options("user", header, source, separator, footer)?;
    Ok(citestream::request::render_sources(
        &opts.template,
        &sources,
    ))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Inspection>()?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(strip, m)?)?;
    m.add_function(wrap_pyfunction!(inject, m)?)?;
    m.add_function(wrap_pyfunction!(render_sources, m)?)?;
    Ok(())
}
