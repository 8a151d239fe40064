//! The built-in demo upstream model (SPEC section 12, "Demo upstream").
//!
//! SKELETON: being built.
