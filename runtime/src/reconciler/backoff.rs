//! How long a backend waits before asking its cluster again: exponential
//! backoff, doubling from a first delay up to a cap, with or without
//! jitter. What is retried is each backend's own (`k8s::retry`,
//! `aws::ec2::retry`); only the waiting is shared.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Delays, so tests can run them fast.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    /// How many times one request is tried before its caller hears of it.
    pub tries: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            first: Duration::from_millis(250),
            max: Duration::from_secs(30),
            tries: 6,
        }
    }
}

impl Backoff {
    /// The wait before try `n + 1` (n from 0): doubling from `first`,
    /// capped at `max`.
    pub fn delay(&self, n: u32) -> Duration {
        self.first
            .saturating_mul(1u32.checked_shl(n.min(20)).unwrap_or(u32::MAX))
            .min(self.max)
    }

    /// [`delay`](Self::delay) with "full jitter" (AWS's advice for
    /// throttling): a random share of it, so that many clients throttled
    /// together do not come back together.
    pub fn jittered(&self, n: u32) -> Duration {
        self.share(n, jitter())
    }

    /// A share (`jitter` in 0..=1) of [`delay`](Self::delay), never less
    /// than a tenth of it.
    pub fn share(&self, n: u32, jitter: f64) -> Duration {
        self.delay(n).mul_f64(jitter.clamp(0.1, 1.0))
    }
}

/// A number in 0..1 that differs between calls and processes: enough to
/// spread retries, which is all it is for.
fn jitter() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mixed =
        u64::from(nanos).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id());
    (mixed % 1_000_000) as f64 / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> Backoff {
        Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_secs(1),
            tries: 3,
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let b = backoff();
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(1), Duration::from_millis(200));
        assert_eq!(b.delay(3), Duration::from_millis(800));
        assert_eq!(b.delay(4), Duration::from_secs(1));
        assert_eq!(b.delay(60), Duration::from_secs(1));
    }

    #[test]
    fn jitter_takes_a_share_of_the_delay() {
        let b = backoff();
        assert_eq!(b.share(0, 1.0), Duration::from_millis(100));
        assert_eq!(b.share(3, 1.0), Duration::from_millis(800));
        assert_eq!(b.share(60, 1.0), Duration::from_secs(1));
        assert_eq!(b.share(3, 0.5), Duration::from_millis(400));
        assert_eq!(b.share(3, 0.0), Duration::from_millis(80));
        for n in 0..8 {
            let d = b.jittered(n);
            assert!(d >= b.delay(n) / 10 && d <= b.delay(n), "{d:?}");
        }
    }
}
