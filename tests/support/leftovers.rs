//! Tasks that leave processes behind, and how a test finds them: every
//! target must end all of a task's processes when the task ends.

use std::path::Path;
use std::process::Command;

/// A shell function `leave` for a task's `run`: a background child and a
/// daemon (its own session, double forked, empty environment), both
/// named `token` and holding the lock `<dir>/lock-<task>-<rank>`; then the
/// file `<dir>/held-<task>-<rank>` shows that they held it when the
/// script went on. `dir` and `task` are shell expressions.
pub(crate) fn leave_leftovers(token: &str, dir: &str, task: &str) -> String {
    format!(
        r#"leave() {{
    lock="{dir}/lock-{task}-$SKYPILOT_NODE_RANK"
    exec 9>>"$lock" && flock 9
    (exec -a {token} sleep 300) &
    setsid bash -c '(env -i bash -c "exec -a {token} sleep 301" &)'
    exec 9>&-
    sleep 0.3
    flock -n "$lock" true || echo held > "{dir}/held-{task}-$SKYPILOT_NODE_RANK"
  }}"#
    )
}

/// The verdict on a group of tasks `main` (2 nodes), `side` and `flaky`
/// that called `leave` (files in `dir`): every node's leftovers held their
/// lock while it ran, the failed attempt's were gone when `flaky` started
/// again, and nothing of the group runs now.
pub(crate) fn assert_nothing_outlived(dir: &Path, token: &str) {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    assert_eq!(
        read("flaky-saw").trim(),
        "free",
        "the failed attempt's leftovers were gone when the next one started"
    );
    for (task, rank) in [("main", 0), ("main", 1), ("side", 0), ("flaky", 0)] {
        assert_eq!(
            read(&format!("held-{task}-{rank}")).trim(),
            "held",
            "{task}-{rank} left processes behind while it ran"
        );
        assert!(
            lock_is_free(&dir.join(format!("lock-{task}-{rank}"))),
            "something of {task}-{rank} still holds its lock"
        );
    }
    assert_eq!(processes_named(token), Vec::<String>::new());
}

/// Whether nothing holds the lock on `path` (flock(1), as the tasks do).
pub(crate) fn lock_is_free(path: &Path) -> bool {
    Command::new("flock")
        .arg("-n")
        .arg(path)
        .arg("true")
        .status()
        .is_ok_and(|s| s.success())
}

/// Processes anywhere on this machine whose command line holds `token`
/// (a zombie has none), as `pid argv`.
pub(crate) fn processes_named(token: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let argv = std::fs::read(e.path().join("cmdline")).ok()?;
            let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
            argv.contains(token).then(|| format!("{pid} {argv}"))
        })
        .collect()
}
