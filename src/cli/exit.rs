//! Exit statuses: one table for every subcommand.
//!
//! | status | meaning |
//! |---|---|
//! | 0 | success; for `run` and `logs`, the group SUCCEEDED |
//! | 1 | the input file has errors |
//! | 2 | bad usage, or a file could not be read or written |
//! | 100 | the group FAILED (also FAILED_SETUP) |
//! | 101 | the group has not finished (`logs --no-follow`, `run` no longer following) |
//! | 102 | no such group |
//! | 103 | the group was CANCELLED |
//!
//! 100 to 103 are SkyPilot's `JobExitCode` (`sky jobs logs`, 0.14.1), so a
//! script written for `sky jobs logs` reads skyc's the same way; `run` in
//! the foreground ends with the same codes as `logs` of the same group.

/// Success.
pub(crate) const OK: u8 = 0;
/// The input has errors.
pub(crate) const INVALID: u8 = 1;
/// Bad usage, or a file could not be read or written.
pub(crate) const USAGE: u8 = 2;
/// The group failed.
pub(crate) const FAILED: u8 = 100;
/// The group has not finished.
pub(crate) const NOT_FINISHED: u8 = 101;
/// No such group.
pub(crate) const NOT_FOUND: u8 = 102;
/// The group was cancelled.
pub(crate) const CANCELLED: u8 = 103;

/// The exit status that reports a group's status, as SkyPilot's
/// `JobExitCode.from_job_status` does.
pub(crate) fn of_group(status: &str, finished: bool) -> u8 {
    match status {
        _ if !finished => NOT_FINISHED,
        "SUCCEEDED" => OK,
        "CANCELLED" => CANCELLED,
        _ => FAILED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_skypilot_job_exit_codes() {
        assert_eq!(of_group("SUCCEEDED", true), OK);
        assert_eq!(of_group("FAILED", true), FAILED);
        assert_eq!(of_group("FAILED_SETUP", true), FAILED);
        assert_eq!(of_group("CANCELLED", true), CANCELLED);
        for running in ["PENDING", "RUNNING", "RECOVERING", "CANCELLING"] {
            assert_eq!(of_group(running, false), NOT_FINISHED);
        }
    }
}
