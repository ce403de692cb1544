//! `skyc-agent`: the node agent's executable. Its code is this crate's
//! library, which brings its own entry point. Built by the runtime's build
//! script (runtime/build.rs), not by cargo as a target: a `no_std`
//! executable needs `panic = "abort"`, which a cargo profile would impose
//! on every crate of the workspace.
#![no_std]
#![no_main]

use skyc_agent as _;
