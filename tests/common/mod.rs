//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod chat_ref;
pub mod cite_ref;
pub mod responses_ref;
pub mod sse_ref;
