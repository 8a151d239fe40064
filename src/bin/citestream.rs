//! The `citestream` command-line tool.
fn main() {}
