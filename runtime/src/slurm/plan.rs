//! The plan of a group run on Slurm: what the supervisor needs to submit
//! it and watch it, made by the submitting client and stored with the
//! group.

use super::Slurm;
use crate::policy::{Execution, GroupSpec};
use crate::registry::{LogPlaces, LogQuery};
use serde::{Deserialize, Serialize};
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::Group;
use skyc_targets::slurm;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub group: String,
    pub spec: GroupSpec,
    /// Per task (in `spec` order), its number of nodes.
    pub num_nodes: Vec<u32>,
    /// A group's batch script, as `skyc build --target slurm` writes it;
    /// empty for a pipeline.
    pub script: String,
    /// A pipeline's steps, one batch job each, in order
    /// (`skyc_targets::slurm::pipeline`); empty for a group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<PlannedStep>,
    /// The job's directory: the script, its status file and the node
    /// logs (a pipeline's: one subdirectory per step); compute nodes must
    /// see it at the same path. `None`: the group's directory in the
    /// state directory.
    pub out_dir: Option<PathBuf>,
    /// sbatch's whole environment, which it exports to the job: the
    /// submitting client's, then the tasks' secrets.
    pub env: Vec<(String, String)>,
    /// sbatch's `--comment`: how a job whose id was never recorded (the
    /// supervisor died inside sbatch) is found again. A pipeline's step
    /// `i` carries `<token>-<i>`.
    pub token: String,
}

/// One step of a pipeline: its batch job, and the step whose job must end
/// COMPLETED first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedStep {
    pub name: String,
    pub script: String,
    /// `None` for the first step; a chain today (step `i - 1`).
    pub after: Option<usize>,
}

/// One batch job of a plan, as the supervisor submits it: a group's one
/// job, or a pipeline step's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The batch script's file; sbatch runs in its directory, where Slurm
    /// writes the script's own output (`skyc-<name>-<jobid>.out`).
    pub file: PathBuf,
    pub script: String,
    /// The job's `SKYC_OUT`: its status file, `logs/` and `.skyc/`.
    pub out: PathBuf,
    /// The job's `--comment`.
    pub token: String,
    /// The submission whose job must end COMPLETED first.
    pub after: Option<usize>,
}

impl Plan {
    /// The plan of `group` (`skyc run --target slurm`): its batch script,
    /// or a pipeline's step jobs, built with `options`; sbatch's
    /// environment, this process's with the tasks' `secrets`; and the
    /// run's `token`. `None` with the errors that prevent it; `Err` when
    /// `out_dir` holds another run's output.
    pub fn new(
        group: &Group,
        options: &slurm::Options,
        out_dir: Option<&Path>,
        grace: Duration,
        secrets: &[(String, String)],
        token: String,
    ) -> Result<(Option<Plan>, Vec<Diagnostic>), String> {
        let pipeline = group.execution == skyc_compiler::ir::Execution::Serial;
        let out_dir = match out_dir {
            Some(dir) => {
                let dir =
                    std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                // A pipeline's steps write theirs in a directory each.
                let mut outputs = vec![dir.clone()];
                if pipeline {
                    outputs.extend(group.tasks.iter().map(|t| dir.join(&t.name)));
                }
                if outputs.iter().any(|d| d.join("status").exists()) {
                    return Err(format!(
                        "{} holds the output of another run; choose a new --out-dir",
                        dir.display()
                    ));
                }
                Some(dir)
            }
            None => None,
        };
        // A group is one batch job; a pipeline one per step, chained.
        let (script, steps, mut diagnostics) = if pipeline {
            let built = slurm::pipeline(group, options);
            let steps = built.pipeline.map(|p| {
                p.steps
                    .into_iter()
                    .map(|s| PlannedStep {
                        name: s.name,
                        script: s.script,
                        after: s.after,
                    })
                    .collect()
            });
            (
                steps.as_ref().map(|_| String::new()),
                steps,
                built.diagnostics,
            )
        } else {
            let built = slurm::build(group, options);
            (built.script, Some(Vec::new()), built.diagnostics)
        };
        // The jobs get sbatch's environment: this one, with the secrets.
        let mut env: Vec<(String, String)> = std::env::vars().collect();
        diagnostics.extend(crate::secrets::merge(&mut env, group, secrets));
        let plan = script
            .zip(steps)
            .filter(|_| !diagnostics.iter().any(Diagnostic::is_error))
            .map(|(script, steps)| Plan {
                group: group.name.clone(),
                spec: GroupSpec::from_ir(group, grace),
                num_nodes: group.tasks.iter().map(|t| t.num_nodes).collect(),
                script,
                steps,
                out_dir,
                env,
                token,
            });
        Ok((plan, diagnostics))
    }

    /// The cluster of the submitting client's environment, whose Slurm
    /// commands (its `PATH`, its `SLURM_CONF`) every command uses.
    pub fn cluster(&self) -> Slurm {
        Slurm::with_env(self.env.clone())
    }

    /// A pipeline: one job per step, rather than the group's one job.
    pub fn is_pipeline(&self) -> bool {
        self.spec.execution == Execution::Serial
    }

    /// The job's directory, absolute (it reaches the job as `SKYC_OUT`;
    /// a pipeline's steps get a subdirectory each).
    pub fn out_dir(&self, state: &Path, gid: i64) -> PathBuf {
        let dir = self
            .out_dir
            .clone()
            .unwrap_or_else(|| crate::paths::group_dir(state, gid));
        std::path::absolute(&dir).unwrap_or(dir)
    }

    /// The batch jobs to submit, in order, given the job directory: the
    /// group's `job.sh`; a pipeline's steps as `skyc build --out DIR`
    /// names them (`step-<i>-<name>.sbatch`), each step's output in
    /// `<dir>/<step>` as the submit script of `skyc build` puts it.
    pub fn submissions(&self, out: &Path) -> Vec<Submission> {
        if !self.is_pipeline() {
            return vec![Submission {
                file: out.join("job.sh"),
                script: self.script.clone(),
                out: out.to_owned(),
                token: self.token.clone(),
                after: None,
            }];
        }
        self.steps
            .iter()
            .enumerate()
            .map(|(i, step)| Submission {
                file: out.join(format!("step-{i}-{}.sbatch", step.name)),
                script: step.script.clone(),
                out: out.join(&step.name),
                token: format!("{}-{i}", self.token),
                after: step.after,
            })
            .collect()
    }

    /// The directory of a task's `logs/` (a pipeline's: its step's).
    pub fn task_dir(&self, state: &Path, gid: i64, task: &str) -> PathBuf {
        let out = self.out_dir(state, gid);
        if self.is_pipeline() {
            out.join(task)
        } else {
            out
        }
    }

    /// The batch scripts' own output (srun's errors, a script that could
    /// not start), per job of `jobs` (the group's recorded job ids):
    /// `batch` for a group, `<step> batch` for a pipeline's steps.
    pub fn batch_outputs(&self, state: &Path, gid: i64, jobs: &str) -> Vec<(String, PathBuf)> {
        let out = self.out_dir(state, gid);
        let output = |name: &str, job: &str| out.join(format!("skyc-{name}-{job}.out"));
        if !self.is_pipeline() {
            return vec![("batch".into(), output(&self.group, jobs))];
        }
        self.steps
            .iter()
            .zip(jobs.split(','))
            .map(|(step, job)| (format!("{} batch", step.name), output(&step.name, job)))
            .collect()
    }
}

/// Where a Slurm group's logs are: each task's in the job's directory (a
/// pipeline's: its step's), and the batch scripts' own output once the
/// group has its job ids.
pub fn log_places(q: &LogQuery<'_>) -> Result<LogPlaces, String> {
    let plan: Plan = serde_json::from_str(&q.store.plan(q.group.id).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let gid = q.group.id;
    Ok(LogPlaces {
        task_dirs: q
            .tasks
            .iter()
            .map(|t| plan.task_dir(q.state, gid, t))
            .collect(),
        extra: q
            .group
            .job
            .as_deref()
            .map(|jobs| plan.batch_outputs(q.state, gid, jobs))
            .unwrap_or_default(),
    })
}
