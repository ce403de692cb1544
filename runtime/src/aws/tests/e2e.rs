//! The scenarios against AWS itself, when asked: `SKYC_AWS_E2E=1` with
//! credentials in the standard AWS configuration (the environment or a
//! profile; the region is the spec's). Otherwise they skip, loudly.
//!
//! They launch real instances (three of the cheapest 2-vCPU type of the
//! group's region, for a few minutes each, in the default VPC), and
//! terminate everything they made, and the security group, even when a
//! scenario fails. Run them one at a time to keep the count low:
//! `SKYC_AWS_E2E=1 cargo nextest run -p skyc-runtime -j 1 -E 'test(/aws::tests::e2e/)'`.

use super::scenarios::{self, Target};
use crate::aws::ec2::config::Settings;
use std::time::Duration;

/// The group on AWS: as `super::GROUP`, on small instances.
const SMALL_GROUP: &str = "\
name: skyc-e2e
execution: parallel
primary_tasks: [trainer]
termination_delay: 30s
---
name: trainer
num_nodes: 2
resources: {cpus: 2}
run: echo train
---
name: buffer
resources: {cpus: 2}
run: sleep 1000
";

fn aws() -> Option<Target> {
    if std::env::var("SKYC_AWS_E2E").as_deref() != Ok("1") {
        eprintln!("!!! SKIPPED: AWS end-to-end tests (set SKYC_AWS_E2E=1 and AWS credentials)");
        return None;
    }
    // The region only serves the credential sources that need one when
    // none is configured; the client works in the spec's.
    match Settings::from_env("us-east-1") {
        Ok(settings) => Some(Target {
            settings,
            group: SMALL_GROUP,
            poll: Duration::from_secs(5),
            deadline: Duration::from_secs(600),
            strict: false,
        }),
        Err(e) => {
            eprintln!("!!! SKIPPED: AWS end-to-end tests: {e}");
            None
        }
    }
}

macro_rules! on_aws {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let Some(t) = aws() else { return };
            t.run(stringify!($name), |t, p, ec2| Box::pin(scenarios::$name(t, p, ec2)));
        }
    )*};
}

on_aws!(
    launches_a_groups_instances_from_the_build,
    a_launch_repeated_is_one_instance,
    a_new_client_finds_the_run_again,
    auxiliaries_end_after_the_primaries_and_the_network_last,
    cancel_terminates_every_instance,
    an_instance_terminated_out_of_band_is_a_lost_node,
    an_instance_stopped_out_of_band_is_a_lost_node,
    refusals_are_clear,
    a_network_left_incomplete_is_completed,
    ssh_access_is_the_runs,
);
