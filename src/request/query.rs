//! What the request side hands the search: the question and the
//! conversation before it ([`SearchQuery`], [`Turn`]), as each endpoint's
//! reader finds them.

/// One conversation turn handed to the search as context.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Turn {
    /// `user`, `assistant`, `system`, `developer`, `tool`, … as sent.
    pub role: String,
    /// The turn's text: string content, or its text parts joined with `\n`.
    pub text: String,
}

/// What to search for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchQuery {
    /// The text of the last `user` message (string content, or its text
    /// parts / blocks joined with `\n`; images and other parts ignored).
    pub text: String,
    /// The turns before that message, oldest first, as context (turns
    /// without text are left out). On `/v1/messages` a top-level `system`
    /// comes first with role `system`.
    pub context: Vec<Turn>,
}
