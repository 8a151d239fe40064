//! What every citestream host (`citestream serve`, `citestream ext-proc`,
//! the Python package) shares: the config file of SPEC section 12, accounts
//! and auth, the request side of the system (grounding), metrics.
//!
//! SKELETON: being built (issue 10).
