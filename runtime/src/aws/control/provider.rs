//! AWS as the cloud runtime's [`Provider`]: EC2 for the run's instances
//! and network ([`super::ops`]), S3 for its files ([`super::files`]).

use super::files::{self, RunFiles};
use super::ops;
use crate::aws::ec2::client::{Ec2, Error};
use crate::aws::ec2::retry;
use crate::aws::plan::Plan;
use crate::cloud::Provider;
use crate::cloud::control::reconcile::Op;
use crate::cloud::run::Run;
use crate::cloud::world::World;

/// One run on EC2, with the clients of this pass.
pub struct Ec2Run<'a> {
    pub ec2: &'a Ec2,
    /// The run's S3 client, when a task has files.
    pub files: Option<&'a RunFiles>,
    pub plan: &'a Plan,
}

impl Provider for Ec2Run<'_> {
    type Error = Error;
    const COMPUTE: &'static str = "EC2";
    const STORE: &'static str = "S3";

    fn run(&self) -> Run<'_> {
        self.plan.as_run()
    }

    async fn world(&self) -> Result<World, Error> {
        let mut world = ops::world(self.ec2, self.plan).await?;
        match files::observe(self.files, self.plan).await {
            Ok(bucket) => world.bucket = bucket,
            Err(e) => world.bucket_unread = Some(e.to_string()),
        }
        Ok(world)
    }

    async fn apply(&self, world: &World, op: &Op) -> Result<bool, Error> {
        ops::apply(self.ec2, self.files, self.plan, world, op).await
    }

    /// No answer, or a 5xx that is not EC2's lack of capacity.
    fn is_outage(e: &Error) -> bool {
        match e {
            Error::Unreachable { .. } => true,
            Error::Api { status, code, .. } => *status >= 500 && !retry::is_capacity(code),
            _ => false,
        }
    }

    fn is_capacity(e: &Error) -> bool {
        e.code().is_some_and(retry::is_capacity)
    }
}
