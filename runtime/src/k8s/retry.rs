//! What an API error means for the runtime: whether to ask again (how
//! long to wait is [`Backoff`](crate::reconciler::backoff::Backoff)'s).
//!
//! - Transient, retried with exponential backoff: no answer at all (the
//!   connection failed, timed out or broke), `429 Too Many Requests`,
//!   any 5xx, and `409 Conflict` other than a failed uid precondition
//!   (another writer got in first; the next try reads the new state).
//! - An outage: no answer, or 5xx, from the API server itself. The group
//!   keeps its last known status, and `skyc status` shows the outage
//!   until a request succeeds again.
//! - Final for the request: everything else (403, 404, 422, a failed uid
//!   precondition: the object is another incarnation now).

use kube::Error;

/// The HTTP status of an API error, if the server answered.
pub fn code(e: &Error) -> Option<u16> {
    match e {
        Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The server never answered (or its answer broke off).
pub fn unanswered(e: &Error) -> bool {
    matches!(
        e,
        Error::HyperError(_) | Error::Service(_) | Error::ReadEvents(_)
    )
}

/// A uid precondition failed: the object is not the one the request was
/// meant for any more. A delete's precondition answers 409; a patch
/// naming another uid is refused as an invalid change of `metadata.uid`
/// (422).
pub fn stale(e: &Error) -> bool {
    matches!(e, Error::Api(s) if (s.code == 409 && s.message.contains("Precondition failed"))
        || (s.code == 422 && s.message.contains("metadata.uid")))
}

pub fn is_transient(e: &Error) -> bool {
    unanswered(e)
        || match code(e) {
            Some(429) => true,
            Some(409) => !stale(e) && !already_exists(e),
            Some(c) => c >= 500,
            None => false,
        }
}

/// The API server is down or broken, rather than refusing one request.
pub fn is_outage(e: &Error) -> bool {
    unanswered(e) || code(e).is_some_and(|c| c >= 500)
}

pub fn not_found(e: &Error) -> bool {
    code(e) == Some(404)
}

/// A create found an object of that name (409 `AlreadyExists`).
pub fn already_exists(e: &Error) -> bool {
    matches!(e, Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

/// An error in a sentence: the API's own message when it answered.
pub fn describe(e: &Error) -> String {
    match e {
        Error::Api(s) if !s.message.is_empty() => format!("{} ({})", s.message, s.code),
        Error::Api(s) => format!("HTTP {} {}", s.code, s.reason),
        other => {
            // The root cause reads best ("connection refused").
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                text = s.to_string();
                source = s.source();
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, message: &str) -> Error {
        Error::Api(Status::failure(message, "").with_code(code).boxed())
    }

    #[test]
    fn what_is_retried() {
        assert!(is_transient(&api(429, "slow down")));
        assert!(is_transient(&api(500, "etcd")));
        assert!(is_transient(&api(503, "unavailable")));
        assert!(is_transient(&api(409, "the object has been modified")));
        assert!(!is_transient(&api(
            409,
            "Precondition failed: UID in precondition: a, UID in object meta: b"
        )));
        assert!(stale(&api(409, "Precondition failed: UID in precondition")));
        assert!(stale(&api(
            422,
            "Job.batch \"g-a-0-0\" is invalid: metadata.uid: Invalid value: \"u1\": field is immutable"
        )));
        assert!(!stale(&api(422, "spec.parallelism: Invalid value: -1")));
        assert!(!is_transient(&api(403, "forbidden")));
        assert!(!is_transient(&api(404, "not found")));
        assert!(is_outage(&api(502, "bad gateway")));
        assert!(!is_outage(&api(429, "slow down")));
    }
}
