//! The control plane's EC2 operations, each safe to repeat: what the
//! reconciler's [`Op`]s become, plus reading the run's [`World`].
//!
//! - The security group is found by the run's tag, else created under
//!   the run's name (a duplicate name means an earlier try created it:
//!   it is found by name), then given its ingress rules (a duplicate
//!   rule is the same rule).
//! - `RunInstances` carries the attempt's `ClientToken` and tags, so a
//!   launch repeated is the same launch.
//! - `TerminateInstances` of an instance already gone is done.
//! - With SSH access, the run's key pair is imported (a duplicate is the
//!   same key) and `tcp/22` opened to the runtime; the key pair goes
//!   with the security group.
//! - The security group is deleted once no instance uses it; EC2 answers
//!   `DependencyViolation` while one still shuts down, and the next pass
//!   tries again.

use crate::aws::control::files::RunFiles;
use crate::aws::ec2::client::{Ec2, Error};
use crate::aws::ec2::query;
use crate::aws::ec2::response::{self, Instance, SecurityGroup};
use crate::aws::plan::Plan;
use crate::cloud::control::reconcile::Op;
use crate::cloud::run::RUN_TAG;
use crate::cloud::world::{Network, READY_TAG, World};
use base64::Engine as _;

/// Page size of DescribeInstances (EC2 allows 5 to 1000).
const PAGE: &str = "200";

/// Pages read at most in one DescribeInstances (200 each): bounds memory
/// and time whatever the API answers.
const MAX_PAGES: usize = 100;

fn unreadable(action: &str, why: response::Unreadable) -> Error {
    Error::Response {
        service: "EC2",
        action: action.to_owned(),
        why: why.0,
    }
}

/// Every instance tagged with the run, in any state.
pub async fn instances(ec2: &Ec2, run: &str) -> Result<Vec<Instance>, Error> {
    instances_tagged(ec2, RUN_TAG, run).await
}

/// Every instance whose tag `key` is `value`, in any state.
pub async fn instances_tagged(ec2: &Ec2, key: &str, value: &str) -> Result<Vec<Instance>, Error> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut p = query::action("DescribeInstances");
        query::filters(&mut p, &[(&format!("tag:{key}"), &[value])]);
        p.push(("MaxResults".into(), PAGE.into()));
        if let Some(t) = &token {
            p.push(("NextToken".into(), t.clone()));
        }
        let body = ec2.call(&p).await?;
        let (page, next) =
            response::instances(&body).map_err(|e| unreadable("DescribeInstances", e))?;
        out.extend(page);
        match next {
            Some(t) => token = Some(t),
            None => return Ok(out),
        }
    }
    Err(Error::Response {
        service: "EC2",
        action: "DescribeInstances".into(),
        why: format!("more than {MAX_PAGES} pages"),
    })
}

async fn security_groups(ec2: &Ec2, filter: (&str, &str)) -> Result<Vec<SecurityGroup>, Error> {
    let mut p = query::action("DescribeSecurityGroups");
    query::filters(&mut p, &[(filter.0, &[filter.1])]);
    let body = ec2.call(&p).await?;
    let (groups, _) =
        response::security_groups(&body).map_err(|e| unreadable("DescribeSecurityGroups", e))?;
    Ok(groups)
}

/// The run's security group, found by its tag.
pub async fn find_network(ec2: &Ec2, plan: &Plan) -> Result<Option<Network>, Error> {
    let groups = security_groups(ec2, (&format!("tag:{RUN_TAG}"), &plan.run)).await?;
    Ok(groups
        .into_iter()
        .map(|g| Network {
            ready: g.tags.get(READY_TAG).is_some_and(|v| v == "ready"),
            id: g.id,
        })
        .min_by(|a, b| a.id.cmp(&b.id)))
}

/// The run's world: its instances and security group.
pub async fn world(ec2: &Ec2, plan: &Plan) -> Result<World, Error> {
    Ok(World {
        instances: instances(ec2, &plan.run).await?,
        network: find_network(ec2, plan).await?,
        // S3's part (`pass::world`).
        bucket: None,
        bucket_unread: None,
    })
}

async fn send(ec2: &Ec2, operation: &str, request: &serde_json::Value) -> Result<String, Error> {
    let params = query::serialize(operation, request).map_err(|e| Error::Request(e.to_string()))?;
    ec2.call(&params).await
}

/// Makes the run's security group (with its rules) and placement groups,
/// then marks it ready, and returns the group's id.
pub async fn ensure_network(ec2: &Ec2, plan: &Plan) -> Result<String, Error> {
    let id = match find_network(ec2, plan).await? {
        Some(Network { id, ready: true }) => return Ok(id),
        Some(Network { id, ready: false }) => id,
        None => match send(ec2, "CreateSecurityGroup", &plan.create_security_group()).await {
            Ok(body) => {
                response::group_id(&body).map_err(|e| unreadable("CreateSecurityGroup", e))?
            }
            Err(e) if e.code() == Some("InvalidGroup.Duplicate") => {
                let name = plan.security_group();
                security_groups(ec2, ("group-name", &name))
                    .await?
                    .into_iter()
                    .map(|g| g.id)
                    .min()
                    .ok_or(e)?
            }
            Err(e) => return Err(e),
        },
    };
    if let Some(rules) = plan.authorize_ingress(&id) {
        match send(ec2, "AuthorizeSecurityGroupIngress", &rules).await {
            Ok(_) => {}
            Err(e) if e.code() == Some("InvalidPermission.Duplicate") => {}
            Err(e) => return Err(e),
        }
    }
    for (_, request) in plan.placement_groups() {
        match send(ec2, "CreatePlacementGroup", &request).await {
            Ok(_) => {}
            Err(e) if e.code() == Some("InvalidPlacementGroup.Duplicate") => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(ssh) = &plan.ssh {
        let mut p = query::action("ImportKeyPair");
        p.push(("KeyName".into(), plan.key_pair()));
        p.push((
            "PublicKeyMaterial".into(),
            base64::engine::general_purpose::STANDARD.encode(ssh.public_key.trim()),
        ));
        p.push(("TagSpecification.1.ResourceType".into(), "key-pair".into()));
        p.push(("TagSpecification.1.Tag.1.Key".into(), RUN_TAG.into()));
        p.push(("TagSpecification.1.Tag.1.Value".into(), plan.run.clone()));
        match ec2.call(&p).await {
            Ok(_) => {}
            Err(e) if e.code() == Some("InvalidKeyPair.Duplicate") => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(rule) = plan.authorize_ssh(&id) {
        match send(ec2, "AuthorizeSecurityGroupIngress", &rule).await {
            Ok(_) => {}
            Err(e) if e.code() == Some("InvalidPermission.Duplicate") => {}
            Err(e) => return Err(e),
        }
    }
    let mut p = query::action("CreateTags");
    query::list(&mut p, "ResourceId", &[&id]);
    p.push(("Tag.1.Key".into(), READY_TAG.into()));
    p.push(("Tag.1.Value".into(), "ready".into()));
    ec2.call(&p).await?;
    Ok(id)
}

/// Launches one node's attempt in security group `sg`; returns its
/// instance (the same one, when the attempt was launched before).
pub async fn launch(
    ec2: &Ec2,
    plan: &Plan,
    task: usize,
    rank: u32,
    attempt: u32,
    sg: &str,
) -> Result<Instance, Error> {
    let request = plan.run_instances(task, rank, attempt, sg);
    let body = send(ec2, "RunInstances", &request).await?;
    let (mut list, _) = response::instances(&body).map_err(|e| unreadable("RunInstances", e))?;
    match list.len() {
        1 => Ok(list.remove(0)),
        n => Err(Error::Response {
            service: "EC2",
            action: "RunInstances".into(),
            why: format!("{n} instances for a request of one"),
        }),
    }
}

/// Terminates instances; one already gone is done.
pub async fn terminate(ec2: &Ec2, ids: &[String]) -> Result<(), Error> {
    // EC2 takes at most 1000 ids a call.
    for chunk in ids.chunks(1000) {
        let mut p = query::action("TerminateInstances");
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        query::list(&mut p, "InstanceId", &refs);
        match ec2.call(&p).await {
            Ok(_) => {}
            // One unknown id fails the whole call: the others one by one.
            Err(e) if e.code() == Some("InvalidInstanceID.NotFound") && chunk.len() > 1 => {
                for id in chunk {
                    let mut p = query::action("TerminateInstances");
                    query::list(&mut p, "InstanceId", &[id]);
                    match ec2.call(&p).await {
                        Err(e) if e.code() != Some("InvalidInstanceID.NotFound") => return Err(e),
                        _ => {}
                    }
                }
            }
            Err(e) if e.code() == Some("InvalidInstanceID.NotFound") => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Deletes the run's security group and placement groups. `Ok(false)`
/// while an instance still holds them (EC2's `DependencyViolation`).
pub async fn delete_network(ec2: &Ec2, plan: &Plan, sg: &str) -> Result<bool, Error> {
    for (name, _) in plan.placement_groups() {
        let mut p = query::action("DeletePlacementGroup");
        p.push(("GroupName".into(), name));
        match ec2.call(&p).await {
            Ok(_) => {}
            Err(e) if e.code() == Some("InvalidPlacementGroup.Unknown") => {}
            Err(e) if e.code() == Some("InvalidPlacementGroup.InUse") => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    if plan.ssh.is_some() {
        // EC2 answers success for a key pair that is not there.
        let mut p = query::action("DeleteKeyPair");
        p.push(("KeyName".into(), plan.key_pair()));
        match ec2.call(&p).await {
            Ok(_) => {}
            Err(e) if e.code() == Some("InvalidKeyPair.NotFound") => {}
            Err(e) => return Err(e),
        }
    }
    let mut p = query::action("DeleteSecurityGroup");
    p.push(("GroupId".into(), sg.to_owned()));
    match ec2.call(&p).await {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some("InvalidGroup.NotFound") => Ok(true),
        Err(e) if e.code() == Some("DependencyViolation") => Ok(false),
        Err(e) => Err(e),
    }
}

fn no_files() -> Error {
    Error::Request("the run's files: the runtime was given no S3 client".into())
}

/// Carries out one reconciler operation on `world` (as read before it):
/// whether EC2 took it, so that the world changes (a security group still
/// in use is not deleted, a launch waits for its network).
pub async fn apply(
    ec2: &Ec2,
    files: Option<&RunFiles>,
    plan: &Plan,
    world: &World,
    op: &Op,
) -> Result<bool, Error> {
    match op {
        Op::UploadFiles => match (files, &plan.bucket) {
            (Some(f), Some(bucket)) => super::files::upload(f, bucket, world.bucket.as_deref())
                .await
                .map(|()| true),
            _ => Err(no_files()),
        },
        Op::DeleteFiles => match (files, &plan.bucket, &world.bucket) {
            (Some(f), Some(bucket), Some(keys)) => {
                super::files::delete(f, bucket, keys).await.map(|()| true)
            }
            (_, _, None) => Ok(false),
            _ => Err(no_files()),
        },
        Op::Terminate { ids } => terminate(ec2, ids).await.map(|()| true),
        Op::EnsureNetwork => ensure_network(ec2, plan).await.map(|_| true),
        Op::Launch {
            task,
            rank,
            attempt,
        } => {
            let Some(Network { id, ready: true }) = &world.network else {
                return Ok(false);
            };
            launch(ec2, plan, *task, *rank, *attempt, id)
                .await
                .map(|_| true)
        }
        Op::DeleteNetwork => match &world.network {
            Some(n) => delete_network(ec2, plan, &n.id).await,
            None => Ok(false),
        },
    }
}
