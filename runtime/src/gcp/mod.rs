//! Google Cloud, as a run's buckets reach it: [`credentials`] found as
//! Google's libraries find them, and [`gcs`], the Cloud Storage client
//! (the S3 client's verbs, on the JSON API).

pub mod credentials;
pub mod gcs;
