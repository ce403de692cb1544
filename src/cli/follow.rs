//! Following a group's node logs, each line prefixed `(task-rank)`.

use skyc_runtime::local::paths;
use skyc_runtime::slurm::Plan as SlurmPlan;
use skyc_runtime::store::{Backend, Store};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

pub(crate) struct Follower {
    logs: Vec<Log>,
}

struct Log {
    prefix: String,
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl Follower {
    /// The logs of a group's nodes, or of one task's (`task`) or one
    /// node's (`task-rank`).
    pub(crate) fn new(
        store: &Store,
        state: &std::path::Path,
        gid: i64,
        only: Option<&str>,
    ) -> Result<Self, String> {
        let tasks = store.tasks(gid).map_err(|e| e.to_string())?;
        let group = store
            .group(gid)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no group {gid}"))?;
        let mut logs = Vec::new();
        let dir = match group.backend {
            Backend::Local => paths::group_dir(state, gid),
            Backend::Slurm => {
                let plan: SlurmPlan =
                    serde_json::from_str(&store.plan(gid).map_err(|e| e.to_string())?)
                        .map_err(|e| e.to_string())?;
                let dir = plan.out_dir(state, gid);
                // The batch script's own output: where it says why it
                // could not run the group.
                if let (None, Some(job)) = (only, &group.job) {
                    logs.push(Log {
                        prefix: "(batch) ".to_owned(),
                        path: dir.join(format!("skyc-{}-{job}.out", group.name)),
                        offset: 0,
                        partial: Vec::new(),
                    });
                }
                dir
            }
        };
        for task in &tasks {
            let nodes = u32::try_from(task.num_nodes).unwrap_or(1);
            for rank in 0..nodes {
                let prefix = format!("{}-{rank}", task.name);
                if only.is_some_and(|o| o != task.name && o != prefix) {
                    continue;
                }
                logs.push(Log {
                    prefix: format!("({prefix}) "),
                    path: paths::log(&dir, &task.name, rank),
                    offset: 0,
                    partial: Vec::new(),
                });
            }
        }
        if logs.is_empty() {
            let names: Vec<_> = tasks.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "group {gid} has no task or node `{}`; its tasks are: {}",
                only.unwrap_or_default(),
                names.join(", ")
            ));
        }
        Ok(Self { logs })
    }

    /// Writes the complete lines written since the last call.
    pub(crate) fn poll(&mut self, out: &mut impl Write) -> io::Result<()> {
        for log in &mut self.logs {
            let Ok(mut file) = File::open(&log.path) else {
                continue;
            };
            file.seek(SeekFrom::Start(log.offset))?;
            let mut buf = Vec::new();
            file.read_to_end(&mut buf)?;
            log.offset += buf.len() as u64;
            log.partial.extend_from_slice(&buf);
            while let Some(nl) = log.partial.iter().position(|&b| b == b'\n') {
                out.write_all(log.prefix.as_bytes())?;
                out.write_all(&log.partial[..=nl])?;
                log.partial.drain(..=nl);
            }
        }
        out.flush()
    }

    /// Writes what is left, unfinished lines included.
    pub(crate) fn finish(&mut self, out: &mut impl Write) -> io::Result<()> {
        self.poll(out)?;
        for log in &mut self.logs {
            if !log.partial.is_empty() {
                out.write_all(log.prefix.as_bytes())?;
                out.write_all(&log.partial)?;
                out.write_all(b"\n")?;
                log.partial.clear();
            }
        }
        out.flush()
    }
}
