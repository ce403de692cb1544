//! How many workers a pool wants: fixed, or SkyPilot's queue-length rule
//! for `min_workers`..`max_workers` (`QueueLengthAutoscaler`), with its
//! delays kept as timers so the engine reads no clock.
//!
//! SkyPilot decides every 20 s and counts consecutive decisions (delay /
//! 20 of them) before it changes the target; skyc decides at every event
//! and changes the target once the same wish has held for the delay. The
//! steps are the same: one more worker per upscale delay while more jobs
//! wait than the threshold, straight to `min_workers` after the downscale
//! delay once nothing waits, and at once from zero.

use super::engine::{Action, Timer};
use super::spec::Scaling;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Autoscaler {
    scaling: Scaling,
    target: u32,
    /// The size wanted since the upscale (or downscale) timer was set;
    /// `None` while the wish is not there.
    up: Option<u32>,
    down: Option<u32>,
}

impl Autoscaler {
    pub fn new(scaling: &Scaling) -> Self {
        Self {
            scaling: scaling.clone(),
            target: scaling.initial(),
            up: None,
            down: None,
        }
    }

    pub fn target(&self) -> u32 {
        self.target
    }

    /// A new spec: a fixed size is taken at once; an autoscaled one keeps
    /// the current target within its new bounds.
    pub fn rescale(&mut self, scaling: &Scaling) {
        self.scaling = scaling.clone();
        self.up = None;
        self.down = None;
        self.target = match *scaling {
            Scaling::Fixed { workers } => workers,
            Scaling::Autoscaled {
                min_workers,
                max_workers,
                ..
            } => self.target.clamp(min_workers, max_workers),
        };
    }

    /// The pool now: `queue` jobs waiting for a place. A wish that lasts
    /// the delay becomes the target ([`fired`](Self::fired)).
    pub fn observe(&mut self, queue: u32, out: &mut Vec<Action>) {
        let Scaling::Autoscaled {
            min_workers,
            max_workers,
            queue_length_threshold,
            upscale_delay,
            downscale_delay,
        } = self.scaling
        else {
            return;
        };
        let wanted =
            desired(queue, self.target, queue_length_threshold).clamp(min_workers, max_workers);
        if wanted > self.target {
            self.down = None;
            // From zero, at once: jobs wait for a first worker.
            if upscale_delay.is_zero() || self.target == 0 {
                self.target = wanted;
            } else if self.up.is_none() {
                self.up = Some(wanted);
                out.push(Action::SetTimer {
                    timer: Timer::Upscale,
                    after: upscale_delay,
                });
            } else {
                self.up = Some(wanted);
            }
        } else if wanted < self.target {
            self.up = None;
            if downscale_delay.is_zero() {
                self.target = wanted;
            } else if self.down.is_none() {
                self.down = Some(wanted);
                out.push(Action::SetTimer {
                    timer: Timer::Downscale,
                    after: downscale_delay,
                });
            } else {
                self.down = Some(wanted);
            }
        } else {
            self.up = None;
            self.down = None;
        }
    }

    /// A delay ran out: the wish still held since it was set becomes the
    /// target; a timer whose wish went away meanwhile means nothing.
    pub fn fired(&mut self, timer: Timer) {
        match timer {
            Timer::Upscale => {
                if let Some(n) = self.up.take() {
                    self.target = self.target.max(n);
                }
            }
            Timer::Downscale => {
                if let Some(n) = self.down.take() {
                    self.target = self.target.min(n);
                }
            }
            Timer::Replace | Timer::Calm => {}
        }
    }
}

/// SkyPilot's queue-length rule (`_calculate_target_num_replicas`): one
/// more worker while more jobs wait than the threshold, one fewer while
/// fewer do, none while none does (clamped by the caller); never none while
/// a job waits. A worker running a job is never retired for it: the pool
/// retires idle workers only.
fn desired(queue: u32, target: u32, threshold: u32) -> u32 {
    let wanted = match queue.cmp(&threshold) {
        _ if queue == 0 => 0,
        std::cmp::Ordering::Greater => target.saturating_add(1),
        std::cmp::Ordering::Less => target.saturating_sub(1),
        std::cmp::Ordering::Equal => target,
    };
    if wanted == 0 && queue > 0 { 1 } else { wanted }
}
