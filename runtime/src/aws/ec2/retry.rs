//! What an EC2 error means for the runtime: whether to ask again (how
//! long to wait is [`Backoff`](crate::reconciler::backoff::Backoff)'s, with jitter).
//!
//! - Transient, retried with exponential backoff and jitter (AWS's advice
//!   for throttling): no answer at all (connection refused, reset, timed
//!   out), HTTP 5xx, and the throttling and internal-error codes the SDKs
//!   retry. Retrying any request is safe: `RunInstances` carries its
//!   `ClientToken`, the others are idempotent or answer "duplicate".
//! - Final: everything else (bad credentials, a bad request, a quota).

use crate::aws::ec2::client::Error;

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
    // Google Cloud Storage's (its client shares this retry).
    "rateLimitExceeded",
    "userRateLimitExceeded",
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

/// `once` until it succeeds, fails for good, or has been tried as often
/// as `backoff` allows, transient failures apart by its jittered delays.
pub async fn retried<T, F, Fut>(
    backoff: crate::reconciler::backoff::Backoff,
    mut once: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut n = 0;
    loop {
        match once().await {
            Ok(v) => return Ok(v),
            Err(e) if is_transient(&e) && n + 1 < backoff.tries.max(1) => {
                tokio::time::sleep(backoff.jittered(n)).await;
                n += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: &str) -> Error {
        Error::Api {
            service: "EC2",
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
            service: "EC2",
            endpoint: "http://127.0.0.1:1".into(),
            why: "connection refused".into()
        }));
        assert!(!is_transient(&api(400, "InvalidParameterValue")));
        assert!(!is_transient(&api(401, "AuthFailure")));
        assert!(!is_transient(&api(400, "InstanceLimitExceeded")));
        assert!(is_credentials("AuthFailure"));
        assert!(!is_transient(&api(500, "InsufficientInstanceCapacity")));
    }
}
