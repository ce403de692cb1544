//! skyc's language server: the compiler's diagnostics, completion, hover,
//! go to definition and "did you mean" fixes, over LSP 3.17.
//!
//! The server is synchronous: one thread reads and frames messages
//! ([`transport`]), the main thread handles them in order ([`server`]).
//! What it answers is computed by pure modules over a document's text, the
//! compiler's spanned tree and the JSON Schemas: [`lines`] (byte offsets
//! to UTF-16 positions), [`context`] (where the cursor is, from the text),
//! [`schema`], [`outline`] (the file's tasks), then one module per feature.
//! The compiler itself stays free of I/O; this crate owns the protocol.

mod actions;
mod completion;
mod context;
mod definition;
mod diagnostics;
mod document;
mod hover;
mod lines;
mod outline;
mod schema;
mod server;
mod transport;

pub use server::{Exit, serve};
