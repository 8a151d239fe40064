//! `sources` (under construction).
