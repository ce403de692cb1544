//! The dashboard's HTTP/1 server: hyper on a current-thread tokio runtime,
//! bound to loopback. Every request needs the token; each is answered on
//! a blocking thread (SQLite reads and file reads are synchronous).

use super::api::{self, Answer};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use skyc_runtime::controller::remote::Connected;
use std::convert::Infallible;
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What every request is answered from.
pub(crate) struct Shared {
    pub(crate) source: Source,
    pub(crate) token: String,
}

/// Where the views are read.
pub(crate) enum Source {
    /// A state directory on this machine.
    Dir(PathBuf),
    /// A controller's: each request answered there (`skyc dashboard
    /// --answer`), through one session kept for them all.
    Controller(std::sync::Mutex<Connected>),
}

/// Serves `listener` until the process ends.
pub(crate) fn serve(listener: std::net::TcpListener, shared: Shared) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let shared = Arc::new(shared);
    runtime.block_on(async move {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                // Out of descriptors, a connection reset before it was
                // taken: wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request| answer(shared.clone(), request));
                // A timer, so that a connection that sends no request
                // (or only part of one) is closed (hyper's header timeout).
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

async fn answer(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    // The body is never read: no request of the dashboard has one.
    let (parts, _body) = request.into_parts();
    let response = tokio::task::spawn_blocking(move || route(&shared, &parts))
        .await
        // Reached when the blocking pool is shut down; a panic aborts
        // (cli/crash.rs), so views must not panic on any store.
        .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error"));
    Ok(response)
}

/// A random token of 32 bytes from the OS, as hex.
pub(crate) fn random_hex(bytes: usize) -> io::Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equal strings, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The value of `key` in a query string (no percent-decoding: every
/// value the dashboard takes is a token of hex digits or a number).
pub(crate) fn query<'a>(parts: &'a Parts, key: &str) -> Option<&'a str> {
    parts
        .uri
        .query()?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

enum Access {
    Granted,
    /// No token: 401.
    Missing,
    /// A wrong token, or a POST that is not the page's own: 403.
    Refused,
}

/// The token is taken from the `X-Skyc-Token` header, or on a GET from
/// `?token=` (the URL printed). A POST needs the header, which a page of
/// another origin cannot send without a preflight the dashboard never
/// grants, and, when the browser says where it comes from, this origin.
fn access(shared: &Shared, parts: &Parts) -> Access {
    let header = parts
        .headers
        .get("x-skyc-token")
        .and_then(|v| v.to_str().ok());
    let given = match (&parts.method, header) {
        (_, Some(token)) => Some(token),
        (&Method::GET, None) => query(parts, "token"),
        _ => None,
    };
    let Some(given) = given else {
        return Access::Missing;
    };
    if !same(given.as_bytes(), shared.token.as_bytes()) {
        return Access::Refused;
    }
    if parts.method == Method::POST
        && let Some(origin) = parts.headers.get(header::ORIGIN)
    {
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        let own = host.is_some_and(|h| origin.as_bytes() == format!("http://{h}").as_bytes());
        if !own {
            return Access::Refused;
        }
    }
    Access::Granted
}

fn route(shared: &Shared, parts: &Parts) -> Response<Full<Bytes>> {
    match access(shared, parts) {
        Access::Granted => {}
        Access::Missing => {
            return plain(
                StatusCode::UNAUTHORIZED,
                "the dashboard needs its token: open the URL `skyc dashboard` printed",
            );
        }
        Access::Refused => return plain(StatusCode::FORBIDDEN, "refused"),
    }
    respond(match &shared.source {
        Source::Dir(dir) => answer_for(dir, parts),
        Source::Controller(connected) => answer_there(
            &mut connected
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            parts,
        ),
    })
}

/// The answer to a request the token admitted, read from the state
/// directory `dir`.
pub(crate) fn answer_for(dir: &std::path::Path, parts: &Parts) -> Answer {
    let path = parts.uri.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (&parts.method, segments.as_slice()) {
        (&Method::GET, [""]) => api::page(dir),
        (&Method::GET, ["api", "groups"]) => api::groups(dir, parts),
        (&Method::GET, ["api", "pools"]) => api::pools(dir),
        (&Method::GET, ["api", "groups", id]) => match id.parse() {
            Ok(id) => api::group(dir, id),
            Err(_) => Answer::not_found(),
        },
        (&Method::GET, ["api", "groups", id, "log"]) => match id.parse() {
            Ok(id) => api::log(dir, id, parts),
            Err(_) => Answer::not_found(),
        },
        (&Method::POST, ["api", "groups", id, "cancel"]) => match id.parse() {
            Ok(id) => api::cancel(dir, id),
            Err(_) => Answer::not_found(),
        },
        (
            _,
            [""] | ["api", "groups" | "pools"] | ["api", "groups", _] | ["api", "groups", _, "log"],
        )
        | (_, ["api", "groups", _, "cancel"]) => {
            Answer::Status(StatusCode::METHOD_NOT_ALLOWED, "method not allowed".into())
        }
        _ => Answer::not_found(),
    }
}

/// The answer the controller gives to a request the token admitted: the
/// request's method, path and query run there as `skyc dashboard
/// --answer` (the token, this machine's, is not sent).
fn answer_there(connected: &mut Connected, parts: &Parts) -> Answer {
    let args = vec![
        "dashboard".to_owned(),
        "--answer".to_owned(),
        parts.method.as_str().to_owned(),
        without_token(&parts.uri),
    ];
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let failed = |why: String| Answer::Status(StatusCode::BAD_GATEWAY, why);
    let remote = connected.remote().clone();
    match connected.run(&args, &mut out, &mut err) {
        Ok(0) => Answer::decode(&out)
            .unwrap_or_else(|| failed(format!("the controller {remote} answered no view"))),
        Ok(_) => failed(format!(
            "the controller {remote}: {}",
            String::from_utf8_lossy(&err).trim()
        )),
        Err(e) => failed(e),
    }
}

/// A request's path and query, without its `token`.
fn without_token(uri: &hyper::Uri) -> String {
    let query: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty() && kv.split('=').next() != Some("token"))
        .collect();
    if query.is_empty() {
        uri.path().to_owned()
    } else {
        format!("{}?{}", uri.path(), query.join("&"))
    }
}

/// The answer to `METHOD URI` of the state directory `dir`, written to
/// `out` as a controller's client reads it ([`Answer::decode`]).
pub(crate) fn answer_client(
    dir: &std::path::Path,
    method: &str,
    uri: &str,
    mut out: impl io::Write,
) -> Result<(), String> {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .body(())
        .map_err(|e| format!("`{method} {uri}`: {e}"))?;
    let (parts, ()) = request.into_parts();
    out.write_all(&answer_for(dir, &parts).encode())
        .and_then(|()| out.flush())
        .map_err(|e| e.to_string())
}

fn respond(answer: Answer) -> Response<Full<Bytes>> {
    match answer {
        Answer::Html { body, nonce } => {
            let csp = format!(
                "default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; \
                 connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                 frame-ancestors 'none'"
            );
            let mut r = with_body(StatusCode::OK, "text/html; charset=utf-8", body.into());
            if let Ok(csp) = HeaderValue::from_str(&csp) {
                r.headers_mut().insert(header::CONTENT_SECURITY_POLICY, csp);
            }
            r
        }
        Answer::Json(status, value) => with_body(
            status,
            "application/json",
            serde_json::to_vec(&value).unwrap_or_default().into(),
        ),
        Answer::JsonBytes(status, body) => with_body(status, "application/json", body.into()),
        Answer::Bytes { body, headers } => {
            let mut r = with_body(StatusCode::OK, "text/plain; charset=utf-8", body.into());
            for (name, value) in headers {
                r.headers_mut().insert(name, HeaderValue::from(value));
            }
            r
        }
        Answer::Status(status, message) => plain(status, &message),
    }
}

fn plain(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    with_body(
        status,
        "text/plain; charset=utf-8",
        Bytes::from(format!("{message}\n")),
    )
}

fn with_body(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Nothing the dashboard serves may be kept, framed, sniffed, or leak
    // the token in a Referer.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_stays_here() {
        let uri: hyper::Uri = "/api/groups/3/log?token=abc&task=0&rank=1".parse().unwrap();
        assert_eq!(without_token(&uri), "/api/groups/3/log?task=0&rank=1");
        let uri: hyper::Uri = "/?token=abc".parse().unwrap();
        assert_eq!(without_token(&uri), "/");
    }

    /// What a controller writes is what its client's dashboard serves:
    /// the same status, headers and bytes.
    #[test]
    fn answers_cross_whole() {
        let answers = || {
            [
                Answer::Html {
                    body: "<p>é</p>".into(),
                    nonce: "0a1b".into(),
                },
                Answer::Json(StatusCode::CONFLICT, serde_json::json!({"error": "x"})),
                Answer::Bytes {
                    body: vec![0, 255, b'\n'],
                    headers: vec![(hyper::header::HeaderName::from_static("x-skyc-next"), 7)],
                },
                Answer::Status(StatusCode::NOT_FOUND, "not found".into()),
            ]
        };
        for (here, there) in answers().into_iter().zip(answers()) {
            let crossed = Answer::decode(&there.encode()).expect("an answer");
            let (a, b) = (respond(here), respond(crossed));
            assert_eq!(a.status(), b.status());
            assert_eq!(a.headers(), b.headers());
            assert_eq!(format!("{:?}", a.body()), format!("{:?}", b.body()));
        }
        assert!(Answer::decode(b"no head").is_none());
        // Only what the dashboard itself sends is served as it came.
        assert!(Answer::decode(b"{\"kind\":\"html\",\"nonce\":\"x' 'unsafe-inline\"}\n").is_none());
        assert!(
            Answer::decode(b"{\"kind\":\"bytes\",\"headers\":[[\"cache-control\",1]]}\n").is_none()
        );
        assert!(Answer::decode(b"{\"kind\":\"json\",\"status\":1000}\n").is_none());
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abcd", b"abcd"));
        assert!(!same(b"abcd", b"abce"));
        assert!(!same(b"abc", b"abcd"));
        assert!(!same(b"", b"a"));
        let t = random_hex(32).unwrap();
        assert_eq!(t.len(), 64);
        assert_ne!(t, random_hex(32).unwrap());
    }
}
