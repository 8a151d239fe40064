//! Shared by the tests (and the fuzz target `h1_response`).
#![allow(dead_code, unreachable_pub)]

pub mod reference;
