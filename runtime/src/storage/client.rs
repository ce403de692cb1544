//! One store's client, as copy, mount, upload and deletion use it: the
//! same verbs on S3 ([`crate::aws::s3`]) and Google Cloud Storage
//! ([`crate::gcp::gcs`]), each store's answer in its own words
//! ([`why`] reads both).

use super::CopyError;
use crate::aws::ec2::client::Error;
use crate::aws::s3::{Object, S3};
use crate::gcp::gcs::{DEFAULT_LOCATION, Gcs};
use crate::objects::Source;
use std::path::Path;

/// A store's client.
#[derive(Clone, Copy, Debug)]
pub enum Reach<'a> {
    S3(&'a S3),
    Gcs(&'a Gcs),
}

impl Reach<'_> {
    /// The region the client reaches (S3's); `None` for GCS, whose
    /// buckets are reached wherever they are.
    pub fn region(&self) -> Option<String> {
        match self {
            Reach::S3(s3) => Some(s3.region().to_owned()),
            Reach::Gcs(_) => None,
        }
    }

    /// Where a bucket it makes is: S3's region, GCS's location.
    pub fn made_in(&self) -> String {
        self.region().unwrap_or_else(|| DEFAULT_LOCATION.to_owned())
    }

    /// The objects under `prefix`, at most `pages` pages of 1,000; `None`
    /// when there is no such bucket.
    pub async fn list_under(
        &self,
        bucket: &str,
        prefix: &str,
        pages: usize,
    ) -> Result<Option<Vec<Object>>, Error> {
        match self {
            Reach::S3(s3) => s3.list_under(bucket, prefix, pages).await,
            Reach::Gcs(gcs) => gcs.list_under(bucket, prefix, pages).await,
        }
    }

    /// The first object under `prefix`: `Some(None)` when there is none,
    /// `None` when there is no such bucket.
    pub async fn first_under(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Option<Option<Object>>, Error> {
        match self {
            Reach::S3(s3) => s3.first_under(bucket, prefix).await,
            Reach::Gcs(gcs) => gcs.first_under(bucket, prefix).await,
        }
    }

    /// The first page of objects under `prefix`; `None` when there is no
    /// such bucket.
    pub async fn first_page(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Option<Vec<Object>>, Error> {
        match self {
            Reach::S3(s3) => s3.first_page(bucket, prefix).await,
            Reach::Gcs(gcs) => gcs.first_page(bucket, prefix).await,
        }
    }

    /// Downloads `o`, the version listed, into `to`.
    pub async fn get_object(&self, bucket: &str, o: &Object, to: &Path) -> Result<(), Error> {
        match self {
            Reach::S3(s3) => s3.get_object(bucket, o, to).await,
            Reach::Gcs(gcs) => gcs.get_object(bucket, o, to).await,
        }
    }

    /// Uploads `bytes` bytes of `source`, whose SHA-256 is `sha256`: S3
    /// checks the bytes against it, GCS their count.
    pub async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        bytes: u64,
        sha256: &str,
        source: Source,
    ) -> Result<(), Error> {
        match self {
            Reach::S3(s3) => s3.put_object(bucket, key, bytes, sha256, source).await,
            Reach::Gcs(gcs) => gcs.put_object(bucket, key, bytes, source).await,
        }
    }

    /// Makes `bucket` where [`Reach::made_in`] says; one this account
    /// already has is made.
    pub async fn create_bucket(&self, bucket: &str) -> Result<(), Error> {
        match self {
            Reach::S3(s3) => s3.create_bucket(bucket).await,
            Reach::Gcs(gcs) => gcs.create_bucket(bucket, DEFAULT_LOCATION).await,
        }
    }

    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), Error> {
        match self {
            Reach::S3(s3) => s3.delete_object(bucket, key).await,
            Reach::Gcs(gcs) => gcs.delete_object(bucket, key).await,
        }
    }

    pub async fn delete_bucket(&self, bucket: &str) -> Result<(), Error> {
        match self {
            Reach::S3(s3) => s3.delete_bucket(bucket).await,
            Reach::Gcs(gcs) => gcs.delete_bucket(bucket).await,
        }
    }
}

/// What a store's failed answer means for a bucket's reader.
pub fn why(e: Error) -> CopyError {
    match e.code() {
        Some(
            // S3's
            "AccessDenied"
            | "InvalidAccessKeyId"
            | "SignatureDoesNotMatch"
            | "ExpiredToken"
            | "InvalidToken"
            // GCS's
            | "forbidden"
            | "unauthorized"
            | "required"
            | "authError"
            | "accountDisabled"
            | "userProjectMissing",
        ) => CopyError::Denied(e.to_string()),
        Some(
            "PermanentRedirect"
            | "AuthorizationHeaderMalformed"
            | "IllegalLocationConstraintException",
        ) => CopyError::Region(e.to_string()),
        // An object replaced since it was listed.
        Some("PreconditionFailed" | "conditionNotMet") => CopyError::Changed(e.to_string()),
        _ => match &e {
            // GCS answers a token it does not take with 401 and no reason
            // some of the time.
            Error::Api { status: 401, .. } => CopyError::Denied(e.to_string()),
            _ => CopyError::Failed(e.to_string()),
        },
    }
}
