//! How a pool replaces workers that end without being asked to: after a
//! pause that grows with each such end, and not at all once too many in a
//! row never became ready.
//!
//! A worker ends unasked when its setup fails, or when it is gone without
//! the pool having retired it (its hold ended, its pods or instances went
//! for good). Replacing it at once would turn a worker that cannot live
//! (an image whose hold exits, a node that keeps evicting, a crash right
//! after setup) into a loop that makes worker after worker, each leaving
//! something behind and, on a cloud, each billed. So, as Kubernetes backs
//! off a crashing container:
//!
//! - the n-th unasked end in a row holds every new worker of the pool back
//!   for [`pause`]`(n)` (1 s, 2 s, 4 s, ... at most [`PAUSE_MAX`]); the
//!   count is forgotten once the worker that last became ready has stayed
//!   ready for [`CALM`], or when the pool is applied or resized again;
//! - a worker that ends unasked without ever having been ready is a
//!   failure, as a failed setup is: [`SETUP_FAILURES`](super::SETUP_FAILURES)
//!   in a row (no worker becoming ready in between) fail the pool, which
//!   then makes no more workers until it is applied again.
//!
//! The pauses are timers ([`Timer::Replace`], [`Timer::Calm`]) the
//! supervisor keeps with its deadlines, so the engine reads no clock and a
//! restarted supervisor keeps the pause it had.

use super::WorkerId;
use super::engine::{Action, Timer};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The first pause before a worker that ended unasked is replaced.
pub const PAUSE_FIRST: Duration = Duration::from_secs(1);
/// The longest pause.
pub const PAUSE_MAX: Duration = Duration::from_secs(300);
/// How long a worker stays ready before earlier ends are forgotten.
pub const CALM: Duration = Duration::from_secs(600);

/// The pause after the n-th unasked end in a row (n from 1).
pub fn pause(n: u32) -> Duration {
    let doublings = n.saturating_sub(1).min(20);
    PAUSE_FIRST.saturating_mul(1u32 << doublings).min(PAUSE_MAX)
}

/// Why a worker counted as a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// Its setup failed.
    SetupFailed,
    /// It ended by itself before it was ever ready.
    EndedBeforeReady,
}

/// The last worker that counted as a failure, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastFailure {
    pub worker: WorkerId,
    pub failure: Failure,
}

/// The replacement rule's state, kept in the pool's engine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Replacement {
    /// Workers ended unasked since the pool was last calm.
    ends: u32,
    /// Workers of the current generation in a row that failed before
    /// they were ready.
    failures: u32,
    /// New workers wait for [`Timer::Replace`].
    held: bool,
    /// The worker whose readiness armed [`Timer::Calm`].
    calm_worker: Option<WorkerId>,
    last_failure: Option<LastFailure>,
}

impl Replacement {
    /// Whether new workers wait for the pause to end.
    pub(super) fn held(&self) -> bool {
        self.held
    }

    /// Whether [`SETUP_FAILURES`](super::SETUP_FAILURES) in a row failed:
    /// no more workers until the pool is applied again.
    pub(super) fn failed_out(&self) -> bool {
        self.failures >= super::SETUP_FAILURES
    }

    pub(super) fn last_failure(&self) -> Option<LastFailure> {
        self.last_failure
    }

    /// A worker of the current generation ended unasked (`failure`: before
    /// it was ever ready, and how): hold new workers back for the pause
    /// this end earns.
    pub(super) fn ended(
        &mut self,
        worker: WorkerId,
        failure: Option<Failure>,
        out: &mut Vec<Action>,
    ) {
        if let Some(failure) = failure {
            self.failures += 1;
            self.last_failure = Some(LastFailure { worker, failure });
        }
        self.ends = self.ends.saturating_add(1);
        self.held = true;
        out.push(Action::SetTimer {
            timer: Timer::Replace,
            after: pause(self.ends),
        });
    }

    /// A worker of the current generation became ready: the failures in a
    /// row are over, and if it stays ready for [`CALM`], earlier ends are
    /// forgotten.
    pub(super) fn ready(&mut self, worker: WorkerId, out: &mut Vec<Action>) {
        self.failures = 0;
        if self.ends > 0 {
            self.calm_worker = Some(worker);
            out.push(Action::SetTimer {
                timer: Timer::Calm,
                after: CALM,
            });
        }
    }

    /// The pause ran out.
    pub(super) fn resume(&mut self) {
        self.held = false;
    }

    /// [`CALM`] after a worker became ready (the last to, since the timer
    /// is armed anew each time): if that worker is still ready, the pool
    /// is calm again.
    pub(super) fn calm(&mut self, still_ready: impl Fn(WorkerId) -> bool) {
        if self.calm_worker.take().is_some_and(still_ready) {
            self.ends = 0;
        }
    }

    /// The pool was applied or resized: the user tries anew, at once.
    pub(super) fn reset(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_from_a_second_up_to_five_minutes() {
        let secs: Vec<u64> = (1..=11).map(|n| pause(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(pause(u32::MAX), PAUSE_MAX);
        assert_eq!(pause(0), PAUSE_FIRST);
    }
}
