//! The EC2 client, rather than the AWS SDK, which costs minutes of build
//! (docs/targets/cloud.md, "Running a spec on AWS"): [`config`] is what a
//! client is made with (found by [`crate::aws::credentials`]); [`query`] turns a request into the Query API's form
//! parameters, [`sigv4`] signs it, [`client`] sends it and [`response`]
//! reads EC2's XML answer; [`retry`] says which errors are asked again.

pub mod client;
pub mod config;
pub mod query;
pub mod response;
pub mod retry;
pub mod sigv4;
