//! The `static` provider: always the sources of one file (a JSON array of
//! source objects, docs/reference/request.md, "Sources"), read once at start. For tests and
//! demos; the query is ignored.

use std::path::Path;

use crate::{BoxFuture, FormedQuery, Provider, SearchError, SetupError, Source};

/// The sources of a `[search.static]` file.
#[derive(Debug)]
pub(crate) struct StaticFile {
    sources: Vec<Source>,
}

impl StaticFile {
    /// Reads and parses `path`.
    pub(crate) fn load(path: &Path) -> Result<StaticFile, SetupError> {
        let shown = path.display();
        let bytes = std::fs::read(path).map_err(|e| {
            SetupError::new(format!("search.static.path {shown}: cannot read: {e}"))
        })?;
        let sources: Vec<Source> = serde_json::from_slice(&bytes).map_err(|e| {
            SetupError::new(format!(
                "search.static.path {shown}: not a JSON array of sources: {e}"
            ))
        })?;
        Ok(StaticFile { sources })
    }
}

impl Provider for StaticFile {
    fn name(&self) -> &'static str {
        "static"
    }

    fn search<'a>(
        &'a self,
        _query: &'a FormedQuery,
        _max_results: usize,
    ) -> BoxFuture<'a, Result<Vec<Source>, SearchError>> {
        // All of them: the adapter rules keep the first `max_results` usable ones.
        Box::pin(std::future::ready(Ok(self.sources.clone())))
    }
}
