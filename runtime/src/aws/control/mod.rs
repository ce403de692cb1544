//! AWS's side of the cloud control plane ([`crate::cloud::control`]):
//! [`ops`] carries out each operation on EC2, [`files`] is the run's
//! files' bucket on S3, and [`provider`] puts them together as the cloud
//! runtime's [`Provider`](crate::cloud::Provider).

pub mod files;
pub mod ops;
pub mod provider;
