//! `Grounding`: the whole request side of a `citestream serve` config file,
//! for Python hosts (the LiteLLM callback), over
//! [`citestream_host::grounding::Grounding`].
//!
//! One copy of each piece of logic: the config file format, `${VAR}` and
//! the `CITESTREAM_*` overrides ([`citestream_host::config::Config::load`]),
//! accounts and auth, the quota stores (memory, Redis, with citestream-host's
//! Redis scripts), the search providers (`citestream-search`), injection and
//! the rewrite options are all the Rust crates'. This module only owns a
//! tokio runtime to run them on and converts values to Python.
//!
//! Contract:
//! * `Grounding(config_path=None)` loads the file like `citestream serve
//!   --config` (no file: the embedded defaults) and builds the accounts,
//!   the quota store and the search provider; a `ConfigError` names the key
//!   at fault.
//! * `prepare(body, endpoint=..., headers=...)` blocks the calling thread
//!   (with the GIL released) until the quota store and the search have
//!   answered; Python async hosts call it through `asyncio.to_thread`. It
//!   returns a `Grounded` or raises `RequestError` (status 400 or 401, the
//!   error body in the endpoint's shape).
//! * A `Grounded` holds its [`Exchange`] until the host says how the
//!   upstream answered: `on_response(status, headers)`
//!   ([`Exchange::on_response_headers`]: the search committed on a 2xx
//!   status, released otherwise), `on_error(kind)` ([`Exchange::on_error`]:
//!   released) or `release()` (dropped: released). A `Grounded` collected
//!   before any of them drops its exchange, which releases the search. No
//!   quota rule is written here: the exchange decides.
//! * The runtime is multi-threaded (one worker) so background tasks of the
//!   Redis connection keep running between calls, and `prepare` may be
//!   called from several threads at once.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use std::sync::Mutex;

use citestream::RewriteOptions;
use citestream::flow::ResponsePlan;
use citestream_host::config::Config;
use citestream_host::exchange::{Exchange, FailureClass, RequestHead};

use crate::errors::{ConfigError, RequestError, bytes_arg};
use crate::rewrite::{PySources, endpoint_arg, rewriter_object};

/// The request side of a config file: auth, quota, search, injection.
#[pyclass(module = "citestream._native", frozen)]
#[derive(Debug)]
pub(crate) struct Grounding {
    inner: Arc<citestream_host::grounding::Grounding>,
    rt: tokio::runtime::Runtime,
}

#[pymethods]
impl Grounding {
    /// `Grounding(config_path=None)`: loads the TOML config file of
    /// `citestream serve` (`None`: the embedded defaults, i.e. the bundled
    /// local corpus, quota in memory, auth `open`).
    #[new]
    #[pyo3(signature = (config_path = None))]
    fn new(py: Python<'_>, config_path: Option<PathBuf>) -> PyResult<Self> {
        py.detach(|| {
            let cfg = Config::load(config_path.as_deref())
                .map_err(|e| ConfigError::new_err(e.to_string()))?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("citestream-grounding")
                .enable_all()
                .build()
                .map_err(|e| ConfigError::new_err(format!("cannot start a tokio runtime: {e}")))?;
            let inner = rt
                .block_on(citestream_host::grounding::Grounding::new(&cfg))
                .map_err(|e| ConfigError::new_err(e.to_string()))?;
            Ok(Grounding {
                inner: Arc::new(inner),
                rt,
            })
        })
    }

    /// Runs the request side of one request body: auth (from `headers`),
    /// `web_search` validation and removal, quota, search, injection —
    /// [`citestream_host::exchange::Exchange::on_request`].
    ///
    /// `headers` is a dict or a list of `(name, value)` pairs (only
    /// `authorization` / `x-api-key` matter, in `auth.mode = "keys"`).
    /// Raises `RequestError` (`.status` 400 or 401, `.body` the error JSON
    /// of the endpoint) when the request must be answered with an error.
    /// A search the sources used stays reserved until
    /// `Grounded.on_response` / `on_error` / `release` (or the `Grounded`
    /// is garbage-collected: released).
    #[pyo3(signature = (body, *, endpoint = "chat", headers = None))]
    fn prepare(
        &self,
        py: Python<'_>,
        body: &Bound<'_, PyAny>,
        endpoint: &str,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Grounded> {
        let body = bytes_arg(body, "body")?;
        let ep = endpoint_arg(endpoint)?;
        let headers = header_map(headers)?;
        let head = RequestHead::new(http::Method::POST, ep.path(), headers);
        let mut ex = Exchange::new(self.inner.clone(), head);
        let r = py.detach(|| {
            let _guard = self.rt.enter(); // a rejected exchange drops here
            self.rt.block_on(ex.on_request(Some(body))).map(|f| (f, ex))
        });
        match r {
            Ok((fwd, ex)) => {
                let plan = ex.plan().cloned();
                Ok(Grounded {
                    body: PyBytes::new(py, &fwd.body.unwrap_or_default()).unbind(),
                    search: ex.outcome().map_or("not-requested", |o| o.as_str()),
                    account: ex.account().to_owned(),
                    stream: ex.stream(),
                    sources: plan
                        .as_ref()
                        .map(|plan| {
                            Py::new(
                                py,
                                PySources {
                                    inner: plan.sources.clone(),
                                },
                            )
                        })
                        .transpose()?,
                    plan,
                    opts: self.inner.rewrite_options().clone(),
                    remaining: Mutex::new(ex.remaining()),
                    exchange: Mutex::new(Some(ex)),
                    rt: self.rt.handle().clone(),
                })
            }
            Err(e) => {
                let err = RequestError::new_err(error_message(&e.body));
                let v = err.value(py);
                let _ = v.setattr("status", e.status);
                let _ = v.setattr("body", PyBytes::new(py, &e.body));
                let _ = v.setattr("message", error_message(&e.body));
                let _ = v.setattr("param", error_param(&e.body));
                Err(err)
            }
        }
    }

    /// The `[rewrite]` dialect of the config: `sources`, `citations` or
    /// `both`.
    #[getter]
    fn dialect(&self) -> &'static str {
        self.inner.rewrite_options().get_dialect().as_str()
    }
}

/// The message of an error body in either shape (`error.message`).
fn error_message(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned())
}

/// The `param` of an OpenAI-shaped error body.
fn error_param(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["param"].as_str().map(str::to_owned))
}

/// A dict or a list of pairs as an `http::HeaderMap`.
fn header_map(headers: Option<&Bound<'_, PyAny>>) -> PyResult<http::HeaderMap> {
    let mut map = http::HeaderMap::new();
    let Some(h) = headers else { return Ok(map) };
    if h.is_none() {
        return Ok(map);
    }
    let pairs: Vec<(String, String)> = if let Ok(d) = h.cast::<PyDict>() {
        d.iter()
            .map(|(k, v)| Ok((k.extract()?, v.extract()?)))
            .collect::<PyResult<_>>()?
    } else {
        h.extract().map_err(|_| {
            PyTypeError::new_err("headers must be a dict or a list of (name, value) str pairs")
        })?
    };
    for (k, v) in pairs {
        let name = http::HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
            crate::errors::CitestreamError::new_err(format!("invalid header name {k:?}"))
        })?;
        let value = http::HeaderValue::from_str(&v).map_err(|_| {
            crate::errors::CitestreamError::new_err(format!("invalid value for header {k:?}"))
        })?;
        map.append(name, value);
    }
    Ok(map)
}

/// A request ready to go upstream, and how to treat its response.
#[pyclass(module = "citestream._native", frozen)]
#[derive(Debug)]
pub(crate) struct Grounded {
    body: Py<PyBytes>,
    search: &'static str,
    account: String,
    stream: bool,
    sources: Option<Py<PySources>>,
    plan: Option<ResponsePlan>,
    opts: RewriteOptions,
    /// The searches left, as the exchange last said.
    remaining: Mutex<Option<u32>>,
    /// The exchange until the upstream answered (or failed); it decides
    /// the quota.
    exchange: Mutex<Option<Exchange>>,
    rt: tokio::runtime::Handle,
}

impl Grounded {
    fn take(&self) -> Option<Exchange> {
        self.exchange
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Drops the exchange inside the runtime (a reserved search is
    /// released by a task of the quota store).
    fn end(&self, ex: Exchange) {
        *self.remaining.lock().unwrap_or_else(|e| e.into_inner()) = ex.remaining();
        let _guard = self.rt.enter();
        drop(ex);
    }
}

impl Drop for Grounded {
    fn drop(&mut self) {
        if let Some(ex) = self.take() {
            self.end(ex);
        }
    }
}

#[pymethods]
impl Grounded {
    /// The body to send upstream (`web_search` removed; sources injected
    /// when `sources` is not `None`).
    #[getter]
    fn body(&self, py: Python<'_>) -> Py<PyBytes> {
        self.body.clone_ref(py)
    }

    /// The `x-citestream-search` value: `not-requested`, `no-query`,
    /// `injected`, `nothing-found`, `failed`, `quota-exhausted`,
    /// `quota-unavailable`.
    #[getter]
    fn search(&self) -> &'static str {
        self.search
    }

    /// The account's searches left today, when a search was asked for
    /// (a reserved search counts as used; one more after a release).
    #[getter]
    fn remaining(&self) -> Option<u32> {
        *self.remaining.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The upstream answered with `status` (its response headers): the
    /// exchange commits the reserved search on a 2xx status and releases
    /// it on any other. Returns the response header edits the exchange
    /// decided (`x-citestream-search`, `x-citestream-searches-remaining`,
    /// …) as a dict. A second call does nothing and returns `{}`.
    #[pyo3(signature = (status, headers = None))]
    fn on_response<'py>(
        &self,
        py: Python<'py>,
        status: u16,
        headers: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let headers = header_map(headers)?;
        let out = PyDict::new(py);
        let Some(mut ex) = self.take() else {
            return Ok(out);
        };
        let edits = py.detach(|| {
            let head = self.rt.block_on(ex.on_response_headers(status, &headers));
            self.end(ex);
            head.edits
        });
        for (k, v) in edits.sets() {
            out.set_item(k.as_str(), String::from_utf8_lossy(v.as_bytes()))?;
        }
        Ok(out)
    }

    /// The upstream could not be reached or gave no response headers:
    /// `kind` is `refused`, `tls`, `timeout` or `broken`. The reserved
    /// search is released. Returns `(status, body)`: the 502/504 the
    /// gateway would answer, in the endpoint's error shape.
    #[pyo3(signature = (kind = "refused", detail = ""))]
    fn on_error<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        detail: &str,
    ) -> PyResult<Option<(u16, Bound<'py, PyBytes>)>> {
        let class = match kind {
            "refused" => FailureClass::Refused,
            "tls" => FailureClass::Tls,
            "timeout" => FailureClass::Timeout,
            "broken" => FailureClass::Broken,
            _ => {
                return Err(PyTypeError::new_err(
                    "kind must be 'refused', 'tls', 'timeout' or 'broken'",
                ));
            }
        };
        let Some(mut ex) = self.take() else {
            return Ok(None);
        };
        let reply = py.detach(|| {
            let r = self.rt.block_on(ex.on_error(class, detail));
            self.end(ex);
            r
        });
        Ok(Some((reply.status, PyBytes::new(py, &reply.body))))
    }

    /// Ends the exchange without a response (the client left, the call
    /// was abandoned): a reserved search is released. Does nothing after
    /// `on_response` / `on_error`.
    fn release(&self, py: Python<'_>) {
        if let Some(ex) = self.take() {
            py.detach(|| self.end(ex));
        }
    }

    /// The account the request counted against.
    #[getter]
    fn account(&self) -> &str {
        &self.account
    }

    /// The request asked for a stream.
    #[getter]
    fn stream(&self) -> bool {
        self.stream
    }

    /// The sources given to the model, or `None` (then the response passes
    /// through untouched).
    #[getter]
    fn sources(&self, py: Python<'_>) -> Option<Py<PySources>> {
        self.sources.as_ref().map(|s| s.clone_ref(py))
    }

    /// The endpoint (`chat`, `messages` or `responses`) of the plan, or
    /// `None`.
    #[getter]
    fn endpoint(&self) -> Option<&'static str> {
        self.plan.as_ref().map(|p| p.endpoint.as_str())
    }

    /// A new streaming rewriter for the response (`ChatRewriter`,
    /// `MessagesRewriter` or `ResponsesRewriter` with the config's
    /// `[rewrite]` options and the request's `n`), or `None` when there are
    /// no sources.
    fn rewriter(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        match &self.plan {
            None => Ok(None),
            Some(plan) => rewriter_object(py, plan.stream_rewriter(&self.opts)).map(Some),
        }
    }

    /// Rewrites a whole response body (returned unchanged when there are
    /// no sources or the body is not one the rewriter owns).
    fn rewrite_body<'py>(
        &self,
        py: Python<'py>,
        body: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let b = bytes_arg(body, "body")?;
        let out = match &self.plan {
            None => b.to_vec(),
            Some(plan) => {
                let work = || plan.rewrite_body(&b, &self.opts).into_owned();
                if b.len() >= crate::DETACH_AT {
                    py.detach(work)
                } else {
                    work()
                }
            }
        };
        Ok(PyBytes::new(py, &out))
    }

    fn __repr__(&self) -> String {
        format!(
            "<citestream.Grounded search={} account={} sources={}>",
            self.search,
            self.account,
            self.plan.as_ref().map_or(0, |p| p.sources.len())
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Grounding>()?;
    m.add_class::<Grounded>()?;
    Ok(())
}
