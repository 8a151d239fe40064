//! Server-Sent Events: an incremental, zero-copy WHATWG parser and the
//! writer for events citestream synthesizes or modifies.
//!
//! The parser ([`Parser`]) is a sans-IO state machine: feed it
//! [`bytes::Bytes`] pieces exactly as they come off the network, take
//! [`Frame`]s out. Every input byte lands in exactly one frame, so a proxy
//! that forwards the raw bytes of the frames it does not change is lossless
//! by construction. An event that lies within one input piece is handed out
//! as a slice of it, never copied.
//!
//! ```text
//!   input pieces ──► Parser ──► Frame::Event(Event)   dispatched: raw bytes + fields
//!                           ├─► Frame::Skipped(Bytes) comments, blocks without data
//!                           ├─► Frame::Oversized(..)  over the size limit, forwarded as is
//!                           └─► Frame::LineEnd(Bytes) LF completing a split CRLF
//!   end of input ─► Parser::finish() ─► unterminated tail (not dispatched)
//! ```
//!
//! # Example: a tiny proxy loop
//!
//! ```
//! use bytes::Bytes;
//! use citestream::sse::{Frame, Parser};
//!
//! let mut parser = Parser::new();
//! let mut out = Vec::new();
//! for piece in [&b"data: {\"a\""[..], b":1}\n\nda", b"ta: [DONE]\n\n", b"data: cut"] {
//!     parser.feed(Bytes::copy_from_slice(piece));
//!     while let Some(frame) = parser.next_frame() {
//!         if let Frame::Event(e) = &frame {
//!             assert!(e.data() == b"{\"a\":1}" || e.data() == b"[DONE]");
//!         }
//!         out.extend_from_slice(frame.raw());
//!     }
//! }
//! if let Some(tail) = parser.finish() {
//!     out.extend_from_slice(&tail);
//! }
//! assert_eq!(out, b"data: {\"a\":1}\n\ndata: [DONE]\n\ndata: cut");
//! ```

mod fields;
mod frame;
mod gather;
mod line_end;
mod parser;
mod quick;
mod state;
mod writer;

pub use frame::{Event, Frame, FrameKind, FrameRef};
pub use parser::{Config, DEFAULT_MAX_EVENT_SIZE, Parser};
pub use writer::write_event;
