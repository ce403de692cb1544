//! Buckets in `file_mounts` (`skyc_targets::storage` reads them), as a
//! run reaches them:
//!
//! - [`copy`]: a bucket copied to the nodes, read once at submission
//!   into a snapshot that every target delivers like a local source.

pub mod copy;
