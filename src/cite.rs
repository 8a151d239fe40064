//! `cite` (under construction).
