//! Typed wrappers over Slurm's commands, with parsable output only.

use super::JobState;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The cluster: `SLURM_CONF` from the environment, or an explicit one.
#[derive(Clone, Debug, Default)]
pub struct Slurm {
    conf: Conf,
}

#[derive(Clone, Debug, Default)]
enum Conf {
    /// This process's `SLURM_CONF`, if any.
    #[default]
    Inherit,
    /// Slurm's built-in default, whatever this process's environment says.
    Builtin,
    File(PathBuf),
}

impl Slurm {
    /// The cluster the usual Slurm environment names.
    pub fn from_env() -> Self {
        Self::default()
    }

    pub fn with_conf(conf: impl Into<PathBuf>) -> Self {
        Self {
            conf: Conf::File(conf.into()),
        }
    }

    /// The cluster of an environment that sets no `SLURM_CONF`.
    pub fn builtin() -> Self {
        Self {
            conf: Conf::Builtin,
        }
    }

    fn run(
        &self,
        program: &str,
        args: &[&str],
        env: &[(&str, &Path)],
        cwd: Option<&Path>,
    ) -> Result<String, SlurmError> {
        self.run_in(program, args, None, env, cwd)
    }

    /// `run`, with exactly `base` as the environment when given.
    fn run_in(
        &self,
        program: &str,
        args: &[&str],
        base: Option<&[(String, String)]>,
        env: &[(&str, &Path)],
        cwd: Option<&Path>,
    ) -> Result<String, SlurmError> {
        let mut cmd = Command::new(program);
        cmd.args(args);
        if let Some(base) = base {
            cmd.env_clear();
            cmd.envs(base.iter().map(|(k, v)| (k, v)));
        }
        match &self.conf {
            Conf::Inherit => {}
            Conf::Builtin => {
                cmd.env_remove("SLURM_CONF");
            }
            Conf::File(conf) => {
                cmd.env("SLURM_CONF", conf);
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let command = format!("{program} {}", args.join(" "));
        let out = cmd.output().map_err(|e| SlurmError {
            command: command.clone(),
            message: e.to_string(),
        })?;
        if !out.status.success() {
            return Err(SlurmError {
                command,
                message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Submits `script` (as `skyc build --target slurm` wrote it) from its
    /// directory, with `SKYC_OUT=out_dir`; returns the leader's job id.
    pub fn submit(&self, script: &Path, out_dir: &Path) -> Result<String, SlurmError> {
        let dir = script
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let script = script.to_string_lossy();
        let out = self.run(
            "sbatch",
            &["--parsable", &script],
            &[("SKYC_OUT", out_dir)],
            Some(dir),
        )?;
        // `ID` or `ID;CLUSTER`.
        Ok(out.trim().split(';').next().unwrap_or("").to_owned())
    }

    /// Submits as `skyc run` does: sbatch runs with exactly `env` (the
    /// submitting client's environment, which it exports to the job) and
    /// tags the job with `comment`, by which [`Self::find`] finds it again.
    pub fn submit_as(
        &self,
        script: &Path,
        out_dir: &Path,
        env: &[(String, String)],
        comment: &str,
    ) -> Result<String, SlurmError> {
        let dir = script
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let comment = format!("--comment={comment}");
        let script = script.to_string_lossy();
        let out = self.run_in(
            "sbatch",
            &["--parsable", &comment, &script],
            Some(env),
            &[("SKYC_OUT", out_dir)],
            Some(dir),
        )?;
        Ok(out.trim().split(';').next().unwrap_or("").to_owned())
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
            (c == comment).then(|| id.split('+').next().unwrap_or(id).to_owned())
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

    /// Running steps of the given components.
    pub fn steps(&self, components: &[Component]) -> Result<Vec<Step>, SlurmError> {
        let ids: Vec<&str> = components.iter().map(|c| c.job_id.as_str()).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let out = self.run(
            "squeue",
            &["-h", "-s", "-j", &ids.join(","), "-o", "%i|%j"],
            &[],
            None,
        )?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('|'))
            .map(|(id, name)| Step {
                id: id.to_owned(),
                name: name.to_owned(),
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
        self.run("scancel", &[job], &[], None).map(drop)
    }
}
