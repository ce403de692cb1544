//! The Google Cloud Storage client a run's buckets need, on the JSON API
//! (`storage/v1`), with the same verbs as the S3 client
//! ([`crate::aws::s3`]): a bucket made, objects listed under a prefix,
//! downloaded to files, uploaded (streamed, their size checked against
//! what GCS kept), deleted, and the bucket deleted. Errors are
//! [`Error::Api`] with GCS's reason (`notFound`, `forbidden`, ...) as the
//! code; a missing bucket is `None`, as the S3 client says it.

use super::credentials::Access;
use crate::aws::ec2::client::{Error, Https, SetupError, Tuning, connector, exchange};
use crate::aws::ec2::retry;
use crate::aws::ec2::sigv4::encode;
use crate::aws::s3::Object;
use crate::objects::{Body, Source};
use bytes::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use std::time::{Duration, Instant};

/// GCS's own endpoint.
const ENDPOINT: &str = "https://storage.googleapis.com";

/// The largest answer read (a listing page is at most 1,000 objects).
const MAX_BODY: usize = 8 << 20;

/// Objects asked for per listing page.
const PAGE: usize = 1000;

/// The slowest upload waited for, as the S3 client waits.
const SLOWEST_BYTES_PER_SEC: u64 = 256 << 10;

/// Where SkyPilot makes a GCS bucket when nothing says where.
pub const DEFAULT_LOCATION: &str = "us-central1";

/// A token is asked for again when less than this is left of it.
const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// A client of Google Cloud Storage (or its emulator).
#[derive(Clone)]
pub struct Gcs {
    /// `scheme://host[:port]`, no trailing `/`.
    endpoint: String,
    access: Access,
    /// The token requests carry, and until when it is good; renewed as
    /// it runs out (none for an emulator).
    token: std::sync::Arc<tokio::sync::Mutex<Option<(String, Instant, Duration)>>>,
    project: Option<String>,
    http: HttpClient<Https, Body>,
    tuning: Tuning,
}

impl std::fmt::Debug for Gcs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gcs")
            .field("endpoint", &self.endpoint)
            .field("project", &self.project)
            .finish_non_exhaustive()
    }
}

impl Gcs {
    /// A client with `access`'s credentials, a token asked for now.
    pub async fn connect(mut access: Access, tuning: Tuning) -> Result<Gcs, String> {
        let http = HttpClient::builder(TokioExecutor::new())
            .build(connector(&tuning).map_err(|e: SetupError| e.to_string())?);
        let token = access
            .token(&http, tuning.request_timeout)
            .await
            .map_err(|e| {
                format!(
                    "no Google credentials: {e}; skyc uses Application Default Credentials \
                     (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, \
                     an instance's service account)"
                )
            })?;
        let endpoint = access.emulator().unwrap_or(ENDPOINT).to_owned();
        let token = token.map(|(t, lasts)| (t, Instant::now() + lasts, lasts));
        Ok(Gcs {
            endpoint,
            project: access.project.clone(),
            access,
            token: std::sync::Arc::new(tokio::sync::Mutex::new(token)),
            http,
            tuning,
        })
    }

    /// The token to send now: the held one, or a new one when it runs
    /// out within [`REFRESH_BEFORE`] (a copy or a deletion may outlast
    /// an hour).
    async fn bearer(&self) -> Result<Option<String>, Error> {
        let mut held = self.token.lock().await;
        match held.as_ref() {
            None => return Ok(None),
            // A token that lasts less than twice the margin (a metadata
            // server's, near its end) is kept for half its life.
            Some((t, until, lasts)) if *until > Instant::now() + REFRESH_BEFORE.min(*lasts / 2) => {
                return Ok(Some(t.clone()));
            }
            Some(_) => {}
        }
        let mut access = self.access.clone();
        let renewed = access
            .token(&self.http, self.tuning.request_timeout)
            .await?
            .map(|(t, lasts)| (t, Instant::now() + lasts, lasts));
        *held = renewed;
        Ok(held.as_ref().map(|(t, ..)| t.clone()))
    }

    /// The emulator's endpoint, when this is one (the nodes reach it
    /// too); `None` is Google's own.
    pub fn emulator(&self) -> Option<&str> {
        (self.endpoint != ENDPOINT).then_some(self.endpoint.as_str())
    }

    /// Makes `bucket` in `location` in the configured project; one this
    /// project can already read is made.
    pub async fn create_bucket(&self, bucket: &str, location: &str) -> Result<(), Error> {
        let Some(project) = &self.project else {
            return Err(Error::Request(format!(
                "making bucket `{bucket}`: no Google Cloud project is configured (set \
                 GOOGLE_CLOUD_PROJECT, or `gcloud config set project`)"
            )));
        };
        let body = serde_json::json!({
            "name": bucket,
            "location": location,
            "storageClass": "STANDARD",
        })
        .to_string();
        let path = format!("/storage/v1/b?project={}", encode(project));
        let body = Some((Bytes::from(body), "application/json"));
        match self.call("buckets.insert", "POST", &path, body).await {
            Err(e) if e.code() == Some("conflict") => {
                // Names are global: made before by this project (readable
                // here), or someone else's.
                self.call(
                    "buckets.get",
                    "GET",
                    &format!("/storage/v1/b/{}", encode(bucket)),
                    None,
                )
                .await
                .map(drop)
                .map_err(|_| e)
            }
            other => other.map(drop),
        }
    }

    /// The objects of `bucket` whose names start with `prefix`, in name
    /// order, at most `pages` pages of 1,000; `None` when there is no
    /// such bucket.
    pub async fn list_under(
        &self,
        bucket: &str,
        prefix: &str,
        pages: usize,
    ) -> Result<Option<Vec<Object>>, Error> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..pages {
            let Some((objects, next)) = self.page(bucket, prefix, token.as_deref(), PAGE).await?
            else {
                return Ok(None);
            };
            out.extend(objects);
            match next {
                Some(t) => token = Some(t),
                None => return Ok(Some(out)),
            }
        }
        Err(Error::Response {
            service: "GCS",
            action: "objects.list".into(),
            why: format!("more than {} objects", pages * PAGE),
        })
    }

    /// The first object whose name starts with `prefix`: `Some(None)`
    /// when there is none, `None` when there is no such bucket.
    pub async fn first_under(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Option<Option<Object>>, Error> {
        let page = self.page(bucket, prefix, None, 1).await?;
        Ok(page.map(|(objects, _)| objects.into_iter().next()))
    }

    /// The first page (up to 1,000 objects) under `prefix`; `None` when
    /// there is no such bucket.
    pub async fn first_page(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Option<Vec<Object>>, Error> {
        let page = self.page(bucket, prefix, None, PAGE).await?;
        Ok(page.map(|(objects, _)| objects))
    }

    /// One page of `objects.list`, and the next page's token.
    async fn page(
        &self,
        bucket: &str,
        prefix: &str,
        token: Option<&str>,
        max: usize,
    ) -> Result<Option<(Vec<Object>, Option<String>)>, Error> {
        let mut path = format!(
            "/storage/v1/b/{}/o?maxResults={max}&fields={}",
            encode(bucket),
            encode("items(name,size,generation),nextPageToken")
        );
        if !prefix.is_empty() {
            path.push_str(&format!("&prefix={}", encode(prefix)));
        }
        if let Some(t) = token {
            path.push_str(&format!("&pageToken={}", encode(t)));
        }
        let text = match self.call("objects.list", "GET", &path, None).await {
            Err(e) if e.code() == Some("notFound") => return Ok(None),
            other => other?,
        };
        let bad = |why: String| Error::Response {
            service: "GCS",
            action: "objects.list".into(),
            why,
        };
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let mut objects = Vec::new();
        for item in v["items"].as_array().into_iter().flatten() {
            let key = item["name"]
                .as_str()
                .ok_or_else(|| bad("an item without a name".into()))?;
            // The JSON API gives sizes as strings.
            let size = match &item["size"] {
                serde_json::Value::String(s) => s.parse().ok(),
                n => n.as_u64(),
            }
            .ok_or_else(|| bad(format!("`{key}` has no size")))?;
            objects.push(Object {
                key: key.to_owned(),
                size,
                version: match &item["generation"] {
                    serde_json::Value::String(g) => Some(g.clone()),
                    g => g.as_u64().map(|g| g.to_string()),
                },
            });
        }
        let next = v["nextPageToken"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        Ok(Some((objects, next)))
    }

    /// Downloads object `o` as listed into `to` (an existing file,
    /// truncated for each try): its generation as listed, or GCS refuses
    /// (`conditionNotMet`). Tried again while it fails for a while.
    pub async fn get_object(
        &self,
        bucket: &str,
        o: &Object,
        to: &std::path::Path,
    ) -> Result<(), Error> {
        let (key, size) = (o.key.as_str(), o.size);
        retry::retried(self.tuning.backoff, || async {
            let mut path = format!(
                "/storage/v1/b/{}/o/{}?alt=media",
                encode(bucket),
                encode(key)
            );
            if let Some(generation) = &o.version {
                path.push_str(&format!("&ifGenerationMatch={}", encode(generation)));
            }
            let req = self.request("GET", &path, empty(), None).await?;
            crate::objects::download(
                self.http.request(req),
                self.tuning.request_timeout,
                (key, size, to),
                |why| self.unreachable(why),
                |status, bytes| api_error("objects.get", status, bytes),
            )
            .await
        })
        .await
    }

    /// Uploads `bytes` bytes written by `source` as `key` (one request,
    /// streamed; written again for each try): GCS must keep that many
    /// bytes, or the upload fails.
    pub async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        bytes: u64,
        source: Source,
    ) -> Result<(), Error> {
        let text = if bytes == 0 {
            self.put_empty(bucket, key).await?
        } else {
            let path = format!(
                "/upload/storage/v1/b/{}/o?uploadType=media&name={}",
                encode(bucket),
                encode(key)
            );
            let limit =
                self.tuning.request_timeout + Duration::from_secs(bytes / SLOWEST_BYTES_PER_SEC);
            retry::retried(self.tuning.backoff, || async {
                let body = crate::objects::stream(source.clone());
                let mut req = self.request("POST", &path, body, Some(bytes)).await?;
                req.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/octet-stream"),
                );
                self.answer("objects.insert", req, limit).await
            })
            .await?
        };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let kept = match &v["size"] {
            serde_json::Value::String(s) => s.parse::<u64>().ok(),
            n => n.as_u64(),
        };
        if kept != Some(bytes) {
            return Err(Error::Response {
                service: "GCS",
                action: "objects.insert".into(),
                why: format!("`{key}` is {bytes} bytes, and GCS kept {kept:?}"),
            });
        }
        Ok(())
    }

    /// Makes the empty object `key` (a folder marker, an empty file):
    /// one multipart request that names it and holds no bytes, which
    /// every GCS server takes (the emulator refuses an empty media
    /// upload).
    async fn put_empty(&self, bucket: &str, key: &str) -> Result<String, Error> {
        const MULTIPART: &str = "multipart/related; boundary=skyc-empty-object";
        const BOUNDARY: &str = "skyc-empty-object";
        let path = format!(
            "/upload/storage/v1/b/{}/o?uploadType=multipart",
            encode(bucket)
        );
        let meta = serde_json::json!({ "name": key }).to_string();
        let body = Bytes::from(format!(
            "--{BOUNDARY}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n\
             --{BOUNDARY}\r\nContent-Type: application/octet-stream\r\n\r\n\r\n--{BOUNDARY}--\r\n"
        ));
        self.call("objects.insert", "POST", &path, Some((body, MULTIPART)))
            .await
    }

    /// Deletes one object (one already gone is deleted).
    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), Error> {
        let path = format!("/storage/v1/b/{}/o/{}", encode(bucket), encode(key));
        gone_is_done(self.call("objects.delete", "DELETE", &path, None).await)
    }

    /// Deletes an empty bucket (one already gone is deleted).
    pub async fn delete_bucket(&self, bucket: &str) -> Result<(), Error> {
        let path = format!("/storage/v1/b/{}", encode(bucket));
        gone_is_done(self.call("buckets.delete", "DELETE", &path, None).await)
    }

    /// A request with a body held in memory (its bytes and content type),
    /// retried when it fails for a while; the answer's text.
    async fn call(
        &self,
        action: &str,
        method: &str,
        path: &str,
        body: Option<(Bytes, &'static str)>,
    ) -> Result<String, Error> {
        let (bytes, content_type) = body.unwrap_or_default();
        retry::retried(self.tuning.backoff, || async {
            let len = bytes.len() as u64;
            let mut req = self
                .request(method, path, crate::objects::full(bytes.clone()), Some(len))
                .await?;
            if !content_type.is_empty() {
                req.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static(content_type),
                );
            }
            self.answer(action, req, self.tuning.request_timeout).await
        })
        .await
    }

    async fn answer(
        &self,
        action: &str,
        req: http::Request<Body>,
        limit: Duration,
    ) -> Result<String, Error> {
        let (status, bytes) = exchange(&self.http, req, limit, MAX_BODY, |why| {
            self.unreachable(why)
        })
        .await?;
        if (200..300).contains(&status) {
            return Ok(String::from_utf8_lossy(&bytes).into_owned());
        }
        Err(api_error(action, status, &bytes))
    }

    async fn request(
        &self,
        method: &str,
        path: &str,
        body: Body,
        len: Option<u64>,
    ) -> Result<http::Request<Body>, Error> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.endpoint))
            .header(
                http::header::USER_AGENT,
                concat!("skyc/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(n) = len {
            req = req.header(http::header::CONTENT_LENGTH, n);
        }
        if let Some(t) = self.bearer().await? {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        req.body(body)
            .map_err(|e| Error::Request(format!("{method} {path}: {e}")))
    }

    fn unreachable(&self, why: String) -> Error {
        Error::Unreachable {
            service: "GCS",
            endpoint: self.endpoint.clone(),
            why,
        }
    }
}

fn empty() -> Body {
    crate::objects::full(Bytes::new())
}

/// GCS's answer to a failed call: its error's first reason as the code
/// (`notFound`, `forbidden`, `conflict`, ...). Without GCS's error
/// document (a proxy's page) there is no code: a 404 is not taken for a
/// bucket gone.
fn api_error(action: &str, status: u16, body: &[u8]) -> Error {
    let text = String::from_utf8_lossy(body);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let e = &v["error"];
    let code = e["errors"][0]["reason"]
        .as_str()
        .map(str::to_owned)
        // The newer error shape: a status name alone.
        .or_else(|| {
            e["status"].as_str().map(|s| match s {
                "NOT_FOUND" => "notFound".to_owned(),
                "ALREADY_EXISTS" | "ABORTED" => "conflict".to_owned(),
                "PERMISSION_DENIED" => "forbidden".to_owned(),
                "UNAUTHENTICATED" => "unauthorized".to_owned(),
                "FAILED_PRECONDITION" => "conditionNotMet".to_owned(),
                other => other.to_owned(),
            })
        })
        // The emulator answers some errors with their code alone, or an
        // empty body: its status is its reason then.
        .or_else(|| match (e["code"].as_u64(), body.is_empty(), status) {
            (Some(404), ..) | (None, true, 404) => Some("notFound".to_owned()),
            (Some(409), ..) | (None, true, 409) => Some("conflict".to_owned()),
            _ => None,
        })
        .unwrap_or_default();
    let message = e["message"]
        .as_str()
        .map_or_else(|| text.chars().take(200).collect(), str::to_owned);
    Error::Api {
        service: "GCS",
        action: action.to_owned(),
        status,
        code,
        message,
        request_id: None,
    }
}

fn gone_is_done(result: Result<String, Error>) -> Result<(), Error> {
    match result {
        Err(e) if e.code() == Some("notFound") => Ok(()),
        other => other.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcs_errors_carry_their_reason() {
        let e = api_error(
            "objects.list",
            404,
            br#"{"error": {"code": 404, "message": "The specified bucket does not exist.",
                "errors": [{"reason": "notFound", "message": "x"}]}}"#,
        );
        assert_eq!(e.code(), Some("notFound"));
        assert!(
            e.to_string()
                .contains("The specified bucket does not exist.")
        );
        // A proxy's page is no bucket gone.
        let e = api_error("objects.list", 404, b"<html>not here</html>");
        assert_eq!(e.code(), Some(""));
        let e = api_error(
            "buckets.insert",
            409,
            br#"{"error": {"code": 409, "message": "taken"}}"#,
        );
        assert_eq!(e.code(), Some("conflict"));
        assert_eq!(api_error("objects.list", 404, b"").code(), Some("notFound"));
        let e = api_error(
            "objects.list",
            404,
            br#"{"error": {"code": 404, "status": "NOT_FOUND", "message": "gone"}}"#,
        );
        assert_eq!(e.code(), Some("notFound"));
        // GCS's rate limits are waited out, as S3's SlowDown is.
        let e = api_error(
            "objects.insert",
            403,
            br#"{"error": {"code": 403, "errors": [{"reason": "rateLimitExceeded"}]}}"#,
        );
        assert!(crate::aws::ec2::retry::is_transient(&e));
    }
}
