//! `citestream._native`: the Python extension module of the `citestream`
//! package (PyO3, abi3, CPython ≥ 3.9).
//!
//! A thin binding over the core crate: every decision (SSE parsing, marker
//! tracking, offsets, splicing, request inspection, injection, quota, search,
//! config) is made by the Rust crates, never re-implemented in Python. The
//! pure-Python half of the package (`citestream/__init__.py`,
//! `citestream/litellm.py`) only converts between LiteLLM's objects and bytes.
//!
//! # Contract
//! * Bytes in, bytes out. Input is copied once into a `bytes::Bytes`; output
//!   is the rewriter's output concatenated into one `bytes` object.
//! * Never a crash of the interpreter: every error is a Python exception
//!   (`CitestreamError` and its subclasses, `TypeError` for a wrong argument
//!   type); the core never panics on any input (its fuzz targets assert it),
//!   and a panic that did happen would surface as PyO3's `PanicException`.
//! * The GIL is released while rewriting or inspecting inputs of
//!   `DETACH_AT` (16 KiB) or more, and while a grounding request waits for
//!   the quota store or the search provider.
//! * Objects are not shared across threads by the callers we know (LiteLLM
//!   runs one rewriter per response); each class is `Send` and guarded by
//!   PyO3's borrow checking, so concurrent use from two threads raises
//!   instead of corrupting state.

use pyo3::prelude::*;

mod errors;
mod grounding;
mod request;
mod rewrite;

pub(crate) use rewrite::DETACH_AT;

/// The module `citestream._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    rewrite::register(m)?;
    request::register(m)?;
    grounding::register(m)?;
    Ok(())
}
