//! The values of a task's `secrets`, on every target that runs groups.

use skyc_compiler::ir::Task;
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
