//! YAML: the text as SkyPilot's loader sees it, with spans.

mod node;
mod reader;
mod scalar;

pub use node::{Entry, Node, Value, python_float_repr};
pub use reader::{Budget, Document, Reader};
