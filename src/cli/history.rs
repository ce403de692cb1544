//! skyc's own lines in a group's log stream, `(skyc) ...`: what the
//! group's history records as it happens that the nodes' logs cannot say.
//! A task that waits says why, once each time the reason changes
//! (`(skyc) trainer: waiting: Slurm: Resources (...)`), and once when it
//! no longer waits without having started.

use super::table;

/// One followed group's history: which of its lines are shown, and how.
pub(crate) struct History {
    pub(crate) gid: i64,
    /// Task names, by index.
    tasks: Vec<String>,
    /// Only this task's lines (a name, or `task-rank` for one node).
    only: Option<String>,
    pub(crate) prefix: String,
}

impl History {
    pub(crate) fn new(gid: i64, tasks: Vec<String>, only: Option<&str>) -> Self {
        Self {
            gid,
            tasks,
            only: only.map(str::to_owned),
            prefix: "(skyc) ".to_owned(),
        }
    }

    /// The line an event of the group's history makes, if it makes one.
    pub(crate) fn line(&self, event: &str) -> Option<String> {
        let entry: serde_json::Value = serde_json::from_str(event).ok()?;
        let waiting = entry.get("waiting")?;
        let task = self
            .tasks
            .get(usize::try_from(waiting.get("task")?.as_u64()?).ok()?)?;
        let shown = self.only.as_deref().is_none_or(|only| {
            only == task
                || only
                    .strip_prefix(task.as_str())
                    .and_then(|rank| rank.strip_prefix('-'))
                    .is_some_and(|rank| rank.parse::<u32>().is_ok())
        });
        if !shown {
            return None;
        }
        Some(match waiting.get("why").and_then(|w| w.as_str()) {
            Some(why) => format!(
                "{task}: {}\n",
                table::waiting_phrase(&table::one_line(why), None)
            ),
            None => format!("{task}: no longer waiting\n"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(only: Option<&str>) -> History {
        History::new(7, vec!["trainer".into(), "buffer".into()], only)
    }

    #[test]
    fn a_reason_is_one_line_in_the_words_of_status() {
        let h = history(None);
        assert_eq!(
            h.line(r#"{"waiting":{"task":0,"why":"Slurm: Resources (the nodes\nit asks for are busy)"}}"#)
                .as_deref(),
            Some("trainer: waiting: Slurm: Resources (the nodes it asks for are busy)\n")
        );
        assert_eq!(
            h.line(r#"{"waiting":{"task":1,"why":"waiting for 1 cpu: this machine has 2"}}"#)
                .as_deref(),
            Some("buffer: waiting for 1 cpu: this machine has 2\n")
        );
        assert_eq!(
            h.line(r#"{"waiting":{"task":1,"why":null}}"#).as_deref(),
            Some("buffer: no longer waiting\n")
        );
        // Other entries of the history, and a task the group lacks, make
        // no line.
        assert_eq!(h.line(r#"{"TaskStarted":{"task":0,"attempt":0}}"#), None);
        assert_eq!(h.line(r#"{"waiting":{"task":5,"why":"x"}}"#), None);
        assert_eq!(h.line("not json"), None);
    }

    #[test]
    fn one_task_or_node_shows_only_its_own() {
        let entry = r#"{"waiting":{"task":0,"why":"Slurm: Priority"}}"#;
        assert!(history(Some("trainer")).line(entry).is_some());
        assert!(history(Some("trainer-1")).line(entry).is_some());
        assert!(history(Some("buffer")).line(entry).is_none());
        assert!(history(Some("trainer-x")).line(entry).is_none());
    }
}
