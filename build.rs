//! Links the node agent (`skyc-agent`, see agent/src/lib.rs) as a static,
//! non-position-independent executable with no C library: its entry point
//! and memory functions are its own.

fn main() {
    for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
        println!("cargo::rustc-link-arg-bin=skyc-agent={arg}");
    }
}
