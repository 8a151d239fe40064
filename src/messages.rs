//! `messages` (under construction).
