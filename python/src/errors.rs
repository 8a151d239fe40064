//! The exceptions of the package and the conversions from the core's errors.
//!
//! ```text
//! ValueError
//!  └─ CitestreamError           every error of this package
//!      ├─ SourcesError          a sources list / JSON that is not an array of objects
//!      ├─ RequestError          a request body the gateway answers with a 400
//!      │                        (.status, .body, .param, .message)
//!      ├─ InjectError           a body sources cannot be put into
//!      └─ ConfigError           a config file that cannot be used
//! ```
//!
//! Wrong argument *types* (a `str` where bytes are expected) are `TypeError`.

use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};

create_exception!(
    _native,
    CitestreamError,
    PyValueError,
    "Base class of every citestream error."
);
create_exception!(
    _native,
    SourcesError,
    CitestreamError,
    "The sources are not a list (JSON array) of source objects."
);
create_exception!(
    _native,
    RequestError,
    CitestreamError,
    "A request body to answer with a 400 invalid_request_error: attributes status (int), body (bytes, the endpoint's error JSON), param (str or None), message (str)."
);
create_exception!(
    _native,
    InjectError,
    CitestreamError,
    "The body is not a request the sources can be put into."
);
create_exception!(
    _native,
    ConfigError,
    CitestreamError,
    "The configuration cannot be used (unreadable file, bad key or value)."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CitestreamError", py.get_type::<CitestreamError>())?;
    m.add("SourcesError", py.get_type::<SourcesError>())?;
    m.add("RequestError", py.get_type::<RequestError>())?;
    m.add("InjectError", py.get_type::<InjectError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    Ok(())
}

/// A `RequestError` carrying the status, error body and param of `e`.
pub(crate) fn request_error(py: Python<'_>, e: &citestream::request::RequestError) -> PyErr {
    let err = RequestError::new_err(e.message().to_owned());
    let value = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail in
    // practice; if it did, the exception still carries the message.
    let _ = value.setattr("status", e.status());
    let _ = value.setattr("body", PyBytes::new(py, &e.body()));
    let _ = value.setattr("param", e.param());
    let _ = value.setattr("message", e.message());
    err
}

/// Copies a bytes-like argument (`bytes`, `bytearray`, `memoryview`) into
/// `Bytes`; anything else is a `TypeError` naming `what`.
pub(crate) fn bytes_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<bytes::Bytes> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(bytes::Bytes::copy_from_slice(b.as_bytes()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(bytes::Bytes::from(b.to_vec()));
    }
    if obj.cast::<PyMemoryView>().is_ok() {
        let b = obj.call_method0("tobytes")?;
        if let Ok(b) = b.cast::<PyBytes>() {
            return Ok(bytes::Bytes::copy_from_slice(b.as_bytes()));
        }
    }
    let ty = obj
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string());
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes, bytearray or memoryview, not {ty}"
    )))
}
