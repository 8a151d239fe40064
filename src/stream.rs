//! `stream` (under construction).
