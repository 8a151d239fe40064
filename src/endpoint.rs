//! [`Endpoint`]: which API a body belongs to. Both sides of the data path
//! dispatch on it (the request side for the request and error shapes, the
//! response side for the rewriter), so it sits below both.

/// The API endpoint a body was sent to or came from. It decides the
/// request shape (messages, content parts or blocks, `system`), the error
/// shape and the response rewriter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// OpenAI-compatible `/v1/chat/completions`.
    ChatCompletions,
    /// Anthropic-compatible `/v1/messages`.
    Messages,
}

impl Endpoint {
    /// Every endpoint, in the order the command line lists them.
    pub const ALL: &'static [Endpoint] = &[Endpoint::ChatCompletions, Endpoint::Messages];

    /// The short name the command line uses (`citestream rewrite
    /// --endpoint NAME`): `chat`, `messages`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat",
            Endpoint::Messages => "messages",
        }
    }
}

/// Error returned when parsing an [`Endpoint`] from a string that is not
/// one of the [`Endpoint::name`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseEndpointError {
    _private: (),
}

impl std::fmt::Display for ParseEndpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("unknown endpoint (expected ")?;
        for (i, e) in Endpoint::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(e.name())?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for ParseEndpointError {}

impl std::str::FromStr for Endpoint {
    type Err = ParseEndpointError;

    /// Parses an [`Endpoint::name`] (exactly, lowercase).
    ///
    /// # Errors
    ///
    /// [`ParseEndpointError`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::ALL
            .iter()
            .copied()
            .find(|e| e.name() == s)
            .ok_or(ParseEndpointError { _private: () })
    }
}

#[cfg(test)]
mod tests {
    use super::Endpoint;

    #[test]
    fn names_round_trip() {
        for &e in Endpoint::ALL {
            assert_eq!(e.name().parse::<Endpoint>(), Ok(e));
        }
        assert!("Chat".parse::<Endpoint>().is_err());
        assert!("".parse::<Endpoint>().is_err());
    }
}
