//! One source (a `workdir`, or a local `file_mounts` source) read as
//! SkyPilot's rsync reads it: a directory's tree with what its ignore files
//! exclude left out, symbolic links kept as links, regular files with their
//! bytes and permission bits. Reading digests what it reads and, when given
//! a place, writes the tree there in the same pass, so the digest is always
//! the digest of the bytes kept, whatever the source does meanwhile.

use ring::digest::{Context, SHA256};
pub use skyc_targets::files::Taken;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Why a source could not be read. `path` is the file at fault.
#[derive(Debug)]
pub enum SourceError {
    Missing,
    NotADirectory,
    Unreadable { path: PathBuf, error: io::Error },
    Special { path: PathBuf, kind: &'static str },
    LinkLeaves { path: PathBuf, target: PathBuf },
    TooLarge { bytes: u64, limit: u64 },
}

/// Bytes a submission may read, across its sources, and progress.
pub struct Budget<'a> {
    pub limit: u64,
    pub files: u64,
    pub bytes: u64,
    pub progress: &'a mut dyn FnMut(u64, u64),
}

impl Budget<'_> {
    fn add(&mut self, bytes: u64) -> Result<(), SourceError> {
        self.bytes += bytes;
        if self.bytes > self.limit {
            return Err(SourceError::TooLarge {
                bytes: self.bytes,
                limit: self.limit,
            });
        }
        Ok(())
    }
}

/// Reads `root` (absolute), a directory when `dir` is asked for, into
/// `into` (a new path: a directory, or a file for a file source) when given.
pub fn read(
    root: &Path,
    want_dir: bool,
    into: Option<&Path>,
    budget: &mut Budget<'_>,
) -> Result<Taken, SourceError> {
    read_tree(root, want_dir, into, budget, Filters::IgnoreFiles)
}

/// Which files of a tree are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Filters {
    /// What its ignore files leave, as SkyPilot's rsync reads a source.
    IgnoreFiles,
    /// Every file (a bucket's objects, copied whole).
    All,
    /// What its ignore files leave, without the `.git` directory at its
    /// top and without links: what SkyPilot's `aws s3 sync
    /// --no-follow-symlinks` uploads of a storage spec's source.
    Storage,
}

/// [`read`], with `filters`.
pub fn read_tree(
    root: &Path,
    want_dir: bool,
    into: Option<&Path>,
    budget: &mut Budget<'_>,
    filters: Filters,
) -> Result<Taken, SourceError> {
    // The source itself is followed when it is a link (rsync is given
    // `src/`); links under it are kept as links.
    let meta = match fs::metadata(root) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(SourceError::Missing),
        Err(error) => {
            return Err(SourceError::Unreadable {
                path: root.to_owned(),
                error,
            });
        }
    };
    let unreadable = |path: &Path| {
        let path = path.to_owned();
        move |error| SourceError::Unreadable { path, error }
    };
    if meta.is_file() {
        if want_dir {
            return Err(SourceError::NotADirectory);
        }
        let mut tree = Tree::new();
        let mode = meta.permissions().mode() & 0o7777;
        let (size, hex) = copy(root, into, mode, budget)?;
        tree.line(format_args!("f {mode:o} {size} {hex}"), Path::new(""));
        return Ok(Taken {
            digest: tree.finish(),
            dir: false,
            files: 1,
            bytes: size,
        });
    }
    if !meta.is_dir() {
        return Err(if want_dir {
            SourceError::NotADirectory
        } else {
            SourceError::Special {
                path: root.to_owned(),
                kind: kind_of(&meta.file_type()),
            }
        });
    }
    let root = fs::canonicalize(root).map_err(unreadable(root))?;
    let mut walk = ignore::WalkBuilder::new(&root);
    walk.standard_filters(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b));
    // As SkyPilot's rsync filters: a `.skyignore` at the root means every
    // directory's `.skyignore`; else every `.gitignore`, and git's own
    // exclude file.
    if filters == Filters::Storage {
        let git = root.join(".git");
        walk.filter_entry(move |e| e.path() != git);
    }
    match filters {
        Filters::All => {}
        Filters::IgnoreFiles | Filters::Storage if root.join(".skyignore").exists() => {
            walk.add_custom_ignore_filename(".skyignore");
        }
        Filters::IgnoreFiles | Filters::Storage => {
            walk.add_custom_ignore_filename(".gitignore");
            let exclude = root.join(".git/info/exclude");
            if exclude.is_file() {
                // Its patterns are anchored at the root, as rsync's
                // `--exclude-from` reads them.
                walk.current_dir(&root);
                if let Some(error) = walk.add_ignore(&exclude) {
                    return Err(SourceError::Unreadable {
                        path: exclude,
                        error: error
                            .into_io_error()
                            .unwrap_or_else(|| io::Error::other("unreadable")),
                    });
                }
            }
        }
    }
    if let Some(into) = into {
        fs::create_dir(into).map_err(unreadable(into))?;
    }
    let mut tree = Tree::new();
    let mut files = 0;
    let mut bytes = 0;
    let mut dirs: Vec<(PathBuf, u32)> = Vec::new();
    for entry in walk.build() {
        let entry = entry.map_err(|e| {
            let path = match &e {
                ignore::Error::WithPath { path, .. } => path.clone(),
                _ => root.clone(),
            };
            SourceError::Unreadable {
                path,
                error: e
                    .into_io_error()
                    .unwrap_or_else(|| io::Error::other("unreadable")),
            }
        })?;
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(&root) else {
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let meta = fs::symlink_metadata(path).map_err(unreadable(path))?;
        let kind = meta.file_type();
        let mode = meta.permissions().mode() & 0o7777;
        let dest = into.map(|d| d.join(rel));
        if kind.is_dir() {
            tree.line(format_args!("d {mode:o}"), rel);
            if let Some(dest) = &dest {
                // Writable while filled; its own mode once it is.
                fs::create_dir(dest).map_err(unreadable(dest))?;
                dirs.push((dest.clone(), mode));
            }
        } else if kind.is_file() {
            let (size, hex) = copy(path, dest.as_deref(), mode, budget)?;
            tree.line(format_args!("f {mode:o} {size} {hex}"), rel);
            files += 1;
            bytes += size;
        } else if kind.is_symlink() && filters == Filters::Storage {
            continue;
        } else if kind.is_symlink() {
            let target = fs::read_link(path).map_err(unreadable(path))?;
            // Where the kernel resolves it, through the tree's other
            // links, when it resolves; else (a link to nothing yet) where
            // its text points. An absolute one names this machine's path.
            let out = target.is_absolute()
                || match fs::canonicalize(path) {
                    Ok(resolved) => !resolved.starts_with(&root),
                    Err(_) => leaves(rel, &target),
                };
            if out {
                return Err(SourceError::LinkLeaves {
                    path: path.to_owned(),
                    target,
                });
            }
            tree.line(format_args!("l {}", target.display()), rel);
            if let Some(dest) = &dest {
                std::os::unix::fs::symlink(&target, dest).map_err(unreadable(dest))?;
            }
        } else {
            return Err(SourceError::Special {
                path: path.to_owned(),
                kind: kind_of(&kind),
            });
        }
    }
    for (dir, mode) in dirs.iter().rev() {
        fs::set_permissions(dir, fs::Permissions::from_mode(*mode)).map_err(unreadable(dir))?;
    }
    Ok(Taken {
        digest: tree.finish(),
        dir: true,
        files,
        bytes,
    })
}

/// Reads one regular file (digesting it, and writing it to `into` when
/// given): its size and digest.
fn copy(
    path: &Path,
    into: Option<&Path>,
    mode: u32,
    budget: &mut Budget<'_>,
) -> Result<(u64, String), SourceError> {
    let unreadable = |error| SourceError::Unreadable {
        path: path.to_owned(),
        error,
    };
    let mut file = File::open(path).map_err(unreadable)?;
    let mut out = match into {
        Some(dest) => Some(
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(dest)
                .map_err(|error| SourceError::Unreadable {
                    path: dest.to_owned(),
                    error,
                })?,
        ),
        None => None,
    };
    let mut hash = Context::new(&SHA256);
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(unreadable(e)),
        };
        hash.update(&buf[..n]);
        if let Some(out) = &mut out {
            out.write_all(&buf[..n])
                .map_err(|error| SourceError::Unreadable {
                    path: into.unwrap_or(path).to_owned(),
                    error,
                })?;
        }
        size += n as u64;
        budget.add(n as u64)?;
    }
    budget.files += 1;
    (budget.progress)(budget.files, budget.bytes);
    if let (Some(out), Some(dest)) = (&out, into) {
        out.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|error| SourceError::Unreadable {
                path: dest.to_owned(),
                error,
            })?;
    }
    Ok((size, hex(hash.finish().as_ref())))
}

/// Whether a link at `rel` (relative to the root) to `target` resolves
/// outside the tree: absolute targets always do (on a node the tree is
/// elsewhere), relative ones when their `..` climb above the root.
fn leaves(rel: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return true;
    }
    let mut depth: i64 = rel.components().count() as i64 - 1;
    for part in target.components() {
        match part {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return true,
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

fn kind_of(kind: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_socket() {
        "a socket"
    } else if kind.is_fifo() {
        "a named pipe"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "neither a file, a directory nor a link"
    }
}

/// The canonical listing a tree's digest is taken over: one line per
/// entry, in the walk's (sorted) order.
struct Tree(Context);

impl Tree {
    fn new() -> Self {
        Self(Context::new(&SHA256))
    }

    fn line(&mut self, what: std::fmt::Arguments<'_>, rel: &Path) {
        use std::os::unix::ffi::OsStrExt;
        self.0.update(what.to_string().as_bytes());
        self.0.update(b"\0");
        self.0.update(rel.as_os_str().as_bytes());
        self.0.update(b"\0");
    }

    fn finish(self) -> String {
        hex(self.0.finish().as_ref())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("skyc-source-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).expect("mkdir");
            Self(dir)
        }

        fn file(&self, rel: &str, text: &str) {
            let path = self.0.join(rel);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(path, text).expect("write");
        }

        /// What a snapshot of it holds: relative paths, sorted.
        fn taken(&self) -> (Taken, Vec<String>) {
            let into = self.0.with_extension("snap");
            let _ = fs::remove_dir_all(&into);
            let mut progress = |_, _| {};
            let mut budget = Budget {
                limit: u64::MAX,
                files: 0,
                bytes: 0,
                progress: &mut progress,
            };
            let taken = read(&self.0, true, Some(&into), &mut budget).expect("read");
            let mut names = Vec::new();
            let mut stack = vec![into.clone()];
            while let Some(d) = stack.pop() {
                for e in fs::read_dir(&d).expect("dir").flatten() {
                    let rel = e
                        .path()
                        .strip_prefix(&into)
                        .expect("rel")
                        .display()
                        .to_string();
                    if e.file_type().expect("type").is_dir() {
                        stack.push(e.path());
                        names.push(format!("{rel}/"));
                    } else {
                        names.push(rel);
                    }
                }
            }
            names.sort();
            let _ = fs::remove_dir_all(&into);
            (taken, names)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn gitignores_apply_per_directory_with_gits_exclude_file() {
        let d = Dir::new("git");
        d.file(".gitignore", "*.log\n/build/\n");
        d.file("a.py", "a");
        d.file("x.log", "no");
        d.file("build/out", "no");
        d.file("sub/build/kept", "yes: `/build/` is the root's only");
        d.file("sub/.gitignore", "secret.txt\n");
        d.file("sub/secret.txt", "no");
        d.file("secret.txt", "yes: the rule is sub's");
        d.file(".git/info/exclude", "local.env\n/anchored.txt\n");
        d.file("local.env", "no");
        d.file(
            "anchored.txt",
            "no: anchored at the root, wherever skyc runs",
        );
        let (taken, names) = d.taken();
        assert_eq!(
            names,
            [
                ".git/",
                ".git/info/",
                ".git/info/exclude",
                ".gitignore",
                "a.py",
                "secret.txt",
                "sub/",
                "sub/.gitignore",
                "sub/build/",
                "sub/build/kept",
            ]
        );
        assert_eq!(taken.files, 6);
    }

    #[test]
    fn a_skyignore_replaces_the_gitignores() {
        let d = Dir::new("sky");
        d.file(".skyignore", "data/\n");
        d.file(".gitignore", "*.py\n");
        d.file("a.py", "kept: .gitignore is not read");
        d.file("data/big", "no");
        let (_, names) = d.taken();
        assert_eq!(names, [".gitignore", ".skyignore", "a.py"]);
    }

    #[test]
    fn the_digest_is_of_names_modes_and_bytes() {
        let d = Dir::new("digest");
        d.file("a", "1");
        let (first, _) = d.taken();
        assert_eq!(d.taken().0, first, "the same tree, the same digest");
        d.file("a", "2");
        let (bytes, _) = d.taken();
        assert_ne!(bytes.digest, first.digest);
        fs::set_permissions(d.0.join("a"), fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_ne!(d.taken().0.digest, bytes.digest, "the mode counts");
        fs::rename(d.0.join("a"), d.0.join("b")).expect("mv");
        assert_ne!(d.taken().0.digest, bytes.digest, "the name counts");
    }

    #[test]
    fn links_that_leave_the_tree() {
        let l = |rel: &str, target: &str| leaves(Path::new(rel), Path::new(target));
        assert!(!l("a", "b"));
        assert!(!l("d/a", "../b"));
        assert!(l("a", "../b"));
        assert!(l("d/a", "../../b"));
        assert!(!l("d/e/a", "../../x/../b"));
        assert!(l("a", "/etc/passwd"));
        assert!(l("d/a", "x/../../../b"));
    }

    #[test]
    fn links_are_followed_as_the_kernel_follows_them() {
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("skyc-links-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let tree = root.join("tree");
        fs::create_dir_all(tree.join("sub/deep")).unwrap();
        fs::write(root.join("secret"), "outside").unwrap();
        fs::create_dir_all(tree.join("ydir")).unwrap();
        fs::write(tree.join("y"), "inside").unwrap();
        // `sub/b` is `ydir`; `sub/b/..` is then the tree, and
        // `sub/b/../..` its parent, though the text stays inside.
        symlink("../ydir", tree.join("sub/b")).unwrap();
        symlink("sub/b/../../secret", tree.join("a")).unwrap();
        let read = read_tree(&tree);
        assert!(
            matches!(&read, Err(SourceError::LinkLeaves { path, .. }) if path.ends_with("a")),
            "{read:?}"
        );
        // And one whose text leaves but which the kernel keeps inside is
        // kept: `sub/c` is `sub/deep/deeper`, so `sub/c/../../../y` is
        // `y`, though its text climbs above the tree.
        fs::remove_file(tree.join("a")).unwrap();
        fs::create_dir_all(tree.join("sub/deep/deeper")).unwrap();
        symlink("deep/deeper", tree.join("sub/c")).unwrap();
        symlink("sub/c/../../../y", tree.join("z")).unwrap();
        assert!(leaves(Path::new("z"), Path::new("sub/c/../../../y")));
        assert!(read_tree(&tree).is_ok());
        let _ = fs::remove_dir_all(&root);
    }

    fn read_tree(tree: &Path) -> Result<Taken, SourceError> {
        let mut quiet = |_, _| {};
        let mut budget = Budget {
            limit: 1 << 20,
            files: 0,
            bytes: 0,
            progress: &mut quiet,
        };
        read(tree, true, None, &mut budget)
    }
}
