//! The values of a task's `secrets`, on every target that runs groups.

use skyc_compiler::ir::{Group, Task};
use skyc_compiler::{Diagnostic, Rule};

/// Each of the task's secrets with its value from `values` (`--secret`,
/// then the submitting environment); a `missing-secret-value` error at the
/// task for each one that has none.
pub fn resolve(
    task: &Task,
    values: &[(String, String)],
) -> (Vec<(String, String)>, Vec<Diagnostic>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for name in &task.secrets {
        match values.iter().find(|(k, _)| k == name) {
            Some((k, v)) => found.push((k.clone(), v.clone())),
            None => missing.push(
                Diagnostic::new(
                    Rule::MissingSecretValue,
                    task.name_span,
                    format!(
                        "task `{}` needs the secret `{name}`: pass `--secret {name}=VALUE` \
                         or set `{name}` in the environment",
                        task.name
                    ),
                )
                .label("this task"),
            ),
        }
    }
    (found, missing)
}

/// Every task's secrets with their values ([`resolve`]) added to `env`,
/// each name once (a value found replaces one `env` has); the errors of
/// the secrets that have none.
pub fn merge(
    env: &mut Vec<(String, String)>,
    group: &Group,
    values: &[(String, String)],
) -> Vec<Diagnostic> {
    let mut diagnostics = Vec::new();
    for task in &group.tasks {
        let (found, missing) = resolve(task, values);
        diagnostics.extend(missing);
        for (k, v) in found {
            env.retain(|(name, _)| *name != k);
            env.push((k, v));
        }
    }
    diagnostics
}
