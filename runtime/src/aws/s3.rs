//! The S3 client a run's files need, on the EC2 client's transport and
//! SigV4 ([`crate::aws::ec2`]): a bucket made, objects uploaded (streamed,
//! their SHA-256 signed, so S3 itself refuses bytes that are not the
//! announced ones), listed and deleted, the bucket deleted, and presigned
//! `GET` URLs the nodes fetch with and no credentials.
//!
//! AWS's own endpoint is addressed virtual-hosted style
//! (`https://BUCKET.s3.REGION.amazonaws.com/KEY`); a configured endpoint
//! (`AWS_ENDPOINT_URL_S3`, a stand-in) path style (`ENDPOINT/BUCKET/KEY`),
//! as the AWS SDKs do. Keys are URI-encoded a path segment at a time, as
//! SigV4 signs them for S3.
//!
//! Users' buckets are read too (`file_mounts` copied from S3): a listing
//! under a prefix, and objects downloaded to files.

use crate::aws::ec2::client::{Error, Https, SetupError, Tuning, connector, exchange};
use crate::aws::ec2::retry;
use crate::aws::ec2::sigv4::{self, Credentials};
use bytes::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// The largest answer read (a listing page is at most 1,000 keys).
const MAX_BODY: usize = 4 << 20;

/// The slowest upload waited for: a try of a body of N bytes sent may take
/// the tuning's request time plus N at this rate.
const SLOWEST_BYTES_PER_SEC: u64 = 256 << 10;

/// The largest object one `PutObject` takes (S3's limit).
pub const MAX_PUT_BYTES: u64 = 5 << 30;

/// SHA-256 of no bytes, as S3 wants a body-less request's signed.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

pub use crate::objects::{Body, Source};

/// A client of one region's S3.
#[derive(Clone)]
pub struct S3 {
    /// A configured endpoint (`scheme://authority`, any path prefix
    /// kept), addressed path style; `None` is AWS's own.
    endpoint: Option<(String, String, String)>,
    region: String,
    credentials: Credentials,
    http: HttpClient<Https, Body>,
    tuning: Tuning,
}

impl std::fmt::Debug for S3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// One object of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    pub key: String,
    pub size: u64,
    /// Its version as listed (S3's ETag, GCS's generation): a download
    /// asks for exactly it, so an object replaced since its listing is
    /// refused, not copied.
    pub version: Option<String>,
}

/// Where one request goes: `scheme`, `host[:port]` and the path.
struct Target {
    scheme: String,
    host: String,
    path: String,
}

impl S3 {
    /// A client of `region`, at `endpoint` when one is configured.
    pub fn new(
        endpoint: Option<&str>,
        region: &str,
        credentials: Credentials,
        tuning: Tuning,
    ) -> Result<S3, SetupError> {
        let endpoint = match endpoint {
            None => None,
            Some(e) => {
                let uri: http::Uri = e
                    .parse()
                    .map_err(|why| SetupError::Endpoint(format!("`{e}`: {why}")))?;
                let scheme = match uri.scheme_str() {
                    Some(s @ ("http" | "https")) => s.to_owned(),
                    _ => {
                        return Err(SetupError::Endpoint(format!(
                            "`{e}` is not an http:// or https:// URL"
                        )));
                    }
                };
                let Some(authority) = uri.authority() else {
                    return Err(SetupError::Endpoint(format!("`{e}` has no host")));
                };
                let prefix = uri.path().trim_end_matches('/').to_owned();
                Some((scheme, authority.as_str().to_owned(), prefix))
            }
        };
        Ok(S3 {
            endpoint,
            region: region.to_owned(),
            credentials,
            http: HttpClient::builder(TokioExecutor::new()).build(connector(&tuning)?),
            tuning,
        })
    }

    /// The same client, signing with `credentials` (renewed ones).
    pub fn with_credentials(&self, credentials: Credentials) -> S3 {
        S3 {
            credentials,
            ..self.clone()
        }
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    fn target(&self, bucket: &str, key: Option<&str>) -> Target {
        let key = key
            .unwrap_or("")
            .split('/')
            .map(sigv4::encode)
            .collect::<Vec<_>>()
            .join("/");
        match &self.endpoint {
            Some((scheme, host, prefix)) => Target {
                scheme: scheme.clone(),
                host: host.clone(),
                path: format!("{prefix}/{bucket}/{key}"),
            },
            None => {
                let suffix = if self.region.starts_with("cn-") {
                    "amazonaws.com.cn"
                } else {
                    "amazonaws.com"
                };
                // A name with a dot is not one label of S3's wildcard
                // certificate: addressed by path, as the SDKs do.
                if bucket.contains('.') {
                    return Target {
                        scheme: "https".into(),
                        host: format!("s3.{}.{suffix}", self.region),
                        path: format!("/{bucket}/{key}"),
                    };
                }
                Target {
                    scheme: "https".into(),
                    host: format!("{bucket}.s3.{}.{suffix}", self.region),
                    path: format!("/{key}"),
                }
            }
        }
    }

    fn scope<'a>(&'a self, amz_date: &'a str) -> sigv4::Scope<'a> {
        sigv4::Scope {
            region: &self.region,
            service: "s3",
            amz_date,
        }
    }

    /// A URL that `GET`s `key` with no credentials for `expires` from
    /// `now_secs` (Unix time). Pure.
    pub fn presign_get(&self, bucket: &str, key: &str, now_secs: i64, expires: Duration) -> String {
        let t = self.target(bucket, Some(key));
        let amz_date = sigv4::amz_date(now_secs);
        let query = sigv4::presign(
            &sigv4::Request {
                method: "GET",
                host: &t.host,
                path: &t.path,
                query: &[],
                headers: &[],
                body: b"",
            },
            self.scope(&amz_date),
            &self.credentials,
            expires.as_secs(),
        );
        format!("{}://{}{}?{query}", t.scheme, t.host, t.path)
    }

    /// Makes `bucket` in the client's region; one this account already
    /// owns is made.
    pub async fn create_bucket(&self, bucket: &str) -> Result<(), Error> {
        // us-east-1 is S3's default location, and refuses being named.
        let body = if self.region == "us-east-1" {
            String::new()
        } else {
            format!(
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                 <LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                self.region
            )
        };
        already_done(
            self.call("CreateBucket", "PUT", bucket, None, &[], body.into_bytes())
                .await,
            "BucketAlreadyOwnedByYou",
        )
    }

    /// Every object of `bucket`, or `None` when there is no such bucket.
    pub async fn list(&self, bucket: &str) -> Result<Option<Vec<Object>>, Error> {
        // Bounded whatever S3 answers: a run's bucket holds its snapshots.
        self.list_under(bucket, "", 100).await
    }

    /// The objects of `bucket` whose keys start with `prefix`, in key
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
            let Some(page) = self.page(bucket, prefix, token.as_deref(), None).await? else {
                return Ok(None);
            };
            out.extend(page.objects);
            match page.next {
                Some(t) => token = Some(t),
                None => return Ok(Some(out)),
            }
        }
        Err(Error::Response {
            service: "S3",
            action: "ListObjectsV2".into(),
            why: format!("more than {} objects", pages * 1000),
        })
    }

    /// The first object (in key order) whose key starts with `prefix`:
    /// `Some(None)` when there is none, `None` when there is no such
    /// bucket. One key asked for, however many match.
    pub async fn first_under(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Option<Option<Object>>, Error> {
        let page = self.page(bucket, prefix, None, Some("1")).await?;
        Ok(page.map(|p| p.objects.into_iter().next()))
    }

    /// The first page (up to 1,000 objects, in key order) of those whose
    /// keys start with `prefix`; `None` when there is no such bucket.
    pub async fn first_page(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Option<Vec<Object>>, Error> {
        let page = self.page(bucket, prefix, None, None).await?;
        Ok(page.map(|p| p.objects))
    }

    /// One page of `ListObjectsV2`, or `None` when there is no such
    /// bucket.
    async fn page(
        &self,
        bucket: &str,
        prefix: &str,
        token: Option<&str>,
        max_keys: Option<&str>,
    ) -> Result<Option<Listing>, Error> {
        // Keys come URL-encoded: XML cannot carry every byte a key may.
        let mut query = vec![("encoding-type", "url"), ("list-type", "2")];
        if let Some(n) = max_keys {
            query.push(("max-keys", n));
        }
        if !prefix.is_empty() {
            query.push(("prefix", prefix));
        }
        if let Some(t) = token {
            query.push(("continuation-token", t));
        }
        let body = match self
            .call("ListObjectsV2", "GET", bucket, None, &query, Vec::new())
            .await
        {
            Err(e) if e.code() == Some("NoSuchBucket") => return Ok(None),
            other => other?,
        };
        listing(&body).map(Some).map_err(|why| Error::Response {
            service: "S3",
            action: "ListObjectsV2".into(),
            why,
        })
    }

    /// Downloads object `o` as listed into `to` (an existing file,
    /// truncated for each try): fails when S3 sends other than its size,
    /// or when it is no longer the version listed (`PreconditionFailed`).
    /// Tried again while it fails for a while; a local write that fails is
    /// `Error::Request`.
    pub async fn get_object(
        &self,
        bucket: &str,
        o: &Object,
        to: &std::path::Path,
    ) -> Result<(), Error> {
        retry::retried(self.tuning.backoff, || self.get_once(bucket, o, to)).await
    }

    async fn get_once(&self, bucket: &str, o: &Object, to: &std::path::Path) -> Result<(), Error> {
        let (key, size) = (o.key.as_str(), o.size);
        let empty = crate::objects::full(Bytes::new());
        let (req, t) = self.request(
            "GetObject",
            "GET",
            bucket,
            Some(key),
            &[],
            (empty, 0, EMPTY_SHA256),
        )?;
        let mut req = req;
        if let Some(etag) = o
            .version
            .as_deref()
            .and_then(|e| http::HeaderValue::from_str(e).ok())
        {
            req.headers_mut().insert(http::header::IF_MATCH, etag);
        }
        let endpoint = format!("{}://{}", t.scheme, t.host);
        let http = &self.http;
        let fetch = http.request(req);
        crate::objects::download(
            fetch,
            self.tuning.request_timeout,
            (key, size, to),
            |why| Error::Unreachable {
                service: "S3",
                endpoint: endpoint.clone(),
                why,
            },
            |status, bytes| api_error("GetObject", status, bytes),
        )
        .await
    }

    /// Deletes one object (one already gone is deleted).
    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), Error> {
        already_done(
            self.call("DeleteObject", "DELETE", bucket, Some(key), &[], Vec::new())
                .await,
            "NoSuchBucket",
        )
    }

    /// Deletes an empty bucket (one already gone is deleted).
    pub async fn delete_bucket(&self, bucket: &str) -> Result<(), Error> {
        already_done(
            self.call("DeleteBucket", "DELETE", bucket, None, &[], Vec::new())
                .await,
            "NoSuchBucket",
        )
    }

    /// Uploads `bytes` bytes written by `source`, whose SHA-256 is
    /// `sha256` (hex): S3 keeps the object only if they are those bytes.
    /// The body is streamed from `source` (one chunk in memory at a time),
    /// written again for each try.
    pub async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        bytes: u64,
        sha256: &str,
        source: Source,
    ) -> Result<(), Error> {
        let backoff = self.tuning.backoff;
        let mut n = 0;
        loop {
            let body = crate::objects::stream(source.clone());
            match self
                .try_once(
                    "PutObject",
                    "PUT",
                    bucket,
                    Some(key),
                    &[],
                    (body, bytes, sha256),
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if retry::is_transient(&e) && n + 1 < backoff.tries.max(1) => {
                    tokio::time::sleep(backoff.jittered(n)).await;
                    n += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A request with a body held in memory, retried when it fails for a
    /// while.
    async fn call(
        &self,
        action: &str,
        method: &str,
        bucket: &str,
        key: Option<&str>,
        query: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<String, Error> {
        let sha256 = sigv4::hex(ring::digest::digest(&ring::digest::SHA256, &body).as_ref());
        let sha256 = if body.is_empty() {
            EMPTY_SHA256.to_owned()
        } else {
            sha256
        };
        let len = body.len() as u64;
        let body = Bytes::from(body);
        retry::retried(self.tuning.backoff, || {
            let full = crate::objects::full(body.clone());
            self.try_once(action, method, bucket, key, query, (full, len, &sha256))
        })
        .await
    }

    async fn try_once(
        &self,
        action: &str,
        method: &str,
        bucket: &str,
        key: Option<&str>,
        query: &[(&str, &str)],
        body: (Body, u64, &str),
    ) -> Result<String, Error> {
        let len = body.1;
        let (req, t) = self.request(action, method, bucket, key, query, body)?;
        let limit = self.tuning.request_timeout + Duration::from_secs(len / SLOWEST_BYTES_PER_SEC);
        let (status, bytes) =
            exchange(&self.http, req, limit, MAX_BODY, |why| Error::Unreachable {
                service: "S3",
                endpoint: format!("{}://{}", t.scheme, t.host),
                why,
            })
            .await?;
        if (200..300).contains(&status) {
            return Ok(String::from_utf8_lossy(&bytes).into_owned());
        }
        Err(api_error(action, status, &bytes))
    }

    /// The signed request, and where it goes.
    fn request(
        &self,
        action: &str,
        method: &str,
        bucket: &str,
        key: Option<&str>,
        query: &[(&str, &str)],
        (body, len, sha256): (Body, u64, &str),
    ) -> Result<(http::Request<Body>, Target), Error> {
        let t = self.target(bucket, key);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let amz_date = sigv4::amz_date(now);
        let signed = sigv4::sign_hashed(
            &sigv4::Request {
                method,
                host: &t.host,
                path: &t.path,
                query,
                headers: &[("x-amz-content-sha256", sha256)],
                body: b"",
            },
            self.scope(&amz_date),
            &self.credentials,
            sha256,
        );
        let mut uri = format!("{}://{}{}", t.scheme, t.host, t.path);
        if !query.is_empty() {
            uri.push('?');
            uri.push_str(
                &query
                    .iter()
                    .map(|(k, v)| format!("{}={}", sigv4::encode(k), sigv4::encode(v)))
                    .collect::<Vec<_>>()
                    .join("&"),
            );
        }
        let mut req = http::Request::builder()
            .method(method)
            .uri(&uri)
            .header(http::header::HOST, &t.host)
            .header(http::header::CONTENT_LENGTH, len)
            .header("x-amz-content-sha256", sha256)
            .header(
                http::header::USER_AGENT,
                concat!("skyc/", env!("CARGO_PKG_VERSION")),
            );
        for (k, v) in &signed {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(body)
            .map_err(|e| Error::Request(format!("{action}: {e}")))?;
        Ok((req, t))
    }
}

/// S3's answer to a failed call. Without S3's error document (a proxy's
/// page, a wrong endpoint) there is no code: a 404 is not taken for a
/// bucket gone.
fn api_error(action: &str, status: u16, body: &[u8]) -> Error {
    let text = String::from_utf8_lossy(body);
    let (code, message, request_id) =
        error(&text).unwrap_or_else(|| (String::new(), text.chars().take(200).collect(), None));
    Error::Api {
        service: "S3",
        action: action.to_owned(),
        status,
        code,
        message,
        request_id,
    }
}

/// A call's outcome, where S3's error `code` says it is already done (a
/// bucket made before, gone already).
fn already_done(result: Result<String, Error>, code: &str) -> Result<(), Error> {
    match result {
        Err(e) if e.code() == Some(code) => Ok(()),
        other => other.map(drop),
    }
}

/// A page of `ListObjectsV2`.
struct Listing {
    objects: Vec<Object>,
    next: Option<String>,
}

fn listing(xml: &str) -> Result<Listing, String> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| e.to_string())?;
    let root = doc.root_element();
    let text = |n: roxmltree::Node<'_, '_>, name: &str| {
        n.children()
            .find(|c| c.tag_name().name() == name)
            .and_then(|c| c.text())
            .map(str::to_owned)
    };
    let mut objects = Vec::new();
    for c in root
        .children()
        .filter(|c| c.tag_name().name() == "Contents")
    {
        let key = text(c, "Key").ok_or("a listed object has no Key")?;
        let key = decode(&key).ok_or("a listed Key is not URL-encoded UTF-8")?;
        let size = text(c, "Size")
            .and_then(|s| s.parse().ok())
            .ok_or("a listed object has no Size")?;
        objects.push(Object {
            key,
            size,
            version: text(c, "ETag"),
        });
    }
    let truncated = text(root, "IsTruncated").is_some_and(|t| t == "true");
    let next = if truncated {
        Some(text(root, "NextContinuationToken").ok_or("a truncated listing has no token")?)
    } else {
        None
    };
    Ok(Listing { objects, next })
}

/// A value `encoding-type=url` encoded: `%XX` bytes, `+` a space.
fn decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

/// S3's error document: code, message, request id.
fn error(xml: &str) -> Option<(String, String, Option<String>)> {
    let doc = roxmltree::Document::parse(xml).ok()?;
    let root = doc.root_element();
    if root.tag_name().name() != "Error" {
        return None;
    }
    let text = |name: &str| {
        root.children()
            .find(|c| c.tag_name().name() == name)
            .and_then(|c| c.text())
            .map(str::to_owned)
    };
    Some((
        text("Code").unwrap_or_default(),
        text("Message").unwrap_or_default(),
        text("RequestId"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(endpoint: Option<&str>, region: &str) -> S3 {
        S3::new(
            endpoint,
            region,
            Credentials {
                access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
                secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
                session_token: None,
            },
            Tuning::default(),
        )
        .unwrap()
    }

    #[test]
    fn aws_is_addressed_by_virtual_host_and_an_endpoint_by_path() {
        let aws = client(None, "eu-west-1").target("b-1", Some("k.tar"));
        assert_eq!(
            (aws.scheme.as_str(), aws.host.as_str(), aws.path.as_str()),
            ("https", "b-1.s3.eu-west-1.amazonaws.com", "/k.tar")
        );
        let cn = client(None, "cn-north-1").target("b", None);
        assert_eq!(cn.host, "b.s3.cn-north-1.amazonaws.com.cn");
        let moto = client(Some("http://169.254.77.1:5000/"), "us-east-1").target("b", Some("k"));
        assert_eq!(
            (moto.scheme.as_str(), moto.host.as_str(), moto.path.as_str()),
            ("http", "169.254.77.1:5000", "/b/k")
        );
        assert!(
            S3::new(
                Some("ftp://x"),
                "r",
                client(None, "r").credentials,
                Tuning::default()
            )
            .is_err()
        );
    }

    #[test]
    fn keys_are_encoded_a_segment_at_a_time_and_dotted_buckets_by_path() {
        let t = client(Some("http://127.0.0.1:9000"), "us-east-1")
            .target("b", Some("sub dir/ü+x%y.bin//z~_-."));
        assert_eq!(t.path, "/b/sub%20dir/%C3%BC%2Bx%25y.bin//z~_-.");
        let dotted = client(None, "eu-west-1").target("my.data", Some("k"));
        assert_eq!(
            (dotted.host.as_str(), dotted.path.as_str()),
            ("s3.eu-west-1.amazonaws.com", "/my.data/k")
        );
    }

    #[test]
    fn listed_keys_are_decoded() {
        let page = listing(
            "<ListBucketResult><Contents><Key>sub+dir/%C3%BC%2Bx.bin</Key><Size>3</Size>\
             </Contents><IsTruncated>false</IsTruncated></ListBucketResult>",
        )
        .unwrap();
        assert_eq!(page.objects[0].key, "sub dir/ü+x.bin");
        assert!(
            listing("<ListBucketResult><Contents><Key>%ZZ</Key><Size>1</Size></Contents></ListBucketResult>")
                .is_err()
        );
    }

    /// The URL S3's own example presigns (see `sigv4`'s tests), reached
    /// through the client's addressing.
    #[test]
    fn a_presigned_url_is_the_documented_one() {
        let s3 = client(None, "us-east-1");
        let url = s3.presign_get(
            "examplebucket",
            "test.txt",
            1_369_353_600,
            Duration::from_secs(86400),
        );
        assert!(url.starts_with("https://examplebucket.s3.us-east-1.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&"), "{url}");
        assert!(url.contains("&X-Amz-Expires=86400&"));
    }

    #[test]
    fn listings_and_errors_are_read() {
        let page = listing(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>b</Name><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents><Key>a.tar</Key><Size>10240</Size><ETag>"9b2cf535f27731c974343645a3985328"</ETag></Contents>
  <Contents><Key>b.tar</Key><Size>0</Size></Contents>
</ListBucketResult>"#,
        )
        .unwrap();
        assert_eq!(
            page.objects,
            vec![
                Object {
                    key: "a.tar".into(),
                    size: 10240,
                    version: Some("\"9b2cf535f27731c974343645a3985328\"".into()),
                },
                Object {
                    key: "b.tar".into(),
                    size: 0,
                    version: None,
                }
            ]
        );
        assert_eq!(
            page.next.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
        assert!(
            listing("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>")
                .is_err()
        );
        assert_eq!(
            error(
                "<Error><Code>NoSuchBucket</Code><Message>gone</Message><RequestId>r1</RequestId></Error>"
            ),
            Some(("NoSuchBucket".into(), "gone".into(), Some("r1".into())))
        );
        assert_eq!(error("<html/>"), None);
    }
}
