//! Buckets in `file_mounts` (`skyc_targets::storage` reads them), as a
//! run reaches them:
//!
//! - [`copy`]: a bucket copied to the nodes, read once at submission
//!   into a snapshot that every target delivers like a local source;
//! - [`mount`]: a bucket mounted on the nodes, found (or made) at
//!   submission, mounted on each node by a FUSE client;
//! - [`owned`]: the buckets skyc made, recorded, listed and deleted;
//! - [`upload`]: a local source uploaded to its named bucket.
//!
//! A submission reaches S3 through one [`Buckets`], with the submitting
//! user's AWS configuration.

pub mod copy;
pub mod mount;
pub mod owned;
pub mod upload;

use crate::aws::credentials::Access;
use crate::aws::ec2::client::Tuning;
use crate::aws::s3::S3;
use crate::files::source::SourceError;

/// Why a bucket could not be copied or mounted.
#[derive(Debug)]
pub enum CopyError {
    /// No credentials, or a configuration they cannot be had from.
    NoCredentials(String),
    NoBucket,
    /// Nothing at the path (a bucket that has it would list it).
    Nothing,
    /// S3 refused the credentials it was given.
    Denied(String),
    /// The bucket is in another region than the one asked.
    Region(String),
    /// A key that cannot be a path under the destination.
    Key(String),
    /// Two keys that would be one path (`a` and `a/b`).
    Collision(String, String),
    /// S3 could not be reached, or failed.
    Failed(String),
    TooLarge {
        limit: u64,
    },
    /// Writing the downloaded bytes failed (a full disk).
    Write(String),
    /// Writing the snapshot failed.
    Local(SourceError),
}

/// A submission's way to S3: the credentials are asked for once, on the
/// first bucket.
#[derive(Default)]
pub struct Buckets {
    client: Option<Result<Client, String>>,
    /// The endpoint and region to reach instead of the configured ones
    /// (a bucket's, where skyc made it).
    at: Option<(Option<String>, String)>,
}

struct Client {
    s3: S3,
    rt: tokio::runtime::Runtime,
    /// The configured S3 endpoint, which the nodes use too.
    endpoint: Option<String>,
}

impl Buckets {
    /// A way to S3 at `endpoint` (`None`: AWS's own) in `region`, with
    /// the configured credentials.
    pub fn at(endpoint: Option<String>, region: String) -> Self {
        Self {
            client: None,
            at: Some((endpoint, region)),
        }
    }

    fn client(&mut self) -> Result<(&S3, &tokio::runtime::Runtime), CopyError> {
        let at = self.at.clone();
        self.client
            .get_or_insert_with(|| connect(at))
            .as_ref()
            .map(|c| (&c.s3, &c.rt))
            .map_err(|e| CopyError::NoCredentials(e.clone()))
    }

    fn endpoint(&self) -> Option<String> {
        self.client
            .as_ref()
            .and_then(|c| c.as_ref().ok())
            .and_then(|c| c.endpoint.clone())
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the S3 client: {e}"))
}

/// The S3 client of the submitting user's AWS configuration: the chain,
/// region and endpoint the AWS CLI and SDKs use (the endpoint and region
/// `at` when given).
fn connect(at: Option<(Option<String>, String)>) -> Result<Client, String> {
    let (mut access, chain) = Access::from_env().map_err(|e| e.to_string())?;
    let rt = runtime()?;
    let mut region = access.region.clone().unwrap_or_else(|| "us-east-1".into());
    if let Some((endpoint, r)) = at {
        access.s3_endpoint = endpoint;
        region = r;
    }
    let fetched = rt.block_on(chain.fetch(&access, &region))?;
    let s3 = S3::new(
        access.s3_endpoint.as_deref(),
        &region,
        fetched.credentials,
        Tuning::default(),
    )
    .map_err(|e| e.to_string())?;
    Ok(Client {
        s3,
        rt,
        endpoint: access.s3_endpoint,
    })
}
