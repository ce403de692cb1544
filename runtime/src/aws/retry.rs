//! What an EC2 error means for the runtime, and how long to wait before
//! asking again.
//!
//! - Transient, retried with exponential backoff and jitter (AWS's advice
//!   for throttling): no answer at all (connection refused, reset, timed
//!   out), HTTP 5xx, and the throttling and internal-error codes the SDKs
//!   retry. Retrying any request is safe: `RunInstances` carries its
//!   `ClientToken`, the others are idempotent or answer "duplicate".
//! - Final: everything else (bad credentials, a bad request, a quota).

use super::client::Error;
use std::time::Duration;

/// Codes the AWS SDKs treat as throttling.
const THROTTLING: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Codes of a failure on AWS's side.
const TRANSIENT: &[&str] = &[
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
];

/// Codes that mean the credentials do not work.
const CREDENTIALS: &[&str] = &[
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "RequestExpired",
    "OptInRequired",
    "Blocked",
];

/// Codes that mean EC2 has no room for a launch now (capacity, quotas):
/// the task waits (PENDING) and the launch is asked again.
const CAPACITY: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
    "InsufficientFreeAddressesInSubnet",
];

pub fn is_capacity(code: &str) -> bool {
    CAPACITY.contains(&code)
}

pub fn is_throttling(code: &str) -> bool {
    THROTTLING.contains(&code)
}

/// Codes that mean the credentials themselves are no longer good
/// (expired, rotated, or the clock is off), rather than lacking a
/// permission: a renewed set may work.
pub fn is_expired_credentials(code: &str) -> bool {
    [
        "AuthFailure",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "RequestExpired",
    ]
    .contains(&code)
}

pub fn is_credentials(code: &str) -> bool {
    CREDENTIALS.contains(&code)
}

pub fn is_transient(e: &Error) -> bool {
    match e {
        Error::Unreachable { .. } => true,
        // No capacity is answered with a 5xx, but asking again at once
        // will not help: the next pass asks again.
        Error::Api { code, .. } if is_capacity(code) => false,
        Error::Api { status, code, .. } => {
            *status >= 500
                || *status == 429
                || is_throttling(code)
                || TRANSIENT.contains(&code.as_str())
        }
        Error::Response { .. } | Error::Request(_) => false,
    }
}

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
            first: Duration::from_millis(200),
            max: Duration::from_secs(20),
            tries: 6,
        }
    }
}

impl Backoff {
    /// The wait before try `n + 1` (n from 0): a random share (`jitter`
    /// in 0..=1) of the doubling delay from `first`, capped at `max`
    /// ("full jitter"), so that many clients throttled together do not
    /// come back together. Never less than a tenth of the delay.
    pub fn delay(&self, n: u32, jitter: f64) -> Duration {
        let full = self
            .first
            .saturating_mul(1u32.checked_shl(n.min(20)).unwrap_or(u32::MAX))
            .min(self.max);
        full.mul_f64(jitter.clamp(0.1, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: &str) -> Error {
        Error::Api {
            action: "RunInstances".into(),
            status,
            code: code.into(),
            message: String::new(),
            request_id: None,
        }
    }

    #[test]
    fn what_is_retried() {
        assert!(is_transient(&api(503, "RequestLimitExceeded")));
        assert!(is_transient(&api(400, "RequestLimitExceeded")));
        assert!(is_transient(&api(500, "InternalError")));
        assert!(is_transient(&api(502, "")));
        assert!(is_transient(&Error::Unreachable {
            endpoint: "http://127.0.0.1:1".into(),
            why: "connection refused".into()
        }));
        assert!(!is_transient(&api(400, "InvalidParameterValue")));
        assert!(!is_transient(&api(401, "AuthFailure")));
        assert!(!is_transient(&api(400, "InstanceLimitExceeded")));
        assert!(is_credentials("AuthFailure"));
        assert!(!is_transient(&api(500, "InsufficientInstanceCapacity")));
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let b = Backoff {
            first: Duration::from_millis(100),
            max: Duration::from_secs(1),
            tries: 3,
        };
        assert_eq!(b.delay(0, 1.0), Duration::from_millis(100));
        assert_eq!(b.delay(3, 1.0), Duration::from_millis(800));
        assert_eq!(b.delay(60, 1.0), Duration::from_secs(1));
        assert_eq!(b.delay(3, 0.5), Duration::from_millis(400));
        assert_eq!(b.delay(3, 0.0), Duration::from_millis(80));
    }
}
