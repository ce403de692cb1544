//! SkyPilot's configuration where skyc reads it: `jobs.controller` of
//! `~/.sky/config.yaml` (`$SKYPILOT_CONFIG`), its resources and autostop.
//! A user who configured SkyPilot's jobs controller has asked for one:
//! `skyc run --state-dir aws://REGION` makes skyc's when none is there,
//! shaped by the same keys (docs/controller.md, "Started by the first
//! run").

use skyc_compiler::Diagnostic;
use skyc_compiler::yaml::{Budget, Node, Reader};
use skyc_targets::cloud::controller::Controller;
use std::path::PathBuf;

/// SkyPilot's `jobs.controller`, as skyc's controller on AWS takes it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct JobsController {
    /// The file it was read from, for messages.
    pub(crate) file: String,
    pub(crate) controller: Controller,
    /// What of it skyc does not take, a line each.
    pub(crate) notes: Vec<String>,
}

/// The configuration file: `$SKYPILOT_CONFIG`, else `~/.sky/config.yaml`.
fn path() -> Option<PathBuf> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    var("SKYPILOT_CONFIG")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".sky/config.yaml")))
}

/// The configured jobs controller; `None` when no file or no
/// `jobs.controller` section is there.
pub(crate) fn jobs_controller() -> Result<Option<JobsController>, String> {
    let Some(path) = path() else {
        return Ok(None);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    read(&text, &path.display().to_string())
}

/// [`jobs_controller`] of the text of `file`.
pub(crate) fn read(text: &str, file: &str) -> Result<Option<JobsController>, String> {
    let mut diagnostics = skyc_compiler::Diagnostics::default();
    let documents = Reader::read(text, Budget::default(), &mut diagnostics);
    if diagnostics.has_errors() {
        let first = diagnostics
            .into_sorted()
            .into_iter()
            .find(Diagnostic::is_error)
            .map(|d| d.message)
            .unwrap_or_default();
        return Err(format!("{file}: not YAML: {first}"));
    }
    let Some(section) = documents
        .first()
        .and_then(|d| d.root.get("jobs"))
        .and_then(|j| j.get("controller"))
        .filter(|c| !c.is_null())
    else {
        return Ok(None);
    };
    let bad = |key: &str, what: &str| format!("{file}: jobs.controller.{key}: {what}");
    let mut controller = Controller::default();
    let mut notes = Vec::new();
    if let Some(resources) = section.get("resources").filter(|r| !r.is_null()) {
        let text = |key: &str| -> Result<Option<String>, String> {
            match resources.get(key).filter(|v| !v.is_null()) {
                None => Ok(None),
                Some(v) => v
                    .python_str()
                    .map(Some)
                    .ok_or_else(|| bad(&format!("resources.{key}"), "not a string")),
            }
        };
        let cloud = match text("infra")? {
            Some(infra) => {
                let mut parts = infra.split('/');
                let cloud = parts.next().unwrap_or_default().to_ascii_lowercase();
                controller.region = parts.next().filter(|r| !r.is_empty()).map(str::to_owned);
                Some(cloud)
            }
            None => {
                controller.region = text("region")?;
                text("cloud")?.map(|c| c.to_ascii_lowercase())
            }
        };
        if let Some(cloud) = cloud.filter(|c| c != "aws") {
            notes.push(format!(
                "its resources are on {cloud}: skyc's controller here is on aws"
            ));
        }
        controller.instance_type = text("instance_type")?;
        if let Some(disk) = resources.get("disk_size").filter(|v| !v.is_null()) {
            controller.disk_gb = disk
                .as_i64()
                .and_then(|d| u64::try_from(d).ok())
                .filter(|d| *d > 0)
                .ok_or_else(|| bad("resources.disk_size", "not a number of GB"))?;
        }
        for key in ["cpus", "memory", "accelerators", "use_spot"] {
            if resources.get(key).is_some_and(|v| !v.is_null()) {
                notes.push(format!(
                    "resources.{key} is not read: skyc's controller takes SkyPilot's default \
                     resources (cpus: 4+, memory: 4x), or resources.instance_type"
                ));
            }
        }
    }
    match section.get("autostop") {
        None => {}
        Some(Node {
            value: skyc_compiler::yaml::Value::Bool(false),
            ..
        }) => {
            controller.idle_seconds = u64::MAX;
        }
        Some(Node {
            value: skyc_compiler::yaml::Value::Bool(true) | skyc_compiler::yaml::Value::Null,
            ..
        }) => {}
        Some(autostop) => {
            if let Some(minutes) = autostop.get("idle_minutes").filter(|v| !v.is_null()) {
                let minutes = minutes
                    .as_i64()
                    .and_then(|m| u64::try_from(m).ok())
                    .filter(|m| *m > 0)
                    .ok_or_else(|| bad("autostop.idle_minutes", "not a number of minutes"))?;
                controller.idle_seconds = minutes.saturating_mul(60);
            }
            if autostop.get("down").and_then(|d| match d.value {
                skyc_compiler::yaml::Value::Bool(b) => Some(b),
                _ => None,
            }) == Some(true)
            {
                notes.push(
                    "autostop.down is not read: an idle controller is stopped, its state kept"
                        .into(),
                );
            }
        }
    }
    Ok(Some(JobsController {
        file: file.to_owned(),
        controller,
        notes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_controller_keys_shape_skycs_controller() {
        let read = |text: &str| read(text, "config.yaml").unwrap();
        assert_eq!(read("allowed_clouds: [aws]\n"), None);
        assert_eq!(read("jobs:\n  controller:\n"), None);
        let c = read(
            "jobs:\n  controller:\n    resources:\n      infra: aws/us-west-2\n      \
             instance_type: m6id.large\n      disk_size: 80\n    autostop:\n      \
             idle_minutes: 30\n",
        )
        .unwrap();
        assert_eq!(
            c.controller,
            Controller {
                region: Some("us-west-2".into()),
                instance_type: Some("m6id.large".into()),
                disk_gb: 80,
                idle_seconds: 1800,
            }
        );
        assert!(c.notes.is_empty());
        // SkyPilot's older spelling, and an autostop turned off.
        let c = read(
            "jobs:\n  controller:\n    resources:\n      cloud: AWS\n      region: eu-west-1\n      \
             cpus: 8+\n    autostop: false\n",
        )
        .unwrap();
        assert_eq!(c.controller.region.as_deref(), Some("eu-west-1"));
        assert_eq!(c.controller.idle_seconds, u64::MAX);
        assert!(
            c.notes[0].contains("resources.cpus is not read"),
            "{:?}",
            c.notes
        );
        let c = read("jobs:\n  controller:\n    resources:\n      infra: gcp\n").unwrap();
        assert!(c.notes[0].contains("on gcp"), "{:?}", c.notes);
    }

    #[test]
    fn values_that_cannot_be_are_named() {
        let e = super::read(
            "jobs:\n  controller:\n    autostop:\n      idle_minutes: soon\n",
            "config.yaml",
        )
        .unwrap_err();
        assert!(e.contains("jobs.controller.autostop.idle_minutes"), "{e}");
        let e = super::read("jobs: [\n", "config.yaml").unwrap_err();
        assert!(e.contains("not YAML"), "{e}");
    }
}
