//! citestream: the protocol work of an LLM API gateway that offers web-search
//! grounding.
//!
//! (Crate documentation is completed as the modules land.)
#![deny(missing_docs)]
#![warn(missing_debug_implementations, rust_2018_idioms, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc(test(attr(deny(warnings))))]

pub mod chat;
pub mod cite;
pub mod json;
pub mod messages;
mod options;
pub mod quota;
pub mod request;
pub mod sources;
pub mod sse;
#[cfg(feature = "stream")]
pub mod stream;

pub use chat::ChatStream;
pub use cite::{Marker, MarkerTracker, OffsetUnit};
pub use messages::MessagesStream;
pub use options::{MAX_CHOICES, RewriteOptions, Rewriter, StreamRewriter};
pub use request::Endpoint;
pub use sources::{Dialect, Source, Sources, SourcesError};
