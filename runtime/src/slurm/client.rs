//! Typed wrappers over Slurm's commands, with parsable output only.

use super::JobState;
use rustix::process::{Pid, Signal, kill_process};
use skyc_targets::slurm::gres;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A Slurm command that could not run or failed.
#[derive(Debug)]
pub struct SlurmError {
    pub command: String,
    pub message: String,
}

impl fmt::Display for SlurmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.command, self.message)
    }
}

impl std::error::Error for SlurmError {}

/// One hetjob component, from squeue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    /// As squeue shows it: `LEADER+OFFSET`, or the plain id of a one-task job.
    pub id: String,
    /// The component's own job id (addresses its steps: `ID.STEP`).
    pub job_id: String,
    pub state: JobState,
    pub reason: String,
    pub nodes: String,
}

/// A running step, from squeue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// `componentJobId.stepId`, the only form scancel honours for a step.
    pub id: String,
    /// The task name (the batch script names each step after its task).
    pub name: String,
}

/// How long one Slurm command may take before it is killed: the
/// supervisor waits for it, and slurmctld answers in milliseconds when
/// it answers at all.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The cluster: `SLURM_CONF` from the environment, an explicit one, or the
/// one a stored environment names.
#[derive(Clone, Debug, Default)]
pub struct Slurm {
    conf: Option<PathBuf>,
    /// Every command's whole environment, when not this process's.
    env: Option<Vec<(String, String)>>,
}

impl Slurm {
    /// The cluster the usual Slurm environment names.
    pub fn from_env() -> Self {
        Self::default()
    }

    pub fn with_conf(conf: impl Into<PathBuf>) -> Self {
        Self {
            conf: Some(conf.into()),
            env: None,
        }
    }

    /// Commands run with exactly `env` (its `PATH`, its `SLURM_CONF` or
    /// none): the environment of the client that submitted a group, not
    /// the supervisor's.
    pub fn with_env(env: Vec<(String, String)>) -> Self {
        Self {
            conf: None,
            env: Some(env),
        }
    }

    fn run(
        &self,
        program: &str,
        args: &[&str],
        env: &[(&str, &OsStr)],
        cwd: Option<&Path>,
    ) -> Result<String, SlurmError> {
        let command = format!("{program} {}", args.join(" "));
        let error = |message: String| SlurmError {
            command: command.clone(),
            message,
        };
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(base) = &self.env {
            cmd.env_clear();
            cmd.envs(base.iter().map(|(k, v)| (k, v)));
        }
        if let Some(conf) = &self.conf {
            cmd.env("SLURM_CONF", conf);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let child = cmd.spawn().map_err(|e| error(e.to_string()))?;
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        let out = match rx.recv_timeout(COMMAND_TIMEOUT) {
            Ok(out) => out.map_err(|e| error(e.to_string()))?,
            Err(_) => {
                if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
                    let _ = kill_process(pid, Signal::KILL);
                }
                let _ = rx.recv();
                return Err(error(format!(
                    "no answer in {} s (killed)",
                    COMMAND_TIMEOUT.as_secs()
                )));
            }
        };
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return Err(error(if stderr.is_empty() {
                format!("exited with {}", out.status)
            } else {
                stderr
            }));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The cluster's GPU nodes by partition, as sinfo names their GRES:
    /// what a task's GPU type is matched against, in the partition its
    /// job goes to (`skyc_targets::slurm::gres`). `default`: the
    /// client's `SBATCH_PARTITION`, which stands for sinfo's default.
    pub fn gpus(&self, default: Option<&str>) -> Result<gres::ClusterGpus, SlurmError> {
        let out = self.run("sinfo", &["-h", "-N", "-o", "%N|%P|%G"], &[], None)?;
        Ok(gpus_of(&out, default))
    }

    /// Submits `script` (as `skyc build --target slurm` wrote it) from its
    /// directory, with `SKYC_OUT=out_dir`; returns the leader's job id.
    pub fn submit(&self, script: &Path, out_dir: &Path) -> Result<String, SlurmError> {
        self.sbatch(script, out_dir, None, None)
    }

    /// Submits as `skyc run` does, tagging the job with `comment`, by
    /// which [`Self::find`] finds it again.
    pub fn submit_tagged(
        &self,
        script: &Path,
        out_dir: &Path,
        comment: &str,
    ) -> Result<String, SlurmError> {
        self.sbatch(script, out_dir, Some(comment), None)
    }

    /// Submits a pipeline's step as `skyc run` does: tagged with
    /// `comment`, with `SKYC_PIPELINE_JOB=pipeline_job` (step 0's job id;
    /// empty for step 0) and, when `after` is given, chained after that
    /// job (`--dependency=afterok:AFTER`).
    pub fn submit_step(
        &self,
        script: &Path,
        out_dir: &Path,
        comment: &str,
        pipeline_job: &str,
        after: Option<&str>,
    ) -> Result<String, SlurmError> {
        self.sbatch(script, out_dir, Some(comment), Some((pipeline_job, after)))
    }

    fn sbatch(
        &self,
        script: &Path,
        out_dir: &Path,
        comment: Option<&str>,
        step: Option<(&str, Option<&str>)>,
    ) -> Result<String, SlurmError> {
        let dir = script
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let script = script.to_string_lossy();
        let comment = comment.map(|c| format!("--comment={c}"));
        let dependency = step
            .and_then(|(_, after)| after)
            .map(skyc_targets::slurm::StepJob::dependency);
        let mut args = vec!["--parsable"];
        args.extend(comment.as_deref());
        args.extend(dependency.as_deref());
        args.push(&script);
        let mut env = vec![("SKYC_OUT", out_dir.as_os_str())];
        if let Some((pipeline_job, _)) = step {
            env.push((skyc_targets::slurm::PIPELINE_JOB, OsStr::new(pipeline_job)));
        }
        let out = self.run("sbatch", &args, &env, Some(dir))?;
        // `ID` or `ID;CLUSTER` on the last line (site wrappers may talk
        // first).
        let last = out
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        let id = last.trim().split(';').next().unwrap_or("");
        if is_job_id(id) {
            Ok(id.to_owned())
        } else {
            Err(SlurmError {
                command: format!("sbatch {}", args.join(" ")),
                message: format!("printed no job id: {:?}", out.trim()),
            })
        }
    }

    /// The leader id of this user's job tagged `comment`, while slurmctld
    /// remembers it.
    pub fn find(&self, comment: &str) -> Result<Option<String>, SlurmError> {
        let out = self.run(
            "squeue",
            &["--me", "-h", "-t", "all", "-o", "%i|%k"],
            &[],
            None,
        )?;
        Ok(out.lines().find_map(|l| {
            let (id, c) = l.split_once('|')?;
            let id = id.split('+').next().unwrap_or(id);
            (c == comment && is_job_id(id)).then(|| id.to_owned())
        }))
    }

    /// Every component of the job, while slurmctld remembers it
    /// (`MinJobAge` after the end); empty once it has forgotten.
    pub fn components(&self, job: &str) -> Result<Vec<Component>, SlurmError> {
        let out = match self.run(
            "squeue",
            &["-h", "-t", "all", "-j", job, "-o", "%i|%A|%T|%r|%N"],
            &[],
            None,
        ) {
            Ok(out) => out,
            // squeue fails on an id it no longer knows.
            Err(e) if e.message.contains("Invalid job id") => String::new(),
            Err(e) => return Err(e),
        };
        Ok(out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                (f.len() == 5).then(|| Component {
                    id: f[0].to_owned(),
                    job_id: f[1].to_owned(),
                    state: JobState::parse(f[2]),
                    reason: f[3].to_owned(),
                    nodes: f[4].to_owned(),
                })
            })
            .collect())
    }

    /// `scontrol show job -o`: one key/value map per component (`Restarts`,
    /// `ExitCode`, `JobState`, `BatchHost`, `HetJobOffset`...).
    pub fn job_details(&self, job: &str) -> Result<Vec<BTreeMap<String, String>>, SlurmError> {
        let out = self.run("scontrol", &["show", "job", "-o", job], &[], None)?;
        Ok(out
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect()
            })
            .collect())
    }

    /// `sacct` rows (`JobID|JobName|State|ExitCode`) of the job, steps
    /// included; `None` when the cluster keeps no accounting.
    pub fn accounting(&self, job: &str) -> Result<Option<Vec<Vec<String>>>, SlurmError> {
        match self.run(
            "sacct",
            &["-n", "-P", "-j", job, "-o", "JobID,JobName,State,ExitCode"],
            &[],
            None,
        ) {
            Ok(out) => Ok(Some(
                out.lines()
                    .map(|l| l.split('|').map(str::to_owned).collect())
                    .collect(),
            )),
            Err(e) if e.message.contains("accounting storage is disabled") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Cancels the whole job (every component: this is the leader's id).
    pub fn cancel(&self, job: &str) -> Result<(), SlurmError> {
        self.cancel_all(&[job])
    }

    /// Running steps of one job (a pool's worker): `ID.STEP` and name;
    /// none for a job slurmctld does not know (any more).
    pub fn steps(&self, job: &str) -> Result<Vec<Step>, SlurmError> {
        let out = match self.run("squeue", &["-h", "-s", "-j", job, "-o", "%i|%j"], &[], None) {
            Ok(out) => out,
            Err(e) if e.message.contains("Invalid job id") => String::new(),
            Err(e) => return Err(e),
        };
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('|'))
            .map(|(id, name)| Step {
                id: id.to_owned(),
                name: name.to_owned(),
            })
            .collect())
    }

    /// Signals steps (`ID.STEP`) or jobs with `signal` (`TERM`), or
    /// cancels them when `None`.
    pub fn signal(&self, ids: &[&str], signal: Option<&str>) -> Result<(), SlurmError> {
        let flag = signal.map(|s| format!("--signal={s}"));
        let mut args: Vec<&str> = flag.iter().map(String::as_str).collect();
        args.extend_from_slice(ids);
        self.run("scancel", &args, &[], None).map(drop)
    }

    /// Cancels several jobs with one scancel.
    pub fn cancel_all(&self, jobs: &[&str]) -> Result<(), SlurmError> {
        self.run("scancel", jobs, &[], None).map(drop)
    }
}

/// The GPU nodes of sinfo's `%N|%P|%G` lines (one per node and
/// partition; the default partition's name ends in `*`), by partition.
/// `default` (the client's `SBATCH_PARTITION`, one or a comma list)
/// stands for sinfo's default when set.
fn gpus_of(sinfo: &str, default: Option<&str>) -> gres::ClusterGpus {
    let mut seen = std::collections::BTreeSet::new();
    let mut out: gres::ClusterGpus = Vec::new();
    for line in sinfo.lines() {
        let mut f = line.trim().splitn(3, '|');
        let (Some(node), Some(part), Some(g)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let partition = part.trim_end_matches('*');
        let is_default = match default {
            Some(list) => list.split(',').any(|p| p == partition),
            None => part.ends_with('*'),
        };
        if !seen.insert((node.to_owned(), partition.to_owned())) {
            continue;
        }
        let Some((gpu_type, per_node)) = gres::parse_node_gres(g) else {
            continue;
        };
        match out
            .iter_mut()
            .find(|n| n.partition == partition && n.gpu_type == gpu_type && n.per_node == per_node)
        {
            Some(n) => n.nodes += 1,
            None => out.push(gres::GpuNodes {
                partition: partition.to_owned(),
                default: is_default,
                gpu_type,
                per_node,
                nodes: 1,
            }),
        }
    }
    out
}

/// A job id as Slurm prints it: digits only. Anything else never reaches
/// a Slurm command, where a leading `-` would be an option.
pub fn is_job_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_nodes_are_read_by_partition_each_node_once() {
        let sinfo = "n1|main*|gpu:a100:2(S:0)\nn1|main*|gpu:a100:2(S:0)\nn1|urgent|gpu:a100:2\n\
                     n2|main*|gpu:a100:2\nn5|main*|gpu:H100:2\nn9|cpu|(null)\nn7|urgent|gpu:4\n";
        let g = |partition: &str, default, ty: Option<&str>, per_node, nodes| gres::GpuNodes {
            partition: partition.to_owned(),
            default,
            gpu_type: ty.map(str::to_owned),
            per_node,
            nodes,
        };
        assert_eq!(
            gpus_of(sinfo, None),
            [
                g("main", true, Some("a100"), 2, 2),
                g("urgent", false, Some("a100"), 2, 1),
                g("main", true, Some("H100"), 2, 1),
                g("urgent", false, None, 4, 1),
            ]
        );
        // The client's SBATCH_PARTITION is its default.
        let urgent = gpus_of(sinfo, Some("urgent"));
        assert!(
            urgent
                .iter()
                .all(|n| n.default == (n.partition == "urgent"))
        );
    }
}
