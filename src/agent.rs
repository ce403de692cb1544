//! `skyc-agent`: the node agent's executable; its code is the crate
//! `skyc-agent` (agent/), which brings its own entry point.
#![no_std]
#![no_main]

use skyc_agent as _;
