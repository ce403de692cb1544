//! A snapshot as a tar stream, for nodes that fetch their files instead of
//! seeing the state directory (a Kubernetes cluster's pods).
//!
//! The stream is a function of the snapshot alone: entries in name order,
//! owner 0, time 0, the snapshot's permission bits, links as links. So the
//! SHA-256 a plan records when the group is submitted is the SHA-256 of
//! the bytes sent later, from the same snapshot, however often; a node
//! checks it before it unpacks.

use ring::digest::{Context, SHA256};
use skyc_targets::files::TAR_FILE_ENTRY;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The stream of the snapshot at `path` (a directory, or one file named
/// [`TAR_FILE_ENTRY`] in the stream), written to `out`.
pub fn write(path: &Path, out: impl Write) -> io::Result<()> {
    let mut tar = ::tar::Builder::new(out);
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        tree(&mut tar, path, Path::new(""))?;
    } else {
        entry(&mut tar, path, Path::new(TAR_FILE_ENTRY), &meta)?;
    }
    tar.into_inner()?.flush()
}

/// The stream in memory (a ConfigMap's, which is small).
pub fn bytes(path: &Path) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    write(path, &mut out)?;
    Ok(out)
}

/// What a node checks: the stream's SHA-256 (hex) and size.
pub fn digest(path: &Path) -> io::Result<(String, u64)> {
    hashed(|h| write(path, h))
}

/// The SHA-256 (hex) and size of the file at `path` (its bytes, not a
/// stream of it).
pub fn file_digest(path: &Path) -> io::Result<(String, u64)> {
    hashed(|h| io::copy(&mut std::fs::File::open(path)?, h).map(drop))
}

/// The SHA-256 (hex) and size of what `fill` writes.
fn hashed(fill: impl FnOnce(&mut Hashing) -> io::Result<()>) -> io::Result<(String, u64)> {
    let mut hashing = Hashing {
        context: Context::new(&SHA256),
        bytes: 0,
    };
    fill(&mut hashing)?;
    let hex = hashing
        .context
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((hex, hashing.bytes))
}

/// The SHA-256 (hex) of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    ring::digest::digest(&SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct Hashing {
    context: Context,
    bytes: u64,
}

impl Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.context.update(buf);
        self.bytes += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn tree<W: Write>(tar: &mut ::tar::Builder<W>, dir: &Path, at: &Path) -> io::Result<()> {
    let mut names: Vec<_> = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let meta = fs::symlink_metadata(&path)?;
        let inside = at.join(&name);
        entry(tar, &path, &inside, &meta)?;
        if meta.is_dir() {
            tree(tar, &path, &inside)?;
        }
    }
    Ok(())
}

fn entry<W: Write>(
    tar: &mut ::tar::Builder<W>,
    path: &Path,
    name: &Path,
    meta: &fs::Metadata,
) -> io::Result<()> {
    let mut header = ::tar::Header::new_gnu();
    header.set_mode(meta.permissions().mode() & 0o7777);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    let kind = meta.file_type();
    if kind.is_symlink() {
        header.set_entry_type(::tar::EntryType::Symlink);
        header.set_size(0);
        tar.append_link(&mut header, name, fs::read_link(path)?)
    } else if kind.is_dir() {
        header.set_entry_type(::tar::EntryType::Directory);
        header.set_size(0);
        tar.append_data(&mut header, name, io::empty())
    } else {
        header.set_entry_type(::tar::EntryType::Regular);
        header.set_size(meta.len());
        tar.append_data(&mut header, name, fs::File::open(path)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree_at(root: &Path) {
        fs::create_dir_all(root.join("src/deep")).unwrap();
        fs::write(root.join("train.py"), "print('hi')\n").unwrap();
        fs::write(root.join("src/deep/run.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(
            root.join("src/deep/run.sh"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let long = "n".repeat(150);
        fs::write(root.join("src").join(&long), "long").unwrap();
        symlink("train.py", root.join("link")).unwrap();
    }

    #[test]
    fn the_stream_is_the_snapshots_alone_and_unpacks_to_it() {
        let dir = tempfile_dir("tar-stream");
        let a = dir.join("a");
        tree_at(&a);
        let (sha, size) = digest(&a).unwrap();
        // Another copy, written later: the same stream.
        let b = dir.join("b");
        tree_at(&b);
        assert_eq!(digest(&b).unwrap(), (sha.clone(), size));
        let bytes = bytes(&a).unwrap();
        assert_eq!(sha256(&bytes), sha);
        assert_eq!(bytes.len() as u64, size);
        // `tar` unpacks it as it was.
        let out = dir.join("out");
        fs::create_dir_all(&out).unwrap();
        fs::write(dir.join("s.tar"), &bytes).unwrap();
        let status = std::process::Command::new("tar")
            .arg("-xf")
            .arg(dir.join("s.tar"))
            .arg("-C")
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(
            fs::read_to_string(out.join("train.py")).unwrap(),
            "print('hi')\n"
        );
        assert_eq!(
            fs::metadata(out.join("src/deep/run.sh"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o755
        );
        assert_eq!(
            fs::read_to_string(out.join("src").join("n".repeat(150))).unwrap(),
            "long"
        );
        assert_eq!(
            fs::read_link(out.join("link")).unwrap(),
            Path::new("train.py")
        );
    }

    #[test]
    fn a_file_is_one_entry_of_the_files_name() {
        let dir = tempfile_dir("tar-file");
        fs::write(dir.join("config.yaml"), "a: 1\n").unwrap();
        let bytes = bytes(&dir.join("config.yaml")).unwrap();
        let mut archive = ::tar::Archive::new(bytes.as_slice());
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, [TAR_FILE_ENTRY]);
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("skyc-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
