//! A bucket mounted on the nodes (`mode: MOUNT` or `MOUNT_CACHED`): found
//! at submission (made, for a storage spec with a `name` alone, as
//! SkyPilot makes a Storage's bucket), then mounted on each node, before
//! its command starts, by rclone, in the node's own mount namespace.
//!
//! rclone is what SkyPilot itself mounts with for MOUNT_CACHED (and for
//! MOUNT on ARM), and a Debian package (`rclone`, with `fuse3`): one
//! client for both modes.
//!
//! - MOUNT: no local cache (`--vfs-cache-mode off`), as SkyPilot's MOUNT:
//!   a file is written front to back, and is in the bucket when it is
//!   closed; reads go to the bucket.
//! - MOUNT_CACHED: a local cache (`--vfs-cache-mode full`), writes
//!   uploaded behind; the node does not end before its uploads have, as
//!   SkyPilot's job does not.
//!
//! rclone reads the node's own credentials (S3: its AWS configuration,
//! `env_auth`; GCS: its Application Default Credentials), and the
//! endpoint and region the submission used. Another node's writes show within
//! [`skyc_targets::storage::DIR_CACHE`] of their upload.

use super::client::why;
use super::{Buckets, CopyError, Store};
use skyc_targets::storage::{Mounted, RCLONE_FLUSHED, ToMount, rclone_remote, rclone_settings};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a mount is waited for.
const MOUNT_WAIT: Duration = Duration::from_secs(30);

/// The longest a node's cached writes are waited for at its end.
const UPLOAD_WAIT: Duration = Duration::from_secs(600);

impl Buckets {
    /// Finds the bucket `to` mounts at `destination`: what a node is
    /// given, and whether the bucket is to be made (a `name` alone, not
    /// there yet), which [`Buckets::make`] does once the whole
    /// submission is known good.
    pub fn mount(&mut self, to: &ToMount, destination: &str) -> Result<(Mounted, bool), CopyError> {
        let exists = self.listable(to.store, &to.bucket, &to.path)?;
        let region = self.reach(to.store)?.0.region().unwrap_or_default();
        if !exists && !to.create {
            return Err(CopyError::NoBucket);
        }
        let mounted = Mounted {
            destination: destination.to_owned(),
            store: to.store,
            bucket: to.bucket.clone(),
            path: to.path.clone(),
            cached: to.cached,
            endpoint: self.endpoint(to.store),
            region,
        };
        Ok((mounted, !exists))
    }

    /// Whether `bucket` of `store` is there (and these credentials may
    /// list it).
    pub fn exists(&mut self, store: Store, bucket: &str) -> Result<bool, CopyError> {
        self.listable(store, bucket, "")
    }

    /// Whether `bucket` can be listed under `path`: one key asked for.
    fn listable(&mut self, store: Store, bucket: &str, path: &str) -> Result<bool, CopyError> {
        let (client, rt) = self.reach(store)?;
        let found = rt.block_on(client.first_under(bucket, path)).map_err(why)?;
        Ok(found.is_some())
    }

    /// Makes `bucket` of `store` (one this account has already is made).
    pub fn make(&mut self, store: Store, bucket: &str) -> Result<(), CopyError> {
        let (client, rt) = self.reach(store)?;
        rt.block_on(client.create_bucket(bucket)).map_err(why)
    }
}

/// The FUSE client this machine mounts with: rclone on the `PATH`, and
/// the FUSE device; why not, when one is missing.
pub fn client() -> Result<PathBuf, String> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("rclone"))
            .find(|p| p.is_file())
    });
    let Some(rclone) = found else {
        return Err("rclone is not on the PATH".into());
    };
    if !Path::new("/dev/fuse").exists() {
        return Err("this machine has no /dev/fuse".into());
    }
    Ok(rclone)
}

/// A bucket mounted at a node's destination, served by its rclone.
pub struct Running {
    /// Taken by [`Running::finish`]; a mount dropped unfinished (its
    /// node's view failed after it) is ended on drop.
    child: Option<Child>,
    at: PathBuf,
    log: PathBuf,
    cached: bool,
}

/// Mounts `m` at `at` (an existing directory): rclone started in a
/// process group of its own (so a signal to the node's group does not
/// end it before the node's last write), its log in `scratch`, waited
/// for until `at` is its mount. In `host_net` when this process's
/// network is another (a namespaced node's, which reaches only this
/// machine): the mount is still the node's, its traffic this machine's.
pub fn start(
    m: &Mounted,
    at: &Path,
    scratch: &Path,
    index: usize,
    host_net: Option<&Path>,
) -> io::Result<Running> {
    let rclone = client().map_err(io::Error::other)?;
    let log = scratch.join(format!("rclone-{index}.log"));
    let cache = scratch.join(format!("rclone-cache-{index}"));
    let remote = rclone_remote(m.store, &m.bucket, &m.path);
    let url = format!("{}://{}/{}", m.store.scheme(), m.bucket, m.path);
    let own = fs::read_link("/proc/self/ns/net").ok();
    let mut cmd = match host_net {
        Some(net) if fs::read_link(net).ok() != own => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", net.display()))
                .arg("--")
                .arg(rclone);
            c
        }
        _ => Command::new(rclone),
    };
    cmd.arg("mount")
        .arg(&remote)
        .arg(at)
        .args(["--config", "/dev/null"])
        .arg("--log-file")
        .arg(&log)
        .arg("--cache-dir")
        .arg(&cache)
        .envs(rclone_settings(
            m.store,
            m.cached,
            Some(&m.region),
            m.endpoint.as_deref(),
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // rclone's AWS SDK refuses AWS_CA_BUNDLE with its own transport;
    // the bundle is given as rclone's own flag instead.
    if let Some(bundle) = std::env::var_os("AWS_CA_BUNDLE") {
        cmd.env_remove("AWS_CA_BUNDLE").arg("--ca-cert").arg(bundle);
    }
    // The destination may already be a mount (a cover of the node's
    // view, a filesystem of the machine): rclone mounts over it
    // (`RCLONE_ALLOW_NON_EMPTY`), and its mount is told by a new device
    // of FUSE's type.
    let before = device(at);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| io::Error::other(format!("starting rclone: {e}")))?;
    let start = Instant::now();
    loop {
        if mounted(at, before) && child.try_wait()?.is_none() {
            let running = Running {
                child: Some(child),
                at: at.to_owned(),
                log,
                cached: m.cached,
            };
            // rclone mounts before it asks S3 anything: a listing says
            // now, not at the task's first read, that it cannot (no
            // credentials on the node, access refused).
            if let Err(e) = fs::read_dir(at).and_then(|mut d| d.next().transpose()) {
                let why = last_error(&running.log);
                running.finish();
                return Err(io::Error::other(format!(
                    "rclone mounted {url} but cannot list it ({e}): {why}"
                )));
            }
            return Ok(running);
        }
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "rclone could not mount {url} ({status}): {}",
                last_error(&log)
            )));
        }
        if start.elapsed() > MOUNT_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(format!(
                "rclone did not mount {url} within {} s: {}",
                MOUNT_WAIT.as_secs(),
                last_error(&log)
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Running {
    /// rclone's process, while it is this mount's.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The node has ended: its cached writes are waited for (said in the
    /// node's log while they last), then the bucket is unmounted.
    pub fn finish(mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.cached {
            let start = Instant::now();
            // Only what rclone says from now on: an earlier phase's
            // "nothing left" is not this one's.
            let from = fs::metadata(&self.log).map_or(0, |m| m.len());
            let mut said = false;
            // Uploads are queued a poll after the last close: one poll,
            // then until rclone's cache says nothing is left.
            std::thread::sleep(Duration::from_millis(1500));
            while !flushed(&self.log, from) {
                if start.elapsed() > UPLOAD_WAIT {
                    eprintln!(
                        "skyc: gave up waiting {} s for the writes to {} to reach the bucket: {}",
                        UPLOAD_WAIT.as_secs(),
                        self.at.display(),
                        last_error(&self.log)
                    );
                    break;
                }
                if !said {
                    eprintln!(
                        "skyc: waiting for the writes to {} to reach the bucket",
                        self.at.display()
                    );
                    said = true;
                }
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        stop(&mut child);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop(&mut child);
        }
    }
}

/// Ends rclone (it unmounts), and waits for it.
fn stop(child: &mut Child) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(child),
        rustix::process::Signal::TERM,
    );
    let _ = child.wait();
}

/// FUSE's filesystem type (`statfs`'s `f_type`).
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

fn device(at: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(at).ok().map(|m| m.dev())
}

/// Whether rclone's mount is at `at` now: a FUSE filesystem on another
/// device than `at` was on before it started.
fn mounted(at: &Path, before: Option<u64>) -> bool {
    let fuse = rustix::fs::statfs(at).is_ok_and(|s| s.f_type == FUSE_SUPER_MAGIC);
    fuse && device(at) != before
}

/// Whether rclone's last word on its cache, past byte `from` of its log,
/// is that no file is open and nothing is left to upload (it says so
/// every poll, `--vfs-cache-poll-interval`), as SkyPilot reads it.
fn flushed(log: &Path, from: u64) -> bool {
    use std::io::{Read, Seek};
    let mut text = String::new();
    let read = fs::File::open(log).and_then(|mut f| {
        f.seek(io::SeekFrom::Start(from))?;
        f.read_to_string(&mut text)
    });
    read.is_ok()
        && text
            .lines()
            .rev()
            .find(|l| l.contains("vfs cache: cleaned:"))
            .is_some_and(|l| l.contains(RCLONE_FLUSHED))
}

/// The last error rclone logged, for the node's log.
fn last_error(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .rev()
        .find(|l| l.contains("ERROR") || l.contains("CRITICAL") || l.contains("Failed"))
        .or_else(|| text.lines().last())
        .unwrap_or("no log")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_flushed_when_rclone_last_said_so() {
        let dir = std::env::temp_dir().join(format!("skyc-flushed-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let log = dir.join("rclone.log");
        fs::write(
            &log,
            "INFO  : vfs cache: cleaned: objects 2 (was 2) in use 0, to upload 0, uploading 0\n\
             INFO  : a.bin: vfs cache: queuing for upload in 1s\n\
             INFO  : vfs cache: cleaned: objects 3 (was 3) in use 0, to upload 1, uploading 0\n",
        )
        .unwrap();
        assert!(!flushed(&log, 0));
        fs::write(
            &log,
            "INFO  : vfs cache: cleaned: objects 3 (was 3) in use 0, to upload 1, uploading 0\n\
             INFO  : a.bin: Copied (new)\n\
             INFO  : vfs cache: cleaned: objects 3 (was 3) in use 0, to upload 0, uploading 0\n",
        )
        .unwrap();
        assert!(flushed(&log, 0));
        // Said before `from`: not yet said.
        let len = fs::metadata(&log).unwrap().len();
        assert!(!flushed(&log, len));
        // A file still open is not flushed, whatever the queue says.
        fs::write(
            &log,
            "INFO  : vfs cache: cleaned: objects 3 (was 3) in use 1, to upload 0, uploading 0\n",
        )
        .unwrap();
        assert!(!flushed(&log, 0));
        assert!(!flushed(&dir.join("none.log"), 0));
        let _ = fs::remove_dir_all(&dir);
    }
}
