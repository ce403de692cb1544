//! The EC2 client: a form-encoded POST per call, signed with SigV4, over
//! the HTTP/1.1 and TLS stack the Kubernetes client already brings
//! (hyper, rustls with the system's roots). Every try is bounded in time;
//! transient failures are retried with backoff (see [`crate::aws::ec2::retry`]).
//!
//! The operations the runtime needs are in [`crate::aws::control::ops`]; this is the
//! transport and the error model.

use crate::aws::ec2::config::{ConfigError, Settings};
use crate::aws::ec2::query;
use crate::aws::ec2::response;
use crate::aws::ec2::retry;
use crate::aws::ec2::sigv4::{self, Credentials};
use crate::reconciler::backoff::Backoff;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The largest answer read (DescribeInstances pages are asked small).
const MAX_BODY: usize = 16 << 20;

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The service answered with an error.
    Api {
        /// `EC2` or `S3`.
        service: &'static str,
        action: String,
        status: u16,
        code: String,
        message: String,
        request_id: Option<String>,
    },
    /// No answer: the connection failed, broke, or timed out.
    Unreachable {
        service: &'static str,
        endpoint: String,
        why: String,
    },
    /// An answer that is not what the API returns.
    Response {
        service: &'static str,
        action: String,
        why: String,
    },
    /// A request that cannot be sent as it is (its member, and why).
    Request(String),
}

impl Error {
    /// The API's error code, if EC2 answered.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Api {
                service,
                action,
                status,
                code,
                message,
                ..
            } => {
                write!(f, "{service} refused {action}: {code}")?;
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                write!(f, " (HTTP {status})")?;
                if retry::is_credentials(code) {
                    write!(
                        f,
                        "; check the AWS credentials (AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/credentials)"
                    )?;
                }
                Ok(())
            }
            Error::Unreachable {
                service,
                endpoint,
                why,
            } => {
                write!(f, "cannot reach the {service} endpoint {endpoint}: {why}")
            }
            Error::Response {
                service,
                action,
                why,
            } => {
                write!(f, "{service}'s answer to {action} cannot be read: {why}")
            }
            Error::Request(why) => write!(f, "cannot send {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// Time limits, so tests can run them fast.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    pub connect_timeout: Duration,
    /// One try, from sending to the last byte of the answer.
    pub request_timeout: Duration,
    pub backoff: Backoff,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            backoff: Backoff {
                first: Duration::from_millis(200),
                max: Duration::from_secs(20),
                tries: 6,
            },
        }
    }
}

pub(crate) type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// HTTP/1.1 over TLS with the system's roots (or plain HTTP, for an
/// endpoint on loopback), connecting within the tuning's time.
pub(crate) fn connector(tuning: &Tuning) -> Result<Https, SetupError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(tuning.connect_timeout));
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| SetupError::Tls(e.to_string()))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}

/// Which Query API a client calls: EC2 (a region's), or IAM (global).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Ec2,
    Iam,
}

impl Api {
    /// The name requests are signed for.
    fn signing_name(self) -> &'static str {
        match self {
            Api::Ec2 => "ec2",
            Api::Iam => "iam",
        }
    }

    /// The name messages give it.
    fn display(self) -> &'static str {
        match self {
            Api::Ec2 => "EC2",
            Api::Iam => "IAM",
        }
    }
}

/// A client of one region's EC2 endpoint (or of IAM's, [`Ec2::iam`]:
/// the same Query protocol).
#[derive(Clone)]
pub struct Ec2 {
    api: Api,
    /// `scheme://authority` (no trailing `/`), for messages.
    endpoint: String,
    uri: http::Uri,
    host: String,
    path: String,
    region: String,
    credentials: Credentials,
    http: HttpClient<Https, Full<Bytes>>,
    tuning: Tuning,
}

impl std::fmt::Debug for Ec2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ec2")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// EC2's own endpoint of a region.
pub fn default_endpoint(region: &str) -> String {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://ec2.{region}.{suffix}")
}

/// Why a client cannot be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetupError {
    Config(ConfigError),
    /// The endpoint is not an `http(s)://host[:port][/path]` URL.
    Endpoint(String),
    /// The system's TLS roots cannot be loaded.
    Tls(String),
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Config(e) => e.fmt(f),
            SetupError::Endpoint(why) => write!(f, "bad EC2 endpoint: {why}"),
            SetupError::Tls(why) => write!(f, "cannot load TLS root certificates: {why}"),
        }
    }
}

impl std::error::Error for SetupError {}

impl Ec2 {
    /// A client for `region` (the spec's; else the configured one) with
    /// the configured credentials and endpoint.
    pub fn new(
        settings: &Settings,
        region: Option<&str>,
        tuning: Tuning,
    ) -> Result<Ec2, SetupError> {
        let region = settings.region_or(region).map_err(SetupError::Config)?;
        let endpoint = settings
            .endpoint
            .clone()
            .unwrap_or_else(|| default_endpoint(&region));
        Self::of(Api::Ec2, settings, region, endpoint, tuning)
    }

    /// A client of IAM (global: signed for `us-east-1`, or for its
    /// partition's region in China and GovCloud), at `endpoint` when
    /// configured.
    pub fn iam(
        settings: &Settings,
        region: &str,
        endpoint: Option<&str>,
        tuning: Tuning,
    ) -> Result<Ec2, SetupError> {
        let (signing, own) = if region.starts_with("cn-") {
            ("cn-north-1", "https://iam.cn-north-1.amazonaws.com.cn")
        } else if region.starts_with("us-gov-") {
            ("us-gov-west-1", "https://iam.us-gov.amazonaws.com")
        } else {
            ("us-east-1", "https://iam.amazonaws.com")
        };
        let endpoint = endpoint.unwrap_or(own).to_owned();
        Self::of(Api::Iam, settings, signing.to_owned(), endpoint, tuning)
    }

    fn of(
        api: Api,
        settings: &Settings,
        region: String,
        endpoint: String,
        tuning: Tuning,
    ) -> Result<Ec2, SetupError> {
        let uri: http::Uri = endpoint
            .parse()
            .map_err(|e| SetupError::Endpoint(format!("`{endpoint}`: {e}")))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => {
                return Err(SetupError::Endpoint(format!(
                    "`{endpoint}` is not an http:// or https:// URL"
                )));
            }
        }
        let Some(authority) = uri.authority() else {
            return Err(SetupError::Endpoint(format!("`{endpoint}` has no host")));
        };
        let host = authority.as_str().to_owned();
        let path = match uri.path() {
            "" => "/".to_owned(),
            p => p.to_owned(),
        };
        let client = HttpClient::builder(TokioExecutor::new()).build(connector(&tuning)?);
        Ok(Ec2 {
            api,
            endpoint: format!("{}://{host}", uri.scheme_str().unwrap_or("https")),
            uri,
            host,
            path,
            region,
            credentials: settings.credentials.clone(),
            http: client,
            tuning,
        })
    }

    /// The same client, signing with `credentials` (renewed ones).
    pub fn with_credentials(&self, credentials: Credentials) -> Ec2 {
        Ec2 {
            credentials,
            ..self.clone()
        }
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Calls `params`' action (its first parameter) and returns the
    /// answer's text, retrying transient failures.
    pub async fn call(&self, params: &[(String, String)]) -> Result<String, Error> {
        retry::retried(self.tuning.backoff, || self.try_once(params)).await
    }

    async fn try_once(&self, params: &[(String, String)]) -> Result<String, Error> {
        let action = params
            .iter()
            .find(|(k, _)| k == "Action")
            .map_or("", |(_, v)| v.as_str())
            .to_owned();
        let body = query::form(params);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let amz_date = sigv4::amz_date(now);
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let signed = sigv4::sign(
            &sigv4::Request {
                method: "POST",
                host: &self.host,
                path: &self.path,
                query: &[],
                headers: &[("content-type", content_type)],
                body: body.as_bytes(),
            },
            sigv4::Scope {
                region: &self.region,
                service: self.api.signing_name(),
                amz_date: &amz_date,
            },
            &self.credentials,
        );
        let mut req = http::Request::post(self.uri.clone())
            .header(http::header::HOST, &self.host)
            .header(http::header::CONTENT_TYPE, content_type)
            .header(
                http::header::USER_AGENT,
                concat!("skyc/", env!("CARGO_PKG_VERSION")),
            );
        for (k, v) in &signed {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Error::Request(format!("{action}: {e}")))?;
        let (status, bytes) = exchange(
            &self.http,
            req,
            self.tuning.request_timeout,
            MAX_BODY,
            |why| Error::Unreachable {
                service: self.api.display(),
                endpoint: self.endpoint.clone(),
                why,
            },
        )
        .await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if (200..300).contains(&status) {
            return Ok(text);
        }
        match response::error(&text) {
            Some(e) => Err(Error::Api {
                service: self.api.display(),
                action,
                status,
                code: e.code,
                message: e.message,
                request_id: e.request_id,
            }),
            None => Err(Error::Api {
                service: self.api.display(),
                action,
                status,
                code: String::new(),
                message: text.chars().take(200).collect(),
                request_id: None,
            }),
        }
    }
}

/// Sends `req` and reads its answer, at most `max_body` bytes, all within
/// `limit`: its status and body. No answer (refused, broken off, too
/// slow) is `unreachable`'s error.
pub(crate) async fn exchange<B>(
    http: &HttpClient<Https, B>,
    req: http::Request<B>,
    limit: Duration,
    max_body: usize,
    unreachable: impl Fn(String) -> Error,
) -> Result<(u16, Bytes), Error>
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = Instant::now();
    let exchange = async {
        let resp = http
            .request(req)
            .await
            .map_err(|e| unreachable(root_cause(&e)))?;
        let status = resp.status().as_u16();
        let bytes = Limited::new(resp.into_body(), max_body)
            .collect()
            .await
            .map_err(|e| unreachable(format!("the answer broke off: {e}")))?
            .to_bytes();
        Ok::<_, Error>((status, bytes))
    };
    tokio::time::timeout(limit, exchange).await.map_err(|_| {
        unreachable(format!(
            "no answer within {} s",
            started.elapsed().as_secs()
        ))
    })?
}

/// The innermost cause of an error ("connection refused").
pub(crate) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let text = cause.to_string();
    if text.is_empty() { e.to_string() } else { text }
}
