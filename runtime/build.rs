//! Builds the node agent (agent/, see agent/src/lib.rs) into the
//! executable the local backend carries and installs (`local::agent`).
//!
//! rustc is called here rather than cargo building the agent as a target:
//! a `no_std` executable needs `panic = "abort"`, and a cargo profile
//! setting it applies to the whole workspace, which then builds every
//! dependency twice (aborting for the binaries, unwinding for the tests).
//! Here it is the agent's alone, as are its link flags: static, not
//! position-independent, no C library.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(var("CARGO_MANIFEST_DIR"));
    let src = manifest.join("../agent/src");
    println!("cargo::rerun-if-changed={}", src.display());
    let out = PathBuf::from(var("OUT_DIR"));
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let common = |crate_type: &str, root: &Path| {
        let mut cmd = Command::new(&rustc);
        cmd.args(["--edition", "2024", "--crate-type", crate_type])
            .args(["--target", &var("TARGET")])
            .args([
                "-C",
                "panic=abort",
                "-C",
                "debuginfo=0",
                "-C",
                "codegen-units=1",
            ])
            .arg("-C")
            .arg(format!("opt-level={}", var("OPT_LEVEL")))
            // The agent's lints are the workspace's, checked where the
            // crate is built as a member; here only errors matter.
            .args(["--cap-lints", "allow"])
            .arg(root);
        if let Some(linker) = env::var_os("RUSTC_LINKER") {
            cmd.arg("-C")
                .arg(format!("linker={}", linker.to_string_lossy()));
        }
        cmd
    };

    let mut lib = common("rlib", &src.join("lib.rs"));
    lib.args(["--crate-name", "skyc_agent", "--out-dir"])
        .arg(&out);
    run(lib);

    let exe = out.join("skyc-agent");
    let mut bin = common("bin", &src.join("executable.rs"));
    bin.args(["--crate-name", "skyc_agent_executable", "--extern"])
        .arg(format!(
            "skyc_agent={}",
            out.join("libskyc_agent.rlib").display()
        ))
        .arg("-o")
        .arg(&exe);
    for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
        bin.arg("-C").arg(format!("link-arg={arg}"));
    }
    if env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("musl") {
        // A static skyc: musl's targets link their own C start-up files
        // and a static-PIE by default; the agent has its own `_start`.
        bin.args([
            "-C",
            "link-self-contained=no",
            "-C",
            "relocation-model=static",
        ]);
    }
    run(bin);

    let image = std::fs::read(&exe).expect("the agent just built");
    println!("cargo::rustc-env=SKYC_AGENT_DIGEST={:016x}", fnv1a(&image));
}

fn var(name: &str) -> String {
    env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}

fn run(mut cmd: Command) {
    let status = cmd.status().expect("rustc runs");
    assert!(status.success(), "building the node agent failed: {cmd:?}");
}

/// 64-bit FNV-1a: names a build of the agent (not a security measure).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
