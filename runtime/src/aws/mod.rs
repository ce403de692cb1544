//! `skyc run --target aws`: a group's instances launched from the EC2
//! requests `skyc build --target aws` emits, found again by their tags,
//! and terminated when the engine says so.
//!
//! - [`config`]: credentials, region and endpoint as the AWS SDKs find
//!   them;
//! - [`sigv4`], [`query`], [`response`], [`client`], [`retry`]: a small
//!   EC2 client (the Query API, signed requests, XML answers) rather than
//!   the AWS SDK, which costs minutes of build (DESIGN.md, "AWS");

pub mod client;
pub mod config;
pub mod query;
pub mod response;
pub mod retry;
pub mod sigv4;
