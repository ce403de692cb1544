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
//! A submission reaches the stores through one [`Buckets`]: S3 with the
//! submitting user's AWS configuration, Google Cloud Storage with their
//! Application Default Credentials; [`client`] gives both the same verbs.

pub mod client;
pub mod copy;
pub mod mount;
pub mod owned;
pub mod upload;

use crate::aws::credentials::Access;
use crate::aws::ec2::client::Tuning;
use crate::aws::s3::S3;
use crate::files::source::SourceError;
use crate::gcp::{self, gcs::Gcs};
pub use client::Reach;
pub use skyc_targets::storage::Store;

/// Why a bucket could not be copied or mounted.
#[derive(Debug)]
pub enum CopyError {
    /// No credentials, or a configuration they cannot be had from.
    NoCredentials(String),
    NoBucket,
    /// Nothing at the path (a bucket that has it would list it).
    Nothing,
    /// The store refused the credentials it was given.
    Denied(String),
    /// The bucket is in another region than the one asked.
    Region(String),
    /// A key that cannot be a path under the destination.
    Key(String),
    /// Two keys that would be one path (`a` and `a/b`).
    Collision(String, String),
    /// An object replaced between its listing and its download (its
    /// key; what the store said, when no key is known).
    Changed(String),
    /// The store could not be reached, or failed.
    Failed(String),
    TooLarge {
        limit: u64,
    },
    /// Writing the downloaded bytes failed (a full disk).
    Write(String),
    /// Writing the snapshot failed.
    Local(SourceError),
}

/// A submission's way to the stores: each store's credentials are asked
/// for once, on its first bucket.
#[derive(Default)]
pub struct Buckets {
    s3: Option<Result<S3Client, String>>,
    gcs: Option<Result<GcsClient, String>>,
    /// The endpoint and region to reach instead of the configured ones
    /// (a bucket's, where skyc made it).
    at: Option<(Option<String>, String)>,
}

struct S3Client {
    s3: S3,
    rt: tokio::runtime::Runtime,
    /// The configured S3 endpoint, which the nodes use too.
    endpoint: Option<String>,
}

struct GcsClient {
    gcs: Gcs,
    rt: tokio::runtime::Runtime,
}

impl Buckets {
    /// A way to the store at `endpoint` (`None`: the store's own; for
    /// GCS, an emulator's) in `region`, with the configured credentials.
    pub fn at(endpoint: Option<String>, region: String) -> Self {
        Self {
            at: Some((endpoint, region)),
            ..Self::default()
        }
    }

    /// `store`'s client, and the runtime its calls run on.
    fn reach(&mut self, store: Store) -> Result<(Reach<'_>, &tokio::runtime::Runtime), CopyError> {
        let at = self.at.clone();
        match store {
            Store::S3 => self
                .s3
                .get_or_insert_with(|| connect_s3(at))
                .as_ref()
                .map(|c| (Reach::S3(&c.s3), &c.rt))
                .map_err(|e| CopyError::NoCredentials(e.clone())),
            Store::Gcs => self
                .gcs
                .get_or_insert_with(|| connect_gcs(at))
                .as_ref()
                .map(|c| (Reach::Gcs(&c.gcs), &c.rt))
                .map_err(|e| CopyError::NoCredentials(e.clone())),
            Store::R2 | Store::Other => Err(CopyError::Failed(format!(
                "skyc does not reach {}:// buckets yet",
                store.scheme()
            ))),
        }
    }

    /// The endpoint the nodes reach `store` at, as this submission did:
    /// S3's configured one, the GCS emulator's; `None` is the store's
    /// own.
    fn endpoint(&self, store: Store) -> Option<String> {
        match store {
            Store::S3 => self
                .s3
                .as_ref()
                .and_then(|c| c.as_ref().ok())
                .and_then(|c| c.endpoint.clone()),
            Store::Gcs => self
                .gcs
                .as_ref()
                .and_then(|c| c.as_ref().ok())
                .and_then(|c| c.gcs.emulator().map(str::to_owned)),
            _ => None,
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the storage client: {e}"))
}

/// The S3 client of the submitting user's AWS configuration: the chain,
/// region and endpoint the AWS CLI and SDKs use (the endpoint and region
/// `at` when given).
fn connect_s3(at: Option<(Option<String>, String)>) -> Result<S3Client, String> {
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
    Ok(S3Client {
        s3,
        rt,
        endpoint: access.s3_endpoint,
    })
}

/// The GCS client of the submitting user's Application Default
/// Credentials (the emulator `at` names, or Google's own, when given).
fn connect_gcs(at: Option<(Option<String>, String)>) -> Result<GcsClient, String> {
    let access = match at {
        Some((endpoint, _)) => gcp::credentials::Access::at(endpoint)?,
        None => gcp::credentials::Access::from_env()?,
    };
    let rt = runtime()?;
    let gcs = rt.block_on(Gcs::connect(access, Tuning::default()))?;
    Ok(GcsClient { gcs, rt })
}
