//! `json` (under construction).
