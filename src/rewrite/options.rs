//! [`RewriteOptions`]: how the response rewriters decorate a response
//! (dialect, offset unit, `n`, only-cited, SSE limits), and [`MAX_CHOICES`].

use crate::cite::OffsetUnit;
use crate::sources::Dialect;
use crate::sse;

/// Largest choice index a chat rewriter tracks (OpenAI allows `n` up to
/// 128); choices with a larger index pass through without annotations.
pub const MAX_CHOICES: u32 = 128;

/// How a rewriter decorates responses.
///
/// ```
/// use citestream::{Dialect, OffsetUnit, RewriteOptions};
/// let mut opts = RewriteOptions::new();
/// opts.dialect(Dialect::BOTH).offsets(OffsetUnit::Utf16).n(2);
/// assert_eq!(opts.get_n(), 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewriteOptions {
    pub(crate) dialect: Dialect,
    pub(crate) offsets: OffsetUnit,
    pub(crate) n: u32,
    pub(crate) only_cited: bool,
    pub(crate) sse: sse::Config,
}

impl Default for RewriteOptions {
    fn default() -> Self {
        RewriteOptions::new()
    }
}

impl RewriteOptions {
    /// The defaults: `sources` dialect, offsets in characters, `n` = 1,
    /// every source in `citations`, the SSE parser's default limits.
    #[must_use]
    pub fn new() -> Self {
        RewriteOptions {
            dialect: Dialect::SOURCES,
            offsets: OffsetUnit::Chars,
            n: 1,
            only_cited: false,
            sse: sse::Config::new(),
        }
    }

    /// Which members to add (`sources` + `annotations`, `citations`, both).
    pub fn dialect(&mut self, dialect: Dialect) -> &mut Self {
        self.dialect = dialect;
        self
    }

    /// The unit of annotation offsets.
    pub fn offsets(&mut self, unit: OffsetUnit) -> &mut Self {
        self.offsets = unit;
        self
    }

    /// The number of choices requested (chat `n`): top-level additions go
    /// on the finish chunk of the n-th choice to finish. Values below 1 are
    /// taken as 1.
    pub fn n(&mut self, n: u32) -> &mut Self {
        self.n = n.max(1);
        self
    }

    /// List only the cited sources in `citations` (`document_index` stays
    /// footnote number − 1). Off by default.
    pub fn only_cited(&mut self, on: bool) -> &mut Self {
        self.only_cited = on;
        self
    }

    /// SSE parser limits for streamed responses.
    pub fn sse(&mut self, config: sse::Config) -> &mut Self {
        self.sse = config;
        self
    }

    /// The configured dialect.
    #[must_use]
    pub fn get_dialect(&self) -> Dialect {
        self.dialect
    }

    /// The configured offset unit.
    #[must_use]
    pub fn get_offsets(&self) -> OffsetUnit {
        self.offsets
    }

    /// The configured `n`.
    #[must_use]
    pub fn get_n(&self) -> u32 {
        self.n
    }
}
