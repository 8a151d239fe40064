//! Server-Sent Events (under construction).
