//! Arbitrary bytes through `skyc_compiler::compile`, then every renderer.
//! Crashes are panics (including failed invariants below) and hangs.
//!
//! Invariants: `Compilation::check_invariants` (spans inside the text on
//! character boundaries, verdict and IR agreeing, every format rendering).

#![no_main]

use libfuzzer_sys::fuzz_target;
use skyc_compiler::{Options, compile};

fuzz_target!(|bytes: &[u8]| {
    let c = compile("fuzz.yaml", bytes, &Options::default());
    if let Err(violation) = c.check_invariants() {
        panic!("{violation}");
    }
});
