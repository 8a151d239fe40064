//! `request` (under construction).
