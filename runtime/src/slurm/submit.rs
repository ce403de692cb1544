//! Submitting a plan's batch jobs (a group's one, a pipeline's one per
//! step) so that a supervisor may die at any point and none is submitted
//! twice.
//!
//! The gap around sbatch is closed by a marker the backend commits before
//! the first sbatch ([`SUBMITTING`]) and each job's `--comment` (the
//! plan's token; step `i`'s `<token>-<i>`): a supervisor that finds the
//! marker waits for any sbatch of the job still running, then looks the
//! job up before it would submit it again.

use super::status::What;
use super::watch::job_states;
use super::{JobState, Plan, Slurm, Submission, is_job_id, read_status};
use AdoptError::{Fatal, Retry};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The supervisor's marker (the group's `pending`) while sbatch may have
/// submitted a job whose id is not recorded yet.
pub const SUBMITTING: &str = "slurm-submitting";

/// The file that claims a job directory for one group (its token).
const OWNER: &str = ".skyc-owner";

/// Why a job could not be submitted.
#[derive(Debug)]
pub enum AdoptError {
    /// The group cannot run (sbatch refused it, the directory is taken).
    Fatal(String),
    /// Slurm could not be asked; try again later.
    Retry(String),
}

/// Claims the job directory and writes every batch script into it.
pub(super) fn prepare(plan: &Plan, out: &Path, jobs: &[Submission]) -> Result<(), String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    claim(out, &plan.token, jobs).map_err(|e| match e {
        Fatal(m) | Retry(m) => m,
    })?;
    for job in jobs {
        fs::write(&job.file, &job.script).map_err(|e| format!("{}: {e}", job.file.display()))?;
    }
    Ok(())
}

/// Submits a prepared job; the group is marked [`SUBMITTING`] by then, so
/// that a crash around sbatch is recovered by [`find`], not by a second
/// job. A pipeline's step (`step`: step 0's job id, empty for step 0
/// itself, and the job it waits for) is chained as `skyc build`'s submit
/// script chains it.
pub(super) fn submit(
    slurm: &Slurm,
    job: &Submission,
    step: Option<(&str, Option<&str>)>,
) -> Result<String, AdoptError> {
    let submitted = match step {
        None => slurm.submit_tagged(&job.file, &job.out, &job.token),
        Some((pipeline_job, after)) => {
            slurm.submit_step(&job.file, &job.out, &job.token, pipeline_job, after)
        }
    };
    match submitted {
        Ok(id) => Ok(id),
        // sbatch can fail after slurmctld took the job (a timeout on the
        // answer): only a lookup tells.
        Err(e) => match find(slurm, job) {
            Ok(Some(id)) => Ok(id),
            Ok(None) if is_transient(&e.message) => Err(Retry(e.to_string())),
            Ok(None) => Err(Fatal(e.to_string())),
            Err(lookup) => Err(Retry(format!("{e}; then {lookup}"))),
        },
    }
}

/// Makes `out` this group's: `.skyc-owner` created exclusively with the
/// group's token, or already holding it (a resubmission after a crash).
/// A directory with another run's output (a status file where one of
/// `jobs` would write its own) is refused.
fn claim(out: &Path, token: &str, jobs: &[Submission]) -> Result<(), AdoptError> {
    let owner = out.join(OWNER);
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&owner)
    {
        Ok(mut f) => {
            if jobs.iter().any(|j| j.out.join("status").exists()) {
                let _ = fs::remove_file(&owner);
            } else {
                return f
                    .write_all(token.as_bytes())
                    .map_err(|e| Fatal(format!("{}: {e}", owner.display())));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if fs::read_to_string(&owner).is_ok_and(|t| t == token) {
                return Ok(());
            }
        }
        Err(e) => return Err(Fatal(format!("{}: {e}", owner.display()))),
    }
    Err(Fatal(format!(
        "{} holds the output of another run; choose a new directory",
        out.display()
    )))
}

/// sbatch errors after which the job may yet be submitted: slurmctld
/// could not be reached, or did not answer in time.
fn is_transient(message: &str) -> bool {
    [
        "Unable to contact",
        "timed out",
        "Socket",
        "temporarily",
        "Connection refused",
        "Zero Bytes",
        "no answer in",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// The job a supervisor submitted before it died: in the queue by its
/// comment, or named by its status file once Slurm has forgotten it.
pub(super) fn find(slurm: &Slurm, job: &Submission) -> Result<Option<String>, String> {
    if let Some(id) = slurm.find(&job.token).map_err(|e| e.to_string())? {
        return Ok(Some(id));
    }
    Ok(read_status(&job.out)
        .into_iter()
        .find_map(|l| match l.what {
            What::JobStart { leader } if is_job_id(&leader) => Some(leader),
            _ => None,
        }))
}

/// Whether an sbatch carrying the job's token still runs (the dead
/// supervisor's child, which outlives it).
pub(super) fn sbatch_running(token: &str) -> bool {
    let needle = format!("--comment={token}");
    let Ok(entries) = fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == needle.as_bytes()))
    })
}

/// Where the step before a pipeline step stands, when the step is
/// submitted late (after a crash, or after sbatch failed for a while).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Before {
    /// Slurm knows its job and it may yet complete: chain after it.
    Waiting,
    /// Its job completed, or its status file says it SUCCEEDED and Slurm
    /// has forgotten it: submit without a dependency.
    Succeeded,
    /// It ended otherwise: the step never runs.
    Ended,
}

/// Where the job `id` of the step before stands. Slurm 22.05 takes
/// `afterok` on a job it no longer knows as satisfied, so a step
/// submitted late cannot leave that check to Slurm.
pub(super) fn before(slurm: &Slurm, id: &str, job: &Submission) -> Result<Before, String> {
    let states = job_states(slurm, id).map_err(|e| e.to_string())?;
    Ok(if states.is_empty() {
        let succeeded = read_status(&job.out)
            .iter()
            .rev()
            .find_map(|l| match &l.what {
                What::Group(status) => Some(status == "SUCCEEDED"),
                _ => None,
            })
            .unwrap_or(false);
        if succeeded {
            Before::Succeeded
        } else {
            Before::Ended
        }
    } else if states.iter().all(|s| *s == JobState::Completed) {
        Before::Succeeded
    } else if states.iter().all(JobState::is_terminal) && !states.iter().any(JobState::is_lost) {
        Before::Ended
    } else {
        // Queued, running, or lost to a node and about to be requeued.
        Before::Waiting
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn job(out: PathBuf) -> Submission {
        Submission {
            file: out.join("job.sh"),
            script: String::new(),
            out,
            token: "one".into(),
            after: None,
        }
    }

    #[test]
    fn a_job_directory_belongs_to_one_group() {
        let dir = std::env::temp_dir().join(format!("skyc-claim-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let jobs = [job(dir.clone())];
        assert!(claim(&dir, "one", &jobs).is_ok());
        assert!(claim(&dir, "one", &jobs).is_ok(), "the same group again");
        assert!(matches!(claim(&dir, "two", &jobs), Err(Fatal(_))));
        let other = dir.join("sub");
        fs::create_dir_all(&other).unwrap();
        fs::write(other.join("status"), "1 r0 group SUCCEEDED\n").unwrap();
        assert!(matches!(
            claim(&other, "one", &[job(other.clone())]),
            Err(Fatal(_))
        ));
        assert!(!other.join(OWNER).exists());
        // A pipeline's directory with a step's output of another run.
        let pipeline = dir.join("pipeline");
        fs::create_dir_all(pipeline.join("train")).unwrap();
        fs::write(pipeline.join("train/status"), "1 r0 group FAILED\n").unwrap();
        let steps = [job(pipeline.join("prep")), job(pipeline.join("train"))];
        assert!(matches!(claim(&pipeline, "one", &steps), Err(Fatal(_))));
        assert!(!pipeline.join(OWNER).exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
