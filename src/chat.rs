//! `chat` (under construction).
