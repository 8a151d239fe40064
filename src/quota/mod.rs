//! Daily search quota (under construction).
