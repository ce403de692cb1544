//! Shared helpers for the integration tests.

pub(crate) mod ec2_refusal;
pub(crate) mod leftovers;
pub(crate) mod relay;
pub(crate) mod scratch;

use std::path::{Path, PathBuf};

/// The repository root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `*.yaml` file directly in `dir`, sorted.
pub(crate) fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// Diagnostics rendered for people, without colour.
pub(crate) fn render_human(c: &skyc_compiler::Compilation) -> String {
    skyc_compiler::render::render(
        skyc_compiler::render::Format::Human { color: false },
        std::slice::from_ref(c),
    )
}

/// insta settings writing snapshots under `snapshots/<dir>`.
pub(crate) fn snapshots(dir: &str) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_snapshot_path(root().join("snapshots").join(dir));
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s
}

/// The path of the built `skyc` binary.
pub(crate) fn skyc() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_skyc"))
}

/// The tests' S3 client of the stand-in at `endpoint` (moto takes any
/// credentials; these could sign nothing on AWS).
pub(crate) fn stand_in_s3(endpoint: &str, region: &str) -> skyc_runtime::aws::s3::S3 {
    skyc_runtime::aws::s3::S3::new(
        Some(endpoint),
        region,
        skyc_runtime::aws::ec2::sigv4::Credentials {
            access_key_id: "AKIDSKYCTEST".into(),
            secret_access_key: "skyc-test-secret".into(),
            session_token: None,
        },
        skyc_runtime::aws::ec2::client::Tuning::default(),
    )
    .expect("S3 client")
}
