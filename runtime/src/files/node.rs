//! A node's view of its files, made on this machine in the node's own
//! mount namespace (the one its network identity already gives it) just
//! before its command starts: `skyc __node-files VIEW -- COMMAND...`.
//!
//! - A directory snapshot is an overlay: the snapshot, shared read-only by
//!   every node, under a writable layer of the node's own, so a node's
//!   writes change neither the snapshot nor another node's view, and no
//!   byte is copied per node. A single file is copied for the node.
//! - A destination that does not exist is made without writing to the
//!   machine: its deepest existing directory is shadowed by an empty
//!   in-memory filesystem holding a bind of each of its entries (the
//!   machine's `/` included, entered with `pivot_root`), and the missing
//!   directories are made there.
//! - Nothing is mounted in the supervisor's own namespace: the view names
//!   it, and a node still in it is refused.

use crate::storage::mount;
use rustix::fs::{CWD, Mode};
use rustix::mount::{
    MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags, mount,
    mount_bind, mount_change, move_mount, open_tree, unmount,
};
use skyc_targets::files::{Layers, Place, View};
use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The argument that makes skyc's executable this helper.
pub const ARG: &str = "__node-files";

/// The mount namespace this process is in, as the kernel names it.
pub fn namespace() -> String {
    fs::read_link("/proc/self/ns/mnt")
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// The helper: makes the view, then becomes `argv`. Returns only on
/// failure, with the message for the node's log.
pub fn main(args: &[std::ffi::OsString]) -> String {
    let (Some(view), Some(sep)) = (args.first(), args.get(1)) else {
        return "usage: skyc __node-files VIEW -- COMMAND...".into();
    };
    if sep != "--" || args.len() < 3 {
        return "usage: skyc __node-files VIEW -- COMMAND...".into();
    }
    let view: View = match serde_json::from_str(&view.to_string_lossy()) {
        Ok(v) => v,
        Err(e) => return format!("unreadable view: {e}"),
    };
    let buckets = match make(&view) {
        Ok(buckets) => buckets,
        Err(e) => {
            // Where a cluster's step records how the node ended: its setup
            // failed (not a lost node).
            if let Some(record) = std::env::var_os("SKYC_FILES_EXIT") {
                let _ = fs::write(record, "setup 1\n");
            }
            return format!("cannot give this node its files: {e}");
        }
    };
    if buckets.is_empty() {
        let error = std::process::Command::new(&args[2]).args(&args[3..]).exec();
        return format!("cannot run {}: {error}", args[2].to_string_lossy());
    }
    beside(buckets, &args[2], &args[3..])
}

/// Runs the command beside its mounted buckets' clients, and ends them
/// once it has ended (its cached writes uploaded): exits as it exited.
/// A signal to the node's process group reaches the command; this
/// helper outlives it, to end the mounts.
fn beside(
    buckets: Vec<mount::Running>,
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
) -> String {
    let stay = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        if let Err(e) = signal_hook::flag::register(signal, stay.clone()) {
            return format!("cannot keep the node's mounts through a signal: {e}");
        }
    }
    let status = match std::process::Command::new(program)
        .args(args)
        .spawn()
        .and_then(|mut child| wait_reaping(&mut child, &buckets))
    {
        Ok(status) => status,
        Err(error) => {
            for b in buckets {
                b.finish();
            }
            return format!("cannot run {}: {error}", program.to_string_lossy());
        }
    };
    for b in buckets {
        b.finish();
    }
    use std::os::unix::process::ExitStatusExt;
    // As a shell reports it, which is how the agent records a node's end.
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    std::process::exit(code)
}

/// How often the first process of a PID namespace looks for orphans to
/// reap while the command runs.
const REAP_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// Waits for `child`. As the first process of a PID namespace (a Slurm
/// step's), this helper is also the parent of every process the task
/// leaves behind: each one that has ended is reaped meanwhile, so none
/// stays a zombie for the task's life. rclone's processes are
/// [`mount::Running`]'s to wait for, and are left to it.
fn wait_reaping(
    child: &mut std::process::Child,
    buckets: &[mount::Running],
) -> io::Result<std::process::ExitStatus> {
    if !rustix::process::getpid().is_init() {
        return child.wait();
    }
    let ours: HashSet<u32> = buckets
        .iter()
        .filter_map(mount::Running::pid)
        .chain([child.id()])
        .collect();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        for pid in ended_orphans(&ours) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
            }
        }
        std::thread::sleep(REAP_EVERY);
    }
}

/// This process's children that have ended (zombies), but for `ours`:
/// read from `/proc`, which a PID namespace's first process sees as its
/// own (the step mounts it so).
fn ended_orphans(ours: &HashSet<u32>) -> Vec<i32> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| !ours.contains(pid))
        .filter(|pid| {
            // `pid (comm) state ppid ...`: comm may hold anything, so the
            // fields are read after its last `)`.
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let mut rest = stat
                    .rsplit_once(')')
                    .map_or("", |(_, r)| r)
                    .split_whitespace();
                rest.next() == Some("Z") && rest.next() == Some(me.to_string().as_str())
            })
        })
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect()
}

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// Mounts every place of `view` and its buckets, then enters its `cwd`:
/// the buckets' clients, to end when the node does.
pub fn make(view: &View) -> io::Result<Vec<mount::Running>> {
    let host_ns = view
        .host_ns
        .clone()
        .or_else(|| std::env::var("SKYC_HOST_NS").ok())
        .unwrap_or_default();
    if host_ns.is_empty() || namespace() == host_ns {
        return Err(io::Error::other(
            "the node is not in a mount namespace of its own; refusing to mount",
        ));
    }
    let home = view
        .home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/"));
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .map_err(|e| err("making mounts private", e))?;
    let scratch = match &view.layers {
        Layers::Disk(dir) => {
            // One per attempt, shared by its phases: what setup wrote is
            // there for run.
            fs::create_dir_all(dir).map_err(|e| err(dir.display(), e))?;
            dir.clone()
        }
        Layers::Memory(over) => {
            let over = over
                .clone()
                .or_else(|| std::env::var_os("SKYC_FILES_LAYERS").map(PathBuf::from))
                .ok_or_else(|| io::Error::other("no place for the node's layers"))?;
            mount("tmpfs", &over, "tmpfs", MountFlags::empty(), c"mode=700")
                .map_err(|e| err(format!("a memory filesystem over {}", over.display()), e))?;
            over
        }
    };
    let mut places: Vec<(PathBuf, &Place)> = view
        .places
        .iter()
        .map(|p| (expand(&p.destination, &home), p))
        .collect();
    // Outer destinations first: an inner one is made inside the outer.
    places.sort_by_key(|(d, _)| d.components().count());
    let mut ours = Ours::default();
    for (i, (dest, place)) in places.iter().enumerate() {
        let layer = scratch.join(i.to_string());
        fs::create_dir_all(&layer).map_err(|e| err(layer.display(), e))?;
        ours.room(dest, place.dir, &scratch)
            .map_err(|e| err(format!("making {}", dest.display()), e))?;
        if place.shared {
            // A volume: every node's writes are every node's.
            mount_bind(&place.snapshot, dest)
                .map_err(|e| err(format!("mounting {}", dest.display()), e))?;
        } else if place.dir {
            if let Err(e) = overlay(&place.snapshot, &layer, dest) {
                // A filesystem that cannot hold an overlay's upper layer
                // (some network filesystems): the node's own copy, said
                // in its log.
                eprintln!(
                    "skyc: no overlay at {} ({e}): the node gets a copy of its own",
                    dest.display()
                );
                let copy = layer.join("copy");
                // Made by an earlier phase of the attempt: kept, as written.
                let made = copy.exists();
                (if made {
                    Ok(())
                } else {
                    copy_tree(&place.snapshot, &copy)
                })
                .map_err(|c| {
                    err(
                        format!("mounting {}", dest.display()),
                        format!("{e}; copying instead: {c}"),
                    )
                })?;
                mount_bind(&copy, dest)
                    .map_err(|e| err(format!("mounting {}", dest.display()), e))?;
            }
            ours.overlays.push(dest.clone());
        } else {
            let copy = layer.join("file");
            fs::copy(&place.snapshot, &copy).map_err(|e| err(copy.display(), e))?;
            mount_bind(&copy, dest).map_err(|e| err(format!("mounting {}", dest.display()), e))?;
        }
    }
    let mut buckets = Vec::new();
    let mut mounts: Vec<(usize, PathBuf, &skyc_targets::storage::Mounted)> = view
        .buckets
        .iter()
        .enumerate()
        .map(|(i, m)| (i, expand(&m.destination, &home), m))
        .collect();
    // Outer first, as the places: an inner destination is made inside
    // the outer bucket (which takes it), not over it.
    mounts.sort_by_key(|(_, d, _)| d.components().count());
    for (i, dest, m) in mounts {
        let started = ours
            .room(&dest, true, &scratch)
            .and_then(|()| mount::start(m, &dest, &scratch, i, view.host_net.as_deref()));
        match started {
            Ok(running) => {
                // Writable: what is made under it is the bucket's.
                ours.overlays.push(dest);
                buckets.push(running);
            }
            Err(e) => {
                for b in buckets {
                    b.finish();
                }
                return Err(err(format!("mounting {}", dest.display()), e));
            }
        }
    }
    if let Some(cwd) = &view.cwd {
        let cwd = expand(cwd, &home);
        std::env::set_current_dir(&cwd).map_err(|e| err(cwd.display(), e))?;
    }
    Ok(buckets)
}

/// A snapshot tree copied as it is: modes, links.
/// A path as one file name: its bytes in hex.
fn hex(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(from)?;
    if meta.is_dir() {
        fs::create_dir(to)?;
        for entry in fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        fs::set_permissions(to, meta.permissions())
    } else if meta.file_type().is_symlink() {
        std::os::unix::fs::symlink(fs::read_link(from)?, to)
    } else {
        fs::copy(from, to).map(|_| ())
    }
}

/// `~/x`, and a relative `x`, are the node's home's `x`
/// ([`skyc_targets::files::under_home`]).
fn expand(destination: &str, home: &Path) -> PathBuf {
    match skyc_targets::files::under_home(destination) {
        Some("") => home.to_owned(),
        Some(rest) => home.join(rest),
        None => PathBuf::from(destination.trim_end_matches('/')),
    }
}

/// The snapshot under a writable layer of the node's own.
fn overlay(lower: &Path, layer: &Path, at: &Path) -> io::Result<()> {
    let upper = layer.join("upper");
    let work = layer.join("work");
    fs::create_dir_all(&upper)?;
    fs::create_dir_all(&work)?;
    let mut options = String::new();
    for (key, path) in [
        ("lowerdir", lower),
        ("upperdir", &upper),
        ("workdir", &work),
    ] {
        if !options.is_empty() {
            options.push(',');
        }
        options.push_str(key);
        options.push('=');
        // The options separate with `,` and layers with `:`; overlayfs
        // reads both, and a backslash, escaped.
        for c in path.display().to_string().chars() {
            if matches!(c, ',' | ':' | '\\') {
                options.push('\\');
            }
            options.push(c);
        }
    }
    let options = std::ffi::CString::new(options).map_err(io::Error::other)?;
    mount(
        "overlay",
        at,
        "overlay",
        MountFlags::empty(),
        options.as_c_str(),
    )
    .map_err(Into::into)
}

/// The directories this helper made or shadowed: writing in them writes
/// nowhere on the machine.
#[derive(Default)]
struct Ours {
    dirs: HashSet<PathBuf>,
    overlays: Vec<PathBuf>,
}

impl Ours {
    fn writable(&self, dir: &Path) -> bool {
        self.dirs.contains(dir) || self.overlays.iter().any(|o| dir.starts_with(o))
    }

    /// Makes `dest` exist (a directory, or a file), changing nothing of
    /// the machine's.
    fn room(&mut self, dest: &Path, dir: bool, scratch: &Path) -> io::Result<()> {
        if let Ok(meta) = fs::metadata(dest) {
            return match (dir, meta.is_dir()) {
                (true, true) | (false, false) => Ok(()),
                (true, false) => Err(io::Error::other("it exists, and is not a directory")),
                (false, true) => Err(io::Error::other("it exists, and is a directory")),
            };
        }
        let mut missing = Vec::new();
        let mut at = dest.to_owned();
        while fs::metadata(&at).is_err() {
            let name = at
                .file_name()
                .ok_or_else(|| io::Error::other("no parent"))?;
            missing.push(name.to_owned());
            if !at.pop() {
                return Err(io::Error::other("no existing parent"));
            }
        }
        let mut at = fs::canonicalize(&at)?;
        if !fs::metadata(&at)?.is_dir() {
            return Err(io::Error::other(format!(
                "{} is not a directory",
                at.display()
            )));
        }
        if !self.writable(&at) {
            shadow(&at, scratch)?;
            self.dirs.insert(at.clone());
        }
        // What an earlier phase of the attempt made in a cover is there.
        while let Some(name) = missing.pop() {
            at.push(name);
            if missing.is_empty() && !dir {
                fs::File::create(&at)?;
            } else {
                match fs::create_dir(&at) {
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                    _ => {}
                }
                self.dirs.insert(at.clone());
            }
        }
        Ok(())
    }
}

/// One entry of a shadowed directory.
enum Entry {
    Mount(std::ffi::OsString, std::os::fd::OwnedFd, bool),
    Link(std::ffi::OsString, PathBuf),
}

/// Covers `dir` with a directory of the node's own holding a bind of each
/// of its entries (links as links), so directories can be made in it
/// without making them on the machine.
fn shadow(dir: &Path, scratch: &Path) -> io::Result<()> {
    // Cloned before the cover goes on: a clone taken after would see it.
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            entries.push(Entry::Link(name, fs::read_link(&path)?));
        } else {
            let tree = open_tree(
                CWD,
                &path,
                OpenTreeFlags::OPEN_TREE_CLONE
                    | OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | OpenTreeFlags::AT_RECURSIVE,
            )
            .map_err(|e| err(format!("binding {}", path.display()), e))?;
            entries.push(Entry::Mount(name, tree, kind.is_dir()));
        }
    }
    let mode = fs::metadata(dir)?.permissions().mode() & 0o7777;
    let root = dir == Path::new("/");
    // The cover is a directory of the node's layer, so what a phase makes
    // in it (setup's `~/.venv`) is there for the next (run). `/` cannot be
    // covered in place: its cover is made a mount of its own, then
    // entered.
    let cover = scratch.join("covers").join(hex(dir));
    fs::create_dir_all(&cover)?;
    fs::set_permissions(&cover, fs::Permissions::from_mode(mode))?;
    let base = if root { cover.clone() } else { dir.to_owned() };
    mount_bind(&cover, &base).map_err(|e| err(format!("covering {}", dir.display()), e))?;
    let exists = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    };
    for entry in entries {
        match entry {
            Entry::Link(name, target) => {
                exists(std::os::unix::fs::symlink(target, base.join(name)))?;
            }
            Entry::Mount(name, tree, is_dir) => {
                let at = base.join(&name);
                if is_dir {
                    exists(rustix::fs::mkdir(&at, Mode::from_raw_mode(0o755)).map_err(Into::into))?;
                } else {
                    exists(
                        fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .open(&at)
                            .map(drop),
                    )?;
                }
                move_mount(&tree, "", CWD, &at, MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
                    .map_err(|e| err(format!("binding {}", at.display()), e))?;
            }
        }
    }
    if root {
        enter_root(&base)?;
    }
    Ok(())
}

/// Makes `new` the root: `pivot_root`, which keeps nested user
/// namespaces possible for the node (`chroot` would not), else `chroot`.
fn enter_root(new: &Path) -> io::Result<()> {
    let old = new.join(".skyc-old-root");
    fs::create_dir_all(&old)?;
    std::env::set_current_dir(new)?;
    if rustix::process::pivot_root(".", ".skyc-old-root").is_ok() {
        std::env::set_current_dir("/")?;
        let _ = unmount("/.skyc-old-root", UnmountFlags::DETACH);
        let _ = fs::remove_dir("/.skyc-old-root");
    } else {
        let _ = fs::remove_dir(&old);
        rustix::process::chroot(".").map_err(|e| err("entering the node's root", e))?;
        std::env::set_current_dir("/")?;
    }
    Ok(())
}
