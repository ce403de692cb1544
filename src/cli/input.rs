//! Reading input files (or standard input), bounded in size.

use skyc_compiler::MAX_FILE_BYTES;
use std::io::Read;

/// Reads `path` (`-` for standard input) as bytes. Reads at most one byte
/// past the compiler's limit, so the compiler reports "too large" without
/// skyc holding a huge file in memory.
pub(crate) fn read(path: &str) -> Result<(String, Vec<u8>), String> {
    let limit = u64::try_from(MAX_FILE_BYTES).unwrap_or(u64::MAX) + 1;
    let mut bytes = Vec::new();
    if path == "-" {
        std::io::stdin()
            .lock()
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        return Ok(("<stdin>".to_owned(), bytes));
    }
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read `{path}`: {}", describe(&e)))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(format!("cannot read `{path}`: it is a directory"));
    }
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read `{path}`: {}", describe(&e)))?;
    Ok((path.to_owned(), bytes))
}

/// Reads and compiles the file of `run` and `pool apply`, `--env` values
/// given: its name as diagnostics show it, and the compilation.
pub(crate) fn compile(
    path: &str,
    env: &[(String, String)],
) -> Result<(String, skyc_compiler::Compilation), String> {
    let (name, bytes) = read(path)?;
    let options = skyc_compiler::Options { env: env.to_vec() };
    let compilation = skyc_compiler::compile(&name, &bytes, &options);
    Ok((name, compilation))
}

fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        std::io::ErrorKind::IsADirectory => "it is a directory".to_owned(),
        _ => e.to_string(),
    }
}
