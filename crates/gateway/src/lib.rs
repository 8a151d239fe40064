//! `citestream serve` (SPEC section 12): the whole web-search system as one
//! process in front of any OpenAI-/Anthropic-compatible model server, and
//! the built-in demo upstream model.
//!
//! SKELETON: being built (issue 10).

pub mod demo;
